"""Stream operators, batch at a time.

Each operator takes a list of records and hands a list to its output (the next chained operator,
or a RecordWriter, or several of them). Working on lists keeps the per-record cost of the engine
to what the user's function costs: a list comprehension around a map, one dict lookup for keyed
state. User functions may be plain callables or PyFlink-style function objects.
"""

from __future__ import annotations

import types
from typing import Any, Callable

from flinkpy.errors import InvalidProgramError
from flinkpy.state.key_groups import KeyGroupAssigner

Output = Callable[[list], None]
_MISSING = object()


def fan_out(outputs: list[Output]) -> Output:
    if not outputs:
        return lambda batch: None
    if len(outputs) == 1:
        return outputs[0]

    def emit(batch: list) -> None:
        for out in outputs:
            out(batch)

    return emit


def _method(fn: Any, name: str) -> Callable:
    m = getattr(fn, name, None)
    if callable(m) and not isinstance(fn, types.FunctionType):
        return m
    if callable(fn):
        return fn
    raise InvalidProgramError(f"{type(fn).__name__} has no {name}() method")


def _iterate(result: Any) -> Any:
    if result is None:
        return ()
    return result


class Operator:
    """Base: ``process(batch)`` for records, ``end_input()`` once the input is exhausted."""

    name = "Operator"
    fn: Any = None

    def __init__(self, name: str, fn: Any, output: Output):
        self.name = name
        self.fn = fn
        self.output = output

    def open(self, runtime_context: Any) -> None:
        opener = getattr(self.fn, "open", None)
        if callable(opener) and not isinstance(self.fn, types.FunctionType):
            opener(runtime_context)

    def process(self, batch: list) -> None:
        raise NotImplementedError

    def end_input(self) -> None:
        """Called once after the last record (bounded inputs)."""

    def close(self) -> None:
        closer = getattr(self.fn, "close", None)
        if callable(closer) and not isinstance(self.fn, types.FunctionType):
            closer()


class MapOperator(Operator):
    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = _method(self.fn, "map")

    def process(self, batch: list) -> None:
        f = self._f
        self.output([f(r) for r in batch])


class FlatMapOperator(Operator):
    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = _method(self.fn, "flat_map")

    def process(self, batch: list) -> None:
        f = self._f
        out: list = []
        extend = out.extend
        for r in batch:
            res = f(r)
            if res is not None:
                extend(res)
        self.output(out)


class FilterOperator(Operator):
    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = _method(self.fn, "filter")

    def process(self, batch: list) -> None:
        f = self._f
        self.output([r for r in batch if f(r)])


class _ProcessContext:
    """The ``ctx`` handed to process_element (timestamps and timers arrive with event time)."""

    def __init__(self, operator: "Operator"):
        self._operator = operator
        self.current_key: Any = None

    def timestamp(self) -> int | None:
        return None

    def get_current_key(self) -> Any:
        return self.current_key

    def timer_service(self) -> Any:
        return _TimerService()

    def output(self, output_tag: Any, value: Any) -> None:
        raise InvalidProgramError(
            f"side output {getattr(output_tag, 'tag_id', output_tag)!r} from {self._operator.name!r}: "
            "side outputs are not supported yet"
        )


class _TimerService:
    def current_processing_time(self) -> int:
        import time

        return int(time.time() * 1000)

    def current_watermark(self) -> int:
        return -(2**63)

    def _unsupported(self, *args: Any) -> None:
        raise InvalidProgramError("timers are not supported yet in this flinkpy release")

    register_event_time_timer = register_processing_time_timer = _unsupported
    delete_event_time_timer = delete_processing_time_timer = _unsupported


class ProcessOperator(Operator):
    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = _method(self.fn, "process_element")
        self._ctx = _ProcessContext(self)

    def process(self, batch: list) -> None:
        f, ctx = self._f, self._ctx
        out: list = []
        for r in batch:
            out.extend(_iterate(f(r, ctx)))
        self.output(out)


class SinkOperator(Operator):
    """Runs a Sink's writer; the end of the chain."""

    def __init__(self, name: str, fn: Any, output: Output, writer_context: Any):
        super().__init__(name, fn, output)
        self._writer_context = writer_context

    def set_restored_state(self, states: list[Any]) -> None:
        from dataclasses import replace

        self._writer_context = replace(self._writer_context, restored_state=states)

    def open(self, runtime_context: Any) -> None:
        self.writer = self.fn.create_writer(self._writer_context)
        self._write = self.writer.write

    def process(self, batch: list) -> None:
        if batch:
            self._write(batch)

    def end_input(self) -> None:
        self.writer.flush(True)

    def close(self) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.close()


# -- keyed operators ------------------------------------------------------------------------


class KeyedOperator(Operator):
    """Base of operators on a KeyedStream: the key is recomputed from each record and the state
    backend is pointed at it before the user's function runs."""

    def __init__(self, name: str, fn: Any, output: Output, key_selector: Callable, backend: Any, batch_mode: bool):
        super().__init__(name, fn, output)
        self.key = key_selector
        self.backend = backend
        self.batch_mode = batch_mode
        self.assign = KeyGroupAssigner(backend.max_parallelism)


class KeyedReduceOperator(KeyedOperator):
    """Running reduce per key (STREAMING: every update is emitted; BATCH: the final value per key)."""

    STATE = "_reduce"

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = _method(self.fn, "reduce")
        self._table = self.backend.table(self.STATE)
        self._frozen = self.backend.frozen(self.STATE)

    def process(self, batch: list) -> None:
        f, key, table, frozen = self._f, self.key, self._table, self._frozen
        group_of = self.assign.memo  # key -> key group, filled by the assigner on a miss
        out: list | None = None if self.batch_mode else []
        append = out.append if out is not None else None
        missing = _MISSING
        for r in batch:
            k = key(r)
            kg = group_of.get(k)
            if kg is None:
                kg = self.assign(k)
            d = table.get(kg)
            if d is None:
                d = table[kg] = {}
            elif frozen and kg in frozen:
                d = self.backend.thaw(self.STATE, kg)  # copy-on-write after a snapshot
            old = d.get(k, missing)
            new = r if old is missing else f(old, r)
            d[k] = new
            if append is not None:
                append(new)
        if out:
            self.output(out)

    def end_input(self) -> None:
        if self.batch_mode:
            final = [v for kg in sorted(self._table) for v in self._table[kg].values()]
            if final:
                self.output(final)


class KeyedProcessOperator(KeyedOperator):
    """KeyedProcessFunction and keyed map/flat_map/filter: user code with keyed state."""

    def __init__(self, *args: Any, method: str, **kw: Any):
        super().__init__(*args, **kw)
        self.method = method

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = _method(self.fn, self.method)
        self._ctx = _ProcessContext(self)

    def process(self, batch: list) -> None:
        f, key, assign, backend, ctx = self._f, self.key, self.assign, self.backend, self._ctx
        set_key = backend.set_current_key_and_group
        out: list = []
        method = self.method
        for r in batch:
            k = key(r)
            set_key(k, assign(k))
            if method == "process_element":
                ctx.current_key = k
                out.extend(_iterate(f(r, ctx)))
            elif method == "map":
                out.append(f(r))
            elif method == "flat_map":
                out.extend(_iterate(f(r)))
            elif f(r):
                out.append(r)
        self.output(out)
