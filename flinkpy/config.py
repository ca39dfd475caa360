"""flinkpy's configuration: one typed schema, four sources, errors that say where a value came from.

Operators set options the way they do for Flink: a ``flinkpy.yaml`` in the cluster's home,
environment variables for containers, and ``-D key=value`` on the command line. Every source is
checked against one schema table, so a typo is refused at the door (with the closest real key
suggested) instead of being silently ignored by a process three hops away.

Precedence, lowest first: defaults < ``flinkpy.yaml`` < ``FLINKPY_*`` environment < overrides.

>>> cfg = load_config(env={}, overrides={"parallelism.default": "4"})
>>> cfg.get("parallelism.default"), cfg.get("execution.buffer-timeout.interval")
(4, 100)

To add a key, add one line to ``SCHEMA`` (see ``_option``); nothing else needs to change.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Iterable, Mapping, TypeVar

from flinkpy.errors import ConfigurationError
from flinkpy.units import format_duration_ms, format_memory_size, parse_duration_ms, parse_memory_size

CONFIG_FILE_NAME = "flinkpy.yaml"
ENV_PREFIX = "FLINKPY_"


# --------------------------------------------------------------------------- value types


T = TypeVar("T")


class ValueType(Generic[T]):
    """How one kind of value is parsed from YAML/strings and written back as a string.

    ``parse`` raises ValueError for a value it refuses; the caller names the key and ``allowed``.
    """

    allowed: str = "a value"

    def parse(self, raw: object) -> T:
        raise NotImplementedError

    def format(self, value: T) -> str:
        return str(value)


class IntType(ValueType[int]):
    def __init__(self, minimum: int | None = None) -> None:
        self.minimum = minimum
        if minimum == 1:
            self.allowed = "a positive integer"
        elif minimum is not None:
            self.allowed = f"an integer >= {minimum}"
        else:
            self.allowed = "an integer"

    def parse(self, raw: object) -> int:
        # bool is an int in Python, but `true` is never a sensible slot count.
        if isinstance(raw, bool):
            raise ValueError
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str) and re.fullmatch(r"\s*[+-]?\d+\s*", raw):
            value = int(raw)
        else:
            raise ValueError
        if self.minimum is not None and value < self.minimum:
            raise ValueError
        return value


class BoolType(ValueType[bool]):
    allowed = "true or false"

    def parse(self, raw: object) -> bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise ValueError

    def format(self, value: bool) -> str:
        return "true" if value else "false"


class StringType(ValueType[str]):
    allowed = "a string"

    def parse(self, raw: object) -> str:
        if isinstance(raw, (dict, list)):
            raise ValueError
        return str(raw)


class FloatType(ValueType[float]):
    """A decimal number, optionally bounded (both bounds inclusive)."""

    def __init__(self, minimum: float | None = None, maximum: float | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum
        if minimum is not None and maximum is not None:
            self.allowed = f"a number from {minimum:g} to {maximum:g}"
        elif minimum is not None:
            self.allowed = f"a number >= {minimum:g}"
        elif maximum is not None:
            self.allowed = f"a number <= {maximum:g}"
        else:
            self.allowed = "a number"

    def parse(self, raw: object) -> float:
        if isinstance(raw, bool):
            raise ValueError
        if isinstance(raw, (int, float)):
            value = float(raw)
        elif isinstance(raw, str) and re.fullmatch(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", raw):
            value = float(raw)
        else:
            raise ValueError
        if value != value or (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise ValueError
        return value

    def format(self, value: float) -> str:
        return repr(float(value))


class EnumType(ValueType[str]):
    """Matched case-insensitively (as Flink does), stored in the schema's spelling."""

    def __init__(self, *values: str) -> None:
        self.values = values
        self.allowed = "one of " + ", ".join(values)

    def parse(self, raw: object) -> str:
        if isinstance(raw, str):
            for value in self.values:
                if value.lower() == raw.strip().lower():
                    return value
        raise ValueError


class DurationType(ValueType[int]):
    allowed = "a duration such as '100 ms', '10 s', '10 min' or '1 h' (a bare number is milliseconds)"

    def __init__(self, minimum_ms: int | None = None) -> None:
        #: the shortest duration that makes sense (a period of 0 would spin)
        self.minimum_ms = minimum_ms
        if minimum_ms is not None:
            self.allowed = f"a duration of at least {format_duration_ms(minimum_ms)} such as '100 ms', '10 s' or '1 min' (a bare number is milliseconds)"

    def parse(self, raw: object) -> int:
        value = parse_duration_ms(raw)
        if self.minimum_ms is not None and value < self.minimum_ms:
            raise ValueError
        return value

    def format(self, value: int) -> str:
        return format_duration_ms(int(value))


class MemorySizeType(ValueType[int]):
    """Flink's memory sizes: binary units (1 kb = 1024 bytes); a bare number is bytes."""

    allowed = "a memory size such as '32 kb', '64mb' or '1 g' (a bare number is bytes)"

    def parse(self, raw: object) -> int:
        return parse_memory_size(raw)

    def format(self, value: int) -> str:
        return format_memory_size(int(value))


# --------------------------------------------------------------------------- the schema


@dataclass(frozen=True)
class Option:
    """One configuration key: its type, its default (None = unset) and what it is for."""

    key: str
    type: ValueType[Any]
    default: Any
    description: str
    optional: bool = False
    #: set for a key flinkpy knows but cannot honour yet: why any value but the default is refused
    unsupported: str | None = None

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + re.sub(r"[.\-]", "_", self.key).upper()


def _option(key: str, type_: ValueType[Any], default: Any, description: str) -> Option:
    return Option(key, type_, default, description, optional=default is None)


class PortType(IntType):
    """A TCP port: 0 (any free port) to 65535."""

    allowed = "a port from 0 (any free port) to 65535"

    def __init__(self) -> None:
        super().__init__(0)
        self.allowed = PortType.allowed

    def parse(self, raw: object) -> int:
        value = super().parse(raw)
        if value > 65535:
            raise ValueError
        return value


SCHEMA: dict[str, Option] = {
    o.key: o
    for o in (
        _option("parallelism.default", IntType(1), 1, "Parallelism of operators that do not set their own."),
        _option("pipeline.max-parallelism", IntType(1), 128, "Number of key groups; the upper bound for rescaling keyed state."),
        _option("pipeline.name", StringType(), None, "Name of the job, shown by 'flinkpy list'."),
        _option("taskmanager.numberOfTaskSlots", IntType(1), 1, "Slots each TaskManager offers."),
        _option("taskmanager.host", StringType(), None, "Address the TaskManager gives the JobManager and other TaskManagers (its data channels listen there); unset: the local address of its connection to the JobManager."),
        _option("taskmanager.bind-host", StringType(), None, "Local address the TaskManager's data channels bind to (0.0.0.0: every interface); unset: taskmanager.host."),
        _option("taskmanager.data.port", PortType(), 0, "First port the data channels of a TaskManager's tasks listen on; each task process takes the next free one from it upward (open a range in the firewall). 0: any free port."),
        _option("rest.port", IntType(0), 8081, "Port of the JobManager's REST API (0 = any free port)."),
        _option("rest.address", StringType(), None, "Address clients use to reach the REST API (published in the cluster home and ZooKeeper); unset: jobmanager.rpc.address."),
        _option("rest.bind-address", StringType(), None, "Local address the REST server binds to (0.0.0.0: every interface); unset: rest.address."),
        _option("rest.server.max-content-length", MemorySizeType(), 100 << 20, "Largest request body the REST server accepts (a job submission is the largest legitimate one); larger ones are answered 413 without being read."),
        _option("rest.server.read-timeout", DurationType(), 30_000, "Time a client has to send a REST request's headers and body (and the longest a kept-alive connection may stay idle); a slower one is disconnected."),
        _option("log.file.max-size", MemorySizeType(), 100 << 20, "Size at which a cluster process's .log (and a TaskManager's .out) is rotated to .1, .2, ... (0 = never); read by each process from the cluster home's flinkpy.yaml or the environment."),
        _option("log.file.max-backups", IntType(0), 10, "Rotated .log/.out files kept per process (0 = none: the file starts afresh)."),
        _option("rest.server.numThreads", IntType(1), 32, "REST requests served at once; a connection beyond them is answered 503 at once."),
        _option("security.ssl.internal.enabled", BoolType(), False, "TLS with mutual authentication on every connection between cluster processes (the JobManager's RPC endpoint, TaskManagers, the data channels between tasks), beside the cluster secret's challenge; needs security.ssl.internal.keystore and .truststore."),
        _option("security.ssl.internal.keystore", StringType(), None, "PEM file with this process's certificate chain and its private key (or the chain only, with security.ssl.internal.key), for internal TLS (flinkpy reads PEM, not Java keystores)."),
        _option("security.ssl.internal.key", StringType(), None, "PEM file with the private key, when security.ssl.internal.keystore holds only the certificate chain (as cert-manager and most CAs hand them out: tls.crt and tls.key)."),
        _option("security.ssl.internal.key-password", StringType(), None, "Password of the private key in security.ssl.internal.keystore, when it is encrypted."),
        _option("security.ssl.internal.truststore", StringType(), None, "PEM file of the CA certificates that sign the cluster's internal certificates: a peer must present one they signed (host names are not checked: trust comes from the CA)."),
        _option("security.ssl.rest.enabled", BoolType(), False, "HTTPS for the REST API (the CLI, scripts and the web of metrics); needs security.ssl.rest.keystore on the JobManager and security.ssl.rest.truststore on clients."),
        _option("security.ssl.rest.keystore", StringType(), None, "PEM file with the REST server's certificate chain and private key, or the chain only with security.ssl.rest.key (and the client's, with security.ssl.rest.authentication-enabled)."),
        _option("security.ssl.rest.key", StringType(), None, "PEM file with the private key, when security.ssl.rest.keystore holds only the certificate chain."),
        _option("security.ssl.rest.key-password", StringType(), None, "Password of the private key in security.ssl.rest.keystore, when it is encrypted."),
        _option("security.ssl.rest.truststore", StringType(), None, "PEM file of the CA certificates a REST client trusts for the JobManager's certificate (and the server for clients' certificates, with security.ssl.rest.authentication-enabled)."),
        _option("security.ssl.rest.authentication-enabled", BoolType(), False, "Mutual TLS on the REST API: clients must present a certificate signed by a CA in security.ssl.rest.truststore (their own from security.ssl.rest.keystore)."),
        _option("jobmanager.rpc.address", StringType(), "127.0.0.1", "Address TaskManagers use to reach the JobManager (its RPC endpoint listens there)."),
        _option("jobmanager.bind-host", StringType(), None, "Local address the JobManager's RPC endpoint binds to (0.0.0.0: every interface); unset: jobmanager.rpc.address."),
        _option("jobmanager.rpc.port", PortType(), 0, "Port of the JobManager's RPC endpoint, the HOST:PORT of 'flinkpy taskmanager start --jobmanager'. 0: any free port (Flink's default is 6123: set it for a cluster across hosts)."),
        _option("execution.buffer-timeout.interval", DurationType(), 100, "Longest time a record waits in an output buffer (0 = flush every record)."),
        _option("pipeline.auto-watermark-interval", DurationType(), 200, "How often sources and timestamp assigners emit watermarks (0 = never)."),
        _option("execution.runtime-mode", EnumType("STREAMING", "BATCH", "AUTOMATIC"), "STREAMING", "Runtime execution mode of DataStream programs."),
        _option("heartbeat.interval", DurationType(), 10_000, "Time between heartbeats from TaskManagers to the JobManager."),
        _option("heartbeat.timeout", DurationType(), 50_000, "Silence after which a TaskManager is declared lost."),
        _option("slot.request.timeout", DurationType(), 300_000, "How long a submitted job waits for slots that other jobs still hold (a job that needs more slots than the cluster has fails at once), and how long a restart waits for the slots of a lost TaskManager before it counts as a failed attempt of the restart strategy."),
        _option("resourcemanager.taskmanager-restart.enabled", BoolType(), True, "A local cluster's supervisor starts a TaskManager that died again (as Flink's active resource managers do on Kubernetes and YARN), under the same id."),
        _option("resourcemanager.taskmanager-restart.backoff.initial", DurationType(), 1000, "Wait before the first restart of a process that died; each further restart in a row doubles it."),
        _option("resourcemanager.taskmanager-restart.backoff.max", DurationType(), 60_000, "Longest wait between restarts of a process that keeps dying."),
        _option("resourcemanager.taskmanager-restart.backoff.reset-threshold", DurationType(), 60_000, "A process that ran this long before it died is restarted after the initial backoff again (not a crash loop)."),
        _option("resourcemanager.taskmanager-restart.max-attempts", IntType(1), 10, "Restarts in a row (each process dying within the reset threshold) after which the supervisor gives up on it."),
        _option("high-availability.jobmanager-restart.enabled", BoolType(), True, "The supervisor starts a JobManager that died again, with the TaskManagers' backoff: with high availability it joins as a standby; without, a background cluster gets a fresh JobManager at the same REST address, without the old one's jobs."),
        _option("taskmanager.network.memory.buffers-per-channel", IntType(0), 2, "Exclusive network buffers (credit) per input channel."),
        _option("taskmanager.network.memory.floating-buffers-per-gate", IntType(0), 8, "Not a pool shared by a gate's channels, as in Flink: a quarter of this value (rounded down) is added to every input channel's credit, on top of buffers-per-channel, so an input gate of N channels holds up to N x (buffers-per-channel + this // 4) buffers."),
        _option("taskmanager.memory.segment-size", MemorySizeType(), 32 * 1024, "Size of one network buffer."),
        _option("taskmanager.memory.min-segment-size", MemorySizeType(), 256, "Smallest buffer size buffer debloating announces."),
        _option("taskmanager.network.max-frame-size", MemorySizeType(), 256 << 20, "Largest frame one data channel carries between two tasks: a buffer of records, so about the largest record a job can send from one task to another (up to 4 gb minus one byte). A larger one fails the job with its size and this key; the receiver refuses one too, so that a corrupt length never allocates gigabytes."),
        _option("taskmanager.network.memory.buffer-debloat.enabled", BoolType(), False, "Buffer debloating: each consumer measures its throughput and announces a buffer size to its producers, so that the data in flight on its input channels stays about buffer-debloat.target worth of processing (shorter aligned checkpoints under back-pressure)."),
        _option("taskmanager.network.memory.buffer-debloat.target", DurationType(1), 1000, "Buffer debloating: the time the data in flight on a task's input channels should take to process."),
        _option("taskmanager.network.memory.buffer-debloat.period", DurationType(1), 200, "Buffer debloating: time between two throughput samples (and buffer size decisions)."),
        _option("taskmanager.network.memory.buffer-debloat.samples", IntType(1), 20, "Buffer debloating: samples the throughput is averaged over (an exponential moving average of about that many)."),
        _option("taskmanager.network.memory.buffer-debloat.threshold-percentages", IntType(0), 25, "Buffer debloating: a new buffer size is announced only when it differs from the last one by more than this percentage (or reaches a bound)."),
        _option("metrics.enabled", BoolType(), True, "Tasks report live metrics to the JobManager while they run (job show, top, GET /metrics); false turns their reports off (TaskManagers still report CPU and memory)."),
        _option("metrics.fetcher.update-interval", DurationType(), 1000, "Time between two metric reports of a task to the JobManager."),
        _option("execution.checkpointing.interval", DurationType(), None, "Time between checkpoints; unset disables checkpointing."),
        _option("execution.checkpointing.mode", EnumType("EXACTLY_ONCE", "AT_LEAST_ONCE"), "EXACTLY_ONCE", "Checkpointing guarantee: align barriers or not."),
        _option("execution.checkpointing.timeout", DurationType(), 600_000, "Time after which an unfinished checkpoint is aborted."),
        _option("execution.checkpointing.dir", StringType(), None, "fsspec URL under which checkpoints are stored (default: <cluster home>/checkpoints)."),
        _option("execution.checkpointing.min-pause", DurationType(), 0, "Least time between the end of one checkpoint and the start of the next."),
        _option("execution.checkpointing.max-concurrent-checkpoints", IntType(1), 1, "Checkpoints that may be in progress at once."),
        _option("execution.checkpointing.tolerable-failed-checkpoints", IntType(0), 0, "Consecutive failed checkpoints tolerated before the job fails."),
        _option("execution.checkpointing.num-retained", IntType(1), 1, "Completed checkpoints kept; older ones are deleted."),
        _option(
            "execution.checkpointing.externalized-checkpoint-retention",
            EnumType("DELETE_ON_CANCELLATION", "RETAIN_ON_CANCELLATION", "NO_EXTERNALIZED_CHECKPOINTS"),
            "NO_EXTERNALIZED_CHECKPOINTS",
            "Whether a canceled job's checkpoints are kept.",
        ),
        _option("execution.checkpointing.savepoint-dir", StringType(), None, "Default directory of savepoints."),
        _option("execution.checkpointing.savepoint.interval", DurationType(), None, "Periodic savepoints: time between two savepoints the JobManager takes of the job (into its savepoint-dir); unset or 0: none. Changed while the job runs with 'flinkpy savepoint schedule'; refused for the Spark runner, which has no JobManager to take them. Flink's Kubernetes operator: kubernetes.operator.periodic.savepoint.interval."),
        _option("execution.checkpointing.savepoint.history.max-count", IntType(1), 10, "Periodic savepoints the JobManager keeps of a job; older ones are disposed of (never the one the job was started from, nor the one a restart would restore from). Flink's Kubernetes operator: kubernetes.operator.savepoint.history.max.count."),
        _option("execution.checkpointing.savepoint.history.max-age", DurationType(1), 86_400_000, "Age after which the JobManager disposes of a job's periodic savepoint (with the same exceptions as max-count). Flink's Kubernetes operator: kubernetes.operator.savepoint.history.max.age."),
        _option("execution.checkpointing.unaligned.enabled", BoolType(), False, "Unaligned checkpoints (exactly-once only; savepoints stay aligned): barriers overtake the buffers in flight, which are stored with the checkpoint as channel state, so checkpoints complete quickly under back-pressure."),
        _option("execution.checkpointing.aligned-checkpoint-timeout", DurationType(), 0, "With unaligned checkpoints: 0 makes every checkpoint unaligned from the start; a positive duration starts each aligned, and a task whose alignment lasts this long switches that checkpoint to unaligned (it snapshots at once, stores the data in flight ahead of the barrier, and its barrier overtakes its output queues). Savepoints never switch."),
        _option("execution.checkpointing.incremental", BoolType(), False, "Incremental checkpoints (rocksdb backend): upload only the store files created since the last checkpoint and reference the rest under <dir>/<job-id>/shared/."),
        _option("execution.state-recovery.claim-mode", EnumType("NO_CLAIM", "CLAIM"), "NO_CLAIM", "Who owns a retained checkpoint a job is started from (-s): NO_CLAIM leaves it alone and makes the first checkpoint full; CLAIM hands it to the new job, which deletes it once newer checkpoints subsume it."),
        _option("high-availability.type", EnumType("none", "zookeeper"), "none", "High availability: none (one JobManager), or zookeeper (standby JobManagers, leader election, jobs that survive the loss of their JobManager)."),
        _option("high-availability.zookeeper.quorum", StringType(), None, "ZooKeeper servers as HOST:PORT[,HOST:PORT...] (high-availability.type: zookeeper)."),
        _option("high-availability.storageDir", StringType(), None, "fsspec URL where JobManagers keep submitted jobs and job histories for a new leader (ZooKeeper holds pointers to them); default: <cluster home>/ha."),
        _option("high-availability.cluster-id", StringType(), "default", "Name of this cluster under the ZooKeeper root: clusters sharing a quorum need distinct ids."),
        _option("high-availability.zookeeper.path.root", StringType(), "/flinkpy", "ZooKeeper node under which every flinkpy cluster keeps its state."),
        _option("high-availability.zookeeper.client.session-timeout", DurationType(), 4000, "ZooKeeper session timeout: how long a JobManager that went silent keeps its leadership (the server may clamp it to [2, 20] tick times)."),
        _option("high-availability.zookeeper.client.connection-timeout", DurationType(), 15000, "How long to wait for a connection to ZooKeeper."),
        _option("state.backend.type", EnumType("hashmap", "rocksdb"), "hashmap", "Where keyed state lives: hashmap (in the task's memory, snapshotted copy-on-write) or rocksdb (an embedded RocksDB on the TaskManager's local disk, for state larger than memory)."),
        _option("state.backend.rocksdb.localdir", StringType(), None, "rocksdb: local directory under which each subtask keeps its RocksDB instance; default: the system's temporary directory."),
        _option("state.backend.rocksdb.block.cache-size", MemorySizeType(), 8 << 20, "rocksdb: block cache of each subtask's instance (memory for reads)."),
        _option("state.backend.rocksdb.writebuffer.size", MemorySizeType(), 8 << 20, "rocksdb: size of one memtable (write buffer) before it is flushed to disk."),
        _option("state.backend.rocksdb.writebuffer.count", IntType(1), 2, "rocksdb: memtables kept in memory at most, per instance."),
        _option("state.backend.rocksdb.compaction.style", EnumType("LEVEL", "UNIVERSAL"), "LEVEL", "rocksdb: how files are merged. LEVEL rewrites the first level whenever new files reach it (with keys spread over every key group, an incremental checkpoint after it re-uploads that level); UNIVERSAL merges runs of similar size: smaller uploads on average up to about 10^6 keys per subtask, but now and then a merge of most of the store. (FIFO, which Flink lists too, deletes the oldest files and the state in them: not offered.)"),
        _option("state.backend.rocksdb.compaction.level.max-size-level-base", MemorySizeType(), 256 << 20, "rocksdb, LEVEL compaction: the size of the first level; each next level is ten times larger."),
        _option("state.backend.rocksdb.compaction.level.target-file-size-base", MemorySizeType(), 64 << 20, "rocksdb: the size of one file of the first level (the unit a compaction writes and an incremental checkpoint uploads)."),
        _option("state.backend.rocksdb.use-bloom-filter", BoolType(), True, "rocksdb: a bloom filter per file (10 bits a key), so that reading a key a file does not hold skips it (on by default here: keyed state reads are point lookups)."),
        _option("execution.shutdown-on-attached-exit", BoolType(), False, "An attached run (flinkpy run without -d) on a running cluster that is stopped by Ctrl-C or SIGTERM cancels its job before it exits; by default the job keeps running there and the client says how to cancel it. (On the embedded cluster the job is always cancelled: the cluster ends with the client.)"),
        _option("execution.runner", EnumType("local", "spark"), "local", "Engine that runs the job: local (flinkpy's own processes) or spark (Spark Structured Streaming through PySpark, supervised by a flinkpy driver process)."),
        _option("spark.master", StringType(), "local[2]", "execution.runner spark: the Spark master (local[N], spark://HOST:PORT, yarn, ...)."),
        _option("spark.conf", StringType(), None, "execution.runner spark: more Spark settings as 'key=value' pairs separated by commas (--spark-conf adds to them)."),
        _option("python.files", StringType(), None, "Python modules, package or module directories and .zip/.whl/.egg files, separated by commas, made importable where the job's functions run (env.add_python_file adds to it); on Spark they are shipped to the executors."),
        _option("execution.spark.max-records-per-batch", IntType(0), 0, "execution.runner spark: records each source subtask contributes to one micro-batch at most; 0: all that are available."),
        _option("jobmanager.execution.failover-strategy", EnumType("full", "region"), "region", "Restart all tasks after a failure, or only the failed task's pipelined region."),
        _option(
            "restart-strategy.type",
            EnumType(
                "none", "disable", "off", "fixed-delay", "fixeddelay", "failure-rate", "failurerate",
                "exponential-delay", "exponentialdelay",
            ),
            None,
            "Restart strategy for failed jobs; unset means exponential-delay with checkpointing, none without.",
        ),
        _option("restart-strategy.fixed-delay.attempts", IntType(0), 1, "fixed-delay: restarts allowed before the job fails."),
        _option("restart-strategy.fixed-delay.delay", DurationType(), 1000, "fixed-delay: time between a failure and the restart."),
        _option("restart-strategy.failure-rate.max-failures-per-interval", IntType(1), 1, "failure-rate: failures tolerated within one interval; one more fails the job."),
        _option("restart-strategy.failure-rate.failure-rate-interval", DurationType(), 60_000, "failure-rate: length of the sliding window in which failures are counted."),
        _option("restart-strategy.failure-rate.delay", DurationType(), 1000, "failure-rate: time between a failure and the restart."),
        _option("restart-strategy.exponential-delay.initial-backoff", DurationType(), 1000, "exponential-delay: delay before the first restart, and after a reset."),
        _option("restart-strategy.exponential-delay.max-backoff", DurationType(), 60_000, "exponential-delay: the longest delay between restarts."),
        _option("restart-strategy.exponential-delay.backoff-multiplier", FloatType(1.0), 1.5, "exponential-delay: factor by which the delay grows after each failure."),
        _option("restart-strategy.exponential-delay.reset-backoff-threshold", DurationType(), 3_600_000, "exponential-delay: time without failures after which the delay and the attempt count reset."),
        _option("restart-strategy.exponential-delay.jitter-factor", FloatType(0.0, 1.0), 0.1, "exponential-delay: each delay is moved by a random amount of up to this fraction of it."),
        _option("restart-strategy.exponential-delay.attempts-before-reset-backoff", IntType(1), 2147483647, "exponential-delay: restarts allowed without a reset before the job fails."),
    )
}


# --------------------------------------------------------------------------- the Config object


@dataclass(frozen=True)
class Config:
    """Typed, validated configuration values, each remembering the source that set it."""

    values: Mapping[str, Any]
    sources: Mapping[str, str] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        """The typed value of ``key`` (None for an unset optional key)."""
        option = _lookup(key, source="Config.get")
        return self.values.get(option.key, option.default)

    def source(self, key: str) -> str:
        """Where the value of ``key`` came from: 'default', a file path, an env var or '-D'."""
        return self.sources.get(_lookup(key, source="Config.source").key, "default")

    def to_dict(self) -> dict[str, str]:
        """Every set value in string form; ``load_config(env={}, overrides=d)`` reads it back."""
        out: dict[str, str] = {}
        for key, option in SCHEMA.items():
            value = self.values.get(key, option.default)
            if value is not None:
                out[key] = option.type.format(value)
        return out

    def with_overrides(self, overrides: Mapping[str, str], *, source: str = "-D") -> Config:
        """A copy with ``overrides`` applied on top (validated like every other source)."""
        values, sources = dict(self.values), dict(self.sources)
        for key, raw in overrides.items():
            _apply(values, sources, key, raw, f"{source} {key}={raw}")
        return Config(values, sources)


def typed_value(settings: Mapping[str, object], key: str, *, source: str) -> Any:
    """The schema-typed value of ``key`` in a plain mapping of settings (a submitted job's
    strings), or the schema's default when it is absent or empty; a bad value is refused with
    the schema's error, which names ``source``.

    >>> typed_value({"taskmanager.memory.segment-size": "64 kb"}, "taskmanager.memory.segment-size", source="job")
    65536
    >>> typed_value({}, "execution.buffer-timeout.interval", source="job")
    100
    """
    option = _lookup(key, source=source)
    raw = settings.get(option.key)
    if raw is None or raw == "":
        return option.default
    values: dict[str, Any] = {}
    _apply(values, {}, option.key, raw, f"{source} {option.key}={raw}")
    return values[option.key]


def _lookup(key: str, *, source: str) -> Option:
    option = SCHEMA.get(key)
    if option is not None:
        return option
    close = difflib.get_close_matches(key, list(SCHEMA), n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else "see the CONFIGURATION section of flinkpy(1) for the known keys"
    raise ConfigurationError(f"unknown configuration key '{key}' (from {source})", remedy=hint)


def _apply(values: dict[str, Any], sources: dict[str, str], key: str, raw: object, source: str) -> None:
    option = _lookup(key, source=source)
    if raw is None and option.optional:
        values[option.key] = None
    else:
        try:
            values[option.key] = option.type.parse(raw)
        except ValueError:
            raise ConfigurationError(
                f"invalid value {raw!r} for configuration key '{key}' (from {source})",
                remedy=f"use {option.type.allowed}",
            ) from None
        if option.unsupported and values[option.key] != option.default:
            raise ConfigurationError(
                f"configuration key '{key}' (from {source}) is not supported yet: {option.unsupported}",
                remedy=f"remove it (or set it to {option.type.format(option.default)})",
            )
    sources[option.key] = source


def _flatten(data: Mapping[Any, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Accept both ``a.b: 1`` and ``a: {b: 1}``: Flink's files use the first, people write both."""
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping) and full not in SCHEMA:
            yield from _flatten(value, full + ".")
        else:
            yield full, value


def _read_file(path: Path) -> dict[str, Any]:
    import yaml  # imported here: `flinkpy --help` should not pay for it

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read configuration file {path}: {exc.strerror or exc}",
            remedy="check the path and its permissions",
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        raise ConfigurationError(
            f"configuration file {path} is not valid YAML{where}",
            remedy="fix the syntax; keys look like 'parallelism.default: 2'",
        ) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigurationError(
            f"configuration file {path} must hold a mapping of keys to values, not a {type(data).__name__}",
            remedy="write one 'key: value' per line",
        )
    return dict(_flatten(data))


def default_home() -> Path:
    """The cluster home a process uses when none is named: ``$FLINKPY_HOME``, else
    ``~/.flinkpy`` (its ``flinkpy.yaml`` is the configuration of the CLI and the clients)."""
    return Path(os.environ.get("FLINKPY_HOME") or Path.home() / ".flinkpy").expanduser()


def load_config(
    home: Path | None = None,
    *,
    file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Config:
    """Build the effective configuration from defaults, file, environment and overrides.

    ``home`` is a cluster home whose ``flinkpy.yaml`` is read if present; ``file`` names a file
    that must exist (it wins over ``home``). ``env`` defaults to ``os.environ``; pass ``{}`` to
    ignore the environment (as processes that receive ``Config.to_dict()`` should).
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    path = Path(file) if file is not None else (Path(home) / CONFIG_FILE_NAME if home is not None else None)
    if path is not None and (file is not None or path.exists()):
        for key, raw in _read_file(path).items():
            _apply(values, sources, key, raw, str(path))
    environ = os.environ if env is None else env
    for option in SCHEMA.values():
        if option.env_var in environ:
            _apply(values, sources, option.key, environ[option.env_var], f"environment variable {option.env_var}")
    config = Config(values, sources)
    return config.with_overrides(overrides) if overrides else config


def parse_override(text: str) -> tuple[str, str]:
    """Split one ``-D key=value`` argument; the CLI and job launchers share this rule."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigurationError(
            f"malformed dynamic property '-D {text}'", remedy="write it as -D key=value, e.g. -D parallelism.default=2"
        )
    return key.strip(), value.strip()


