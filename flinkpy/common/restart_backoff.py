"""Restart backoff time strategies: after a failure, may the job restart, and after how long?

The JobManager owns one strategy per job. On each (global) failure it calls
``notify_failure(now_ms)``, then asks ``can_restart()`` and ``backoff_ms()``. The strategies
are pure state machines: they read no clock (the caller passes the failure time in
milliseconds), never sleep and do no I/O; the only randomness, exponential delay's jitter,
comes from an injected ``random.Random``. So a failure-rate window or a backoff reset is
tested with plain numbers.

Semantics and defaults follow Flink 1.19+/2.x (``restart-strategy.*`` keys):

>>> s = FixedDelay(attempts=2, delay_ms=500)
>>> for t in (0, 10, 20):
...     s.notify_failure(t)
...     print(s.can_restart(), s.backoff_ms())
True 500
True 500
False 500
>>> strategy_from_config({}, checkpointing_enabled=False).describe()
{'type': 'none'}
>>> [row["delay_ms"] for row in explain(ExponentialDelay(jitter_factor=0.0), 4)]
[1000, 1500, 2250, 3375]

Where the PyFlink-side value objects of ``flinkpy.common.restart_strategy`` meet this module:
``strategy_from_config(RestartStrategies.fixed_delay_restart(3, 10_000).to_config(), ...)``.
"""

from __future__ import annotations

import abc
import difflib
import random
from collections import deque
from collections.abc import Mapping
from typing import Any

from flinkpy.config import SCHEMA
from flinkpy.errors import ConfigurationError
from flinkpy.units import format_duration_ms

TYPE_KEY = "restart-strategy.type"
PREFIX = "restart-strategy."

#: Every spelling of ``restart-strategy.type`` Flink accepts, to the canonical name.
TYPE_ALIASES: dict[str, str] = {
    "none": "none", "off": "none", "disable": "none",
    "fixed-delay": "fixed-delay", "fixeddelay": "fixed-delay",
    "failure-rate": "failure-rate", "failurerate": "failure-rate",
    "exponential-delay": "exponential-delay", "exponentialdelay": "exponential-delay",
}
ALLOWED_TYPES = "none, off, disable, fixed-delay, failure-rate, exponential-delay"

#: Fields of ``describe()`` whose values are durations in milliseconds.
DURATION_FIELDS = frozenset(
    {"delay", "failure-rate-interval", "initial-backoff", "max-backoff", "reset-backoff-threshold"}
)
#: Flink's "no limit" for a count of attempts or failures (Java's Integer.MAX_VALUE); the JSON
#: keeps the number, people read "unlimited"
UNLIMITED = 2**31 - 1


def format_value(name: str, value: Any) -> str:
    """One parameter's value for people: durations as ``10 s``, Flink's no-limit as ``unlimited``.

    >>> format_value("delay", 10000), format_value("attempts-before-reset-backoff", 2147483647)
    ('10 s', 'unlimited')
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if name in DURATION_FIELDS:
            return format_duration_ms(value)
        if value == UNLIMITED:
            return "unlimited"
    return str(value)

INT_MAX = 2_147_483_647


def _check(key: str, value: Any) -> Any:
    """Validate one value against the config schema; the error names key, value and what's allowed."""
    option = SCHEMA[key]
    try:
        return option.type.parse(value)
    except ValueError:
        raise ConfigurationError(
            f"invalid value {value!r} for configuration key '{key}'", remedy=f"use {option.type.allowed}"
        ) from None


class RestartBackoffTimeStrategy(abc.ABC):
    """Decides, failure by failure, whether a job restarts and how long it waits first.

    Call ``notify_failure(now_ms)`` once per failure of the job (not once per failed task:
    the failures of one failover count once), then ``can_restart()`` and ``backoff_ms()``.
    """

    #: the canonical ``restart-strategy.type``
    type: str = ""

    @abc.abstractmethod
    def notify_failure(self, now_ms: int) -> None:
        """Record one failure that happened at ``now_ms`` (milliseconds, any fixed epoch)."""

    @abc.abstractmethod
    def can_restart(self) -> bool:
        """Whether the job may restart after the latest failure."""

    def backoff_ms(self) -> int:
        """The delay before the restart after the latest failure (0 before any failure)."""
        return 0

    def jitter_bounds_ms(self) -> tuple[int, int]:
        """The range ``backoff_ms()`` was drawn from (a single value without jitter)."""
        return self.backoff_ms(), self.backoff_ms()

    @abc.abstractmethod
    def counted_failures(self) -> int:
        """Failures that currently count towards giving up (all, in the window, since the reset)."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """The strategy as JSON: ``{"type": ..., <key suffix>: value}``; durations in ms."""

    def to_config(self) -> dict[str, str]:
        """Flink's configuration keys and string values; ``strategy_from_config`` reads them back."""
        doc = self.describe()
        out = {TYPE_KEY: doc.pop("type")}
        for name, value in doc.items():
            key = f"{PREFIX}{self.type}.{name}"
            out[key] = SCHEMA[key].type.format(value)
        return out

    def fresh(self) -> RestartBackoffTimeStrategy:
        """A new strategy with the same parameters and no failures recorded."""
        return strategy_from_config(self.to_config(), checkpointing_enabled=False)

    def _order(self, now_ms: int, last_ms: int | None) -> None:
        if last_ms is not None and now_ms < last_ms:
            raise ValueError(f"failure time {now_ms} ms is before the previous failure at {last_ms} ms")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.describe() == self.describe()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.describe().items())))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({format_description(self.describe())})"


class NoRestart(RestartBackoffTimeStrategy):
    """Any failure fails the job."""

    type = "none"

    def __init__(self) -> None:
        self._failures = 0

    def notify_failure(self, now_ms: int) -> None:
        self._failures += 1

    def can_restart(self) -> bool:
        return False

    def counted_failures(self) -> int:
        return self._failures

    def describe(self) -> dict[str, Any]:
        return {"type": "none"}


class FixedDelay(RestartBackoffTimeStrategy):
    """Restart up to ``attempts`` times, each after ``delay_ms``; failure number attempts+1 fails the job.

    >>> s = FixedDelay(attempts=0)
    >>> s.notify_failure(0); s.can_restart()
    False
    """

    type = "fixed-delay"

    def __init__(self, attempts: int = 1, delay_ms: int = 1000) -> None:
        self.attempts = _check(PREFIX + "fixed-delay.attempts", attempts)
        self.delay_ms = _check(PREFIX + "fixed-delay.delay", delay_ms)
        self._failures = 0
        self._last: int | None = None

    def notify_failure(self, now_ms: int) -> None:
        self._order(now_ms, self._last)
        self._last = now_ms
        self._failures += 1

    def can_restart(self) -> bool:
        return self._failures <= self.attempts

    def backoff_ms(self) -> int:
        return self.delay_ms if self._failures else 0

    def counted_failures(self) -> int:
        return self._failures

    def describe(self) -> dict[str, Any]:
        return {"type": self.type, "attempts": self.attempts, "delay": self.delay_ms}


class FailureRate(RestartBackoffTimeStrategy):
    """Restart after ``delay_ms`` unless more than ``max_failures_per_interval`` failures fall
    within the sliding window ``[now - interval_ms, now]`` ending at the latest failure.

    >>> s = FailureRate(max_failures_per_interval=2, interval_ms=1000)
    >>> [(s.notify_failure(t), s.can_restart())[1] for t in (0, 500, 1001, 1200)]
    [True, True, True, False]
    """

    type = "failure-rate"

    def __init__(self, max_failures_per_interval: int = 1, interval_ms: int = 60_000, delay_ms: int = 1000) -> None:
        self.max_failures_per_interval = _check(PREFIX + "failure-rate.max-failures-per-interval", max_failures_per_interval)
        self.interval_ms = _check(PREFIX + "failure-rate.failure-rate-interval", interval_ms)
        self.delay_ms = _check(PREFIX + "failure-rate.delay", delay_ms)
        # Only the newest max+1 failures can decide anything: the window holds too many
        # failures exactly when the oldest of them is still inside it.
        self._times: deque[int] = deque(maxlen=self.max_failures_per_interval + 1)

    def notify_failure(self, now_ms: int) -> None:
        self._order(now_ms, self._times[-1] if self._times else None)
        self._times.append(now_ms)

    def can_restart(self) -> bool:
        if len(self._times) <= self.max_failures_per_interval:
            return True
        return self._times[-1] - self._times[0] > self.interval_ms

    def backoff_ms(self) -> int:
        return self.delay_ms if self._times else 0

    def counted_failures(self) -> int:
        if not self._times:
            return 0
        now = self._times[-1]
        return sum(1 for t in self._times if now - t <= self.interval_ms)

    def describe(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "max-failures-per-interval": self.max_failures_per_interval,
            "failure-rate-interval": self.interval_ms,
            "delay": self.delay_ms,
        }


class ExponentialDelay(RestartBackoffTimeStrategy):
    """Restart after a delay that grows by ``multiplier`` per failure, up to ``max_backoff_ms``.

    The first failure, and any failure that comes ``reset_backoff_threshold_ms`` or more after
    the previous one, waits ``initial_backoff_ms`` and resets the attempt count. The job fails
    at failure number ``attempts_before_reset + 1`` without a reset. Each delay is drawn
    uniformly from ``nominal ± jitter_factor * nominal`` (never above the maximum), with
    ``rng`` (a fresh ``random.Random()`` when None; pass a seeded one in tests).

    >>> s = ExponentialDelay(initial_backoff_ms=100, max_backoff_ms=300, multiplier=2.0, jitter_factor=0.0)
    >>> [(s.notify_failure(t), s.backoff_ms())[1] for t in (0, 1, 2, 3)]
    [100, 200, 300, 300]
    """

    type = "exponential-delay"

    def __init__(
        self,
        initial_backoff_ms: int = 1000,
        max_backoff_ms: int = 60_000,
        multiplier: float = 1.5,
        reset_backoff_threshold_ms: int = 3_600_000,
        jitter_factor: float = 0.1,
        attempts_before_reset: int = INT_MAX,
        rng: random.Random | None = None,
    ) -> None:
        p = PREFIX + "exponential-delay."
        self.initial_backoff_ms = _check(p + "initial-backoff", initial_backoff_ms)
        self.max_backoff_ms = _check(p + "max-backoff", max_backoff_ms)
        self.multiplier = _check(p + "backoff-multiplier", multiplier)
        self.reset_backoff_threshold_ms = _check(p + "reset-backoff-threshold", reset_backoff_threshold_ms)
        self.jitter_factor = _check(p + "jitter-factor", jitter_factor)
        self.attempts_before_reset = _check(p + "attempts-before-reset-backoff", attempts_before_reset)
        if self.initial_backoff_ms < 1:
            raise ConfigurationError(
                f"invalid value {initial_backoff_ms!r} for configuration key '{p}initial-backoff'",
                remedy="use a duration of at least 1 ms",
            )
        if self.initial_backoff_ms > self.max_backoff_ms:
            raise ConfigurationError(
                f"'{p}initial-backoff' ({format_duration_ms(self.initial_backoff_ms)}) is longer than "
                f"'{p}max-backoff' ({format_duration_ms(self.max_backoff_ms)})",
                remedy="make the initial backoff at most the max backoff",
            )
        self._rng = rng if rng is not None else random.Random()
        self._attempts = 0  # failures since the last reset
        self._last: int | None = None
        self._nominal = 0
        self._bounds = (0, 0)
        self._delay = 0

    def notify_failure(self, now_ms: int) -> None:
        self._order(now_ms, self._last)
        if self._last is None or now_ms - self._last >= self.reset_backoff_threshold_ms:
            self._nominal, self._attempts = self.initial_backoff_ms, 0
        else:
            self._nominal = min(int(self._nominal * self.multiplier), self.max_backoff_ms)
        self._attempts += 1
        self._last = now_ms
        self._bounds = self.bounds_of(self._nominal)
        low, high = self._bounds
        self._delay = self._rng.randint(low, high) if high > low else self._nominal

    def bounds_of(self, nominal_ms: int) -> tuple[int, int]:
        """The jitter range around a nominal backoff."""
        spread = int(nominal_ms * self.jitter_factor)
        return max(0, nominal_ms - spread), min(self.max_backoff_ms, nominal_ms + spread)

    def can_restart(self) -> bool:
        return self._attempts <= self.attempts_before_reset

    def backoff_ms(self) -> int:
        return self._delay

    def nominal_backoff_ms(self) -> int:
        """The backoff before jitter."""
        return self._nominal

    def jitter_bounds_ms(self) -> tuple[int, int]:
        return self._bounds

    def counted_failures(self) -> int:
        return self._attempts

    def describe(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "initial-backoff": self.initial_backoff_ms,
            "max-backoff": self.max_backoff_ms,
            "backoff-multiplier": self.multiplier,
            "reset-backoff-threshold": self.reset_backoff_threshold_ms,
            "jitter-factor": self.jitter_factor,
            "attempts-before-reset-backoff": self.attempts_before_reset,
        }


# --------------------------------------------------------------------------- from configuration


def _known_keys(config: Mapping[str, Any]) -> None:
    known = [k for k in SCHEMA if k.startswith(PREFIX)]
    for key in config:
        if key.startswith(PREFIX) and key not in SCHEMA:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            raise ConfigurationError(
                f"unknown configuration key '{key}'",
                remedy=f"did you mean '{close[0]}'?" if close else "see the CONFIGURATION section of flinkpy(1)",
            )


def strategy_from_config(
    config: Mapping[str, Any], *, checkpointing_enabled: bool, rng: random.Random | None = None
) -> RestartBackoffTimeStrategy:
    """Build the strategy Flink's ``restart-strategy.*`` keys describe; unset keys take Flink's defaults.

    Without ``restart-strategy.type``: exponential-delay when checkpointing is enabled, none
    otherwise. Keys of other strategies are ignored; bad values raise ConfigurationError.

    >>> strategy_from_config({"restart-strategy.type": "fixeddelay",
    ...     "restart-strategy.fixed-delay.attempts": "3"}, checkpointing_enabled=False).describe()
    {'type': 'fixed-delay', 'attempts': 3, 'delay': 1000}
    >>> strategy_from_config({}, checkpointing_enabled=True).type
    'exponential-delay'
    """
    _known_keys(config)
    raw = config.get(TYPE_KEY)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        kind = "exponential-delay" if checkpointing_enabled else "none"
    else:
        kind = TYPE_ALIASES.get(str(raw).strip().lower(), "")
        if not kind:
            raise ConfigurationError(
                f"invalid value {raw!r} for configuration key '{TYPE_KEY}'", remedy=f"use one of {ALLOWED_TYPES}"
            )

    def get(suffix: str) -> Any:
        key = f"{PREFIX}{kind}.{suffix}"
        value = config.get(key)
        return _check(key, SCHEMA[key].default if value is None else value)

    if kind == "none":
        return NoRestart()
    if kind == "fixed-delay":
        return FixedDelay(get("attempts"), get("delay"))
    if kind == "failure-rate":
        return FailureRate(get("max-failures-per-interval"), get("failure-rate-interval"), get("delay"))
    return ExponentialDelay(
        get("initial-backoff"),
        get("max-backoff"),
        get("backoff-multiplier"),
        get("reset-backoff-threshold"),
        get("jitter-factor"),
        get("attempts-before-reset-backoff"),
        rng=rng,
    )


def format_description(doc: Mapping[str, Any]) -> str:
    """One line for people: ``fixed-delay (attempts=3, delay=10 s)``.

    >>> format_description({"type": "failure-rate", "max-failures-per-interval": 2,
    ...     "failure-rate-interval": 300000, "delay": 10000})
    'failure-rate (max-failures-per-interval=2, failure-rate-interval=5 min, delay=10 s)'
    """
    params = [f"{name}={format_value(name, value)}" for name, value in doc.items() if name != "type"]
    kind = str(doc.get("type", "?"))
    return f"{kind} ({', '.join(params)})" if params else kind


# --------------------------------------------------------------------------- explain


def explain(
    strategy: RestartBackoffTimeStrategy, failures: list[int] | int, *, every_ms: int = 0
) -> list[dict[str, Any]]:
    """The schedule ``strategy`` follows for a sequence of failures, up to the give-up point.

    ``failures`` is either a list of failure times (ms, non-decreasing) or a number N: then
    the first failure is at 0 and each next one comes ``every_ms`` after the previous restart
    (0 = right after it). Restarts are placed at the nominal delay (for exponential delay,
    the delay before jitter) so the schedule is deterministic; the jitter range is given per
    row. ``strategy`` itself is not changed: a fresh copy is replayed.

    Each row: ``attempt`` (failure number, from 1), ``failure_ms``, ``restart`` (bool),
    ``delay_ms``, ``jitter_min_ms``, ``jitter_max_ms`` and ``restart_at_ms`` (None when the
    job gives up), ``counted_failures`` and ``gives_up``.

    >>> [(r["failure_ms"], r["restart"]) for r in explain(FixedDelay(1, 100), 3, every_ms=50)]
    [(0, True), (150, False)]
    """
    replay = strategy.fresh()
    rows: list[dict[str, Any]] = []
    if isinstance(failures, int):
        if failures < 0:
            raise ValueError(f"number of failures must be >= 0, not {failures}")
        times: list[int] | None = None
        count = failures
    else:
        times = list(failures)
        count = len(times)
    now = 0
    for i in range(count):
        if times is not None:
            now = times[i]
        replay.notify_failure(now)
        restart = replay.can_restart()
        if isinstance(replay, ExponentialDelay):
            delay = replay.nominal_backoff_ms()
            low, high = replay.jitter_bounds_ms()
        else:
            delay = replay.backoff_ms()
            low = high = delay
        rows.append(
            {
                "attempt": i + 1,
                "failure_ms": now,
                "restart": restart,
                "delay_ms": delay if restart else None,
                "jitter_min_ms": low if restart else None,
                "jitter_max_ms": high if restart else None,
                "restart_at_ms": now + delay if restart else None,
                "counted_failures": replay.counted_failures(),
                "gives_up": not restart,
            }
        )
        if not restart:
            break
        now = now + delay + every_ms
    return rows
