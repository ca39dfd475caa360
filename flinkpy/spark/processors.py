"""The StatefulProcessors of keyed steps on Spark (see :mod:`flinkpy.spark.keyed`).

This module imports pyspark and pandas at its top, so it is imported only where a Spark query
is built or run (the executors unpickle its classes by reference): the rest of flinkpy imports
without pyspark.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, Callable, Iterator

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from flinkpy.spark.chain import _Collector, _runtime_context
from flinkpy.spark.keyed import (
    _METHODS,
    BROADCAST_KINDS,
    KeyedSpec,
    _bundle_frame,
    _frame,
    _Reduce,
    _reduce_bundles,
    _RoutedOut,
    _SidePort,
    by_key_group,
    seeded,
    uses_timers,
)
from flinkpy.spark.levels import PASS_PREFIX
from flinkpy.spark.records import COLUMNS, END_W, FINAL, MARKER_KEY, MIN_W, RECORD
from flinkpy.spark.state import SparkKeyedBackend, SparkTimers


class _Processor(StatefulProcessor):
    """What every keyed step does: order a group's rows, pass markers on at the end."""

    #: the micro-batch's start (Spark's processing time, ms)
    batch_time = -1

    def __init__(self, spec: KeyedSpec) -> None:
        self.spec = spec

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
        if self.spec.depth > 1:  # rows of keyed operators before: in the order of their watermarks
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
            elif self.spec.processing_time:
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
        self.handle.registerTimer(self.batch_time + 1 if self.spec.processing_time else END_W)

    def _final_rows(self, srcs: list) -> Any:
        n = len(srcs)
        return pd.DataFrame({
            "value": pd.Series([b""] * n, dtype=object), "ts": pd.Series([None] * n, dtype=object),
            "w": [END_W] * n, "seq": pd.Series([b"\xff" * 4] * n, dtype=object), "kind": [FINAL] * n, "src": srcs,
        }, columns=list(COLUMNS))


class FlinkpyKeyedProcessor(_Processor):
    """One Spark group per key: the engine's keyed operator over Spark's per-key state."""

    def setup(self, handle: Any) -> None:
        routed = self.spec.side_routes or len(self.spec.routes) != 1
        self.out = _RoutedOut(self.spec.routes) if routed else _Collector()
        self.backend = SparkKeyedBackend(handle, self.spec.name, processing_time=self.spec.processing_time)
        op = self._operator()
        self.timers = SparkTimers(handle, self.spec.name, self._stamped(op.on_event_time), getattr(op, "on_processing_time", None),
                                  processing_time=self.spec.processing_time)
        op.timers = self.timers
        if self.spec.side_routes:
            op.side_outputs = {tag: _SidePort(self.out, routes) for tag, routes in self.spec.side_routes.items()}
        context = _runtime_context(self.spec.name, self.spec.job_parameters)
        context._backend = self.backend
        op.open(context)
        self.backend.done_initialising()
        self.op = op
        self.timed = uses_timers(self.spec)

    def _stamped(self, fire: Callable[[Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
        """``fire`` with the timer's outputs under the watermark just below the timer: the engine
        fires a timer when a watermark passes it and forwards that watermark after the outputs,
        so the keyed operator after this one sees them before its own timers at that time."""

        def stamped(key: Any, namespace: Any, timestamp: int) -> None:
            self.out.watermark = timestamp - 1
            fire(key, namespace, timestamp)

        return stamped

    def _operator(self) -> Any:
        from flinkpy.task.row_output import with_row_type

        out = with_row_type(self.spec.row_type, self.out, self.spec.name)  # Rows, as on the engine
        if self.spec.kind == "keyed_reduce":
            return _Reduce(self.spec.name, self.spec.fn, out, self.backend, self.spec.batch_mode)
        if self.spec.kind == "window":
            from flinkpy.task.window_operator import WindowOperator

            return WindowOperator(self.spec.name, self.spec.fn, out, self.spec.key_selector, self.backend, self.spec.batch_mode)
        from flinkpy.task.operators import KeyedProcessOperator
        from flinkpy.task.two_input import KEYED, KeyedCoProcessOperator

        if self.spec.kind == "interval_join":  # the right input's rows go to process2
            from flinkpy.task.interval_join import IntervalJoinOperator

            p = self.spec.params
            return IntervalJoinOperator(self.spec.name, self.spec.fn, out, self.spec.key_selector, self.backend, self.spec.batch_mode,
                                        key2=self.spec.key_selector2, lower=p["lower_bound"], upper=p["upper_bound"],
                                        late_tags=p.get("late_tags", (None, None)))
        if self.spec.kind in KEYED:  # connected keyed streams: process2 for the second input's rows
            return KeyedCoProcessOperator(self.spec.name, self.spec.fn, out, self.spec.key_selector, self.backend, self.spec.batch_mode,
                                          method=KEYED[self.spec.kind], key2=self.spec.key_selector2)
        return KeyedProcessOperator(self.spec.name, self.spec.fn, out, self.spec.key_selector, self.backend, self.spec.batch_mode, method=_METHODS[self.spec.kind])

    def records(self, key: bytes, pdf: Any, watermark: int) -> Iterator[Any]:
        k = pickle.loads(key)
        self.backend.set_current_key(k)
        timers = self.timers if self.timed else None
        if timers is not None:
            # from depth 2 on, the rows (outputs of keyed operators that Spark's watermark already
            # woke in this batch) come first, each under its own w, then the timers (timer())
            timers.load(k, watermark if self.spec.depth == 1 else MIN_W, self.batch_time)
            timers.fire_processing()
            if self.spec.depth == 1:
                timers.advance(watermark)
        prefix = pdf["seq"].iloc[0]
        self.out.watermark = timers.watermark if timers is not None else watermark
        kinds = pdf["kind"].tolist()
        ws = pdf["w"].tolist()
        tss = pdf["ts"].tolist()
        values = pdf["value"].tolist()
        second = self.spec.second
        inputs = [2 if r in second else 1 for r in pdf["src"].tolist()] if second else [1] * len(kinds)
        #: two inputs: each one's watermark so far (Spark's is a lower bound of both); the
        #: operator's is their minimum, as the engine combines them
        start = timers.watermark if timers is not None else watermark if self.spec.depth == 1 else MIN_W
        seen = {1: start, 2: start}
        i, n = 0, len(kinds)
        loads = pickle.loads
        while i < n:
            j = i
            while j < n and ws[j] == ws[i] and inputs[j] == inputs[i]:
                j += 1
            w = int(ws[i])
            if second:
                seen[inputs[i]] = max(seen[inputs[i]], w)
                w = min(seen.values())
            if timers is not None:
                timers.advance(w)
                self.out.watermark = timers.watermark
            else:  # the outputs go on under the watermark their input came with
                self.out.watermark = w
            run_ts = [None if t != t or t is None else int(t) for t in tss[i:j]]
            records = [loads(v) for v, kd in zip(values[i:j], kinds[i:j]) if kd == RECORD]
            (self.op.process2 if inputs[i] == 2 else self.op.process)(records, None if run_ts[0] is None else run_ts)
            i = j
        if timers is not None:
            if self.spec.processing_time:
                # what Spark's timer phase does in EventTime mode after the batch's rows: fire the
                # event-time timers its watermark passed (at depth 2 and on, the end of input too)
                timers.advance(watermark)
            timers.sync()
        if self.out.values:
            yield self._drain(prefix)

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N802, N803 - Spark's names
        """Write the key's state moved from the engine (:mod:`flinkpy.spark.keyed_move`): Spark
        calls this in the query's first batch only, before the batch's rows, maybe several times
        for one key (its rows in chunks: each state's rows are whole in one, see InitialRow)."""
        from flinkpy.spark.keyed_move import TIMERS_KIND, timer_sets

        k = pickle.loads(key[0])
        self.backend.set_current_key(k)
        by_state: dict[tuple[str, str], list] = {}
        for name, kind, part, value in zip(initialState["name"], initialState["kind"], initialState["part"], initialState["value"]):
            by_state.setdefault((name, kind), []).append((part, value))
        for (name, kind), rows in by_state.items():
            if kind == TIMERS_KIND:
                event, processing = timer_sets(pickle.loads(rows[-1][1]))
                self.timers.seed(k, event, processing, timerValues.getCurrentProcessingTimeInMs())
            else:
                self.backend.seed(name, kind, rows)

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
        routes = out.routes if isinstance(out, _RoutedOut) else [self.spec.routes] * len(out.values)
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
        from flinkpy.spark.running_reduce import reducer
        from flinkpy.task.operators import user_method

        self.table = handle.getValueState(self.STATE, "v binary")
        self.f = user_method(self.spec.fn, "reduce")
        self.columnar = reducer(self.f, self.spec.key_selector)

    def records(self, key: bytes, pdf: Any, watermark: int) -> Iterator[Any]:
        row = self.table.get()
        table: dict = seeded(self.spec, key) if row is None else pickle.loads(row[0])
        out, out_ts = _reduce_bundles(table, self.f, self.spec.key_selector, pdf["value"].tolist(), self.columnar)
        self.table.update((pickle.dumps(table, protocol=5),))
        if self.spec.batch_mode:  # the final values once event time ended (the input's end)
            if row is None:
                self._wait_for_the_end()
            return
        # the updates go on under the largest watermark their input came with
        yield _bundle_frame(out, out_ts, int(pdf["w"].max()), pdf["seq"].iloc[0], self.spec.routes)

    def timer(self, key: bytes, watermark: int, expiry: int) -> Iterator[Any]:
        if watermark < END_W:  # ProcessingTime mode (beside an operator that needs it): look again
            self._wait_for_the_end()
            return
        row = self.table.get()
        if row is not None and self.spec.batch_mode:
            finals = list(pickle.loads(row[0]).values())
            yield _bundle_frame(finals, [None] * len(finals), expiry - 1, b"\xfe" + struct.pack(">q", expiry), self.spec.routes)

    def close(self) -> None:
        closer = getattr(self.spec.fn, "close", None)
        if callable(closer) and hasattr(self.spec.fn, "reduce"):
            closer()


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


def make_processor(spec: KeyedSpec) -> StatefulProcessor:
    """The StatefulProcessor of ``spec``."""
    if spec.kind in BROADCAST_KINDS:
        from flinkpy.spark.broadcast import BroadcastProcessor

        return BroadcastProcessor(spec)
    return KeyGroupReduce(spec) if by_key_group(spec) else FlinkpyKeyedProcessor(spec)


class KeyedDepthProcessor(StatefulProcessor):
    """The processor of a keyed depth shared by several operators (see :mod:`flinkpy.spark.plan`):
    it dispatches each group by its key's first two bytes to one of its operators' processors
    (state variables prefixed ``o<index>_``), passes rows of pass-through groups on unchanged,
    and leaves the markers to the first operator."""

    def __init__(self, subs: list[StatefulProcessor]) -> None:
        self.subs = subs

    def init(self, handle: Any) -> None:
        for i, sub in enumerate(self.subs):
            sub.init(_PrefixedHandle(handle, f"o{i}_"))

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N802
        k = key[0]
        if k == MARKER_KEY:
            yield from self.subs[0].handleInputRows(key, rows, timerValues)
        elif k[:2] == PASS_PREFIX:
            columns = list(COLUMNS)
            for frame in rows:
                if len(frame):
                    yield frame[columns]
        else:
            yield from self.subs[struct.unpack(">H", k[:2])[0]].handleInputRows((k[2:],), rows, timerValues)

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N802, N803
        k = key[0]
        self.subs[struct.unpack(">H", k[:2])[0]].handleInitialState((k[2:],), initialState, timerValues)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:  # noqa: N802
        k = key[0]
        if k == MARKER_KEY:
            yield from self.subs[0].handleExpiredTimer(key, timerValues, expiredTimerInfo)
        else:
            yield from self.subs[struct.unpack(">H", k[:2])[0]].handleExpiredTimer((k[2:],), timerValues, expiredTimerInfo)

    def close(self) -> None:
        for sub in self.subs:
            sub.close()


def make_level_processor(specs: list[KeyedSpec], routed: bool) -> StatefulProcessor:
    """The StatefulProcessor of a keyed depth: the operator's own when it is alone there, else a
    :class:`KeyedDepthProcessor` over the processors of ``specs``."""
    if not routed:
        return make_processor(specs[0])
    return KeyedDepthProcessor([make_processor(s) for s in specs])
