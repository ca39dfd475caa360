"""KafkaSink: a stream written to Kafka topics with PyFlink's builder, through confluent-kafka.

Three delivery guarantees (``set_delivery_guarantee``):

- ``EXACTLY_ONCE``: records go into Kafka transactions bound to checkpoints; a ``read_committed``
  consumer sees each record once, when the checkpoint that covers it completes. The protocol
  (and why it keeps a checkpoint interval's records in the checkpoint) is in
  :mod:`flinkpy.connectors.kafka_commit`; this module carries out its actions with
  confluent-kafka.
- ``AT_LEAST_ONCE``: every record is acknowledged by the broker before a checkpoint completes
  (the writer flushes at the barrier); records replayed after a failure are written again.
- ``NONE``: fire and forget; what the producer buffers at a failure is lost.

>>> from flinkpy.common import SimpleStringSchema
>>> sink = (KafkaSink.builder()
...         .set_bootstrap_servers("broker:9092")
...         .set_record_serializer(KafkaRecordSerializationSchema.builder()
...             .set_topic("out").set_value_serialization_schema(SimpleStringSchema()).build())
...         .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
...         .build())
>>> sink, sink.guarantee
(KafkaSink('broker:9092', 'out', EXACTLY_ONCE), 'exactly-once')
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from flinkpy.connectors.base import DeliveryGuarantee, ReaderContext, Sink, SinkWriter
from flinkpy.connectors.kafka_client import KafkaTopicNotFoundError, KafkaUnreachableError, client_config, kafka_module, translate
from flinkpy.connectors.kafka_commit import (
    Action,
    Batch,
    Begin,
    Commit,
    CommitProtocol,
    ProducerRecord,
    Prepare,
    Record,
    Send,
    recovery_plan,
    replay,
)
from flinkpy.connectors.kafka_serialization import KafkaRecordSerializationSchema
from flinkpy.connectors.two_phase_commit import default_transaction_prefix
from flinkpy.errors import ConfigurationError, FlinkpyError
from flinkpy.units import parse_duration_ms

if TYPE_CHECKING:
    from flinkpy.connectors.kafka_sink_builder import KafkaSinkBuilder

#: librdkafka's default transaction.timeout.ms
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
#: librdkafka's RD_KAFKA_PARTITION_UA: the producer's partitioner chooses (produce()'s default)
_ANY_PARTITION = -1


class KafkaWriter(SinkWriter):
    """The producer side shared by every guarantee: serialise, produce, flush, and report
    delivery errors (collected by the callbacks, raised at the next flush)."""

    def __init__(self, sink: KafkaSink, ctx: ReaderContext, extra: dict[str, Any] | None = None) -> None:
        self._sink = sink
        self.ctx = ctx
        self.who = f"KafkaSink {ctx.operator_name or ''} (subtask {ctx.subtask_index})".replace("  ", " ")
        self.where = f"{self.who} at {sink.bootstrap_servers}"
        self._conf = {**client_config(sink.bootstrap_servers, sink.properties), **(extra or {})}
        self._producer: Any = None
        self._errors: list[tuple[str, Any]] = []
        self.timeout_s = sink.operation_timeout_ms() / 1000 + 1
        if not sink.write_timestamps:
            self.write_timestamped = None  # the engine hands over the values alone

    def error(self, e: Exception, doing: str) -> FlinkpyError:
        return translate(e, self._sink.bootstrap_servers, f"{doing} in {self.who}", self._sink.serializer.topic)

    def producer(self, **extra: Any) -> Any:
        ck = kafka_module()
        try:
            # delivery callbacks for failures only (one Python call per record otherwise), and
            # one callback for the producer rather than one handed to each produce()
            return ck.Producer({"delivery.report.only.error": True, **self._conf, **extra, "on_delivery": self._on_delivery})
        except ck.KafkaException as e:
            raise ConfigurationError(f"{self.where}: the producer configuration is refused: {e.args[0].str()}",
                                     remedy="fix or remove the property it names (set_property)") from None

    def open(self, runtime_context: Any = None) -> None:
        self._sink.serializer.open(runtime_context)
        self._producer = self.producer()
        self.check_topic(self._producer)

    def check_topic(self, producer: Any) -> None:
        """Fail at once, on one line, when the broker cannot be reached or the fixed topic is
        missing (a selected topic's absence shows as a delivery error at the next flush)."""
        ck = kafka_module()
        topic = self._sink.serializer.topic
        try:
            md = producer.list_topics(topic, timeout=min(self.timeout_s, 15))
        except ck.KafkaException as e:
            raise self.error(e, "reading the cluster's metadata") from None
        t = md.topics.get(topic) if topic else None
        if t is not None and t.error is not None:
            raise KafkaTopicNotFoundError(
                f"{self.where}: topic {topic!r} does not exist ({t.error.str()})",
                remedy="create it (or let the brokers auto-create topics), or correct set_topic()",
            )

    def serialize(self, records: list) -> list[Record]:
        return self._sink.serializer.serialize_all(records)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append((msg.topic(), err))

    def produce(self, records: list[Record], topic: str | None = None) -> None:
        """Produce ``records``: whole ProducerRecords, or values (bytes) for ``topic`` (the
        sink's fixed topic unless given)."""
        p = self._producer
        fixed = topic if topic is not None else self._sink.serializer.topic
        for r in records:
            if not isinstance(r, tuple):  # a value of a sink with one topic and no key
                try:
                    p.produce(fixed, r)
                    continue
                except BufferError:
                    r = ProducerRecord(fixed, r)  # type: ignore[arg-type]
            elif type(r) is tuple:  # such a value with its timestamp
                try:
                    # positionally (partition, callbacks, timestamp): confluent-kafka takes
                    # about a microsecond a call to parse a keyword argument
                    p.produce(fixed, r[0], None, _ANY_PARTITION, None, None, r[1])
                    continue
                except BufferError:
                    r = ProducerRecord(fixed, r[0], timestamp=r[1])
            elif r.partition is None and not r.headers:
                try:  # the common record: no dict of keywords built for it
                    if r.timestamp is None:
                        p.produce(r.topic, r.value, r.key)
                    else:
                        p.produce(r.topic, r.value, r.key, _ANY_PARTITION, None, None, r.timestamp)
                    continue
                except BufferError:
                    pass
            self._produce_waiting(r)
        p.poll(0)

    def _produce_waiting(self, r: ProducerRecord) -> None:
        """One record, waiting for room while the producer's local queue is full."""
        kw: dict[str, Any] = {"value": r.value, "key": r.key}
        if r.partition is not None:
            kw["partition"] = r.partition
        if r.timestamp is not None:
            kw["timestamp"] = r.timestamp
        if r.headers:
            kw["headers"] = r.headers
        while True:
            try:
                self._producer.produce(r.topic, **kw)
                return
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: wait for deliveries

    def flush_all(self, doing: str) -> None:
        remaining = self._producer.flush(self.timeout_s)
        if self._errors:
            (topic, first), n = self._errors[0], len(self._errors)
            self._errors = []
            raise translate(first, self._sink.bootstrap_servers, f"{doing} in {self.who} ({n} record(s) not delivered, the first to {topic!r})", topic)
        if remaining:
            raise KafkaUnreachableError(
                f"no Kafka broker answers at {self._sink.bootstrap_servers} while {doing} in {self.who}: "
                f"{remaining} record(s) unacknowledged after {self.timeout_s:.0f} s",
                remedy="check the brokers; the job restarts from its last checkpoint")

    def write(self, records: list) -> None:
        self.send(self.serialize(records))

    def write_timestamped(self, records: list, timestamps: list) -> None:
        self.send(self._sink.serializer.serialize_timestamped(records, timestamps))

    def send(self, records: list[Record]) -> None:
        """Serialised records on their way to Kafka (the exactly-once writer: into transactions)."""
        self.produce(records)

    def flush(self, end_of_input: bool) -> None:
        if end_of_input or self._sink.delivery_guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
            self.flush_all("flushing at a checkpoint" if not end_of_input else "flushing at the end of the input")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(0)
            self._producer = None


class ExactlyOnceKafkaWriter(KafkaWriter):
    """Carries out :class:`~flinkpy.connectors.kafka_commit.CommitProtocol` 's actions."""

    def __init__(self, sink: KafkaSink, ctx: ReaderContext) -> None:
        super().__init__(sink, ctx)
        prefix = sink.transactional_id_prefix or default_transaction_prefix(ctx, salt=f"kafka/{sink.serializer.topic}")
        serializer = sink.serializer
        self.protocol = CommitProtocol(prefix, ctx.subtask_index, topic=serializer.topic if serializer.values_only else None)
        self._groups: dict[str, Any] = {}
        self._in_txn = False

    def open(self, runtime_context: Any = None) -> None:
        self._sink.serializer.open(runtime_context)
        plan = recovery_plan(self.protocol.prefix, self.ctx.subtask_index, self.ctx.restored_state)
        for tid in plan.fence[1:]:  # earlier attempts' ids of the old subtasks this one stands in for
            self._init(self.producer(**{"transactional.id": tid}), tid).flush(0)
        self._producer = self._init(self.producer(**{"transactional.id": self.protocol.transactional_id}), self.protocol.transactional_id)
        self.check_topic(self._producer)
        for batch in plan.batches:
            if self._committed_token(batch) != batch.token:
                self.run(replay(batch))

    def _init(self, producer: Any, tid: str) -> Any:
        """init_transactions: fences earlier producers of ``tid`` and aborts what they left open."""
        ck = kafka_module()
        try:
            producer.init_transactions(self.timeout_s)
        except ck.KafkaException as e:
            raise self.error(e, f"initialising transactional id {tid!r}") from None
        return producer

    def _group(self, group: str) -> Any:
        if group not in self._groups:
            ck = kafka_module()
            # the sink's properties carry the connection's security settings; the producer-only
            # keys among them are ignored by a consumer
            conf = {k: v for k, v in self._conf.items() if k not in _PRODUCER_ONLY}
            self._groups[group] = ck.Consumer({**conf, "group.id": group, "enable.auto.commit": False, "session.timeout.ms": 6000})
        return self._groups[group]

    def _committed_token(self, batch: Batch) -> int | None:
        ck = kafka_module()
        try:
            (tp,) = self._group(batch.group).committed([ck.TopicPartition(batch.marker_topic, 0)], timeout=self.timeout_s)
        except ck.KafkaException as e:
            raise self.error(e, f"reading the commit marker of checkpoint {batch.checkpoint_id} (group {batch.group})") from None
        return tp.offset if tp.offset >= 0 else None

    def run(self, actions: list[Action]) -> None:
        ck = kafka_module()
        p = self._producer
        for a in actions:
            try:
                if isinstance(a, Begin):
                    p.begin_transaction()
                    self._in_txn = True
                elif isinstance(a, Send):
                    self.produce(a.records, a.topic)
                elif isinstance(a, Prepare):
                    offsets = [ck.TopicPartition(a.marker_topic, 0, a.token)]
                    p.send_offsets_to_transaction(offsets, self._group(a.group).consumer_group_metadata(), self.timeout_s)
                    self.flush_all("pre-committing the transaction")
                elif isinstance(a, Commit):
                    p.commit_transaction(self.timeout_s)
                    self._in_txn = False
            except ck.KafkaException as e:
                raise self.error(e, f"{type(a).__name__.lower()} of a transaction") from None

    def send(self, records: list[Record]) -> None:
        self.run(self.protocol.write(records))

    def flush(self, end_of_input: bool) -> None:
        if end_of_input:
            self.run(self.protocol.end_of_input())

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        self.run(self.protocol.snapshot(checkpoint_id))
        return self.protocol.state()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.run(self.protocol.complete(checkpoint_id))

    def close(self) -> None:
        p, self._producer = self._producer, None
        try:
            if p is not None and self._in_txn:
                p.abort_transaction(5)  # what no checkpoint covers never shows
        except Exception:  # noqa: BLE001 - the next attempt's init_transactions aborts it anyway
            pass
        for c in self._groups.values():
            c.close()
        self._groups.clear()


#: producer keys a consumer (reading the commit markers) must not be given
_PRODUCER_ONLY = frozenset({"transactional.id", "transaction.timeout.ms", "enable.idempotence", "acks", "linger.ms",
                            "message.timeout.ms", "delivery.timeout.ms", "batch.num.messages", "batch.size",
                            "compression.type", "queue.buffering.max.ms", "queue.buffering.max.messages",
                            "allow.auto.create.topics"})

_PREFIX = re.compile(r"[\w.-]{1,200}")


class KafkaSink(Sink):
    """Writes records to Kafka (see the module docstring); build one with :meth:`builder`."""

    guarantee = "exactly-once"
    needs = ("checkpointing, a replayable source; consumers read with isolation.level=read_committed; "
             "transaction.timeout.ms >= the checkpoint interval; records show at checkpoints")

    def __init__(self, bootstrap_servers: str, serializer: KafkaRecordSerializationSchema,
                 delivery_guarantee: DeliveryGuarantee = DeliveryGuarantee.NONE,
                 transactional_id_prefix: str | None = None, properties: dict[str, str] | None = None) -> None:
        kafka_module()  # in the job program, before the job is submitted
        if not bootstrap_servers:
            raise ConfigurationError("KafkaSink needs bootstrap servers", remedy="call set_bootstrap_servers('host:9092')")
        if transactional_id_prefix is not None and not _PREFIX.fullmatch(transactional_id_prefix):
            raise ConfigurationError(f"transactional id prefix {transactional_id_prefix!r} is not 1-200 letters, digits, '.', '-' or '_'",
                                     remedy="choose a short plain name, unique among the jobs writing to this Kafka cluster")
        self.bootstrap_servers = bootstrap_servers
        self.serializer = serializer
        self.delivery_guarantee = DeliveryGuarantee(delivery_guarantee)
        self.transactional_id_prefix = transactional_id_prefix
        self.properties = {str(k): str(v) for k, v in (properties or {}).items()}
        self.guarantee = self.delivery_guarantee.value
        #: records' event timestamps become their Kafka timestamps (as Flink's KafkaSink writes
        #: them); where off, or where a record has none, the producer stamps it when it sends it
        self.write_timestamps = True
        self.needs = {
            DeliveryGuarantee.EXACTLY_ONCE: "checkpointing, a replayable source; consumers must read with isolation.level=read_committed; records show at checkpoints",
            DeliveryGuarantee.AT_LEAST_ONCE: "checkpointing (flushed at every checkpoint); replays are written again",
            DeliveryGuarantee.NONE: "nothing: records the producer buffers at a failure are lost",
        }[self.delivery_guarantee]

    @staticmethod
    def builder() -> KafkaSinkBuilder:
        from flinkpy.connectors.kafka_sink_builder import KafkaSinkBuilder

        return KafkaSinkBuilder()

    def operation_timeout_ms(self) -> int:
        """How long a flush or a transaction call may take: the producer's delivery timeout."""
        raw = self.properties.get("delivery.timeout.ms") or self.properties.get("message.timeout.ms")
        return int(raw) if raw else 60_000

    def transaction_timeout_ms(self) -> int:
        return int(self.properties.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))

    def check_job_config(self, config: dict[str, Any]) -> None:
        """Refuse a job whose transactions would time out between two checkpoints: Kafka aborts
        a transaction open longer than ``transaction.timeout.ms``, and a transaction spans at
        least one checkpoint interval."""
        if self.delivery_guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return
        raw = config.get("execution.checkpointing.interval")
        interval = parse_duration_ms(raw) if raw else 0
        timeout = self.transaction_timeout_ms()
        if interval > 0 and timeout < interval:
            raise ConfigurationError(
                f"KafkaSink {self!r}: transaction.timeout.ms {timeout} is shorter than execution.checkpointing.interval {interval} ms",
                remedy="set_property('transaction.timeout.ms', ...) well above the checkpoint interval (and within the brokers' transaction.max.timeout.ms), or checkpoint more often",
            )

    def create_writer(self, ctx: ReaderContext) -> KafkaWriter:
        if self.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            return ExactlyOnceKafkaWriter(self, ctx)
        return KafkaWriter(self, ctx)

    def __repr__(self) -> str:
        topic = self.serializer.topic or "<topic selector>"
        return f"KafkaSink({self.bootstrap_servers!r}, {topic!r}, {self.delivery_guarantee.name})"
