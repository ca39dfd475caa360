"""Scheduler: gives a submitted job its slots and deploys it, or lets it wait for them.

A job needs as many slots as its highest parallelism. When the cluster has them free, the job is
deployed at once (restored from a savepoint or retained checkpoint when it was submitted with
one). When the slots exist but other jobs hold them (a job being cancelled, say), the job waits,
as in Flink, up to ``slot.request.timeout``; a job that needs more slots than the cluster has
fails at once. Waiting jobs are served in submission order whenever slots are released or added,
and on every tick. Callers hold the JobManager's lock.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flinkpy.clock import now_ms
from flinkpy.jobmanager.slot_pool import NotEnoughSlots

if TYPE_CHECKING:
    from flinkpy.jobmanager.dispatcher import Dispatcher

log = logging.getLogger("flinkpy.jobmanager")

#: a savepoint or retained checkpoint to start from: (its directory, its ``_metadata``)
RestorePoint = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class WaitingJob:
    """A submitted job waiting for slots that other jobs hold."""

    deadline: float  # time.monotonic()
    timeout_ms: int
    restore_from: RestorePoint | None


class Scheduler:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        #: submitted jobs waiting for slots, in submission order
        self.waiting: dict[str, WaitingJob] = {}

    def schedule(self, job_id: str, restore_from: RestorePoint | None) -> None:
        """Deploy a just-submitted job, or queue it for slots, or fail it when it cannot run."""
        d = self.dispatcher
        rec = d.jobs[job_id]
        graph = rec.graph
        try:
            assignment = d.registry.slots.allocate(job_id, graph.required_slots)
        except NotEnoughSlots as e:
            timeout_ms = rec.options.slot_request_timeout_ms
            if graph.required_slots > d.registry.slots.total or timeout_ms <= 0:
                message = f"could not schedule job {job_id} ({graph.name}): {e}"
                log.error(message)
                d.perform(job_id, graph.fail_before_running(message + "; start more TaskManagers or lower the parallelism", now_ms()))
                return
            log.info("job %s (%s) waits up to %d ms for %d slot(s): %s", job_id, graph.name, timeout_ms, graph.required_slots, e)
            self.waiting[job_id] = WaitingJob(time.monotonic() + timeout_ms / 1000, timeout_ms, restore_from)
            graph.events.append({"timestamp": now_ms(), "type": "waiting-for-resources",
                                 "message": f"waiting up to {timeout_ms} ms (slot.request.timeout) for slots: {e}"})
            return
        self._deploy(job_id, assignment, restore_from)

    def _deploy(self, job_id: str, assignment: dict[int, str], restore_from: RestorePoint | None) -> None:
        """Deploy a job on the slots it was given, restored from ``restore_from`` when set."""
        d = self.dispatcher
        rec = d.jobs[job_id]
        graph, checkpointing = rec.graph, rec.checkpointing
        if restore_from:
            directory, metadata = restore_from
            checkpointing.initial_restore = (directory, metadata)
            own = metadata.get("job_id") == job_id  # a JobManager failover recovers the job's own checkpoint
            if not own:  # what it was started from (a new leader restores its own checkpoint instead)
                checkpointing.history.started_from = directory
            checkpointing.coordinator.restored(
                int(metadata.get("checkpoint_id", 0)), directory, now_ms(), is_savepoint=metadata.get("kind") == "savepoint",
                metadata=metadata, owned=own or rec.options.claim, foreign=not own,
            )
            graph.events.append({"timestamp": now_ms(), "type": "restored", "from": directory, "kind": metadata.get("kind")})
        d.perform(job_id, graph.schedule(assignment, now_ms()))
        d.changed.notify_all()

    def schedule_waiting(self) -> None:
        """Give waiting jobs the slots that are free now (in submission order); fail those whose
        slot.request.timeout passed. Called when slots are released or added, and on every tick."""
        d = self.dispatcher
        for job_id, waiting in list(self.waiting.items()):
            if job_id not in self.waiting:  # scheduled or failed by a nested call
                continue
            rec = d.jobs.get(job_id)
            if rec is None or rec.graph.state != "CREATED":  # cancelled while waiting
                self.waiting.pop(job_id, None)
                continue
            try:
                assignment = d.registry.slots.allocate(job_id, rec.graph.required_slots)
            except NotEnoughSlots as e:
                if time.monotonic() >= waiting.deadline:
                    self.waiting.pop(job_id, None)
                    message = f"could not schedule job {job_id} ({rec.graph.name}) within slot.request.timeout ({waiting.timeout_ms} ms): {e}"
                    log.error(message)
                    d.perform(job_id, rec.graph.fail_before_running(message + "; cancel jobs that hold slots, start more TaskManagers or lower the parallelism", now_ms()))
                continue
            self.waiting.pop(job_id, None)
            log.info("job %s (%s) got its %d slot(s)", job_id, rec.graph.name, rec.graph.required_slots)
            self._deploy(job_id, assignment, waiting.restore_from)

    def job_terminated(self, job_id: str) -> None:
        """A job ended (its slots are released): it no longer waits, and its slots may be what a
        waiting job needs."""
        self.waiting.pop(job_id, None)
        self.schedule_waiting()
