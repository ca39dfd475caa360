"""Windows: the buckets a window assigner puts elements into (:class:`TimeWindow` for time
windows and sessions, :class:`CountWindow`, the single :class:`GlobalWindow`), and the durations
windows accept."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable

from flinkpy.common.time import Duration, Time
from flinkpy.errors import InvalidProgramError

MAX_TIMESTAMP = 2**63 - 1
MIN_TIMESTAMP = -(2**63)


def to_millis(value: Time | Duration | int, what: str) -> int:
    """Milliseconds of a ``Time``, ``Duration`` or int (windows accept all three)."""
    if isinstance(value, (Time, Duration)):
        return value.to_milliseconds()
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidProgramError(
        f"{what} must be a Time, a Duration or milliseconds as int, got {type(value).__name__}",
        remedy="use Time.seconds(5) or Time.milliseconds(500)",
    )


class Window(abc.ABC):
    """A finite bucket of elements; all of its elements have arrived once time passes
    ``max_timestamp()``."""

    @abc.abstractmethod
    def max_timestamp(self) -> int:
        ...


class TimeWindow(tuple, Window):
    """The interval ``[start, end)`` in milliseconds.

    A tuple underneath: windows are hashed and compared once or more per record (state and
    timers are keyed by them), and tuple hashing and equality run in C.
    """

    __slots__ = ()

    def __new__(cls, start: int, end: int) -> "TimeWindow":
        return tuple.__new__(cls, (start, end))

    def __init__(self, start: int, end: int) -> None:
        pass

    start = property(lambda self: tuple.__getitem__(self, 0))
    end = property(lambda self: tuple.__getitem__(self, 1))

    def get_start(self) -> int:
        return self.start

    def get_end(self) -> int:
        return self.end

    def max_timestamp(self) -> int:
        return self[1] - 1

    def intersects(self, other: TimeWindow) -> bool:
        """True if the windows overlap or touch (sessions that touch merge)."""
        return self.start <= other.end and other.start <= self.end

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window that contains both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """The start of the window of ``window_size`` (shifted by ``offset``) holding ``timestamp``.

        >>> TimeWindow.get_window_start_with_offset(7_300, 0, 5_000)
        5000
        >>> TimeWindow.get_window_start_with_offset(-1, 0, 5_000)
        -5000
        """
        return timestamp - (timestamp - offset) % window_size

    @staticmethod
    def merge_windows(windows: Iterable[TimeWindow], callback: Callable[[set, TimeWindow], None]) -> None:
        """Call ``callback(merged_set, merge_result)`` for every group of two or more windows
        that overlap transitively."""
        group: list[TimeWindow] = []
        cover: TimeWindow | None = None
        for w in sorted(windows, key=lambda w: (w.start, w.end)):
            if cover is not None and cover.intersects(w):
                cover = cover.cover(w)
                group.append(w)
                continue
            if len(group) > 1:
                callback(set(group), cover)
            group, cover = [w], w
        if len(group) > 1:
            callback(set(group), cover)

    def __reduce__(self) -> tuple:
        return (TimeWindow, (self[0], self[1]))

    def __repr__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"


class CountWindow(Window):
    """A window identified by a number (count-based assigners)."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:  # noqa: A002 (PyFlink's parameter name)
        self.id = id

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP

    def __eq__(self, other: object) -> bool:
        return type(other) is CountWindow and self.id == other.id

    def __hash__(self) -> int:
        return hash(("CountWindow", self.id))

    def __reduce__(self) -> tuple:
        return (CountWindow, (self.id,))

    def __repr__(self) -> str:
        return f"CountWindow(id={self.id})"


class GlobalWindow(Window):
    """The single window of :class:`GlobalWindows`; it ends only with the stream."""

    __slots__ = ()

    @staticmethod
    def get() -> GlobalWindow:
        return _GLOBAL_WINDOW

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP

    def __eq__(self, other: object) -> bool:
        return type(other) is GlobalWindow

    def __hash__(self) -> int:
        return 0

    def __reduce__(self) -> tuple:
        return (GlobalWindow, ())

    def __repr__(self) -> str:
        return "GlobalWindow"


_GLOBAL_WINDOW = GlobalWindow()
