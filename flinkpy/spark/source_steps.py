"""A source of a job on Spark: whether Spark can read it again from a position (a source that
cannot be replayed is refused), how the plan describes it, and the DataFrame that reads it when
the query starts (:class:`SourceStep`, the payload of a plan's source step)."""

from __future__ import annotations

from typing import Any

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import StreamNode
from flinkpy.spark.query import Step, label
from flinkpy.spark.untranslatable import refuse


class SourceStep:
    """Builds a source's DataFrame when the query starts (payload of a source step)."""

    def __init__(self, node: StreamNode, index: int, parallelism: int, max_records: int) -> None:
        self.node = node
        self.index = index
        self.parallelism = parallelism
        self.max_records = max_records
        #: records leave in bundle rows (a chain follows and opens them)
        self.bundled = False
        #: OutputTag id -> routes of the source's side output readers
        self.side_routes: dict[str, list[int]] = {}
        #: reader positions moved from an engine snapshot (:mod:`.state_move`), or None
        self.positions: list | None = None

    @property
    def whole(self) -> bool:
        """Whether the source is read in one micro-batch planned on the driver when the query
        starts (:func:`flinkpy.spark.sources.plan_whole`): a bounded source with no batch limit."""
        from flinkpy.connectors.base import Boundedness
        from flinkpy.connectors.function_source import FunctionSource

        if isinstance(self.node.fn, FunctionSource):  # still running when the query starts: read as its journal grows
            return False
        return self.max_records <= 0 and getattr(self.node.fn, "boundedness", Boundedness.BOUNDED) == Boundedness.BOUNDED

    @property
    def fusable(self) -> bool:
        """Whether the chain after it can run in its reader (a flinkpy source, not Spark's socket source)."""
        from flinkpy.connectors.socket_source import SocketTextSource

        return not isinstance(self.node.fn, SocketTextSource)

    def __call__(self, spark: Any, *, transform: Any = None, ddl: str | None = None, saved: Any = None, location: str = "") -> Any:
        """The source's DataFrame; ``saved``: its offset in the checkpoint location (``location``),
        which keeps a restarted query on the road it started on (Spark reads the offset back)."""
        from flinkpy.connectors.function_source import FunctionSource
        from flinkpy.spark.kafka import SparkKafkaSource, kafka_source_of
        from flinkpy.spark.sources import is_data_source_offset, plan_whole, read_stream, read_whole, socket_stream

        kafka_source = kafka_source_of(self.node.fn)
        src = SparkKafkaSource(kafka_source) if kafka_source is not None else self.node.fn
        if isinstance(src, FunctionSource):  # run on the driver, read from its journal
            from flinkpy.spark.function_journal import JournalSource, journal_path, start_journal

            path = journal_path(location, self.index)
            start_journal(src.fn, path)
            src = JournalSource(path)
        if self.positions is not None:
            from flinkpy.spark.state_move import RestoredSource

            src = RestoredSource(src, self.positions)
        if not self.fusable:
            return socket_stream(spark, src.hostname, src.port, self.index)
        if self.whole and not is_data_source_offset(saved):
            planned = plan_whole(src, index=self.index, parallelism=self.parallelism, bundled=self.bundled, side_routes=self.side_routes)
            if planned is not None:
                return read_whole(spark, *planned, transform=transform, ddl=ddl)
            if saved is not None:
                raise InvalidProgramError(
                    f"the bounded source {label(self.node)} was read whole in one micro-batch when the query started, but it has "
                    "not ended now that the query restarts: it does not read the same records again",
                    remedy="start the job afresh (without -s), with a source that reads the same records from the same position")
        return read_stream(spark, src, index=self.index, parallelism=self.parallelism, max_records=self.max_records, bundled=self.bundled,
                           side_routes=self.side_routes, transform=transform, ddl=ddl)


def source_step(node: StreamNode, index: int, parallelism: int, max_records: int) -> Step:
    """The step of the source ``node`` (the job's ``index``-th; ``parallelism``: the job's), or
    UntranslatableError where Spark could not read it again from a position."""
    from flinkpy.connectors.socket_source import SocketTextSource
    from flinkpy.spark import kafka

    from flinkpy.connectors.function_source import FunctionSource

    src = kafka.kafka_source_of(node.fn) or node.fn
    guarantee = "exactly-once" if kafka.is_kafka_source(src) else getattr(src, "guarantee", None)
    if isinstance(src, FunctionSource):
        spark = ("SourceFunction run once on the driver, what it collects journaled in the checkpoint location; "
                 "Python data source 'flinkpy' over the journal (offsets are journal positions: replayable)")
    elif isinstance(src, SocketTextSource):
        spark = "Spark socket source (no replay, as the engine's)"
        if src.delimiter != "\n":
            raise refuse(node, "Spark's socket source splits lines at newlines only", remedy="use the default delimiter")
    elif not getattr(src, "replayable", True):
        raise refuse(node, f"the source {type(src).__name__} acknowledges what a completed checkpoint covers and cannot be "
                           "read again from a position; Spark plans and reads each micro-batch with readers of their own",
                     remedy="use a RabbitMQ stream queue (RMQStreamSource), which replays from an offset")
    elif guarantee != "exactly-once":
        raise refuse(node, f"the source {type(src).__name__} cannot be read again from a position ({guarantee or 'no'} guarantee), "
                           "so Spark could not plan and replay its micro-batches",
                     remedy="use a replayable source (from_collection, NumberSequenceSource, FileSource, DataGeneratorSource, RedisStreamsSource)")
    else:
        spark = "Python data source 'flinkpy' (offsets are reader positions: replayable)"
    if kafka.is_kafka_source(src):
        reason = kafka.check_source(src)
        if reason:
            raise refuse(node, reason, remedy="on Spark: set_bounded(...), and start from earliest(), timestamp() or offsets()")
        spark = "Python data source 'flinkpy' with confluent-kafka consumers (offsets per partition: replayable)"
        if src.stopping is None:
            spark = ("Python data source 'flinkpy' with confluent-kafka consumers on the executors (Kafka offsets per partition, "
                     "each batch up to the last stable offsets: replayable; partitions discovered), "
                     "a Spark partition per Kafka partition with new records")
    parallelism = node.parallelism or parallelism
    for cap in (node.max_allowed_parallelism, getattr(src, "max_parallelism", lambda: None)()):
        if cap:
            parallelism = min(parallelism, cap)
    if kafka.is_kafka_source(src):
        parallelism = kafka.reader_parallelism(src) or parallelism
    step = SourceStep(node, index, parallelism, max_records)
    if step.whole and step.fusable:
        spark = ("read whole in one micro-batch planned on the driver (rate-micro-batch ticks -> mapInArrow; "
                 "a source that has not ended at once: Python data source 'flinkpy')")
    if not (kafka.is_kafka_source(src) and src.stopping is None):
        spark += f", {parallelism} partition(s)"
    return Step("source", [node], spark, step)
