"""Translating a flinkpy job into one Spark Structured Streaming query.

:func:`translate` walks the job's StreamGraph (the operators as the program built them, before
chaining) and either returns a :class:`~flinkpy.spark.query.SparkPlan` or raises
:class:`UntranslatableError` naming the first operator Spark cannot run with the same results,
and why — before anything starts.

Why one linear pipeline over a multiplexed stream. A job is a DAG: an operator's output may go to
several operators (fan-out), side outputs go elsewhere than the main output, branches meet again
(union), a job may have several sinks. Spark plans a streaming DataFrame that two consumers read
once per consumer: the sources would be read twice and every stateful operator above the fork
would run twice with separate state. So the plan is one pipeline whose rows each carry a *route*
(the ``src`` column of records, :mod:`flinkpy.spark.records`): the edge of the job graph the record
travels on. Operators are placed by *keyed depth* (how many keyed operators lie on the longest path
from a source), and the query is::

    per source: source -> mapInArrow (chain level 0) [-> withWatermark]
    unionByName of the sources
    -> transformWithStateInPandas (keyed depth 1) -> mapInArrow (chain level 1)
    -> transformWithStateInPandas (keyed depth 2) -> ...
    -> foreachBatch: split by sink route, write every sink for the batch id

A chain level runs every non-keyed operator of its depth in one Python function over Arrow
batches (:mod:`.levels`): it dispatches a row to the operator its route leads to, and an operator's
output goes to each consumer — to the next operator directly, or out as a row on the consumer's
route (once per consumer: fan-out; side outputs to the routes that read the tag). A keyed depth is
one Spark operator for every keyed operator of that depth: it groups by (operator, key), so its
state stays apart per operator, and rows on routes that go further pass through unchanged, spread
over several groups (:mod:`.keyed`). Spark's watermark is set once, from the records' ``w`` where
each source's rows enter the first keyed depth (Spark refuses to redefine it later); every keyed
depth sees that same watermark, processes its rows before firing its timers in a micro-batch, and
a timer's output carries the watermark just below the timer — so a keyed operator after another
gets records and timers per key in the engine's order, and a bounded query still ends in the batch
after the end of event time. Two approximations remain, both where the engine's own order depends
on more than one key: the engine forwards the watermark *before* the timer's (the last one it
received), which a key on Spark does not know, so a later operator's timers strictly between that
watermark and the timer fire before the output rather than after (windows are not affected: their
timers are at or after their records' timestamps); and outputs of several keys' timers of one
timestamp reach a coarser key in no fixed order (the engine: the order the timers were registered).

Connected streams (``connect``): a row's route tells which input of a two-input operator it feeds
(its edge's ``type_number``). co_map, co_flat_map and co_process run in their chain level like any
non-keyed operator, the second input's rows handed to ``process2``; a keyed one (``key_by(k1,
k2)``) is a keyed operator whose routes in carry each input's own key, so both inputs' records of
a key meet in one group, with its state and timers. Its event time is, as on the engine, the lower
of its two inputs' watermarks: each as far as the group's rows tell, from Spark's watermark (a
bound of both) at the start of the micro-batch; an interval join is such an operator too (the
engine's IntervalJoinOperator). A broadcast state operator (``connect(stream.broadcast(descriptor))``)
is a keyed operator whose rows of both inputs all go to one group (:mod:`flinkpy.spark.broadcast`);
``partition_custom`` is not applied (:meth:`_Translator.note_custom_partitioning`).

A job with one path from its sources to one sink (W1, W2, most jobs) needs no routes: its plan
is the same as before routes existed — a linear chain, one keyed operator grouped by its key alone
(or by key group, for a keyed reduce), one sink — no extra column, shuffle or group.

>>> from flinkpy.datastream import StreamExecutionEnvironment
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> env.from_collection(["a b", "b"]).flat_map(str.split).map(lambda w: (w, 1)) \\
...    .key_by(lambda t: t[0]).sum(1).print()  # doctest: +ELLIPSIS
<...DataStreamSink object at ...>
>>> plan = translate(env, config={})
>>> plan.bounded
True
>>> print(plan.explain().splitlines()[1])
sink 'Print to Std. Out' -> foreachBatch: print to stdout (at-least-once)
"""

from __future__ import annotations

import struct
from typing import Any

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import BROADCAST, CUSTOM, StreamEdge, StreamGraph, StreamNode
from flinkpy.spark.chain import ChainSpec, Stage
from flinkpy.spark.levels import LevelSpec, SourcePort
from flinkpy.spark.keyed import BROADCAST_KINDS, KEY_GROUPS, KeyedSpec, by_key_group, on_group_state, one_group
from flinkpy.spark.query import KeyedLevel, Route, SinkRoutes, SparkPlan, Step, label
from flinkpy.spark.source_steps import SourceStep, source_step
from flinkpy.spark.untranslatable import UntranslatableError, refuse

#: flinkpy configuration keys the Spark runner reads
MAX_RECORDS_KEY = "execution.spark.max-records-per-batch"

#: two-input operators of connected streams (``connect``): not keyed, then keyed (``key_by(k1, k2)``)
_TWO_INPUT = ("co_map", "co_flat_map", "co_process")
_KEYED_TWO_INPUT = ("keyed_co_process", "keyed_co_map", "keyed_co_flat_map", "interval_join")
_STATELESS = ("map", "flat_map", "filter", "process", "timestamps") + _TWO_INPUT
_KEYED = ("keyed_reduce", "keyed_process", "keyed_map", "keyed_flat_map", "keyed_filter", "window") + _KEYED_TWO_INPUT + BROADCAST_KINDS
_ON_THE_ENGINE = "run the job on flinkpy's engine (without --runner spark)"
#: operator kinds that stay on the engine, with why and what to do
_REFUSED: dict[str, tuple[str, str]] = {
    "async_wait": (
        "it is an async I/O operator (AsyncDataStream): its exactly-once guarantee rests on keeping the inputs of the "
        "requests in flight in each checkpoint and issuing them again after a restore, with a bounded number in flight "
        "per subtask on one event loop; Spark's micro-batches have no state for requests in flight, and a replayed "
        "micro-batch would issue every request of the batch again",
        _ON_THE_ENGINE + ", or call the service synchronously in a map() when Spark's throughput is enough",
    ),
}
#: the position of the sinks in the pipeline: after every chain level (2d) and keyed depth (2d-1)
_SINK = 1 << 30


# ---------------------------------------------------------------------------------------------
# translation
# ---------------------------------------------------------------------------------------------


def _position(node: StreamNode, depth: int) -> int:
    """Where ``node`` runs in the pipeline: chain level d at 2d, keyed depth d at 2d-1, sinks last."""
    if node.is_sink:
        return _SINK
    if node.kind in _KEYED:
        return 2 * depth - 1
    return 2 * depth


class _Translator:
    def __init__(self, graph: StreamGraph, *, parallelism: int, batch_mode: bool, max_records: int, params: dict[str, str]) -> None:
        self.graph = graph
        self.parallelism = parallelism
        self.batch_mode = batch_mode
        self.max_records = max_records
        self.params = params
        self.source_count = 0
        self.depth: dict[int, int] = {}
        self.routes: list[Route] = []
        self.edge_route: dict[int, Route] = {}  # id(edge) -> route
        #: routes into the second input of a two-input operator
        self.second: set[int] = set()

    # -- checks --------------------------------------------------------------------------------
    def check_kinds(self) -> None:
        """Refuse the operators that stay on the engine, naming why (before their edges are looked at)."""
        for n in self.graph.topological_order():
            node = self.graph.nodes[n]
            if node.kind in _REFUSED:
                reason, remedy = _REFUSED[node.kind]
                raise refuse(node, reason, remedy)

    def check_edges(self) -> None:
        for e in self.graph.edges:
            target = self.graph.nodes[e.target]
            if e.partitioner == BROADCAST and target.kind not in BROADCAST_KINDS:
                raise refuse(target, "its input is broadcast (every record to every parallel instance) without broadcast state: "
                                     "what a function learns from those records lives in each instance's Python attributes, and "
                                     "on Spark an operator of a chain level lives for one partition of one micro-batch, so the "
                                     "other records would not see broadcast records of other partitions or earlier micro-batches",
                             remedy="keep what the broadcast records say in broadcast state: "
                                    "stream.connect(other.broadcast(MapStateDescriptor(...))).process(BroadcastProcessFunction), "
                                    "which the Spark runner runs; or run the job on flinkpy's engine")

    def check_keyed(self, node: StreamNode) -> None:
        """Refuse a keyed operator Spark cannot run; none today: processing-time windows, triggers
        and timers and state TTL run in Spark's ProcessingTime mode (:mod:`flinkpy.spark.time_mode`)."""

    def check_stateless(self, node: StreamNode, depth: int) -> None:
        if node.kind != "timestamps":
            return
        if depth > 0:
            raise refuse(node, "it assigns timestamps and watermarks after a keyed operator; Spark defines a query's watermark "
                               "once, where records enter the first stateful operator",
                         remedy="assign timestamps and watermarks before the first key_by()")
        if len(self.graph.inputs_of(node.id)) > 1 or len(self._sources_of(node.id)) > 1:
            raise refuse(node, "it assigns timestamps after a union; assign them on each input before union()")

    def _sources_of(self, node_id: int) -> set[int]:
        out: set[int] = set()
        todo = [node_id]
        seen: set[int] = set()
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            if self.graph.nodes[n].is_source:
                out.add(n)
            todo.extend(e.source for e in self.graph.inputs_of(n))
        return out

    # -- the pipeline ----------------------------------------------------------------------------
    def translate(self) -> tuple[list[list[Step]], list[Step], list[Route]]:
        self.check_kinds()
        self.check_edges()
        graph = self.graph
        order = graph.topological_order()
        sinks = [graph.nodes[n] for n in order if graph.nodes[n].is_sink]
        if not sinks:
            raise UntranslatableError("(job)", "the job has no sink", remedy="add a sink (print(), sink_to(), add_sink() or execute_and_collect())")
        sources = [graph.nodes[n] for n in order if graph.nodes[n].is_source]
        source_steps = [self.source(node) for node in sources]
        for n in order:
            node = graph.nodes[n]
            ups = [self.depth[e.source] for e in graph.inputs_of(n)]
            if node.is_source:
                self.depth[n] = 0
            elif node.kind in _KEYED:
                self.check_keyed(node)
                self.depth[n] = max(ups) + 1
            elif node.kind in _STATELESS or node.is_sink:
                self.depth[n] = max(ups)
                self.check_stateless(node, self.depth[n])
            else:
                raise refuse(node, f"operators of kind {node.kind!r} have no Spark translation")
        deepest = max([self.depth[n] for n in order if graph.nodes[n].kind in _KEYED], default=0)
        # routes: a source's own output is the route numbered as the source, then every edge
        for i, node in enumerate(sources):
            self.routes.append(Route(i, node, None, None, -1, 0))
        for e in graph.edges:
            src, dst = graph.nodes[e.source], graph.nodes[e.target]
            route = Route(len(self.routes), src, dst, e.side_tag, _position(src, self.depth[src.id]), _position(dst, self.depth[dst.id]),
                          e.type_number)
            self.routes.append(route)
            self.edge_route[id(e)] = route
            if e.type_number == 2:
                self.second.add(route.id)
        keyed_at = {d: [graph.nodes[n] for n in order if graph.nodes[n].kind in _KEYED and self.depth[n] == d] for d in range(1, deepest + 1)}
        # a keyed two-input operator reads the route of each row: which input it feeds
        keyed_routed = {d: len(ops) > 1 or any(n.kind in _KEYED_TWO_INPUT + BROADCAST_KINDS for n in ops)
                        or any(r.start < 2 * d - 1 < r.end for r in self.routes if r.target is not None)
                        for d, ops in keyed_at.items()}
        sink_routed = len(sinks) > 1
        levels = {d: self.keyed_level(keyed_at[d], d, keyed_routed[d]) for d in keyed_at}
        branches = [self.branch(step, node, keyed_routed.get(1), levels.get(1), sink_routed) for step, node in zip(source_steps, sources)]
        stages: list[Step] = []
        for d in range(1, deepest + 1):
            stages.append(levels[d][0])
            chain = self.later_chain(d, levels.get(d + 1))
            if chain is not None:
                stages.append(chain)
        by_route = {self.edge_route[id(e)].id: node for node in sinks for e in graph.inputs_of(node.id)}
        from flinkpy.spark.sinks import writer_for

        routes_of = {n.id: [r for r, m in by_route.items() if m.id == n.id] for n in sinks}
        descriptions = [f"{label(n)} ({', '.join(f'r{r}' for r in routes_of[n.id])}): {writer_for(n.fn, 'plan', n.name).describe()}"
                        for n in sinks]
        if sink_routed:
            spark = "foreachBatch: rows split by route, every sink written for the batch id"
            notes = descriptions
        else:
            spark = "foreachBatch: " + writer_for(sinks[0].fn, "plan", sinks[0].name).describe()
            notes = []
        stages.append(Step("sink", sinks, spark, SinkRoutes(by_route, sink_routed), notes=notes))
        self.note_discarded_updates(stages)
        self.note_custom_partitioning([s for b in branches for s in b] + stages)
        return branches, stages, self.routes

    def note_discarded_updates(self, stages: list[Step]) -> None:
        """A key-group reduce right before the sinks whose every update goes to a DiscardingSink
        sends their count, not the updates (:data:`~flinkpy.spark.records.COUNTED`): the sink
        receives each one and drops it, as on the engine, and the reduce still runs its function
        on every record (its state and any side effect are the same)."""
        from flinkpy.connectors.print_sink import DiscardingSink

        if len(stages) < 2 or stages[-2].kind != "keyed" or not stages[-2].payload.on_group_state:
            return
        spec = stages[-2].payload.specs[0]
        targets = [self.routes[r].target for r in spec.routes]
        if spec.side_routes or not targets or not all(t is not None and t.is_sink and isinstance(t.fn, DiscardingSink) for t in targets):
            return
        spec.discards = True
        stages[-2].notes.append("its updates go to a DiscardingSink only: counted, not sent to the driver")

    def note_custom_partitioning(self, steps: list[Step]) -> None:
        """Say where a ``partition_custom`` is not applied. Its Partitioner only picks the parallel
        instance of the next operator, which is not keyed: on Spark the rows stay where Spark put
        them, and no result depends on which instance of a non-keyed operator runs a record (its
        state is not kept per key; per-instance Python attributes are not state, on either runner)."""
        for e in self.graph.edges:
            if e.partitioner != CUSTOM:
                continue
            target = self.graph.nodes[e.target]
            for step in steps:
                if any(n.id == target.id for n in step.operators):
                    step.notes.append(f"partition_custom into {label(target)}: not applied (Spark partitions the rows; "
                                      "results do not depend on it)")
                    break

    def source(self, node: StreamNode) -> Step:
        self.source_count += 1
        return source_step(node, self.source_count - 1, self.parallelism, self.max_records)

    def _out_routes(self, node: StreamNode) -> tuple[list[int], dict[str, list[int]]]:
        main: list[int] = []
        side: dict[str, list[int]] = {}
        for e in self.graph.outputs_of(node.id):
            r = self.edge_route[id(e)].id
            if e.side_tag is None:
                main.append(r)
            else:
                side.setdefault(e.side_tag, []).append(r)
        return main, side

    def keyed_level(self, ops: list[StreamNode], depth: int, routed: bool) -> tuple[Step, dict[int, tuple[bytes, Any, int]]]:
        """The keyed step of ``depth`` and, per route into it, (group-key prefix, key selector, key groups)."""
        specs: list[KeyedSpec] = []
        keys: dict[int, tuple[bytes, Any, int]] = {}
        parts: list[str] = []
        for i, node in enumerate(ops):
            main, side = self._out_routes(node)
            spec = KeyedSpec(node.kind, node.name, node.fn, node.key_selector, batch_mode=self.batch_mode, job_parameters=self.params,
                             uid=node.uid, routes=tuple(main), side_routes={t: tuple(rs) for t, rs in side.items()}, depth=depth,
                             prefix=struct.pack(">H", i) if routed else b"", row_type=node.params.get("output_type"),
                             key_selector2=node.params.get("key_selector2"),
                             params={k: node.params[k] for k in ("lower_bound", "upper_bound", "late_tags", "broadcast_state_descriptors")
                                     if k in node.params},
                             second=frozenset(self.edge_route[id(e)].id for e in self.graph.inputs_of(node.id) if e.type_number == 2))
            specs.append(spec)
            groups = KEY_GROUPS if by_key_group(spec) else 0
            for e in self.graph.inputs_of(node.id):
                # a broadcast operator's rows, of both inputs, all in one group (flinkpy.spark.broadcast)
                keys[self.edge_route[id(e)].id] = (spec.prefix, one_group if node.kind in BROADCAST_KINDS else e.key_selector, groups)
            parts.append("one group" if node.kind in BROADCAST_KINDS else f"key group of {groups}" if groups else "key")
        from flinkpy.spark.time_mode import EVENT_TIME, PROCESSING_TIME

        time_mode = PROCESSING_TIME if any(s.processing_time for s in specs) else EVENT_TIME
        for spec in specs:  # one Spark operator, one time mode
            spec.time_mode = time_mode
        passing = [r for r in self.routes if r.target is not None and r.start < 2 * depth - 1 < r.end]
        if routed:
            spark = (f"groupBy(operator, key).transformWithStateInPandas ({time_mode}; one Spark operator for "
                     f"{len(ops)} keyed operator(s): " + ", ".join(f"{label(n)} by {p}" for n, p in zip(ops, parts)) + ")")
        elif parts[0] != "key" and on_group_state(specs[0]):
            spark = f"groupBy({parts[0]}).applyInPandasWithState (running values per key in the group's Spark state; no timers)"
        elif parts[0] != "key":
            spark = (f"groupBy({parts[0]}).transformWithStateInPandas ({time_mode}; running values per key "
                     "in a Spark value state per key group)")
        else:
            spark = f"groupBy(key).transformWithStateInPandas ({time_mode}; flinkpy state on Spark state variables, timers on Spark timers)"
        notes = []
        if passing:
            notes.append("passes on unchanged (grouped in buckets): " + ", ".join(f"r{r.id}" for r in passing))
        for spec, node in zip(specs, ops):
            if node.kind in BROADCAST_KINDS:
                notes.append(_broadcast_note(node))
            if spec.side_routes:
                notes.append(f"{label(node)} side outputs: " + ", ".join(f"{t!r} -> " + ", ".join(f"r{r}" for r in rs)
                                                                         for t, rs in spec.side_routes.items()))
        return Step("keyed", ops, spark, KeyedLevel(specs, routed, time_mode), notes=notes), keys

    def _level_spec(self, level: int, nodes: list[StreamNode], entries: dict[int, int | None], ports: dict[int, SourcePort],
                    next_keys: dict[int, tuple[bytes, Any, int]] | None) -> LevelSpec:
        """The routed chain of chain level ``level`` running ``nodes``."""
        inside = {n.id for n in nodes}
        outputs: dict[int, list[int]] = {}
        side: dict[int, dict[str, list[int]]] = {}
        internal: dict[int, int] = {}
        for n in nodes:
            outputs[n.id], side[n.id] = self._out_routes(n)
        for r in self.routes:
            if r.target is not None and r.target.id in inside and r.source.id in inside | {p.node_id for p in ports.values()}:
                internal[r.id] = r.target.id
        return LevelSpec(
            level=level,
            stages={n.id: Stage(n.kind, n.name, n.fn, n.uid, n.params.get("output_type")) for n in nodes},
            order=[n.id for n in nodes],
            outputs=outputs,
            side_outputs=side,
            internal=internal,
            entries=entries,
            ports=ports,
            next_keys=dict(next_keys or {}),
            keyed=next_keys is not None,
            job_parameters=self.params,
            second=frozenset(self.second),
        )

    def branch(self, step: Step, node: StreamNode, k1_routed: bool | None, k1: tuple[Step, dict] | None, sink_routed: bool) -> list[Step]:
        """A source and its chain level 0: the linear chain of old when the source's records take one
        path (and nobody reads routes there), else the routed chain."""
        graph = self.graph
        src_step: SourceStep = step.payload
        # the linear path: source -> stateless operators with one output each -> one consumer
        path: list[StreamNode] = []
        current = node
        linear = True
        while True:
            outs = graph.outputs_of(current.id)
            if len(outs) != 1 or outs[0].side_tag is not None:
                linear = False
                break
            target = graph.nodes[outs[0].target]
            if target.kind in _STATELESS and target.kind not in _TWO_INPUT and self.depth[target.id] == 0:
                path.append(target)
                current = target
                continue
            last: StreamEdge = outs[0]
            break
        if linear:
            if target.kind in _KEYED:
                linear = not k1_routed
            elif target.is_sink:
                linear = not sink_routed and k1 is None
            else:  # an operator after a keyed one: these records pass a keyed depth
                linear = False
        watermark_strategy = node.params.get("watermark_strategy")
        if linear:
            stages: list[Stage] = []
            if watermark_strategy is not None:
                stages.append(Stage("timestamps", node.name + " (watermarks)", watermark_strategy, node.uid))
            stages.extend(Stage(n.kind, n.name, n.fn, n.uid, n.params.get("output_type")) for n in path)
            keyed_target = target.kind in _KEYED
            groups = 0
            if keyed_target:
                assert k1 is not None
                groups = k1[1][self.edge_route[id(last)].id][2]
            if not stages and not keyed_target:
                return [step]
            spec = ChainSpec(stages, last.key_selector if keyed_target else None, self.params, groups)
            spark = "mapInArrow (batch-wise Python over Arrow record batches)"
            if keyed_target:
                spark += "; bundles records per key group" if groups else "; computes the key"
            src_step.bundled = True
            return [step, Step("chain", path, spark, spec, watermark=keyed_target)]
        # the routed chain level 0 of this source: every depth-0 operator its records reach
        reach: list[StreamNode] = []
        todo = [e.target for e in graph.outputs_of(node.id)]
        seen: set[int] = set()
        while todo:
            n = todo.pop()
            t = graph.nodes[n]
            if n in seen or t.kind not in _STATELESS or self.depth[n] != 0:
                continue
            seen.add(n)
            reach.append(t)
            todo.extend(e.target for e in graph.outputs_of(n))
        order = {n: i for i, n in enumerate(graph.topological_order())}
        reach.sort(key=lambda n: order[n.id])
        main, side = self._out_routes(node)
        src_step.side_routes = side
        ports = {src_step.index: SourcePort(node.id, node.name, main, watermark_strategy, [r for rs in side.values() for r in rs])}
        spec = self._level_spec(0, reach, {}, ports, k1[1] if k1 else None)
        src_step.bundled = True
        spark = "mapInArrow (batch-wise Python over Arrow record batches); rows dispatched by route, outputs once per consumer"
        if spec.keyed:
            spark += "; computes the keys"
        notes = ["emits routes: " + ", ".join(f"r{r}" for r in spec.emitted_routes())]
        return [step, Step("chain", reach, spark, spec, watermark=k1 is not None, notes=notes)]

    def later_chain(self, depth: int, next_level: tuple[Step, dict] | None) -> Step | None:
        """Chain level ``depth`` (after keyed depth ``depth``): its operators, routes passing on, keys
        for the next keyed depth; None when there is nothing to do there."""
        graph = self.graph
        order = graph.topological_order()
        nodes = [graph.nodes[n] for n in order if graph.nodes[n].kind in _STATELESS and self.depth[n] == depth]
        if not nodes and next_level is None:
            return None
        inside = {n.id for n in nodes}
        entries: dict[int, int | None] = {}
        for r in self.routes:
            if r.target is None:
                continue
            if r.target.id in inside and r.source.id not in inside:
                entries[r.id] = r.target.id
        spec = self._level_spec(depth, nodes, entries, {}, next_level[1] if next_level else None)
        spark = "mapInArrow (Python over Arrow record batches, record by record: each output keeps its input's order key)"
        if spec.linear:
            spark = "mapInArrow (Python over Arrow record batches, a keyed reduce's update bundles at once: outputs in their inputs' order)"
        if spec.keyed:
            spark += "; computes the keys"
        notes = []
        if spec.emitted_routes():
            notes.append("emits routes: " + ", ".join(f"r{r}" for r in spec.emitted_routes()))
        return Step("chain", nodes, spark, spec, notes=notes)


def _broadcast_note(node: StreamNode) -> str:
    """How a broadcast operator runs on Spark, for the plan's reader."""
    names = ", ".join(repr(d.get_name()) for d in node.params.get("broadcast_state_descriptors", ()))
    keyed = ("; keyed state per key and timers in that group (the engine's heap backend by key group), "
             "apply_to_keyed_state over every key" if node.kind == "keyed_broadcast_process" else "")
    return (f"{label(node)}: both inputs' rows in one Spark group (parallelism 1); broadcast state {names} "
            f"in a Spark map state{keyed}")


def _environment_settings(graph_or_env: Any) -> tuple[StreamGraph, dict[str, str], int, str, bool]:
    graph = getattr(graph_or_env, "_graph", graph_or_env)
    if not isinstance(graph, StreamGraph):
        raise InvalidProgramError(f"translate() needs a StreamExecutionEnvironment or a StreamGraph, got {type(graph_or_env).__name__}")
    settings = dict(getattr(graph_or_env, "_settings", {}) or {})
    parallelism = int(getattr(graph_or_env, "_parallelism", 0) or settings.get("parallelism.default", 1))
    mode = str(getattr(graph_or_env, "_runtime_mode", settings.get("execution.runtime-mode", "STREAMING"))).upper()
    from flinkpy.connectors.base import Boundedness

    bounded = all(getattr(n.fn, "boundedness", Boundedness.BOUNDED) == Boundedness.BOUNDED for n in graph.nodes.values() if n.is_source)
    return graph, settings, parallelism, mode, bounded


def translate(stream_graph_or_env: Any, *, config: dict[str, Any] | None = None, job_name: str | None = None) -> SparkPlan:
    """The Spark plan of a job, or UntranslatableError (nothing is started)."""
    graph, settings, parallelism, mode, bounded = _environment_settings(stream_graph_or_env)
    settings.update({str(k): str(v) for k, v in (config or {}).items()})
    if "parallelism.default" in (config or {}):
        parallelism = int(settings["parallelism.default"])
    if "execution.runtime-mode" in (config or {}):
        mode = settings["execution.runtime-mode"].upper()
    if mode == "AUTOMATIC":
        mode = "BATCH" if bounded else "STREAMING"
    _refuse_periodic_savepoints(settings)
    max_records = int(settings.get(MAX_RECORDS_KEY, "0") or 0)
    params = {k[len("$job."):]: v for k, v in settings.items() if k.startswith("$job.")}
    t = _Translator(graph, parallelism=parallelism, batch_mode=(mode == "BATCH"), max_records=max_records, params=params)
    branches, stages, routes = t.translate()
    plan = SparkPlan(branches, stages, routes, job_name=job_name or settings.get("pipeline.name") or "Flink Streaming Job",
                     bounded=bounded, sources=t.source_count, max_records=max_records, runtime_mode=mode)
    plan.graph = graph
    plan.max_parallelism = int(getattr(stream_graph_or_env, "_max_parallelism", 0) or settings.get("pipeline.max-parallelism") or 128)
    return plan


def _refuse_periodic_savepoints(settings: dict[str, str]) -> None:
    """Periodic savepoints are taken by the engine's JobManager; a Spark job would never take one."""
    from flinkpy.config import typed_value
    from flinkpy.errors import ConfigurationError
    from flinkpy.jobmanager.savepoint_history import INTERVAL_KEY

    if typed_value(settings, INTERVAL_KEY, source="the job's configuration"):
        raise ConfigurationError(f"{INTERVAL_KEY}: periodic savepoints are taken by the JobManager of flinkpy's engine, "
                                 "and a job on the Spark runner has none",
                                 remedy="unset it for this job, or take savepoints with 'flinkpy savepoint trigger'")
