"""Where a savepoint may be written: a directory every process of the cluster reads alike.

A savepoint's state files are written by the tasks (each in its own process, perhaps started
from another working directory or on another host) and its ``_metadata`` by the JobManager.
A relative path means a different directory to each of them, and ``memory://`` is the memory
of one process: either way the savepoint's files end up where its ``_metadata`` does not look,
and it can never be restored. The client resolves a relative path once, against its own
working directory (Flink asks for a URI for the same reason); the JobManager refuses what is
still relative, and both refuse ``memory://``. Before it writes a savepoint's ``_metadata``, the
JobManager checks that every state file it lists is there (:func:`missing_state_files`), so that
a savepoint whose files went elsewhere fails instead of being reported complete.

>>> resolve_target("s3://bucket/savepoints")
's3://bucket/savepoints'
>>> resolve_target("/var/sp")
'/var/sp'
>>> try:
...     check_target("sp")
... except UsageError as e:
...     print(e.message)
savepoint directory 'sp' is a relative path: each process of the cluster would resolve it against its own working directory
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

from fsspec.utils import get_protocol

from flinkpy.checkpoint.metadata import handles
from flinkpy.errors import UsageError

if TYPE_CHECKING:
    from flinkpy.checkpoint.storage import CheckpointStorage

#: fsspec schemes whose files live in one process: nothing another process wrote is there
_PROCESS_LOCAL = frozenset({"memory"})


def _is_url(target: str) -> bool:
    return "://" in target


def check_target(target: str) -> str:
    """``target`` when every process of a cluster reads it alike; ``UsageError`` otherwise."""
    if get_protocol(target) in _PROCESS_LOCAL:
        raise UsageError(
            f"savepoint directory {target!r} is in one process's memory: the tasks write their state in their own processes, "
            "so that savepoint could never be restored",
            remedy="write savepoints to a directory or a shared file system URL (file://, s3://)",
        )
    if not _is_url(target) and not os.path.isabs(target):
        raise UsageError(
            f"savepoint directory {target!r} is a relative path: each process of the cluster would resolve it against its own working directory",
            remedy="pass an absolute path or a URL such as file:///srv/savepoints or s3://bucket/savepoints",
        )
    return target


def resolve_target(target: str) -> str:
    """The client's side: a relative path made absolute against this working directory (and
    ``~`` expanded), once, before the cluster sees it; then checked as :func:`check_target`."""
    if not _is_url(target):
        target = os.path.abspath(os.path.expanduser(target))
    return check_target(target)


def missing_state_files(storage: "CheckpointStorage", dir_url: str, doc: Mapping[str, Any]) -> list[str]:
    """What is wrong with the state files ``doc`` (a ``_metadata`` about to be written in
    ``dir_url``) lists: one line per file that is absent or of another size than its handle
    says; empty when all are in place. Sizes only: the checksums were taken as they were written."""
    problems: list[str] = []
    seen: set[str] = set()
    for _op, _sub, _kind, handle in handles(doc):
        files = [(f"{dir_url}/{handle['path']}", handle.get("size"))]
        files += [(shared["url"], shared.get("size")) for shared in handle.get("shared") or ()]
        for url, size in files:
            if url in seen:
                continue
            seen.add(url)
            fs, path = storage.filesystem(url)
            try:
                actual = fs.size(path)
            except (FileNotFoundError, IsADirectoryError):
                problems.append(f"{url}: state file is missing")
                continue
            if size is not None and actual != size:
                problems.append(f"{url}: {actual} bytes, its handle says {size}")
    return problems
