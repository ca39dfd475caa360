"""The JobManager's side of checkpoints and savepoints of running jobs.

Each job's ``JobCheckpointing`` (its CheckpointCoordinator plus the storage I/O) decides; this
component connects it to the rest of the JobManager: it triggers periodic checkpoints and queued
savepoints on every tick, takes the savepoint and checkpoint requests that come over REST, feeds
the tasks' acknowledgements and declines in, and carries out the coordinator's actions (messages
to tasks, work to do later, failing the job). A savepoint is a checkpoint the operator asked for:
the same path with another kind.
"""

from __future__ import annotations

import logging
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.checkpoint.targets import check_target
from flinkpy.clock import now_ms
from flinkpy.errors import ConfigurationError, ConflictError, NotFoundError, OperationTimeoutError
from flinkpy.jobmanager.checkpoint_coordinator import Action as CheckpointAction
from flinkpy.jobmanager.execution_graph import Execution
from flinkpy.jobmanager.savepoint_history import SavepointTrigger
from flinkpy.jobmanager.savepoint_request import SavepointStatus
from flinkpy.protocol.messages import CheckpointAck, CheckpointDecline, TaskControl, TaskEndOfData, ToTask

if TYPE_CHECKING:
    from flinkpy.jobmanager.dispatcher import Dispatcher

log = logging.getLogger("flinkpy.jobmanager")

SAVEPOINT_FORMATS = ("canonical", "native")


class CheckpointHandler:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def tick(self) -> None:
        """Start queued savepoints and due periodic checkpoints of running jobs; fail the queued
        savepoints of jobs that ended."""
        d = self.dispatcher
        with d.lock:
            for job_id, rec in d.jobs.items():
                if not rec.graph.all_running():
                    for r in rec.checkpointing.savepoints.values():
                        if r.status is SavepointStatus.QUEUED and rec.graph.is_terminal():
                            r.fail(f"job {job_id} is {rec.graph.state}")
                    continue
                cp = rec.checkpointing
                if cp.history.due(now_ms()) and rec.graph.state == "RUNNING" and not cp.savepoint_in_progress():
                    cp.request_periodic_savepoint(now_ms())
                if cp.savepoints:
                    self.perform(job_id, cp.start_queued_savepoints(now_ms()))
                if cp.periodic and not cp.manual_waiting:
                    self.perform(job_id, cp.coordinator.tick(now_ms()))

    def trigger_savepoint(self, job_id: str, target_dir: str | None, *, stop: bool = False, drain: bool = False, fmt: str = "canonical",
                          trigger: str | None = None) -> str:
        """Queue a savepoint (of a stop-with-savepoint when ``stop``); returns its trigger id.
        ``trigger`` (manual, upgrade, stop) is what the job's savepoint history records."""
        d = self.dispatcher
        with d.lock:
            rec = d.job(job_id)
            if rec.graph.state != "RUNNING":
                raise ConflictError(f"job {job_id} is {rec.graph.state}: savepoints are taken of running jobs", remedy="see 'flinkpy list -a'")
            if target_dir:
                check_target(target_dir)  # the CLI resolved it; another REST client may not have
            fmt = fmt.lower()
            if fmt not in SAVEPOINT_FORMATS:
                raise ConfigurationError(f"savepoint format {fmt!r} is not known", remedy="use canonical or native")
            kind = _client_trigger(trigger, stop)
            trigger_id = rec.checkpointing.request_savepoint(target_dir, stop=stop, drain=drain, fmt=fmt, now=now_ms(), trigger=kind)
            log.info("job %s: %s requested (trigger %s, target %s)", job_id, "stop with savepoint" if stop else "savepoint", trigger_id, target_dir)
            return trigger_id

    def savepoints(self, job_id: str) -> dict[str, Any]:
        """The job's savepoint schedule and history, what it was started from and what a
        restart would restore from now (``GET /jobs/<id>``, ``GET /jobs/<id>/savepoints/schedule``)."""
        d = self.dispatcher
        with d.lock:
            cp = d.job(job_id).checkpointing
            point = cp.latest_restore_point()
            return {**cp.history.to_json(), "restore-point": point[2] if point else None}

    def schedule(self, job_id: str, *, interval_ms: int | None, max_count: int | None = None, max_age_ms: int | None = None) -> dict[str, Any]:
        """Set (or with ``interval_ms`` None, stop) the job's periodic savepoints, from now on."""
        d = self.dispatcher
        with d.lock:
            rec = d.job(job_id)
            if rec.graph.is_terminal():
                raise ConflictError(f"job {job_id} is {rec.graph.state}: savepoints are scheduled for running jobs", remedy="see 'flinkpy list -a'")
            rec.checkpointing.history.reschedule(now_ms(), interval_ms=interval_ms, max_count=max_count, max_age_ms=max_age_ms)
            log.info("job %s: periodic savepoints %s", job_id, f"every {interval_ms} ms" if interval_ms else "off")
            rec.graph.events.append({"timestamp": now_ms(), "type": "savepoint-schedule-changed", "interval": interval_ms or None})
            d.changed.notify_all()
        return self.savepoints(job_id)

    def savepoint_status(self, job_id: str, trigger_id: str) -> dict[str, Any]:
        """A savepoint operation's status, in the shape of Flink's REST API."""
        d = self.dispatcher
        with d.lock:
            rec = d.job(job_id)
            r = rec.checkpointing.savepoints.get(trigger_id)
            if r is None:
                raise NotFoundError(f"no savepoint trigger {trigger_id} for job {job_id}", remedy="use the id 'savepoint trigger --detached' printed")
            return r.to_json()

    def trigger_checkpoint(self, job_id: str, kind: str = "checkpoint", *, wait_s: float = 0.0) -> int:
        """Trigger a checkpoint now (``flinkpy checkpoint trigger``); returns its id.

        While as many checkpoints as allowed are in progress the request waits its turn, up to
        ``wait_s``, as a manual trigger queues in Flink: periodic checkpoints do not start
        while it waits, so it goes next."""
        from flinkpy.jobmanager.checkpoint_coordinator import CheckpointTriggerRefused

        d = self.dispatcher
        deadline = monotonic() + wait_s
        with d.lock:
            rec = d.job(job_id)
            waiting = False
            try:
                while True:
                    if not rec.graph.all_running():
                        raise ConflictError(
                            f"job {job_id} is {rec.graph.state} and not all of its tasks are running: no checkpoint can be taken",
                            remedy="trigger checkpoints of running jobs only",
                        )
                    try:
                        cid, actions = rec.checkpointing.coordinator.trigger(now_ms(), kind=kind)
                        break
                    except CheckpointTriggerRefused as e:
                        remaining = deadline - monotonic()
                        if not e.busy or wait_s <= 0:
                            raise
                        if remaining <= 0:
                            raise OperationTimeoutError(
                                f"no checkpoint of job {job_id} could start within {wait_s:g} s: {e.reason}",
                                remedy="wait longer (--timeout) or raise execution.checkpointing.max-concurrent-checkpoints",
                            ) from None
                        if not waiting:
                            waiting = True
                            rec.checkpointing.manual_waiting += 1
                        d.changed.wait(min(remaining, 0.5))
            finally:
                if waiting:
                    rec.checkpointing.manual_waiting -= 1
            self.perform(job_id, actions)
            return cid

    def on_task_event(self, job_id: str, exec_id: str, event: CheckpointAck | CheckpointDecline | TaskEndOfData) -> None:
        """A task acknowledged (``checkpoint_ack``) or declined (``checkpoint_decline``) a
        checkpoint, or a source's input ended (``end_of_data``)."""
        d = self.dispatcher
        with d.lock:
            rec = d.jobs.get(job_id)
            ex = rec.graph.by_exec_id(exec_id) if rec else None
            if rec is None or ex is None:
                return
            coord = rec.checkpointing.coordinator
            key = (ex.vertex_id, ex.subtask)
            if isinstance(event, TaskEndOfData):
                actions = coord.end_of_data(key, now_ms())
            elif isinstance(event, CheckpointAck):
                actions = coord.acknowledge(key, event.checkpoint_id, {"state": event.state}, event.metrics, now_ms())
            else:
                actions = coord.decline(key, event.checkpoint_id, event.reason, now_ms())
            self.perform(job_id, actions)
            d.changed.notify_all()

    def perform(self, job_id: str, actions: list[CheckpointAction]) -> None:
        """Carry out the coordinator's actions for one job. Lock held."""
        d = self.dispatcher
        rec = d.jobs[job_id]

        def send(ex: Execution, message: TaskControl) -> None:
            d.registry.send(ex.tm_id, ToTask(job_id=job_id, exec_id=ex.exec_id, message=message))

        def later(fn: Callable[[], list[CheckpointAction]]) -> None:
            with d.lock:
                self.perform(job_id, fn())
                d.changed.notify_all()

        def fail_job(reason: str) -> None:
            log.error("job %s fails: %s", job_id, reason)
            d.perform(job_id, rec.graph.fail_global("flinkpy.CheckpointException", reason, now_ms()))

        rec.checkpointing.perform(actions, send, later, fail_job)


def _client_trigger(name: str | None, stop: bool) -> SavepointTrigger:
    """What a REST client may say triggered its savepoint: manual or upgrade (a savepoint),
    stop or upgrade (a stop with savepoint); periodic ones only the JobManager takes."""
    allowed = ("stop", "upgrade") if stop else ("manual", "upgrade")
    if name is None:
        return SavepointTrigger(allowed[0])
    if str(name).lower() not in allowed:
        raise ConfigurationError(f"savepoint trigger {name!r} is not one a client may give here", remedy=f"use {' or '.join(allowed)}")
    return SavepointTrigger(str(name).lower())
