"""Translating a flinkpy job into one Spark Structured Streaming query.

:func:`translate` walks the job's StreamGraph (the operators as the program built them, before
chaining) and either returns a :class:`SparkPlan` or raises :class:`UntranslatableError` naming the
first operator Spark cannot run with the same results, and why — before anything starts. The
plan is a small tree of steps, each one Spark construct:

- *source*: a flinkpy Source read through the ``flinkpy`` Python data source (offsets are reader
  positions: replayable, exactly-once), or Spark's socket source;
- *chain*: consecutive non-keyed operators as one ``mapInArrow`` function (:mod:`.chain`);
- *union*: ``unionByName`` of its inputs;
- *keyed*: ``groupBy(key).transformWithStateInPandas`` running the keyed operator (:mod:`.keyed`);
- *sink*: ``foreachBatch`` writing idempotently per batch id (:mod:`.sinks`).

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

import threading
from dataclasses import dataclass, field
from typing import Any

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import BROADCAST, StreamGraph, StreamNode
from flinkpy.spark.chain import ChainSpec, Stage
from flinkpy.spark.keyed import KEY_GROUPS, KeyedSpec, by_key_group

#: flinkpy configuration keys the Spark runner reads
MAX_RECORDS_KEY = "execution.spark.max-records-per-batch"

_STATELESS = ("map", "flat_map", "filter", "process", "timestamps")
_KEYED = ("keyed_reduce", "keyed_process", "keyed_map", "keyed_flat_map", "keyed_filter", "window")


class UntranslatableError(InvalidProgramError):
    """A job (one operator of it) that the Spark runner cannot run with the engine's results."""

    def __init__(self, operator: str, reason: str, *, uid: str | None = None, remedy: str | None = None) -> None:
        self.operator = operator
        self.uid = uid
        self.reason = reason
        where = f"operator {operator!r}" + (f" (uid {uid!r})" if uid else "")
        super().__init__(
            f"cannot run on Spark: {where}: {reason}",
            remedy=remedy or "run the job on flinkpy's engine (without --runner spark), or change that operator",
        )


def _refuse(node: StreamNode, reason: str, remedy: str | None = None) -> UntranslatableError:
    return UntranslatableError(node.name, reason, uid=node.uid, remedy=remedy)


@dataclass
class Step:
    kind: str  # source | chain | union | keyed | sink
    operators: list[StreamNode]
    inputs: list["Step"] = field(default_factory=list)
    spark: str = ""
    payload: Any = None
    #: set Spark's watermark from this step's ``w`` column (inputs of keyed steps)
    watermark: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "operators": [{"id": n.id, "name": n.name, "uid": n.uid, "kind": n.kind} for n in self.operators],
            "spark": self.spark,
            "watermark": self.watermark,
            "inputs": [i.to_dict() for i in self.inputs],
        }


@dataclass
class _Segment:
    """A step plus the stateless operators waiting to be chained onto it."""

    step: Step
    stages: list[Stage]
    nodes: list[StreamNode]
    sources: set[int]
    keyed_upstream: bool


class SparkPlan:
    """A translated job: explain it, or start it as a streaming query on a SparkSession."""

    def __init__(self, root: Step, *, job_name: str, bounded: bool, sources: int, max_records: int, runtime_mode: str) -> None:
        self.root = root
        self.job_name = job_name
        self.bounded = bounded
        self.source_count = sources
        self.max_records = max_records
        self.runtime_mode = runtime_mode
        self.sink_driver: Any = None
        self._monitor: threading.Thread | None = None

    # -- describing ------------------------------------------------------------------------
    def explain(self) -> str:
        lines = [f"Spark plan of job {self.job_name!r} ({'bounded: the query ends by itself' if self.bounded else 'unbounded'}, "
                 f"{self.runtime_mode} mode)"]

        def walk(step: Step, depth: int) -> None:
            names = " -> ".join(repr(n.name) if not n.uid else f"{n.name!r} (uid {n.uid})" for n in step.operators)
            lines.append(f"{'  ' * depth}{step.kind} {names} -> {step.spark}" + ("  [Spark watermark from w]" if step.watermark else ""))
            for child in step.inputs:
                walk(child, depth + 1)

        walk(self.root, 0)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job_name, "bounded": self.bounded, "runtime_mode": self.runtime_mode,
                "max_records_per_batch": self.max_records, "plan": self.root.to_dict()}

    # -- running ---------------------------------------------------------------------------
    def start(self, spark: Any, *, checkpoint_location: str, trigger_interval_ms: int | None, query_name: str) -> Any:
        """Start the query; a bounded plan's query stops itself after its final batch committed."""
        from flinkpy.spark.sinks import SinkDriver, writer_for
        from flinkpy.spark.sources import make_data_source

        spark.dataSource.register(make_data_source())
        spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                       "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        sink_node = self.root.operators[0]
        writer = writer_for(sink_node.fn, f"{query_name}/{sink_node.uid or sink_node.id}", sink_node.name)
        sources = _source_indices(self.root) if self.bounded else set()
        self.sink_driver = SinkDriver(writer, sources)
        df = self._dataframe(spark, self.root.inputs[0])
        stream = df.writeStream.foreachBatch(self.sink_driver).option("checkpointLocation", checkpoint_location).queryName(query_name)
        if trigger_interval_ms:
            stream = stream.trigger(processingTime=f"{int(trigger_interval_ms)} milliseconds")
        query = stream.start()
        if self.bounded:
            self._monitor = threading.Thread(target=_stop_when_done, args=(query, self.sink_driver), name=f"flinkpy-spark-end-{query_name}", daemon=True)
            self._monitor.start()
        return query

    def _dataframe(self, spark: Any, step: Step) -> Any:
        from flinkpy.spark import records

        if step.kind == "source":
            df = step.payload(spark)
        elif step.kind == "chain":
            from flinkpy.spark.chain import chain_function

            spec: ChainSpec = step.payload
            schema = records.KEYED_DDL if spec.key_selector is not None else records.DDL
            df = self._dataframe(spark, step.inputs[0]).mapInArrow(chain_function(spec), schema)
        elif step.kind == "union":
            frames = [self._dataframe(spark, s) for s in step.inputs]
            df = frames[0]
            for other in frames[1:]:
                df = df.unionByName(other)
        elif step.kind == "keyed":
            from flinkpy.spark.keyed import make_processor

            inputs = [self._dataframe(spark, s) for s in step.inputs]
            df = inputs[0]
            for other in inputs[1:]:
                df = df.unionByName(other)
            df = df.groupBy("key").transformWithStateInPandas(make_processor(step.payload), records.DDL, "append", "EventTime")
        else:
            raise AssertionError(step.kind)
        if step.watermark:
            from pyspark.sql import functions as F

            shifted = F.timestamp_millis(F.greatest(F.col("w"), F.lit(0)) + F.lit(records.SHIFT_MS))
            df = df.withColumn("_flinkpy_wm", shifted).withWatermark("_flinkpy_wm", f"{records.SHIFT_MS // 1000} seconds").drop("_flinkpy_wm")
        return df


def _stop_when_done(query: Any, driver: Any) -> None:
    """Stop a bounded query once the batch with the final rows is committed (reported in progress)."""
    while query.isActive:
        if driver.finished.wait(0.2):
            break
    else:
        return
    target = driver.final_batch
    while query.isActive:
        progress = query.lastProgress
        if progress is not None and int(progress.get("batchId", -1)) >= target:
            query.stop()
            return
        threading.Event().wait(0.1)


def _source_indices(step: Step) -> set[int]:
    out: set[int] = set()
    if step.kind == "source":
        out.add(step.payload.index)
    for s in step.inputs:
        out |= _source_indices(s)
    return out


# ---------------------------------------------------------------------------------------------
# translation
# ---------------------------------------------------------------------------------------------


class _SourceStep:
    """Builds a source's DataFrame when the query starts (payload of a source step)."""

    def __init__(self, node: StreamNode, index: int, parallelism: int, max_records: int) -> None:
        self.node = node
        self.index = index
        self.parallelism = parallelism
        self.max_records = max_records
        #: records leave in bundle rows (a chain follows and opens them)
        self.bundled = False

    def __call__(self, spark: Any) -> Any:
        from flinkpy.connectors.socket_source import SocketTextSource
        from flinkpy.spark.sources import read_stream, socket_stream

        src = self.node.fn
        if isinstance(src, SocketTextSource):
            return socket_stream(spark, src.hostname, src.port, self.index)
        return read_stream(spark, src, index=self.index, parallelism=self.parallelism, max_records=self.max_records, bundled=self.bundled)


class _Translator:
    def __init__(self, graph: StreamGraph, *, parallelism: int, batch_mode: bool, max_records: int, params: dict[str, str]) -> None:
        self.graph = graph
        self.parallelism = parallelism
        self.batch_mode = batch_mode
        self.max_records = max_records
        self.params = params
        self.source_count = 0

    def check_edges(self) -> None:
        for e in self.graph.edges:
            target = self.graph.nodes[e.target]
            if e.side_tag is not None:
                raise _refuse(self.graph.nodes[e.source], "its side output is read by another operator; the Spark runner translates one output per operator",
                              remedy="run the job on flinkpy's engine, or emit the side records into the main output")
            if e.partitioner == BROADCAST:
                raise _refuse(target, "its input is broadcast, which Spark's micro-batches do not express")
        for node in self.graph.nodes.values():
            if len(self.graph.outputs_of(node.id)) > 1:
                raise _refuse(node, "its output goes to several operators; the Spark runner translates a single pipeline from sources to one sink",
                              remedy="run the job on flinkpy's engine, or split it into one job per sink")

    def sink(self) -> Step:
        sinks = [n for n in self.graph.nodes.values() if n.is_sink]
        if len(sinks) != 1:
            raise UntranslatableError(
                "(job)", f"the job has {len(sinks)} sinks; the Spark runner runs one query with one sink",
                remedy="give the job exactly one sink (print(), sink_to(), add_sink() or execute_and_collect())")
        node = sinks[0]
        from flinkpy.spark.sinks import writer_for

        writer = writer_for(node.fn, "plan", node.name)
        (edge,) = self.graph.inputs_of(node.id)
        seg = self.segment(edge.source)
        return Step("sink", [node], [self.materialize(seg)], f"foreachBatch: {writer.describe()}")

    def segment(self, node_id: int) -> _Segment:
        node = self.graph.nodes[node_id]
        if node.is_source:
            return self.source(node)
        if node.kind in _STATELESS:
            edges = self.graph.inputs_of(node.id)
            stage = Stage(node.kind, node.name, node.fn, node.uid)
            if len(edges) == 1:
                seg = self.segment(edges[0].source)
                seg.stages.append(stage)
                seg.nodes.append(node)
                return seg
            segs = [self.segment(e.source) for e in edges]
            union = Step("union", [], [self.materialize(s) for s in segs], "unionByName")
            return _Segment(union, [stage], [node], set().union(*(s.sources for s in segs)), any(s.keyed_upstream for s in segs))
        if node.kind in _KEYED:
            return self.keyed(node)
        raise _refuse(node, f"operators of kind {node.kind!r} have no Spark translation")

    def source(self, node: StreamNode) -> _Segment:
        from flinkpy.connectors.socket_source import SocketTextSource

        src = node.fn
        guarantee = getattr(src, "guarantee", None)
        if isinstance(src, SocketTextSource):
            spark = "Spark socket source (no replay, as the engine's)"
            if src.delimiter != "\n":
                raise _refuse(node, "Spark's socket source splits lines at newlines only", remedy="use the default delimiter")
        elif guarantee != "exactly-once":
            raise _refuse(node, f"the source {type(src).__name__} cannot be read again from a position ({guarantee or 'no'} guarantee), "
                                "so Spark could not plan and replay its micro-batches",
                          remedy="use a replayable source (from_collection, NumberSequenceSource, FileSource, DataGeneratorSource, RedisStreamsSource)")
        else:
            spark = "Python data source 'flinkpy' (offsets are reader positions: replayable)"
        index = self.source_count
        self.source_count += 1
        parallelism = node.parallelism or self.parallelism
        for cap in (node.max_allowed_parallelism, getattr(src, "max_parallelism", lambda: None)()):
            if cap:
                parallelism = min(parallelism, cap)
        spark += f", {parallelism} partition(s)"
        step = Step("source", [node], [], spark, _SourceStep(node, index, parallelism, self.max_records))
        stages: list[Stage] = []
        strategy = node.params.get("watermark_strategy")
        if strategy is not None:
            stages.append(Stage("timestamps", node.name + " (watermarks)", strategy, node.uid))
        return _Segment(step, stages, [], {index}, False)

    def keyed(self, node: StreamNode) -> _Segment:
        self.check_keyed(node)
        spec = KeyedSpec(node.kind, node.name, node.fn, node.key_selector, batch_mode=self.batch_mode, job_parameters=self.params, uid=node.uid)
        groups = KEY_GROUPS if by_key_group(spec) else 0
        edges = self.graph.inputs_of(node.id)
        inputs = []
        sources: set[int] = set()
        for e in edges:
            seg = self.segment(e.source)
            if seg.keyed_upstream:
                raise _refuse(node, "it follows another keyed operator; the Spark runner translates one keyed operator per pipeline "
                                    "(Spark would hold its watermark back one micro-batch per stateful operator)")
            sources |= seg.sources
            if seg.step.kind == "union" and any(s.kind == "timestamps" for s in seg.stages):
                raise _refuse(node, "its input assigns timestamps after a union; assign them on each input before union()")
            step = self.materialize(seg, key_selector=e.key_selector, key_groups=groups)
            if step.inputs and step.inputs[0].kind == "union":
                for s in step.inputs[0].inputs:
                    s.watermark = True
            else:
                step.watermark = True
            inputs.append(step)
        if groups:
            spark = (f"groupBy(key group of {groups}).transformWithStateInPandas (EventTime; running values per key "
                     "in a Spark value state per key group)")
        else:
            spark = "groupBy(key).transformWithStateInPandas (EventTime; flinkpy state on Spark state variables, timers on Spark timers)"
        return _Segment(Step("keyed", [node], inputs, spark, spec), [], [], sources, True)

    def check_keyed(self, node: StreamNode) -> None:
        if node.kind != "window":
            return
        spec = node.fn
        from flinkpy.datastream.window import ContinuousProcessingTimeTrigger, ProcessingTimeTrigger

        if not spec.assigner.is_event_time() and not _is_count_window(spec):
            raise _refuse(node, f"{spec.assigner!r} is a processing-time window: its contents depend on when records arrive, "
                                "which differs between the engines", remedy="use event-time windows, or run the job on flinkpy's engine")
        if isinstance(spec.trigger, (ProcessingTimeTrigger, ContinuousProcessingTimeTrigger)):
            raise _refuse(node, f"its trigger {spec.trigger!r} fires on processing time", remedy="use an event-time or count trigger")

    def materialize(self, seg: _Segment, key_selector: Any = None, key_groups: int = 0) -> Step:
        if not seg.stages and key_selector is None:
            return seg.step
        spec = ChainSpec(list(seg.stages), key_selector, self.params, key_groups)
        spark = "mapInArrow (batch-wise Python over Arrow record batches)"
        if key_selector is not None:
            spark += "; bundles records per key group" if key_groups else "; computes the key"
        if seg.step.kind == "source":
            seg.step.payload.bundled = True
        step = Step("chain", list(seg.nodes), [seg.step], spark, spec)
        seg.stages, seg.nodes = [], []
        return step


def _is_count_window(spec: Any) -> bool:
    from flinkpy.datastream.window import GlobalWindows

    return isinstance(spec.assigner, GlobalWindows)


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
    max_records = int(settings.get(MAX_RECORDS_KEY, "0") or 0)
    params = {k[len("$job."):]: v for k, v in settings.items() if k.startswith("$job.")}
    t = _Translator(graph, parallelism=parallelism, batch_mode=(mode == "BATCH"), max_records=max_records, params=params)
    t.check_edges()
    root = t.sink()
    return SparkPlan(root, job_name=job_name or settings.get("pipeline.name") or "Flink Streaming Job", bounded=bounded,
                     sources=t.source_count, max_records=max_records, runtime_mode=mode)
