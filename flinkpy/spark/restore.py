"""Where a Spark job starts from with ``flinkpy run --runner spark -s PATH``.

PATH is one of three things:

- a Spark savepoint (``savepoint-*`` with ``_metadata`` and ``"runner": "spark"``): its copy of
  the query's checkpoint location goes back in place, or, at another parallelism or with ``-n``,
  its engine layout of the state moves in (:mod:`flinkpy.spark.supervisor_snapshots`);
- a snapshot of the engine: its state moves in (:mod:`flinkpy.spark.state_move`);
- a Spark job's *retained checkpoint*: its checkpoint location ``<dir>/<job_id>/spark`` (what
  ``flinkpy checkpoint list JOB_ID`` shows as the latest completed checkpoint's path) or the job's
  directory ``<dir>/<job_id>`` above it. This is how a job whose driver was killed (the OOM
  killer, a lost node) comes back, as a Flink job comes back from its ``chk-N``: the location is
  copied into the new job's and the query goes on from its last committed batch. A batch whose
  offsets were logged but not committed (its sink output possibly written) is run again by
  Spark with the same batch id and records.

A resumed query keeps its *lineage*: Spark's query id (in the copied ``metadata``), by which
file sinks tell their part files apart, and the query name the exactly-once sinks fence by
(PostgreSQL's batch table, Kafka's transactional id and marker, Redis, Iceberg: see
:mod:`flinkpy.spark.sinks`), kept in ``<location>/flinkpy-query``. So the replayed batch's files
are rewritten, and a transactional sink that committed it skips it: nothing the killed driver
committed is written twice or lost. The old driver must be gone: a copy taken while it still
runs would fork the lineage.

Refused, each with one line: the checkpoint of a job whose driver still runs (exit 9), another
parallelism than the checkpoint's (Spark fixes its state partitions; exit 7), ``-n`` (a Spark
checkpoint restores all of its state or none; exit 2), a path that is neither a snapshot nor a
Spark checkpoint location, and a location with no committed batch (exit 4).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any

from flinkpy.clock import now_ms
from flinkpy.errors import ConflictError, NotFoundError, UsageError
from flinkpy.spark import control_registry as registry
from flinkpy.spark import supervisor_snapshots as snapshots

log = logging.getLogger("flinkpy.spark.restore")

#: the file in a checkpoint location that names the query the exactly-once sinks fence by
QUERY_NAME_FILE = "flinkpy-query"
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")


def query_name_of(job_id: str) -> str:
    """The query name of a job started afresh (or from a savepoint): ``flinkpy_<job_id>``."""
    return f"flinkpy_{job_id}"


def keep_query_name(location: str, name: str) -> None:
    """Record the query's name in its checkpoint location (before the query starts)."""
    os.makedirs(location, exist_ok=True)
    with open(os.path.join(location, QUERY_NAME_FILE), "w") as f:
        f.write(name)


@dataclass(frozen=True)
class RetainedCheckpoint:
    """A Spark job's checkpoint location, as ``run -s`` resumes it."""

    location: str
    #: the job it belongs to (the directory above ``spark/``), if its path says so
    job_id: str | None
    #: the last committed batch: the completed checkpoint the query goes on from
    batch_id: int
    #: the state partitions its query was started with (spark.sql.shuffle.partitions)
    shuffle_partitions: int | None
    #: the query name its exactly-once sinks fence by
    query_name: str
    #: when the last committed batch's commit was written (ms): the checkpoint's completion time
    completed_ms: int


def retained_checkpoint(path: str) -> RetainedCheckpoint | None:
    """The retained checkpoint at ``path`` (a checkpoint location or a job's directory holding
    one); None when ``path`` has a ``_metadata`` (a snapshot) or is no local directory.
    Raises NotFoundError for a directory that is neither, or a location with no committed batch."""
    from flinkpy.checkpoint.metadata import METADATA_FILE
    from flinkpy.spark.checkpoint_inspect import spark_location

    if "://" in path and not path.startswith("file://"):
        return None  # a snapshot in object storage (Spark's own locations are local)
    local = snapshots.local_path(path).rstrip("/") or "/"
    if not os.path.isdir(local) or os.path.exists(os.path.join(local, METADATA_FILE)):
        return None
    found = spark_location(local)  # the location itself, or the job's directory <dir>/<job_id> above it
    if found is None:
        raise NotFoundError(
            f"{path} is neither a savepoint or checkpoint (no _metadata) nor a Spark checkpoint location (no metadata and offsets/)",
            remedy="pass a savepoint directory, or the Spark checkpoint location 'flinkpy checkpoint list JOB_ID' shows",
        )
    local = found
    committed = snapshots.committed_batches(local)
    if not committed:
        raise NotFoundError(f"the Spark checkpoint location {local} has no committed batch: there is no completed checkpoint to resume",
                            remedy="start the job afresh without -s")
    parent = os.path.basename(os.path.dirname(local))
    job_id = parent if _JOB_ID.match(parent) else None
    try:
        with open(os.path.join(local, QUERY_NAME_FILE)) as f:
            name = f.read().strip()
    except FileNotFoundError:
        name = ""
    if not name and job_id is None:
        raise NotFoundError(f"the Spark checkpoint location {local} does not say which query it belongs to",
                            remedy="pass it at its place <execution.checkpointing.dir>/<job_id>/spark")
    completed_ms = int(os.stat(os.path.join(local, "commits", str(committed[-1]))).st_mtime * 1000)
    return RetainedCheckpoint(local, job_id, committed[-1], snapshots.shuffle_partitions_of(local),
                              name or query_name_of(job_id or ""), completed_ms)


def retained_checkpoints(directory: str, *, max_depth: int = 3) -> list[RetainedCheckpoint]:
    """Every Spark checkpoint location under the local ``directory`` (itself included, at most
    ``max_depth`` levels down: ``<dir>/<job_id>/spark`` is 2) that ``run -s`` could resume, by
    path. Snapshots (directories with a ``_metadata``; a Spark savepoint keeps a copy of its
    location inside) are not entered; a location with no committed batch, or that does not say
    which query it belongs to, is left out, as a ``chk-N`` without ``_metadata`` is."""
    from flinkpy.checkpoint.metadata import METADATA_FILE
    from flinkpy.spark.checkpoint_inspect import is_spark_checkpoint

    if "://" in directory and not directory.startswith("file://"):
        return []  # object storage holds snapshots, not Spark's locations
    root = snapshots.local_path(directory).rstrip("/") or "/"
    found = []
    for here, dirs, files in os.walk(root):
        depth = 0 if here == root else os.path.relpath(here, root).count(os.sep) + 1
        snapshot, location = METADATA_FILE in files, is_spark_checkpoint(here)
        if snapshot or location or depth >= max_depth:
            dirs.clear()
        if location and not snapshot:
            try:
                checkpoint = retained_checkpoint(here)
            except NotFoundError:
                continue
            if checkpoint is not None:
                found.append(checkpoint)
        dirs.sort()
    return found


def check_resume(checkpoint: RetainedCheckpoint, *, home: Any, shuffle_partitions: int, allow_non_restored_state: bool) -> None:
    """Refuse what cannot resume (see the module docstring); another parallelism as
    :func:`~flinkpy.spark.supervisor_snapshots.check_restore` refuses it for a savepoint that
    cannot move its state, but pointing to a savepoint (a checkpoint has no engine layout)."""
    where = checkpoint.location
    if allow_non_restored_state:
        raise UsageError(f"-n/--allow-non-restored-state: the Spark checkpoint {where} restores all of its query's state or none",
                         remedy="resume without -n; to leave state behind, stop the resumed job with a savepoint and restore that with -n")
    if checkpoint.job_id is not None:
        record = registry.read_record(home, checkpoint.job_id)
        if record is not None and record.get("alive"):
            raise ConflictError(
                f"job {checkpoint.job_id} still runs (its Spark driver, pid {record.get('pid')}, is alive): its checkpoint "
                f"{where} cannot be resumed beside it",
                remedy=f"stop it with a savepoint ('flinkpy stop {checkpoint.job_id}') and restore that, or cancel it first",
            )
    had = checkpoint.shuffle_partitions
    if had is not None and had != shuffle_partitions:
        raise snapshots.rescale_refused(
            f"Spark checkpoint {where}", had, shuffle_partitions, "",
            f"resume at -p {had}, stop the job with a savepoint ('flinkpy stop --savepoint-path DIR JOB_ID') and restore that")


def resume(checkpoint: RetainedCheckpoint, location: str, *, claim: bool = False) -> dict[str, Any]:
    """Copy the retained checkpoint into the new job's (empty) ``location`` (``claim``: move it
    there, so that nothing resumes it again), keeping its query name; the job's ``restored``
    document (Flink's latest restored checkpoint)."""
    if claim:
        snapshots.copy_location("file://" + checkpoint.location, location, move=True)
    else:
        snapshots.copy_location("file://" + checkpoint.location, location)
    keep_query_name(location, checkpoint.query_name)
    log.info("resumed the Spark checkpoint %s at batch %d (query %s)", checkpoint.location, checkpoint.batch_id, checkpoint.query_name)
    return {"id": checkpoint.batch_id, "is_savepoint": False, "external_path": checkpoint.location, "restore_timestamp": now_ms()}


@dataclass(frozen=True)
class Start:
    """Where a job restored with ``-s`` starts: Flink's latest restored checkpoint document, the
    supervisor's "restored" event's fields, and the query name it keeps (None: its own)."""

    restored: dict[str, Any]
    note: dict[str, Any]
    query_name: str | None = None


def start_from(path: str, *, plan: Any, location: str, home: Any, shuffle_partitions: int,
               allow_non_restored_state: bool, claim_mode: str | None = None) -> Start:
    """Restore ``path`` (see the module docstring) into the new job's checkpoint ``location``
    or, for the engine's layout of the state, into ``plan``, before its query first starts;
    ``claim_mode`` (execution.state-recovery.claim-mode) CLAIM moves a retained checkpoint."""
    checkpoint = retained_checkpoint(path)
    if checkpoint is not None:
        check_resume(checkpoint, home=home, shuffle_partitions=shuffle_partitions, allow_non_restored_state=allow_non_restored_state)
        restored = resume(checkpoint, location, claim=(claim_mode or "").upper() == "CLAIM")
        return Start(restored, {"from": checkpoint.location, "kind": "checkpoint", "batch": checkpoint.batch_id}, checkpoint.query_name)
    directory, doc = snapshots.read_snapshot(path)
    how = snapshots.ENGINE_LAYOUT
    if doc.get("runner") == snapshots.RUNNER:
        how = snapshots.check_restore(doc, shuffle_partitions=shuffle_partitions, where=directory,
                                      key_groups=plan.key_groups, allow_non_restored_state=allow_non_restored_state)
    if how == snapshots.SPARK_CHECKPOINT:
        snapshots.restore_savepoint(directory, doc, location)
        batch = doc["spark"]["batch_id"]
    else:  # the engine's layout of the state (an engine snapshot's own): it moves (flinkpy.spark.state_move)
        from flinkpy.spark import state_reading
        from flinkpy.spark.in_flight import in_flight_refusals
        from flinkpy.spark.state_move import SPARK, MovePlan, refuse

        refuse(MovePlan(SPARK, in_flight_refusals(doc)), where=directory)  # records the move would lose
        moved = state_reading.move_in(plan, directory, doc, allow_non_restored_state=allow_non_restored_state)
        log.info("moved the state of %s from the %s %s %s", ", ".join(moved) or "no operator",
                 "engine's" if doc.get("runner") != snapshots.RUNNER else "engine layout of the Spark", doc["kind"], directory)
        batch = None
    restored = {"id": doc["checkpoint_id"], "is_savepoint": doc["kind"] == "savepoint", "external_path": directory,
                "restore_timestamp": now_ms()}
    return Start(restored, {"from": directory, "kind": doc["kind"], "batch": batch})
