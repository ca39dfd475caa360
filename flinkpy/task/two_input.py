"""Two-input operators: the heads of tasks that read two connected streams.

A two-input operator takes the first input's batches through ``process`` (as any operator, so
the task's input loop and the chain need nothing new for input 1) and the second input's
through ``process2``. It is always the head of its task's chain — an operator with two inputs
cannot be chained to either — so the task combines both inputs' watermarks and aligns their
barriers before the operator sees them: its event time is the minimum of its inputs', and a
snapshot of its state is consistent with both.

The keyed variants key each input by its own selector (``ConnectedStreams.key_by(k1, k2)``,
or two keyed streams connected): a record of either input sees the state and timers of its key,
and the two inputs share them, which is what makes a keyed co-process a join.
"""

from __future__ import annotations

from typing import Any, Callable

from flinkpy.task.operators import (
    KeyedProcessOperator,
    Operator,
    ProcessOperator,
    user_method,
    flat_map_batch,
)


class CoMapOperator(Operator):
    """``ConnectedStreams.map(CoMapFunction)``: ``map1`` for the first input, ``map2`` for the second."""

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f1 = user_method(self.fn, "map1")
        self._f2 = user_method(self.fn, "map2")

    def process(self, values: list, timestamps: list[int] | None) -> None:
        f = self._f1
        self.output.process([f(r) for r in values], timestamps)

    def process2(self, values: list, timestamps: list[int] | None) -> None:
        f = self._f2
        self.output.process([f(r) for r in values], timestamps)


class CoFlatMapOperator(Operator):
    """``ConnectedStreams.flat_map(CoFlatMapFunction)``."""

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f1 = user_method(self.fn, "flat_map1")
        self._f2 = user_method(self.fn, "flat_map2")

    def process(self, values: list, timestamps: list[int] | None) -> None:
        flat_map_batch(self._f1, values, timestamps, self.output)

    def process2(self, values: list, timestamps: list[int] | None) -> None:
        flat_map_batch(self._f2, values, timestamps, self.output)


class CoProcessOperator(ProcessOperator):
    """``ConnectedStreams.process(CoProcessFunction)`` on streams that are not keyed: outputs,
    side outputs and the record's timestamp, but no state of a key and no timers."""

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f2 = user_method(self.fn, "process_element2")

    def _function(self) -> Callable:
        return user_method(self.fn, "process_element1")

    def process2(self, values: list, timestamps: list[int] | None) -> None:
        self._run(self._f2, values, timestamps)


#: the methods a keyed two-input operator calls, by the kind of its function
CO_METHODS = {
    "process_element": ("process_element1", "process_element2"),
    "map": ("map1", "map2"),
    "flat_map": ("flat_map1", "flat_map2"),
}


class KeyedCoProcessOperator(KeyedProcessOperator):
    """Connected keyed streams: ``process`` (a KeyedCoProcessFunction, with keyed state, timers
    and ``on_timer``), ``map`` or ``flat_map`` (a CoMapFunction / CoFlatMapFunction with keyed
    state). ``key`` keys the first input, ``key2`` the second; both reach the state of a key."""

    def __init__(self, *args: Any, key2: Callable, **kw: Any):
        super().__init__(*args, **kw)
        self.key2 = key2

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f2 = user_method(self.fn, CO_METHODS[self.method][1])

    def _function(self) -> Callable:
        return user_method(self.fn, CO_METHODS[self.method][0])

    def process2(self, values: list, timestamps: list[int] | None) -> None:
        self._run(values, timestamps, self._f2, self.key2, self.method)


#: operator kinds (StreamGraph nodes) of connected streams, and what builds them
NON_KEYED = {"co_map": CoMapOperator, "co_flat_map": CoFlatMapOperator, "co_process": CoProcessOperator}
#: keyed kinds, and the kind of function each calls (a key of CO_METHODS)
KEYED = {"keyed_co_process": "process_element", "keyed_co_map": "map", "keyed_co_flat_map": "flat_map"}
