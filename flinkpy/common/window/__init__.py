"""Windows, window assigners, triggers, evictors and window functions, named as in
``pyflink.datastream.window`` (evictors follow Flink's Java API, which PyFlink lacks): one module
a concept (:mod:`.windows`, :mod:`.assigners`, :mod:`.triggers`, :mod:`.evictors`,
:mod:`.window_functions`), every name importable from here.

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

from flinkpy.common.window.assigners import (  # noqa: F401 (the private names: see below)
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
    EventTimeSessionWindows,
    GlobalWindows,
    MergingWindowAssigner,
    ProcessingTimeSessionWindows,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
    _gap_of,
    _offset,
    _Sessions,
    _Sliding,
    _Tumbling,
)
from flinkpy.common.window.evictors import CountEvictor, DeltaEvictor, DeltaFunction, Evictor, TimeEvictor, TimestampedValue, _BeforeOrAfter  # noqa: F401
from flinkpy.common.window.triggers import (  # noqa: F401
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
    _ContinuousTrigger,
)
from flinkpy.common.window.window_functions import AllWindowFunction, ProcessAllWindowFunction, ProcessWindowFunction, WindowFunction
from flinkpy.common.window.windows import _GLOBAL_WINDOW, MAX_TIMESTAMP, MIN_TIMESTAMP, CountWindow, GlobalWindow, TimeWindow, Window, to_millis  # noqa: F401

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

# Job payloads (cloudpickle) and snapshots (window state keyed by TimeWindow) pickle these classes
# by reference, as ``flinkpy.common.window.<name>``: the path they had when one module defined them.
# Every class and function importable here (nested classes too) keeps that path as its
# ``__module__``, so that what is pickled stays the same whichever module of this package defines it:
# payloads and savepoints of earlier versions load, and earlier versions load ours. The private
# bases are imported above for the same reason.


def _pickled_from_here(obj: object, defined_in: str) -> None:
    obj.__module__ = __name__
    for inner in vars(obj).values() if isinstance(obj, type) else ():
        if isinstance(inner, type) and inner.__module__ == defined_in and inner.__qualname__.startswith(obj.__qualname__ + "."):
            _pickled_from_here(inner, defined_in)


for _obj in list(globals().values()):
    if (isinstance(_obj, type) or callable(_obj)) and getattr(_obj, "__module__", "").startswith(__name__ + "."):
        _pickled_from_here(_obj, _obj.__module__)
del _obj
