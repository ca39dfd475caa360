"""Evictors: drop elements of a firing window before or after the window function (Flink's Java
API; PyFlink has none)."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from flinkpy.common.time import Duration, Time
from flinkpy.common.window.windows import Window, to_millis
from flinkpy.errors import InvalidProgramError


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
