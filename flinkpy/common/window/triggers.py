"""Triggers: when the window of one key fires (hands its contents to the window function) or
purges. Per-window trigger state goes through the trigger context into the keyed state backend,
so one trigger instance serves every key and window."""

from __future__ import annotations

import abc
import enum
import operator
from typing import Any, Generic

from flinkpy.common.functions import T, W
from flinkpy.common.state import ReducingStateDescriptor, State, StateDescriptor
from flinkpy.common.time import Duration, Time
from flinkpy.common.window.windows import Window, to_millis
from flinkpy.errors import InvalidProgramError


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
    """Shared part of the continuous triggers: the next periodic firing time, kept in state, and
    its timer on the trigger's clock (``_register`` and ``_delete``)."""

    _FIRE_TIME = ReducingStateDescriptor("fire-time", min)

    def __init__(self, interval: Time | Duration | int) -> None:
        self.interval = to_millis(interval, "interval")
        if self.interval <= 0:
            raise InvalidProgramError(f"{type(self).__name__} needs a positive interval, got {self.interval} ms")

    @abc.abstractmethod
    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ...

    @abc.abstractmethod
    def _delete(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ...

    def _start_period(self, ctx: Trigger.TriggerContext, time: int) -> None:
        """The first firing after ``time``, unless the window has one already."""
        fire_time = ctx.get_partitioned_state(self._FIRE_TIME)
        if fire_time.get() is None:
            next_fire = time - time % self.interval + self.interval
            self._register(ctx, next_fire)
            fire_time.add(next_fire)

    def _on_timer(self, time: int, ctx: Trigger.TriggerContext) -> TriggerResult:
        """FIRE when ``time`` is the window's periodic firing, and set the next one."""
        fire_time = ctx.get_partitioned_state(self._FIRE_TIME)
        if fire_time.get() == time:
            fire_time.clear()
            fire_time.add(time + self.interval)
            self._register(ctx, time + self.interval)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self._FIRE_TIME)
        next_fire = ctx.get_partitioned_state(self._FIRE_TIME).get()
        if next_fire is not None:
            self._register(ctx, next_fire)

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        fire_time = ctx.get_partitioned_state(self._FIRE_TIME)
        if fire_time.get() is not None:
            self._delete(ctx, fire_time.get())
            fire_time.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.interval})"


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of event time within a window, and at its end."""

    @staticmethod
    def of(interval: Time | Duration | int) -> ContinuousEventTimeTrigger:
        return ContinuousEventTimeTrigger(interval)

    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.register_event_time_timer(time)

    def _delete(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.delete_event_time_timer(time)

    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        if timestamp is not None:
            self._start_period(ctx, timestamp)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        return self._on_timer(time, ctx)

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of processing time while a window has elements."""

    @staticmethod
    def of(interval: Time | Duration | int) -> ContinuousProcessingTimeTrigger:
        return ContinuousProcessingTimeTrigger(interval)

    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.register_processing_time_timer(time)

    def _delete(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.delete_processing_time_timer(time)

    def on_element(self, element: Any, timestamp: int | None, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        self._start_period(ctx, ctx.get_current_processing_time())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._on_timer(time, ctx)
