"""Supervision of a local cluster's processes: when a dead one is started again (pure).

Flink's active resource managers (Kubernetes, YARN) start a new TaskManager pod when one dies;
a local cluster gets the same from its supervisor process (:mod:`flinkpy.cluster.supervisor`).
This module is the supervisor's decisions only: it is told which processes run and which died,
and answers with actions (start one again, give up on one, stop supervising). It reads no clock
and touches no process, so backoff and give-up rules are tested with made-up times.

The rules:

- a dead TaskManager is started again after a backoff that starts at ``backoff.initial`` and
  doubles up to ``backoff.max``; a process that ran for ``backoff.reset-threshold`` before it
  died starts the sequence afresh (one crash a day is not a crash loop);
- after ``max-attempts`` restarts in a row without such a stable run the supervisor gives up on
  that process (it keeps crashing at start-up: its log says why), and says so;
- with high availability a dead JobManager is started again the same way (it joins the election
  as a standby). Without it, a background cluster's JobManager is started again too, as a fresh
  one without the jobs (as a Kubernetes deployment restarts a JobManager pod without HA): the
  TaskManagers, which stop with it, are started again and register with the new one. An
  embedded cluster's JobManager is the cluster of its one job: when it dies nothing is
  restarted and supervision ends.

>>> policy = RestartPolicy(initial_backoff_ms=100, max_backoff_ms=1000)
>>> s = Supervision({"taskmanager": policy}, ha=False)
>>> s.started("tm-1", "taskmanager", now_ms=0)
>>> s.exited("tm-1", now_ms=50)
[Waiting(proc_id='tm-1', backoff_ms=100, attempt=1)]
>>> s.due(now_ms=150)
[Respawn(proc_id='tm-1', attempt=1)]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class RestartPolicy:
    """How one kind of process is started again (Flink-style keys, see :func:`policies_from_config`)."""

    enabled: bool = True
    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 60_000
    reset_threshold_ms: int = 60_000
    max_attempts: int = 10

    def backoff_ms(self, attempt: int) -> int:
        """The wait before restart number ``attempt`` (1-based) of a crash loop."""
        return min(self.max_backoff_ms, self.initial_backoff_ms * 2 ** min(attempt - 1, 30))

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class Waiting:
    """A process died; it is started again after ``backoff_ms`` (restart number ``attempt``)."""

    proc_id: str
    backoff_ms: int
    attempt: int


@dataclass(frozen=True)
class Respawn:
    """Start the process again now, under the same id."""

    proc_id: str
    attempt: int


@dataclass(frozen=True)
class GiveUp:
    """The process is not started again; ``reason`` says why."""

    proc_id: str
    reason: str


@dataclass(frozen=True)
class ClusterLost:
    """The JobManager of a cluster without high availability died: supervision ends."""

    reason: str


Action = Union[Waiting, Respawn, GiveUp, ClusterLost]


@dataclass
class Supervised:
    """What the supervisor knows of one process."""

    kind: str  # "jobmanager" | "taskmanager"
    started_ms: int
    #: RUNNING, WAITING (for its backoff), STARTING (Respawn issued) or GAVE_UP
    state: str = "RUNNING"
    attempts: int = 0
    restart_at_ms: int = 0


@dataclass
class Supervision:
    """The supervisor's state: ``policies`` by process kind; ``ha``: whether JobManagers have
    standbys (without, a dead JobManager ends the cluster)."""

    policies: dict[str, RestartPolicy]
    ha: bool
    #: without high availability, start a dead JobManager again (a background cluster's): a
    #: fresh one; False (an embedded cluster's), the cluster ends with it
    restart_lone_jobmanager: bool = False
    processes: dict[str, Supervised] = field(default_factory=dict)
    #: set once a JobManager without high availability died: nothing is restarted any more
    lost: bool = False

    def started(self, proc_id: str, kind: str, now_ms: int) -> None:
        """A process runs (started by the launcher, by ``add-taskmanager`` or by a Respawn)."""
        known = self.processes.get(proc_id)
        if known is None:
            self.processes[proc_id] = Supervised(kind, now_ms)
        else:
            known.state = "RUNNING"
            known.started_ms = now_ms

    def exited(self, proc_id: str, now_ms: int) -> list[Action]:
        """A process that ran is gone."""
        proc = self.processes.get(proc_id)
        if proc is None or proc.state != "RUNNING":
            return []
        if proc.kind == "jobmanager" and not self.ha and not self.restart_lone_jobmanager:
            self.lost = True
            proc.state = "GAVE_UP"
            return [ClusterLost(f"the JobManager {proc_id} died; without high availability the cluster ends with it")]
        policy = self.policies.get(proc.kind, RestartPolicy(enabled=False))
        if self.lost or not policy.enabled:
            proc.state = "GAVE_UP"
            return [GiveUp(proc_id, "restarts are disabled" if not self.lost else "the cluster's JobManager is gone")]
        if now_ms - proc.started_ms >= policy.reset_threshold_ms:
            proc.attempts = 0  # it ran long enough: not a crash loop
        if proc.attempts >= policy.max_attempts:
            proc.state = "GAVE_UP"
            return [GiveUp(proc_id, f"it died {proc.attempts + 1} times in a row, each within "
                                    f"{policy.reset_threshold_ms} ms of its start (max-attempts {policy.max_attempts})")]
        proc.attempts += 1
        backoff = policy.backoff_ms(proc.attempts)
        proc.state = "WAITING"
        proc.restart_at_ms = now_ms + backoff
        return [Waiting(proc_id, backoff, proc.attempts)]

    def due(self, now_ms: int) -> list[Action]:
        """The restarts whose backoff has passed."""
        actions: list[Action] = []
        for proc_id, proc in sorted(self.processes.items()):
            if proc.state == "WAITING" and now_ms >= proc.restart_at_ms and not self.lost:
                proc.state = "STARTING"
                actions.append(Respawn(proc_id, proc.attempts))
        return actions

    def forget(self, proc_id: str) -> None:
        """The process left the cluster's record (no longer ours to supervise)."""
        self.processes.pop(proc_id, None)


def policies_from_config(config: Any) -> dict[str, RestartPolicy]:
    """The policies of ``resourcemanager.taskmanager-restart.*`` and
    ``high-availability.jobmanager-restart.enabled`` (JobManagers share the TaskManagers' backoff)."""

    def get(key: str, default: Any) -> Any:
        return config.get(key) if config is not None else default

    tm = RestartPolicy(
        enabled=bool(get("resourcemanager.taskmanager-restart.enabled", True)),
        initial_backoff_ms=int(get("resourcemanager.taskmanager-restart.backoff.initial", 1000)),
        max_backoff_ms=int(get("resourcemanager.taskmanager-restart.backoff.max", 60_000)),
        reset_threshold_ms=int(get("resourcemanager.taskmanager-restart.backoff.reset-threshold", 60_000)),
        max_attempts=int(get("resourcemanager.taskmanager-restart.max-attempts", 10)),
    )
    jm = RestartPolicy(**{**tm.to_dict(), "enabled": bool(get("high-availability.jobmanager-restart.enabled", True))})
    return {"taskmanager": tm, "jobmanager": jm}
