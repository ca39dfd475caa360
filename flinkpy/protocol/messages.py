"""The control messages, by the connection they travel on.

- JobManager <-> TaskManager: registration, heartbeats, deployment and cancellation of tasks,
  messages forwarded to a task (:class:`ToTask`) or from one (:class:`FromTask`), task state
  changes, cluster faults, shutdown.
- TaskManager <-> task process: the deployment itself (:class:`~.deployment.DeployTask`), the
  producers' addresses (:class:`ConnectTask`), checkpoint triggers and notifications, injected
  faults; back: listening, running, checkpoint acknowledgements and declines, finished, failed.
- TaskManager <-> its task launcher (``flinkpy.taskmanager.zygote``): fork a task, forked,
  exited.

The checkpoint barrier is here too: the trigger carries it to a source, and the task forwards
the same object downstream in its data channels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from flinkpy.protocol.codec import Message, message

# -- checkpoints ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointBarrier:
    """Checkpoint ``checkpoint_id``'s marker in the streams: every record before it belongs to
    the snapshot. A savepoint's barrier names its own ``directory``; ``stop`` and ``drain`` make
    it a stop-with-savepoint (with ``drain``, event time ends first)."""

    checkpoint_id: int
    timestamp: int
    mode: str = "EXACTLY_ONCE"
    kind: str = "checkpoint"
    #: incremental snapshots of a checkpoint build on this checkpoint's files
    base: int | None = None
    directory: str | None = None
    stop: bool = False
    drain: bool = False
    #: an unaligned checkpoint's barrier: it overtakes the buffers in flight (channel state)
    unaligned: bool = False
    #: an aligned checkpoint's barrier that a task whose alignment lasts this long (ms) switches
    #: to unaligned (``execution.checkpointing.aligned-checkpoint-timeout``); 0: never switches
    aligned_timeout_ms: int = 0
    #: the job's final checkpoint: every source's input has ended, and the barrier follows the
    #: end of data in every channel (always aligned); its completion lets the tasks finish
    final: bool = False


@message("trigger_checkpoint")
@dataclass(frozen=True)
class TriggerCheckpoint(Message):
    """JobManager -> source task: take a snapshot and emit this barrier."""

    barrier: CheckpointBarrier


@message("notify_checkpoint_complete")
@dataclass(frozen=True)
class NotifyCheckpointComplete(Message):
    """JobManager -> task: every task acknowledged the checkpoint (sinks commit now); ``final``:
    it was the job's final checkpoint, taken after the end of all input: the tasks may finish."""

    checkpoint_id: int
    final: bool = False


@message("notify_checkpoint_aborted")
@dataclass(frozen=True)
class NotifyCheckpointAborted(Message):
    """JobManager -> task: the checkpoint will never complete (an aligning task lets go)."""

    checkpoint_id: int


@message("checkpoint_ack")
@dataclass(frozen=True)
class CheckpointAck(Message):
    """Task -> JobManager: the task's snapshot is stored; ``state`` holds its handles."""

    checkpoint_id: int
    state: list[dict[str, Any]]
    metrics: dict[str, Any] = field(default_factory=dict)


@message("checkpoint_decline")
@dataclass(frozen=True)
class CheckpointDecline(Message):
    """Task -> JobManager: the task could not snapshot; the checkpoint fails."""

    checkpoint_id: int
    reason: str = "declined"
    details: str | None = None


# -- injected faults (`flinkpy fault ...`) ------------------------------------------------------


@message("fault_raise")
@dataclass(frozen=True)
class InjectRaise(Message):
    """Task: the ``after``-th next record of ``operator`` raises InjectedFault."""

    operator: str | None = None
    after: int = 0


@message("fault_decline")
@dataclass(frozen=True)
class InjectDecline(Message):
    """Task: decline the next ``count`` checkpoints."""

    count: int = 1


@message("fault_network")
@dataclass(frozen=True)
class InjectNetworkFault(Message):
    """Task: break (``drop``) or slow down (``delay_ms`` for ``seconds``) the output channels."""

    drop: bool = False
    delay_ms: float = 0.0
    seconds: float = 0.0


@message("fault_storage_outage")
@dataclass(frozen=True)
class StorageOutage(Message):
    """TaskManager and its tasks: checkpoint storage fails until ``until`` (epoch seconds)."""

    until: float


@message("fault_kill_taskmanager")
@dataclass(frozen=True)
class KillTaskManager(Message):
    """TaskManager: send ``signal`` (a name without SIG) to yourself."""

    signal: str = "KILL"


@message("fault_pause_taskmanager")
@dataclass(frozen=True)
class PauseTaskManager(Message):
    """TaskManager: stop for ``seconds`` (SIGSTOP, then SIGCONT from a helper process)."""

    seconds: float


@message("fault_kill_task")
@dataclass(frozen=True)
class KillTask(Message):
    """TaskManager: send ``signal`` (a name without SIG) to this task's process."""

    job_id: str
    exec_id: str
    signal: str = "KILL"


@message("fault_pause_task")
@dataclass(frozen=True)
class PauseTask(Message):
    """TaskManager: stop this task's process for ``seconds``."""

    job_id: str
    exec_id: str
    seconds: float


# -- a task's life (TaskManager <-> task process) -------------------------------------------------


@message("connect")
@dataclass(frozen=True)
class ConnectTask(Message):
    """JobManager -> TaskManager -> task: the producers' addresses, by ``"vertex:subtask"``."""

    job_id: str
    exec_id: str
    peers: dict[str, tuple[str, int]]


@message("listening")
@dataclass(frozen=True)
class TaskListening(Message):
    """Task -> JobManager: where the task's consumers connect (``port`` None: no outputs)."""

    host: str
    port: int | None
    pid: int


@message("running")
@dataclass(frozen=True)
class TaskRunning(Message):
    """Task -> TaskManager: connected, operators open, processing."""


@message("finished")
@dataclass(frozen=True)
class TaskFinished(Message):
    """Task -> TaskManager: the end of input was processed; the task's metrics (totals)."""

    metrics: dict[str, Any]


@message("failed")
@dataclass(frozen=True)
class TaskFailed(Message):
    """Task -> TaskManager: the task failed with this exception (the user's traceback)."""

    exception: str
    message: str
    stacktrace: str
    task: str

    def info(self) -> dict[str, Any]:
        """The failure as the ExecutionGraph records it."""
        return {"exception": self.exception, "message": self.message, "stacktrace": self.stacktrace, "task": self.task}


@message("end_of_data")
@dataclass(frozen=True)
class TaskEndOfData(Message):
    """Task -> JobManager (through its TaskManager): this source's input ended and its operators
    ended theirs; the task waits for the job's final checkpoint (taken once every source has
    said so) to complete before it finishes."""


@message("final_commit_request")
@dataclass(frozen=True)
class FinalCommitRequest(Message):
    """Task -> JobManager (through its TaskManager): the sink reached the end of its input and
    asks before it commits what no checkpoint will: only the job's current attempt of the task
    may (a stale one, cut off by a partition while a newer attempt replays its input, may not)."""


@message("final_commit_answer")
@dataclass(frozen=True)
class FinalCommitAnswer(Message):
    """JobManager -> task: whether it may commit at the end of its input; why not, if not, and
    whether to ask again (``retry``: the job is restarting or failing elsewhere, and the task
    may yet be cancelled or carry on)."""

    granted: bool
    reason: str = ""
    retry: bool = False


@message("task_metrics")
@dataclass(frozen=True)
class TaskMetrics(Message):
    """Task -> JobManager (through its TaskManager), every ``metrics.fetcher.update-interval``:
    the task's figures by Flink's metric names (:mod:`flinkpy.metrics.names`) as of
    ``timestamp`` (epoch ms), and the user's metrics (:meth:`MetricRegistry.sample`)."""

    timestamp: int
    figures: dict[str, float]
    user: list[dict[str, Any]] = field(default_factory=list)


#: what the JobManager (through the TaskManager) may send to a running task
TaskControl = Union[TriggerCheckpoint, NotifyCheckpointComplete, NotifyCheckpointAborted, InjectRaise, InjectDecline, InjectNetworkFault, StorageOutage,
                    FinalCommitAnswer]
#: what a task reports that the TaskManager passes on to the JobManager as it is
TaskEvent = Union[TaskListening, CheckpointAck, CheckpointDecline, TaskMetrics, FinalCommitRequest]

# -- JobManager <-> TaskManager ------------------------------------------------------------------


@message("register")
@dataclass(frozen=True)
class RegisterTaskManager(Message):
    """TaskManager -> JobManager: offer ``slots``. ``epoch``: the leadership term it follows (HA)."""

    tm_id: str
    pid: int
    host: str
    slots: int
    log_path: str = ""
    stdout_path: str = ""
    epoch: int | None = None


@message("probe_storage")
@dataclass(frozen=True)
class ProbeStorage(Message):
    """JobManager -> TaskManager, at a job's submission: can you write the job's checkpoint
    directory ``url`` (a local file system, which each host has its own of), and do you see the
    file ``marker`` the JobManager wrote in it (is it the same directory)?"""

    probe_id: str
    url: str
    job_id: str
    marker: str = ""


@message("storage_probed")
@dataclass(frozen=True)
class StorageProbed(Message):
    """TaskManager -> JobManager: the answer to :class:`ProbeStorage`; ``error`` empty when it can."""

    probe_id: str
    tm_id: str
    error: str = ""


@message("registered")
@dataclass(frozen=True)
class Registered(Message):
    """JobManager -> TaskManager: accepted."""

    tm_id: str


@message("refused")
@dataclass(frozen=True)
class Refused(Message):
    """JobManager -> TaskManager: not accepted (fencing: another leadership term)."""

    reason: str


@message("heartbeat")
@dataclass(frozen=True)
class Heartbeat(Message):
    """TaskManager -> JobManager: alive, with ``tasks`` task processes."""

    tm_id: str
    tasks: int


@message("taskmanager_metrics")
@dataclass(frozen=True)
class TaskManagerMetrics(Message):
    """TaskManager -> JobManager, periodically: what its process tree (itself, its launcher,
    its tasks) costs the machine, by Flink's metric names."""

    tm_id: str
    timestamp: int
    figures: dict[str, float]


@message("cancel")
@dataclass(frozen=True)
class CancelTask(Message):
    """JobManager -> TaskManager: end this task (SIGTERM, then SIGKILL)."""

    job_id: str
    exec_id: str


@message("to_task")
@dataclass(frozen=True)
class ToTask(Message):
    """JobManager -> TaskManager: pass ``message`` on to this task."""

    job_id: str
    exec_id: str
    message: TaskControl


@message("from_task")
@dataclass(frozen=True)
class FromTask(Message):
    """TaskManager -> JobManager: ``message`` came from this task."""

    job_id: str
    exec_id: str
    message: TaskEvent


@message("task_state")
@dataclass(frozen=True)
class TaskStateChanged(Message):
    """TaskManager -> JobManager: the task is RUNNING, FINISHED (``info``: its metrics), FAILED
    (``info``: the failure) or CANCELED; final states only once its process has exited."""

    job_id: str
    exec_id: str
    state: str
    info: dict[str, Any] | None = None
    tm_id: str | None = None


@message("shutdown")
@dataclass(frozen=True)
class Shutdown(Message):
    """JobManager -> TaskManager: the cluster stops; cancel every task and exit."""


# -- TaskManager <-> its task launcher (one message per SOCK_SEQPACKET packet) -------------------


@message("launcher_ready")
@dataclass(frozen=True)
class LauncherReady(Message):
    """Launcher -> TaskManager: the engine is imported; tasks can be forked."""

    pid: int


@message("spawn_task")
@dataclass(frozen=True)
class SpawnTask(Message):
    """TaskManager -> launcher: fork a task on the control socket passed with this packet."""

    token: int


@message("task_spawned")
@dataclass(frozen=True)
class TaskSpawned(Message):
    """Launcher -> TaskManager: the task asked for with ``token`` runs as ``pid``."""

    token: int
    pid: int


@message("task_exited")
@dataclass(frozen=True)
class TaskExited(Message):
    """Launcher -> TaskManager: task process ``pid`` ended (a negative code: the signal)."""

    pid: int
    code: int
