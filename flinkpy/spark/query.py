"""A translated job as a Spark Structured Streaming query: :class:`SparkPlan` and its steps.

:mod:`flinkpy.spark.plan` builds a SparkPlan from a job's StreamGraph; this module holds what the
plan is made of (routes, steps and their payloads), how it is explained, and how it becomes a
streaming DataFrame and starts.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from flinkpy.graph.stream_graph import StreamNode
from flinkpy.spark.keyed import KEY_GROUPS, KeyedSpec, by_key_group, on_group_state
from flinkpy.spark.levels import LevelSpec


def label(node: StreamNode) -> str:
    """An operator as plans and errors name it: its name, and its uid when it has one."""
    return f"{node.name!r}" + (f" (uid {node.uid})" if node.uid else "")


@dataclass
class Route:
    """One edge of the job graph as rows on it: emitted at pipeline position ``start``, consumed at
    ``end`` (chain level d is 2d, keyed depth d is 2d-1, the sinks come last); a source's own
    output is the route numbered as the source."""

    id: int
    source: StreamNode
    target: StreamNode | None
    tag: str | None
    start: int
    end: int
    #: the input of the target it feeds: 2 for the second input of a two-input operator
    input: int = 1

    def describe(self) -> str:
        if self.target is None:
            return f"r{self.id}: source {label(self.source)}"
        side = f" [side output {self.tag!r}]" if self.tag else ""
        second = " (input 2)" if self.input == 2 else ""
        return f"r{self.id}: {label(self.source)}{side} -> {label(self.target)}{second}"


@dataclass
class Step:
    """One Spark construct of the plan: a source, a chain level (mapInArrow), a keyed depth
    (transformWithStateInPandas) or the sinks (foreachBatch)."""

    kind: str  # source | chain | keyed | sink
    operators: list[StreamNode]
    spark: str = ""
    payload: Any = None
    #: set Spark's watermark from this step's ``w`` column (where a source's rows enter keyed depth 1)
    watermark: bool = False
    #: what the step passes on unchanged or how it routes (explain only)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "operators": [{"id": n.id, "name": n.name, "uid": n.uid, "kind": n.kind} for n in self.operators],
            "spark": self.spark,
            "watermark": self.watermark,
            "notes": list(self.notes),
        }

    def line(self) -> str:
        linear = self.kind == "chain" and not isinstance(self.payload, LevelSpec)
        names = (" -> " if linear else ", ").join(label(n) for n in self.operators)
        text = f"{self.kind} {names} -> {self.spark}" if names else f"{self.kind} -> {self.spark}"
        return text + ("  [Spark watermark from w]" if self.watermark else "")


class SparkPlan:
    """A translated job: explain it, or start it as a streaming query on a SparkSession.

    ``branches`` holds, per source, its source step and the chain level 0 applied to it;
    ``stages`` the keyed depths and chain levels after the sources' union, then the sink step.
    """

    def __init__(self, branches: list[list[Step]], stages: list[Step], routes: list[Route], *, job_name: str, bounded: bool,
                 sources: int, max_records: int, runtime_mode: str) -> None:
        self.branches = branches
        self.stages = stages
        self.routes = routes
        self.job_name = job_name
        self.bounded = bounded
        self.source_count = sources
        self.max_records = max_records
        self.runtime_mode = runtime_mode
        self.sink_driver: Any = None
        self._monitor: threading.Thread | None = None
        for branch in branches:
            if _fusable(branch):
                branch[1].notes.append("runs inside the source's reader: one Python worker reads and chains")
        for steps in [*branches, stages]:
            for step, after in zip(steps, steps[1:]):
                if _fused_after(step, after):
                    after.notes.append("runs inside the keyed reduce before it: its updates never leave that Python worker")

    @property
    def key_groups(self) -> int | None:
        """The key groups a keyed reduce by key group keeps its state in (None: the plan has none)."""
        levels = [s.payload for s in self.stages if s.kind == "keyed"]
        return KEY_GROUPS if any(by_key_group(spec) for level in levels for spec in level.specs) else None

    @property
    def processing_time(self) -> bool:
        """Whether a keyed step runs in Spark's ProcessingTime mode (see :mod:`.time_mode`)."""
        return any(s.kind == "keyed" and s.payload.time_mode == "ProcessingTime" for s in self.stages)

    @property
    def multiplexed(self) -> bool:
        """Whether rows carry routes that some step reads (fan-out, side outputs, several sinks...)."""
        return any(s.payload is not None and getattr(s.payload, "routed", False) for s in self._steps())

    def _steps(self) -> list[Step]:
        return [s for b in self.branches for s in b] + self.stages

    # -- describing ------------------------------------------------------------------------
    def explain(self) -> str:
        """The plan from the sinks back to the sources (as Spark prints a physical plan)."""
        lines = [f"Spark plan of job {self.job_name!r} ({'bounded: the query ends by itself' if self.bounded else 'unbounded'}, "
                 f"{self.runtime_mode} mode)"]
        depth = 0
        for step in reversed(self.stages):
            lines.append("  " * depth + step.line())
            lines.extend("  " * depth + "    " + n for n in step.notes)
            depth += 1
        union = len(self.branches) > 1
        if union:
            lines.append("  " * depth + f"union -> unionByName of {len(self.branches)} sources")
            depth += 1
        for branch in self.branches:
            d = depth
            for step in reversed(branch):
                lines.append("  " * d + step.line())
                lines.extend("  " * d + "    " + n for n in step.notes)
                d += 1
        if self.multiplexed:
            lines.append("routes (a record row's src column names the edge it travels on):")
            lines.extend("  " + r.describe() for r in self.routes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job_name, "bounded": self.bounded, "runtime_mode": self.runtime_mode,
                "max_records_per_batch": self.max_records,
                "plan": {"branches": [[s.to_dict() for s in b] for b in self.branches],
                         "stages": [s.to_dict() for s in self.stages],
                         "routes": [{"id": r.id, "from": r.source.id, "to": r.target.id if r.target else None,
                                     "side_output": r.tag} for r in self.routes] if self.multiplexed else []}}

    # -- running ---------------------------------------------------------------------------
    def start(self, spark: Any, *, checkpoint_location: str, trigger_interval_ms: int | None, query_name: str) -> Any:
        """Start the query; a bounded plan's query stops itself after its final batch committed."""
        from flinkpy.spark.sinks import SinkDriver, SinkRouter, writer_for

        # transformWithStateInPandas needs RocksDB; a plan without it keeps Spark's default store,
        # which commits a small state faster (Spark keeps a query's store in its checkpoint)
        tws = any(s.kind == "keyed" and not s.payload.on_group_state for s in self.stages)
        spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                       "org.apache.spark.sql.execution.streaming.state." + ("RocksDBStateStoreProvider" if tws else "HDFSBackedStateStoreProvider"))
        sink: SinkRoutes = self.stages[-1].payload
        writers = {route: writer_for(node.fn, f"{query_name}/{node.uid or node.id}", node.name) for route, node in sink.by_route.items()}
        if sink.routed:
            writer: Any = SinkRouter({node.id: writers[r] for r, node in sink.by_route.items()},
                                     {r: node.id for r, node in sink.by_route.items()})
        else:
            writer = next(iter(writers.values()))
        sources = set(range(self.source_count)) if self.bounded else set()
        self.sink_driver = SinkDriver(writer, sources, checkpoint_location)
        df = self._dataframe(spark, _saved_offsets(checkpoint_location), checkpoint_location)
        stream = df.writeStream.foreachBatch(self.sink_driver).option("checkpointLocation", checkpoint_location).queryName(query_name)
        if not trigger_interval_ms and self.processing_time:
            from flinkpy.spark.time_mode import PROCESSING_TIME_TRIGGER_MS

            trigger_interval_ms = PROCESSING_TIME_TRIGGER_MS  # without one, no-data batches would follow each other at once
        if trigger_interval_ms:
            stream = stream.trigger(processingTime=f"{int(trigger_interval_ms)} milliseconds")
        query = stream.start()
        if self.bounded:
            self._monitor = threading.Thread(target=_stop_when_done, args=(query, self.sink_driver), name=f"flinkpy-spark-end-{query_name}", daemon=True)
            self._monitor.start()
        return query

    def _dataframe(self, spark: Any, saved: list[Any], location: str) -> Any:
        """The query's DataFrame; ``saved``: the sources' offsets in the checkpoint location
        ``location`` (a restarted or restored query), in the order of the branches, as Spark lists
        its sources."""
        frames = []
        for position, branch in enumerate(self.branches):
            steps = list(branch)
            source, offset = steps[0], saved[position] if position < len(saved) else None
            if _fusable(steps):  # the source's reader runs its chain level itself
                function, ddl = _chain_function(steps[1].payload)
                df = _with_watermark(source.payload(spark, transform=function, ddl=ddl, saved=offset, location=location), source.watermark or steps[1].watermark)
                steps = steps[2:]
            else:
                df = _with_watermark(source.payload(spark, saved=offset, location=location), source.watermark)
                steps = steps[1:]
            frames.append(_apply_all(spark, steps, df))
        df = frames[0]
        for other in frames[1:]:
            df = df.unionByName(other)
        return _apply_all(spark, self.stages[:-1], df)


def _saved_offsets(location: str) -> list[Any]:
    """The source offsets of the newest batch logged in a (local) checkpoint location; [] for a
    query's first start."""
    from flinkpy.spark.supervisor_snapshots import offset_batches, read_offsets

    try:
        batches = offset_batches(location)
        return read_offsets(location, batches[-1])["sources"] if batches else []
    except OSError:
        return []


def _apply_all(spark: Any, steps: list[Step], df: Any) -> Any:
    """``df`` with chain and keyed ``steps`` applied in order, a chain that can run inside the
    keyed reduce before it (:func:`_fused_after`) run there."""
    i = 0
    while i < len(steps):
        after = steps[i + 1] if i + 1 < len(steps) else None
        if after is not None and _fused_after(steps[i], after):
            df = _with_watermark(_apply(spark, steps[i], df, then=after.payload), after.watermark)
            i += 2
        else:
            df = _apply(spark, steps[i], df)
            i += 1
    return df


def _fused_after(step: Step, after: Step) -> bool:
    """Whether chain step ``after`` can run inside keyed ``step`` (as the engine chains a keyed
    operator with the stateless operators after it): a STREAMING reduce by key group whose updates
    go to this chain alone, a chain of maps, flat maps and filters whose functions have no
    ``open()`` or ``close()`` of their own (the fused chain is set up for each key group's
    updates) and that ends at the sinks (no keyed step after it to compute keys for)."""
    from flinkpy.common.functions import Function

    if step.kind != "keyed" or after.kind != "chain" or not step.payload.on_group_state:
        return False
    spec, chain = step.payload.specs[0], after.payload
    if spec.discards or len(spec.routes) != 1 or spec.side_routes:
        return False
    if not isinstance(chain, LevelSpec) or chain.keyed or not chain.linear or chain.ports or not chain.stages:
        return False

    def plain(fn: Any) -> bool:
        return all(getattr(type(fn), m, None) in (None, getattr(Function, m)) for m in ("open", "close"))

    return all(s.kind in ("map", "flat_map", "filter") and plain(s.fn) for s in chain.stages.values())


def _apply(spark: Any, step: Step, df: Any, then: Any = None) -> Any:
    """``df`` with a chain or keyed ``step`` applied (sources: :meth:`SparkPlan._dataframe`,
    which hands each its saved offset); ``then``: the spec of the chain fused into a keyed
    reduce (:func:`_fused_after`)."""
    from flinkpy.spark import records

    if step.kind == "chain":
        df = df.mapInArrow(*_chain_function(step.payload))
    elif step.kind == "keyed":
        level: KeyedLevel = step.payload
        if level.on_group_state:
            from flinkpy.spark.keyed import GROUP_STATE_DDL, group_state_reduce

            # a STREAMING reduce by key group: no Python process on the driver to plan it, no state round trips
            reduce = group_state_reduce(level.specs[0], then)
            df = df.groupBy("key").applyInPandasWithState(reduce, records.DDL, GROUP_STATE_DDL, "append", "NoTimeout")
        else:
            from flinkpy.spark.processors import make_level_processor

            initial = None
            if level.initial_state:  # keyed state moved from the engine: Spark reads it in the query's first batch only
                from flinkpy.spark.keyed_move import INITIAL_DDL

                initial = spark.createDataFrame([r.astuple() for r in level.initial_state], INITIAL_DDL).groupBy("key")
            df = df.groupBy("key").transformWithStateInPandas(make_level_processor(level.specs, level.routed), records.DDL, "append",
                                                              level.time_mode, initialState=initial)
    else:
        raise AssertionError(step.kind)
    return _with_watermark(df, step.watermark)


def _with_watermark(df: Any, watermark: bool) -> Any:
    """``df`` with Spark's watermark defined from its ``w`` column, when ``watermark``."""
    if not watermark:
        return df
    from pyspark.sql import functions as F

    from flinkpy.spark import records

    # w is at most END_W for every row that reaches here (timer outputs are not stamped before depth 1)
    shifted = F.timestamp_millis(F.greatest(F.col("w"), F.lit(0)) + F.lit(records.SHIFT_MS))
    return df.withColumn("_flinkpy_wm", shifted).withWatermark("_flinkpy_wm", f"{records.SHIFT_MS // 1000} seconds").drop("_flinkpy_wm")


def _chain_function(spec: Any) -> tuple[Any, str]:
    """The mapInArrow function of a chain level and its output schema."""
    from flinkpy.spark import records
    from flinkpy.spark.chain import chain_function
    from flinkpy.spark.levels import routed_chain_function

    if isinstance(spec, LevelSpec):
        return routed_chain_function(spec), records.KEYED_DDL if spec.keyed else records.DDL
    return chain_function(spec), records.KEYED_DDL if spec.key_selector is not None else records.DDL


def _fusable(branch: list[Step]) -> bool:
    """Whether a branch starts with a flinkpy source followed by its chain level, which then runs
    inside the source's reader (Spark's socket source has no reader of ours)."""
    return len(branch) >= 2 and branch[0].kind == "source" and branch[1].kind == "chain" and branch[0].payload.fusable


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
        if driver.finished_before or (progress is not None and int(progress.get("batchId", -1)) >= target):
            driver.stopping.set()
            query.stop()
            return
        threading.Event().wait(0.1)


@dataclass
class KeyedLevel:
    """The payload of a keyed step: its operators and whether rows carry routes there."""

    specs: list[KeyedSpec]
    #: several operators (grouped by operator and key) or rows passing through
    routed: bool
    #: Spark's time mode of the step, one for all its operators (see :mod:`.time_mode`)
    time_mode: str = "EventTime"
    #: keyed state moved from an engine snapshot: the rows of the step's initialState
    #: (:func:`flinkpy.spark.keyed_move.initial_rows`)
    initial_state: list[Any] = field(default_factory=list)

    @property
    def on_group_state(self) -> bool:
        """One STREAMING keyed reduce by key group: applyInPandasWithState (see keyed.py)."""
        return not self.routed and len(self.specs) == 1 and on_group_state(self.specs[0])


@dataclass
class SinkRoutes:
    """The payload of the sink step: the sink of each route that ends there."""

    by_route: dict[int, StreamNode]
    routed: bool
