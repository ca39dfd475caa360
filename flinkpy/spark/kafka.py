"""Kafka on the Spark runner, exactly once, without Spark's Kafka source (its jars).

**Reading.** An unbounded :class:`~flinkpy.connectors.kafka_source.KafkaSource` has Spark
offsets that are Kafka offsets (:mod:`flinkpy.spark.kafka_offsets`): batches planned on the
driver up to each partition's last stable offset, read on the executors offset range by
offset range. A bounded one runs through the runner's general data source
(:mod:`flinkpy.spark.sources`) with one reader per partition (:func:`reader_parallelism`: a
consumer of several partitions interleaves them differently on each read): its readers, with
confluent-kafka consumers, run on the driver to plan a micro-batch and on the executors to read
it, and a Spark offset is each reader's state (its partition's next offset). A KafkaSource
reader polls without waiting, and a fresh consumer has fetched nothing yet, so there each
reader is wrapped in a :class:`PatientReader` that polls until records come or the partition
stays quiet for :data:`QUIET_S`. Its starting offsets must name the same records when a batch
is planned and when it is read again: ``latest()`` and ``committed_offsets()`` move, so a
bounded source starting there is refused (:func:`check_source`).

**Writing.** A KafkaSink with ``DeliveryGuarantee.EXACTLY_ONCE`` writes each micro-batch from
the driver in one Kafka transaction on the transactional id ``<prefix>-spark`` (one writer per
query, whatever the parallelism; without a prefix ``flinkpy-<query>/<sink uid>-spark``), with a
commit marker in the same transaction: the offset ``batch id + 1`` committed for the consumer
group of that id on partition 0 of the sink's topic (``send_offsets_to_transaction``). A query
attempt first fences the id (``init_transactions`` aborts what an earlier attempt left open)
and reads the marker; a replayed batch whose id the marker covers is skipped, so a batch that
committed in Kafka but not in Spark's checkpoint is not written twice. AT_LEAST_ONCE flushes
every batch; NONE produces and moves on.
"""

from __future__ import annotations

import time
from typing import Any

from flinkpy.connectors.base import ReaderContext, Source
from flinkpy.spark.sinks import BatchWriter

#: a planning reader stops when its partitions have had nothing for this long
QUIET_S = 1.0


class PatientReader:
    """A KafkaSource reader whose poll waits up to :data:`QUIET_S` for records."""

    def __init__(self, reader: Any, quiet_s: float = QUIET_S) -> None:
        self.reader = reader
        self.quiet_s = quiet_s

    def poll(self, max_records: int) -> Any:
        deadline = time.monotonic() + self.quiet_s
        while True:
            got = self.reader.poll(max_records)
            if got is None or len(got) or time.monotonic() >= deadline:
                return got
            time.sleep(0.005)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reader, name)


class SparkKafkaSource(Source):
    """A KafkaSource as the Spark runner reads it: the same readers, patient (see above)."""

    guarantee = "exactly-once"

    def __init__(self, source: Any) -> None:
        self.source = source

    def get_boundedness(self) -> Any:
        return self.source.get_boundedness()

    @property
    def boundedness(self) -> Any:
        return self.source.get_boundedness()

    def create_reader(self, ctx: ReaderContext) -> Any:
        return PatientReader(self.source.create_reader(ctx))

    def micro_batches(self, *, index: int, bundled: bool) -> Any:
        """An unbounded source's micro-batches on Kafka offsets (:mod:`flinkpy.spark.kafka_offsets`);
        None for a bounded one (the general road of :mod:`flinkpy.spark.sources`)."""
        if self.source.stopping is not None:
            return None
        from flinkpy.spark.kafka_offsets import KafkaMicroBatches

        return KafkaMicroBatches(self.source, index=index, bundled=bundled)

    def __repr__(self) -> str:
        return repr(self.source)


def kafka_source_of(source: Any) -> Any:
    """The KafkaSource a job's source is (PyFlink's legacy ``FlinkKafkaConsumer`` stands for
    one), or None."""
    try:
        from flinkpy.connectors.kafka_consumer import FlinkKafkaConsumer
        from flinkpy.connectors.kafka_source import KafkaSource
    except ImportError:
        return None
    if isinstance(source, FlinkKafkaConsumer):
        return source.source()
    return source if isinstance(source, KafkaSource) else None


def is_kafka_source(source: Any) -> bool:
    return kafka_source_of(source) is not None


def is_kafka_sink(sink: Any) -> bool:
    try:
        from flinkpy.connectors.kafka_sink import KafkaSink
    except ImportError:
        return False
    return isinstance(sink, KafkaSink)


#: starting offsets that name other records each time they are resolved
MOVING_STARTS = ("latest", "committed")


def check_source(source: Any) -> str | None:
    """Why Spark cannot read ``source`` exactly once, or None. An unbounded source can: its
    offsets are Kafka's, each partition's start resolved once and logged with the batch that
    first reads it (:mod:`flinkpy.spark.kafka_offsets`)."""
    if source.stopping is None:
        return None
    if reader_parallelism(source) is None:
        return ("Spark needs one reader per partition, known when the source is built (a reader of several partitions "
                "interleaves them differently each time a batch is read again): only a bounded KafkaSource of one topic has them")
    kind = str(getattr(source.starting, "kind", "")).lower()
    if any(m in kind for m in MOVING_STARTS):
        return (f"starting offsets {kind.rsplit('.', 1)[-1]} name other records when a micro-batch is planned and when it is "
                "read again")
    return None


def reader_parallelism(source: Any) -> int | None:
    """A bounded source's readers, one per partition: a consumer of several partitions
    interleaves them differently each time it reads, so a batch read again on an executor would
    hold other records than the driver counted. The partitions of a bounded source are known
    when it is built; None when they are not (an unbounded source: a Spark partition per Kafka
    partition with new records in each batch) or when two of them would share a reader."""
    from flinkpy.connectors.kafka_splits import owner

    parts = list(source.stopping or ())
    if not parts:
        return None
    n = len(parts)
    return n if len({owner(tp, n) for tp in parts}) == n else None


def check_sink(sink: Any) -> str | None:
    """Why Spark cannot write ``sink`` exactly once as asked, or None."""
    if _exactly_once(sink) and sink.serializer.topic is None:
        return "an EXACTLY_ONCE KafkaSink with a topic selector has no fixed topic to hold the batch's commit marker"
    return None


def _exactly_once(sink: Any) -> bool:
    return getattr(sink.delivery_guarantee, "name", str(sink.delivery_guarantee)).upper() == "EXACTLY_ONCE"


class KafkaBatchWriter(BatchWriter):
    """A micro-batch per Kafka transaction with its batch id as the commit marker (see above)."""

    def __init__(self, sink: Any, sink_id: str) -> None:
        self.sink = sink
        self.sink_id = sink_id
        self.exactly_once = _exactly_once(sink)
        self.guarantee = "exactly-once" if self.exactly_once else "at-least-once"
        prefix = sink.transactional_id_prefix or f"flinkpy-{sink_id}"
        self.transactional_id = f"{prefix}-spark"
        self.writer: Any = None
        self.group: Any = None
        #: batches below this id are in Kafka already (the marker)
        self.next_batch = 0

    def _open(self) -> None:
        from flinkpy.connectors.kafka_sink import KafkaWriter

        ctx = ReaderContext(subtask_index=0, parallelism=1, operator_name=f"spark sink {self.sink_id}")
        extra = {"transactional.id": self.transactional_id} if self.exactly_once else {}
        self.writer = KafkaWriter(self.sink, ctx, extra)
        self.writer.open()
        if self.exactly_once:
            self.writer._producer.init_transactions(self.writer.timeout_s)
            self.next_batch = self._marker()

    def _consumer(self) -> Any:
        if self.group is None:
            from confluent_kafka import Consumer

            self.group = Consumer({"bootstrap.servers": self.sink.bootstrap_servers, "group.id": self.transactional_id,
                                   "enable.auto.commit": False, "session.timeout.ms": 6000})
        return self.group

    def _marker(self) -> int:
        from confluent_kafka import TopicPartition

        (tp,) = self._consumer().committed([TopicPartition(self.sink.serializer.topic, 0)], timeout=self.writer.timeout_s)
        return tp.offset if tp.offset >= 0 else 0

    def begin(self, batch_id: int) -> None:
        self.close()
        self._open()

    def write(self, records: list, batch_id: int) -> None:
        if self.writer is None:
            self._open()
        if not self.exactly_once:
            self.writer.write(records)
            if getattr(self.sink.delivery_guarantee, "name", "") == "AT_LEAST_ONCE":
                self.writer.flush_all(f"flushing micro-batch {batch_id}")
            return
        if batch_id < self.next_batch:
            return  # committed in Kafka by an earlier attempt: a replay
        from confluent_kafka import TopicPartition

        p = self.writer._producer
        p.begin_transaction()
        try:
            self.writer.write(records)
            p.send_offsets_to_transaction([TopicPartition(self.sink.serializer.topic, 0, batch_id + 1)],
                                          self._consumer().consumer_group_metadata(), self.writer.timeout_s)
            self.writer.flush_all(f"writing micro-batch {batch_id}")
            p.commit_transaction(self.writer.timeout_s)
        except BaseException:
            try:
                p.abort_transaction(5)
            except Exception:  # noqa: BLE001 - the next attempt's init_transactions aborts it anyway
                pass
            raise
        self.next_batch = batch_id + 1

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.group is not None:
            self.group.close()
            self.group = None

    def describe(self) -> str:
        topic = self.sink.serializer.topic or "topics chosen per record"
        if self.exactly_once:
            tid = repr(self.transactional_id) if self.sink.transactional_id_prefix else "flinkpy-<query>/<sink uid>-spark"
            return f"KafkaSink {topic} (a transaction per batch on id {tid}, the batch id committed in it: exactly-once)"
        return f"KafkaSink {topic} ({self.guarantee})"
