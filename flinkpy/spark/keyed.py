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
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from flinkpy.spark.records import BUNDLE, END_W, FINAL, MARKER_KEY, MIN_W, RECORD, child_seq, unbundle

#: key groups of a keyed reduce on Spark (its grouping keys). Each costs a Python call, a state
#: read and write and pandas frames per micro-batch — about 10 ms — so 128 (the engine's max
#: parallelism) spent over a second per batch on W1; fewer groups hold more keys each (the blob
#: pickled per batch) and cap the reduce's parallelism: 32 keeps both modest
KEY_GROUPS = 32


#: the broadcast state pattern's operators: every row of both inputs in one Spark group (:mod:`.broadcast`)
BROADCAST_KINDS = ("broadcast_process", "keyed_broadcast_process")


def one_group(record: Any) -> int:
    """The grouping key of every record into a broadcast operator: one Spark group holds them all."""
    return 0


@dataclass
class KeyedSpec:
    kind: str  # keyed_reduce | keyed_process | keyed_map | keyed_flat_map | keyed_filter | window | keyed_co_* | interval_join | *broadcast_process
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
    #: the operator's ``output_type``: a RowTypeInfo makes its outputs Rows, as on the engine
    row_type: Any = None
    #: a two-input operator (``connect(...).key_by(k1, k2)``): the second input's key selector, and
    #: the routes that feed its second input (their rows go to ``process2``)
    key_selector2: Callable | None = None
    second: frozenset[int] = frozenset()
    #: an interval join's bounds and late-record side outputs, a broadcast operator's state
    #: descriptors (the engine operator's arguments)
    params: dict[str, Any] = field(default_factory=dict)
    #: a keyed reduce by key group: running values moved from an engine snapshot, by Spark key
    #: group (:mod:`.state_move`); a group without Spark state of its own starts from its seed
    seed: dict[int, dict] | None = None
    #: a key-group reduce whose every update goes straight to a DiscardingSink: it sends the
    #: count of its updates, not the updates (see :data:`~flinkpy.spark.records.COUNTED`)
    discards: bool = False

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
    from flinkpy.common.functions import Function

    opener = getattr(type(spec.fn), "open", None)
    return opener is None or opener is Function.open


def on_group_state(spec: KeyedSpec) -> bool:
    """Whether the key-group reduce runs on ``applyInPandasWithState`` (see :func:`group_state_reduce`):
    STREAMING mode (no timer: nothing waits for Spark's watermark) and no ``close()`` to call."""
    if not by_key_group(spec) or spec.batch_mode:
        return False
    from flinkpy.common.functions import Function

    closer = getattr(type(spec.fn), "close", None)
    return closer is None or closer is Function.close


def uses_timers(spec: KeyedSpec) -> bool:
    """Whether the operator can have timers (the others skip every timer round trip to Spark)."""
    return spec.kind in ("keyed_process", "keyed_co_process", "interval_join", "window") or (spec.kind == "keyed_reduce" and spec.batch_mode)


def seeded(spec: KeyedSpec, grouping_key: bytes) -> dict:
    """The running values a key group without Spark state starts from: its moved seed, or none."""
    if not spec.seed:
        return {}
    from flinkpy.spark.state_move import group_index

    return dict(spec.seed.get(group_index(grouping_key), {}))


_FINAL_NS = "__flinkpy_end_of_input__"


class _Reduce:
    """Rolling reduce per key (STREAMING: each update; BATCH: the final value at the end)."""

    STATE = "_reduce"

    def __init__(self, name: str, fn: Any, output: Any, backend: Any, batch_mode: bool) -> None:
        from flinkpy.common.state import ValueStateDescriptor
        from flinkpy.task.operators import user_method

        self.name = name
        self.fn = fn
        self.output = output
        self.batch_mode = batch_mode
        self.timers: Any = None
        self._f = user_method(fn, "reduce")
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


def _counted_frame(count: int, seq: bytes, routes: tuple[int, ...]) -> Any:
    """One :data:`~flinkpy.spark.records.COUNTED` row of ``count`` updates per route."""
    import pandas as pd

    from flinkpy.spark.records import COLUMNS, COUNTED, counted_row

    n = len(routes)
    return pd.DataFrame({
        "value": pd.Series([counted_row(count)] * n, dtype=object), "ts": pd.Series([None] * n, dtype=object), "w": [MIN_W] * n,
        "seq": pd.Series([seq] * n, dtype=object), "kind": [COUNTED] * n, "src": list(routes),
    }, columns=list(COLUMNS))


_MISSING = object()


def _reduce_bundles(table: dict, f: Callable, key_of: Callable, blobs: list, columnar: Callable | None = None) -> tuple[Any, list]:
    """Reduce the records of bundles ``blobs`` (in order) into ``table`` ``{key: running value}``;
    the updates (as columns when every bundle's were, see :mod:`.running_reduce`) and their
    timestamps, in the same order."""
    from flinkpy.spark.columns import Columns, records_of
    from flinkpy.spark.vectorized import NotVectorized

    get, missing = table.get, _MISSING
    parts: list = []  # runs of updates: lists of records, or Columns
    out: list = []
    out_ts: list = []
    append = out.append
    for blob in blobs:
        payload, ts = pickle.loads(blob)
        if columnar is not None and type(payload) is Columns and ts is None:
            try:
                updates = columnar(payload, table)
            except NotVectorized:
                pass
            else:
                if out:
                    parts.append(out)
                    out = []
                    append = out.append
                parts.append(updates)
                out_ts.extend([None] * len(updates))
                continue
        values = records_of(payload)
        for r in values:
            k = key_of(r)
            old = get(k, missing)
            new = table[k] = r if old is missing else f(old, r)
            append(new)
        out_ts.extend(ts if ts is not None else [None] * len(values))
    if not parts:
        return out, out_ts
    if out:
        parts.append(out)
    joined = Columns.concat(parts) if all(type(p) is Columns for p in parts) else None
    return (joined if joined is not None else [r for p in parts for r in records_of(p)]), out_ts


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


def group_state_reduce(spec: KeyedSpec, then: Any = None) -> Callable[[tuple, Iterator[Any], Any], Iterator[Any]]:
    """The ``applyInPandasWithState`` function of a STREAMING key-group reduce (:func:`on_group_state`).

    What KeyGroupReduce does on ``transformWithStateInPandas``, on Spark's older stateful API:
    the key group's ``{key: running value}`` travels with the group's rows into the Python worker
    and back (no state server round trips), and Spark plans it without starting a Python process
    on the driver (``transformWithStateInPandas`` starts one per query to learn its state
    variables: about a second). Nothing here waits for Spark's watermark, so the final row of a
    source is passed on as soon as it arrives: every record of that source came before it, and
    Spark runs no extra micro-batch for this step when its watermark advances.

    ``then``: the LevelSpec of the stateless operators after the reduce, run here on its updates
    (see ``flinkpy.spark.query._fused_after``): what leaves is the chain's output.
    """
    from flinkpy.spark.running_reduce import reducer
    from flinkpy.task.operators import user_method

    f, key_of = user_method(spec.fn, "reduce"), spec.key_selector
    columnar = reducer(f, key_of)

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
        table: dict = pickle.loads(state.get[0]) if state.exists else seeded(spec, key[0])
        out, out_ts = _reduce_bundles(table, f, key_of, [v for v, kd in zip(pdf["value"].tolist(), pdf["kind"].tolist()) if kd == BUNDLE], columnar)
        state.update((pickle.dumps(table, protocol=5),))
        if out and spec.discards:
            yield _counted_frame(len(out), pdf["seq"].iloc[0], spec.routes)
        elif out and then is not None:
            yield from _chained_frames(then, out, out_ts, pdf["seq"].iloc[0], spec.routes[0])
        elif out:
            # NoTimeout leaves Spark's watermark unknown here. MIN_W: a keyed step downstream
            # then goes by Spark's watermark alone, as it does after the transformWithState
            # road (whose rows carry Spark's watermark); with no event time it is the engine's
            yield _bundle_frame(out, out_ts, MIN_W, pdf["seq"].iloc[0], spec.routes)

    return run


def _chained_frames(then: Any, out: Any, out_ts: list, seq: bytes, route: int) -> Iterator[Any]:
    """The rows chain ``then`` makes of a reduce's updates (one bundle row, as the reduce sends
    them when the chain runs apart), as pandas DataFrames of the row columns."""
    import pandas as pd

    from flinkpy.spark.levels import routed_chain_function
    from flinkpy.spark.records import COLUMNS, to_batch

    timed = out_ts.count(None) != len(out_ts)
    bundle = to_batch([(out, out_ts if timed else None)], [None], [MIN_W], [seq], [BUNDLE], [route])
    for batch in routed_chain_function(then)(iter([bundle])):
        if batch.num_rows:
            cols = batch.to_pydict()
            yield pd.DataFrame({
                "value": pd.Series(cols["value"], dtype=object), "ts": pd.Series(cols["ts"], dtype=object), "w": cols["w"],
                "seq": pd.Series(cols["seq"], dtype=object), "kind": cols["kind"], "src": cols["src"],
            }, columns=list(COLUMNS))
