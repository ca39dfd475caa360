"""Watermark strategies: how a source assigns event timestamps and emits watermarks.

Only the settings are recorded here; the engine's event-time support reads them.

>>> from flinkpy.common.time import Duration
>>> s = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5))
...      .with_idleness(Duration.of_minutes(1)))
>>> s.kind, s.max_out_of_orderness_ms, s.idle_timeout_ms
('bounded-out-of-orderness', 5000, 60000)
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from flinkpy.common.time import Duration


class TimestampAssigner(abc.ABC):
    """Extracts a record's event timestamp (milliseconds since the epoch)."""

    @abc.abstractmethod
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        ...


class WatermarkStrategy:
    """An immutable description of timestamp assignment and watermark generation.

    The ``with_`` methods return a new strategy, so a base strategy can be shared.
    """

    __slots__ = (
        "kind",
        "max_out_of_orderness_ms",
        "timestamp_assigner",
        "idle_timeout_ms",
        "generator_supplier",
        "alignment",
    )

    def __init__(
        self,
        kind: str,
        max_out_of_orderness_ms: int = 0,
        timestamp_assigner: TimestampAssigner | Callable[[Any, int], int] | None = None,
        idle_timeout_ms: int | None = None,
        generator_supplier: Callable[[], Any] | None = None,
        alignment: tuple[str, int, int] | None = None,
    ) -> None:
        self.kind = kind
        self.max_out_of_orderness_ms = max_out_of_orderness_ms
        self.timestamp_assigner = timestamp_assigner
        self.idle_timeout_ms = idle_timeout_ms
        self.generator_supplier = generator_supplier
        self.alignment = alignment

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """Timestamps only grow: the watermark follows the largest timestamp seen."""
        return WatermarkStrategy("monotonous")

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> WatermarkStrategy:
        """Records arrive at most ``max_out_of_orderness`` late."""
        return WatermarkStrategy(
            "bounded-out-of-orderness", max_out_of_orderness.to_milliseconds()
        )

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        """Processing time only: no watermarks at all."""
        return WatermarkStrategy("no-watermarks")

    @staticmethod
    def for_generator(generator_supplier: Callable[[], Any]) -> WatermarkStrategy:
        """A user-defined watermark generator, built per subtask by ``generator_supplier``."""
        return WatermarkStrategy("generator", generator_supplier=generator_supplier)

    def _copy(self, **changes: Any) -> WatermarkStrategy:
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return WatermarkStrategy(**fields)

    def with_timestamp_assigner(
        self, timestamp_assigner: TimestampAssigner | Callable[[Any, int], int]
    ) -> WatermarkStrategy:
        return self._copy(timestamp_assigner=timestamp_assigner)

    def with_idleness(self, idle_timeout: Duration) -> WatermarkStrategy:
        return self._copy(idle_timeout_ms=idle_timeout.to_milliseconds())

    def with_watermark_alignment(
        self,
        watermark_group: str,
        max_allowed_watermark_drift: Duration,
        update_interval: Duration = Duration.of_seconds(1),
    ) -> WatermarkStrategy:
        return self._copy(
            alignment=(
                watermark_group,
                max_allowed_watermark_drift.to_milliseconds(),
                update_interval.to_milliseconds(),
            )
        )

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        """Apply the timestamp assigner (an object or a plain function) to one record."""
        assigner = self.timestamp_assigner
        if assigner is None:
            return record_timestamp
        if isinstance(assigner, TimestampAssigner):
            return assigner.extract_timestamp(value, record_timestamp)
        return assigner(value, record_timestamp)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WatermarkStrategy) and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.max_out_of_orderness_ms, self.idle_timeout_ms))

    def __repr__(self) -> str:
        parts = [self.kind]
        if self.kind == "bounded-out-of-orderness":
            parts.append(f"max_out_of_orderness={self.max_out_of_orderness_ms} ms")
        if self.idle_timeout_ms is not None:
            parts.append(f"idleness={self.idle_timeout_ms} ms")
        if self.timestamp_assigner is not None:
            parts.append("with timestamp assigner")
        return "WatermarkStrategy(" + ", ".join(parts) + ")"
