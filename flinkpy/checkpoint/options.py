"""Flink's checkpointing options, typed: what the CheckpointCoordinator is configured with.

The values are read from the ``execution.checkpointing.*`` keys with the configuration schema's
own parsers (``flinkpy.config.SCHEMA``), so a duration or a count is spelled the same here as in
``flinkpy.yaml``. What this module adds are the checkpointing rules the schema does not know (an
interval of 0 is not a way to turn checkpoints off; a timeout must be positive), with errors that
name the key, the value and what is allowed.

>>> CheckpointingOptions.from_config({"execution.checkpointing.interval": "10 s"}).interval_ms
10000
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flinkpy.config import SCHEMA
from flinkpy.errors import ConfigurationError

MODES = ("EXACTLY_ONCE", "AT_LEAST_ONCE")
RETENTIONS = ("RETAIN_ON_CANCELLATION", "DELETE_ON_CANCELLATION", "NO_EXTERNALIZED_CHECKPOINTS")
PREFIX = "execution.checkpointing."
_DURATION = "a duration such as '500 ms', '10 s' or '5 min' (a bare number means milliseconds)"
_INTERVAL = "a positive duration such as '500 ms', '10 s' or '5 min'; leave the key unset to turn periodic checkpoints off"


@dataclass(frozen=True)
class CheckpointingOptions:
    """Flink's checkpointing options with Flink's defaults.

    >>> CheckpointingOptions(interval_ms=500).retained
    1
    """

    #: None turns periodic checkpoints off; manual triggers still work
    interval_ms: int | None = None
    mode: str = "EXACTLY_ONCE"
    timeout_ms: int = 600_000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    #: consecutive checkpoint failures that are tolerated; one more fails the job
    tolerable_failures: int = 0
    #: completed checkpoints (not savepoints) kept; older ones are discarded
    retained: int = 1
    retain_on_cancellation: bool = False
    #: unaligned checkpoints (``unaligned.enabled``); they need exactly-once, savepoints stay aligned
    unaligned: bool = False
    #: with unaligned checkpoints: 0, they are unaligned from the start; else each starts aligned
    #: and a task whose alignment lasts this long (ms) switches it to unaligned
    aligned_timeout_ms: int = 0

    def __post_init__(self) -> None:
        if self.interval_ms is not None and self.interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive or None, not {self.interval_ms}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.timeout_ms <= 0 or self.min_pause_ms < 0 or self.max_concurrent < 1:
            raise ValueError("timeout_ms must be > 0, min_pause_ms >= 0 and max_concurrent >= 1")
        if self.tolerable_failures < 0 or self.retained < 1:
            raise ValueError("tolerable_failures must be >= 0 and retained >= 1")
        if self.aligned_timeout_ms < 0:
            raise ValueError(f"aligned_timeout_ms must be >= 0, not {self.aligned_timeout_ms}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> CheckpointingOptions:
        """Read Flink's ``execution.checkpointing.*`` keys (values are strings); others are ignored."""
        reader = _Reader(config)
        kw: dict[str, Any] = {}
        for field_name, value in (
            ("interval_ms", reader.duration("interval", 1, _INTERVAL)),
            ("mode", reader.choice("mode", MODES)),
            ("timeout_ms", reader.duration("timeout", 1, "a positive " + _DURATION[2:])),
            ("min_pause_ms", reader.duration("min-pause", 0, _DURATION)),
            ("max_concurrent", reader.integer("max-concurrent-checkpoints", 1)),
            ("tolerable_failures", reader.integer("tolerable-failed-checkpoints", 0)),
            ("retained", reader.integer("num-retained", 1)),
        ):
            if value is not None:
                kw[field_name] = value
        unaligned = config.get(PREFIX + "unaligned.enabled")
        if unaligned is not None:
            kw["unaligned"] = bool(reader._parse("unaligned.enabled", unaligned, "true or false"))
        timeout = reader.duration("aligned-checkpoint-timeout", 0, "0 (unaligned from the start) or a positive " + _DURATION[2:])
        if timeout is not None:
            kw["aligned_timeout_ms"] = timeout
        retention = reader.choice("externalized-checkpoint-retention", RETENTIONS)
        if retention is not None:
            kw["retain_on_cancellation"] = retention == "RETAIN_ON_CANCELLATION"
        return cls(**kw)


class _Reader:
    """Parses one ``execution.checkpointing.*`` key at a time with the schema's value type."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def _bad(self, name: str, value: Any, allowed: str) -> ConfigurationError:
        return ConfigurationError(f"invalid value {value!r} for configuration key '{PREFIX}{name}'", remedy=f"use {allowed}")

    def _parse(self, name: str, value: Any, allowed: str, *, raw: Any = None) -> Any:
        """The schema's parse of ``value``; errors show ``raw`` (what the user wrote), if given."""
        try:
            return SCHEMA[PREFIX + name].type.parse(value)
        except ValueError:
            raise self._bad(name, value if raw is None else raw, allowed) from None

    def duration(self, name: str, minimum: int, allowed: str) -> int | None:
        value = self.config.get(PREFIX + name)
        if value is None:
            return None
        ms: int = self._parse(name, value, allowed)
        if ms < minimum:
            raise self._bad(name, value, allowed)
        return ms

    def integer(self, name: str, minimum: int) -> int | None:
        value = self.config.get(PREFIX + name)
        if value is None:
            return None
        allowed = f"a whole number >= {minimum}"
        number: int = self._parse(name, value, allowed)
        if number < minimum:
            raise self._bad(name, value, allowed)
        return number

    def choice(self, name: str, allowed: tuple[str, ...]) -> str | None:
        """Flink spells these in upper case with underscores; dashes are accepted too."""
        value = self.config.get(PREFIX + name)
        if value is None:
            return None
        normalized = str(value).strip().upper().replace("-", "_")
        choice: str = self._parse(name, normalized, "one of " + ", ".join(allowed), raw=value)
        return choice
