"""Running a chaos schedule against a job: each planned fault at its moment, through the client.

The schedule itself (:mod:`flinkpy.faults.chaos`) is pure and depends on the seed only; this
module adds time and the cluster. At each fault's moment the job's state is read first: a job
that has ended ends the run. A fault whose target is not there (the job is restarting, only
one TaskManager is left) is skipped, not fatal: chaos is about what the job survives. Ctrl-C
ends the run early; the summary says so.

Progress is reported through ``on_event`` (one :class:`ChaosEvent` per fault, skip or end), so
that a caller renders it as it likes; the result is a :class:`ChaosSummary`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from flinkpy.client.client import Client
from flinkpy.client.operations import TERMINAL_STATES
from flinkpy.network.rest_client import JsonObject
from flinkpy.errors import ConflictError, NotFoundError
from flinkpy.faults.chaos import PlannedFault, fault_request


@dataclass(frozen=True)
class ChaosEvent:
    """What happened at one moment of the run.

    ``what`` is "injected" (``entry`` is the fault's journal entry), "skipped" (``reason``
    says why), "ended" (the job reached ``state``) or "interrupted" (Ctrl-C).
    """

    what: str
    at_s: float = 0.0
    kind: str = ""
    entry: JsonObject | None = None
    reason: str | None = None
    state: str | None = None


@dataclass
class ChaosSummary:
    job_id: str
    seed: int
    planned: int
    injected: list[JsonObject] = field(default_factory=list)
    skipped: list[JsonObject] = field(default_factory=list)
    restarts_observed: int = 0
    state: str = ""
    interrupted: bool = False

    def to_dict(self) -> JsonObject:
        """The document ``flinkpy fault chaos --json`` prints."""
        return {
            "jid": self.job_id,
            "seed": self.seed,
            "planned": self.planned,
            "injected": self.injected,
            "skipped": self.skipped,
            "restarts-observed": self.restarts_observed,
            "state": self.state,
            "interrupted": self.interrupted,
        }


def sleep_until(moment: float) -> None:
    """Wait for a moment on the monotonic clock: the schedule's wall-clock time, not a
    synchronisation (short naps, so Ctrl-C is handled promptly)."""
    while (left := moment - time.monotonic()) > 0:
        time.sleep(min(left, 0.2))


def inject_planned(client: Client, job_id: str, planned: PlannedFault) -> JsonObject:
    """Inject one planned fault; ``ConflictError``/``NotFoundError`` when its target is not
    there now (kill-taskmanager refuses to take the last TaskManager)."""
    scope, body = fault_request(planned)
    kind = str(body.pop("kind"))
    if scope == "cluster":
        if kind == "kill-taskmanager" and len(client.taskmanagers()) < 2:
            raise ConflictError("only one TaskManager is left", remedy="start more TaskManagers")
        return client.inject_cluster_fault(kind, job=job_id, **body)
    return client.inject_job_fault(job_id, kind, **body)


def run_chaos(
    client: Client,
    job_id: str,
    schedule: Sequence[PlannedFault],
    *,
    seed: int,
    duration_s: float,
    on_event: Callable[[ChaosEvent], None] = lambda event: None,
) -> ChaosSummary:
    """Walk ``schedule`` (made from ``seed``) against ``job_id`` for ``duration_s``."""
    restarts_before = client.job(job_id)["restarts"]
    summary = ChaosSummary(job_id, seed, len(schedule))
    started = time.monotonic()
    try:
        for planned in schedule:
            sleep_until(started + planned.at_s)
            state = client.job(job_id)["state"]
            if state in TERMINAL_STATES:
                on_event(ChaosEvent("ended", planned.at_s, planned.kind, state=state))
                break
            try:
                entry = inject_planned(client, job_id, planned)
            except (ConflictError, NotFoundError) as e:
                summary.skipped.append({"at_s": planned.at_s, "kind": planned.kind, "reason": e.message})
                on_event(ChaosEvent("skipped", planned.at_s, planned.kind, reason=e.message))
                continue
            summary.injected.append({"at_s": planned.at_s, **entry})
            on_event(ChaosEvent("injected", planned.at_s, planned.kind, entry=entry))
        else:
            sleep_until(started + duration_s)
    except KeyboardInterrupt:
        summary.interrupted = True
        on_event(ChaosEvent("interrupted"))
    job = client.job(job_id)
    summary.restarts_observed = job["restarts"] - restarts_before
    summary.state = job["state"]
    return summary
