"""The stateless part of a job on Spark: chained operators applied batch-wise with mapInArrow.

Consecutive map / flat_map / filter / process / timestamp-assigning operators of a non-keyed
stream run as one Python function over Arrow record batches — the same operator classes the
engine's tasks chain (:mod:`flinkpy.task.operators`), so a function sees the same calls and
contexts on both runners. A batch's records go through the chain as one list; only the pickled
values cross the Arrow boundary. When a keyed operator follows, the chain also computes each
record's key (pickled: Spark groups by its bytes) — or, before a keyed reduce that runs per key
group (:func:`flinkpy.spark.keyed.by_key_group`), each record's key group, and sends a batch's
records of one key group as one bundle row (:data:`~flinkpy.spark.records.BUNDLE`). Bundles
coming in (from a source or a keyed reduce) are opened first.

Outputs keep their input's order: the ordering key of the ``j``-th output of a batch is the first
input's key plus ``j``. Watermarks: a timestamp assigner's generator runs here; its watermark is
written into each following record's ``w`` and, when a periodic generator advances at the end of a
batch, into a watermark row, so that Spark's watermark (hence timers downstream) follows it.

A number sequence's records arrive as numpy columns (:mod:`flinkpy.spark.columns`): the leading
maps and filters whose functions are arithmetic run over them once per batch
(:mod:`flinkpy.spark.vectorized`, :func:`advance`), and an arithmetic key selector after them
bundles columns by key group; from the first operator that cannot, records are objects again.

That is for a source whose records take one path; when a job is a graph, :mod:`.levels` runs
every non-keyed operator of one keyed depth in one function, with the same operator classes.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from flinkpy.spark.columns import Columns, records_of
from flinkpy.spark.records import BUNDLE, MARKER_KEY, MIN_W, RECORD, WATERMARK, child_seq, to_batch


@dataclass
class Stage:
    """One operator of the chain, as translated from a StreamGraph node."""

    kind: str  # map | flat_map | filter | process | timestamps
    name: str
    fn: Any
    uid: str | None = None
    #: the node's ``output_type``: a RowTypeInfo makes its outputs Rows, as on the engine
    row_type: Any = None


@dataclass
class ChainSpec:
    stages: list[Stage] = field(default_factory=list)
    #: the key selector of the keyed operator that follows, if any
    key_selector: Callable | None = None
    job_parameters: dict[str, str] = field(default_factory=dict)
    #: group by key group (of this many) in bundles, not by key (see the module docstring)
    key_groups: int = 0


class _Collector:
    """The end of the operator chain: gathers records, timestamps and the watermark."""

    def __init__(self) -> None:
        self.values: list = []
        self.ts: list = []
        self.w: list = []
        self.watermark = MIN_W

    def process(self, values: list, timestamps: list | None) -> None:
        self.values.extend(values)
        self.ts.extend(timestamps if timestamps is not None else [None] * len(values))
        self.w.extend([self.watermark] * len(values))

    def process_watermark(self, watermark: int) -> None:
        if watermark > self.watermark:
            self.watermark = watermark

    def process_watermark_status(self, idle: bool) -> None:
        pass


def _operators(spec: ChainSpec, out: _Collector) -> tuple[list, Any]:
    from flinkpy.task import operators as ops
    from flinkpy.task.row_output import with_row_type

    classes = {
        "map": ops.MapOperator,
        "flat_map": ops.FlatMapOperator,
        "filter": ops.FilterOperator,
        "process": ops.ProcessOperator,
        "timestamps": ops.TimestampsAndWatermarksOperator,
    }
    chain: list = []
    downstream: Any = out
    for stage in reversed(spec.stages):
        op = classes[stage.kind](stage.name, stage.fn, with_row_type(stage.row_type, downstream, stage.name))
        chain.insert(0, op)
        downstream = op
    return chain, downstream


def _runtime_context(name: str, params: dict[str, str]) -> Any:
    from pyspark import TaskContext

    from flinkpy.task.runtime_context import TaskRuntimeContext

    tc = TaskContext.get()
    return TaskRuntimeContext(
        task_name=name,
        subtask_index=tc.partitionId() if tc else 0,
        parallelism=tc.numPartitions() if tc and hasattr(tc, "numPartitions") else 1,
        max_parallelism=128,
        attempt=tc.attemptNumber() if tc else 0,
        job_parameters=params,
        operator_name=name,
    )


def chain_function(spec: ChainSpec) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function of ``spec``."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        out = _Collector()
        chain, head = _operators(spec, out)
        for op in chain:
            op.open(_runtime_context(op.name, spec.job_parameters))
        stampers = [op for op in chain if hasattr(op, "emit_periodic_watermark")]
        stamped = bool(stampers)
        if spec.key_selector is None:
            encode: Callable = _plain_rows
        elif spec.key_groups:
            encode = _bundles(spec.key_selector, spec.key_groups)
        else:
            encode = _keyed_rows(spec.key_selector)
        prefix = _ColumnarPrefix(spec) if all(_inert(s) for s in spec.stages if s.kind == "timestamps") else None
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                cols = batch.to_pydict()
                loaded = None
                if prefix is not None:
                    opened = _open_columnar(cols)
                    if type(opened) is Columns:
                        yield prefix.run(opened, cols, head, out, encode)
                        continue
                    loaded = opened
                yield encode(*_run_batch(_columns(cols, loaded), head, out, stamped, stampers))
        finally:
            for op in chain:
                op.close()

    return run


def _open_columnar(cols: dict) -> Columns | list | None:
    """A batch of bundle rows whose records all travel as columns, under one watermark and route:
    their records as one :class:`Columns`. Otherwise the bundles unpickled (for :func:`_columns`),
    or None when the batch is not bundles alone."""
    kinds = cols["kind"]
    n = len(kinds)
    if kinds.count(BUNDLE) != n:
        return None
    loaded = [pickle.loads(v) for v in cols["value"]]
    ws, srcs = cols["w"], cols["src"]
    if ws.count(ws[0]) != n or srcs.count(srcs[0]) != n or any(type(p) is not Columns or t is not None for p, t in loaded):
        return loaded
    joined = Columns.concat([p for p, _ in loaded])
    return joined if joined is not None else loaded


class _ColumnarPrefix:
    """The chain over a batch of columns: its leading operators run over them while they can
    (:func:`advance`); the operator where that stops and the rest of the chain get the records as
    objects, and after a whole chain the key selector, if arithmetic, bundles columns by key group."""

    def __init__(self, spec: ChainSpec) -> None:
        from flinkpy.spark.vectorized import arithmetic

        selector = spec.key_selector
        self.key = selector if spec.key_groups and selector is not None and arithmetic(selector) else None
        self.grouped = _columnar_bundles(spec.key_groups) if self.key is not None else None

    def run(self, data: Columns, cols: dict, head: Any, out: _Collector, encode: Callable) -> Any:
        from flinkpy.spark.vectorized import NotVectorized, keys

        w, src, first_seq = cols["w"][0], cols["src"][0], cols["seq"][0]
        data, op = advance(head, data)
        if op is out and self.grouped is not None:
            try:
                return self.grouped(data, keys(self.key, data), w, src, first_seq)
            except NotVectorized:
                pass
        values = data.values()
        m = len(values)
        if op is not out:
            rows = _run_batch((values, [None] * m, [w] * m, [first_seq] * m, [RECORD] * m, [src] * m), op, out, False, [])
        else:
            seqs = _Seqs(first_seq)
            seqs.extend(range(m))
            rows = (values, [None] * m, [w] * m, seqs, [RECORD] * m, [src] * m)
        return encode(*rows)


def advance(head: Any, data: Columns) -> tuple[Columns, Any]:
    """Run the operators from ``head`` on over ``data`` while each is a map or filter whose function
    is arithmetic and can run over these columns (:mod:`flinkpy.spark.vectorized`), or passes
    records through unchanged (:func:`_inert`): what is left of the records, and the first
    operator (or output) that has not seen them, which takes them as objects."""
    from flinkpy.spark.vectorized import NotVectorized, arithmetic, call, mask
    from flinkpy.task import operators as ops
    from flinkpy.task.operators import user_method

    op = head
    while True:
        if type(op) is ops.TimestampsAndWatermarksOperator and _inert_strategy(op.fn):
            op = op.output
            continue
        kind = "map" if type(op) is ops.MapOperator else "filter" if type(op) is ops.FilterOperator else None
        if kind is None:
            return data, op
        f = user_method(op.fn, kind)
        if not arithmetic(f):
            return data, op
        try:
            data = call(f, data) if kind == "map" else data.take(mask(f, data))
        except NotVectorized:
            return data, op
        op = op.output


def _inert(stage: Stage) -> bool:
    """Whether ``stage`` assigns neither timestamps nor watermarks (``from_source`` with
    ``WatermarkStrategy.no_watermarks()``): records without timestamps pass it unchanged."""
    return stage.kind == "timestamps" and _inert_strategy(stage.fn)


def _inert_strategy(strategy: Any) -> bool:
    return getattr(strategy, "kind", None) == "no-watermarks" and getattr(strategy, "timestamp_assigner", None) is None


def _columnar_bundles(key_groups: int) -> Callable[..., Any]:
    """What :func:`_bundles` does, for records in columns and their keys in a column: one bundle
    row of columns per key group, ordered by key group, each group's records in order."""
    import struct

    from flinkpy.state.key_groups import KeyGroupAssigner

    assign = KeyGroupAssigner(key_groups)
    group_keys = [struct.pack(">H", g) for g in range(key_groups)]

    def encode(data: Columns, key_col: Any, w: int, src: int, first_seq: bytes) -> Any:
        import numpy as np

        groups = _groups_of(key_col, assign)
        # a stable sort keeps each group's records in order; the first of a group's run is its
        # earliest record
        order = np.argsort(groups, kind="stable")
        counts = np.bincount(groups, minlength=key_groups)
        present = np.flatnonzero(counts)
        ends = np.cumsum(counts)
        rows = []
        for g in present.tolist():
            e, c = int(ends[g]), int(counts[g])
            idx = order[e - c:e]
            rows.append(((data.take(idx), None), group_keys[g], child_seq(first_seq, int(idx[0]))))
        n = len(rows)
        return to_batch([r[0] for r in rows], [None] * n, [w] * n, [r[2] for r in rows], [BUNDLE] * n, [src] * n,
                        [r[1] for r in rows])

    return encode


def _groups_of(key_col: Any, assign: Callable) -> Any:
    """Each record's key group, assigning each distinct key once: through a table over
    the keys' range when they are ints of a small range, else through their sorted distinct values."""
    import numpy as np

    if key_col.dtype.kind == "i" and len(key_col):
        low, high = int(key_col.min()), int(key_col.max())
        if high - low < 1 << 16:
            shifted = key_col - low
            table = np.zeros(high - low + 1, dtype=np.int32)
            present = np.flatnonzero(np.bincount(shifted))
            table[present] = [assign(k + low) for k in present.tolist()]
            return table[shifted]
    distinct, inverse = np.unique(key_col, return_inverse=True)
    return np.array([assign(k) for k in distinct.tolist()], dtype=np.int32)[inverse.reshape(-1)]


def _columns(cols: dict, loaded: list | None = None) -> tuple[list, ...]:
    """An input batch as columns (value, ts, w, seq, kind, src), records unpickled and bundles
    opened: a bundle's records take its ``w`` and its ``seq`` (of a batch's records, only the
    first one's ordering key is read, see :func:`_run_batch`). ``loaded``: the batch's bundles
    already unpickled, when it is bundles alone."""
    kinds = cols["kind"]
    loads = pickle.loads
    if BUNDLE not in kinds:
        values = [loads(v) if k == RECORD else None for v, k in zip(cols["value"], kinds)]
        return values, cols["ts"], cols["w"], cols["seq"], kinds, cols["src"]
    opened = iter(loaded) if loaded is not None else None
    out: tuple[list, ...] = ([], [], [], [], [], [])
    values, ts, ws, seqs, kind, srcs = out
    for v, t, w, s, k, src in zip(cols["value"], cols["ts"], cols["w"], cols["seq"], kinds, cols["src"]):
        if k == BUNDLE:
            payload, stamps = next(opened) if opened is not None else loads(v)
            records = records_of(payload)
            n = len(records)
            values.extend(records), ts.extend(stamps if stamps is not None else [None] * n), ws.extend([w] * n)
            seqs.extend([s] * n), kind.extend([RECORD] * n), srcs.extend([src] * n)
        else:
            values.append(loads(v) if k == RECORD else None), ts.append(t), ws.append(w), seqs.append(s)
            kind.append(k), srcs.append(src)
    return out


class _Seqs(list):
    """The ordering keys of a batch's output rows: bytes, or ``k`` for the ``k``-th record the chain
    produced in the batch, whose key ``child_seq(first, k)`` is made only when read — the bundles
    before a keyed reduce read one per key group, not one per record."""

    def __init__(self, first: bytes) -> None:
        super().__init__()
        self.first = first

    def at(self, i: int) -> bytes:
        s = list.__getitem__(self, i)
        return child_seq(self.first, s) if type(s) is int else s

    def resolved(self) -> list[bytes]:
        first = self.first
        return [child_seq(first, s) if type(s) is int else s for s in self]


def _run_batch(columns: tuple[list, ...], head: Any, out: _Collector, stamped: bool, stampers: list) -> tuple[list, ...]:
    """The chain's output rows of one batch, as columns (records not pickled; ordering keys as
    :class:`_Seqs`)."""
    raw, tss, ws, seqs, kinds, srcs = columns
    rows_v: list = []
    rows_ts: list = []
    rows_w: list = []
    first_seq = seqs[0]
    rows_seq = _Seqs(first_seq)
    rows_kind: list = []
    rows_src: list = []
    src = srcs[0]
    produced = 0
    i, n = 0, len(kinds)
    while i < n:
        if kinds[i] != RECORD:
            # markers keep their place; the end of event time also ends the chain's own clock
            rows_v.append(None), rows_ts.append(None), rows_w.append(ws[i]), rows_seq.append(seqs[i])
            rows_kind.append(kinds[i]), rows_src.append(srcs[i])
            i += 1
            continue
        j = i
        while j < n and kinds[j] == RECORD and ws[j] == ws[i]:
            j += 1
        if not stamped:
            out.watermark = ws[i]
        values = raw[i:j]
        ts = tss[i:j]
        head.process(values, None if ts[0] is None else ts)
        m = len(out.values)
        rows_v.extend(out.values), rows_ts.extend(out.ts), rows_w.extend(out.w)
        rows_seq.extend(range(produced, produced + m))
        rows_kind.extend([RECORD] * m), rows_src.extend([src] * m)
        produced += m
        out.values, out.ts, out.w = [], [], []
        i = j
    if stampers:
        before = out.watermark
        for op in stampers:
            op.emit_periodic_watermark()
        if out.watermark > before:
            rows_v.append(None), rows_ts.append(None), rows_w.append(out.watermark), rows_seq.append(child_seq(first_seq, produced))
            rows_kind.append(WATERMARK), rows_src.append(src)
    return rows_v, rows_ts, rows_w, rows_seq, rows_kind, rows_src


def _plain_rows(values: list, ts: list, w: list, seq: _Seqs, kind: list, src: list) -> Any:
    return to_batch(values, ts, w, seq.resolved(), kind, src)


def _keyed_rows(selector: Callable) -> Callable[..., Any]:
    """Rows with the pickled key of each record (markers: :data:`MARKER_KEY`)."""
    dumps = pickle.dumps

    def encode(values: list, ts: list, w: list, seq: _Seqs, kind: list, src: list) -> Any:
        keys = [dumps(selector(v), protocol=5) if k == RECORD else MARKER_KEY for v, k in zip(values, kind)]
        return to_batch(values, ts, w, seq.resolved(), kind, src, keys)

    return encode


def _bundles(selector: Callable, key_groups: int) -> Callable[..., Any]:
    """One row per key group of a batch: its records pickled together, in order; markers as rows.

    A bundle's ``w`` is the largest of its records' (Spark's watermark is taken over rows); its
    grouping key is the key group as two bytes (never :data:`MARKER_KEY`, which is empty).
    """
    import struct

    from flinkpy.state.key_groups import KeyGroupAssigner

    assign = KeyGroupAssigner(key_groups)
    group_keys = [struct.pack(">H", g) for g in range(key_groups)]

    def encode(values: list, ts: list, w: list, seq: _Seqs, kind: list, src: list) -> Any:
        # the key selector is the only Python call per record; then one pass drops each record
        # into its key group's list (a group's records keep their order), which costs half of
        # what a sort of the batch by key group did
        cols: tuple[list, ...] = ([], [], [], [], [], [], [])
        n = len(kind)
        if kind.count(RECORD) == n:
            rec: list | None = None
            records_in = values
        else:
            rec = [i for i, k in enumerate(kind) if k == RECORD]
            for i, k in enumerate(kind):
                if k != RECORD:
                    for col, x in zip(cols, (None, None, w[i], seq.at(i), k, src[i], MARKER_KEY)):
                        col.append(x)
            records_in = list(map(values.__getitem__, rec))
        keys = list(map(selector, records_in))
        # hash each distinct key once (keys are hashable: the reduce keeps them in a dict)
        group_of = {k: assign(k) for k in set(keys)}
        groups = list(map(group_of.__getitem__, keys))
        buckets: list[list] = [[] for _ in range(key_groups)]
        adds = [b.append for b in buckets]
        for v, g in zip(records_in, groups):
            adds[g](v)
        # in the common batch no record has a timestamp and all share one watermark: then
        # neither is gathered per record
        untimed = ts.count(None) == n
        one_w = w.count(w[0]) == n
        positions: list[list[int]] = []
        if not (untimed and one_w):
            positions = [[] for _ in range(key_groups)]
            at_pos = [p.append for p in positions]
            for i, g in enumerate(groups):
                at_pos[g](i if rec is None else rec[i])
        for g, records in enumerate(buckets):
            if not records:
                continue
            first = groups.index(g)
            if rec is not None:
                first = rec[first]
            stamps = None
            w_g = w[first]
            if positions:
                idx = positions[g]
                stamps = None if untimed else list(map(ts.__getitem__, idx))
                if not one_w:
                    w_g = max(map(w.__getitem__, idx))
            row = ((records, stamps if stamps is not None and stamps.count(None) != len(stamps) else None), None,
                   w_g, seq.at(first), BUNDLE, src[first], group_keys[g])
            for col, x in zip(cols, row):
                col.append(x)
        return to_batch(*cols[:6], cols[6])

    return encode
