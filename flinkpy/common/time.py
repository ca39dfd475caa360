"""Durations and the older ``Time`` helper, as in ``pyflink.common.time``.

Both are millisecond-precise value objects; Flink's older APIs (windows, restart strategies,
state TTL) take ``Time``, newer ones (watermarks) take ``Duration``.

>>> Duration.of_seconds(2).to_milliseconds()
2000
>>> Time.minutes(1).to_milliseconds()
60000
>>> Duration.of_millis(1500) < Duration.of_seconds(2)
True
"""

from __future__ import annotations

import functools


@functools.total_ordering
class Duration:
    """A length of time, stored in milliseconds (Flink's resolution for user-facing time)."""

    __slots__ = ("_millis",)

    def __init__(self, millis: int) -> None:
        self._millis = int(millis)

    @staticmethod
    def of_millis(millis: int) -> Duration:
        return Duration(millis)

    @staticmethod
    def of_seconds(seconds: int) -> Duration:
        return Duration(seconds * 1000)

    @staticmethod
    def of_minutes(minutes: int) -> Duration:
        return Duration(minutes * 60_000)

    @staticmethod
    def of_hours(hours: int) -> Duration:
        return Duration(hours * 3_600_000)

    @staticmethod
    def of_days(days: int) -> Duration:
        return Duration(days * 86_400_000)

    @staticmethod
    def of_nanos(nanos: int) -> Duration:
        return Duration(nanos // 1_000_000)

    def to_milliseconds(self) -> int:
        return self._millis

    def to_millis(self) -> int:
        return self._millis

    def to_seconds(self) -> int:
        return self._millis // 1000

    def to_minutes(self) -> int:
        return self._millis // 60_000

    def to_hours(self) -> int:
        return self._millis // 3_600_000

    def to_days(self) -> int:
        return self._millis // 86_400_000

    def to_nanos(self) -> int:
        return self._millis * 1_000_000

    def is_zero(self) -> bool:
        return self._millis == 0

    def is_negative(self) -> bool:
        return self._millis < 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and self._millis == other._millis

    def __lt__(self, other: Duration) -> bool:
        return self._millis < other._millis

    def __hash__(self) -> int:
        return hash(("Duration", self._millis))

    def __reduce__(self) -> tuple:
        return (Duration, (self._millis,))

    def __repr__(self) -> str:
        return f"Duration.of_millis({self._millis})"


@functools.total_ordering
class Time:
    """A time interval for windows, restart delays and state TTL; see :class:`Duration`."""

    __slots__ = ("_millis",)

    def __init__(self, milliseconds: int) -> None:
        self._millis = int(milliseconds)

    @staticmethod
    def milliseconds(milliseconds: int) -> Time:
        return Time(milliseconds)

    @staticmethod
    def seconds(seconds: int) -> Time:
        return Time(seconds * 1000)

    @staticmethod
    def minutes(minutes: int) -> Time:
        return Time(minutes * 60_000)

    @staticmethod
    def hours(hours: int) -> Time:
        return Time(hours * 3_600_000)

    @staticmethod
    def days(days: int) -> Time:
        return Time(days * 86_400_000)

    def to_milliseconds(self) -> int:
        return self._millis

    def to_duration(self) -> Duration:
        return Duration(self._millis)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Time) and self._millis == other._millis

    def __lt__(self, other: Time) -> bool:
        return self._millis < other._millis

    def __hash__(self) -> int:
        return hash(("Time", self._millis))

    def __reduce__(self) -> tuple:
        return (Time, (self._millis,))

    def __repr__(self) -> str:
        return f"Time.milliseconds({self._millis})"
