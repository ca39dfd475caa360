"""Stream operators, batch at a time, with event time.

Each operator takes a batch — a list of records and, when the stream has event timestamps, a
parallel list of them (``None`` otherwise) — and hands batches to its output: the next chained
operator, a RecordWriter, or several of them (:class:`Fanout`). Working on lists keeps the
per-record cost of the engine to what the user's function costs: a list comprehension around a
map, one dict lookup for keyed state. Watermarks travel the same way (``process_watermark``):
a keyed operator first fires its event-time timers, then passes the watermark on.

User functions may be plain callables or PyFlink-style function objects.
"""

from __future__ import annotations

import collections
import types
from typing import Any, Callable

from flinkpy.clock import now_ms
from flinkpy.errors import InvalidProgramError
from flinkpy.task.side_outputs import collect
from flinkpy.state.heap import writable_copy
from flinkpy.state.key_groups import KeyGroupAssigner
from flinkpy.state.views import ByKeyGroup

_MISSING = object()
#: a C-level append that keeps nothing (BATCH mode's keyed reduce emits no updates)
_discard = collections.deque(maxlen=0).append


class Output:
    """Where an operator's records and watermarks go."""

    #: ``invoke(record, None)`` when this output takes records one by one with nothing between
    #: them (a SinkFunction's): an operator that makes its records one at a time may call it in
    #: its own loop instead of building a batch for it (one loop and one list fewer per record)
    per_record: Callable[[Any, Any], Any] | None = None

    def process(self, values: list, timestamps: list[int] | None) -> None:
        raise NotImplementedError

    def process_watermark(self, watermark: int) -> None:
        raise NotImplementedError

    def process_watermark_status(self, idle: bool) -> None:
        """A source went idle (or active again): its watermark must not hold others back."""


class Discard(Output):
    def process(self, values: list, timestamps: list[int] | None) -> None:
        pass

    def process_watermark(self, watermark: int) -> None:
        pass


class Fanout(Output):
    def __init__(self, outputs: list[Output]):
        self.outputs = outputs

    def process(self, values: list, timestamps: list[int] | None) -> None:
        for out in self.outputs:
            out.process(values, timestamps)

    def process_watermark(self, watermark: int) -> None:
        for out in self.outputs:
            out.process_watermark(watermark)

    def process_watermark_status(self, idle: bool) -> None:
        for out in self.outputs:
            out.process_watermark_status(idle)


def fan_out(outputs: list[Output]) -> Output:
    if not outputs:
        return Discard()
    if len(outputs) == 1:
        return outputs[0]
    return Fanout(outputs)


def user_method(fn: Any, name: str) -> Callable:
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


class Operator(Output):
    """Base: ``process(values, timestamps)`` for records, ``process_watermark`` for event time,
    ``end_input()`` once the input is exhausted."""

    #: processing time in epoch milliseconds, for contexts without a timer service (the chain
    #: sets the task's clock; a test harness a manual one)
    clock: Callable[[], int] = staticmethod(now_ms)

    def __init__(self, name: str, fn: Any, output: Output):
        self.name = name
        self.fn = fn
        self.output = output
        #: side outputs by OutputTag id
        self.side_outputs: dict[str, Output] = {}

    def open(self, runtime_context: Any) -> None:
        opener = getattr(self.fn, "open", None)
        if callable(opener) and not isinstance(self.fn, types.FunctionType):
            opener(runtime_context)

    def process(self, values: list, timestamps: list[int] | None) -> None:
        raise NotImplementedError

    def process_watermark(self, watermark: int) -> None:
        self.output.process_watermark(watermark)

    def process_watermark_status(self, idle: bool) -> None:
        self.output.process_watermark_status(idle)

    def side_output(self, tag_id: str, values: list, timestamps: list[int] | None) -> None:
        out = self.side_outputs.get(tag_id)
        if out is not None and values:
            out.process(values, timestamps)

    def end_input(self) -> None:
        """Called once after the last record (bounded inputs)."""

    def close(self) -> None:
        closer = getattr(self.fn, "close", None)
        if callable(closer) and not isinstance(self.fn, types.FunctionType):
            closer()


class MapOperator(Operator):
    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = user_method(self.fn, "map")

    def process(self, values: list, timestamps: list[int] | None) -> None:
        f = self._f
        self.output.process([f(r) for r in values], timestamps)


class FlatMapOperator(Operator):
    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = user_method(self.fn, "flat_map")

    def process(self, values: list, timestamps: list[int] | None) -> None:
        flat_map_batch(self._f, values, timestamps, self.output)


def flat_map_batch(f: Callable, values: list, timestamps: list[int] | None, output: Output) -> None:
    """Run a flat-map function over a batch; each output carries its input's timestamp."""
    out: list = []
    if timestamps is None:
        extend = out.extend
        for r in values:
            res = f(r)
            if res is not None:
                extend(res)
        output.process(out, None)
        return
    ts_out: list[int] = []
    for r, t in zip(values, timestamps):
        res = f(r)
        if res is not None:
            before = len(out)
            out.extend(res)
            ts_out.extend([t] * (len(out) - before))
    output.process(out, ts_out)


class FilterOperator(Operator):
    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = user_method(self.fn, "filter")

    def process(self, values: list, timestamps: list[int] | None) -> None:
        f = self._f
        if timestamps is None:
            self.output.process([r for r in values if f(r)], None)
            return
        kept = [(r, t) for r, t in zip(values, timestamps) if f(r)]
        self.output.process([r for r, _ in kept], [t for _, t in kept])


class TimestampsAndWatermarksOperator(Operator):
    """``assign_timestamps_and_watermarks``: stamps records with the strategy's timestamp
    assigner and emits the strategy's watermarks (upstream watermarks are dropped, except the
    final one that ends event time)."""

    def __init__(self, name: str, fn: Any, output: Output):
        super().__init__(name, fn, output)
        from flinkpy.task.watermarks import Stamper

        self.stamper = Stamper(fn, output)

    def open(self, runtime_context: Any) -> None:
        pass

    def process(self, values: list, timestamps: list[int] | None) -> None:
        self.stamper.process(values, timestamps)

    def emit_periodic_watermark(self) -> None:
        self.stamper.emit_periodic()

    def process_watermark(self, watermark: int) -> None:
        from flinkpy.task.watermarks import MAX_WATERMARK

        if watermark == MAX_WATERMARK:
            self.output.process_watermark(watermark)

    def close(self) -> None:
        pass


class _ProcessContext:
    """The ``ctx`` handed to process functions: the record's timestamp, timers, side outputs."""

    def __init__(self, operator: "Operator", timers: Any = None):
        self._operator = operator
        self._timers = timers
        self.current_key: Any = None
        self.current_timestamp: int | None = None
        self.emitted: list = []
        self.emitted_ts: list = []

    def timestamp(self) -> int | None:
        return self.current_timestamp

    def get_current_key(self) -> Any:
        return self.current_key

    def timer_service(self) -> Any:
        if self._timers is None:
            return _NoTimers(self._operator)
        return _UserTimerService(self._timers)

    def output(self, output_tag: Any, value: Any) -> None:
        tag_id = getattr(output_tag, "tag_id", output_tag)
        self._operator.side_output(tag_id, [value], None if self.current_timestamp is None else [self.current_timestamp])


class _OnTimerContext(_ProcessContext):
    def __init__(self, operator: "Operator", timers: Any):
        super().__init__(operator, timers)
        self.domain: Any = None

    def time_domain(self) -> Any:
        return self.domain


class _UserTimerService:
    """``ctx.timer_service()`` for the user: timers of the current key, no namespace."""

    def __init__(self, timers: Any):
        self._t = timers

    def current_processing_time(self) -> int:
        return self._t.current_processing_time()

    def current_watermark(self) -> int:
        return self._t.current_watermark()

    def register_event_time_timer(self, timestamp: int) -> None:
        self._t.register_event_time_timer(timestamp, None)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._t.register_processing_time_timer(timestamp, None)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._t.delete_event_time_timer(timestamp, None)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._t.delete_processing_time_timer(timestamp, None)


class _NoTimers:
    def __init__(self, operator: "Operator"):
        self._operator = operator

    def current_processing_time(self) -> int:
        return self._operator.clock()

    def current_watermark(self) -> int:
        return getattr(self._operator, "watermark", -(2**63))

    def _unsupported(self, *args: Any) -> None:
        raise InvalidProgramError(
            f"{self._operator.name!r} registers a timer, but timers exist only on a KeyedStream",
            remedy="key the stream with key_by() and use a KeyedProcessFunction",
        )

    register_event_time_timer = register_processing_time_timer = _unsupported
    delete_event_time_timer = delete_processing_time_timer = _unsupported


class ProcessOperator(Operator):
    """A ProcessFunction on a non-keyed stream."""

    watermark = -(2**63)

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = self._function()
        self._ctx = _ProcessContext(self)

    def _function(self) -> Callable:
        """The user's method for (the first) input's records."""
        return user_method(self.fn, "process_element")

    def process(self, values: list, timestamps: list[int] | None) -> None:
        self._run(self._f, values, timestamps)

    def _run(self, f: Callable, values: list, timestamps: list[int] | None) -> None:
        process_batch(f, self._ctx, values, timestamps, self.output)

    def process_watermark(self, watermark: int) -> None:
        self.watermark = watermark
        self.output.process_watermark(watermark)


def process_batch(f: Callable, ctx: Any, values: list, timestamps: list[int] | None, output: Output) -> None:
    """Run a process function ``f(record, ctx)`` over a batch: its outputs carry their record's
    timestamp, and yielded ``(OutputTag, value)`` pairs go where ``ctx.output`` sends them."""
    side = ctx.output
    out: list = []
    if timestamps is None:
        for r in values:
            collect(f(r, ctx), out, side)
        output.process(out, None)
        return
    ts_out: list[int] = []
    for r, t in zip(values, timestamps):
        ctx.current_timestamp = t
        ts_out.extend([t] * collect(f(r, ctx), out, side))
    ctx.current_timestamp = None
    output.process(out, ts_out)


class SinkOperator(Operator):
    """Runs a Sink's writer; the end of the chain."""

    def __init__(self, name: str, fn: Any, output: Output, writer_context: Any):
        super().__init__(name, fn, output)
        self._writer_context = writer_context
        #: called before the end-of-input flush commits (the engine asks its JobManager whether
        #: this attempt may: fencing); None where nothing needs asking (the Spark runner)
        self.before_final_commit: Callable[[], None] | None = None
        #: the job takes a final checkpoint after the end of data: the end of input only writes
        #: out what is buffered, that checkpoint pre-commits and commits the rest
        self.commits_at_final_checkpoint = False

    def set_restored_state(self, states: list[Any]) -> None:
        from dataclasses import replace

        self._writer_context = replace(self._writer_context, restored_state=states)

    def open(self, runtime_context: Any) -> None:
        self.writer = self.fn.create_writer(self._writer_context)
        self._write = self.writer.write
        #: a writer that records each record's timestamp (Flink's SinkWriter.Context.timestamp)
        self._write_timestamped = getattr(self.writer, "write_timestamped", None)
        opener = getattr(self.writer, "open", None)
        if callable(opener):
            opener(runtime_context)
        self.per_record = getattr(self.writer, "per_record", None)

    def process(self, values: list, timestamps: list[int] | None) -> None:
        if not values:
            return
        if timestamps is not None and self._write_timestamped is not None:
            self._write_timestamped(values, timestamps)
        else:
            self._write(values)

    def process_watermark(self, watermark: int) -> None:
        pass

    def end_input(self) -> None:
        if self.commits_at_final_checkpoint:
            self.writer.flush(False)
            return
        if self.before_final_commit is not None:
            self.before_final_commit()
        self.writer.flush(True)

    def finish(self) -> None:
        """After the final checkpoint completed: the writer hears that its input ended; what it
        had to commit, that checkpoint committed."""
        self.writer.flush(True)

    def close(self) -> None:
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.close()


# -- keyed operators ------------------------------------------------------------------------


class KeyedOperator(Operator):
    """Base of operators on a KeyedStream: the key is recomputed from each record and the state
    backend is pointed at it before the user's function runs. ``timers`` (an
    InternalTimerService) is attached by the chain."""

    timers: Any = None

    def __init__(self, name: str, fn: Any, output: Output, key_selector: Callable, backend: Any, batch_mode: bool):
        super().__init__(name, fn, output)
        self.key = key_selector
        self.backend = backend
        self.batch_mode = batch_mode
        self.assign = KeyGroupAssigner(backend.max_parallelism)

    def process_watermark(self, watermark: int) -> None:
        if self.timers is not None:
            self.timers.advance_watermark(watermark)
        self.output.process_watermark(watermark)

    def on_event_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        pass

    def on_processing_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        pass


class KeyedReduceOperator(KeyedOperator):
    """Running reduce per key (STREAMING: every update is emitted; BATCH: the final value per key).
    An update carries the timestamp of the record that caused it."""

    STATE = "_reduce"

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = user_method(self.fn, "reduce")
        self._table = self.backend.table(self.STATE)
        if isinstance(self._table, dict):
            # The heap backend: every key's value in one dict of the operator's, a record costs
            # one lookup; keyed state sees the dict at snapshots (flinkpy.state.views).
            self._values: dict[Any, Any] = {}
            for m in self._table.values():
                self._values.update(m)  # restored
            self._table.clear()
            self.backend.frozen(self.STATE).clear()
            #: a snapshot holds self._values: copy it before the next write
            self._shared = False
            self.backend.attach_view(self)

    # -- the view of the heap backend (flinkpy.state.views) ------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return (self.STATE,)

    def freeze(self) -> dict[str, Any]:
        self._shared = True
        return {self.STATE: ByKeyGroup(self._values, self.assign.memo, self.backend.max_parallelism)}

    # -- records ------------------------------------------------------------------------------
    def process(self, values: list, timestamps: list[int] | None) -> None:
        if not isinstance(self._table, dict):
            return self._process_buffered(values, timestamps)
        if self._shared:
            self._values = writable_copy(self._values)
            self._shared = False
        f, key, state = self._f, self.key, self._values
        invoke = None if self.batch_mode else self.output.per_record
        # A key's first record is the rare case: the value is read by subscript (a specialised
        # instruction, where get() with a default is a call) and a missing key costs the
        # exception. The user's function runs in the else clause, so a KeyError it raises
        # fails the task instead of being taken for a new key.
        if invoke is not None:
            # the sink's function in this loop: each update reaches it as it is made, in order,
            # as the batch below would deliver them (a barrier never comes inside a batch)
            for r in values:
                k = key(r)
                try:
                    old = state[k]
                except KeyError:
                    new = r
                else:
                    new = f(old, r)
                state[k] = new
                invoke(new, None)
            return
        out: list | None = None if self.batch_mode else []
        append = out.append if out is not None else _discard
        for r in values:
            k = key(r)
            try:
                old = state[k]
            except KeyError:
                new = r
            else:
                new = f(old, r)
            state[k] = new
            append(new)
        if out:
            self.output.process(out, timestamps)

    def _process_buffered(self, values: list, timestamps: list[int] | None) -> None:
        """The same, on a backend whose tables are views of a store (RocksDB): each distinct key
        of the batch is read once and written once, in one write batch, at the end of the batch
        (no snapshot can come between: barriers are handled between batches)."""
        f, key, table, assign = self._f, self.key, self._table, self.assign
        out: list | None = None if self.batch_mode else []
        append = out.append if out is not None else None
        missing = _MISSING
        keys = [key(r) for r in values]
        groups = {k: assign(k) for k in keys}
        latest = table.get_many(groups.items(), missing)  # one multi-get for the batch's keys
        for k, r in zip(keys, values):
            old = latest[k]
            new = r if old is missing else f(old, r)
            latest[k] = new
            if append is not None:
                append(new)
        table.put_many((groups[k], k, v) for k, v in latest.items())
        if out:
            self.output.process(out, timestamps)

    def end_input(self) -> None:
        if self.batch_mode:
            if isinstance(self._table, dict):
                final = [self._values[k] for k in sorted(self._values, key=self.assign)]  # by key group
            else:
                final = [v for kg in sorted(self._table) for v in self._table[kg].values()]
            if final:
                self.output.process(final, None)


class KeyedProcessOperator(KeyedOperator):
    """KeyedProcessFunction and keyed map/flat_map/filter: user code with keyed state (and, for
    process functions, timers and side outputs)."""

    def __init__(self, *args: Any, method: str, **kw: Any):
        super().__init__(*args, **kw)
        self.method = method

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = self._function()
        self._ctx = _ProcessContext(self, self.timers)
        self._timer_ctx = _OnTimerContext(self, self.timers)
        self._on_timer = getattr(self.fn, "on_timer", None) if self.method == "process_element" else None

    def _function(self) -> Callable:
        """The user's method for (the first) input's records."""
        return user_method(self.fn, self.method)

    def process(self, values: list, timestamps: list[int] | None) -> None:
        self._run(values, timestamps, self._f, self.key, self.method)

    def _run(self, values: list, timestamps: list[int] | None, f: Callable, key: Callable, method: str) -> None:
        """Run ``f`` (a ``method``: process_element, map, flat_map or filter) over a batch, each
        record with its key's state, keyed by ``key``."""
        assign, backend, ctx = self.assign, self.backend, self._ctx
        side = ctx.output
        set_key = backend.set_current_key_and_group
        out: list = []
        ts_out: list[int] | None = None if timestamps is None else []
        ts_iter = timestamps if timestamps is not None else [None] * len(values)
        for r, t in zip(values, ts_iter):
            k = key(r)
            set_key(k, assign(k))
            before = len(out)
            if method == "process_element":
                ctx.current_key = k
                ctx.current_timestamp = t
                collect(f(r, ctx), out, side)
            elif method == "map":
                out.append(f(r))
            elif method == "flat_map":
                out.extend(_iterate(f(r)))
            elif f(r):
                out.append(r)
            if ts_out is not None:
                ts_out.extend([t] * (len(out) - before))
        ctx.current_timestamp = None
        self.output.process(out, ts_out)

    def _fire(self, key: Any, timestamp: int, domain: str) -> None:
        if self._on_timer is None:
            return
        from flinkpy.common.functions import TimeDomain

        ctx = self._timer_ctx
        ctx.current_key = key
        ctx.current_timestamp = timestamp
        ctx.domain = TimeDomain.EVENT_TIME if domain == "event" else TimeDomain.PROCESSING_TIME
        out: list = []
        collect(self._on_timer(timestamp, ctx), out, ctx.output)
        ctx.current_timestamp = None
        if out:
            # timer output carries the timer's time in event time; none in processing time
            self.output.process(out, [timestamp] * len(out) if domain == "event" else None)

    def on_event_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        self._fire(key, timestamp, "event")

    def on_processing_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        self._fire(key, timestamp, "processing")
