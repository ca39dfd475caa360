"""Dispatcher: the JobManager's jobs, and the I/O around their pure ExecutionGraphs.

It accepts submissions (from REST), feeds the reports of TaskManagers and tasks into each job's
ExecutionGraph, and carries out the actions the graph returns (deploy, connect, cancel, restart,
job ended). The rest of the JobManager is in components of one concept each, which the Dispatcher
owns and which share its lock:

- ``registry``: the registered TaskManagers, their slots and heartbeats (TaskManagerRegistry);
- ``scheduler``: slots for a submitted job, or a wait for them (Scheduler);
- ``restarts``: restarts after failures, and the restart strategy over REST (Restarts);
- ``checkpoints``: checkpoint and savepoint triggers, acks and their actions (CheckpointHandler);
- ``faults``: ``flinkpy fault ...`` (FaultInjector).

One re-entrant lock guards all of it; a condition variable on it wakes long-polling clients when
a job changes.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flinkpy.checkpoint.writability import KEY as WRITABLE_KEY, check_writable
from flinkpy.jobmanager.storage_probe import ProbeTarget, StorageProbes, is_local
from flinkpy.clock import now_ms
from flinkpy.errors import ClusterUnreachableError, ConflictError, InvalidProgramError, NotFoundError
from flinkpy.faults import FaultRecord
from flinkpy.jobmanager.artifacts import DOCUMENT_KEY, ArtifactStore
from flinkpy.jobmanager.checkpoint_handler import CheckpointHandler
from flinkpy.jobmanager.checkpointing import JobCheckpointing
from flinkpy.jobmanager.execution_graph import Action, Cancel, Deploy, ExecutionGraph, Failover, JobTerminated, Rescaled, Restart, SendConnect
from flinkpy.jobmanager.fault_injector import FaultInjector
from flinkpy.jobmanager.job_journal import JobJournal, LostJob
from flinkpy.jobmanager.job_options import JobOptions
from flinkpy.jobmanager.restarts import Restarts
from flinkpy.jobmanager.scheduler import Scheduler
from flinkpy.jobmanager.slot_pool import SlotPool
from flinkpy.jobmanager.taskmanager_registry import TaskManagerRecord, TaskManagerRegistry
from flinkpy.metrics.store import MetricStore
from flinkpy.network.connection import Connection
from flinkpy.protocol.deployment import DeployTask, InputGateDeployment, JobArtifact, ResultPartitionDeployment, TaskDeploymentDescriptor
from flinkpy.protocol.messages import (CancelTask, CheckpointAck, CheckpointDecline, ConnectTask, FinalCommitAnswer, Refused, Registered,
                                       RegisterTaskManager, TaskEndOfData)

if TYPE_CHECKING:
    from flinkpy.jobmanager.leadership import Leadership

log = logging.getLogger("flinkpy.jobmanager")


class JobRecoveringError(ClusterUnreachableError):
    """HA: the job exists, and the new leader is restoring it right now (REST answers 503)."""


@dataclass
class JobRecord:
    """What the JobManager keeps of one job."""

    graph: ExecutionGraph
    payloads: dict[int, bytes]
    python_path: list[str]
    options: JobOptions
    checkpointing: JobCheckpointing
    #: the fault journal: what `flinkpy fault ...` injected into this job (flinkpy.faults)
    faults: list[FaultRecord] = field(default_factory=list)
    #: the job's Python files, kept in ``Dispatcher.artifacts`` (None: none were shipped)
    artifact: JobArtifact | None = None
    #: the submission document as it was accepted (the archive by reference, no restore
    #: point): what an upgrade resubmits to roll back to this very program
    submission: dict[str, Any] = field(default_factory=dict)


class Dispatcher:
    def __init__(self, heartbeat_timeout_s: float = 50.0, checkpoint_dir: str = "checkpoints", artifacts: ArtifactStore | None = None):
        self.default_checkpoint_dir = checkpoint_dir
        #: the jobs' shipped Python files (the JobManager process puts them in the home or HA storage)
        self.artifacts = artifacts or ArtifactStore(checkpoint_dir.rstrip("/").rpartition("/")[0] + "/blobs" if "/" in checkpoint_dir else "blobs")
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.jobs: dict[str, JobRecord] = {}
        self.started_ms = now_ms()
        self.registry = TaskManagerRegistry(heartbeat_timeout_s)
        self.scheduler = Scheduler(self)
        self.restarts = Restarts(self)
        self.checkpoints = CheckpointHandler(self)
        self.faults = FaultInjector(self)
        #: the latest figures tasks and TaskManagers reported (job show, top, GET /metrics)
        self.metrics = MetricStore()
        #: at submission: can every TaskManager write a job's local checkpoint directory?
        self.storage_probes = StorageProbes()
        #: high availability, or None
        self.ha: Leadership | None = None
        #: the fencing token of this JobManager's leadership term (HA), None while a standby
        self.leader_epoch: int | None = None
        #: without high availability: the record of the running jobs, and those a JobManager
        #: that died left behind (see flinkpy.jobmanager.job_journal)
        self.journal: JobJournal | None = None
        self.lost: dict[str, LostJob] = {}

    @property
    def taskmanagers(self) -> dict[str, TaskManagerRecord]:
        return self.registry.taskmanagers

    @property
    def slots(self) -> SlotPool:
        return self.registry.slots

    def standby_message(self) -> str | None:
        """Why this JobManager cannot serve requests about jobs (it is a standby), or None."""
        if self.ha is None or self.leader_epoch is not None:
            return None
        return self.ha.standby_message()

    # -- TaskManagers ------------------------------------------------------------------------

    def register_taskmanager(self, conn: Connection, info: RegisterTaskManager) -> None:
        if self.ha is not None and info.epoch != self.leader_epoch:
            # fencing: a TaskManager following another leadership term (or this JobManager is a
            # standby that has not been elected) is turned away
            log.warning("refused TaskManager %s: it follows leader epoch %s, this JobManager leads epoch %s",
                        info.tm_id, info.epoch, self.leader_epoch)
            conn.send(Refused(reason=f"not the leader of epoch {info.epoch}"))
            conn.close()
            return
        with self.lock:
            if info.tm_id in self.registry.taskmanagers:
                # it left its old connection, and the tasks deployed over it, before we noticed
                self.taskmanager_lost(info.tm_id, f"TaskManager {info.tm_id} registered again: the tasks it ran before are gone")
            rec = self.registry.add(conn, info)
            self.scheduler.schedule_waiting()
            self.changed.notify_all()
        conn.send(Registered(tm_id=rec.tm_id))
        log.info("TaskManager %s registered (pid %d, %d slots)", rec.tm_id, rec.pid, rec.slots)

    def heartbeat(self, tm_id: str) -> None:
        with self.lock:
            self.registry.heartbeat(tm_id)

    def taskmanager_lost(self, tm_id: str, reason: str, conn: Connection | None = None) -> None:
        with self.lock:
            if self.registry.remove(tm_id, conn) is None:
                return
            log.warning("TaskManager %s lost: %s", tm_id, reason)
            for job_id, job in self.jobs.items():
                self.perform(job_id, job.graph.on_taskmanager_lost(tm_id, reason, now_ms()))
            self.changed.notify_all()

    def check_heartbeats(self) -> None:
        with self.lock:
            late = self.registry.late()
        timeout_s = self.registry.heartbeat_timeout_s
        for tm in late:
            self.taskmanager_lost(tm, f"no heartbeat from TaskManager {tm} for {timeout_s:.0f}s (heartbeat.timeout)")

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, document: dict[str, Any], *, job_id: str | None = None, history: bytes | None = None) -> str:
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
        options = JobOptions.parse(meta.get("config", {}), self.default_checkpoint_dir)
        if not recovered and (options.checkpointing.interval_ms is not None or options.settings.get(WRITABLE_KEY)):
            check_writable(options.checkpoint_dir, job_id)  # exit 8 now, not a restart loop later
            if is_local(options.checkpoint_dir):
                # each host has its own file system: every TaskManager must be able to write it too
                with self.lock:
                    targets = [ProbeTarget(tm.tm_id, tm.host, tm.conn.send) for tm in self.registry.taskmanagers.values()]
                self.storage_probes.check(targets, options.checkpoint_dir, job_id)
        graph = ExecutionGraph(job_id, meta, now_ms(), strategy=options.restart_strategy, failover=options.failover)
        checkpointing = JobCheckpointing(graph, options.checkpointing, options.checkpoint_dir, options.savepoint_dir,
                                         options.savepoint_schedule)
        restore = document.get("restore")  # a savepoint or retained checkpoint to start from
        if restore and not recovered:
            _check_channel_state(graph, restore)
        artifact = self.artifacts.accept(job_id, document)  # before HA keeps the document: a reference only
        if self.ha is not None:
            checkpointing.ha = self.ha.for_job(job_id)
            if not recovered:
                self.ha.job_submitted(job_id, document)  # before anything runs: a new leader finds it
            if history is not None:
                self.ha.apply_history(graph, checkpointing, history)
        with self.lock:
            submission = {k: document[k] for k in ("meta", "payloads", "python_path", DOCUMENT_KEY) if k in document}
            self.jobs[job_id] = JobRecord(graph, payloads, python_path, options, checkpointing, artifact=artifact, submission=submission)
            log.info("job %s (%s) submitted: %d vertices", job_id, graph.name, len(graph.vertices))
            if self.journal is not None:
                self.journal.record(job_id, graph.name, graph.timestamps.get("CREATED", now_ms()), options.checkpoint_dir)
            self.scheduler.schedule(job_id, (restore[0], restore[1]) if restore else None)
        return job_id

    def job(self, job_id: str) -> JobRecord:
        rec = self.jobs.get(job_id)
        if rec is None and self.ha is not None and job_id in self.ha.recovering:
            raise JobRecoveringError(f"job {job_id} is being recovered by the new leader", remedy="retry in a moment")
        if rec is None:
            raise NotFoundError(f"job {job_id} not found on this cluster", remedy="list jobs with 'flinkpy list -a'")
        return rec

    def cancel(self, job_id: str, *, retain_latest_checkpoint: bool = False) -> None:
        """Cancel the job; ``retain_latest_checkpoint`` keeps its newest completed checkpoint
        whatever its retention setting says (an upgrade restores the next job from it)."""
        with self.lock:
            rec = self.job(job_id)
            if rec.graph.is_terminal():
                raise ConflictError(
                    f"job {job_id} is already {rec.graph.state} and cannot be canceled",
                    remedy="only running jobs can be canceled",
                )
            log.info("canceling job %s%s", job_id, " (keeping its latest checkpoint)" if retain_latest_checkpoint else "")
            if retain_latest_checkpoint:
                rec.checkpointing.coordinator.retain_latest_on_cancel = True
            self.perform(job_id, rec.graph.cancel(now_ms()))
            self.changed.notify_all()

    def rescale(self, job_id: str, *, parallelism: int | None = None, per_vertex: dict[str, int] | None = None) -> dict[str, Any]:
        """Restart the running job in place at a new parallelism from its latest checkpoint
        (Flink's adaptive scheduler): no savepoint, no resubmission. Refused when the job is not
        RUNNING with every task running, has no checkpoint yet, or its latest one holds in-flight
        data of unaligned channels (which only the same parallelism can take back)."""
        from flinkpy.checkpoint.restore import channel_state_conflict
        from flinkpy.jobmanager.rescaling import target_parallelism

        with self.lock:
            rec = self.job(job_id)
            g = rec.graph
            if g.state != "RUNNING" or g.pending_restarts or g.pending_rescale is not None or not g.all_running():
                raise ConflictError(f"job {job_id} is {g.state} and not all its tasks run: it cannot be rescaled now",
                                    remedy=f"wait until 'flinkpy job show {job_id}' shows it RUNNING")
            point = rec.checkpointing.latest_restore_point()
            if point is None:
                raise ConflictError(f"job {job_id} has no completed checkpoint to rescale from",
                                    remedy=f"trigger one with 'flinkpy checkpoint trigger {job_id}' (flinkpy job rescale does)")
            new = target_parallelism(g.vertices, g.edges, parallelism=parallelism, per_vertex=per_vertex or {})
            checkpoint_id, _, directory, metadata = point
            conflict = channel_state_conflict(metadata, [(v.get("name", ""), list(v.get("operator_ids") or []), new[vid])
                                                         for vid, v in g.vertices.items()])
            if conflict:
                raise ConflictError(
                    f"checkpoint {checkpoint_id} of job {job_id} is unaligned and holds in-flight data that only the same "
                    f"parallelism can take back: {conflict}",
                    remedy=f"take an aligned snapshot first ('flinkpy savepoint trigger {job_id}': savepoints are aligned), then rescale")
            extra = max(new.values()) - g.required_slots
            if extra > self.registry.slots.available:
                raise ConflictError(f"rescaling job {job_id} needs {extra} more slot(s) but the cluster has {self.registry.slots.available} free",
                                    remedy="start more TaskManagers, or rescale less")
            log.info("job %s: rescaling in place from checkpoint %d at %s", job_id, checkpoint_id, directory)
            self.perform(job_id, g.rescale(new, checkpoint_id, now_ms()))
            self.changed.notify_all()
            return {"jid": job_id, "checkpoint_id": checkpoint_id, "checkpoint": directory,
                    "parallelism": {v["name"]: new[vid] for vid, v in g.vertices.items()}}

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

    # -- reports from tasks --------------------------------------------------------------------

    def on_listening(self, job_id: str, exec_id: str, host: str, port: int | None, pid: int | None = None) -> None:
        with self.lock:
            rec = self.jobs.get(job_id)
            if rec is not None:
                self.perform(job_id, rec.graph.on_listening(exec_id, host, port, now_ms(), pid))

    def on_task_state(self, job_id: str, exec_id: str, state: str, info: Any, tm_id: str | None) -> None:
        with self.lock:
            rec = self.jobs.get(job_id)
            if rec is None:
                return
            if state == "FAILED":
                log.warning("task %s of job %s failed: %s", exec_id, job_id, (info or {}).get("message"))
            ex = rec.graph.by_exec_id(exec_id)
            self.perform(job_id, rec.graph.on_task_state(exec_id, state, info, now_ms(), tm_id))
            if state == "FINISHED" and ex is not None:
                self.checkpoints.perform(job_id, rec.checkpointing.coordinator.task_finished((ex.vertex_id, ex.subtask), now_ms()))
            self.changed.notify_all()

    def final_commit(self, job_id: str, exec_id: str) -> FinalCommitAnswer:
        """May task ``exec_id`` commit at the end of its input? Only the job's current attempt
        of it, running, while the job runs: a stale attempt's commit would duplicate what the
        newer attempt replays."""
        with self.lock:
            rec = self.jobs.get(job_id)
            ex = rec.graph.by_exec_id(exec_id) if rec is not None else None
            if ex is None:
                return FinalCommitAnswer(False, f"attempt {exec_id} of job {job_id} is not the current one (a newer attempt runs)")
            if ex.state != "RUNNING" or rec.graph.state != "RUNNING":
                return FinalCommitAnswer(False, f"the task is {ex.state} in a {rec.graph.state} job", retry=True)
            return FinalCommitAnswer(True)

    def on_task_event(self, job_id: str, exec_id: str, event: CheckpointAck | CheckpointDecline | TaskEndOfData) -> None:
        self.checkpoints.on_task_event(job_id, exec_id, event)

    def tick(self) -> None:
        """Periodic work: due restarts, jobs waiting for slots, checkpoint triggers and timeouts."""
        with self.lock:
            if self.journal is not None:
                for job_id in [j for j in self.journal.recorded if j in self.jobs and self.jobs[j].graph.is_terminal()]:
                    self.journal.forget(job_id)
            self.restarts.due()
            if self.scheduler.waiting:
                self.scheduler.schedule_waiting()
                self.changed.notify_all()
        self.checkpoints.tick()

    # -- actions -----------------------------------------------------------------------------

    def perform(self, job_id: str, actions: list[Action]) -> None:
        """Carry out what a job's ExecutionGraph decided. Lock held."""
        rec = self.jobs[job_id]
        g = rec.graph
        for a in actions:
            if isinstance(a, Deploy):
                ex = a.execution
                self.registry.send(ex.tm_id, DeployTask(self._deployment(rec, a)))
            elif isinstance(a, SendConnect):
                self.registry.send(a.execution.tm_id, ConnectTask(job_id=job_id, exec_id=a.execution.exec_id, peers=a.peers))
            elif isinstance(a, Cancel):
                self.registry.send(a.execution.tm_id, CancelTask(job_id=job_id, exec_id=a.execution.exec_id))
            elif isinstance(a, JobTerminated):
                self.registry.slots.release(job_id)
                log.info("job %s (%s) switched to %s", job_id, g.name, a.state)
                if self.ha is not None:
                    self.ha.job_terminated(job_id)
                self.checkpoints.perform(job_id, rec.checkpointing.coordinator.shutdown(now_ms(), job_state=a.state))
                self.scheduler.job_terminated(job_id)
                self.artifacts.job_terminated(job_id, self.registry)
            elif isinstance(a, Failover):
                log.info("job %s: restarting %d task(s) after a failure (%s failover)", job_id, len(a.keys), g.failover)
                self.checkpoints.perform(job_id, rec.checkpointing.coordinator.failover(a.keys, now_ms()))
            elif isinstance(a, Restart):
                self.restarts.restart(job_id, a.keys)
            elif isinstance(a, Rescaled):
                rec.checkpointing.coordinator.rescaled(a.keys, [k for k in a.keys if g.vertices[k[0]]["is_source"]])
                for tm_id in a.freed:
                    self.registry.slots.release_one(job_id, tm_id)
                log.info("job %s: rescaled to %s", job_id, {v["name"]: v["parallelism"] for v in g.vertices.values()})

    @staticmethod
    def _deployment(rec: JobRecord, deploy: Deploy) -> TaskDeploymentDescriptor:
        """The task deployment descriptor of one execution attempt."""
        g, ex = rec.graph, deploy.execution
        v = g.vertices[ex.vertex_id]
        return TaskDeploymentDescriptor(
            job_id=g.job_id,
            exec_id=ex.exec_id,
            vertex_id=ex.vertex_id,
            vertex_name=v["name"],
            subtask=ex.subtask,
            parallelism=v["parallelism"],
            max_parallelism=v["max_parallelism"],
            attempt=ex.attempt,
            payload=rec.payloads[ex.vertex_id],
            inputs=[InputGateDeployment(**i) for i in g.inputs_of(ex)],
            outputs=[ResultPartitionDeployment(**o) for o in g.outputs_of(ex)],
            python_path=rec.python_path,
            runtime_mode=g.meta.get("runtime_mode", "STREAMING"),
            config=dataclasses.replace(rec.options.task, checkpoint_dir=rec.checkpointing.checkpoint_dir,
                                       checkpointing_mode=rec.checkpointing.options.mode,
                                       unaligned=rec.checkpointing.unaligned,
                                       final_checkpoint=_waits_for_final_checkpoint(rec, g)),
            job_parameters=dict(rec.options.job_parameters),
            restore=rec.checkpointing.restore_spec(ex),
            artifact=rec.artifact,
        )


def _waits_for_final_checkpoint(rec: Any, graph: ExecutionGraph) -> bool:
    """Whether a task deployed now waits, at the end of its input, for the job's final
    checkpoint (:mod:`flinkpy.jobmanager.final_checkpoint`): in a streaming job with periodic
    checkpoints, unless that checkpoint completed already (a task restarted after it restores
    it, and finishes at once)."""
    return (rec.checkpointing.options.interval_ms is not None and graph.meta.get("runtime_mode", "STREAMING") == "STREAMING"
            and not rec.checkpointing.coordinator.final.completed)


def _check_channel_state(graph: ExecutionGraph, restore: Any) -> None:
    """Refuse, before anything starts, a restore of an unaligned checkpoint's in-flight data onto
    other channels (another parallelism or chain): whoever submitted it, client or plain REST."""
    from flinkpy.checkpoint.restore import channel_state_conflict

    directory, metadata = restore[0], restore[1]
    vertices = [(v.get("name", ""), list(v.get("operator_ids") or []), int(v["parallelism"])) for v in graph.vertices.values()]
    conflict = channel_state_conflict(metadata, vertices)
    if conflict:
        raise InvalidProgramError(
            f"unaligned checkpoint {metadata.get('checkpoint_id')} at {directory} holds in-flight data that only "
            f"the same job at the same parallelism can take back: {conflict}",
            remedy="restore it unchanged, then take a savepoint (savepoints are aligned) and rescale from that",
        )
