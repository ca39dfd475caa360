"""Keyed operators on Spark: one transformWithStateInPandas processor per keyed operator.

The processor runs the engine's own keyed operator classes — KeyedProcessOperator (keyed
process / map / flat_map / filter) and WindowOperator — over :class:`~flinkpy.spark.state.SparkKeyedBackend`
and :class:`~flinkpy.spark.state.SparkTimers`, so state, timers, triggers, lateness and the user's
contexts behave as on flinkpy's engine. Keyed reduce (and sum/min/max) is a value state per key.

Event time. Each row carries the watermark in effect when it was emitted (``w``); Spark's own
watermark (``withWatermark`` over ``w`` shifted by :data:`~flinkpy.spark.records.SHIFT_MS`, with
the same delay, so that no record is ever "late" for Spark) is the largest ``w`` of the previous
micro-batch. For a key, the processor first fires the timers Spark's watermark passed, then walks
the key's records in their original order, firing timers whenever a record's ``w`` passes them
before handing the record to the operator — the order in which the engine interleaves a key's
timers and records. Keys without new records are woken by Spark's timers. At the end of a
bounded input Spark's watermark reaches the end and every timer fires, as the engine's final
watermark does; the final row then passes on to the sink.

Processing time. A step whose operator needs the processing-time clock (processing-time windows
and triggers, processing-time timers, state TTL: :mod:`flinkpy.spark.time_mode`) runs in Spark's
ProcessingTime mode: its processing-time timers fire in the first micro-batch that starts after
them, for keys with or without new records, and its event-time timers are checked on every
micro-batch (:class:`~flinkpy.spark.state.SparkTimers`). At the end of a bounded input the final
row passes once event time has ended, as above; processing-time timers not yet due then are
dropped, as the engine drops them when its input ends.

Keyed reduce (and sum/min/max) takes a faster road when its function has no ``open()`` (so it
cannot ask for keyed state of its own): Spark groups by *key group* instead of by key (at most
:data:`KEY_GROUPS` groups), the chain before it sends each key group's records of an Arrow batch
as one pickled bundle, and the processor keeps one Spark value state per key group holding
``{key: running value}`` — the engine's own layout. Spark then calls Python once per key group
and micro-batch with two state round trips, instead of once per key with five; results are the
same records (each update, or each key's final value in BATCH mode). In STREAMING mode, where it
has no timer, it runs on ``applyInPandasWithState`` rather than ``transformWithStateInPandas``
(:func:`group_state_reduce`): the state travels with the rows, and no Python process is started on
the driver to plan the query.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from flinkpy.spark.records import BUNDLE, END_W, FINAL, MARKER_KEY, MIN_W, RECORD, child_seq, unbundle

#: key groups of a keyed reduce on Spark (its grouping keys). Each costs a Python call, a state
#: read and write and pandas frames per micro-batch — about 10 ms — so 128 (the engine's max
#: parallelism) spent over a second per batch on W1; fewer groups hold more keys each (the blob
#: pickled per batch) and cap the reduce's parallelism: 32 keeps both modest
KEY_GROUPS = 32


@dataclass
class KeyedSpec:
    kind: str  # keyed_reduce | keyed_process | keyed_map | keyed_flat_map | keyed_filter | window
    name: str
    fn: Any
    key_selector: Callable
    batch_mode: bool = False
    job_parameters: dict[str, str] = field(default_factory=dict)
    uid: str | None = None
    #: Spark's time mode of the step, "EventTime" or "ProcessingTime" (chosen from the operator)
    time_mode: str = ""
    #: the routes of the main output (one per consumer) and of each side output (by OutputTag id)
    routes: tuple[int, ...] = (0,)
    side_routes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: keyed depth (plan.py): from 2 on, a key's rows come from keyed operators before and are
    #: ordered by (w, seq), and Spark's watermark is not applied before them (see make_processor)
    depth: int = 1
    #: the operator's bytes at the front of its grouping keys when it shares its keyed depth
    prefix: bytes = b""

    def __post_init__(self) -> None:
        if not self.time_mode:
            from flinkpy.spark.time_mode import EVENT_TIME, choose

            self.time_mode = EVENT_TIME if by_key_group(self) else choose(self.kind, self.fn)

    @property
    def processing_time(self) -> bool:
        return self.time_mode == "ProcessingTime"


_METHODS = {"keyed_process": "process_element", "keyed_map": "map", "keyed_flat_map": "flat_map", "keyed_filter": "filter"}


def by_key_group(spec: KeyedSpec) -> bool:
    """Whether the operator runs per key group (see the module docstring): a keyed reduce whose
    function cannot reach keyed state (no ``open()`` of its own)."""
    if spec.kind != "keyed_reduce":
        return False
    from flinkpy.datastream.functions import Function

    opener = getattr(type(spec.fn), "open", None)
    return opener is None or opener is Function.open


def on_group_state(spec: KeyedSpec) -> bool:
    """Whether the key-group reduce runs on ``applyInPandasWithState`` (see :func:`group_state_reduce`):
    STREAMING mode (no timer: nothing waits for Spark's watermark) and no ``close()`` to call."""
    if not by_key_group(spec) or spec.batch_mode:
        return False
    from flinkpy.datastream.functions import Function

    closer = getattr(type(spec.fn), "close", None)
    return closer is None or closer is Function.close


def uses_timers(spec: KeyedSpec) -> bool:
    """Whether the operator can have timers (the others skip every timer round trip to Spark)."""
    return spec.kind in ("keyed_process", "window") or (spec.kind == "keyed_reduce" and spec.batch_mode)
_FINAL_NS = "__flinkpy_end_of_input__"


class _Reduce:
    """Rolling reduce per key (STREAMING: each update; BATCH: the final value at the end)."""

    STATE = "_reduce"

    def __init__(self, name: str, fn: Any, output: Any, backend: Any, batch_mode: bool) -> None:
        from flinkpy.datastream.state import ValueStateDescriptor
        from flinkpy.task.operators import _method

        self.name = name
        self.fn = fn
        self.output = output
        self.batch_mode = batch_mode
        self.timers: Any = None
        self._f = _method(fn, "reduce")
        self._state = backend.get_partitioned_state(ValueStateDescriptor(self.STATE))

    def open(self, runtime_context: Any) -> None:
        opener = getattr(self.fn, "open", None)
        if callable(opener) and hasattr(self.fn, "reduce"):
            opener(runtime_context)

    def process(self, values: list, timestamps: list | None) -> None:
        state, f = self._state, self._f
        acc = state.value()
        first = acc is None
        out = []
        for v in values:
            acc = v if acc is None else f(acc, v)
            out.append(acc)
        state.update(acc)
        if self.batch_mode:
            if first:
                self.timers.register_event_time_timer(END_W, _FINAL_NS)
            return
        self.output.process(out, timestamps)

    def on_event_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        if namespace == _FINAL_NS:
            value = self._state.value()
            if value is not None:
                self.output.process([value], None)

    def close(self) -> None:
        closer = getattr(self.fn, "close", None)
        if callable(closer) and hasattr(self.fn, "reduce"):
            closer()


def _frame(values: list, ts: list, w: list, prefix: bytes, routes: list | None = None) -> Any:
    """The output rows of records ``values`` (in order) as a pandas DataFrame of the row columns;
    ``routes`` holds each record's routes (a row per route: fan-out), None: route 0 for all."""
    import pandas as pd

    from flinkpy.spark.records import COLUMNS

    dumps = pickle.dumps
    blobs = [dumps(v, protocol=5) for v in values]
    seqs = [child_seq(prefix, i) for i in range(len(values))]
    if routes is None or all(rs == (0,) for rs in routes):
        src = [0] * len(values)
    elif all(len(rs) == 1 for rs in routes):
        src = [rs[0] for rs in routes]
    else:  # fan-out: a copy per consumer, each on its route (same ordering key)
        idx = [i for i, rs in enumerate(routes) for _ in rs]
        src = [r for rs in routes for r in rs]
        blobs, ts, w, seqs = [blobs[i] for i in idx], [ts[i] for i in idx], [w[i] for i in idx], [seqs[i] for i in idx]
    n = len(blobs)
    return pd.DataFrame({
        "value": pd.Series(blobs, dtype=object),
        "ts": pd.Series(ts, dtype=object),
        "w": pd.Series(w, dtype=object),
        "seq": pd.Series(seqs, dtype=object),
        "kind": [RECORD] * n,
        "src": src,
    }, columns=list(COLUMNS))


class _RoutedOut:
    """A keyed operator's output when it goes to several routes or has side outputs read: one list
    of records in emission order (so a consumer of main and side output sees the engine's order),
    each with its routes."""

    def __init__(self, routes: tuple[int, ...]) -> None:
        from flinkpy.spark.records import MIN_W

        self.values: list = []
        self.ts: list = []
        self.w: list = []
        self.routes: list = []
        self.main = routes
        self.watermark = MIN_W

    def process(self, values: list, timestamps: list | None) -> None:
        self.emit(values, timestamps, self.main)

    def emit(self, values: list, timestamps: list | None, routes: tuple[int, ...]) -> None:
        n = len(values)
        if not n or not routes:
            return
        self.values.extend(values)
        self.ts.extend(timestamps if timestamps is not None else [None] * n)
        self.w.extend([self.watermark] * n)
        self.routes.extend([routes] * n)

    def process_watermark(self, watermark: int) -> None:
        pass

    def process_watermark_status(self, idle: bool) -> None:
        pass


class _SidePort:
    """Where a keyed operator's side output (an OutputTag) goes: into the routed output."""

    def __init__(self, out: _RoutedOut, routes: tuple[int, ...]) -> None:
        self.out = out
        self.routes = routes

    def process(self, values: list, timestamps: list | None) -> None:
        self.out.emit(values, timestamps, self.routes)

    def process_watermark(self, watermark: int) -> None:
        pass

    def process_watermark_status(self, idle: bool) -> None:
        pass


def _bundle_frame(values: list, ts: list, w: int, seq: bytes, routes: tuple[int, ...] = (0,)) -> Any:
    """One bundle row of records ``values`` per route (see :mod:`flinkpy.spark.records`)."""
    import pandas as pd

    from flinkpy.spark.records import COLUMNS

    timed = ts.count(None) != len(ts)  # in C: a reduce's updates are rarely stamped
    blob = pickle.dumps((values, ts if timed else None), protocol=5)
    n = len(routes)
    return pd.DataFrame({
        "value": pd.Series([blob] * n, dtype=object), "ts": pd.Series([None] * n, dtype=object), "w": [w] * n,
        "seq": pd.Series([seq] * n, dtype=object), "kind": [BUNDLE] * n, "src": list(routes),
    }, columns=list(COLUMNS))


def make_processor(spec: KeyedSpec) -> Any:
    """The StatefulProcessor of ``spec`` (pyspark is imported here, on the executors too)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    from flinkpy.spark.chain import _Collector
    from flinkpy.spark.records import COLUMNS
    from flinkpy.spark.state import SparkKeyedBackend, SparkTimers

    class _Processor(StatefulProcessor):
        """What every keyed step does: order a group's rows, pass markers on at the end."""

        #: the micro-batch's start (Spark's processing time, ms)
        batch_time = -1

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.finals = handle.getListState("_flinkpy_final_rows", "src int")
            self.setup(handle)

        def setup(self, handle: Any) -> None:
            raise NotImplementedError

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            watermark = timerValues.getCurrentWatermarkInMs()
            self.batch_time = timerValues.getCurrentProcessingTimeInMs()
            frames = [f for f in rows if len(f)]
            if not frames:
                return
            pdf = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
            seqs = pdf["seq"].tolist()
            if spec.depth > 1:  # rows of keyed operators before: in the order of their watermarks
                order = list(zip(pdf["w"].tolist(), seqs))
                if any(a > b for a, b in zip(order, order[1:])):
                    pdf = pdf.sort_values(["w", "seq"], kind="stable")
            elif any(a > b for a, b in zip(seqs, seqs[1:])):
                pdf = pdf.sort_values("seq", kind="stable")
            if key[0] == MARKER_KEY:
                yield from self._markers(pdf, watermark)
                return
            yield from self.records(key[0], pdf, watermark)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
            watermark = timerValues.getCurrentWatermarkInMs()
            self.batch_time = timerValues.getCurrentProcessingTimeInMs()
            if key[0] == MARKER_KEY:
                if watermark >= END_W:
                    srcs = [row[0] for row in self.finals.get()] if self.finals.exists() else []
                    self.finals.clear()
                    yield self._final_rows(srcs)
                elif spec.processing_time:
                    self._wait_for_the_end()
                return
            yield from self.timer(key[0], watermark, expiredTimerInfo.getExpiryTimeInMs())

        def records(self, key: bytes, pdf: Any, watermark: int) -> Iterator[Any]:
            raise NotImplementedError

        def timer(self, key: bytes, watermark: int, expiry: int) -> Iterator[Any]:
            raise NotImplementedError

        def _markers(self, pdf: Any, watermark: int) -> Iterator[Any]:
            srcs = [int(s) for s, kd in zip(pdf["src"], pdf["kind"]) if kd == FINAL]
            if not srcs:
                return
            if watermark >= END_W:
                yield self._final_rows(srcs)
            else:  # another input is still running: pass the final rows on once event time ended
                self.finals.appendList([(s,) for s in srcs])
                self._wait_for_the_end()

        def _wait_for_the_end(self) -> None:
            """Wake this group when Spark's watermark may have reached the end: when it does
            (EventTime mode), or in the next micro-batch (ProcessingTime mode, to look again)."""
            self.handle.registerTimer(self.batch_time + 1 if spec.processing_time else END_W)

        def _final_rows(self, srcs: list) -> Any:
            n = len(srcs)
            return pd.DataFrame({
                "value": pd.Series([b""] * n, dtype=object), "ts": pd.Series([None] * n, dtype=object),
                "w": [END_W] * n, "seq": pd.Series([b"\xff" * 4] * n, dtype=object), "kind": [FINAL] * n, "src": srcs,
            }, columns=list(COLUMNS))

    class FlinkpyKeyedProcessor(_Processor):
        """One Spark group per key: the engine's keyed operator over Spark's per-key state."""

        def setup(self, handle: Any) -> None:
            from flinkpy.spark.chain import _runtime_context

            routed = spec.side_routes or len(spec.routes) != 1
            self.out = _RoutedOut(spec.routes) if routed else _Collector()
            self.backend = SparkKeyedBackend(handle, spec.name, processing_time=spec.processing_time)
            op = self._operator()
            self.timers = SparkTimers(handle, spec.name, self._stamped(op.on_event_time), getattr(op, "on_processing_time", None),
                                      processing_time=spec.processing_time)
            op.timers = self.timers
            if spec.side_routes:
                op.side_outputs = {tag: _SidePort(self.out, routes) for tag, routes in spec.side_routes.items()}
            context = _runtime_context(spec.name, spec.job_parameters)
            context._backend = self.backend
            op.open(context)
            self.backend.done_initialising()
            self.op = op
            self.timed = uses_timers(spec)

        def _stamped(self, fire: Callable[[Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
            """``fire`` with the timer's outputs under the watermark just below the timer: the engine
            fires a timer when a watermark passes it and forwards that watermark after the outputs,
            so the keyed operator after this one sees them before its own timers at that time."""

            def stamped(key: Any, namespace: Any, timestamp: int) -> None:
                self.out.watermark = timestamp - 1
                fire(key, namespace, timestamp)

            return stamped

        def _operator(self) -> Any:
            if spec.kind == "keyed_reduce":
                return _Reduce(spec.name, spec.fn, self.out, self.backend, spec.batch_mode)
            if spec.kind == "window":
                from flinkpy.task.window_operator import WindowOperator

                return WindowOperator(spec.name, spec.fn, self.out, spec.key_selector, self.backend, spec.batch_mode)
            from flinkpy.task.operators import KeyedProcessOperator

            return KeyedProcessOperator(spec.name, spec.fn, self.out, spec.key_selector, self.backend, spec.batch_mode, method=_METHODS[spec.kind])

        def records(self, key: bytes, pdf: Any, watermark: int) -> Iterator[Any]:
            k = pickle.loads(key)
            self.backend.set_current_key(k)
            timers = self.timers if self.timed else None
            if timers is not None:
                # from depth 2 on, the rows (outputs of keyed operators that Spark's watermark already
                # woke in this batch) come first, each under its own w, then the timers (timer())
                timers.load(k, watermark if spec.depth == 1 else MIN_W, self.batch_time)
                timers.fire_processing()
                if spec.depth == 1:
                    timers.advance(watermark)
            prefix = pdf["seq"].iloc[0]
            self.out.watermark = timers.watermark if timers is not None else watermark
            kinds = pdf["kind"].tolist()
            ws = pdf["w"].tolist()
            tss = pdf["ts"].tolist()
            values = pdf["value"].tolist()
            i, n = 0, len(kinds)
            loads = pickle.loads
            while i < n:
                j = i
                while j < n and ws[j] == ws[i]:
                    j += 1
                if timers is not None:
                    timers.advance(int(ws[i]))
                    self.out.watermark = timers.watermark
                else:  # the outputs go on under the watermark their input came with
                    self.out.watermark = int(ws[i])
                run_ts = [None if t != t or t is None else int(t) for t in tss[i:j]]
                records = [loads(v) for v, kd in zip(values[i:j], kinds[i:j]) if kd == RECORD]
                self.op.process(records, None if run_ts[0] is None else run_ts)
                i = j
            if timers is not None:
                if spec.processing_time:
                    # what Spark's timer phase does in EventTime mode after the batch's rows: fire the
                    # event-time timers its watermark passed (at depth 2 and on, the end of input too)
                    timers.advance(watermark)
                timers.sync()
            if self.out.values:
                yield self._drain(prefix)

        def timer(self, key: bytes, watermark: int, expiry: int) -> Iterator[Any]:
            k = pickle.loads(key)
            self.backend.set_current_key(k)
            self.timers.load(k, watermark, self.batch_time)
            self.out.watermark = self.timers.watermark
            self.timers.fire_processing()
            self.timers.advance(watermark)
            self.timers.sync()
            yield self._drain(b"\xfe" + struct.pack(">q", expiry))

        def close(self) -> None:
            self.op.close()

        def _drain(self, prefix: bytes) -> Any:
            out = self.out
            routes = out.routes if isinstance(out, _RoutedOut) else [spec.routes] * len(out.values)
            frame = _frame(out.values, out.ts, out.w, prefix, routes)
            out.values, out.ts, out.w = [], [], []
            if isinstance(out, _RoutedOut):
                out.routes = []
            return frame

    class KeyGroupReduce(_Processor):
        """One Spark group per key group: ``{key: running value}`` in one Spark value state.

        Input rows are bundles from the chain, each in its input's order; a key's records are
        reduced in that order, as the engine's operator does. The updates leave as one bundle.
        """

        STATE = "_flinkpy_reduce_by_key_group"

        def setup(self, handle: Any) -> None:
            from flinkpy.task.operators import _method

            self.table = handle.getValueState(self.STATE, "v binary")
            self.f = _method(spec.fn, "reduce")

        def records(self, key: bytes, pdf: Any, watermark: int) -> Iterator[Any]:
            row = self.table.get()
            table: dict = {} if row is None else pickle.loads(row[0])
            out, out_ts = _reduce_bundles(table, self.f, spec.key_selector, pdf["value"].tolist())
            self.table.update((pickle.dumps(table, protocol=5),))
            if spec.batch_mode:  # the final values once event time ended (the input's end)
                if row is None:
                    self._wait_for_the_end()
                return
            # the updates go on under the largest watermark their input came with
            yield _bundle_frame(out, out_ts, int(pdf["w"].max()), pdf["seq"].iloc[0], spec.routes)

        def timer(self, key: bytes, watermark: int, expiry: int) -> Iterator[Any]:
            if watermark < END_W:  # ProcessingTime mode (beside an operator that needs it): look again
                self._wait_for_the_end()
                return
            row = self.table.get()
            if row is not None and spec.batch_mode:
                finals = list(pickle.loads(row[0]).values())
                yield _bundle_frame(finals, [None] * len(finals), expiry - 1, b"\xfe" + struct.pack(">q", expiry), spec.routes)

        def close(self) -> None:
            closer = getattr(spec.fn, "close", None)
            if callable(closer) and hasattr(spec.fn, "reduce"):
                closer()

    return KeyGroupReduce() if by_key_group(spec) else FlinkpyKeyedProcessor()


_MISSING = object()


def _reduce_bundles(table: dict, f: Callable, key_of: Callable, blobs: list) -> tuple[list, list]:
    """Reduce the records of bundles ``blobs`` (in order) into ``table`` ``{key: running value}``;
    the updates and their timestamps, in the same order."""
    get, missing = table.get, _MISSING
    out: list = []
    out_ts: list = []
    append = out.append
    for blob in blobs:
        values, ts = unbundle(blob)
        for r in values:
            k = key_of(r)
            old = get(k, missing)
            new = table[k] = r if old is missing else f(old, r)
            append(new)
        out_ts.extend(ts)
    return out, out_ts


def _final_frame(srcs: list) -> Any:
    """The final rows of sources ``srcs`` (see :mod:`flinkpy.spark.records`)."""
    import pandas as pd

    from flinkpy.spark.records import COLUMNS

    n = len(srcs)
    return pd.DataFrame({
        "value": pd.Series([b""] * n, dtype=object), "ts": pd.Series([None] * n, dtype=object),
        "w": [END_W] * n, "seq": pd.Series([b"\xff" * 4] * n, dtype=object), "kind": [FINAL] * n, "src": srcs,
    }, columns=list(COLUMNS))


#: the Spark state of a key group on ``applyInPandasWithState``: ``{key: running value}`` pickled
GROUP_STATE_DDL = "v binary"


def group_state_reduce(spec: KeyedSpec) -> Callable[[tuple, Iterator[Any], Any], Iterator[Any]]:
    """The ``applyInPandasWithState`` function of a STREAMING key-group reduce (:func:`on_group_state`).

    What KeyGroupReduce does on ``transformWithStateInPandas``, on Spark's older stateful API:
    the key group's ``{key: running value}`` travels with the group's rows into the Python worker
    and back (no state server round trips), and Spark plans it without starting a Python process
    on the driver (``transformWithStateInPandas`` starts one per query to learn its state
    variables: about a second). Nothing here waits for Spark's watermark, so the final row of a
    source is passed on as soon as it arrives: every record of that source came before it, and
    Spark runs no extra micro-batch for this step when its watermark advances.
    """
    from flinkpy.task.operators import _method

    f, key_of = _method(spec.fn, "reduce"), spec.key_selector

    def run(key: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        parts = [p for p in frames if len(p)]
        if not parts:
            return
        pdf = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
        seqs = pdf["seq"].tolist()
        if any(a > b for a, b in zip(seqs, seqs[1:])):
            pdf = pdf.sort_values("seq", kind="stable")
        if key[0] == MARKER_KEY:
            srcs = [int(s) for s, kd in zip(pdf["src"], pdf["kind"]) if kd == FINAL]
            if srcs:
                yield _final_frame(srcs)
            return
        table: dict = pickle.loads(state.get[0]) if state.exists else {}
        out, out_ts = _reduce_bundles(table, f, key_of, [v for v, kd in zip(pdf["value"].tolist(), pdf["kind"].tolist()) if kd == BUNDLE])
        state.update((pickle.dumps(table, protocol=5),))
        if out:
            # NoTimeout leaves Spark's watermark unknown here. MIN_W: a keyed step downstream
            # then goes by Spark's watermark alone, as it does after the transformWithState
            # road (whose rows carry Spark's watermark); with no event time it is the engine's
            yield _bundle_frame(out, out_ts, MIN_W, pdf["seq"].iloc[0], spec.routes)

    return run


class _PrefixedHandle:
    """A StatefulProcessorHandle whose state variables carry an operator's prefix in their names,
    so that operators sharing one Spark operator never declare the same variable twice."""

    def __init__(self, handle: Any, prefix: str) -> None:
        self._handle = handle
        self._prefix = prefix

    def getValueState(self, name: str, *args: Any, **kw: Any) -> Any:  # noqa: N802 - Spark's names
        return self._handle.getValueState(self._prefix + name, *args, **kw)

    def getListState(self, name: str, *args: Any, **kw: Any) -> Any:  # noqa: N802
        return self._handle.getListState(self._prefix + name, *args, **kw)

    def getMapState(self, name: str, *args: Any, **kw: Any) -> Any:  # noqa: N802
        return self._handle.getMapState(self._prefix + name, *args, **kw)

    def deleteIfExists(self, name: str) -> Any:  # noqa: N802
        return self._handle.deleteIfExists(self._prefix + name)

    def __getattr__(self, name: str) -> Any:  # timers and the rest: the group's own
        return getattr(self._handle, name)


def make_level_processor(specs: list[KeyedSpec], routed: bool) -> Any:
    """The StatefulProcessor of a keyed depth (see :mod:`flinkpy.spark.plan`): the operator's own
    when it is alone there; else one that dispatches each group by its key's first two bytes to
    one of ``specs`` (state variables prefixed ``o<index>_``), passes rows of pass-through groups
    on unchanged, and leaves the markers to the first operator."""
    if not routed:
        return make_processor(specs[0])
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    from flinkpy.spark.levels import PASS_PREFIX
    from flinkpy.spark.records import COLUMNS

    subs = [make_processor(s) for s in specs]
    columns = list(COLUMNS)

    class KeyedDepthProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            for i, sub in enumerate(subs):
                sub.init(_PrefixedHandle(handle, f"o{i}_"))

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N802
            k = key[0]
            if k == MARKER_KEY:
                yield from subs[0].handleInputRows(key, rows, timerValues)
            elif k[:2] == PASS_PREFIX:
                for frame in rows:
                    if len(frame):
                        yield frame[columns]
            else:
                yield from subs[struct.unpack(">H", k[:2])[0]].handleInputRows((k[2:],), rows, timerValues)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:  # noqa: N802
            k = key[0]
            if k == MARKER_KEY:
                yield from subs[0].handleExpiredTimer(key, timerValues, expiredTimerInfo)
            else:
                yield from subs[struct.unpack(">H", k[:2])[0]].handleExpiredTimer((k[2:],), timerValues, expiredTimerInfo)

        def close(self) -> None:
            for sub in subs:
                sub.close()

    return KeyedDepthProcessor()
