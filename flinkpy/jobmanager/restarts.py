"""Restarts after failures: carrying out what a job's restart strategy decided.

The ExecutionGraph decides *whether* and *when* failed subtasks restart (it asks the job's restart
backoff time strategy); this component carries the restart out when it is due: it finds slots for
subtasks whose TaskManager is gone, restores the job's checkpoint state from the latest completed
checkpoint, and redeploys. It also serves the restart strategy over REST (read it, replace it on
a running job). ``restart`` and ``due`` run under the JobManager's lock (the Dispatcher's
actions and tick); the REST methods take it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from flinkpy.clock import now_ms
from flinkpy.common.restart_backoff import strategy_from_config
from flinkpy.errors import ConflictError

if TYPE_CHECKING:
    from flinkpy.jobmanager.dispatcher import Dispatcher

log = logging.getLogger("flinkpy.jobmanager")


class Restarts:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        #: the wait for slots last logged per job: a restart is retried on every tick, the log
        #: says it once (and again when the figures change)
        self._logged_wait: dict[str, str] = {}

    def restart(self, job_id: str, keys: frozenset[tuple[int, int]]) -> None:
        """Find slots for the restarted subtasks (those whose TaskManager is gone need new ones),
        then deploy them restored from the latest completed checkpoint. Lock held."""
        d = self.dispatcher
        rec = d.jobs[job_id]
        g = rec.graph
        slots = d.registry.slots
        subtasks = sorted({k[1] for k in keys})
        lost = [i for i in subtasks if g.slot_of_subtask.get(i) not in d.registry.taskmanagers]
        if len(lost) > slots.available:
            message = (
                f"job {job_id} waits for {len(lost)} slot(s) to restart ({slots.available} free): "
                "start a TaskManager or wait for the lost one to come back"
            )
            if self._logged_wait.get(job_id) != message:
                self._logged_wait[job_id] = message
                log.warning(message)
            # bounded by slot.request.timeout: then it is a failed attempt of the restart strategy
            d.perform(job_id, g.waiting_for_slots(keys, message, now_ms(), rec.options.slot_request_timeout_ms))
            return
        self._logged_wait.pop(job_id, None)
        new_slots = {i: slots.allocate_one(job_id) for i in lost}
        latest = rec.checkpointing.latest_restore_point()
        if latest is not None:
            log.info("job %s: restoring %d task(s) from checkpoint %s at %s", job_id, len(keys), latest[0], latest[1])
            d.checkpoints.perform(job_id, rec.checkpointing.coordinator.restored(latest[0], latest[1], now_ms()))
        d.perform(job_id, g.restart(keys, new_slots, now_ms()))

    def due(self) -> None:
        """Carry out the restarts whose backoff has passed (every tick). Lock held."""
        d = self.dispatcher
        for job_id, rec in d.jobs.items():
            if rec.graph.pending_restarts:
                d.perform(job_id, rec.graph.due_restarts(now_ms()))
                d.changed.notify_all()

    def strategy(self, job_id: str) -> dict[str, Any]:
        """The job's restart strategy, failover strategy, restarts so far and strategy changes."""
        d = self.dispatcher
        with d.lock:
            g = d.job(job_id).graph
            return {
                "jid": job_id,
                "restart-strategy": g.strategy.describe() if g.strategy is not None else {"type": "none"},
                "failover-strategy": g.failover,
                "restarts": g.restarts,
                "counted-failures": g.strategy.counted_failures() if g.strategy is not None else 0,
                "history": [e for e in g.events if e["type"] == "restart-strategy-changed"],
            }

    def set_strategy(self, job_id: str, config: dict[str, str]) -> dict[str, Any]:
        """Replace a running job's restart strategy; it applies from the next failure."""
        d = self.dispatcher
        with d.lock:
            rec = d.job(job_id)
            if rec.graph.is_terminal():
                raise ConflictError(f"job {job_id} is {rec.graph.state}: its restart strategy no longer matters", remedy="set it on a running job")
            strategy = strategy_from_config(config, checkpointing_enabled=rec.checkpointing.periodic)
            previous = rec.graph.strategy.describe() if rec.graph.strategy is not None else {"type": "none"}
            rec.graph.set_restart_strategy(strategy, strategy.describe(), previous, now_ms())
            log.info("job %s: restart strategy changed from %s to %s", job_id, previous, strategy.describe())
        return self.strategy(job_id)
