"""CheckpointCoordinator: when to checkpoint, when a checkpoint is done, when to give up.

A pure state machine, like the ExecutionGraph: events go in (a clock tick, an acknowledgement, a
decline, a source's input ended, a task finished, the metadata was written), actions come out (trigger checkpoint N at
the sources, write the metadata of N, notify completion, abort, discard files, fail the job). It
reads no clock and touches no file: ``now_ms`` is passed to every event, so timeouts, the minimum
pause and failure counting are tested with a manual clock.

The life of a checkpoint::

    trigger -> PendingCheckpoint --every task acked--> Finalize --finalized()--> CompletedCheckpoint
                      |                                    |
                      +-- decline / timeout / finalize_failed / subsumed / task finished --> aborted

Declines, timeouts and failed metadata writes of *checkpoints* count as failures: more than
``tolerable_failures`` of them in a row fail the job, and any completed checkpoint resets the
count. Savepoints are the operator's business: their failures are reported but never fail the
job, and they are neither subsumed nor discarded by retention. Once every source's input ended,
the next checkpoint is the job's final one (:mod:`flinkpy.jobmanager.final_checkpoint`).

>>> opts = CheckpointingOptions(interval_ms=1000)
>>> cc = CheckpointCoordinator(opts, tasks=[(1, 0), (2, 0)], sources=[(1, 0)])
>>> [type(a).__name__ for a in cc.tick(0)]
['TriggerAtSources']
>>> cc.acknowledge((1, 0), 1, {"offset": 5}, {"state_size": 10}, 40)
[]
>>> [type(a).__name__ for a in cc.acknowledge((2, 0), 1, {}, {"state_size": 2}, 50)]
['Finalize']
>>> cc.finalized(1, "memory://ck/job/chk-1", 60)
[NotifyComplete(checkpoint_id=1, final=False)]
>>> cc.latest_completed.state_size
12
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from flinkpy.checkpoint.options import CheckpointingOptions
from flinkpy.checkpoint.shared_state import SharedStateRegistry, metadata_shared_files, shared_files
from flinkpy.errors import ConflictError
from flinkpy.jobmanager.checkpoint_actions import (  # noqa: F401 - the actions are part of the coordinator's interface
    Abort, Action, Discard, FailJob, Finalize, NotifyComplete, SweepShared, TriggerAtSources,
)
from flinkpy.jobmanager.final_checkpoint import FinalCheckpoint

TaskKey = tuple[int, int]  # (vertex id, subtask index)

KINDS = ("checkpoint", "savepoint")


# -- checkpoints -----------------------------------------------------------------------------


def _sum(metrics: Mapping[TaskKey, Mapping[str, Any]], name: str) -> int:
    return sum(int(m.get(name, 0) or 0) for m in metrics.values())


class _CheckpointFigures:
    """What every checkpoint record says about itself (its kind, acks and metrics fields)."""

    kind: str
    ack_ms: dict[TaskKey, int]
    metrics: dict[TaskKey, dict[str, Any]]

    @property
    def is_savepoint(self) -> bool:
        return self.kind == "savepoint"

    @property
    def latest_ack_ms(self) -> int | None:
        return max(self.ack_ms.values(), default=None)

    @property
    def state_size(self) -> int:
        return _sum(self.metrics, "state_size")


@dataclass
class PendingCheckpoint(_CheckpointFigures):
    """A triggered checkpoint that waits for acknowledgements (or for its metadata write)."""

    checkpoint_id: int
    kind: str
    trigger_ms: int
    #: every task that must acknowledge
    tasks: frozenset[TaskKey]
    #: the ack payloads (state handles), opaque to the coordinator
    states: dict[TaskKey, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[TaskKey, dict[str, Any]] = field(default_factory=dict)
    ack_ms: dict[TaskKey, int] = field(default_factory=dict)
    #: Finalize was emitted; the I/O layer is writing _metadata
    finalizing: bool = False


    @property
    def acknowledged(self) -> frozenset[TaskKey]:
        return frozenset(self.states)

    @property
    def waiting_for(self) -> frozenset[TaskKey]:
        return self.tasks - self.acknowledged


@dataclass(frozen=True)
class CompletedCheckpoint(_CheckpointFigures):
    checkpoint_id: int
    kind: str
    trigger_ms: int
    completion_ms: int
    external_path: str
    tasks: frozenset[TaskKey]
    states: dict[TaskKey, dict[str, Any]]
    metrics: dict[TaskKey, dict[str, Any]]
    ack_ms: dict[TaskKey, int]


@dataclass(frozen=True)
class FailedCheckpoint(_CheckpointFigures):
    """An aborted checkpoint, kept (bounded) for statistics: why and when it ended."""

    checkpoint_id: int
    kind: str
    trigger_ms: int
    failure_ms: int
    reason: str
    tasks: frozenset[TaskKey]
    metrics: dict[TaskKey, dict[str, Any]]
    ack_ms: dict[TaskKey, int]
    #: declines, timeouts and failed metadata writes count; subsumption, finished tasks, shutdown do not
    counted: bool


CheckpointRecord = PendingCheckpoint | CompletedCheckpoint | FailedCheckpoint


@dataclass(frozen=True)
class RestoredCheckpoint:
    checkpoint_id: int
    restore_ms: int
    external_path: str
    is_savepoint: bool


@dataclass
class RunningSummary:
    """min / max / sum / count of one number over every completed checkpoint since the start."""

    count: int = 0
    total: int = 0
    min: int | None = None
    max: int | None = None

    def add(self, value: int) -> None:
        self.count += 1
        self.total += value
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)

    @property
    def avg(self) -> int:
        return self.total // self.count if self.count else 0


class CheckpointTriggerRefused(ConflictError):
    """A manual trigger cannot start now; ``reason`` says why (and the message what to do)."""

    def __init__(self, reason: str, *, remedy: str | None = None, busy: bool = False):
        super().__init__(f"cannot trigger a checkpoint: {reason}", remedy=remedy)
        self.reason = reason
        #: refused only because as many checkpoints as allowed are in progress: worth waiting for
        self.busy = busy


# -- the coordinator -------------------------------------------------------------------------


class CheckpointCoordinator:
    """Decides when checkpoints start, complete, fail, and which files go.

    ``tasks`` are all subtasks that must acknowledge, ``sources`` those that receive the trigger.
    Periodic checkpoints start at the first ``tick`` (the I/O layer ticks only while the job
    runs) and then every ``interval_ms``. ``history_limit`` bounds the remembered records.
    """

    def __init__(
        self,
        options: CheckpointingOptions,
        tasks: Iterable[TaskKey],
        sources: Iterable[TaskKey],
        *,
        next_id: int = 1,
        history_limit: int = 100,
    ):
        self.options = options
        self.tasks: frozenset[TaskKey] = frozenset(tuple(t) for t in tasks)  # type: ignore[misc]
        self.sources: list[TaskKey] = sorted(tuple(s) for s in sources)  # type: ignore[misc]
        if not self.tasks:
            raise ValueError("a checkpoint coordinator needs at least one task")
        if not set(self.sources) <= self.tasks:
            raise ValueError(f"sources {sorted(set(self.sources) - self.tasks)} are not among the tasks")
        self.next_id = next_id
        self.history_limit = history_limit
        self.pending: dict[int, PendingCheckpoint] = {}
        #: retained checkpoints and every savepoint, oldest first
        self.completed: list[CompletedCheckpoint] = []
        self.consecutive_failures = 0
        self.finished_tasks: set[TaskKey] = set()
        self.final = FinalCheckpoint(self.sources)
        self.is_shut_down = False
        #: set by a cancel that asks to keep the latest completed checkpoint whatever the
        #: retention setting (``flinkpy upgrade --mode last-state`` restores the next job from it)
        self.retain_latest_on_cancel = False
        self.restored_from: RestoredCheckpoint | None = None
        # statistics (read by checkpoint_stats)
        self.num_restored = 0
        self.num_completed = 0
        self.num_failed = 0
        self.num_late_messages = 0
        self.latest_completed_checkpoint: CompletedCheckpoint | None = None
        self.latest_savepoint: CompletedCheckpoint | None = None
        self.latest_failed: FailedCheckpoint | None = None
        self.summary: dict[str, RunningSummary] = {
            "state_size": RunningSummary(),
            "end_to_end_duration": RunningSummary(),
            "alignment_buffered": RunningSummary(),
        }
        self._records: OrderedDict[int, CheckpointRecord] = OrderedDict()
        #: reference counts of the shared files of incremental checkpoints
        self.shared = SharedStateRegistry()
        #: a restored checkpoint this job owns (claim mode, or its own after a JobManager
        #: failover): (id, directory); discarded once ``retained`` newer checkpoints completed
        self._adopted: tuple[int, str, bool] | None = None
        #: some task acknowledged an incremental snapshot (the job has a shared/ directory)
        self._saw_shared = False
        self._last_trigger_ms: int | None = None
        #: end of the last checkpoint (completed or failed): the minimum pause counts from here
        self._last_end_ms: int | None = None

    # -- queries -----------------------------------------------------------------------------

    @property
    def latest_completed(self) -> CompletedCheckpoint | None:
        """The newest completed checkpoint or savepoint: what a restart restores from."""
        return self.completed[-1] if self.completed else None

    @property
    def history(self) -> list[CheckpointRecord]:
        """Remembered checkpoints (pending, completed, failed), newest first, at most history_limit."""
        return sorted(self._records.values(), key=lambda r: r.checkpoint_id, reverse=True)

    # -- events ------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Action]:
        """Time passed: abort expired checkpoints, then start a periodic one if it is due."""
        actions: list[Action] = []
        for cp in [cp for cp in self.pending.values() if now_ms - cp.trigger_ms >= self.options.timeout_ms]:
            reason = (
                f"expired after {self.options.timeout_ms} ms (execution.checkpointing.timeout) with "
                f"{len(cp.acknowledged)}/{len(cp.tasks)} tasks acknowledged"
            )
            actions += self._fail(cp, reason, now_ms)
        if self.final.due and not self.final.retrying and self._slot_free():
            # the first final checkpoint goes as soon as the one in its way ended, not a whole
            # interval later: the job's end waits for it
            actions += self._trigger(now_ms, "checkpoint", final=True)
        elif self._periodic_due(now_ms):
            actions += self._trigger(now_ms, "checkpoint", final=self.final.due)
        return actions

    def end_of_data(self, task: TaskKey, now_ms: int) -> list[Action]:
        """A source's input ended; once every source's has, the final checkpoint starts at once
        (when another one is in flight, at the first tick after it ended)."""
        self.final.source_ended(task)
        if self.final.due and self._slot_free():
            return self._trigger(now_ms, "checkpoint", final=True)
        return []

    def _slot_free(self) -> bool:
        return not self.is_shut_down and not self.finished_tasks and len(self.pending) < self.options.max_concurrent

    def trigger(self, now_ms: int, *, kind: str = "checkpoint", reason: str = "manual") -> tuple[int, list[Action]]:
        """Start a checkpoint or savepoint now, regardless of the interval and the minimum pause.

        Returns the new id and the actions. Raises CheckpointTriggerRefused (a ConflictError)
        when it cannot start; ``reason`` is informational (for logs).
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        if self.is_shut_down:
            raise CheckpointTriggerRefused("the job is no longer running", remedy="trigger checkpoints of running jobs only")
        if self.finished_tasks:
            some = ", ".join(f"{v}:{s}" for v, s in sorted(self.finished_tasks)[:3])
            raise CheckpointTriggerRefused(f"some tasks have finished ({some})", remedy="bounded jobs cannot checkpoint once a task has finished")
        if len(self.pending) >= self.options.max_concurrent:
            ids = ", ".join(str(i) for i in sorted(self.pending))
            raise CheckpointTriggerRefused(
                f"{len(self.pending)} checkpoint(s) already in progress ({ids}), the maximum is {self.options.max_concurrent}",
                remedy="wait for them to complete or raise execution.checkpointing.max-concurrent-checkpoints",
                busy=True,
            )
        actions = self._trigger(now_ms, kind)
        return actions[0].checkpoint_id, actions  # type: ignore[union-attr]

    def acknowledge(self, task: TaskKey, checkpoint_id: int, state: dict[str, Any], metrics: dict[str, Any], now_ms: int) -> list[Action]:
        """A task snapshotted its state for this checkpoint; the last ack asks for Finalize."""
        task = tuple(task)  # type: ignore[assignment]
        cp = self.pending.get(checkpoint_id)
        if cp is None:
            self.num_late_messages += 1
            if checkpoint_id >= self.next_id or any(c.checkpoint_id == checkpoint_id for c in self.completed):
                return []
            # the checkpoint ended without this task: what it wrote belongs to nobody
            return [Discard(checkpoint_id, None, tuple(self.shared.unregistered(shared_files({task: state}))))]
        if task not in cp.tasks or task in cp.states:
            return []
        cp.states[task] = state
        if not self._saw_shared and next(shared_files({task: state}), None) is not None:
            self._saw_shared = True
        cp.metrics[task] = dict(metrics)
        cp.ack_ms[task] = now_ms
        if cp.waiting_for or cp.finalizing:
            return []
        cp.finalizing = True
        return [Finalize(cp)]

    def finalized(self, checkpoint_id: int, external_path: str, now_ms: int) -> list[Action]:
        """The metadata of this checkpoint is written: it is complete."""
        cp = self.pending.get(checkpoint_id)
        if cp is None or not cp.finalizing:
            if any(c.checkpoint_id == checkpoint_id for c in self.completed):
                return []
            # aborted while its metadata was being written (timeout, shutdown): the files are orphans
            return [Discard(checkpoint_id, external_path)]
        del self.pending[checkpoint_id]
        done = CompletedCheckpoint(
            checkpoint_id=cp.checkpoint_id,
            kind=cp.kind,
            trigger_ms=cp.trigger_ms,
            completion_ms=now_ms,
            external_path=external_path,
            tasks=cp.tasks,
            states=cp.states,
            metrics=cp.metrics,
            ack_ms=cp.ack_ms,
        )
        self.completed.append(done)
        if not done.is_savepoint:
            self.shared.register(checkpoint_id, shared_files(done.states))
        self._remember(done)
        self.num_completed += 1
        self._last_end_ms = now_ms
        self.summary["state_size"].add(done.state_size)
        self.summary["end_to_end_duration"].add(max(0, (done.latest_ack_ms or now_ms) - done.trigger_ms))
        self.summary["alignment_buffered"].add(_sum(done.metrics, "alignment_bytes"))
        if done.is_savepoint:
            self.latest_savepoint = done
        else:
            self.latest_completed_checkpoint = done
            self.consecutive_failures = 0
        actions: list[Action] = [NotifyComplete(checkpoint_id, final=self.final.ended(checkpoint_id, completed=True))]
        for older in sorted(i for i, p in self.pending.items() if i < checkpoint_id and not p.is_savepoint):
            actions += self._end(self.pending[older], "subsumed", now_ms, counted=False)
        checkpoints = [c for c in self.completed if not c.is_savepoint]
        for old in checkpoints[: max(0, len(checkpoints) - self.options.retained)]:
            self.completed.remove(old)
            actions.append(self._discard(old.checkpoint_id, old.external_path))
        if self._adopted is not None and len(checkpoints) >= self.options.retained:
            actions.append(self._discard_adopted())
        return actions

    def finalize_failed(self, checkpoint_id: int, reason: str, now_ms: int) -> list[Action]:
        """Writing the metadata failed: the checkpoint failed."""
        cp = self.pending.get(checkpoint_id)
        if cp is None:
            return []
        return self._fail(cp, f"writing its metadata failed: {reason}", now_ms)

    def decline(self, task: TaskKey, checkpoint_id: int, reason: str, now_ms: int) -> list[Action]:
        """A task could not take its snapshot: the checkpoint failed."""
        task = tuple(task)  # type: ignore[assignment]
        cp = self.pending.get(checkpoint_id)
        if cp is None:
            self.num_late_messages += 1
            return []
        if task not in cp.tasks:
            return []
        return self._fail(cp, f"declined by task {task[0]}:{task[1]}: {reason}", now_ms)

    def task_finished(self, task: TaskKey, now_ms: int) -> list[Action]:
        """A (bounded) task ended: stop triggering; drop the checkpoints that still wait for it."""
        task = tuple(task)  # type: ignore[assignment]
        self.finished_tasks.add(task)
        actions: list[Action] = []
        for cp in [cp for cp in self.pending.values() if task in cp.waiting_for]:
            actions += self._end(cp, "task finished", now_ms, counted=False)
        return actions

    def shutdown(self, now_ms: int, *, job_state: str) -> list[Action]:
        """The job reached ``job_state``: abort pending checkpoints and apply the retention rules.

        CANCELED discards every retained checkpoint unless retain_on_cancellation (or, after a
        cancel with ``retain_latest_on_cancel``, all but the newest one); FINISHED
        discards them all; FAILED keeps them (to resume from by hand). Savepoints are never
        discarded here.
        """
        if self.is_shut_down:
            return []
        self.is_shut_down = True
        actions: list[Action] = []
        for cp in sorted(self.pending.values(), key=lambda p: p.checkpoint_id):
            actions += self._end(cp, f"job {job_state.lower()}", now_ms, counted=False)
        checkpoints = [c for c in self.completed if not c.is_savepoint]
        keep_latest = job_state == "CANCELED" and self.retain_latest_on_cancel
        if job_state == "CANCELED":
            doomed = [] if self.options.retain_on_cancellation else checkpoints[:-1] if keep_latest else checkpoints
        elif job_state == "FINISHED":
            doomed = checkpoints  # as Flink: a finished job's checkpoints are of no further use
        else:  # FAILED (restart by hand from them), SUSPENDED (another JobManager takes over)
            doomed = []
        for old in doomed:
            self.completed.remove(old)
            actions.append(self._discard(old.checkpoint_id, old.external_path))
        if job_state in ("CANCELED", "FINISHED", "FAILED"):
            # a restored checkpoint the job adopted is its latest while it has none of its own
            adopted_is_latest = keep_latest and not checkpoints
            if self._adopted is not None and (job_state == "FINISHED" or (
                    job_state == "CANCELED" and not self.options.retain_on_cancellation and not adopted_is_latest)):
                actions.append(self._discard_adopted())
            if self._saw_shared:
                actions.append(SweepShared(self.shared.files()))
        return actions

    def failover(self, tasks: Iterable[TaskKey], now_ms: int) -> list[Action]:
        """Tasks are being restarted: pending checkpoints cannot complete (not a checkpoint
        failure), and restarted tasks count as running again."""
        actions: list[Action] = []
        for cp in sorted(self.pending.values(), key=lambda p: p.checkpoint_id):
            actions += self._end(cp, "failover: tasks are restarting", now_ms, counted=False)
        tasks = [tuple(t) for t in tasks]  # type: ignore[misc]
        for task in tasks:
            self.finished_tasks.discard(task)  # type: ignore[arg-type]
        self.final.restarting(tasks)  # type: ignore[arg-type]
        return actions

    def rescaled(self, tasks: Iterable[TaskKey], sources: Iterable[TaskKey]) -> None:
        """The job runs at another parallelism (every task restarted): these are its subtasks
        and sources now, none finished, and the final checkpoint waits for these sources."""
        self.tasks = frozenset(tuple(t) for t in tasks)  # type: ignore[misc]
        self.sources = sorted(tuple(s) for s in sources)  # type: ignore[misc]
        self.finished_tasks.clear()
        self.final = FinalCheckpoint(self.sources)

    def restored(
        self, checkpoint_id: int, external_path: str, now_ms: int, *, is_savepoint: bool = False,
        metadata: Mapping[str, Any] | None = None, owned: bool = False, foreign: bool = False,
    ) -> list[Action]:
        """The job (re)started from this checkpoint; new ids continue after it.

        ``owned``: the job takes ownership of a checkpoint it did not complete itself (restore
        mode claim, or its own checkpoint after a JobManager failover): its shared files are
        registered, new checkpoints may build on it, and it is discarded like one of the job's
        own once ``retained`` newer checkpoints completed. ``foreign``: it is another job's, in
        ``external_path`` (not under this job's directory)."""
        self.restored_from = RestoredCheckpoint(checkpoint_id, now_ms, external_path, is_savepoint)
        self.num_restored += 1
        self.next_id = max(self.next_id, checkpoint_id + 1)
        if owned and not is_savepoint and metadata is not None and not any(c.checkpoint_id == checkpoint_id for c in self.completed):
            self.shared.register(checkpoint_id, metadata_shared_files(metadata))
            self._adopted = (checkpoint_id, external_path, foreign)
        return []

    @property
    def base_checkpoint_id(self) -> int | None:
        """What the next checkpoint's tasks may build on (incremental snapshots): the newest
        completed checkpoint, or the adopted restored one; savepoints never."""
        for c in reversed(self.completed):
            if not c.is_savepoint:
                return c.checkpoint_id
        return self._adopted[0] if self._adopted is not None else None

    # -- internals ---------------------------------------------------------------------------

    def _discard(self, checkpoint_id: int, external_path: str | None) -> Discard:
        return Discard(checkpoint_id, external_path, tuple(self.shared.release(checkpoint_id)))

    def _discard_adopted(self) -> Discard:
        assert self._adopted is not None
        cid, path, foreign = self._adopted
        self._adopted = None
        return Discard(cid, path, tuple(self.shared.release(cid)), foreign=foreign)

    def _periodic_due(self, now_ms: int) -> bool:
        opts = self.options
        if opts.interval_ms is None or self.is_shut_down or self.finished_tasks or self.final.completed:
            return False
        if len(self.pending) >= opts.max_concurrent:
            return False
        if self._last_trigger_ms is not None and now_ms - self._last_trigger_ms < opts.interval_ms:
            return False
        if self._last_end_ms is not None and now_ms - self._last_end_ms < opts.min_pause_ms:
            return False
        # Flink's min pause also means "no overlap": a pending checkpoint blocks the next one
        if opts.min_pause_ms > 0 and self.pending:
            return False
        return True

    def _trigger(self, now_ms: int, kind: str, *, final: bool = False) -> list[Action]:
        cid = self.next_id
        self.next_id += 1
        self._last_trigger_ms = now_ms
        cp = PendingCheckpoint(cid, kind, now_ms, self.tasks)
        self.pending[cid] = cp
        self._remember(cp)
        if final:
            self.final.triggered(cid)
        return [TriggerAtSources(cid, now_ms, kind, self.options.mode, list(self.sources), final=final)]

    def _fail(self, cp: PendingCheckpoint, reason: str, now_ms: int) -> list[Action]:
        counted = not cp.is_savepoint
        actions = self._end(cp, reason, now_ms, counted=counted)
        self._last_end_ms = now_ms
        if counted:
            self.consecutive_failures += 1
            tolerable = self.options.tolerable_failures
            if self.consecutive_failures > tolerable:
                actions.append(
                    FailJob(
                        f"checkpoint {cp.checkpoint_id} failed: {reason}; {self.consecutive_failures} consecutive "
                        f"checkpoint failure(s) exceed the tolerable failed checkpoints ({tolerable}, "
                        "execution.checkpointing.tolerable-failed-checkpoints)"
                    )
                )
        return actions

    def _end(self, cp: PendingCheckpoint, reason: str, now_ms: int, *, counted: bool) -> list[Action]:
        del self.pending[cp.checkpoint_id]
        self.final.ended(cp.checkpoint_id, completed=False)
        failed = FailedCheckpoint(
            checkpoint_id=cp.checkpoint_id,
            kind=cp.kind,
            trigger_ms=cp.trigger_ms,
            failure_ms=now_ms,
            reason=reason,
            tasks=cp.tasks,
            metrics=cp.metrics,
            ack_ms=cp.ack_ms,
            counted=counted,
        )
        self._remember(failed)
        self.num_failed += 1
        self.latest_failed = failed
        return [Abort(cp.checkpoint_id, reason), Discard(cp.checkpoint_id, None, tuple(self.shared.unregistered(shared_files(cp.states))))]

    def _remember(self, record: CheckpointRecord) -> None:
        self._records[record.checkpoint_id] = record
        excess = len(self._records) - self.history_limit
        if excess > 0:
            # the oldest finished records go first; pending ones stay while they are in flight
            for cid in [c for c, r in self._records.items() if not isinstance(r, PendingCheckpoint)][:excess]:
                del self._records[cid]
