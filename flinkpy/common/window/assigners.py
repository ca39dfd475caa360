"""Window assigners: which windows an element belongs to (tumbling, sliding, sessions, global),
and the trigger each uses when the program names none."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from typing import Any, Generic

from flinkpy.common.functions import T, W
from flinkpy.common.time import Duration, Time
from flinkpy.common.window.triggers import EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, Trigger
from flinkpy.common.window.windows import _GLOBAL_WINDOW, TimeWindow, Window, to_millis
from flinkpy.errors import InvalidProgramError


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


class _EventTime:
    """The event-time side of an assigner: a record's windows by its timestamp; fired by the watermark."""

    def _time(self, timestamp: int | None, context: Any) -> int:
        return timestamp  # type: ignore[return-value]

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True


class _ProcessingTime:
    """The processing-time side: a record's windows by the clock when it arrives; fired by the clock."""

    def _time(self, timestamp: int | None, context: Any) -> int:
        return context.get_current_processing_time()

    def get_default_trigger(self, env: Any = None) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class _Tumbling(WindowAssigner):
    def __init__(self, size: int, offset: int) -> None:
        if size <= 0:
            raise InvalidProgramError(f"{type(self).__name__} needs a positive size, got {size} ms")
        self.size = size
        self.offset = offset

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        start = TimeWindow.get_window_start_with_offset(self._time(timestamp, context), self.offset, self.size)  # type: ignore[attr-defined]
        return [TimeWindow(start, start + self.size)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size})" if not self.offset else f"{type(self).__name__}({self.size}, {self.offset})"


class TumblingEventTimeWindows(_EventTime, _Tumbling):
    """Fixed-size, non-overlapping event-time windows, aligned to the epoch plus ``offset``."""

    @staticmethod
    def of(size: Time | Duration | int, offset: Time | Duration | int | None = None) -> TumblingEventTimeWindows:
        ms = to_millis(size, "size")
        return TumblingEventTimeWindows(ms, _offset(ms, offset, "TumblingEventTimeWindows"))


class TumblingProcessingTimeWindows(_ProcessingTime, _Tumbling):
    """Fixed-size, non-overlapping windows of the processing-time clock."""

    @staticmethod
    def of(size: Time | Duration | int, offset: Time | Duration | int | None = None) -> TumblingProcessingTimeWindows:
        ms = to_millis(size, "size")
        return TumblingProcessingTimeWindows(ms, _offset(ms, offset, "TumblingProcessingTimeWindows"))


class _Sliding(WindowAssigner):
    def __init__(self, size: int, slide: int, offset: int) -> None:
        if size <= 0 or slide <= 0:
            raise InvalidProgramError(f"{type(self).__name__} needs a positive size and slide, got {size} and {slide} ms")
        self.size = size
        self.slide = slide
        self.offset = offset

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        ts = self._time(timestamp, context)  # type: ignore[attr-defined]
        start = TimeWindow.get_window_start_with_offset(ts, self.offset, self.slide)
        windows: list[Window] = []
        while start > ts - self.size:
            windows.append(TimeWindow(start, start + self.size))
            start -= self.slide
        return windows

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.slide})"


class SlidingEventTimeWindows(_EventTime, _Sliding):
    """Windows of ``size`` starting every ``slide`` of event time; an element is in
    ``size / slide`` of them."""

    @staticmethod
    def of(size: Time | Duration | int, slide: Time | Duration | int, offset: Time | Duration | int | None = None) -> SlidingEventTimeWindows:
        s = to_millis(slide, "slide")
        return SlidingEventTimeWindows(to_millis(size, "size"), s, _offset(s, offset, "SlidingEventTimeWindows"))


class SlidingProcessingTimeWindows(_ProcessingTime, _Sliding):
    """Sliding windows of the processing-time clock."""

    @staticmethod
    def of(size: Time | Duration | int, slide: Time | Duration | int, offset: Time | Duration | int | None = None) -> SlidingProcessingTimeWindows:
        s = to_millis(slide, "slide")
        return SlidingProcessingTimeWindows(to_millis(size, "size"), s, _offset(s, offset, "SlidingProcessingTimeWindows"))


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

    def assign_windows(self, element: Any, timestamp: int | None, context: Any) -> list[Window]:
        ts = self._time(timestamp, context)  # type: ignore[attr-defined]
        gap = self.gap if self.extractor is None else _gap_of(self.extractor, element)
        return [TimeWindow(ts, ts + gap)]  # type: ignore[operator]

    def merge_windows(self, windows: Iterable[Window], callback: Callable[[set, Window], None]) -> None:
        TimeWindow.merge_windows(windows, callback)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.gap if self.extractor is None else 'dynamic'})"


class EventTimeSessionWindows(_EventTime, _Sessions):
    """Event-time sessions: a window per burst of elements, closed after ``gap`` of silence."""

    @staticmethod
    def with_gap(size: Time | Duration | int) -> EventTimeSessionWindows:
        return EventTimeSessionWindows(to_millis(size, "gap"))

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor | Callable[[Any], int]) -> DynamicEventTimeSessionWindows:
        return DynamicEventTimeSessionWindows(extractor=extractor)


class DynamicEventTimeSessionWindows(EventTimeSessionWindows):
    """Event-time sessions whose gap is chosen per element."""


class ProcessingTimeSessionWindows(_ProcessingTime, _Sessions):
    """Processing-time sessions."""

    @staticmethod
    def with_gap(size: Time | Duration | int) -> ProcessingTimeSessionWindows:
        return ProcessingTimeSessionWindows(to_millis(size, "gap"))

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor | Callable[[Any], int]) -> DynamicProcessingTimeSessionWindows:
        return DynamicProcessingTimeSessionWindows(extractor=extractor)


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
