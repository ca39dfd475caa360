"""A job's checkpointing on the JobManager: the pure CheckpointCoordinator plus its I/O.

The coordinator decides (trigger, finalize, notify, discard, fail); this module carries the
decisions out: it sends triggers and notifications to tasks through the dispatcher, writes
``_metadata`` — the commit point — and deletes discarded checkpoints on a small thread pool so
that storage latency never blocks the JobManager's lock, and feeds the results back as events.
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.checkpoint.targets import missing_state_files
from flinkpy.clock import now_ms
from flinkpy.protocol import messages as msgs
from flinkpy.jobmanager.checkpoint_coordinator import (
    Abort,
    Action as CheckpointAction,
    CheckpointCoordinator,
    CheckpointingOptions,
    Discard,
    SweepShared,
    FailJob,
    Finalize,
    NotifyComplete,
    PendingCheckpoint,
    TriggerAtSources,
)
from flinkpy.jobmanager.savepoint_history import SavepointEntry, SavepointHistory, SavepointSchedule, SavepointTrigger
from flinkpy.jobmanager.savepoint_request import SavepointRequest, SavepointStatus

if TYPE_CHECKING:
    from flinkpy.checkpoint.storage import CheckpointStorage
    from flinkpy.jobmanager.execution_graph import Execution, ExecutionGraph
    from flinkpy.jobmanager.leadership import JobHa

log = logging.getLogger("flinkpy.checkpoints")


class SavepointIncompleteError(Exception):
    """A savepoint's state files are not all where its ``_metadata`` would point."""

_io = ThreadPoolExecutor(max_workers=4, thread_name_prefix="checkpoint-io")


class JobCheckpointing:
    def __init__(self, graph: "ExecutionGraph", options: CheckpointingOptions, checkpoint_dir: str, savepoint_dir: str,
                 schedule: SavepointSchedule | None = None):
        self.graph = graph
        self.options = options
        self.checkpoint_dir = checkpoint_dir
        tasks = list(graph.executions)
        sources = [k for k in tasks if graph.vertices[k[0]]["is_source"]]
        self.coordinator = CheckpointCoordinator(self.options, tasks, sources)
        self._storage: CheckpointStorage | None = None
        #: waiters for a triggered checkpoint's outcome (REST long polls)
        self.outcomes: dict[int, dict[str, Any]] = {}
        #: the metadata of completed checkpoints still retained, by id (what restarts restore)
        self.metadata_docs: dict[int, tuple[str, dict[str, Any]]] = {}
        #: a savepoint or retained checkpoint the job was submitted to start from: (dir, metadata)
        self.initial_restore: tuple[str, dict[str, Any]] | None = None
        #: savepoint requests by trigger id
        self.savepoints: dict[str, SavepointRequest] = {}
        #: manual checkpoint requests waiting for a free slot: periodic ones wait behind them
        self.manual_waiting = 0
        #: where savepoints go when the request names no directory
        self.savepoint_dir = savepoint_dir
        #: the job's completed savepoints, its periodic schedule and their retention
        self.history = SavepointHistory(schedule or SavepointSchedule.from_settings({}, "defaults"), now_ms())
        #: high availability: records checkpoint ids handed out and completed checkpoints in
        #: ZooKeeper (flinkpy.jobmanager.leadership.JobHa), or None
        self.ha: JobHa | None = None

    # -- savepoints ---------------------------------------------------------------------------

    def request_savepoint(self, target_dir: str | None, *, stop: bool, drain: bool, fmt: str, now: int,
                          trigger: SavepointTrigger | None = None) -> str:
        """Queue a savepoint (started at the next tick: a checkpoint in flight goes first)."""
        import uuid

        from flinkpy.errors import ConflictError

        busy = [t for t, r in self.savepoints.items() if r.status.is_open]
        if busy:
            raise ConflictError(
                f"a savepoint of job {self.graph.job_id} is already in progress (trigger {busy[0]})",
                remedy="wait for it ('flinkpy savepoint status'), or pass --if-busy wait",
            )
        trigger_id = uuid.uuid4().hex
        trigger = trigger or (SavepointTrigger.STOP if stop else SavepointTrigger.MANUAL)
        self.savepoints[trigger_id] = SavepointRequest(target_dir or self.savepoint_dir, stop, drain, fmt, now, trigger)
        return trigger_id

    def savepoint_in_progress(self) -> bool:
        return any(r.status.is_open for r in self.savepoints.values())

    def request_periodic_savepoint(self, now: int) -> None:
        """Queue the periodic savepoint the schedule says is due (the job runs, no savepoint is
        in progress: a busy period waits for it, then takes its turn)."""
        self.history.triggered(now)
        trigger_id = self.request_savepoint(None, stop=False, drain=False, fmt="canonical", now=now, trigger=SavepointTrigger.PERIODIC)
        log.info("job %s: periodic savepoint requested (trigger %s, every %d ms)", self.graph.job_id, trigger_id,
                 self.history.schedule.interval_ms)

    def protected_snapshots(self) -> list[str]:
        """What retention never disposes of: the snapshot the job was started from and the one
        a restart would restore from now."""
        point = self.latest_restore_point()
        return [p for p in (self.history.started_from, point[2] if point else None) if p]

    def _savepoint_completed(self, record: SavepointRequest, cid: int, now: int) -> None:
        """Under the dispatcher's lock, once the coordinator counts it complete: into the
        history, then retention of the periodic ones (their files deleted off the lock)."""
        from flinkpy.checkpoint.retention import dispose

        self.history.completed(SavepointEntry(cid, record.dir, now, record.trigger))
        for entry in self.history.expired(now, self.protected_snapshots()):
            self.coordinator.completed = [c for c in self.coordinator.completed if c.checkpoint_id != entry.checkpoint_id]
            self.metadata_docs.pop(entry.checkpoint_id, None)

            def remove(entry: SavepointEntry = entry) -> None:
                try:
                    dispose(entry.location)
                    log.info("job %s: disposed of periodic savepoint %d at %s (savepoint history retention)",
                             self.graph.job_id, entry.checkpoint_id, entry.location)
                except Exception as e:  # noqa: BLE001 - storage trouble leaves a savepoint behind, nothing worse
                    log.warning("job %s: could not dispose of savepoint %d at %s: %s", self.graph.job_id,
                                entry.checkpoint_id, entry.location, e)

            _io.submit(remove)

    def start_queued_savepoints(self, now: int) -> list[CheckpointAction]:
        from flinkpy.checkpoint.storage import savepoint_dir
        from flinkpy.jobmanager.checkpoint_coordinator import CheckpointTriggerRefused

        actions: list[CheckpointAction] = []
        for record in self.savepoints.values():
            if record.status is not SavepointStatus.QUEUED:
                continue
            try:
                cid, started = self.coordinator.trigger(now, kind="savepoint", reason="savepoint")
            except CheckpointTriggerRefused as e:
                if not e.busy or now - record.requested_ms > 60_000:
                    record.fail(f"the savepoint could not start: {e.message}")
                continue
            record.status, record.checkpoint_id = SavepointStatus.IN_PROGRESS, cid
            record.dir = savepoint_dir(record.target, self.graph.job_id)
            actions += started
        return actions

    def savepoint_of(self, checkpoint_id: int) -> SavepointRequest | None:
        return next((r for r in self.savepoints.values() if r.checkpoint_id == checkpoint_id), None)

    @property
    def storage(self) -> CheckpointStorage:
        if self._storage is None:
            from flinkpy.checkpoint.storage import CheckpointStorage

            self._storage = CheckpointStorage(self.checkpoint_dir)
        return self._storage

    @property
    def unaligned(self) -> bool:
        """Checkpoints (not savepoints) are unaligned: enabled, and exactly-once."""
        return self.options.unaligned and self.options.mode == "EXACTLY_ONCE"

    def was_unaligned(self, pending: PendingCheckpoint) -> bool:
        """Whether a checkpoint was unaligned: from the start, or because some subtask's
        alignment outlasted the aligned-checkpoint timeout and switched (its ack says so)."""
        if pending.kind != "checkpoint" or not self.unaligned:
            return False
        return self.options.aligned_timeout_ms == 0 or any(m.get("unaligned") for m in pending.metrics.values())

    @property
    def periodic(self) -> bool:
        return self.options.interval_ms is not None

    # -- metadata ----------------------------------------------------------------------------

    def metadata(self, pending: PendingCheckpoint, completion_ms: int) -> dict[str, Any]:
        g = self.graph
        operators = []
        for vid, v in g.vertices.items():
            for position, operator_id in enumerate(v.get("operator_ids") or []):
                subtasks = []
                for sub in range(v["parallelism"]):
                    state = pending.states.get((vid, sub), {})
                    entry: dict[str, Any] = next((p for p in state.get("state", []) if p.get("operator_id") == operator_id), {})
                    subtasks.append(
                        {
                            "subtask": sub,
                            "keyed_state": entry.get("keyed_state"),
                            "operator_state": entry.get("operator_state"),
                            "source_offsets": entry.get("source_offsets"),
                        }
                    )
                    if entry.get("channel_state"):
                        subtasks[-1]["channel_state"] = entry["channel_state"]
                operators.append(
                    {
                        "operator_id": operator_id,
                        "uid": (v.get("uids") or [None] * (position + 1))[position],
                        "name": (v.get("operator_names") or [""] * (position + 1))[position],
                        "vertex_id": vid,
                        "parallelism": v["parallelism"],
                        "max_parallelism": v["max_parallelism"],
                        "subtasks": subtasks,
                    }
                )
        return {
            "format": "flinkpy-checkpoint",
            "version": 1,
            "job_id": g.job_id,
            "job_name": g.name,
            "checkpoint_id": pending.checkpoint_id,
            "kind": pending.kind,
            "alignment": "unaligned" if self.was_unaligned(pending) else "aligned",
            "savepoint_format": "canonical" if pending.kind == "savepoint" else None,
            "trigger_timestamp": pending.trigger_ms,
            "completion_timestamp": completion_ms,
            "mode": self.options.mode,
            "max_parallelism": max((v["max_parallelism"] for v in g.vertices.values()), default=128),
            "operators": operators,
        }

    # -- carrying out actions ----------------------------------------------------------------

    def perform(self, actions: list[CheckpointAction], send: Callable[[Execution, msgs.TaskControl], None], events: Callable[[Callable[[], list[CheckpointAction]]], None], fail_job: Callable[[str], None]) -> None:
        """``send(execution, message)`` reaches a task; ``events(fn)`` later runs ``fn`` under the
        dispatcher's lock and performs the actions it returns; ``fail_job(reason)`` fails the job."""
        g = self.graph
        for a in actions:
            if isinstance(a, TriggerAtSources):
                if self.ha is not None and not self.ha.reserve(a.checkpoint_id):
                    continue  # fenced: no longer the leader; the checkpoint times out unheard
                log.info("Triggering checkpoint %d (type=%s) for job %s.", a.checkpoint_id, a.kind.upper(), g.job_id)
                # the final checkpoint's barriers are aligned: each must follow its channel's end
                # of data, so that every task snapshots after its operators ended their input
                unaligned = self.unaligned and a.kind == "checkpoint" and not a.final
                timed = unaligned and self.options.aligned_timeout_ms > 0
                barrier = msgs.CheckpointBarrier(a.checkpoint_id, a.timestamp, mode=a.mode, kind=a.kind,
                                                 unaligned=unaligned and not timed,
                                                 aligned_timeout_ms=self.options.aligned_timeout_ms if timed else 0, final=a.final)
                if a.kind == "checkpoint":
                    barrier = dataclasses.replace(barrier, base=self.coordinator.base_checkpoint_id)  # incremental snapshots build on it
                record = self.savepoint_of(a.checkpoint_id)
                if record is not None:
                    barrier = dataclasses.replace(barrier, directory=record.dir, stop=record.stop, drain=record.drain)
                for key in a.sources:
                    send(g.executions[key], msgs.TriggerCheckpoint(barrier))
            elif isinstance(a, Finalize):
                self._finalize(a.checkpoint, events)
            elif isinstance(a, NotifyComplete):
                for ex in g.executions.values():
                    if ex.state == "RUNNING":
                        send(ex, msgs.NotifyCheckpointComplete(a.checkpoint_id, final=a.final))
            elif isinstance(a, Abort):
                log.info("Checkpoint %d of job %s aborted: %s", a.checkpoint_id, g.job_id, a.reason)
                self.outcomes[a.checkpoint_id] = {"status": "FAILED", "reason": a.reason}
                record = self.savepoint_of(a.checkpoint_id)
                if record is not None and record.status is SavepointStatus.IN_PROGRESS:
                    record.fail(a.reason)
                for ex in g.executions.values():
                    if ex.state == "RUNNING":
                        send(ex, msgs.NotifyCheckpointAborted(a.checkpoint_id))
            elif isinstance(a, Discard):
                _io.submit(self._discard, a)
            elif isinstance(a, SweepShared):
                _io.submit(self._sweep_shared, a.keep)
            elif isinstance(a, FailJob):
                fail_job(a.reason)

    def _finalize(self, pending: PendingCheckpoint, events: Callable[[Callable[[], list[CheckpointAction]]], None]) -> None:
        cid = pending.checkpoint_id

        record = self.savepoint_of(cid)

        def write() -> None:
            completion = now_ms()
            try:
                doc = self.metadata(pending, completion)
                if record is not None:
                    doc["savepoint_format"] = record.format
                    missing = missing_state_files(self.storage, record.dir, doc)
                    if missing:
                        raise SavepointIncompleteError(f"{len(missing)} of its state files are not where its _metadata would say: {'; '.join(missing[:3])}")
                    path = self.storage.write_metadata_in(record.dir, doc)
                else:
                    path = self.storage.write_metadata(self.graph.job_id, cid, doc)
                if self.ha is not None:
                    directory = record.dir if record is not None else self.storage.checkpoint_dir(self.graph.job_id, cid)
                    self.ha.completed(cid, directory, self.options.retained)
            except SavepointIncompleteError as e:
                reason = f"savepoint {cid} of job {self.graph.job_id} is incomplete, so its _metadata was not written: {e}"
                log.warning(reason)
                record.fail(reason)
                events(lambda: self.coordinator.finalize_failed(cid, reason, now_ms()))
                return
            except Exception as e:  # noqa: BLE001 - storage errors fail the checkpoint, not the JobManager
                reason = f"writing the metadata of checkpoint {cid} failed: {type(e).__name__}: {e}"
                log.warning(reason)
                if record is not None:
                    record.fail(reason)
                events(lambda: self.coordinator.finalize_failed(cid, reason, now_ms()))
                return
            size = sum(m.get("state_size", 0) for m in pending.metrics.values())
            log.info(
                "Completed checkpoint %d for job %s (%d bytes, checkpointDuration=%d ms, finalizationTime=%d ms).",
                cid, self.graph.job_id, size, completion - pending.trigger_ms, now_ms() - completion,
            )
            self.outcomes[cid] = {"status": "COMPLETED", "external_path": path}
            directory = record.dir if record is not None else self.storage.checkpoint_dir(self.graph.job_id, cid)
            self.metadata_docs[cid] = (directory, doc)

            def completed() -> list[CheckpointAction]:
                actions = self.coordinator.finalized(cid, path, now_ms())
                if record is not None and any(c.checkpoint_id == cid for c in self.coordinator.completed):
                    record.status, record.location = SavepointStatus.COMPLETED, record.dir
                    log.info("Savepoint %d of job %s completed: %s", cid, self.graph.job_id, record.dir)
                    self._savepoint_completed(record, cid, completion)
                return actions

            events(completed)

        _io.submit(write)

    # -- restoring ---------------------------------------------------------------------------

    def latest_restore_point(self) -> tuple[int, str, str, dict[str, Any]] | None:
        """(checkpoint id, external path, directory, metadata) of the newest completed
        checkpoint or savepoint, else the one the job was started from."""
        latest = self.coordinator.latest_completed
        if latest is not None and latest.checkpoint_id in self.metadata_docs:
            directory, doc = self.metadata_docs[latest.checkpoint_id]
            return latest.checkpoint_id, latest.external_path, directory, doc
        if self.initial_restore is not None:
            directory, doc = self.initial_restore
            return int(doc.get("checkpoint_id", 0)), directory, directory, doc
        return None

    def restore_spec(self, ex: Execution) -> dict[str, Any] | None:
        from flinkpy.checkpoint.restore import restore_spec

        point = self.latest_restore_point()
        if point is None:
            return None
        _, _, directory, doc = point
        v = self.graph.vertices[ex.vertex_id]
        return restore_spec(
            doc, directory, list(v.get("operator_ids") or []),
            subtask=ex.subtask, parallelism=v["parallelism"], max_parallelism=v["max_parallelism"],
        )

    def _discard(self, a: Discard) -> None:
        self.metadata_docs.pop(a.checkpoint_id, None)
        try:
            if a.foreign:
                if a.external_path:
                    self.storage.discard_path(a.external_path)
            else:
                self.storage.discard(self.graph.job_id, a.checkpoint_id)
            self.storage.discard_files(a.shared)
        except Exception as e:  # noqa: BLE001
            log.warning("could not delete checkpoint %d of job %s: %s", a.checkpoint_id, self.graph.job_id, e)

    def _sweep_shared(self, keep: frozenset[str]) -> None:
        try:
            gone = self.storage.sweep_shared(self.graph.job_id, keep)
        except Exception as e:  # noqa: BLE001
            log.warning("could not clean the shared state of job %s: %s", self.graph.job_id, e)
            return
        if gone:
            log.info("job %s: deleted %d shared file(s) no checkpoint references", self.graph.job_id, gone)
