"""Disposing of savepoints (and, when asked, retained checkpoints): only the files they own.

A savepoint stays until it is disposed of, and disposing must never take more than the
savepoint: its directory may hold files someone else put there. So the `_metadata` goes first
(from then on the directory is no longer a savepoint, and a half-finished disposal is never
mistaken for a complete one), then exactly the state files `_metadata` references (and a Spark
savepoint's copied checkpoint location, listed in its "spark" section), then the directories
that this leaves empty.

>>> import tempfile
>>> from flinkpy.checkpoint.metadata import new_metadata
>>> storage = CheckpointStorage(tempfile.mkdtemp())
>>> url = storage.write_metadata("job1", 1, new_metadata(job_id="job1", job_name="demo",
...     checkpoint_id=1, trigger_timestamp=1, completion_timestamp=2, operators=[]))
>>> try:
...     dispose(storage.checkpoint_dir("job1", 1))
... except ConflictError as refused:
...     print(refused.message.split(" is ")[1])
a retained checkpoint (1 of job job1), not a savepoint
>>> dispose(storage.checkpoint_dir("job1", 1), force=True).files_deleted
0
>>> storage.list_checkpoints("job1")
[]
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from flinkpy.checkpoint.metadata import METADATA_FILE, handles
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.errors import ConflictError


@dataclass(frozen=True)
class Disposal:
    """What :func:`dispose` deleted: the snapshot's directory URL, its kind and ids, and how
    many state files (besides `_metadata`)."""

    path: str
    kind: str
    job_id: str
    checkpoint_id: int
    files_deleted: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "job_id": self.job_id, "checkpoint_id": self.checkpoint_id,
                "files_deleted": self.files_deleted}


def dispose(path: str, *, force: bool = False) -> Disposal:
    """Dispose of the savepoint at ``path`` (its directory, its `_metadata` or a URL of either).

    A retained checkpoint is refused (``ConflictError``) unless ``force``; a missing or
    unreadable `_metadata` raises what :meth:`CheckpointStorage.read_metadata` raises.
    """
    storage = CheckpointStorage(path)
    dir_url, _ = storage.locate(path)
    doc = storage.read_metadata(path)
    if doc["kind"] != "savepoint" and not force:
        raise ConflictError(
            f"{dir_url} is a retained checkpoint ({doc['checkpoint_id']} of job {doc['job_id']}), not a savepoint",
            remedy="pass --force to dispose of it anyway",
        )
    removed = dispose_files(storage, dir_url, doc)
    return Disposal(dir_url, doc["kind"], doc["job_id"], doc["checkpoint_id"], removed)


def dispose_files(storage: CheckpointStorage, dir_url: str, doc: dict[str, Any]) -> int:
    """Delete `_metadata`, then the files ``doc`` (that `_metadata`) references, then the
    directories left empty. Returns the number of state files deleted."""
    fs, root = storage.filesystem(dir_url)
    root = root.rstrip("/")
    fs.rm_file(f"{root}/{METADATA_FILE}")
    spark_files = {h["path"] for h in (doc.get("spark") or {}).get("files", [])}
    files = sorted({h["path"] for _op, _sub, _kind, h in handles(doc)} | spark_files)
    removed = 0
    for rel in files:
        try:
            fs.rm_file(f"{root}/{rel}")
            removed += 1
        except FileNotFoundError:
            pass
    # Sub-directories of state files, deepest first, then the savepoint directory: only when empty.
    dirs = sorted({posixpath.dirname(f"{root}/{rel}") for rel in files} | {root}, key=len, reverse=True)
    for d in dirs:
        if d != root and not d.startswith(root + "/"):
            continue
        try:
            fs.invalidate_cache()
            if fs.isdir(d) and not fs.ls(d, detail=False):
                fs.rmdir(d)
        except (FileNotFoundError, OSError):
            pass
    fs.invalidate_cache()
    return removed
