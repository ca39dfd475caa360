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

Keyed reduce (and sum/min/max) takes a faster road when its function has no ``open()`` (so it
cannot ask for keyed state of its own): Spark groups by *key group* instead of by key (at most
:data:`KEY_GROUPS` groups, as the engine's max parallelism), the chain before it sends each key
group's records of an Arrow batch as one pickled bundle, and the processor keeps one Spark value
state per key group holding ``{key: running value}`` — the engine's own layout. Spark then calls
Python once per key group and micro-batch with two state round trips, instead of once per key
with five; results are the same records (each update, or each key's final value in BATCH mode).
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from flinkpy.spark.records import BUNDLE, END_W, FINAL, MARKER_KEY, RECORD, child_seq, unbundle

#: key groups of a keyed reduce on Spark (its grouping keys): flinkpy's default max parallelism
KEY_GROUPS = 128


@dataclass
class KeyedSpec:
    kind: str  # keyed_reduce | keyed_process | keyed_map | keyed_flat_map | keyed_filter | window
    name: str
    fn: Any
    key_selector: Callable
    batch_mode: bool = False
    job_parameters: dict[str, str] = field(default_factory=dict)
    uid: str | None = None


_METHODS = {"keyed_process": "process_element", "keyed_map": "map", "keyed_flat_map": "flat_map", "keyed_filter": "filter"}


def by_key_group(spec: KeyedSpec) -> bool:
    """Whether the operator runs per key group (see the module docstring): a keyed reduce whose
    function cannot reach keyed state (no ``open()`` of its own)."""
    if spec.kind != "keyed_reduce":
        return False
    from flinkpy.datastream.functions import Function

    opener = getattr(type(spec.fn), "open", None)
    return opener is None or opener is Function.open


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


def _frame(values: list, ts: list, w: list, prefix: bytes) -> Any:
    """The output rows of records ``values`` (in order) as a pandas DataFrame of the row columns."""
    import pandas as pd

    from flinkpy.spark.records import COLUMNS

    n = len(values)
    dumps = pickle.dumps
    return pd.DataFrame({
        "value": pd.Series([dumps(v, protocol=5) for v in values], dtype=object),
        "ts": pd.Series(ts, dtype=object),
        "w": pd.Series(w, dtype=object),
        "seq": pd.Series([child_seq(prefix, i) for i in range(n)], dtype=object),
        "kind": [RECORD] * n,
        "src": [0] * n,
    }, columns=list(COLUMNS))


def _bundle_frame(values: list, ts: list, w: int, seq: bytes) -> Any:
    """One bundle row of records ``values`` (see :mod:`flinkpy.spark.records`)."""
    import pandas as pd

    from flinkpy.spark.records import COLUMNS

    timed = any(t is not None for t in ts)
    blob = pickle.dumps((values, ts if timed else None), protocol=5)
    return pd.DataFrame({
        "value": pd.Series([blob], dtype=object), "ts": pd.Series([None], dtype=object), "w": [w],
        "seq": pd.Series([seq], dtype=object), "kind": [BUNDLE], "src": [0],
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

        def init(self, handle: Any) -> None:
            self.handle = handle
            self.finals = handle.getListState("_flinkpy_final_rows", "src int")
            self.setup(handle)

        def setup(self, handle: Any) -> None:
            raise NotImplementedError

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            watermark = timerValues.getCurrentWatermarkInMs()
            frames = [f for f in rows if len(f)]
            if not frames:
                return
            pdf = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
            seqs = pdf["seq"].tolist()
            if any(a > b for a, b in zip(seqs, seqs[1:])):
                pdf = pdf.sort_values("seq", kind="stable")
            if key[0] == MARKER_KEY:
                yield from self._markers(pdf, watermark)
                return
            yield from self.records(key[0], pdf, watermark)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
            watermark = timerValues.getCurrentWatermarkInMs()
            if key[0] == MARKER_KEY:
                if watermark >= END_W:
                    srcs = [row[0] for row in self.finals.get()] if self.finals.exists() else []
                    self.finals.clear()
                    yield self._final_rows(srcs)
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
                self.handle.registerTimer(END_W)

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

            self.out = _Collector()
            self.backend = SparkKeyedBackend(handle, spec.name)
            op = self._operator()
            self.timers = SparkTimers(handle, spec.name, op.on_event_time)
            op.timers = self.timers
            context = _runtime_context(spec.name, spec.job_parameters)
            context._backend = self.backend
            op.open(context)
            self.backend.done_initialising()
            self.op = op
            self.timed = uses_timers(spec)

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
                timers.load(k, watermark)
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
                run_ts = [None if t != t or t is None else int(t) for t in tss[i:j]]
                records = [loads(v) for v, kd in zip(values[i:j], kinds[i:j]) if kd == RECORD]
                self.op.process(records, None if run_ts[0] is None else run_ts)
                i = j
            if timers is not None:
                timers.sync()
            if self.out.values:
                yield self._drain(prefix)

        def timer(self, key: bytes, watermark: int, expiry: int) -> Iterator[Any]:
            k = pickle.loads(key)
            self.backend.set_current_key(k)
            self.timers.load(k, watermark)
            self.out.watermark = self.timers.watermark
            self.timers.advance(watermark)
            self.timers.sync()
            yield self._drain(b"\xfe" + struct.pack(">q", expiry))

        def close(self) -> None:
            self.op.close()

        def _drain(self, prefix: bytes) -> Any:
            out = self.out
            frame = _frame(out.values, out.ts, out.w, prefix)
            out.values, out.ts, out.w = [], [], []
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
            f, key_of = self.f, spec.key_selector
            get, missing = table.get, _MISSING
            out: list = []
            out_ts: list = []
            append = out.append
            for blob in pdf["value"].tolist():
                values, ts = unbundle(blob)
                for r in values:
                    k = key_of(r)
                    old = get(k, missing)
                    new = table[k] = r if old is missing else f(old, r)
                    append(new)
                out_ts.extend(ts)
            self.table.update((pickle.dumps(table, protocol=5),))
            if spec.batch_mode:  # the final values once event time ended (the input's end)
                if row is None:
                    self.handle.registerTimer(END_W)
                return
            yield _bundle_frame(out, out_ts, watermark, pdf["seq"].iloc[0])

        def timer(self, key: bytes, watermark: int, expiry: int) -> Iterator[Any]:
            row = self.table.get()
            if row is not None and spec.batch_mode:
                finals = list(pickle.loads(row[0]).values())
                yield _bundle_frame(finals, [None] * len(finals), watermark, b"\xfe" + struct.pack(">q", expiry))

        def close(self) -> None:
            closer = getattr(spec.fn, "close", None)
            if callable(closer) and hasattr(spec.fn, "reduce"):
                closer()

    return KeyGroupReduce() if by_key_group(spec) else FlinkpyKeyedProcessor()


_MISSING = object()
