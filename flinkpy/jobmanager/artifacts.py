"""The JobManager's job artifacts: the archive of a job's Python files (Flink's BlobServer and
its permanent blobs).

A submission carries the archive (:mod:`flinkpy.program.archive`) inline, with its SHA-256.
:meth:`ArtifactStore.accept` checks and stores it and leaves only its reference in the
submission document, so what high availability keeps of the job stays small. It lives in
``<home>/blobs`` (cleared when a JobManager starts without HA: its jobs are gone) or, with high
availability, in ``high-availability.storageDir`` (``<storage>/<cluster-id>/blobs``), where the
next leader finds it when it recovers the job. TaskManagers fetch it over an authenticated RPC
connection of their own (:meth:`ArtifactStore.serve`); the job's end removes it here and tells
every TaskManager to drop its unpacked copy.

Layout: ``<root>/<job id>/python-files-<sha256>.zip``.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from typing import TYPE_CHECKING, Any

import fsspec

from flinkpy.errors import InvalidProgramError
from flinkpy.program.archive import verify
from flinkpy.protocol.deployment import ArtifactChunk, ArtifactUnavailable, FetchArtifact, JobArtifact, ReleaseJob

if TYPE_CHECKING:
    from flinkpy.jobmanager.taskmanager_registry import TaskManagerRegistry
    from flinkpy.network.connection import Connection

log = logging.getLogger("flinkpy.jobmanager")

#: the submission document's key for the archive: {"sha256", "size"[, "data" (base64)]}
DOCUMENT_KEY = "python_archive"
#: bytes per ArtifactChunk: control frames stay far below the frame limit
CHUNK = 1 << 20
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ArtifactStore:
    """Where one JobManager keeps its jobs' artifacts (any fsspec URL or local path)."""

    def __init__(self, root: str, *, fresh: bool = False) -> None:
        self.root = root.rstrip("/")
        if fresh:  # a JobManager without HA starts with no jobs: what is here belongs to none
            self._rm(self.root)

    def _path(self, job_id: str, sha256: str = "") -> str:
        if not _ID.fullmatch(job_id) or (sha256 and not _SHA256.fullmatch(sha256)):
            raise ValueError(f"not a job artifact: job {job_id!r}, sha256 {sha256!r}")
        return f"{self.root}/{job_id}" + (f"/python-files-{sha256}.zip" if sha256 else "")

    def accept(self, job_id: str, document: dict[str, Any]) -> JobArtifact | None:
        """Keep the archive a submission carries (checked against its checksum) and leave only
        its reference in ``document``; a recovered job's document holds the reference already."""
        spec = document.get(DOCUMENT_KEY)
        if not spec:
            return None
        try:
            sha256, size = str(spec["sha256"]), int(spec["size"])
            data = base64.b64decode(spec["data"], validate=True) if "data" in spec else None
            path = self._path(job_id, sha256)
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidProgramError(f"malformed job submission: {DOCUMENT_KEY}: {e}") from e
        if data is not None:
            verify(data, sha256, f"the Python files archive uploaded with job {job_id}")
            fs, fs_path = fsspec.core.url_to_fs(path)
            fs.makedirs(fs_path.rsplit("/", 1)[0], exist_ok=True)
            with fs.open(fs_path, "wb") as f:
                f.write(data)
            document[DOCUMENT_KEY] = {"sha256": sha256, "size": len(data)}
            log.info("job %s: stored its Python files archive (%d bytes, sha256 %s) at %s", job_id, len(data), sha256[:12], path)
        return JobArtifact(sha256=sha256, size=size)

    def read(self, job_id: str, sha256: str) -> bytes:
        """The archive's bytes (``OSError`` when it is gone, ``ValueError`` for a bad id)."""
        fs, path = fsspec.core.url_to_fs(self._path(job_id, sha256))
        with fs.open(path, "rb") as f:
            return f.read()

    def serve(self, conn: Connection, request: FetchArtifact) -> None:
        """Answer a TaskManager's fetch on its own connection: the artifact in chunks, or why not."""
        try:
            data = self.read(request.job_id, request.sha256)
        except (OSError, ValueError) as e:
            reason = f"the JobManager has no Python files archive {request.sha256[:12]}... of job {request.job_id} ({type(e).__name__}: {e})"
            log.warning("%s", reason)
            conn.send(ArtifactUnavailable(reason=reason))
            return
        for start in range(0, max(len(data), 1), CHUNK):
            conn.send(ArtifactChunk(data=data[start:start + CHUNK], last=start + CHUNK >= len(data)))

    def job_terminated(self, job_id: str, registry: TaskManagerRegistry) -> None:
        """The job ended for good: every TaskManager drops its copy; ours is removed (in the
        background: storage may be remote, and the caller holds the dispatcher's lock)."""
        for tm_id in list(registry.taskmanagers):
            registry.send(tm_id, ReleaseJob(job_id=job_id))
        try:
            path = self._path(job_id)
        except ValueError:
            return
        threading.Thread(target=self._rm, args=(path,), name=f"remove-artifacts-{job_id[:8]}", daemon=True).start()

    @staticmethod
    def _rm(path: str) -> None:
        fs, fs_path = fsspec.core.url_to_fs(path)
        try:
            if fs.exists(fs_path):
                fs.rm(fs_path, recursive=True)
        except OSError as e:
            log.warning("could not remove job artifacts at %s: %s", path, e)
