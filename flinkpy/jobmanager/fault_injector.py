"""FaultInjector: the JobManager's end of ``flinkpy fault ...``.

It checks that a fault's target exists and is running (a clear 404 or 409 otherwise, before
anything happens), journals the fault in the records of the jobs it hits, and hands it to the
TaskManager that hosts the target, which carries it out. The kinds, the journal entries and the
seeded choice of a target live in :mod:`flinkpy.faults`; this module only adds the cluster's
state and the sending: one handler per kind (:data:`_JOB_HANDLERS`, :data:`_CLUSTER_HANDLERS`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from flinkpy import faults as f
from flinkpy.clock import now_ms
from flinkpy.errors import ConfigurationError, ConflictError, NotFoundError
from flinkpy.jobmanager.execution_graph import Execution, ExecutionGraph
from flinkpy.protocol import Message, messages as msgs

if TYPE_CHECKING:
    from flinkpy.jobmanager.dispatcher import Dispatcher

log = logging.getLogger("flinkpy.jobmanager")


class FaultInjector:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        #: faults aimed at the cluster (TaskManagers, storage), also journaled in the jobs they hit
        self.cluster_faults: list[f.FaultRecord] = []

    def inject(self, job_id: str | None, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        """Validate a fault's target, journal it, and have the TaskManager hosting it carry it out.

        Job faults (``job_id`` given): kill-task, pause-task, raise, fail-checkpoint, network;
        params vertex (id, name, operator name, uid or operator id), subtask, signal, seconds,
        after, count, delay_ms, drop. Cluster faults: kill-taskmanager, pause-taskmanager (param
        taskmanager), storage-outage (seconds). Unknown targets raise NotFoundError; a job or
        subtask that is not running raises ConflictError. Returns the journal entry.
        """
        with self.dispatcher.lock:
            if job_id is not None:
                return self._job_fault(job_id, kind, params)
            return self._cluster_fault(kind, params)

    def history(self, job_id: str | None) -> list[dict[str, Any]]:
        """The journal; the latest fault's state after is the job's state now."""
        d = self.dispatcher
        with d.lock:
            if job_id is None:
                return [e.to_json() for e in self.cluster_faults]
            rec = d.job(job_id)
            return f.journal_view(rec.faults, rec.graph.state, rec.graph.restarts)

    def _cluster_fault(self, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        d = self.dispatcher
        if kind not in f.CLUSTER_FAULTS:
            raise ConfigurationError(f"{kind!r} is not a cluster fault", remedy=f"use one of {', '.join(f.CLUSTER_FAULTS)}")
        seconds = params.get("seconds")
        target, hit = _CLUSTER_HANDLERS[kind](self, params)
        entry = f.FaultRecord.injected(now_ms(), kind, target, "-", 0, seconds=seconds)
        entry.jobs = hit
        self.cluster_faults.append(entry)
        for j in hit:
            g = d.jobs[j].graph
            f.record(d.jobs[j].faults, f.FaultRecord.injected(entry.time_ms, kind, target, g.state, g.restarts, seconds=seconds))
        log.warning("fault %s injected into %s (jobs hit: %s)", kind, f.describe_target(target), hit or "none")
        return entry.to_json()

    def _storage_outage(self, params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        d = self.dispatcher
        until = time.time() + float(params.get("seconds") or 0)
        from flinkpy.checkpoint.storage import set_outage

        set_outage(until)  # the JobManager's own writes (_metadata)
        for tm_id in list(d.registry.taskmanagers):
            d.registry.send(tm_id, msgs.StorageOutage(until=until))
        return {"what": "checkpoint storage"}, [j for j, r in d.jobs.items() if not r.graph.is_terminal()]

    def _kill_taskmanager(self, params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        return self._to_taskmanager(params, msgs.KillTaskManager(signal="KILL"))

    def _pause_taskmanager(self, params: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        return self._to_taskmanager(params, msgs.PauseTaskManager(seconds=float(params.get("seconds") or 0)))

    def _to_taskmanager(self, params: dict[str, Any], message: Message) -> tuple[dict[str, Any], list[str]]:
        """Send ``message`` to the TaskManager named (or picked); its target and the jobs it hits."""
        d = self.dispatcher
        taskmanagers = d.registry.taskmanagers
        tm_id = str(params.get("taskmanager") or "")
        if not tm_id and params.get("pick") is not None and taskmanagers:
            tm_id = f.choose(self._hosts(params.get("job")) or list(taskmanagers), float(params["pick"]))
        tm = taskmanagers.get(tm_id)
        if tm is None:
            raise NotFoundError(f"TaskManager {tm_id or '(none)'} is not registered", remedy="see 'flinkpy cluster status' for the ids")
        d.registry.send(tm_id, message)
        hit = [j for j, r in d.jobs.items() if not r.graph.is_terminal() and any(e.tm_id == tm_id for e in r.graph.executions.values())]
        return {"taskmanager-id": tm_id, "pid": tm.pid}, hit

    def _hosts(self, job_id: Any) -> list[str]:
        """The TaskManagers running tasks of ``job_id`` now (all registered ones without a job).

        A seeded pick aimed at a job (``flinkpy fault chaos``) chooses among these, so the fault
        hits the job; with none (the job is between attempts) the fault is refused with a 409,
        which chaos reports as skipped."""
        if not job_id:
            return []
        d = self.dispatcher
        g = d.job(str(job_id)).graph
        hosts = sorted({e.tm_id for e in g.executions.values() if e.tm_id in d.registry.taskmanagers and e.state == "RUNNING"})
        if not hosts or g.is_terminal():
            raise ConflictError(f"job {job_id} has no running task on any TaskManager now (job {g.state})",
                                remedy="aim TaskManager faults at a job while it is RUNNING")
        return hosts

    def _job_fault(self, job_id: str, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        if kind not in f.JOB_FAULTS:
            raise ConfigurationError(f"{kind!r} is not a job fault", remedy=f"use one of {', '.join(f.JOB_FAULTS)}")
        rec = self.dispatcher.job(job_id)
        g = rec.graph
        vid, sub, operator = _target(g, job_id, kind, params)
        ex = g.executions[(vid, sub)]
        if g.is_terminal() or ex.state != "RUNNING":
            raise ConflictError(
                f"subtask {sub} of vertex {vid} ({g.vertices[vid]['name']}) of job {job_id} is {ex.state} (job {g.state})",
                remedy="inject faults into running tasks; wait for the job to be RUNNING",
            )
        target = {"vertex": vid, "vertex-name": g.vertices[vid]["name"], "subtask": sub, "attempt": ex.attempt,
                  "taskmanager-id": ex.tm_id, "pid": ex.pid, "operator": operator}
        self._send_job_fault(g, job_id, kind, params, ex, operator)
        entry = f.FaultRecord.injected(now_ms(), kind, target, g.state, g.restarts, **{k: params.get(k) for k in f.JOURNALED})
        f.record(rec.faults, entry)
        log.warning("job %s: fault %s injected into %s", job_id, kind, f.describe_target(target))
        return entry.to_json()

    def _send_job_fault(self, g: ExecutionGraph, job_id: str, kind: str, params: dict[str, Any], ex: Execution, operator: str | None) -> None:
        """Hand a validated job fault to the TaskManager running its target (or to the task itself)."""
        _JOB_HANDLERS[kind](_Aim(self.dispatcher, g, job_id, ex, operator), params)


class _Aim:
    """A job fault's validated target, and the ways to reach it: its TaskManager or the task."""

    def __init__(self, dispatcher: Dispatcher, g: ExecutionGraph, job_id: str, ex: Execution, operator: str | None) -> None:
        self.dispatcher, self.graph, self.job_id, self.execution, self.operator = dispatcher, g, job_id, ex, operator

    def to_taskmanager(self, message: Message) -> None:
        self.dispatcher.registry.send(self.execution.tm_id, message)

    def to_task(self, message: msgs.TaskControl) -> None:
        self.to_taskmanager(msgs.ToTask(job_id=self.job_id, exec_id=self.execution.exec_id, message=message))


def _kill_task(aim: _Aim, params: dict[str, Any]) -> None:
    sig = str(params.get("signal") or "KILL").upper().removeprefix("SIG")
    if sig not in f.SIGNALS:
        raise ConfigurationError(f"signal {sig} is not supported", remedy="use KILL or TERM")
    aim.to_taskmanager(msgs.KillTask(job_id=aim.job_id, exec_id=aim.execution.exec_id, signal=sig))


def _pause_task(aim: _Aim, params: dict[str, Any]) -> None:
    aim.to_taskmanager(msgs.PauseTask(job_id=aim.job_id, exec_id=aim.execution.exec_id, seconds=float(params.get("seconds") or 0)))


def _raise(aim: _Aim, params: dict[str, Any]) -> None:
    aim.to_task(msgs.InjectRaise(operator=aim.operator, after=int(params.get("after") or 0)))


def _fail_checkpoint(aim: _Aim, params: dict[str, Any]) -> None:
    aim.to_task(msgs.InjectDecline(count=int(params.get("count") or 1)))


def _network(aim: _Aim, params: dict[str, Any]) -> None:
    g, vid = aim.graph, aim.execution.vertex_id
    if not g.outputs_of(aim.execution):
        raise ConflictError(f"vertex {vid} ({g.vertices[vid]['name']}) of job {aim.job_id} has no output channels to slow or break",
                            remedy="aim the network fault at a vertex that sends to another one (a source, a keyed operator)")
    aim.to_task(msgs.InjectNetworkFault(drop=bool(params.get("drop")), delay_ms=float(params.get("delay_ms") or 0), seconds=float(params.get("seconds") or 0)))


#: how the JobManager carries out each job fault of the registry (flinkpy.faults.kinds)
_JOB_HANDLERS: dict[str, Callable[[_Aim, dict[str, Any]], None]] = {
    "kill-task": _kill_task, "pause-task": _pause_task, "raise": _raise, "fail-checkpoint": _fail_checkpoint, "network": _network,
}
#: and each cluster fault: (target, ids of the jobs it hits)
_CLUSTER_HANDLERS: dict[str, Callable[[FaultInjector, dict[str, Any]], tuple[dict[str, Any], list[str]]]] = {
    "kill-taskmanager": FaultInjector._kill_taskmanager, "pause-taskmanager": FaultInjector._pause_taskmanager,
    "storage-outage": FaultInjector._storage_outage,
}


def _target(g: ExecutionGraph, job_id: str, kind: str, params: dict[str, Any]) -> tuple[int, int, str | None]:
    """(vertex id, subtask, operator name or None) a job fault is aimed at.

    "pick" (a number in [0, 1) from the client's seeded random) chooses among the running
    subtasks when the client left vertex or subtask open: reproducible from the seed."""
    pick = params.get("pick")
    operator = None

    def running(vertex: int | None = None) -> list[tuple[int, int]]:
        keys = sorted(k for k, e in g.executions.items() if e.state == "RUNNING" and vertex in (None, k[0])
                      # a network fault acts on output channels: only producers can take it
                      and (kind != "network" or g.outputs_of(e)))
        if not keys or g.is_terminal():
            raise ConflictError(f"job {job_id} is {g.state} with no running task to inject {kind} into", remedy="inject faults into running jobs")
        return keys

    if params.get("vertex") is None and (kind == "fail-checkpoint" or pick is not None):
        # fail-checkpoint: any one task declining fails the checkpoint
        keys = running()
        vid, sub = keys[0] if pick is None else f.choose(keys, float(pick))
        return vid, sub, operator
    vid, operator = _resolve_vertex(g, job_id, params.get("vertex"))
    parallelism = g.vertices[vid]["parallelism"]
    if params.get("subtask") is None and pick is not None:
        vid, sub = f.choose(running(vid), float(pick))
    else:
        sub = int(params.get("subtask") or 0)
    if not 0 <= sub < parallelism:
        raise NotFoundError(f"vertex {vid} ({g.vertices[vid]['name']}) of job {job_id} has no subtask {sub}", remedy=f"subtasks are 0..{parallelism - 1}")
    return vid, sub, operator


def _resolve_vertex(g: ExecutionGraph, job_id: str, ref: Any) -> tuple[int, str | None]:
    """(vertex id, operator name or None) for a vertex id or name, or an operator's name, uid
    or operator id (which also names the operator a ``raise`` fault is aimed at)."""
    text = "" if ref is None else str(ref)
    for vid, v in g.vertices.items():
        if text in (str(vid), v["name"]):
            return vid, None
    for vid, v in g.vertices.items():
        names = v.get("operator_names") or []
        for i, name in enumerate(names):
            ids = ((v.get("uids") or [None] * len(names))[i], (v.get("operator_ids") or [None] * len(names))[i])
            if text in (name, *[x for x in ids if x]):
                return vid, name
    known = ", ".join(f"{vid} ({v['name']})" for vid, v in g.vertices.items())
    raise NotFoundError(f"job {job_id} has no vertex or operator {text or '(none)'}", remedy=f"its vertices: {known}")
