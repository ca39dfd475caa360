"""ExecutionConfig: the per-job settings behind PyFlink's ``env.get_config()``.

A plain value holder that the environment copies into the job graph.

>>> config = ExecutionConfig().set_auto_watermark_interval(500)
>>> config.get_auto_watermark_interval()
500
>>> config.set_global_job_parameters({"threshold": "3"}).get_global_job_parameters()
{'threshold': '3'}
"""

from __future__ import annotations

from collections.abc import Mapping

from flinkpy.common.configuration import Configuration
from flinkpy.common.restart_strategy import (
    FallbackRestartStrategyConfiguration,
    RestartStrategyConfiguration,
)
from flinkpy.errors import UsageError

#: Flink's default period of automatic watermark emission.
DEFAULT_AUTO_WATERMARK_INTERVAL_MS = 200
#: Parallelism not set on the job: the cluster's ``parallelism.default`` applies.
PARALLELISM_DEFAULT = -1


class ExecutionConfig:
    """Settings of one job: parallelism, watermark interval, restart strategy, parameters."""

    def __init__(self) -> None:
        self._parallelism = PARALLELISM_DEFAULT
        self._max_parallelism = -1
        self._auto_watermark_interval = DEFAULT_AUTO_WATERMARK_INTERVAL_MS
        self._global_job_parameters: dict[str, str] = {}
        self._restart_strategy: RestartStrategyConfiguration = (
            FallbackRestartStrategyConfiguration()
        )
        self._object_reuse = False

    def set_auto_watermark_interval(self, milliseconds: int) -> ExecutionConfig:
        if milliseconds < 0:
            raise UsageError(f"auto watermark interval must not be negative, got {milliseconds}")
        self._auto_watermark_interval = int(milliseconds)
        return self

    def get_auto_watermark_interval(self) -> int:
        return self._auto_watermark_interval

    def set_parallelism(self, parallelism: int) -> ExecutionConfig:
        if parallelism != PARALLELISM_DEFAULT and parallelism < 1:
            raise UsageError(f"parallelism must be at least 1, got {parallelism}")
        self._parallelism = int(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> ExecutionConfig:
        if not 0 < max_parallelism <= 32768:
            raise UsageError(
                f"max parallelism must be between 1 and 32768, got {max_parallelism}"
            )
        self._max_parallelism = int(max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._max_parallelism

    def set_restart_strategy(
        self, restart_strategy_configuration: RestartStrategyConfiguration
    ) -> None:
        self._restart_strategy = restart_strategy_configuration

    def get_restart_strategy(self) -> RestartStrategyConfiguration:
        return self._restart_strategy

    def set_global_job_parameters(
        self, global_job_parameters_dict: Mapping[str, object] | Configuration
    ) -> ExecutionConfig:
        if isinstance(global_job_parameters_dict, Configuration):
            self._global_job_parameters = global_job_parameters_dict.to_dict()
        else:
            self._global_job_parameters = {
                str(k): str(v) for k, v in global_job_parameters_dict.items()
            }
        return self

    def get_global_job_parameters(self) -> dict[str, str]:
        return dict(self._global_job_parameters)

    def enable_object_reuse(self) -> ExecutionConfig:
        self._object_reuse = True
        return self

    def disable_object_reuse(self) -> ExecutionConfig:
        self._object_reuse = False
        return self

    def is_object_reuse_enabled(self) -> bool:
        return self._object_reuse

    def __repr__(self) -> str:
        return (
            f"ExecutionConfig(parallelism={self._parallelism}, "
            f"max_parallelism={self._max_parallelism}, "
            f"auto_watermark_interval={self._auto_watermark_interval}, "
            f"restart_strategy={self._restart_strategy!r})"
        )
