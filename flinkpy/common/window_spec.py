"""A window as the DataStream API describes it and the task runs it: one StreamGraph node.

The API (:mod:`flinkpy.datastream.window_stream`) builds a :class:`WindowSpec`; the task builds
the window operator from it (:func:`flinkpy.task.window_slicing.create_window_operator`), on
the sliced path where :func:`execution_path` allows and on the general one otherwise. Both sides
share the spec, so it lives here, below either of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from flinkpy.common.window import (
    EventTimeTrigger,
    Evictor,
    ProcessAllWindowFunction,
    ProcessingTimeTrigger,
    ProcessWindowFunction,
    Trigger,
    WindowAssigner,
    _Sliding,
    _Tumbling,
)

#: what the contents of a window are
REDUCE = "reduce"
AGGREGATE = "aggregate"
#: how the window function is called (keyed and non-keyed variants differ in the key argument)
PROCESS = "process"
APPLY = "apply"


@dataclass
class WindowSpec:
    """Everything a window node needs; picklable (with cloudpickle for user lambdas).

    ``aggregation`` is ``"reduce"`` (``aggregate_function`` is a ReduceFunction or a callable
    of two values), ``"aggregate"`` (an AggregateFunction) or None (keep every element).
    ``window_function_kind`` is ``"process"`` (``process(key, ctx, elements)``), ``"apply"``
    (``apply(key, window, elements)``) or None (emit the reduced/aggregated result itself);
    with ``keyed=False`` (window_all) the key argument is left out.
    """

    assigner: WindowAssigner
    trigger: Trigger
    evictor: Evictor | None = None
    allowed_lateness_ms: int = 0
    late_tag_id: str | None = None
    aggregation: str | None = None
    aggregate_function: Any = None
    window_function: Any = None
    window_function_kind: str | None = None
    keyed: bool = True

    def describe(self) -> str:
        """``Window(<assigner>, <trigger>, <function>)``, the node's name."""
        fn = self.window_function if self.window_function is not None else self.aggregate_function
        fn_name = getattr(fn, "__name__", None) or type(fn).__name__
        evictor = f", {self.evictor!r}" if self.evictor is not None else ""
        return f"Window({self.assigner!r}, {self.trigger!r}{evictor}, {fn_name})"

    def execution_path(self) -> tuple[str, str]:
        """``("sliced" | "general", why)``: which operator runs this window (``flinkpy info``)."""
        return execution_path(self)

#: the window operator's two paths (:func:`execution_path`)
SLICED = "sliced"
GENERAL = "general"


def execution_path(spec: WindowSpec) -> tuple[str, str]:
    """``("sliced" | "general", why)``: whether a window runs on slices, decided from its spec."""
    assigner = spec.assigner
    if not isinstance(assigner, (_Tumbling, _Sliding)):
        return GENERAL, f"{type(assigner).__name__} windows are not cut into slices"
    if spec.evictor is not None:
        return GENERAL, "an evictor needs every element"
    if spec.aggregation not in (REDUCE, AGGREGATE):
        return GENERAL, "a window function alone needs every element"
    default = EventTimeTrigger if assigner.is_event_time() else ProcessingTimeTrigger
    if type(spec.trigger) is not default:
        return GENERAL, f"trigger {spec.trigger!r} is not the assigner's default"
    fn = spec.window_function
    if spec.window_function_kind == PROCESS and getattr(type(fn), "clear", None) not in (
        None,
        ProcessWindowFunction.clear,
        ProcessAllWindowFunction.clear,
    ):
        return GENERAL, "the window function's clear() runs per window"
    size = assigner.size
    slide = getattr(assigner, "slide", size)
    if slide > size:
        return GENERAL, "windows with gaps between them (slide > size)"
    return SLICED, f"slices of {math.gcd(size, slide)} ms"
