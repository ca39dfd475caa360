"""CheckpointConfig: ``env.get_checkpoint_config()``, shaped like PyFlink's.

Every setter writes Flink's configuration key into the environment's settings, so a job's own
settings travel with it exactly as `-D` and flinkpy.yaml settings do (the job's win).

>>> from flinkpy.datastream import StreamExecutionEnvironment, CheckpointingMode
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)  # doctest: +ELLIPSIS
<...>
>>> env.get_checkpoint_config().set_max_concurrent_checkpoints(2).get_max_concurrent_checkpoints()
2
"""

from __future__ import annotations

from typing import Any

from flinkpy.units import parse_duration_ms


class ExternalizedCheckpointCleanup:
    DELETE_ON_CANCELLATION = "DELETE_ON_CANCELLATION"
    RETAIN_ON_CANCELLATION = "RETAIN_ON_CANCELLATION"
    NO_EXTERNALIZED_CHECKPOINTS = "NO_EXTERNALIZED_CHECKPOINTS"


class CheckpointConfig:
    def __init__(self, settings: dict[str, str]):
        self._s = settings

    def _set(self, key: str, value: Any) -> "CheckpointConfig":
        self._s[key] = str(value)
        return self

    def _ms(self, key: str, default: int) -> int:
        return parse_duration_ms(self._s[key]) if key in self._s else default

    def is_checkpointing_enabled(self) -> bool:
        return "execution.checkpointing.interval" in self._s

    def set_checkpoint_interval(self, checkpoint_interval: int) -> "CheckpointConfig":
        return self._set("execution.checkpointing.interval", f"{int(checkpoint_interval)} ms")

    def get_checkpoint_interval(self) -> int:
        return self._ms("execution.checkpointing.interval", -1)

    def set_checkpointing_mode(self, checkpointing_mode: Any) -> "CheckpointConfig":
        return self._set("execution.checkpointing.mode", getattr(checkpointing_mode, "name", str(checkpointing_mode)).split(".")[-1])

    def get_checkpointing_mode(self) -> str:
        return self._s.get("execution.checkpointing.mode", "EXACTLY_ONCE")

    def set_checkpoint_timeout(self, checkpoint_timeout: int) -> "CheckpointConfig":
        return self._set("execution.checkpointing.timeout", f"{int(checkpoint_timeout)} ms")

    def get_checkpoint_timeout(self) -> int:
        return self._ms("execution.checkpointing.timeout", 600_000)

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int) -> "CheckpointConfig":
        return self._set("execution.checkpointing.min-pause", f"{int(min_pause_between_checkpoints)} ms")

    def get_min_pause_between_checkpoints(self) -> int:
        return self._ms("execution.checkpointing.min-pause", 0)

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> "CheckpointConfig":
        return self._set("execution.checkpointing.max-concurrent-checkpoints", int(max_concurrent_checkpoints))

    def get_max_concurrent_checkpoints(self) -> int:
        return int(self._s.get("execution.checkpointing.max-concurrent-checkpoints", 1))

    def set_tolerable_checkpoint_failure_number(self, tolerable_checkpoint_failure_number: int) -> "CheckpointConfig":
        return self._set("execution.checkpointing.tolerable-failed-checkpoints", int(tolerable_checkpoint_failure_number))

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return int(self._s.get("execution.checkpointing.tolerable-failed-checkpoints", 0))

    def set_externalized_checkpoint_cleanup(self, cleanup_mode: Any) -> "CheckpointConfig":
        return self._set("execution.checkpointing.externalized-checkpoint-retention", getattr(cleanup_mode, "name", str(cleanup_mode)).split(".")[-1])

    def enable_externalized_checkpoints(self, cleanup_mode: Any) -> "CheckpointConfig":
        return self.set_externalized_checkpoint_cleanup(cleanup_mode)

    def set_num_retained_checkpoints(self, num: int) -> "CheckpointConfig":
        return self._set("execution.checkpointing.num-retained", int(num))

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> "CheckpointConfig":
        return self._set("execution.checkpointing.dir", checkpoint_path)

    def get_checkpoint_storage_dir(self) -> str | None:
        return self._s.get("execution.checkpointing.dir")

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> "CheckpointConfig":
        """Unaligned checkpoints (``execution.checkpointing.unaligned.enabled``): under exactly-once,
        barriers overtake the buffers in flight, which are stored with the checkpoint; savepoints
        stay aligned."""
        return self._set("execution.checkpointing.unaligned.enabled", "true" if enabled else "false")

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return str(self._s.get("execution.checkpointing.unaligned.enabled", "false")).lower() == "true"

    def set_aligned_checkpoint_timeout(self, alignment_timeout: Any) -> "CheckpointConfig":
        """``execution.checkpointing.aligned-checkpoint-timeout``, with unaligned checkpoints
        enabled: each checkpoint starts aligned and switches to unaligned at a task whose
        alignment lasts this long (a ``Duration``, or milliseconds); 0, the default, makes
        checkpoints unaligned from the start. Savepoints never switch.

        >>> from flinkpy.common import Duration
        >>> from flinkpy.datastream import StreamExecutionEnvironment
        >>> config = StreamExecutionEnvironment.get_execution_environment().get_checkpoint_config()
        >>> config.set_aligned_checkpoint_timeout(Duration.of_millis(50)).get_aligned_checkpoint_timeout()
        Duration.of_millis(50)
        """
        ms = alignment_timeout.to_milliseconds() if hasattr(alignment_timeout, "to_milliseconds") else int(alignment_timeout)
        if ms < 0:
            raise ValueError(f"the aligned checkpoint timeout must not be negative, not {ms} ms")
        return self._set("execution.checkpointing.aligned-checkpoint-timeout", f"{ms} ms")

    def get_aligned_checkpoint_timeout(self) -> Any:
        """The aligned-checkpoint timeout as a ``Duration`` (0: unaligned from the start)."""
        from flinkpy.common import Duration

        return Duration.of_millis(self._ms("execution.checkpointing.aligned-checkpoint-timeout", 0))
