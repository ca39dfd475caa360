"""The contexts a window operator hands to user code: trigger, window function, assigner.

Each is a thin view of the :class:`~flinkpy.task.window_operator.WindowOperator` it belongs to
(its timers, its namespaced states, its side outputs), shaped as PyFlink's context classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from flinkpy.common.window import Trigger, Window
from flinkpy.errors import InvalidProgramError
from flinkpy.task.window_state import StateStore

if TYPE_CHECKING:
    from flinkpy.task.window_operator import WindowOperator


class TriggerContext(Trigger.OnMergeContext):
    """The trigger's view of the current key and ``window``; timers take the window as namespace."""

    def __init__(self, op: WindowOperator) -> None:
        self._op = op
        self.window: Any = None
        self.merged_windows: Iterable[Any] = ()

    def get_current_processing_time(self) -> int:
        return self._op.timers.current_processing_time()

    def get_current_watermark(self) -> int:
        return self._op.timers.current_watermark()

    def get_metric_group(self) -> Any:
        return self._op.metric_group()

    def register_processing_time_timer(self, time: int) -> None:
        self._op.timers.register_processing_time_timer(time, self.window)

    def register_event_time_timer(self, time: int) -> None:
        self._op.timers.register_event_time_timer(time, self.window)

    def delete_processing_time_timer(self, time: int) -> None:
        self._op.timers.delete_processing_time_timer(time, self.window)

    def delete_event_time_timer(self, time: int) -> None:
        self._op.timers.delete_event_time_timer(time, self.window)

    def get_partitioned_state(self, state_descriptor: Any) -> Any:
        return self._op.trigger_states.state(state_descriptor, self.window)

    def merge_partitioned_state(self, state_descriptor: Any) -> None:
        self._op.trigger_states.merge(state_descriptor, self.window, self.merged_windows)


class WindowContext:
    """The context of ProcessWindowFunction.process/clear (also the evictor's context)."""

    def __init__(self, op: WindowOperator) -> None:
        self._op = op
        self._window: Any = None

    def window(self) -> Window:
        return self._window

    def current_processing_time(self) -> int:
        return self._op.timers.current_processing_time()

    def current_watermark(self) -> int:
        return self._op.timers.current_watermark()

    get_current_processing_time = current_processing_time
    get_current_watermark = current_watermark

    def window_state(self) -> StateStore:
        if self._op.merging:
            raise InvalidProgramError(
                f"window operator {self._op.name!r}: per-window state is not available with merging "
                "windows (sessions), whose windows disappear when they merge",
                remedy="use global_state(), or a non-merging window assigner",
            )
        window = self._window
        return StateStore(lambda d: self._op.window_states.state(d, window))

    def global_state(self) -> StateStore:
        return StateStore(self._op.backend.get_partitioned_state)

    def output(self, output_tag: Any, value: Any) -> None:
        self._op.side_output(output_tag.tag_id, value, self._window.max_timestamp())


class AssignerContext:
    def __init__(self, op: WindowOperator) -> None:
        self._op = op

    def get_current_processing_time(self) -> int:
        return self._op.timers.current_processing_time()
