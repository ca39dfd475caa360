"""Windows, window assigners, triggers, evictors and window functions, named as in
``pyflink.datastream.window`` (evictors follow Flink's Java API, which PyFlink lacks).

A window assigner puts each record into zero or more windows; a trigger decides when a window's
contents are handed to the window function; an evictor may drop elements before or after that.
Every object here is a plain, picklable value: the window operator in the task process keeps
all per-key, per-window state (contents, trigger counters, session sets) in the keyed state
backend, so checkpoints and rescaling carry it.

>>> from flinkpy.common.time import Time
>>> TumblingEventTimeWindows.of(Time.seconds(5)).assign_windows("x", 7_300, None)
[TimeWindow(start=5000, end=10000)]
>>> [w.start for w in SlidingEventTimeWindows.of(Time.seconds(10), Time.seconds(5)).assign_windows("x", 7_300, None)]
[5000, 0]
>>> TimeWindow(0, 10).max_timestamp()
9
"""

from __future__ import annotations

import abc
import enum
import operator
from collections.abc import Callable, Iterable
from typing import Any, Generic

from flinkpy.common.time import Duration, Time
from flinkpy.common.functions import IN, KEY, OUT, W2, Function, T, W
from flinkpy.common.state import ReducingStateDescriptor, State, StateDescriptor
from flinkpy.errors import InvalidProgramError

MAX_TIMESTAMP = 2**63 - 1
MIN_TIMESTAMP = -(2**63)

__all__ = [
    "AllWindowFunction",
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountEvictor",
    "CountTrigger",
    "CountWindow",
    "DeltaEvictor",
    "DeltaFunction",
    "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "Evictor",
    "GlobalWindow",
    "GlobalWindows",
    "MergingWindowAssigner",
    "NeverTrigger",
    "ProcessAllWindowFunction",
    "ProcessWindowFunction",
    "ProcessingTimeSessionWindows",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "SessionWindowTimeGapExtractor",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "TimeEvictor",
    "TimeWindow",
    "TimestampedValue",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "Window",
    "WindowAssigner",
    "WindowFunction",
]


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


# ---------------------------------------------------------------------------------------------
# Windows
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Triggers
# ---------------------------------------------------------------------------------------------


class TriggerResult(enum.Enum):
    """What a trigger asks for: evaluate the window (fire), discard its contents (purge), both,
    or nothing. A fired window without contents produces no output."""

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return self.value[0]

    def is_purge(self) -> bool:
        return self.value[1]


class Trigger(abc.ABC, Generic[T, W]):
    """Decides when a window (of one key) fires. Triggers keep no state in attributes: one
    instance serves every key and window; per-window state goes through
    ``ctx.get_partitioned_state(descriptor)``."""

    class TriggerContext(abc.ABC):
        """Timers and state of the window the trigger is called for."""

        @abc.abstractmethod
        def get_current_processing_time(self) -> int:
            ...

        @abc.abstractmethod
        def get_metric_group(self) -> Any:
            ...

        @abc.abstractmethod
        def get_current_watermark(self) -> int:
            ...

        @abc.abstractmethod
        def register_processing_time_timer(self, time: int) -> None:
            ...

        @abc.abstractmethod
        def register_event_time_timer(self, time: int) -> None:
            ...

        @abc.abstractmethod
        def delete_processing_time_timer(self, time: int) -> None:
            ...

        @abc.abstractmethod
        def delete_event_time_timer(self, time: int) -> None:
            ...

        @abc.abstractmethod
        def get_partitioned_state(self, state_descriptor: StateDescriptor) -> State:
            """State scoped to the current key and window."""

    class OnMergeContext(TriggerContext):
        @abc.abstractmethod
        def merge_partitioned_state(self, state_descriptor: StateDescriptor) -> None:
            """Fold the state of the merged windows into the merge result's."""

    @abc.abstractmethod
    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        ...

    @abc.abstractmethod
    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        ...

    @abc.abstractmethod
    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        ...

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        raise InvalidProgramError(
            f"{type(self).__name__} does not support merging windows (sessions)",
            remedy="implement can_merge() and on_merge(), or use a non-merging window assigner",
        )

    @abc.abstractmethod
    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (and again for each late element
    within the allowed lateness)."""

    @staticmethod
    def create() -> EventTimeTrigger:
        return EventTimeTrigger()

    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE  # a late element within the allowed lateness
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires when the processing-time clock passes the window's end."""

    @staticmethod
    def create() -> ProcessingTimeTrigger:
        return ProcessingTimeTrigger()

    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


class NeverTrigger(Trigger):
    """Never fires: the default of :class:`GlobalWindows`, which needs a trigger of its own."""

    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        pass

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        pass


class CountTrigger(Trigger):
    """Fires every ``count`` elements of a window (the counter restarts after each firing)."""

    _COUNT = ReducingStateDescriptor("count", operator.add)

    def __init__(self, count: int) -> None:
        if not isinstance(count, int) or count < 1:
            raise InvalidProgramError(f"CountTrigger needs a positive count, got {count!r}")
        self.count = count

    @staticmethod
    def of(count: int) -> CountTrigger:
        return CountTrigger(count)

    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        state = ctx.get_partitioned_state(self._COUNT)
        state.add(1)
        if state.get() >= self.count:
            state.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self._COUNT)

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        ctx.get_partitioned_state(self._COUNT).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self.count})"


class PurgingTrigger(Trigger):
    """Wraps a trigger and turns each of its FIREs into FIRE_AND_PURGE."""

    def __init__(self, nested_trigger: Trigger) -> None:
        self.nested_trigger = nested_trigger

    @staticmethod
    def of(nested_trigger: Trigger) -> PurgingTrigger:
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested_trigger.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested_trigger.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested_trigger.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested_trigger.can_merge()

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        self.nested_trigger.on_merge(window, ctx)

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        self.nested_trigger.clear(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.nested_trigger!r})"


class _ContinuousTrigger(Trigger):
    """Shared part of the continuous triggers: the next periodic firing time, kept in state."""

    _FIRE_TIME = ReducingStateDescriptor("fire-time", min)

    def __init__(self, interval: Time | Duration | int) -> None:
        self.interval = to_millis(interval, "interval")
        if self.interval <= 0:
            raise InvalidProgramError(f"{type(self).__name__} needs a positive interval, got {self.interval} ms")

    def can_merge(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.interval})"


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of event time within a window, and at its end."""

    @staticmethod
    def of(interval: Time | Duration | int) -> ContinuousEventTimeTrigger:
        return ContinuousEventTimeTrigger(interval)

    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        fire_time = ctx.get_partitioned_state(self._FIRE_TIME)
        if fire_time.get() is None and timestamp is not None:
            next_fire = timestamp - timestamp % self.interval + self.interval
            ctx.register_event_time_timer(next_fire)
            fire_time.add(next_fire)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        fire_time = ctx.get_partitioned_state(self._FIRE_TIME)
        if fire_time.get() == time:
            fire_time.clear()
            fire_time.add(time + self.interval)
            ctx.register_event_time_timer(time + self.interval)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self._FIRE_TIME)
        next_fire = ctx.get_partitioned_state(self._FIRE_TIME).get()
        if next_fire is not None:
            ctx.register_event_time_timer(next_fire)

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        fire_time = ctx.get_partitioned_state(self._FIRE_TIME)
        if fire_time.get() is not None:
            ctx.delete_event_time_timer(fire_time.get())
            fire_time.clear()


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of processing time while a window has elements."""

    @staticmethod
    def of(interval: Time | Duration | int) -> ContinuousProcessingTimeTrigger:
        return ContinuousProcessingTimeTrigger(interval)

    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        fire_time = ctx.get_partitioned_state(self._FIRE_TIME)
        if fire_time.get() is None:
            now = ctx.get_current_processing_time()
            next_fire = now - now % self.interval + self.interval
            ctx.register_processing_time_timer(next_fire)
            fire_time.add(next_fire)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        fire_time = ctx.get_partitioned_state(self._FIRE_TIME)
        if fire_time.get() == time:
            fire_time.clear()
            fire_time.add(time + self.interval)
            ctx.register_processing_time_timer(time + self.interval)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self._FIRE_TIME)
        next_fire = ctx.get_partitioned_state(self._FIRE_TIME).get()
        if next_fire is not None:
            ctx.register_processing_time_timer(next_fire)

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        fire_time = ctx.get_partitioned_state(self._FIRE_TIME)
        if fire_time.get() is not None:
            ctx.delete_processing_time_timer(fire_time.get())
            fire_time.clear()


# ---------------------------------------------------------------------------------------------
# Window assigners
# ---------------------------------------------------------------------------------------------


class WindowAssigner(abc.ABC, Generic[T, W]):
    """Puts an element into windows; ``context`` gives the processing time."""

    class WindowAssignerContext(abc.ABC):
        @abc.abstractmethod
        def get_current_processing_time(self) -> int:
            ...

    @abc.abstractmethod
    def assign_windows(self, element: Any, timestamp: int | None, context: WindowAssigner.WindowAssignerContext) -> list[Window]:
        ...

    @abc.abstractmethod
    def get_default_trigger(self, env: Any = None) -> Trigger:
        ...

    @abc.abstractmethod
    def is_event_time(self) -> bool:
        ...


class MergingWindowAssigner(WindowAssigner[T, W]):
    """An assigner whose windows merge (sessions)."""

    @abc.abstractmethod
    def merge_windows(self, windows: Iterable[Window], callback: Callable[[set, Window], None]) -> None:
        """Call ``callback(merged_windows, merge_result)`` for every group to merge."""


def _offset(size: int, offset: Time | Duration | int | None, name: str) -> int:
    off = 0 if offset is None else to_millis(offset, "offset")
    if abs(off) >= size:
        raise InvalidProgramError(f"{name}: the offset ({off} ms) must be smaller than the period ({size} ms)")
    return off


class _Tumbling(WindowAssigner):
    def __init__(self, size: int, offset: int) -> None:
        if size <= 0:
            raise InvalidProgramError(f"{type(self).__name__} needs a positive size, got {size} ms")
        self.size = size
        self.offset = offset

    def _windows_at(self, ts: int) -> list[Window]:
        start = TimeWindow.get_window_start_with_offset(ts, self.offset, self.size)
        return [TimeWindow(start, start + self.size)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size})" if not self.offset else f"{type(self).__name__}({self.size}, {self.offset})"


class TumblingEventTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping event-time windows, aligned to the epoch plus ``offset``."""

    @staticmethod
    def of(size: Time | Duration | int, offset: Time | Duration | int | None = None) -> TumblingEventTimeWindows:
        ms = to_millis(size, "size")
        return TumblingEventTimeWindows(ms, _offset(ms, offset, "TumblingEventTimeWindows"))

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        return self._windows_at(timestamp)  # type: ignore[arg-type]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True


class TumblingProcessingTimeWindows(_Tumbling):
    """Fixed-size, non-overlapping windows of the processing-time clock."""

    @staticmethod
    def of(size: Time | Duration | int, offset: Time | Duration | int | None = None) -> TumblingProcessingTimeWindows:
        ms = to_millis(size, "size")
        return TumblingProcessingTimeWindows(ms, _offset(ms, offset, "TumblingProcessingTimeWindows"))

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        return self._windows_at(context.get_current_processing_time())

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class _Sliding(WindowAssigner):
    def __init__(self, size: int, slide: int, offset: int) -> None:
        if size <= 0 or slide <= 0:
            raise InvalidProgramError(f"{type(self).__name__} needs a positive size and slide, got {size} and {slide} ms")
        self.size = size
        self.slide = slide
        self.offset = offset

    def _windows_at(self, ts: int) -> list[Window]:
        start = TimeWindow.get_window_start_with_offset(ts, self.offset, self.slide)
        windows: list[Window] = []
        while start > ts - self.size:
            windows.append(TimeWindow(start, start + self.size))
            start -= self.slide
        return windows

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.slide})"


class SlidingEventTimeWindows(_Sliding):
    """Windows of ``size`` starting every ``slide`` of event time; an element is in
    ``size / slide`` of them."""

    @staticmethod
    def of(size: Time | Duration | int, slide: Time | Duration | int, offset: Time | Duration | int | None = None) -> SlidingEventTimeWindows:
        s = to_millis(slide, "slide")
        return SlidingEventTimeWindows(to_millis(size, "size"), s, _offset(s, offset, "SlidingEventTimeWindows"))

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        return self._windows_at(timestamp)  # type: ignore[arg-type]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True


class SlidingProcessingTimeWindows(_Sliding):
    """Sliding windows of the processing-time clock."""

    @staticmethod
    def of(size: Time | Duration | int, slide: Time | Duration | int, offset: Time | Duration | int | None = None) -> SlidingProcessingTimeWindows:
        s = to_millis(slide, "slide")
        return SlidingProcessingTimeWindows(to_millis(size, "size"), s, _offset(s, offset, "SlidingProcessingTimeWindows"))

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        return self._windows_at(context.get_current_processing_time())

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class SessionWindowTimeGapExtractor(abc.ABC):
    """Gives the session gap (ms) of each element, for dynamic-gap sessions."""

    @abc.abstractmethod
    def extract(self, element: Any) -> int:
        ...


def _gap_of(extractor: Any, element: Any) -> int:
    extract = getattr(extractor, "extract", extractor)
    gap = to_millis(extract(element), "session gap")
    if gap <= 0:
        raise InvalidProgramError(
            f"the session gap extractor returned {gap} ms for {element!r}; gaps must be positive"
        )
    return gap


class _Sessions(MergingWindowAssigner):
    def __init__(self, gap: int | None = None, extractor: Any = None) -> None:
        if extractor is None and (gap is None or gap <= 0):
            raise InvalidProgramError(f"{type(self).__name__} needs a positive gap, got {gap} ms")
        self.gap = gap
        self.extractor = extractor

    def _session(self, element: Any, ts: int) -> list[Window]:
        gap = self.gap if self.extractor is None else _gap_of(self.extractor, element)
        return [TimeWindow(ts, ts + gap)]  # type: ignore[operator]

    def merge_windows(self, windows: Iterable[Window], callback: Callable[[set, Window], None]) -> None:
        TimeWindow.merge_windows(windows, callback)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.gap if self.extractor is None else 'dynamic'})"


class EventTimeSessionWindows(_Sessions):
    """Event-time sessions: a window per burst of elements, closed after ``gap`` of silence."""

    @staticmethod
    def with_gap(size: Time | Duration | int) -> EventTimeSessionWindows:
        return EventTimeSessionWindows(to_millis(size, "gap"))

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor | Callable[[Any], int]) -> DynamicEventTimeSessionWindows:
        return DynamicEventTimeSessionWindows(extractor=extractor)

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        return self._session(element, timestamp)  # type: ignore[arg-type]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True


class DynamicEventTimeSessionWindows(EventTimeSessionWindows):
    """Event-time sessions whose gap is chosen per element."""


class ProcessingTimeSessionWindows(_Sessions):
    """Processing-time sessions."""

    @staticmethod
    def with_gap(size: Time | Duration | int) -> ProcessingTimeSessionWindows:
        return ProcessingTimeSessionWindows(to_millis(size, "gap"))

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor | Callable[[Any], int]) -> DynamicProcessingTimeSessionWindows:
        return DynamicProcessingTimeSessionWindows(extractor=extractor)

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        return self._session(element, context.get_current_processing_time())

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class DynamicProcessingTimeSessionWindows(ProcessingTimeSessionWindows):
    """Processing-time sessions whose gap is chosen per element."""


class GlobalWindows(WindowAssigner):
    """Every element in one window per key; give it a trigger (the default never fires)."""

    @staticmethod
    def create() -> GlobalWindows:
        return GlobalWindows()

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        return [_GLOBAL_WINDOW]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "GlobalWindows()"


# ---------------------------------------------------------------------------------------------
# Evictors
# ---------------------------------------------------------------------------------------------


class TimestampedValue:
    """An element of a window as an evictor sees it."""

    __slots__ = ("value", "timestamp")

    def __init__(self, value: Any, timestamp: int | None = None) -> None:
        self.value = value
        self.timestamp = timestamp

    def get_value(self) -> Any:
        return self.value

    def get_timestamp(self) -> int | None:
        return self.timestamp

    def has_timestamp(self) -> bool:
        return self.timestamp is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimestampedValue) and (self.value, self.timestamp) == (other.value, other.timestamp)

    def __repr__(self) -> str:
        return f"TimestampedValue({self.value!r}, {self.timestamp})"


class Evictor(abc.ABC):
    """Removes elements of a firing window, before and/or after the window function.

    ``elements`` is a list of :class:`TimestampedValue` in arrival order; an evictor removes
    entries from it in place (``del elements[i]``). What remains is kept in the window.
    """

    class EvictorContext(abc.ABC):
        @abc.abstractmethod
        def get_current_processing_time(self) -> int:
            ...

        @abc.abstractmethod
        def get_current_watermark(self) -> int:
            ...

    @abc.abstractmethod
    def evict_before(self, elements: list[TimestampedValue], size: int, window: Window, evictor_context: Evictor.EvictorContext) -> None:
        ...

    @abc.abstractmethod
    def evict_after(self, elements: list[TimestampedValue], size: int, window: Window, evictor_context: Evictor.EvictorContext) -> None:
        ...


class _BeforeOrAfter(Evictor):
    do_evict_after: bool = False

    def evict_before(self, elements: list[TimestampedValue], size: int, window: Window, evictor_context: Any) -> None:
        if not self.do_evict_after:
            self._evict(elements, size)

    def evict_after(self, elements: list[TimestampedValue], size: int, window: Window, evictor_context: Any) -> None:
        if self.do_evict_after:
            self._evict(elements, size)

    @abc.abstractmethod
    def _evict(self, elements: list[TimestampedValue], size: int) -> None:
        ...


class CountEvictor(_BeforeOrAfter):
    """Keeps the last ``max_count`` elements of a window."""

    def __init__(self, max_count: int, do_evict_after: bool = False) -> None:
        if not isinstance(max_count, int) or max_count < 0:
            raise InvalidProgramError(f"CountEvictor needs a count >= 0, got {max_count!r}")
        self.max_count = max_count
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> CountEvictor:
        return CountEvictor(max_count, do_evict_after)

    def _evict(self, elements: list[TimestampedValue], size: int) -> None:
        if size > self.max_count:
            del elements[: size - self.max_count]

    def __repr__(self) -> str:
        return f"CountEvictor({self.max_count})"


class TimeEvictor(_BeforeOrAfter):
    """Keeps the elements within ``window_size`` of the newest element's timestamp."""

    def __init__(self, window_size: Time | Duration | int, do_evict_after: bool = False) -> None:
        self.window_size = to_millis(window_size, "window_size")
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(window_size: Time | Duration | int, do_evict_after: bool = False) -> TimeEvictor:
        return TimeEvictor(window_size, do_evict_after)

    def _evict(self, elements: list[TimestampedValue], size: int) -> None:
        if not elements or not all(e.has_timestamp() for e in elements):
            return  # without timestamps there is nothing to measure against
        cutoff = max(e.timestamp for e in elements) - self.window_size  # type: ignore[type-var]
        elements[:] = [e for e in elements if e.timestamp > cutoff]  # type: ignore[operator]

    def __repr__(self) -> str:
        return f"TimeEvictor({self.window_size})"


class DeltaFunction(abc.ABC):
    """The distance between two elements, for :class:`DeltaEvictor`."""

    @abc.abstractmethod
    def get_delta(self, old_data_point: Any, new_data_point: Any) -> float:
        ...


class DeltaEvictor(_BeforeOrAfter):
    """Drops the elements whose delta to the window's last element is >= ``threshold``."""

    def __init__(self, threshold: float, delta_function: DeltaFunction | Callable[[Any, Any], float], do_evict_after: bool = False) -> None:
        self.threshold = threshold
        self.delta_function = delta_function
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(threshold: float, delta_function: DeltaFunction | Callable[[Any, Any], float], do_evict_after: bool = False) -> DeltaEvictor:
        return DeltaEvictor(threshold, delta_function, do_evict_after)

    def _evict(self, elements: list[TimestampedValue], size: int) -> None:
        if not elements:
            return
        delta = getattr(self.delta_function, "get_delta", self.delta_function)
        last = elements[-1].value
        elements[:] = [e for e in elements if delta(e.value, last) < self.threshold]

    def __repr__(self) -> str:
        return f"DeltaEvictor({self.threshold})"


# ---------------------------------------------------------------------------------------------
# Window functions
# ---------------------------------------------------------------------------------------------


class WindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """``apply(key, window, inputs)`` returns (or yields) the outputs of one window firing."""

    @abc.abstractmethod
    def apply(self, key: Any, window: Window, inputs: Iterable[Any]) -> Iterable[Any]:
        ...


class AllWindowFunction(Function, Generic[IN, OUT, W]):
    """The non-keyed ``apply(window, inputs)``."""

    @abc.abstractmethod
    def apply(self, window: Window, inputs: Iterable[Any]) -> Iterable[Any]:
        ...


class ProcessWindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """``process(key, context, elements)`` yields the outputs of one window firing; the context
    gives the window, the clocks, and per-window and per-key state. ``clear(context)`` runs
    when the window is purged for good, to clear per-window state."""

    class Context(abc.ABC, Generic[W2]):
        @abc.abstractmethod
        def window(self) -> Window:
            ...

        @abc.abstractmethod
        def current_processing_time(self) -> int:
            ...

        @abc.abstractmethod
        def current_watermark(self) -> int:
            ...

        @abc.abstractmethod
        def window_state(self) -> Any:
            """A keyed state store scoped to this key and window."""

        @abc.abstractmethod
        def global_state(self) -> Any:
            """A keyed state store scoped to this key, across windows."""

        @abc.abstractmethod
        def output(self, output_tag: Any, value: Any) -> None:
            ...

    @abc.abstractmethod
    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        pass


class ProcessAllWindowFunction(Function, Generic[IN, OUT, W]):
    """The non-keyed ``process(context, elements)``."""

    Context = ProcessWindowFunction.Context

    @abc.abstractmethod
    def process(self, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        pass
