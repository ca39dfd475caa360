"""FaultInjector: the JobManager's end of ``flinkpy fault ...``.

It checks that a fault's target exists and is running (a clear 404 or 409 otherwise, before
anything happens), journals the fault in the records of the jobs it hits, and hands it to the
TaskManager that hosts the target, which carries it out. The kinds, the journal entries and the
seeded choice of a target live in :mod:`flinkpy.faults`; this module only adds the cluster's
state and the sending.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from flinkpy import faults as f
from flinkpy.clock import now_ms
from flinkpy.errors import ConfigurationError, ConflictError, NotFoundError
from flinkpy.jobmanager.execution_graph import Execution, ExecutionGraph
from flinkpy.protocol import messages as msgs

if TYPE_CHECKING:
    from flinkpy.jobmanager.dispatcher import Dispatcher

log = logging.getLogger("flinkpy.jobmanager")

#: the parameters of a job fault that its journal entry keeps
_JOURNALED = ("signal", "seconds", "after", "count", "delay_ms", "drop")


class FaultInjector:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        #: faults aimed at the cluster (TaskManagers, storage), also journaled in the jobs they hit
        self.cluster_faults: list[dict[str, Any]] = []

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
                return [dict(e) for e in self.cluster_faults]
            rec = d.job(job_id)
            return f.journal_view(rec.faults, rec.graph.state, rec.graph.restarts)

    def _cluster_fault(self, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        d = self.dispatcher
        if kind not in f.CLUSTER_FAULTS:
            raise ConfigurationError(f"{kind!r} is not a cluster fault", remedy=f"use one of {', '.join(f.CLUSTER_FAULTS)}")
        seconds = params.get("seconds")
        taskmanagers = d.registry.taskmanagers
        if kind == "storage-outage":
            until = time.time() + float(seconds or 0)
            from flinkpy.checkpoint.storage import set_outage

            set_outage(until)  # the JobManager's own writes (_metadata)
            for tm_id in list(taskmanagers):
                d.registry.send(tm_id, msgs.StorageOutage(until=until))
            target: dict[str, Any] = {"what": "checkpoint storage"}
            hit = [j for j, r in d.jobs.items() if not r.graph.is_terminal()]
        else:
            tm_id = str(params.get("taskmanager") or "")
            if not tm_id and params.get("pick") is not None and taskmanagers:
                tm_id = f.choose(self._hosts(params.get("job")) or list(taskmanagers), float(params["pick"]))
            tm = taskmanagers.get(tm_id)
            if tm is None:
                raise NotFoundError(f"TaskManager {tm_id or '(none)'} is not registered", remedy="see 'flinkpy cluster status' for the ids")
            target = {"taskmanager-id": tm_id, "pid": tm.pid}
            if kind == "kill-taskmanager":
                d.registry.send(tm_id, msgs.KillTaskManager(signal="KILL"))
            else:
                d.registry.send(tm_id, msgs.PauseTaskManager(seconds=float(seconds or 0)))
            hit = [j for j, r in d.jobs.items() if not r.graph.is_terminal() and any(e.tm_id == tm_id for e in r.graph.executions.values())]
        entry = f.journal_entry(now_ms(), kind, target, "-", 0, seconds=seconds)
        entry["jobs"] = hit
        self.cluster_faults.append(entry)
        for j in hit:
            g = d.jobs[j].graph
            f.record(d.jobs[j].faults, f.journal_entry(entry["time"], kind, target, g.state, g.restarts, seconds=seconds))
        log.warning("fault %s injected into %s (jobs hit: %s)", kind, f.describe_target(target), hit or "none")
        return entry

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
        entry = f.journal_entry(now_ms(), kind, target, g.state, g.restarts, **{k: params.get(k) for k in _JOURNALED})
        f.record(rec.faults, entry)
        log.warning("job %s: fault %s injected into %s", job_id, kind, f.describe_target(target))
        return entry

    def _send_job_fault(self, g: ExecutionGraph, job_id: str, kind: str, params: dict[str, Any], ex: Execution, operator: str | None) -> None:
        """Hand a validated job fault to the TaskManager running its target (or to the task itself)."""
        send = self.dispatcher.registry.send
        tm_id, vid = ex.tm_id, ex.vertex_id
        exec_id = ex.exec_id

        def to_task(message: msgs.TaskControl) -> None:
            send(tm_id, msgs.ToTask(job_id=job_id, exec_id=exec_id, message=message))

        if kind == "kill-task":
            sig = str(params.get("signal") or "KILL").upper().removeprefix("SIG")
            if sig not in f.SIGNALS:
                raise ConfigurationError(f"signal {sig} is not supported", remedy="use KILL or TERM")
            send(tm_id, msgs.KillTask(job_id=job_id, exec_id=exec_id, signal=sig))
        elif kind == "pause-task":
            send(tm_id, msgs.PauseTask(job_id=job_id, exec_id=exec_id, seconds=float(params.get("seconds") or 0)))
        elif kind == "raise":
            to_task(msgs.InjectRaise(operator=operator, after=int(params.get("after") or 0)))
        elif kind == "network":
            if not g.outputs_of(ex):
                raise ConflictError(f"vertex {vid} ({g.vertices[vid]['name']}) of job {job_id} has no output channels to slow or break",
                                    remedy="aim the network fault at a vertex that sends to another one (a source, a keyed operator)")
            to_task(msgs.InjectNetworkFault(drop=bool(params.get("drop")), delay_ms=float(params.get("delay_ms") or 0), seconds=float(params.get("seconds") or 0)))
        else:
            to_task(msgs.InjectDecline(count=int(params.get("count") or 1)))


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
