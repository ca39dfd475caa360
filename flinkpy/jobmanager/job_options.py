"""A submitted job's configuration, parsed once into the typed views the JobManager reads.

A job arrives with its settings as strings (``flinkpy.yaml``, ``-D`` and what the job file set,
flattened by the client). They are parsed here, at submission, with the configuration schema's
parsers and defaults (``flinkpy.config.SCHEMA``); a bad value refuses the submission with an
error that names the key. After that, the scheduler, the checkpointing, the failover and the
deployment of tasks read typed fields and never a string again.

>>> opts = JobOptions.parse({"execution.checkpointing.interval": "10 s", "$job.region": "eu"}, "ckpts")
>>> opts.checkpointing.interval_ms, opts.task.buffer_timeout_ms, opts.job_parameters, opts.failover
(10000, 100, {'region': 'eu'}, 'region')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flinkpy.checkpoint.options import CheckpointingOptions
from flinkpy.common.restart_backoff import RestartBackoffTimeStrategy, strategy_from_config
from flinkpy.config import SCHEMA, typed_value
from flinkpy.errors import ConfigurationError
from flinkpy.jobmanager.savepoint_history import SavepointSchedule
from flinkpy.protocol.deployment import TaskConfig

#: where errors say a bad value came from
SOURCE = "the job's configuration"
FAILOVER_KEY = "jobmanager.execution.failover-strategy"
#: keys that carry the job's global parameters (``env.get_config().set_global_job_parameters``)
JOB_PARAMETER_PREFIX = "$job."


def task_config(settings: Mapping[str, Any]) -> TaskConfig:
    """The settings every task process of a job needs, parsed; the dispatcher adds the job's
    checkpoint directory and mode when it deploys a task."""

    def get(key: str) -> Any:
        return typed_value(settings, key, source=SOURCE)

    debloat = "taskmanager.network.memory.buffer-debloat."
    segment, min_segment = get("taskmanager.memory.segment-size"), get("taskmanager.memory.min-segment-size")
    enabled, target = get(debloat + "enabled"), get(debloat + "target")
    if enabled and not 1 <= min_segment <= segment:
        raise ConfigurationError(
            f"taskmanager.memory.min-segment-size ({min_segment} bytes) must be from 1 byte to "
            f"taskmanager.memory.segment-size ({segment} bytes) when buffer debloating is enabled",
            remedy="lower taskmanager.memory.min-segment-size or raise taskmanager.memory.segment-size",
        )
    max_frame = get("taskmanager.network.max-frame-size")
    if not 1024 <= max_frame < 1 << 32:
        raise ConfigurationError(
            f"taskmanager.network.max-frame-size ({max_frame} bytes) must be from 1 kb to 4 gb minus one byte",
            remedy="a frame's length is a 32-bit number: choose a size in that range",
        )
    return TaskConfig(
        buffer_timeout_ms=get("execution.buffer-timeout.interval"),
        auto_watermark_ms=get("pipeline.auto-watermark-interval"),
        segment_size=get("taskmanager.memory.segment-size"),
        incremental=get("execution.checkpointing.incremental"),
        state_backend={k: v for k, v in settings.items() if k.startswith("state.backend.")},
        credit=get("taskmanager.network.memory.buffers-per-channel")
        + max(0, get("taskmanager.network.memory.floating-buffers-per-gate") // 4),
        metrics_interval_ms=get("metrics.fetcher.update-interval") if get("metrics.enabled") else 0,
        debloat_target_ms=target if enabled else 0,
        debloat_period_ms=get(debloat + "period"),
        debloat_samples=get(debloat + "samples"),
        debloat_threshold_pct=get(debloat + "threshold-percentages"),
        min_segment_size=min_segment,
        max_frame_size=max_frame,
    )


@dataclass(frozen=True)
class JobOptions:
    """Everything the JobManager reads from one job's configuration."""

    #: the settings as submitted (kept for high availability and the REST API)
    settings: dict[str, str]
    failover: str
    #: handed to the job's ExecutionGraph, which owns it (it counts failures) from then on
    restart_strategy: RestartBackoffTimeStrategy
    checkpointing: CheckpointingOptions
    checkpoint_dir: str
    savepoint_dir: str
    #: periodic savepoints and the retention of them
    savepoint_schedule: SavepointSchedule
    #: CLAIM: a retained checkpoint the job starts from becomes the job's own (deleted when subsumed)
    claim: bool
    slot_request_timeout_ms: int
    task: TaskConfig
    job_parameters: dict[str, str]

    @classmethod
    def parse(cls, settings: Mapping[str, Any], default_checkpoint_dir: str) -> JobOptions:
        """Parse and check every setting the JobManager reads; raises ConfigurationError."""
        settings = dict(settings)
        failover = _failover(settings)
        strategy = strategy_from_config(settings, checkpointing_enabled=bool(settings.get("execution.checkpointing.interval")))
        checkpointing = CheckpointingOptions.from_config(settings)
        checkpoint_dir = settings.get("execution.checkpointing.dir") or default_checkpoint_dir
        return cls(
            settings=settings,
            failover=failover,
            restart_strategy=strategy,
            checkpointing=checkpointing,
            checkpoint_dir=checkpoint_dir,
            savepoint_dir=settings.get("execution.checkpointing.savepoint-dir") or f"{checkpoint_dir.rstrip('/')}/savepoints",
            savepoint_schedule=SavepointSchedule.from_settings(settings, SOURCE),
            claim=str(settings.get("execution.state-recovery.claim-mode", "NO_CLAIM")).upper() == "CLAIM",
            slot_request_timeout_ms=typed_value(settings, "slot.request.timeout", source=SOURCE),
            task=task_config(settings),
            job_parameters={k[len(JOB_PARAMETER_PREFIX):]: v for k, v in settings.items() if k.startswith(JOB_PARAMETER_PREFIX)},
        )


def _failover(settings: Mapping[str, Any]) -> str:
    raw = settings.get(FAILOVER_KEY, "region")
    try:
        failover: str = SCHEMA[FAILOVER_KEY].type.parse(raw)
    except ValueError:
        raise ConfigurationError(
            f"{FAILOVER_KEY}: {str(raw).lower()!r} is not a failover strategy", remedy="use full or region"
        ) from None
    return failover
