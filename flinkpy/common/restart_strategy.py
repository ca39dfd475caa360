"""Restart strategy configurations: which one a job asks for, with Flink's keys and defaults.

These are value objects only. The JobManager turns ``to_config()`` into a restart backoff
time strategy; keeping the two apart lets a job file, ``flinkpy.yaml`` and the CLI all say
the same thing in the same words.

>>> RestartStrategies.fixed_delay_restart(3, 10_000).to_config()["restart-strategy.type"]
'fixed-delay'
>>> RestartStrategies.no_restart().to_config()
{'restart-strategy.type': 'none'}
>>> conf = RestartStrategies.exponential_delay_restart(100, 5000, 2.0, 60000, 0.1).to_config()
>>> RestartStrategies.from_config(conf) == RestartStrategies.exponential_delay_restart(
...     100, 5000, 2.0, 60000, 0.1)
True
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass

from flinkpy.common.time import Duration, Time
from flinkpy.errors import ConfigurationError
from flinkpy.units import parse_duration_ms

#: A delay as PyFlink accepts it: milliseconds, a timedelta, or flinkpy's Duration/Time.
DelayLike = int | datetime.timedelta | Duration | Time

TYPE_KEY = "restart-strategy.type"


def _millis(value: DelayLike) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, (Duration, Time)):
        return value.to_milliseconds()
    return int(value)


def _text(ms: int) -> str:
    return f"{ms} ms"


class RestartStrategyConfiguration:
    """Base of the restart strategy configurations; see :class:`RestartStrategies`."""

    def to_config(self) -> dict[str, str]:
        raise NotImplementedError

    def get_description(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class NoRestartStrategyConfiguration(RestartStrategyConfiguration):
    """A failure fails the job."""

    def to_config(self) -> dict[str, str]:
        return {TYPE_KEY: "none"}

    def get_description(self) -> str:
        return "Restart deactivated."


@dataclass(frozen=True)
class FallbackRestartStrategyConfiguration(RestartStrategyConfiguration):
    """Use whatever the cluster configuration says."""

    def to_config(self) -> dict[str, str]:
        return {}

    def get_description(self) -> str:
        return "Cluster level default restart strategy"


@dataclass(frozen=True)
class FixedDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
    """Restart up to ``restart_attempts`` times, waiting ``delay_ms`` before each."""

    restart_attempts: int = 1
    delay_ms: int = 1000

    def get_restart_attempts(self) -> int:
        return self.restart_attempts

    def get_delay_between_attempts_interval(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.delay_ms)

    def to_config(self) -> dict[str, str]:
        return {
            TYPE_KEY: "fixed-delay",
            "restart-strategy.fixed-delay.attempts": str(self.restart_attempts),
            "restart-strategy.fixed-delay.delay": _text(self.delay_ms),
        }

    def get_description(self) -> str:
        return f"Restart with fixed delay ({self.delay_ms} ms). #{self.restart_attempts} restart attempts."


@dataclass(frozen=True)
class FailureRateRestartStrategyConfiguration(RestartStrategyConfiguration):
    """Restart unless more than ``max_failure_rate`` failures happen within the interval."""

    max_failure_rate: int = 1
    failure_interval_ms: int = 60_000
    delay_ms: int = 1000

    def get_max_failure_rate(self) -> int:
        return self.max_failure_rate

    def get_failure_interval(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.failure_interval_ms)

    def get_delay_between_attempts_interval(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.delay_ms)

    def to_config(self) -> dict[str, str]:
        return {
            TYPE_KEY: "failure-rate",
            "restart-strategy.failure-rate.max-failures-per-interval": str(self.max_failure_rate),
            "restart-strategy.failure-rate.failure-rate-interval": _text(self.failure_interval_ms),
            "restart-strategy.failure-rate.delay": _text(self.delay_ms),
        }

    def get_description(self) -> str:
        return (
            f"Failure rate restart with maximum of {self.max_failure_rate} failures within "
            f"interval {self.failure_interval_ms} ms and fixed delay {self.delay_ms} ms."
        )


@dataclass(frozen=True)
class ExponentialDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
    """Restart forever, doubling (by ``backoff_multiplier``) the delay up to a maximum.

    The delay falls back to the initial backoff after the job ran for
    ``reset_backoff_threshold_ms`` without failing; ``jitter_factor`` spreads restarts of
    many jobs apart.
    """

    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 60_000
    backoff_multiplier: float = 2.0
    reset_backoff_threshold_ms: int = 3_600_000
    jitter_factor: float = 0.1

    def get_initial_backoff(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.initial_backoff_ms)

    def get_max_backoff(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.max_backoff_ms)

    def get_backoff_multiplier(self) -> float:
        return self.backoff_multiplier

    def get_reset_backoff_threshold(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.reset_backoff_threshold_ms)

    def get_jitter_factor(self) -> float:
        return self.jitter_factor

    def to_config(self) -> dict[str, str]:
        p = "restart-strategy.exponential-delay."
        return {
            TYPE_KEY: "exponential-delay",
            p + "initial-backoff": _text(self.initial_backoff_ms),
            p + "max-backoff": _text(self.max_backoff_ms),
            p + "backoff-multiplier": repr(float(self.backoff_multiplier)),
            p + "reset-backoff-threshold": _text(self.reset_backoff_threshold_ms),
            p + "jitter-factor": repr(float(self.jitter_factor)),
        }

    def get_description(self) -> str:
        return (
            f"Restart with exponential delay: starting at {self.initial_backoff_ms} ms, "
            f"increasing by {self.backoff_multiplier}, with maximum {self.max_backoff_ms} ms. "
            f"Delay resets after {self.reset_backoff_threshold_ms} ms with jitter "
            f"{self.jitter_factor}"
        )


_TYPE_ALIASES = {
    "none": "none", "off": "none", "disable": "none", "norestart": "none",
    "fixed-delay": "fixed-delay", "fixeddelay": "fixed-delay",
    "failure-rate": "failure-rate", "failurerate": "failure-rate",
    "exponential-delay": "exponential-delay", "exponentialdelay": "exponential-delay",
}


class RestartStrategies:
    """Factories for restart strategy configurations, named as in PyFlink.

    Delays are milliseconds, or a ``datetime.timedelta``, :class:`Duration` or :class:`Time`.
    """

    @staticmethod
    def no_restart() -> NoRestartStrategyConfiguration:
        return NoRestartStrategyConfiguration()

    @staticmethod
    def fall_back_restart() -> FallbackRestartStrategyConfiguration:
        return FallbackRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(
        restart_attempts: int, delay_between_attempts: DelayLike
    ) -> FixedDelayRestartStrategyConfiguration:
        return FixedDelayRestartStrategyConfiguration(
            int(restart_attempts), _millis(delay_between_attempts)
        )

    @staticmethod
    def failure_rate_restart(
        failure_rate: int, failure_interval: DelayLike, delay_interval: DelayLike
    ) -> FailureRateRestartStrategyConfiguration:
        return FailureRateRestartStrategyConfiguration(
            int(failure_rate), _millis(failure_interval), _millis(delay_interval)
        )

    @staticmethod
    def exponential_delay_restart(
        initial_backoff: DelayLike,
        max_backoff: DelayLike,
        backoff_multiplier: float,
        reset_backoff_threshold: DelayLike,
        jitter_factor: float,
    ) -> ExponentialDelayRestartStrategyConfiguration:
        return ExponentialDelayRestartStrategyConfiguration(
            _millis(initial_backoff),
            _millis(max_backoff),
            float(backoff_multiplier),
            _millis(reset_backoff_threshold),
            float(jitter_factor),
        )

    @staticmethod
    def from_config(config: Mapping[str, str]) -> RestartStrategyConfiguration:
        """Read Flink's ``restart-strategy.*`` keys back; missing keys take Flink's defaults.

        Without ``restart-strategy.type`` the result is the fall-back configuration (the
        cluster decides).
        """
        raw = config.get(TYPE_KEY)
        if raw is None:
            return FallbackRestartStrategyConfiguration()
        kind = _TYPE_ALIASES.get(str(raw).strip().lower())
        if kind is None:
            raise ConfigurationError(
                f"configuration key {TYPE_KEY!r} has value {raw!r}, which is not a restart strategy",
                remedy="use one of none, fixed-delay, failure-rate, exponential-delay",
            )

        def ms(key: str, default: int) -> int:
            if key not in config:
                return default
            try:
                return parse_duration_ms(config[key])
            except ValueError:
                raise ConfigurationError(
                    f"configuration key {key!r} has value {config[key]!r}, which is not a duration",
                    remedy="write a number with a unit, such as '10 s', '500 ms' or '1 min'",
                ) from None

        def num(key: str, default: float, cast: type = float) -> float:
            if key not in config:
                return default
            try:
                return cast(str(config[key]).strip())
            except ValueError:
                raise ConfigurationError(
                    f"configuration key {key!r} has value {config[key]!r}, which is not a number",
                    remedy="set it to a number",
                ) from None

        if kind == "none":
            return NoRestartStrategyConfiguration()
        if kind == "fixed-delay":
            p = "restart-strategy.fixed-delay."
            return FixedDelayRestartStrategyConfiguration(
                int(num(p + "attempts", 1, int)), ms(p + "delay", 1000)
            )
        if kind == "failure-rate":
            p = "restart-strategy.failure-rate."
            return FailureRateRestartStrategyConfiguration(
                int(num(p + "max-failures-per-interval", 1, int)),
                ms(p + "failure-rate-interval", 60_000),
                ms(p + "delay", 1000),
            )
        p = "restart-strategy.exponential-delay."
        return ExponentialDelayRestartStrategyConfiguration(
            ms(p + "initial-backoff", 1000),
            ms(p + "max-backoff", 60_000),
            num(p + "backoff-multiplier", 2.0),
            ms(p + "reset-backoff-threshold", 3_600_000),
            num(p + "jitter-factor", 0.1),
        )
