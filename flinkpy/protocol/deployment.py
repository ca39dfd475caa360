"""The task deployment descriptor: everything a task process needs to run one subtask.

The JobManager builds one per execution attempt; the TaskManager adds what only it knows (the
cluster secret, its host, an injected storage outage in progress) and hands it to the task
process it starts. The task never reads the JobManager's configuration: the few settings it
needs travel, already parsed, as :class:`TaskConfig`.

A job's Python files travel beside it as a :class:`JobArtifact` (Flink's permanent blob): the
descriptor names it, and a TaskManager fetches it from the JobManager once per job, on a
connection of its own (:class:`FetchArtifact`), before it starts the job's first task there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flinkpy.protocol.codec import Message, message


@dataclass(frozen=True)
class InputGateDeployment:
    """One input edge of the task: which upstream subtasks send to it."""

    edge_id: int
    source_vertex: int
    partitioner: str
    producers: list[int]
    #: the input of the task's head operator it feeds: 1, or 2 (a two-input operator's second)
    type_number: int = 1


@dataclass(frozen=True)
class ResultPartitionDeployment:
    """One output edge of the task: which downstream subtasks it sends to, and how."""

    edge_id: int
    target_vertex: int
    partitioner: str
    target_parallelism: int
    target_max_parallelism: int
    consumers: list[int]


@dataclass(frozen=True)
class TaskConfig:
    """The settings of a task, parsed by the JobManager (the defaults are only for tests that
    build a descriptor by hand; a deployment always carries every one)."""

    buffer_timeout_ms: int = 100
    auto_watermark_ms: int = 200
    segment_size: int = 32768
    #: credit a receiver announces per channel at start (credit-based flow control): its exclusive
    #: buffers plus a fixed quarter of the gate's floating ones (no shared pool: every channel gets
    #: the same share, used or not)
    credit: int = 4
    incremental: bool = False
    #: the ``state.backend.*`` keys of the job's configuration
    state_backend: dict[str, str] = field(default_factory=dict)
    checkpoint_dir: str = ""
    checkpointing_mode: str = "EXACTLY_ONCE"
    #: unaligned checkpoints: output channels queue instead of blocking, barriers overtake
    unaligned: bool = False
    #: periodic checkpoints in a streaming job: at the end of its input a task ends its operators,
    #: sends END_OF_DATA and stays until the job's final checkpoint completed (sinks commit the
    #: rest of their output there, not on their own); otherwise it finishes at once
    final_checkpoint: bool = False
    #: time between two metric reports (``metrics.fetcher.update-interval``); 0: no reports
    metrics_interval_ms: int = 0
    #: buffer debloating (``taskmanager.network.memory.buffer-debloat.*``): the target time in
    #: flight on the task's input channels, 0 when off; the period, samples and threshold
    debloat_target_ms: int = 0
    debloat_period_ms: int = 200
    debloat_samples: int = 20
    debloat_threshold_pct: int = 25
    #: the smallest buffer size debloating announces (``taskmanager.memory.min-segment-size``)
    min_segment_size: int = 256
    #: the largest frame a data channel carries (``taskmanager.network.max-frame-size``)
    max_frame_size: int = 256 << 20


@dataclass(frozen=True)
class JobArtifact:
    """A file the JobManager keeps for a job and TaskManagers fetch: the archive of the job's
    Python files (:mod:`flinkpy.program.archive`), named by its SHA-256."""

    sha256: str
    size: int


@dataclass(frozen=True)
class TlsFiles:
    """One kind of TLS's certificate material as PEM paths on the host (flinkpy.network.tls
    loads them): what a task is given to open its data channels under internal TLS."""

    #: this process's certificate chain and private key, in one PEM file
    keystore: str | None
    #: the CA certificates a peer's certificate must be signed by
    truststore: str | None
    key_password: str | None = None
    #: the server asks clients for a certificate (always for internal TLS)
    mutual: bool = True
    #: the private key, in a PEM file of its own (None: it is in the keystore)
    key: str | None = None


@dataclass(frozen=True)
class TaskDeploymentDescriptor:
    """One execution attempt of one subtask of a job vertex (an operator chain)."""

    job_id: str
    exec_id: str
    vertex_id: int
    vertex_name: str
    subtask: int
    parallelism: int
    max_parallelism: int
    attempt: int
    #: the pickled VertexPayload (the chain's operators and user functions): only the task
    #: process unpickles it, after putting ``python_path`` on ``sys.path`` (the TaskManager
    #: sets it to the import roots of the job's unpacked ``artifact``, when the job has one)
    payload: bytes
    inputs: list[InputGateDeployment]
    outputs: list[ResultPartitionDeployment]
    config: TaskConfig
    python_path: list[str] = field(default_factory=list)
    runtime_mode: str = "STREAMING"
    job_parameters: dict[str, str] = field(default_factory=dict)
    #: what to restore from (flinkpy.checkpoint.restore.restore_spec), None for a fresh start
    restore: dict[str, Any] | None = None
    #: the job's Python files, which the TaskManager fetches and unpacks (None: nothing shipped)
    artifact: JobArtifact | None = None
    # -- added by the TaskManager ------------------------------------------------------------
    secret: bytes = b""
    #: the address the task's consumers connect to (taskmanager.host)
    host: str = "127.0.0.1"
    #: the local address its output channels listen on (taskmanager.bind-host); "" is ``host``
    bind_host: str = ""
    #: the first port to try for that listener (taskmanager.data.port); 0 is any free port
    data_port: int = 0
    #: deployed during an injected storage outage: its end (epoch seconds), else 0
    storage_outage_until: float = 0.0
    #: internal TLS (security.ssl.internal.*): the files its data channels use; None is off
    tls: TlsFiles | None = None

    def describe(self) -> str:
        """``name (subtask/parallelism)``, as Flink names a subtask in its logs."""
        return f"{self.vertex_name} ({self.subtask + 1}/{self.parallelism})"


@message("deploy")
@dataclass(frozen=True)
class DeployTask(Message):
    """JobManager -> TaskManager -> task: start this execution attempt."""

    descriptor: TaskDeploymentDescriptor


@message("fetch_artifact")
@dataclass(frozen=True)
class FetchArtifact(Message):
    """TaskManager -> JobManager, on a connection of its own: send me this job's artifact.
    Answered with :class:`ArtifactChunk` messages, or one :class:`ArtifactUnavailable`."""

    job_id: str
    sha256: str


@message("artifact_chunk")
@dataclass(frozen=True)
class ArtifactChunk(Message):
    """JobManager -> TaskManager: the next piece of an artifact (chunked: frames stay small)."""

    data: bytes
    last: bool


@message("artifact_unavailable")
@dataclass(frozen=True)
class ArtifactUnavailable(Message):
    """JobManager -> TaskManager: the artifact cannot be sent, and why."""

    reason: str


@message("release_job")
@dataclass(frozen=True)
class ReleaseJob(Message):
    """JobManager -> TaskManager: the job ended for good; drop what you keep for it (its
    unpacked artifact)."""

    job_id: str
