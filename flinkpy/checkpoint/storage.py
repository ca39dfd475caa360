"""Where checkpoints live: state files and `_metadata` on any fsspec file system.

Layout under the base URL (``execution.checkpointing.dir``)::

    <base>/<job_id>/chk-<n>/_metadata        the commit point, written last
    <base>/<job_id>/chk-<n>/<state files>    referred to by relative path from _metadata
    <dir>/savepoint-<jobid6>-<random>/       a savepoint (see ``savepoint_dir``)

A checkpoint is complete exactly when its `_metadata` exists, so every write is whole or
absent: on a local file system a file is written under a temporary name and renamed into
place (rename is atomic there); on object stores (``s3://``) and ``memory://`` one put is
already atomic — the object appears whole or not at all — while a rename would be a copy
and a delete, so it is never used as a commit there. Discarding deletes `_metadata` first,
so a half-deleted checkpoint is never mistaken for a complete one.

S3 options come from the environment: ``FLINKPY_S3_ENDPOINT_URL`` (e.g. a local MinIO or
moto server) plus the usual ``AWS_*`` credential variables that botocore reads itself.

>>> import tempfile
>>> storage = CheckpointStorage(tempfile.mkdtemp())
>>> h = storage.write_state("job1", 1, "op-0.keyed", b"abc")
>>> h["size"], h["checksum"][:7]
(3, 'sha256:')
>>> from flinkpy.checkpoint.metadata import new_metadata
>>> url = storage.write_metadata("job1", 1, new_metadata(job_id="job1", job_name="demo",
...     checkpoint_id=1, trigger_timestamp=1, completion_timestamp=2, operators=[]))
>>> storage.list_checkpoints("job1")
[1]
>>> storage.read_state(storage.checkpoint_dir("job1", 1), h)
b'abc'
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import posixpath
import re
import secrets
import uuid
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterable, Mapping

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import get_protocol

from flinkpy.checkpoint.metadata import CHECKSUM_FIELD, METADATA_FILE, CorruptCheckpointError, check_seal, handles, seal, unsealed_warning, validate
from flinkpy.errors import NotFoundError, UsageError
from flinkpy.files import fsync_directory, write_atomically

log = logging.getLogger("flinkpy.checkpoint")
_CHK = re.compile(r"^chk-(\d+)$")
_CHUNK = 1 << 20

#: `flinkpy fault storage-outage`: every write of this process fails until this epoch time (s).
#: Set per process (JobManager, TaskManager, task) by the fault's message; 0 means no outage.
_outage_until = 0.0


def set_outage(until_epoch_s: float) -> None:
    """Fail this process's checkpoint storage writes with an OSError until ``until_epoch_s``."""
    global _outage_until
    _outage_until = float(until_epoch_s)


def storage_options(url: str) -> dict[str, Any]:
    """fsspec storage options for ``url`` taken from the environment (empty for most schemes)."""
    if get_protocol(url) in ("s3", "s3a"):
        endpoint = os.environ.get("FLINKPY_S3_ENDPOINT_URL")
        if endpoint:
            return {"client_kwargs": {"endpoint_url": endpoint}}
    return {}


def savepoint_dir(target_dir: str, job_id: str, *, token: str | None = None) -> str:
    """The URL of a new savepoint directory under ``target_dir``: ``savepoint-<jobid6>-<random>``.

    ``token`` replaces the random part (tests pass one to get a known name).

    >>> savepoint_dir("s3://bkt/savepoints/", "3f2a9c0e11", token="abc123def456")
    's3://bkt/savepoints/savepoint-3f2a9c-abc123def456'
    """
    return f"{target_dir.rstrip('/')}/savepoint-{job_id[:6]}-{token or secrets.token_hex(6)}"


def checksum_of(data: bytes) -> str:
    """The checksum recorded in a state handle: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Problem:
    """One reason a checkpoint cannot be restored: the file at fault and what is wrong with it."""

    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "problem": self.problem}


@dataclass(frozen=True)
class VerifyReport:
    """What ``CheckpointStorage.verify`` found. ``restorable`` is true exactly when there are no problems."""

    path: str  #: the checkpoint directory URL
    metadata_path: str  #: its `_metadata` URL
    metadata: dict[str, Any] | None  #: the parsed document, None when it is unreadable
    files_checked: int
    bytes_checked: int
    problems: list[Problem]
    #: what is not a problem but limits the check (a `_metadata` without its own checksum)
    warnings: tuple[str, ...] = ()

    @property
    def restorable(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "metadata_path": self.metadata_path,
            "restorable": self.restorable,
            "job_id": self.metadata["job_id"] if self.metadata else None,
            "checkpoint_id": self.metadata["checkpoint_id"] if self.metadata else None,
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "problems": [p.to_dict() for p in self.problems],
            "warnings": list(self.warnings),
        }


def _parent(url: str) -> str:
    head, _, _ = url.rpartition("/")
    if not head:
        return "." if "/" not in url else "/"
    return head + "/" if head.endswith(":/") or head.endswith("://") else head


class CheckpointStorage:
    """Checkpoint and savepoint files under one base URL (any fsspec URL or a plain path).

    The methods that take a ``path`` or a directory URL (``read_metadata``, ``read_state``,
    ``verify``, ``discard_path``, ``write_state_in``, ``write_metadata_in``) accept any URL,
    not only ones under the base: that is how a savepoint elsewhere is read or written.

    The object is cheap and picklable (it holds URLs; file systems are opened on use), so the
    JobManager can ship it to task processes.
    """

    def __init__(self, base_url: str, *, storage_options: Mapping[str, Any] | None = None):
        if not base_url:
            raise UsageError("empty checkpoint storage URL", remedy="set execution.checkpointing.dir to a path or fsspec URL")
        self.base_url = base_url if base_url.endswith("://") else base_url.rstrip("/") or "/"
        self._options = dict(storage_options) if storage_options is not None else None

    def __repr__(self) -> str:
        return f"CheckpointStorage({self.base_url!r})"

    # ----------------------------------------------------------------- URLs and file systems

    def _fs(self, url: str) -> tuple[fsspec.AbstractFileSystem, str]:
        options = self._options if self._options is not None else storage_options(url)
        fs, path = fsspec.core.url_to_fs(url, **options)
        return fs, path

    @staticmethod
    def _fresh(fs: fsspec.AbstractFileSystem) -> fsspec.AbstractFileSystem:
        # s3fs caches listings; another process may have written or deleted since.
        fs.invalidate_cache()
        return fs

    def filesystem(self, url: str) -> tuple[fsspec.AbstractFileSystem, str]:
        """The file system holding ``url`` and the path in it, with listings not cached: for
        callers that walk or delete snapshot files themselves (retention, listings)."""
        fs, path = self._fs(url)
        return self._fresh(fs), path

    def job_dir(self, job_id: str) -> str:
        """URL of the directory holding a job's checkpoints."""
        return f"{self.base_url.rstrip('/')}/{job_id}"

    def shared_dir(self, job_id: str) -> str:
        """URL of the files incremental checkpoints of ``job_id`` share: ``<base>/<job_id>/shared``."""
        return f"{self.job_dir(job_id)}/shared"

    def checkpoint_dir(self, job_id: str, checkpoint_id: int) -> str:
        """URL of checkpoint ``checkpoint_id`` of ``job_id``: ``<base>/<job_id>/chk-<n>``."""
        return f"{self.job_dir(job_id)}/chk-{int(checkpoint_id)}"

    # ----------------------------------------------------------------- writing

    def write_state(self, job_id: str, checkpoint_id: int, name: str, data: bytes) -> dict[str, Any]:
        """Write one state file of a checkpoint atomically; return its handle for `_metadata`."""
        return self.write_state_in(self.checkpoint_dir(job_id, checkpoint_id), name, data)

    def write_metadata(self, job_id: str, checkpoint_id: int, doc: dict[str, Any]) -> str:
        """Commit a checkpoint: validate ``doc`` and write its `_metadata`, last and atomically."""
        return self.write_metadata_in(self.checkpoint_dir(job_id, checkpoint_id), doc)

    def write_state_in(self, directory: str, name: str, data: bytes) -> dict[str, Any]:
        """Write ``<directory>/<name>`` atomically; return ``{"path", "size", "checksum"}``.

        ``name`` may contain '/' (a sub-directory) but stays inside ``directory``.
        """
        if not name or name.startswith("/") or ".." in name.split("/") or name == METADATA_FILE:
            raise UsageError(f"invalid state file name {name!r}", remedy="use a relative name inside the checkpoint directory, not _metadata")
        self._put(f"{directory.rstrip('/')}/{name}", bytes(data))
        return {"path": name, "size": len(data), "checksum": checksum_of(data)}

    def write_state_stream(self, directory: str, name: str, produce: Callable[[IO[bytes]], Any]) -> tuple[dict[str, Any], Any]:
        """Like ``write_state_in``, for a state file ``produce(out)`` writes as a stream (never
        held in memory whole); return its handle and what ``produce`` returned."""
        if not name or name.startswith("/") or ".." in name.split("/") or name == METADATA_FILE:
            raise UsageError(f"invalid state file name {name!r}", remedy="use a relative name inside the checkpoint directory, not _metadata")
        url = f"{directory.rstrip('/')}/{name}"
        self._check_outage(url)
        fs, path = self._fs(url)
        local = isinstance(fs, LocalFileSystem)
        if local:
            os.makedirs(posixpath.dirname(path), exist_ok=True)
        target = f"{path}.tmp-{uuid.uuid4().hex}" if local else path
        raw = open(target, "wb") if local else fs.open(target, "wb")
        out = _HashingWriter(raw)
        try:
            result = produce(out)
            if local:
                raw.flush()
                os.fsync(raw.fileno())
            raw.close()
        except BaseException:
            if hasattr(raw, "discard"):
                raw.discard()  # an object store upload aborted: nothing becomes visible
            else:
                raw.close()
            if local:
                _unlink(target)
            raise
        if local:
            os.replace(target, path)
            fsync_directory(posixpath.dirname(path))
        return {"path": name, "size": out.size, "checksum": "sha256:" + out.digest.hexdigest()}, result

    def fetch_state(self, checkpoint_dir_url: str, handle: Mapping[str, Any], local_path: str) -> None:
        """Stream one state file to ``local_path``, checked against its handle on the way."""
        self._fetch_checked(f"{checkpoint_dir_url.rstrip('/')}/{handle['path']}", handle, local_path, "state file is missing")

    def write_shared(self, job_id: str, local_path: str, name: str) -> dict[str, Any]:
        """Upload a local store file into the job's ``shared/`` directory under a name no other
        upload takes; return its shared handle ``{"url", "size", "checksum"}`` (absolute URL:
        a checkpoint that claims another job's checkpoint references files in that job's
        ``shared/``). The file is streamed, never held in memory whole."""
        size, checksum = _hash_file(LocalFileSystem(), local_path)
        url = f"{self.shared_dir(job_id)}/{uuid.uuid4().hex}-{posixpath.basename(name)}"
        self._put_file(url, local_path)
        return {"url": url, "size": size, "checksum": checksum}

    def fetch_shared(self, handle: Mapping[str, Any], local_path: str) -> None:
        """Stream a shared file to ``local_path``, checking size and checksum on the way
        (CorruptCheckpointError, and no file left, if they do not match)."""
        self._fetch_checked(handle["url"], handle, local_path, "shared state file is missing")

    def _fetch_checked(self, url: str, handle: Mapping[str, Any], local_path: str, missing: str) -> None:
        fs, path = self._fs(url)
        digest, size = hashlib.sha256(), 0
        try:
            with self._fresh(fs).open(path, "rb") as src, open(local_path, "wb") as out:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
        except (FileNotFoundError, IsADirectoryError):
            _unlink(local_path)
            raise CorruptCheckpointError(url, missing) from None
        problem = _mismatch(handle, size, "sha256:" + digest.hexdigest())
        if problem:
            _unlink(local_path)
            raise CorruptCheckpointError(url, problem)

    def discard_files(self, urls: Iterable[str]) -> None:
        """Delete shared files (idempotent)."""
        for url in urls:
            fs, path = self._fs(url)
            try:
                fs.rm_file(path)
            except FileNotFoundError:
                pass

    def sweep_shared(self, job_id: str, keep: Iterable[str]) -> int:
        """Delete every file of the job's ``shared/`` directory not in ``keep``; return how many."""
        fs, shared = self._fs(self.shared_dir(job_id))
        self._fresh(fs)
        keep_paths = {self._fs(u)[1].rstrip("/") for u in keep}
        try:
            entries = fs.ls(shared, detail=False)
        except FileNotFoundError:
            return 0
        gone = 0
        for entry in entries:
            if entry.rstrip("/") not in keep_paths:
                try:
                    fs.rm_file(entry)
                    gone += 1
                except FileNotFoundError:
                    pass
        if not keep_paths:
            try:
                fs.rmdir(shared)
            except OSError:
                pass
        return gone

    def write_metadata_in(self, directory: str, doc: dict[str, Any]) -> str:
        """Validate ``doc`` and write ``<directory>/_metadata`` atomically; return its URL."""
        url = f"{directory.rstrip('/')}/{METADATA_FILE}"
        validate(doc, url)
        self._put(url, (json.dumps(seal(doc), indent=1, sort_keys=False) + "\n").encode())
        return url

    @staticmethod
    def _check_outage(url: str) -> None:
        if _outage_until:
            import time

            if time.time() < _outage_until:  # an injected fault, as a real outage would fail
                raise OSError(errno.EIO, f"checkpoint storage unavailable (injected storage outage for {_outage_until - time.time():.1f}s more)", url)

    def _put_file(self, url: str, local_path: str) -> None:
        """Like ``_put``, from a local file streamed in chunks (a temporary name and a rename on
        a local file system; one upload, visible whole or not at all, on object stores)."""
        self._check_outage(url)
        fs, path = self._fs(url)
        if not isinstance(fs, LocalFileSystem):
            fs.put_file(local_path, path)
            return
        directory = posixpath.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            with open(local_path, "rb") as src, open(tmp, "wb") as out:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            _unlink(tmp)
            raise
        fsync_directory(directory)

    def _put(self, url: str, data: bytes) -> None:
        self._check_outage(url)
        fs, path = self._fs(url)
        if isinstance(fs, LocalFileSystem):
            # Write aside, fsync, rename into place: readers see no file or the whole file.
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            write_atomically(path, data, durable=True)
        else:
            # One PUT: object stores (and memory://) make an object visible whole or not at all.
            fs.pipe_file(path, data)

    # ----------------------------------------------------------------- reading

    def locate(self, path: str) -> tuple[str, str]:
        """(checkpoint directory URL, `_metadata` URL) for a checkpoint's directory or `_metadata` path."""
        url = path if path.endswith("://") else path.rstrip("/") or "/"
        if posixpath.basename(url) == METADATA_FILE:
            return _parent(url), url
        fs, fs_path = self._fs(url)
        if self._fresh(fs).isfile(fs_path):
            return _parent(url), url
        return url, f"{url}/{METADATA_FILE}"

    def read_metadata(self, path: str) -> dict[str, Any]:
        """The validated `_metadata` of the checkpoint at ``path`` (its directory or `_metadata`).

        Raises ``NotFoundError`` (exit 4) when there is no complete checkpoint there — nothing
        at all, or a directory without `_metadata` — and ``CorruptCheckpointError`` (exit 9)
        when `_metadata` is truncated, not JSON, of another format or version, or lacks fields.
        """
        return self._read_metadata(*self.locate(path))

    def _read_metadata(self, dir_url: str, meta_url: str) -> dict[str, Any]:
        doc, sealed = self._read_sealed(dir_url, meta_url)
        if not sealed:
            log.warning("%s", unsealed_warning(meta_url))
        return doc

    def _read_sealed(self, dir_url: str, meta_url: str) -> tuple[dict[str, Any], bool]:
        """The document as it was written (its checksum checked, then left out), and whether it had one."""
        fs, meta_path = self._fs(meta_url)
        self._fresh(fs)
        try:
            raw = fs.cat_file(meta_path)
        except (FileNotFoundError, IsADirectoryError):
            _, dir_path = self._fs(dir_url)
            if fs.isdir(dir_path):
                raise NotFoundError(
                    f"{dir_url} is not a complete checkpoint: it has no {METADATA_FILE}",
                    remedy="the checkpoint was aborted or is still being written; use a completed one",
                ) from None
            raise NotFoundError(f"no checkpoint at {dir_url}", remedy="check the path; a checkpoint directory holds a _metadata file") from None
        if not raw.strip():
            raise CorruptCheckpointError(meta_url, f"empty file ({len(raw)} bytes): truncated")
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptCheckpointError(meta_url, f"truncated or not JSON ({len(raw)} bytes): {exc}") from None
        validate(doc, meta_url)  # first: a newer format version may seal differently
        sealed = check_seal(doc, meta_url)
        doc.pop(CHECKSUM_FIELD, None)
        return doc, sealed

    def read_state(self, checkpoint_dir_url: str, handle: Mapping[str, Any]) -> bytes:
        """The bytes of one state file, checked against the size and checksum in its handle.

        Raises ``CorruptCheckpointError`` naming the file, the recorded and the actual value.
        """
        return self._read_checked(f"{checkpoint_dir_url.rstrip('/')}/{handle['path']}", handle, "state file is missing")

    def _read_checked(self, url: str, handle: Mapping[str, Any], missing: str) -> bytes:
        fs, path = self._fs(url)
        try:
            data = self._fresh(fs).cat_file(path)
        except (FileNotFoundError, IsADirectoryError):
            raise CorruptCheckpointError(url, missing) from None
        problem = _mismatch(handle, len(data), checksum_of(data))
        if problem:
            raise CorruptCheckpointError(url, problem)
        return data

    # ----------------------------------------------------------------- listing and deleting

    def list_checkpoints(self, job_id: str) -> list[int]:
        """Ids of the job's complete checkpoints (those with `_metadata`), ascending."""
        fs, job_path = self._fs(self.job_dir(job_id))
        self._fresh(fs)
        try:
            entries = fs.ls(job_path, detail=False)
        except FileNotFoundError:
            return []
        ids = []
        for entry in entries:
            match = _CHK.match(posixpath.basename(entry.rstrip("/")))
            if match and fs.isfile(f"{entry.rstrip('/')}/{METADATA_FILE}"):
                ids.append(int(match.group(1)))
        return sorted(ids)

    def discard(self, job_id: str, checkpoint_id: int) -> None:
        """Delete a checkpoint's directory; discarding one that is gone is not an error."""
        self.discard_path(self.checkpoint_dir(job_id, checkpoint_id))

    def discard_path(self, url: str) -> None:
        """Delete the checkpoint or savepoint directory at ``url`` (idempotent), `_metadata` first."""
        fs, path = self._fs(url)
        self._fresh(fs)
        try:
            fs.rm_file(f"{path.rstrip('/')}/{METADATA_FILE}")
        except FileNotFoundError:
            pass
        try:
            fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
        self._fresh(fs)

    # ----------------------------------------------------------------- verification

    def verify(self, path: str) -> VerifyReport:
        """Check that the checkpoint at ``path`` is restorable, reading every file it references.

        Problems (bad `_metadata`, a missing file, a wrong size or checksum) are collected, not
        raised; ``NotFoundError`` is raised only when there is no checkpoint at ``path``.
        """
        dir_url, meta_url = self.locate(path)
        try:
            doc, sealed = self._read_sealed(dir_url, meta_url)
        except CorruptCheckpointError as exc:
            return VerifyReport(dir_url, meta_url, None, 0, 0, [Problem(exc.path, exc.problem)])
        warnings = () if sealed else (unsealed_warning(meta_url),)
        problems: list[Problem] = []
        files = bytes_read = 0
        seen: set[str] = set()
        for _op, _sub, _kind, handle in handles(doc):
            if handle["path"] in seen:
                continue
            seen.add(handle["path"])
            url = f"{dir_url}/{handle['path']}"
            fs, file_path = self._fs(url)
            try:
                size, checksum = _hash_file(self._fresh(fs), file_path)
            except (FileNotFoundError, IsADirectoryError):
                problems.append(Problem(url, "state file is missing"))
                continue
            files += 1
            bytes_read += size
            problem = _mismatch(handle, size, checksum)
            if problem:
                problems.append(Problem(url, problem))
            for shared in handle.get("shared") or ():
                if shared["url"] in seen:
                    continue
                seen.add(shared["url"])
                fs, file_path = self._fs(shared["url"])
                try:
                    size, checksum = _hash_file(self._fresh(fs), file_path)
                except (FileNotFoundError, IsADirectoryError):
                    problems.append(Problem(shared["url"], "shared state file is missing"))
                    continue
                files += 1
                bytes_read += size
                problem = _mismatch(shared, size, checksum)
                if problem:
                    problems.append(Problem(shared["url"], problem))
        return VerifyReport(dir_url, meta_url, doc, files, bytes_read, problems, warnings)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class _HashingWriter:
    """A binary writer that counts and hashes what passes through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.raw.write(data)


def _hash_file(fs: fsspec.AbstractFileSystem, path: str) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with fs.open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, "sha256:" + digest.hexdigest()


def _mismatch(handle: Mapping[str, Any], size: int, checksum: str) -> str | None:
    if size != handle["size"]:
        return f"size mismatch: _metadata records {handle['size']} bytes, the file has {size}"
    if checksum != handle["checksum"]:
        return f"checksum mismatch: _metadata records {handle['checksum']}, the file has {checksum}"
    return None
