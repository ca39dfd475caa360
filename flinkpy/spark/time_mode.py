"""Which clock wakes a keyed step on Spark: Spark's watermark, or processing time.

``transformWithStateInPandas`` takes one time mode per stateful operator, and it decides what a
Spark timer is: in ``EventTime`` mode a timer fires when Spark's watermark passes it; in
``ProcessingTime`` mode when a micro-batch starts after it (and Spark then runs a micro-batch on
every trigger even without input, so a key with no new records is still woken). Spark's state
TTL (our background cleanup of expired state, see :mod:`flinkpy.spark.state`) exists in
``ProcessingTime`` mode only. A step cannot have both, so the runner picks one per keyed operator:

- ``ProcessingTime`` for windows whose assigner or trigger works in processing time, and for
  keyed functions that register processing-time timers or declare state with a time-to-live;
  their event-time timers are then checked on every micro-batch (see ``SparkTimers``);
- ``EventTime`` for everything else (the cheaper mode: a key is called only when it has records
  or Spark's watermark passes one of its timers).

Whether a function registers processing-time timers or enables TTL cannot be known before it
runs; :func:`mentions` reads its code instead — the methods of its class, the functions and
objects they reach through globals, closures and attributes — for the names of those calls.

>>> from flinkpy.datastream import KeyedProcessFunction
>>> class Timeout(KeyedProcessFunction):
...     def process_element(self, value, ctx):
...         ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 1000)
>>> choose("keyed_process", Timeout())
'ProcessingTime'
>>> choose("keyed_process", lambda value, ctx: [value])
'EventTime'
"""

from __future__ import annotations

import functools
import sys
import types
from typing import Any

EVENT_TIME = "EventTime"
PROCESSING_TIME = "ProcessingTime"

#: calls that need the processing-time clock on Spark
PROCESSING_TIME_CALLS = ("register_processing_time_timer",)
TTL_CALLS = ("enable_time_to_live",)
#: how far :func:`mentions` follows references (functions calling functions calling ...)
_MAX_OBJECTS = 2000
#: the trigger interval of a query with a ProcessingTime step when the job sets none
#: (``execution.checkpointing.interval``): Spark runs a micro-batch at every trigger even without
#: input, which is when processing-time timers fire, so this is their resolution
PROCESSING_TIME_TRIGGER_MS = 200


def choose(kind: str, fn: Any) -> str:
    """The time mode of a keyed operator of ``kind`` running ``fn`` (see the module docstring)."""
    if kind == "window":
        return PROCESSING_TIME if window_needs_processing_time(fn) else EVENT_TIME
    if kind in ("keyed_process", "keyed_map", "keyed_flat_map", "keyed_filter", "keyed_co_process", "keyed_co_map", "keyed_co_flat_map"):
        names = PROCESSING_TIME_CALLS + TTL_CALLS if kind in ("keyed_process", "keyed_co_process") else TTL_CALLS
        return PROCESSING_TIME if mentions(fn, names) else EVENT_TIME
    if kind == "keyed_reduce":
        return PROCESSING_TIME if mentions(fn, TTL_CALLS) else EVENT_TIME
    if kind == "keyed_broadcast_process":  # its state TTL is the engine's heap backend's (flinkpy.spark.broadcast)
        return PROCESSING_TIME if mentions(fn, PROCESSING_TIME_CALLS) else EVENT_TIME
    return EVENT_TIME


def window_needs_processing_time(spec: Any) -> bool:
    """A window spec whose assigner is in processing time, or whose trigger (or a trigger it
    wraps) registers processing-time timers; TTL state in its functions counts too."""
    from flinkpy.common.window import GlobalWindows

    assigner = spec.assigner
    if not assigner.is_event_time() and not isinstance(assigner, GlobalWindows):
        return True
    if mentions(spec.trigger, PROCESSING_TIME_CALLS):
        return True
    return mentions([spec.aggregate_function, spec.window_function], TTL_CALLS)


def mentions(root: Any, names: tuple[str, ...]) -> bool:
    """Whether code reachable from ``root`` names one of ``names`` (as an attribute, a global or
    a string constant): the code of functions, methods of user classes and of flinkpy's window
    triggers, and what they reach through globals, closures, defaults and instance attributes.
    Library code (the standard library, installed packages) is not followed."""
    wanted = set(names)
    seen: set[int] = set()
    stack: list[Any] = [root]
    while stack and len(seen) < _MAX_OBJECTS:
        obj = stack.pop()
        if obj is None or id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool)):
            continue
        seen.add(id(obj))
        if isinstance(obj, types.CodeType):
            if wanted & set(obj.co_names) or any(isinstance(c, str) and c in wanted for c in obj.co_consts):
                return True
            stack.extend(c for c in obj.co_consts if isinstance(c, types.CodeType))
            continue
        if isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
            continue
        if isinstance(obj, dict):
            stack.extend(obj.values())
            continue
        if isinstance(obj, functools.partial):
            stack.extend([obj.func, obj.args, obj.keywords])
            continue
        if isinstance(obj, types.MethodType):
            stack.extend([obj.__func__, obj.__self__])
            continue
        if isinstance(obj, (staticmethod, classmethod)):
            stack.append(obj.__func__)
            continue
        if isinstance(obj, property):
            stack.extend([obj.fget, obj.fset])
            continue
        if isinstance(obj, types.FunctionType):
            if not _followed(obj):
                continue
            code = obj.__code__
            stack.append(code)
            stack.extend(obj.__globals__[n] for n in code.co_names if n in obj.__globals__)
            stack.extend(cell.cell_contents for cell in obj.__closure__ or () if _has_contents(cell))
            stack.extend(obj.__defaults__ or ())
            continue
        if isinstance(obj, type):
            if _followed(obj):
                for klass in obj.__mro__:
                    if klass is not object and _followed(klass):
                        stack.extend(vars(klass).values())
            continue
        if isinstance(obj, types.ModuleType):
            continue
        cls = type(obj)
        if _followed(cls):
            stack.append(cls)
            stack.extend(getattr(obj, "__dict__", {}).values())
    return False


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell: the closure's variable is not bound yet
        return False
    return True


def _followed(obj: Any) -> bool:
    """User code and flinkpy's DataStream API (its triggers); not the runtime, not libraries."""
    module = getattr(obj, "__module__", None) or ""
    top = module.split(".")[0]
    if top == "flinkpy":
        return module.startswith(("flinkpy.datastream", "flinkpy.common.functions", "flinkpy.common.output_tag", "flinkpy.common.state", "flinkpy.common.window"))
    if top in sys.stdlib_module_names or top in ("builtins", "pyspark", "pandas", "numpy", "pyarrow", "cloudpickle"):
        return False
    file = getattr(sys.modules.get(module), "__file__", None) or ""
    return "site-packages" not in file and "dist-packages" not in file
