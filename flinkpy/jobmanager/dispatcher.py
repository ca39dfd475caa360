"""Dispatcher: the JobManager's state and the I/O around the pure ExecutionGraphs.

Accepts submissions (from REST), keeps the registered TaskManagers and their slots, feeds task
reports from TaskManagers into each job's ExecutionGraph, and carries out the actions it returns
(deploy, connect, cancel). One lock guards it all; a condition variable wakes long-polling
clients when a job changes state.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from flinkpy.errors import ClusterUnreachableError, ConfigurationError, ConflictError, InvalidProgramError, NotFoundError
from flinkpy.jobmanager.checkpointing import JobCheckpointing
from flinkpy.jobmanager.execution_graph import Cancel, Deploy, Execution, ExecutionGraph, Failover, JobTerminated, Restart, SendConnect
from flinkpy.jobmanager.slot_pool import NotEnoughSlots, SlotPool
from flinkpy.network.connection import Connection

log = logging.getLogger("flinkpy.jobmanager")


class JobRecoveringError(ClusterUnreachableError):
    """HA: the job exists, and the new leader is restoring it right now (REST answers 503)."""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class TaskManagerRecord:
    tm_id: str
    conn: Connection
    pid: int
    host: str
    slots: int
    log_path: str
    stdout_path: str
    last_heartbeat: float = field(default_factory=time.monotonic)


@dataclass
class JobRecord:
    graph: ExecutionGraph
    payloads: dict[int, bytes]
    python_path: list[str]
    config: dict[str, str]
    checkpointing: JobCheckpointing
    #: the fault journal: what `flinkpy fault ...` injected into this job (flinkpy.faults)
    faults: list[dict[str, Any]] = field(default_factory=list)


class Dispatcher:
    def __init__(self, heartbeat_timeout_s: float = 50.0, checkpoint_dir: str = "checkpoints"):
        self.default_checkpoint_dir = checkpoint_dir
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.taskmanagers: dict[str, TaskManagerRecord] = {}
        self.slots = SlotPool()
        self.jobs: dict[str, JobRecord] = {}
        #: submitted jobs waiting for slots other jobs hold: job id -> (deadline, timeout ms, restore point)
        self.waiting: dict[str, tuple[float, int, Any]] = {}
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.started_ms = now_ms()
        #: faults aimed at the cluster (TaskManagers, storage), also journaled in the jobs they hit
        self.cluster_faults: list[dict[str, Any]] = []
        #: high availability (flinkpy.jobmanager.leadership.Leadership), or None
        self.ha: Any = None
        #: the fencing token of this JobManager's leadership term (HA), None while a standby
        self.leader_epoch: int | None = None

    def standby_message(self) -> str | None:
        """Why this JobManager cannot serve requests about jobs (it is a standby), or None."""
        if self.ha is None or self.leader_epoch is not None:
            return None
        return self.ha.standby_message()

    # -- TaskManagers ------------------------------------------------------------------------

    def register_taskmanager(self, conn: Connection, info: dict[str, Any]) -> None:
        if self.ha is not None and info.get("epoch") != self.leader_epoch:
            # fencing: a TaskManager following another leadership term (or this JobManager is a
            # standby that has not been elected) is turned away
            log.warning("refused TaskManager %s: it follows leader epoch %s, this JobManager leads epoch %s",
                        info.get("tm_id"), info.get("epoch"), self.leader_epoch)
            conn.send("refused", {"reason": f"not the leader of epoch {info.get('epoch')}"})
            conn.close()
            return
        rec = TaskManagerRecord(
            tm_id=info["tm_id"],
            conn=conn,
            pid=info["pid"],
            host=info["host"],
            slots=int(info["slots"]),
            log_path=info.get("log_path", ""),
            stdout_path=info.get("stdout_path", ""),
        )
        with self.lock:
            self.taskmanagers[rec.tm_id] = rec
            self.slots.add_taskmanager(rec.tm_id, rec.slots)
            self._schedule_waiting()
            self.changed.notify_all()
        conn.send("registered", {"tm_id": rec.tm_id})
        log.info("TaskManager %s registered (pid %d, %d slots)", rec.tm_id, rec.pid, rec.slots)

    def heartbeat(self, tm_id: str) -> None:
        with self.lock:
            rec = self.taskmanagers.get(tm_id)
            if rec is not None:
                rec.last_heartbeat = time.monotonic()

    def taskmanager_lost(self, tm_id: str, reason: str) -> None:
        with self.lock:
            rec = self.taskmanagers.pop(tm_id, None)
            if rec is None:
                return
            # fencing: a TaskManager declared lost (e.g. frozen past the heartbeat timeout) finds
            # its connection closed if it ever wakes up, and stops its stale tasks
            rec.conn.close()
            self.slots.remove_taskmanager(tm_id)
            log.warning("TaskManager %s lost: %s", tm_id, reason)
            for job_id, job in self.jobs.items():
                self._perform(job_id, job.graph.on_taskmanager_lost(tm_id, reason, now_ms()))
            self.changed.notify_all()

    def check_heartbeats(self) -> None:
        now = time.monotonic()
        with self.lock:
            late = [tm for tm, rec in self.taskmanagers.items() if now - rec.last_heartbeat > self.heartbeat_timeout_s]
        for tm in late:
            self.taskmanager_lost(tm, f"no heartbeat from TaskManager {tm} for {self.heartbeat_timeout_s:.0f}s (heartbeat.timeout)")

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, document: dict[str, Any], *, job_id: str | None = None, history: Any = None) -> str:
        """Accept a job (from REST), or recover one (HA: a new leader passes the job's id, its
        latest checkpoint as ``document["restore"]`` and its ``history``)."""
        message = self.standby_message()
        if message is not None:
            raise ConflictError(message, remedy="submit to the leader (the CLI finds it through ZooKeeper)")
        recovered = job_id is not None
        try:
            meta = document["meta"]
            payloads = {int(k): base64.b64decode(v) for k, v in document["payloads"].items()}
            python_path = [str(p) for p in document.get("python_path", [])]
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidProgramError(f"malformed job submission: {e}") from e
        job_id = job_id or uuid.uuid4().hex
        config = dict(meta.get("config", {}))
        from flinkpy.jobmanager.restart_strategies import strategy_from_config

        failover = config.get("jobmanager.execution.failover-strategy", "region").lower()
        if failover not in ("full", "region"):
            raise ConfigurationError(
                f"jobmanager.execution.failover-strategy: {failover!r} is not a failover strategy",
                remedy="use full or region",
            )
        checkpointing_on = bool(config.get("execution.checkpointing.interval"))
        strategy = strategy_from_config(config, checkpointing_enabled=checkpointing_on)
        graph = ExecutionGraph(job_id, meta, now_ms(), strategy=strategy, failover=failover)
        checkpointing = JobCheckpointing(graph, config, config.get("execution.checkpointing.dir") or self.default_checkpoint_dir)
        restore_from = document.get("restore")  # a savepoint or retained checkpoint to start from
        if self.ha is not None:
            checkpointing.ha = self.ha.for_job(job_id)
            if not recovered:
                self.ha.job_submitted(job_id, document)  # before anything runs: a new leader finds it
            if history is not None:
                self.ha.apply_history(graph, checkpointing, history)
        with self.lock:
            self.jobs[job_id] = JobRecord(graph, payloads, python_path, config, checkpointing)
            log.info("job %s (%s) submitted: %d vertices", job_id, graph.name, len(graph.vertices))
            try:
                assignment = self.slots.allocate(job_id, graph.required_slots)
            except NotEnoughSlots as e:
                timeout_ms = _slot_request_timeout_ms(config)
                if graph.required_slots > self.slots.total or timeout_ms <= 0:
                    message = f"could not schedule job {job_id} ({graph.name}): {e}"
                    log.error(message)
                    self._perform(job_id, graph.fail_before_running(message + "; start more TaskManagers or lower the parallelism", now_ms()))
                    return job_id
                # the slots exist but other jobs hold them (one being cancelled, say): wait, as Flink does
                log.info("job %s (%s) waits up to %d ms for %d slot(s): %s", job_id, graph.name, timeout_ms, graph.required_slots, e)
                self.waiting[job_id] = (time.monotonic() + timeout_ms / 1000, timeout_ms, restore_from)
                graph.events.append({"timestamp": now_ms(), "type": "waiting-for-resources",
                                     "message": f"waiting up to {timeout_ms} ms (slot.request.timeout) for slots: {e}"})
                return job_id
            self._schedule(job_id, assignment, restore_from)
        return job_id

    def _schedule(self, job_id: str, assignment: dict[int, str], restore_from: Any) -> None:
        """Deploy a job on the slots it was given, restored from ``restore_from`` when set."""
        rec = self.jobs[job_id]
        graph, checkpointing, config = rec.graph, rec.checkpointing, rec.config
        if restore_from:
            directory, metadata = restore_from
            checkpointing.initial_restore = (directory, metadata)
            own = metadata.get("job_id") == job_id  # a JobManager failover recovers the job's own checkpoint
            claim = str(config.get("execution.state-recovery.claim-mode", "NO_CLAIM")).upper() == "CLAIM"
            checkpointing.coordinator.restored(
                int(metadata.get("checkpoint_id", 0)), directory, now_ms(), is_savepoint=metadata.get("kind") == "savepoint",
                metadata=metadata, owned=own or claim, foreign=not own,
            )
            graph.events.append({"timestamp": now_ms(), "type": "restored", "from": directory, "kind": metadata.get("kind")})
        self._perform(job_id, graph.schedule(assignment, now_ms()))
        self.changed.notify_all()

    def _schedule_waiting(self) -> None:
        """Give waiting jobs the slots that are free now (in submission order); fail those whose
        slot.request.timeout passed. Called when slots are released or added, and on every tick."""
        for job_id, (deadline, timeout_ms, restore_from) in list(self.waiting.items()):
            if job_id not in self.waiting:  # scheduled or failed by a nested call
                continue
            rec = self.jobs.get(job_id)
            if rec is None or rec.graph.state != "CREATED":  # cancelled while waiting
                self.waiting.pop(job_id, None)
                continue
            try:
                assignment = self.slots.allocate(job_id, rec.graph.required_slots)
            except NotEnoughSlots as e:
                if time.monotonic() >= deadline:
                    self.waiting.pop(job_id, None)
                    message = f"could not schedule job {job_id} ({rec.graph.name}) within slot.request.timeout ({timeout_ms} ms): {e}"
                    log.error(message)
                    self._perform(job_id, rec.graph.fail_before_running(message + "; cancel jobs that hold slots, start more TaskManagers or lower the parallelism", now_ms()))
                continue
            self.waiting.pop(job_id, None)
            log.info("job %s (%s) got its %d slot(s)", job_id, rec.graph.name, rec.graph.required_slots)
            self._schedule(job_id, assignment, restore_from)

    def job(self, job_id: str) -> JobRecord:
        rec = self.jobs.get(job_id)
        if rec is None and self.ha is not None and job_id in self.ha.recovering:
            raise JobRecoveringError(f"job {job_id} is being recovered by the new leader", remedy="retry in a moment")
        if rec is None:
            raise NotFoundError(f"job {job_id} not found on this cluster", remedy="list jobs with 'flinkpy list -a'")
        return rec

    def cancel(self, job_id: str) -> None:
        with self.lock:
            rec = self.job(job_id)
            if rec.graph.is_terminal():
                raise ConflictError(
                    f"job {job_id} is already {rec.graph.state} and cannot be canceled",
                    remedy="only running jobs can be canceled",
                )
            log.info("canceling job %s", job_id)
            self._perform(job_id, rec.graph.cancel(now_ms()))
            self.changed.notify_all()

    def on_listening(self, job_id: str, exec_id: str, host: str, port: int | None, pid: int | None = None) -> None:
        with self.lock:
            rec = self.jobs.get(job_id)
            if rec is not None:
                self._perform(job_id, rec.graph.on_listening(exec_id, host, port, now_ms(), pid))

    def on_task_state(self, job_id: str, exec_id: str, state: str, info: Any, tm_id: str | None) -> None:
        with self.lock:
            rec = self.jobs.get(job_id)
            if rec is None:
                return
            if state == "FAILED":
                log.warning("task %s of job %s failed: %s", exec_id, job_id, (info or {}).get("message"))
            ex = rec.graph.by_exec_id(exec_id)
            self._perform(job_id, rec.graph.on_task_state(exec_id, state, info, now_ms(), tm_id))
            if state == "FINISHED" and ex is not None:
                self._checkpoint_actions(job_id, rec.checkpointing.coordinator.task_finished((ex.vertex_id, ex.subtask), now_ms()))
            self.changed.notify_all()

    # -- checkpoints -------------------------------------------------------------------------

    def tick_checkpoints(self) -> None:
        with self.lock:
            for job_id, rec in self.jobs.items():
                if not rec.graph.all_running():
                    for r in rec.checkpointing.savepoints.values():
                        if r["status"] == "QUEUED" and rec.graph.is_terminal():
                            r.update(status="FAILED", failure=f"job {job_id} is {rec.graph.state}")
                    continue
                cp = rec.checkpointing
                if cp.savepoints:
                    self._checkpoint_actions(job_id, cp.start_queued_savepoints(now_ms()))
                if cp.periodic:
                    self._checkpoint_actions(job_id, cp.coordinator.tick(now_ms()))

    def trigger_savepoint(self, job_id: str, target_dir: str | None, *, stop: bool = False, drain: bool = False, fmt: str = "canonical") -> str:
        with self.lock:
            rec = self.job(job_id)
            if rec.graph.state != "RUNNING":
                raise ConflictError(f"job {job_id} is {rec.graph.state}: savepoints are taken of running jobs", remedy="see 'flinkpy list -a'")
            fmt = fmt.lower()
            if fmt not in ("canonical", "native"):
                raise ConfigurationError(f"savepoint format {fmt!r} is not known", remedy="use canonical or native")
            trigger_id = rec.checkpointing.request_savepoint(target_dir, stop=stop, drain=drain, fmt=fmt, now=now_ms())
            log.info("job %s: %s requested (trigger %s, target %s)", job_id, "stop with savepoint" if stop else "savepoint", trigger_id, target_dir)
            return trigger_id

    def savepoint_status(self, job_id: str, trigger_id: str) -> dict[str, Any]:
        with self.lock:
            rec = self.job(job_id)
            r = rec.checkpointing.savepoints.get(trigger_id)
            if r is None:
                raise NotFoundError(f"no savepoint trigger {trigger_id} for job {job_id}", remedy="use the id 'savepoint trigger --detached' printed")
            if r["status"] == "COMPLETED":
                return {"status": {"id": "COMPLETED"}, "operation": {"location": r["location"]}, "checkpoint_id": r["checkpoint_id"]}
            if r["status"] == "FAILED":
                reason = r.get("failure", "failed")
                return {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": {"class": "flinkpy.SavepointException", "stack-trace": reason}}}
            return {"status": {"id": "IN_PROGRESS"}, "checkpoint_id": r["checkpoint_id"]}

    def trigger_checkpoint(self, job_id: str, kind: str = "checkpoint") -> int:
        with self.lock:
            rec = self.job(job_id)
            if not rec.graph.all_running():
                raise ConflictError(
                    f"job {job_id} is {rec.graph.state} and not all of its tasks are running: no checkpoint can be taken",
                    remedy="trigger checkpoints of running jobs only",
                )
            cid, actions = rec.checkpointing.coordinator.trigger(now_ms(), kind=kind)
            self._checkpoint_actions(job_id, actions)
            return cid

    def on_task_event(self, job_id: str, exec_id: str, op: str, body: dict[str, Any]) -> None:
        with self.lock:
            rec = self.jobs.get(job_id)
            ex = rec.graph.by_exec_id(exec_id) if rec else None
            if rec is None or ex is None:
                return
            coord = rec.checkpointing.coordinator
            key = (ex.vertex_id, ex.subtask)
            if op == "checkpoint_ack":
                actions = coord.acknowledge(key, body["checkpoint_id"], {"state": body["state"]}, body.get("metrics", {}), now_ms())
            elif op == "checkpoint_decline":
                actions = coord.decline(key, body["checkpoint_id"], body.get("reason", "declined"), now_ms())
            else:
                return
            self._checkpoint_actions(job_id, actions)
            self.changed.notify_all()

    def _checkpoint_actions(self, job_id: str, actions: list[Any]) -> None:
        rec = self.jobs[job_id]

        def send(ex: Execution, op: str, body: dict[str, Any]) -> None:
            self._send(ex.tm_id, "to_task", {"job_id": job_id, "exec_id": ex.exec_id, "op": op, "body": body})

        def later(fn: Any) -> None:
            with self.lock:
                self._checkpoint_actions(job_id, fn())
                self.changed.notify_all()

        def fail_job(reason: str) -> None:
            log.error("job %s fails: %s", job_id, reason)
            self._perform(job_id, rec.graph.fail_global("flinkpy.CheckpointException", reason, now_ms()))

        rec.checkpointing.perform(actions, send, later, fail_job)

    def wait_for_terminal(self, job_id: str, timeout_s: float) -> ExecutionGraph:
        deadline = time.monotonic() + timeout_s
        with self.lock:
            rec = self.job(job_id)
            while not rec.graph.is_terminal():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.changed.wait(remaining)
            return rec.graph

    # -- injected faults (`flinkpy fault ...`) -------------------------------------------------

    def fault(self, job_id: str | None, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        """Validate a fault's target, journal it, and have the TaskManager hosting it carry it out.

        Job faults (``job_id`` given): kill-task, pause-task, raise, fail-checkpoint, network;
        params vertex (id, name, operator name, uid or operator id), subtask, signal, seconds,
        after, count, delay_ms, drop. Cluster faults: kill-taskmanager, pause-taskmanager (param taskmanager),
        storage-outage (seconds). Unknown targets raise NotFoundError; a job or subtask that is
        not running raises ConflictError. Returns the journal entry.
        """
        from flinkpy import faults as f

        with self.lock:
            if job_id is not None:
                return self._job_fault(job_id, kind, params)
            if kind not in f.CLUSTER_FAULTS:
                raise ConfigurationError(f"{kind!r} is not a cluster fault", remedy=f"use one of {', '.join(f.CLUSTER_FAULTS)}")
            seconds = params.get("seconds")
            if kind == "storage-outage":
                until = time.time() + float(seconds or 0)
                from flinkpy.checkpoint.storage import set_outage

                set_outage(until)  # the JobManager's own writes (_metadata)
                for tm in list(self.taskmanagers):
                    self._send(tm, "fault", {"action": "storage-outage", "until": until})
                target: dict[str, Any] = {"what": "checkpoint storage"}
                hit = [j for j, r in self.jobs.items() if not r.graph.is_terminal()]
            else:
                tm_id = str(params.get("taskmanager") or "")
                if not tm_id and params.get("pick") is not None and self.taskmanagers:
                    tm_id = f.choose(list(self.taskmanagers), float(params["pick"]))
                tm = self.taskmanagers.get(tm_id)
                if tm is None:
                    raise NotFoundError(f"TaskManager {tm_id or '(none)'} is not registered", remedy="see 'flinkpy cluster status' for the ids")
                target = {"taskmanager-id": tm_id, "pid": tm.pid}
                if kind == "kill-taskmanager":
                    self._send(tm_id, "fault", {"action": "kill-self", "signal": "KILL"})
                else:
                    self._send(tm_id, "fault", {"action": "pause-self", "seconds": float(seconds or 0)})
                hit = [j for j, r in self.jobs.items() if not r.graph.is_terminal() and any(e.tm_id == tm_id for e in r.graph.executions.values())]
            entry = f.journal_entry(now_ms(), kind, target, "-", 0, seconds=seconds)
            entry["jobs"] = hit
            self.cluster_faults.append(entry)
            for j in hit:
                g = self.jobs[j].graph
                self.jobs[j].faults.append(f.journal_entry(entry["time"], kind, target, g.state, g.restarts, seconds=seconds))
            log.warning("fault %s injected into %s (jobs hit: %s)", kind, f.describe_target(target), hit or "none")
            return entry

    def _job_fault(self, job_id: str, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        from flinkpy import faults as f

        if kind not in f.JOB_FAULTS:
            raise ConfigurationError(f"{kind!r} is not a job fault", remedy=f"use one of {', '.join(f.JOB_FAULTS)}")
        rec = self.job(job_id)
        g = rec.graph
        operator = None
        # "pick" (a number in [0, 1) from the client's seeded random) chooses among the running
        # subtasks when the client left vertex or subtask open: reproducible from the seed
        pick = params.get("pick")

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
        else:
            vid, operator = _resolve_vertex(g, job_id, params.get("vertex"))
            parallelism = g.vertices[vid]["parallelism"]
            if params.get("subtask") is None and pick is not None:
                vid, sub = f.choose(running(vid), float(pick))
            else:
                sub = int(params.get("subtask") or 0)
            if not 0 <= sub < parallelism:
                raise NotFoundError(f"vertex {vid} ({g.vertices[vid]['name']}) of job {job_id} has no subtask {sub}", remedy=f"subtasks are 0..{parallelism - 1}")
        ex = g.executions[(vid, sub)]
        if g.is_terminal() or ex.state != "RUNNING":
            raise ConflictError(
                f"subtask {sub} of vertex {vid} ({g.vertices[vid]['name']}) of job {job_id} is {ex.state} (job {g.state})",
                remedy="inject faults into running tasks; wait for the job to be RUNNING",
            )
        target = {"vertex": vid, "vertex-name": g.vertices[vid]["name"], "subtask": sub, "attempt": ex.attempt,
                  "taskmanager-id": ex.tm_id, "pid": ex.pid, "operator": operator}
        task = {"job_id": job_id, "exec_id": ex.exec_id}
        if kind == "kill-task":
            sig = str(params.get("signal") or "KILL").upper().removeprefix("SIG")
            if sig not in f.SIGNALS:
                raise ConfigurationError(f"signal {sig} is not supported", remedy="use KILL or TERM")
            self._send(ex.tm_id, "fault", dict(task, action="kill-task", signal=sig))
        elif kind == "pause-task":
            self._send(ex.tm_id, "fault", dict(task, action="pause-task", seconds=float(params.get("seconds") or 0)))
        elif kind == "raise":
            self._send(ex.tm_id, "to_task", dict(task, op="fault_raise", body={"operator": operator, "after": int(params.get("after") or 0)}))
        elif kind == "network":
            if not g.outputs_of(ex):
                raise ConflictError(f"vertex {vid} ({g.vertices[vid]['name']}) of job {job_id} has no output channels to slow or break",
                                    remedy="aim the network fault at a vertex that sends to another one (a source, a keyed operator)")
            body = {"drop": bool(params.get("drop")), "delay_ms": float(params.get("delay_ms") or 0), "seconds": float(params.get("seconds") or 0)}
            self._send(ex.tm_id, "to_task", dict(task, op="fault_network", body=body))
        else:
            self._send(ex.tm_id, "to_task", dict(task, op="fault_decline", body={"count": int(params.get("count") or 1)}))
        keep = ("signal", "seconds", "after", "count", "delay_ms", "drop")
        entry = f.journal_entry(now_ms(), kind, target, g.state, g.restarts, **{k: params.get(k) for k in keep})
        rec.faults.append(entry)
        log.warning("job %s: fault %s injected into %s", job_id, kind, f.describe_target(target))
        return entry

    def fault_history(self, job_id: str | None) -> list[dict[str, Any]]:
        """The journal; entries not read before get the job's state now as their state after."""
        from flinkpy import faults as f

        with self.lock:
            if job_id is None:
                return [dict(e) for e in self.cluster_faults]
            rec = self.job(job_id)
            return [dict(e) for e in f.settle(rec.faults, rec.graph.state, rec.graph.restarts)]

    # -- actions -----------------------------------------------------------------------------

    def _send(self, tm_id: str | None, op: str, body: Any) -> None:
        rec = self.taskmanagers.get(tm_id) if tm_id else None
        if rec is None:
            return
        try:
            rec.conn.send(op, body)
        except OSError as e:
            log.warning("sending %s to TaskManager %s failed: %s", op, tm_id, e)

    def _perform(self, job_id: str, actions: list[Any]) -> None:
        rec = self.jobs[job_id]
        g = rec.graph
        for a in actions:
            if isinstance(a, Deploy):
                ex = a.execution
                v = g.vertices[ex.vertex_id]
                self._send(
                    ex.tm_id,
                    "deploy",
                    {
                        "job_id": job_id,
                        "exec_id": ex.exec_id,
                        "vertex_id": ex.vertex_id,
                        "vertex_name": v["name"],
                        "subtask": ex.subtask,
                        "parallelism": v["parallelism"],
                        "max_parallelism": v["max_parallelism"],
                        "attempt": ex.attempt,
                        "payload": rec.payloads[ex.vertex_id],
                        "inputs": g.inputs_of(ex),
                        "outputs": g.outputs_of(ex),
                        "python_path": rec.python_path,
                        "runtime_mode": g.meta.get("runtime_mode", "STREAMING"),
                        "config": dict(_task_config(rec.config), checkpoint_dir=rec.checkpointing.checkpoint_dir,
                                       checkpointing_mode=rec.checkpointing.options.mode),
                        "job_parameters": {k[5:]: v for k, v in rec.config.items() if k.startswith("$job.")},
                        "restore": rec.checkpointing.restore_spec(ex),
                    },
                )
            elif isinstance(a, SendConnect):
                self._send(a.execution.tm_id, "connect", {"job_id": job_id, "exec_id": a.execution.exec_id, "peers": a.peers})
            elif isinstance(a, Cancel):
                self._send(a.execution.tm_id, "cancel", {"job_id": job_id, "exec_id": a.execution.exec_id})
            elif isinstance(a, JobTerminated):
                self.slots.release(job_id)
                log.info("job %s (%s) switched to %s", job_id, g.name, a.state)
                if self.ha is not None:
                    self.ha.job_terminated(job_id)
                self._checkpoint_actions(job_id, rec.checkpointing.coordinator.shutdown(now_ms(), job_state=a.state))
                self.waiting.pop(job_id, None)
                self._schedule_waiting()  # its slots may be what a waiting job needs
            elif isinstance(a, Failover):
                log.info("job %s: restarting %d task(s) after a failure (%s failover)", job_id, len(a.keys), g.failover)
                self._checkpoint_actions(job_id, rec.checkpointing.coordinator.failover(a.keys, now_ms()))
            elif isinstance(a, Restart):
                self._restart(job_id, a.keys)

    def _restart(self, job_id: str, keys: frozenset[tuple[int, int]]) -> None:
        """Find slots for the restarted subtasks (those whose TaskManager is gone need new ones),
        then deploy them restored from the latest completed checkpoint."""
        rec = self.jobs[job_id]
        g = rec.graph
        subtasks = sorted({k[1] for k in keys})
        lost = [i for i in subtasks if g.slot_of_subtask.get(i) not in self.taskmanagers]
        if len(lost) > self.slots.available:
            message = (
                f"job {job_id} waits for {len(lost)} slot(s) to restart ({self.slots.available} free): "
                "start a TaskManager or wait for the lost one to come back"
            )
            log.warning(message)
            g.waiting_for_slots(keys, message, now_ms())
            return
        new_slots = {i: self.slots.allocate_one(job_id) for i in lost}
        latest = rec.checkpointing.latest_restore_point()
        if latest is not None:
            log.info("job %s: restoring %d task(s) from checkpoint %s at %s", job_id, len(keys), latest[0], latest[1])
            self._checkpoint_actions(job_id, rec.checkpointing.coordinator.restored(latest[0], latest[1], now_ms()))
        self._perform(job_id, g.restart(keys, new_slots, now_ms()))

    def tick(self) -> None:
        """Periodic work: due restarts and checkpoint triggers/timeouts."""
        with self.lock:
            for job_id, rec in self.jobs.items():
                if rec.graph.pending_restarts:
                    self._perform(job_id, rec.graph.due_restarts(now_ms()))
                    self.changed.notify_all()
            if self.waiting:
                self._schedule_waiting()
                self.changed.notify_all()
        self.tick_checkpoints()

    def restart_strategy(self, job_id: str) -> dict[str, Any]:
        with self.lock:
            g = self.job(job_id).graph
            return {
                "jid": job_id,
                "restart-strategy": g.strategy.describe() if g.strategy is not None else {"type": "none"},
                "failover-strategy": g.failover,
                "restarts": g.restarts,
                "counted-failures": g.strategy.counted_failures() if g.strategy is not None else 0,
                "history": [e for e in g.events if e["type"] == "restart-strategy-changed"],
            }

    def set_restart_strategy(self, job_id: str, config: dict[str, str]) -> dict[str, Any]:
        """Replace a running job's restart strategy; it applies from the next failure."""
        from flinkpy.jobmanager.restart_strategies import strategy_from_config

        with self.lock:
            rec = self.job(job_id)
            if rec.graph.is_terminal():
                raise ConflictError(f"job {job_id} is {rec.graph.state}: its restart strategy no longer matters", remedy="set it on a running job")
            strategy = strategy_from_config(config, checkpointing_enabled=rec.checkpointing.periodic)
            previous = rec.graph.strategy.describe() if rec.graph.strategy is not None else {"type": "none"}
            rec.graph.set_restart_strategy(strategy, strategy.describe(), previous, now_ms())
            log.info("job %s: restart strategy changed from %s to %s", job_id, previous, strategy.describe())
        return self.restart_strategy(job_id)


def _task_config(config: dict[str, str]) -> dict[str, Any]:
    """The few settings a task process needs, already parsed."""
    from flinkpy.config import parse_duration_ms

    def get(key: str, default: str) -> str:
        return config.get(key, default)

    return {
        "buffer_timeout_ms": parse_duration_ms(get("execution.buffer-timeout.interval", "100 ms")),
        "auto_watermark_ms": parse_duration_ms(get("pipeline.auto-watermark-interval", "200 ms")),
        "segment_size": _parse_bytes(get("taskmanager.memory.segment-size", "32 kb")),
        "incremental": str(get("execution.checkpointing.incremental", "false")).lower() == "true",
        "state_backend": {k: v for k, v in config.items() if k.startswith("state.backend.")},
        "credit": int(get("taskmanager.network.memory.buffers-per-channel", "2"))
        + max(0, int(get("taskmanager.network.memory.floating-buffers-per-gate", "8")) // 4),
    }


def _parse_bytes(text: str) -> int:
    t = str(text).strip().lower().replace(" ", "")
    for suffix, mult in (("kb", 1024), ("k", 1024), ("mb", 1 << 20), ("m", 1 << 20), ("b", 1)):
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


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


def _slot_request_timeout_ms(config: dict[str, Any]) -> int:
    from flinkpy.config import parse_duration_ms

    raw = config.get("slot.request.timeout")
    return 300_000 if raw in (None, "") else parse_duration_ms(raw)
