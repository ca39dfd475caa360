"""Savepoints on storage: listing them with their health, and keeping only the newest N.

Both work on files alone (any path or fsspec URL), no cluster needed. Retention is deliberately
narrow: only directories directly in the target directory whose `_metadata` says "savepoint"
of this very job are candidates; the savepoint just taken and the ones named as protected (the
one the job was restored from) are never disposed of, whatever their age.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from flinkpy.checkpoint.metadata import summarize
from flinkpy.checkpoint.retention import dispose_files
from flinkpy.checkpoint.storage import CheckpointStorage, storage_options
from flinkpy.network.rest_client import JsonObject
from flinkpy.client.restore_plan import Snapshot, find_snapshots


def _norm(url: str) -> str:
    """A URL or path reduced to the file system path, for comparing two spellings of one directory."""
    from fsspec.core import url_to_fs

    try:
        _, path = url_to_fs(url, **storage_options(url))
    except Exception:  # noqa: BLE001 - an unknown protocol: compare the spelling itself
        path = url
    return str(path).rstrip("/")


def snapshot_location(url: str) -> str:
    """A snapshot's directory as a file system path, however it is spelled: a URL or a path, to
    the directory or to its ``_metadata``, with or without a trailing slash.

    >>> snapshot_location("file:///c/job/chk-9/_metadata") == snapshot_location("/c/job/chk-9/")
    True
    """
    return _norm(url).removesuffix("/_metadata")


def _parent_url(url: str) -> str:
    head = url.rstrip("/").rpartition("/")[0]
    return head + "/" if head.endswith(":/") else head


def _completed(snap: Snapshot) -> tuple[int, int]:
    doc = snap.metadata or {}
    return int(doc.get("completion_timestamp") or 0), int(doc.get("checkpoint_id") or 0)


def prune_savepoints(location: str, job_id: str, keep: int, protect: Iterable[str | None] = ()) -> list[str]:
    """Dispose of ``job_id``'s savepoints next to ``location`` beyond the newest ``keep``;
    returns the paths disposed of, newest first."""
    target = _parent_url(location)
    here = _norm(location)
    keep_paths = {here, *(_norm(p) for p in protect if p)}
    mine = [
        s
        for s in find_snapshots(target, max_depth=2)
        if s.metadata is not None
        and s.metadata["kind"] == "savepoint"
        and s.metadata["job_id"] == job_id
        and _norm(_parent_url(s.path)) == _norm(target)
    ]
    mine.sort(key=_completed, reverse=True)
    # The one just made counts among the newest N even if a clock went backwards.
    newest = [s for s in mine if _norm(s.path) == here] + [s for s in mine if _norm(s.path) != here]
    deleted = []
    for snap in newest[keep:]:
        if _norm(snap.path) in keep_paths or snap.metadata is None:
            continue
        dispose_files(CheckpointStorage(snap.path), snap.path, snap.metadata)
        deleted.append(snap.path)
    return deleted


def list_snapshots(directory: str) -> list[JsonObject]:
    """Every checkpoint and savepoint under ``directory``, newest first, each verified (every
    referenced file present with its recorded size and checksum) as one row: path, kind, job
    id and name, checkpoint id, completion time, total size, parallelism per operator,
    restorable and its problems. A `_metadata` that cannot be read is a row that is not
    restorable, with its problem."""
    rows = []
    for snap in find_snapshots(directory):
        doc = snap.metadata
        if doc is None:
            rows.append(
                {"path": snap.path, "kind": None, "job_id": None, "job_name": None, "checkpoint_id": None, "completion_timestamp": None,
                 "total_size": None, "parallelism": {}, "restorable": False, "problems": [snap.problem]}
            )
            continue
        report = CheckpointStorage(snap.path).verify(snap.path)
        rows.append(
            {
                "path": snap.path,
                "kind": doc["kind"],
                "job_id": doc["job_id"],
                "job_name": doc["job_name"],
                "checkpoint_id": doc["checkpoint_id"],
                "completion_timestamp": doc["completion_timestamp"],
                "total_size": summarize(doc)["total_size"],
                "parallelism": {(op.get("uid") or op["name"] or op["operator_id"]): op["parallelism"] for op in doc["operators"]},
                "restorable": report.restorable,
                "problems": [str(p) for p in report.problems],
            }
        )
    rows.sort(key=lambda r: r["completion_timestamp"] or 0, reverse=True)
    return rows


@dataclass(frozen=True)
class PruneDecision:
    """What retention decided for one savepoint: kept (and why) or to be disposed of (and why)."""

    path: str
    job_id: str
    checkpoint_id: int
    completed_ms: int
    dispose: bool
    reason: str

    def to_dict(self) -> JsonObject:
        return dataclasses.asdict(self)


def prune_plan(snapshots: Iterable[Snapshot], *, keep: int | None, max_age_ms: int | None, now_ms: int,
               protected: Iterable[str] = ()) -> list[PruneDecision]:
    """Retention of the savepoints among ``snapshots``, per job, newest first: one is disposed of
    when it is beyond the newest ``keep`` or older than ``max_age_ms``; each job's newest
    savepoint, and every ``protected`` one (a job was started from it), is always kept.
    Checkpoints and unreadable snapshots are not savepoints: never touched.

    >>> sp = lambda n, t: Snapshot(f"/sp/s{n}", {"kind": "savepoint", "job_id": "j", "checkpoint_id": n, "completion_timestamp": t})
    >>> [(d.path, d.dispose) for d in prune_plan([sp(1, 100), sp(2, 200), sp(3, 300)], keep=1, max_age_ms=None, now_ms=400, protected=["/sp/s1"])]
    [('/sp/s3', False), ('/sp/s2', True), ('/sp/s1', False)]
    """
    keep_paths = {snapshot_location(p) for p in protected if p}
    by_job: dict[str, list[Snapshot]] = {}
    for snap in snapshots:
        if snap.metadata is not None and snap.metadata.get("kind") == "savepoint":
            by_job.setdefault(str(snap.metadata.get("job_id")), []).append(snap)
    decisions = []
    for job_id, snaps in sorted(by_job.items()):
        snaps.sort(key=_completed, reverse=True)
        for rank, snap in enumerate(snaps):
            completed_ms, checkpoint_id = _completed(snap)
            age = now_ms - completed_ms
            if _norm(snap.path) in keep_paths:
                dispose, reason = False, "a job was started from it"
            elif rank == 0:
                dispose, reason = False, "the job's newest savepoint"
            elif keep is not None and rank >= keep:
                dispose, reason = True, f"beyond the newest {keep}"
            elif max_age_ms is not None and age > max_age_ms:
                dispose, reason = True, f"older than {max_age_ms // 1000} s"
            else:
                dispose, reason = False, "within retention"
            decisions.append(PruneDecision(snap.path, job_id, checkpoint_id, completed_ms, dispose, reason))
    return decisions


def prune_directory(directory: str, *, keep: int | None, max_age_ms: int | None, now_ms: int, protected: Iterable[str] = (),
                    dry_run: bool = False) -> list[PruneDecision]:
    """Apply :func:`prune_plan` to the savepoints directly in ``directory``; with ``dry_run``
    only decide. Each disposal deletes its ``_metadata`` first, so none is left looking whole."""
    target = _norm(directory)
    found = [s for s in find_snapshots(directory, max_depth=2) if _norm(_parent_url(s.path)) == target]
    decisions = prune_plan(found, keep=keep, max_age_ms=max_age_ms, now_ms=now_ms, protected=protected)
    if not dry_run:
        metadata = {s.path: s.metadata for s in found}
        for d in decisions:
            if d.dispose and metadata.get(d.path) is not None:
                dispose_files(CheckpointStorage(d.path), d.path, metadata[d.path])  # type: ignore[arg-type]
    return decisions
