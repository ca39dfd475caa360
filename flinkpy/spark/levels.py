"""Chain levels: every non-keyed operator of one keyed depth of a job graph in one mapInArrow.

When a job is a graph (:mod:`flinkpy.spark.plan`: fan-out, side outputs read downstream, unions,
several sinks, keyed operators after keyed operators), its rows carry a *route*, the graph edge
they travel on. :func:`routed_chain_function` wires the engine's operators of one keyed depth as
the engine's task chains do (an output to several consumers through a fan-out, side outputs by
OutputTag), hands each row to the operator its route leads to, and sends a record out once per
consumer that is not on this level, as a row on that consumer's route; rows on routes that go
further pass through untouched. When a keyed depth follows, each row gets its grouping key: the
keyed operator's (prefixed with its index when several share the depth), or a pass-through key.
Watermarks and ordering keys work as in :mod:`.chain`, whose operator classes and runtime
context this module shares.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from flinkpy.spark.chain import Stage, _runtime_context, advance
from flinkpy.spark.columns import Columns, records_of
from flinkpy.spark.records import BUNDLE, MARKER_KEY, MIN_W, RECORD, WATERMARK, child_seq, to_batch, unbundle

#: grouping keys of rows passing a keyed depth unchanged start with these bytes (an operator's
#: keys start with its two-byte index, a pickle with 0x80, markers are empty); a last byte spreads
#: them over :data:`PASS_BUCKETS` groups, so that no one Spark group holds them all
PASS_PREFIX = b"\xff\xff"
PASS_BUCKETS = 16


@dataclass
class SourcePort:
    """Where a source's records enter chain level 0: its watermark strategy, if ``from_source`` set
    one, then the routes of the operators that read the source."""

    node_id: int
    name: str
    routes: list[int]
    watermark_strategy: Any = None
    #: routes of the source's side outputs: their rows come from the source already on them
    side_routes: list[int] = field(default_factory=list)


@dataclass
class LevelSpec:
    """One chain level of a routed plan: the non-keyed operators of one keyed depth and their wiring.

    A row arriving on a route of ``entries`` goes to that operator (at level 0 a source's rows, on
    the source's route, go to its :class:`SourcePort`); an operator's output goes to the operators
    of this level directly (``internal``) and out as rows on every other route it feeds. Rows on
    routes of ``next_keys`` get the grouping key of the keyed operator they go to next; rows on
    other routes pass on unchanged (with a pass-through key when a keyed depth follows).
    """

    level: int
    stages: dict[int, Stage]
    order: list[int]
    outputs: dict[int, list[int]]
    side_outputs: dict[int, dict[str, list[int]]]
    internal: dict[int, int]
    entries: dict[int, int | None]
    ports: dict[int, SourcePort]
    #: route -> (grouping-key prefix, key selector, key groups or 0) of the keyed operator it feeds
    next_keys: dict[int, tuple[bytes, Callable, int]]
    #: a keyed depth follows: rows get a ``key`` column
    keyed: bool
    job_parameters: dict[str, str] = field(default_factory=dict)
    #: rows on this level carry routes that matter (see SparkPlan.multiplexed)
    routed: bool = True
    #: routes into the second input of a two-input operator (``connect``): its ``process2``
    second: frozenset[int] = frozenset()

    def emitted_routes(self) -> list[int]:
        """Routes whose rows this level emits (not the ones between its own operators)."""
        out: list[int] = []
        for nid in self.order:
            out.extend(r for r in self.outputs[nid] if r not in self.internal)
            for rs in self.side_outputs[nid].values():
                out.extend(r for r in rs if r not in self.internal)
        for port in self.ports.values():
            out.extend(r for r in port.routes + port.side_routes if r not in self.internal)
        return sorted(set(out))

    @property
    def linear(self) -> bool:
        """Whether each operator here feeds one consumer and no side output is read: a bundle's
        records can then run through together, their outputs in their inputs' order."""
        return not self.second and all(len(self.outputs[n]) <= 1 and not self.side_outputs[n] for n in self.order)


class _SecondInput:
    """The second input of a two-input operator (co_map, co_flat_map, co_process) as a place to send
    records: what the engine's input loop does for the channels of input 2 (``process2``)."""

    def __init__(self, op: Any) -> None:
        self.op = op
        #: where the operator's outputs go (for :func:`_mark_stamped`)
        self.output = op.output
        self.side_outputs = getattr(op, "side_outputs", {})

    def process(self, values: list, timestamps: list | None) -> None:
        self.op.process2(values, timestamps)

    def process_watermark(self, watermark: int) -> None:
        self.op.process_watermark(watermark)

    def process_watermark_status(self, idle: bool) -> None:
        self.op.process_watermark_status(idle)


class _Emitter:
    """Every record a level's operators send out, in emission order, with its route."""

    def __init__(self) -> None:
        self.values: list = []
        self.ts: list = []
        self.w: list = []
        self.routes: list = []

    def clear(self) -> None:
        self.values, self.ts, self.w, self.routes = [], [], [], []


class _Port:
    """The end of a route inside a chain level: records leave as rows on ``route``."""

    def __init__(self, emitter: _Emitter, route: int) -> None:
        self.emitter = emitter
        self.route = route
        self.watermark = MIN_W
        #: its watermark comes from a timestamp assigner of this level (else from the input rows)
        self.stamped = False

    def process(self, values: list, timestamps: list | None) -> None:
        if not values:
            return
        e, n = self.emitter, len(values)
        e.values.extend(values)
        e.ts.extend(timestamps if timestamps is not None else [None] * n)
        e.w.extend([self.watermark] * n)
        e.routes.extend([self.route] * n)

    def process_watermark(self, watermark: int) -> None:
        if watermark > self.watermark:
            self.watermark = watermark

    def process_watermark_status(self, idle: bool) -> None:
        pass


def _wire(spec: LevelSpec, emitter: _Emitter) -> tuple[list, dict[int, Any], list[_Port], list]:
    """The level's operators (engine classes), the head of each route arriving here, its ports and
    its timestamp assigners."""
    from flinkpy.task import operators as ops
    from flinkpy.task.row_output import with_row_type
    from flinkpy.task.two_input import NON_KEYED

    classes = {
        "map": ops.MapOperator,
        "flat_map": ops.FlatMapOperator,
        "filter": ops.FilterOperator,
        "process": ops.ProcessOperator,
        "timestamps": ops.TimestampsAndWatermarksOperator,
        **NON_KEYED,
    }
    ports: dict[int, _Port] = {}

    def target(route: int) -> Any:
        if route in spec.internal:
            op = operators[spec.internal[route]]
            return _SecondInput(op) if route in spec.second else op
        if route not in ports:
            ports[route] = _Port(emitter, route)
        return ports[route]

    operators: dict[int, Any] = {}
    for nid in reversed(spec.order):  # consumers before producers (the order is topological)
        stage = spec.stages[nid]
        out = with_row_type(stage.row_type, ops.fan_out([target(r) for r in spec.outputs[nid]]), stage.name)
        op = classes[stage.kind](stage.name, stage.fn, out)
        op.side_outputs = {tag: ops.fan_out([target(r) for r in rs]) for tag, rs in spec.side_outputs[nid].items()}
        operators[nid] = op
    chain = [operators[nid] for nid in spec.order]
    heads: dict[int, Any] = {r: _SecondInput(operators[nid]) if r in spec.second else operators[nid]
                             for r, nid in spec.entries.items() if nid is not None}
    for route, port in spec.ports.items():
        out = ops.fan_out([target(r) for r in port.routes])
        if port.watermark_strategy is not None:
            stamper = ops.TimestampsAndWatermarksOperator(port.name + " (watermarks)", port.watermark_strategy, out)
            chain.insert(0, stamper)
            out = stamper
        heads[route] = out
        for side in port.side_routes:
            heads[side] = target(side)
    for route in spec.next_keys:  # records passing this level straight into the next keyed depth
        if route not in heads and route not in spec.emitted_routes():
            heads[route] = target(route)
    stampers = [op for op in chain if hasattr(op, "emit_periodic_watermark")]
    for stamper in stampers:
        _mark_stamped(stamper.output)
    return chain, heads, list(ports.values()), stampers


def _mark_stamped(output: Any) -> None:
    """Mark the ports downstream of a timestamp assigner: their watermark is the assigner's."""
    from flinkpy.task.operators import Fanout

    if isinstance(output, _Port):
        output.stamped = True
    elif isinstance(output, Fanout):
        for o in output.outputs:
            _mark_stamped(o)
    elif hasattr(output, "output"):
        _mark_stamped(output.output)
        for o in getattr(output, "side_outputs", {}).values():
            _mark_stamped(o)


class _Rows:
    """The output columns of one Arrow batch of a routed level, keys and bundles included."""

    def __init__(self, spec: LevelSpec) -> None:
        import struct

        from flinkpy.state.key_groups import KeyGroupAssigner

        self.spec = spec
        self.cols: tuple[list, ...] = ([], [], [], [], [], [], [])
        self.bundles: dict[bytes, list] = {}
        self.assigners = {r: KeyGroupAssigner(g) for r, (_, _, g) in spec.next_keys.items() if g}
        self.group_keys = [struct.pack(">H", g) for g in range(max([g for _, _, g in spec.next_keys.values()] + [0]))]

    def raw(self, value: bytes, ts: Any, w: int, seq: bytes, kind: int, route: int) -> None:
        """A row passing on unchanged (a marker, or a row on a route nobody reads here)."""
        key: bytes | None = None
        if self.spec.keyed:
            key = MARKER_KEY if kind not in (RECORD, BUNDLE) else PASS_PREFIX + bytes((seq[-1] % PASS_BUCKETS,))
        for col, x in zip(self.cols, (value, ts, w, seq, kind, route, key)):
            col.append(x)

    def drain(self, emitter: _Emitter, seq_at: Callable[[int], bytes], bundle: bytes | None = None) -> int:
        """The emitter's records as rows (the ``j``-th with ordering key ``seq_at(j)``); their count.
        With ``bundle`` (the ordering key of the bundle they came from, all under one watermark),
        records on a route that no keyed operator reads next leave as one bundle row per route."""
        if bundle is not None and emitter.values and not self.spec.keyed:
            return self._rebundle(emitter, bundle)
        dumps = pickle.dumps
        spec = self.spec
        value_c, ts_c, w_c, seq_c, kind_c, src_c, key_c = self.cols
        n = len(emitter.values)
        for j, (v, t, w, r) in enumerate(zip(emitter.values, emitter.ts, emitter.w, emitter.routes)):
            nk = spec.next_keys.get(r)
            seq = seq_at(j)
            if nk is not None and nk[2]:
                bk = nk[0] + self.group_keys[self.assigners[r](nk[1](v))]
                b = self.bundles.get(bk)
                if b is None:
                    b = self.bundles[bk] = [[], [], seq, w, r]
                b[0].append(v)
                b[1].append(t)
                if w > b[3]:
                    b[3] = w
                continue
            value_c.append(dumps(v, protocol=5)), ts_c.append(t), w_c.append(w), seq_c.append(seq)
            kind_c.append(RECORD), src_c.append(r)
            if spec.keyed:
                key_c.append(nk[0] + dumps(nk[1](v), protocol=5) if nk is not None else PASS_PREFIX + bytes((seq[-1] % PASS_BUCKETS,)))
        emitter.clear()
        return n

    def _rebundle(self, emitter: _Emitter, seq: bytes) -> int:
        """The emitter's records (one bundle's outputs, to the sinks) as a bundle row per route."""
        by_route: dict[int, tuple[list, list]] = {}
        for v, t, r in zip(emitter.values, emitter.ts, emitter.routes):
            records, stamps = by_route.setdefault(r, ([], []))
            records.append(v)
            stamps.append(t)
        w = emitter.w[0]
        for r, (records, stamps) in by_route.items():
            timed = stamps.count(None) != len(stamps)
            for col, x in zip(self.cols, (pickle.dumps((records, stamps if timed else None), protocol=5), None, w, seq, BUNDLE, r, None)):
                col.append(x)
        n = len(emitter.values)
        emitter.clear()
        return n

    def batch(self) -> Any:
        for bk, (records, stamps, seq, w, r) in self.bundles.items():
            timed = any(t is not None for t in stamps)
            for col, x in zip(self.cols, (pickle.dumps((records, stamps if timed else None), protocol=5), None, w, seq, BUNDLE, r, bk)):
                col.append(x)
        value_c, ts_c, w_c, seq_c, kind_c, src_c, key_c = self.cols
        return to_batch(value_c, ts_c, w_c, seq_c, kind_c, src_c, key_c if self.spec.keyed else None, pickled=True)


def routed_chain_function(spec: LevelSpec) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function of a routed chain level (see :class:`LevelSpec`).

    At level 0 a batch holds one source subtask's rows in their order, so outputs are numbered
    from the batch's first ordering key, as in :func:`chain_function`. After a keyed depth a batch
    mixes many keys' rows in no particular order: each record then runs through on its own and
    its outputs extend its own ordering key, so a key's order survives the next shuffle — except
    where the level is :attr:`~LevelSpec.linear`: a bundle's records (a keyed reduce's updates, in
    order) then run through as one list, its outputs numbered from the bundle's ordering key, and
    those bound for the sinks leave as one bundle row (one Python call per bundle, not per record).
    """

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        emitter = _Emitter()
        chain, heads, ports, stampers = _wire(spec, emitter)
        unstamped = [p for p in ports if not p.stamped]
        for op in chain:
            op.open(_runtime_context(op.name, spec.job_parameters))
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                rows = _Rows(spec)
                if spec.level == 0:
                    _level0(batch, heads, emitter, unstamped, ports, stampers, rows)
                else:
                    _after_keyed(batch, heads, emitter, unstamped, rows, spec.linear)
                yield rows.batch()
        finally:
            for op in chain:
                op.close()

    return run


def _decode(values: list, ts: list, kinds: list, i: int, j: int) -> tuple[list, list | None]:
    """The records of rows ``i:j`` (bundles opened) and their timestamps (None: none has one)."""
    loads = pickle.loads
    records: list = []
    stamps: list = []
    for v, t, k in zip(values[i:j], ts[i:j], kinds[i:j]):
        if k == BUNDLE:
            rs, st = unbundle(v)
            records.extend(rs)
            stamps.extend(st)
        else:
            records.append(loads(v))
            stamps.append(t)
    return records, (None if all(t is None for t in stamps) else stamps)


def _level0(batch: Any, heads: dict[int, Any], emitter: _Emitter, unstamped: list[_Port], ports: list[_Port], stampers: list,
            rows: _Rows) -> None:
    cols = batch.to_pydict()
    values, tss, ws, seqs, kinds, srcs = cols["value"], cols["ts"], cols["w"], cols["seq"], cols["kind"], cols["src"]
    first_seq = seqs[0]
    produced = 0
    i, n = 0, len(kinds)
    while i < n:
        k, r = kinds[i], srcs[i]
        head = heads.get(r) if k in (RECORD, BUNDLE) else None
        if head is None:
            rows.raw(values[i], tss[i], ws[i], seqs[i], k, r)
            i += 1
            continue
        j = i + 1
        while j < n and kinds[j] in (RECORD, BUNDLE) and srcs[j] == r and ws[j] == ws[i]:
            j += 1
        for p in unstamped:
            p.watermark = ws[i]
        records, stamps = _decode(values, tss, kinds, i, j)
        head.process(records, stamps)
        base = produced
        produced += rows.drain(emitter, lambda m: child_seq(first_seq, base + m))
        i = j
    if stampers:
        stamped = [p for p in ports if p.stamped]
        before = max([p.watermark for p in stamped], default=MIN_W)
        for op in stampers:
            op.emit_periodic_watermark()
        after = max([p.watermark for p in stamped], default=MIN_W)
        if after > before:
            rows.raw(b"", None, after, child_seq(first_seq, produced), WATERMARK, srcs[0])


def _after_keyed(batch: Any, heads: dict[int, Any], emitter: _Emitter, unstamped: list[_Port], rows: _Rows, linear: bool) -> None:
    cols = batch.to_pydict()
    values, tss, ws, seqs, kinds, srcs = cols["value"], cols["ts"], cols["w"], cols["seq"], cols["kind"], cols["src"]
    loads = pickle.loads
    for i, (v, t, w, s, k, r) in enumerate(zip(values, tss, ws, seqs, kinds, srcs)):
        head = heads.get(r) if k in (RECORD, BUNDLE) else None
        if head is None:
            rows.raw(v, t, w, s, k, r)
            continue
        for p in unstamped:
            p.watermark = w
        if k == BUNDLE:
            payload, stamps = loads(v)
            if linear:  # the bundle at once: its j-th output extends its ordering key by j
                if type(payload) is Columns and stamps is None:  # over columns while the operators can
                    rest, op = advance(head, payload)
                    op.process(rest.values(), None)
                else:
                    timed = stamps is not None and stamps.count(None) != len(stamps)
                    head.process(records_of(payload), stamps if timed else None)
                rows.drain(emitter, lambda q, s=s: child_seq(s, q), bundle=s)
                continue
            records = records_of(payload)
            stamps = stamps if stamps is not None else [None] * len(records)
            for m, (rec, st) in enumerate(zip(records, stamps)):
                head.process([rec], None if st is None else [st])
                own = child_seq(s, m)
                rows.drain(emitter, lambda q, own=own: child_seq(own, q))
        else:
            head.process([loads(v)], None if t is None else [t])
            rows.drain(emitter, lambda q: child_seq(s, q))
