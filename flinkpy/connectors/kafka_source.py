"""KafkaSource: Kafka topics read exactly once, a split per partition, offsets in checkpoints.

Each subtask runs one confluent-kafka consumer that is *assigned* its partitions (no group
membership, no rebalancing: :mod:`flinkpy.connectors.kafka_splits` decides who reads what). The
reader's state is the next offset of each of its partitions, taken between two polls, so a
restored reader re-reads exactly the records after the checkpoint. Offsets are committed to the
consumer group when a checkpoint completes, for lag monitoring only: recovery never reads them.

Records are read ``read_committed`` unless ``isolation.level`` says otherwise (as Flink's
KafkaSource): records of open or aborted transactions are never handed out. A record's Kafka
timestamp is its event timestamp, and batches carry their partition, so a WatermarkStrategy
keeps a watermark per partition (the task's is their minimum; an idle partition is left out).

Example::

    source = (KafkaSource.builder()
              .set_bootstrap_servers("127.0.0.1:9092")
              .set_topics("events")
              .set_group_id("analytics")
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_value_only_deserializer(SimpleStringSchema())
              .build())
    env.from_source(source, WatermarkStrategy.for_monotonous_timestamps(), "events")
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, NamedTuple

from flinkpy.common.serialization import DeserializationSchema, SimpleStringSchema
from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader, StampedBatch
from flinkpy.connectors.kafka_client import (
    KafkaError,
    KafkaTopicNotFoundError,
    client_config,
    kafka_errors,
    kafka_module,
    translate,
)
from flinkpy.connectors.kafka_splits import (
    KafkaOffsetsInitializer,
    KafkaPartition,
    Subscription,
    assigned,
    restored_offsets,
    state_of,
)
from flinkpy.errors import ExitCode, FlinkpyError, UsageError

log = logging.getLogger("flinkpy.connectors.kafka")

#: Flink's default partition discovery interval (5 minutes); <= 0 turns discovery off
DEFAULT_DISCOVERY_MS = 300_000
#: how long metadata and offset look-ups may take (``default.api.timeout.ms``)
DEFAULT_API_TIMEOUT_MS = 10_000


class UndeserializableRecordError(FlinkpyError):
    """A record's bytes do not fit the source's deserializer; names the record's place."""

    exit_code = ExitCode.JOB_FAILED


class KafkaRecord(NamedTuple):
    """A whole Kafka record, what a :class:`KafkaRecordDeserializationSchema` is given."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


class KafkaRecordDeserializationSchema:
    """Turns a whole :class:`KafkaRecord` (key, value, headers, timestamp) into the stream's
    record. ``value_only(schema)`` is what ``set_value_only_deserializer`` uses; ``of(fn)``
    wraps a function of the record.

    >>> s = KafkaRecordDeserializationSchema.of(lambda r: (r.key, r.value))
    >>> s.deserialize(KafkaRecord("t", 0, 5, 0, b"k", b"v", []))
    (b'k', b'v')
    """

    def __init__(self, fn: Any = None, value_schema: DeserializationSchema | None = None) -> None:
        self._fn = fn
        self.value_schema = value_schema

    @staticmethod
    def value_only(schema: DeserializationSchema) -> KafkaRecordDeserializationSchema:
        return KafkaRecordDeserializationSchema(value_schema=schema)

    @staticmethod
    def of(fn: Any) -> KafkaRecordDeserializationSchema:
        return KafkaRecordDeserializationSchema(fn=fn)

    def deserialize(self, record: KafkaRecord) -> Any:
        if self.value_schema is not None:
            return self.value_schema.deserialize(record.value)
        return self._fn(record)

    def describe(self) -> str:
        return type(self.value_schema).__name__ if self.value_schema is not None else "the record deserializer"


def _timeout_s(properties: dict[str, Any]) -> float:
    return int(properties.get("default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS)) / 1000.0


def resolve_offsets(consumer: Any, init: KafkaOffsetsInitializer, tps: list[KafkaPartition],
                    timeout_s: float, group: str | None) -> dict[KafkaPartition, int]:
    """The next offset of each of ``tps`` as ``init`` says (I/O: asks the brokers)."""
    ck = kafka_module()
    if not tps:
        return {}

    def bounds(tp: KafkaPartition) -> tuple[int, int]:
        return consumer.get_watermark_offsets(ck.TopicPartition(tp.topic, tp.partition), timeout=timeout_s)

    out: dict[KafkaPartition, int] = {}
    if init.kind == "timestamp":
        found = consumer.offsets_for_times([ck.TopicPartition(tp.topic, tp.partition, init.value) for tp in tps], timeout=timeout_s)
        for tp, f in zip(tps, found):
            out[tp] = f.offset if f.offset >= 0 else bounds(tp)[1]
        return out
    if init.kind == "committed":
        committed = consumer.committed([ck.TopicPartition(tp.topic, tp.partition) for tp in tps], timeout=timeout_s)
        for tp, c in zip(tps, committed):
            if c.offset >= 0:
                out[tp] = c.offset
            elif init.reset == "none":
                raise KafkaError(
                    f"group {group!r} has no committed offset for partition {tp.split_id}, and "
                    "committed_offsets() was given no reset strategy",
                    remedy="use committed_offsets(OffsetResetStrategy.EARLIEST) or LATEST, or commit offsets for the group",
                )
            else:
                low, high = bounds(tp)
                out[tp] = low if init.reset == "earliest" else high
        return out
    for tp in tps:
        if init.kind == "offsets" and tp in init.value:
            out[tp] = init.value[tp]
            continue
        low, high = bounds(tp)
        out[tp] = high if init.kind == "latest" or (init.kind == "offsets" and init.reset == "latest") else low
    return out


def cluster_partitions(consumer_or_admin: Any, subscription: Subscription, bootstrap: str, timeout_s: float,
                       *, require_topics: bool) -> dict[str, int]:
    """``{topic: partition count}`` of the topics the subscription may read (I/O)."""
    with kafka_errors(bootstrap, "listing the topics"):
        md = consumer_or_admin.list_topics(timeout=timeout_s)
    cluster = {
        name: len(t.partitions)
        for name, t in md.topics.items()
        if t.error is None and not name.startswith("__") and subscription.matches(name)
    }
    if require_topics:
        missing = [t for t in subscription.named_topics() if t not in cluster]
        if missing:
            raise KafkaTopicNotFoundError(
                f"topic {missing[0]!r} does not exist on the Kafka cluster at {bootstrap}",
                remedy="create the topic, or correct set_topics(...)/set_partitions(...) in the job",
            )
    return cluster


class KafkaSource(Source):
    """Reads Kafka topics; build it with :meth:`builder`. See the module docstring."""

    guarantee = "exactly-once"
    needs = "checkpointing, and a transactional or idempotent sink; records kept in Kafka (retention) until read"

    def __init__(self, bootstrap: str, properties: dict[str, Any], subscription: Subscription,
                 starting: KafkaOffsetsInitializer, stopping: dict[KafkaPartition, int] | None,
                 deserializer: KafkaRecordDeserializationSchema) -> None:
        self.bootstrap = bootstrap
        self.properties = dict(properties)
        self.subscription = subscription
        self.starting = starting
        #: bounded: the offset each partition ends before (resolved when the source is built)
        self.stopping = stopping
        self.deserializer = deserializer
        self.boundedness = Boundedness.BOUNDED if stopping is not None else Boundedness.CONTINUOUS_UNBOUNDED
        self.discovery_ms = int(self.properties.get("partition.discovery.interval.ms", DEFAULT_DISCOVERY_MS))
        self.commit_on_checkpoint = str(self.properties.get("commit.offsets.on.checkpoint", "true")).lower() == "true"

    @staticmethod
    def builder() -> KafkaSourceBuilder:
        return KafkaSourceBuilder()

    def get_boundedness(self) -> Boundedness:
        return self.boundedness

    @property
    def produced_type(self) -> Any:
        """The type information of the records, where the value deserializer declares it (the
        JSON, CSV and Avro row schemas): ``env.from_source`` types the stream with it, as PyFlink does."""
        return getattr(self.deserializer.value_schema, "type_info", None)

    @property
    def group_id(self) -> str | None:
        return self.properties.get("group.id")

    def consumer_config(self, ctx: ReaderContext | None = None) -> dict[str, Any]:
        cfg = client_config(self.bootstrap, self.properties)
        if not cfg.get("group.id"):
            # librdkafka needs a group for its consumer; without the user's, nothing is committed
            job = ctx.job_id[:8] if ctx is not None and ctx.job_id else uuid.uuid4().hex[:8]
            cfg["group.id"] = f"flinkpy-{job}"
        cfg.setdefault("isolation.level", "read_committed")
        cfg.setdefault("enable.partition.eof", False)
        cfg["enable.auto.commit"] = False
        cfg["enable.auto.offset.store"] = False
        return cfg

    def describe(self) -> str:
        return f"{self.subscription.describe()} at {self.bootstrap}"

    def create_reader(self, ctx: ReaderContext) -> KafkaSourceReader:
        return KafkaSourceReader(self, ctx)

    def __repr__(self) -> str:
        return f"KafkaSource({self.describe()})"


class KafkaSourceReader(SourceReader):
    """One subtask's consumer. State: :func:`~flinkpy.connectors.kafka_splits.state_of`."""

    def __init__(self, source: KafkaSource, ctx: ReaderContext, clock: Any = time.monotonic) -> None:
        ck = kafka_module()
        self._ck = ck
        self._source = source
        self._ctx = ctx
        self._clock = clock
        self._timeout_s = _timeout_s(source.properties)
        self._consumer = ck.Consumer(source.consumer_config(ctx))
        self._restored = restored_offsets(ctx.restored_state)
        #: next offset per owned partition: what has been handed out (the snapshot)
        self._offsets: dict[KafkaPartition, int] = {}
        self._finished: set[KafkaPartition] = set()
        self._pending: dict[int, dict[KafkaPartition, int]] = {}
        self._idle = False
        self._next_discovery = 0.0
        #: records behind the log end per partition, for the lag metric (read by the metrics thread)
        self.lag: dict[str, int] = {}
        self._next_lag = 0.0
        self._committed: dict[KafkaPartition, int] = {}
        self._discover(initial=True)

    # -- partitions ----------------------------------------------------------------------------

    def _discover(self, *, initial: bool) -> None:
        src = self._source
        cluster = cluster_partitions(self._consumer, src.subscription, src.bootstrap, self._timeout_s, require_topics=initial)
        candidates = set(src.subscription.select(cluster))
        candidates |= {tp for tp in self._restored if src.subscription.covers(tp)}
        if src.stopping is not None:
            candidates &= set(src.stopping)  # bounded: the partitions known when it was built
        mine = [tp for tp in assigned(candidates, self._ctx.subtask_index, self._ctx.parallelism) if tp not in self._offsets]
        if not mine:
            return
        fresh = [tp for tp in mine if tp not in self._restored]
        # partitions found after the start begin at their earliest record, as Flink's
        init = src.starting if initial else KafkaOffsetsInitializer.earliest()
        with kafka_errors(src.bootstrap, f"looking up the starting offsets of {src.subscription.describe()}"):
            start = resolve_offsets(self._consumer, init, fresh, self._timeout_s, src.group_id)
        for tp in mine:
            self._offsets[tp] = self._restored.get(tp, start.get(tp, 0))
            self._register_metrics(tp)
        if not initial:
            log.info("subtask %d of %s: new partitions %s", self._ctx.subtask_index, self._ctx.operator_name,
                     ", ".join(tp.split_id for tp in mine))
        active = [tp for tp in mine if not self._done(tp, self._offsets[tp])]
        self._finished |= set(mine) - set(active)
        if active:
            with kafka_errors(src.bootstrap, f"assigning {src.subscription.describe()}"):
                self._consumer.incremental_assign([self._ck.TopicPartition(tp.topic, tp.partition, self._offsets[tp]) for tp in active])

    def _done(self, tp: KafkaPartition, offset: int) -> bool:
        stop = self._source.stopping
        return stop is not None and offset >= stop.get(tp, 0)

    def split_ids(self) -> list[str]:
        """The splits this reader reads now (its partitions not yet finished)."""
        return [tp.split_id for tp in self._offsets if tp not in self._finished]

    # -- reading -------------------------------------------------------------------------------

    def poll(self, max_records: int) -> list | None:
        src = self._source
        now = self._clock()
        if src.stopping is None and src.discovery_ms > 0 and now >= self._next_discovery:
            if self._next_discovery:
                self._discover(initial=False)
            self._next_discovery = now + src.discovery_ms / 1000.0
        if src.stopping is not None and len(self._finished) == len(self._offsets):
            return None
        if now >= self._next_lag:
            self._measure_lag()
            self._next_lag = now + 1.0
        try:
            msgs = self._consumer.consume(num_messages=max(1, max_records), timeout=0.01 if self._idle else 0)
        except self._ck.KafkaException as exc:
            raise translate(exc, src.bootstrap, f"reading {src.subscription.describe()}") from None
        records: list = []
        stamps: list[int] = []
        splits: list[str] = []
        # per record only look-ups by (topic, partition) tuple: a KafkaPartition hashes and
        # compares in Python, which cost more than the rest of a record's way through the reader
        stop = src.stopping
        live = {(tp.topic, tp.partition): (tp, tp.split_id, None if stop is None else stop.get(tp, 0))
                for tp in self._offsets if tp not in self._finished}
        value_schema = src.deserializer.value_schema
        read: dict[KafkaPartition, int] = {}
        try:
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == self._ck.KafkaError._PARTITION_EOF:
                        continue
                    if err.fatal() or not err.retriable():
                        raise translate(self._ck.KafkaException(err), src.bootstrap,
                                        f"reading {src.subscription.describe()}", m.topic())
                    log.warning("reading %s: %s", src.describe(), err.str())
                    continue
                key = (m.topic(), m.partition())
                part = live.get(key)
                if part is None:
                    continue
                tp, split_id, end = part
                offset = m.offset()
                if end is not None and offset >= end:
                    self._finish(tp)
                    del live[key]
                    continue
                if value_schema is None:
                    value = self._deserialize(tp, m)
                else:
                    try:
                        value = value_schema.deserialize(m.value())
                    except Exception:  # noqa: BLE001 - _deserialize raises it again, with the record named
                        value = self._deserialize(tp, m)
                read[tp] = offset + 1
                if value is not None:  # None: the schema skips it (a bad record with ignore_parse_errors), as Flink's do
                    records.append(value)
                    stamps.append(m.timestamp()[1])
                    splits.append(split_id)
                if end is not None and offset + 1 >= end:
                    self._finish(tp)
                    del live[key]
        finally:
            self._offsets.update(read)
        if src.stopping is not None and not msgs:
            self._check_ends()
        self._idle = not msgs
        return StampedBatch(records, timestamps=stamps, splits=splits)

    def _deserialize(self, tp: KafkaPartition, m: Any) -> Any:
        record = KafkaRecord(tp.topic, tp.partition, m.offset(), m.timestamp()[1], m.key(), m.value(), m.headers() or [])
        try:
            return self._source.deserializer.deserialize(record)
        except Exception as exc:  # noqa: BLE001 - any schema's failure is the record's
            raise UndeserializableRecordError(
                f"record at offset {m.offset()} of partition {tp.split_id} cannot be deserialized "
                f"with {self._source.deserializer.describe()}: {exc}",
                remedy="fix what writes the topic, or use a deserializer that accepts the record "
                "(e.g. the JSON/CSV schemas' ignore_parse_errors())",
            ) from None

    def _finish(self, tp: KafkaPartition) -> None:
        if tp not in self._finished:
            self._finished.add(tp)
            self._consumer.incremental_unassign([self._ck.TopicPartition(tp.topic, tp.partition)])

    def _check_ends(self) -> None:
        """Bounded: a partition whose position passed its end (control records and aborted
        transactions take offsets, so the last record may never be delivered) is finished."""
        open_ = [tp for tp in self._offsets if tp not in self._finished]
        if not open_:
            return
        for pos in self._consumer.position([self._ck.TopicPartition(tp.topic, tp.partition) for tp in open_]):
            tp = KafkaPartition(pos.topic, pos.partition)
            if pos.offset >= 0 and self._done(tp, pos.offset):
                self._offsets[tp] = max(self._offsets[tp], pos.offset)
                self._finish(tp)

    def _measure_lag(self) -> None:
        lag: dict[str, int] = {}
        for tp, offset in self._offsets.items():
            try:
                _, high = self._consumer.get_watermark_offsets(self._ck.TopicPartition(tp.topic, tp.partition), cached=True)
            except self._ck.KafkaException:
                continue
            if high >= 0:
                lag[tp.split_id] = max(0, high - offset)
        self.lag = lag

    def pending_records(self) -> int | None:
        lag = self.lag
        return sum(lag.values()) if lag else None

    def _register_metrics(self, tp: KafkaPartition) -> None:
        """Flink's Kafka source figures: per partition ``KafkaSourceReader.topic.<t>.partition.<p>``
        ``currentOffset``, ``committedOffset`` and ``pendingRecords`` (the lag: records behind the
        log end), read by the metrics thread; the sum is the task's ``pendingRecords`` figure."""
        group = self._ctx.metric_group
        if group is None:
            return
        split = tp.split_id
        g = group.add_group("KafkaSourceReader").add_group("topic", tp.topic).add_group("partition", str(tp.partition))
        g.gauge("currentOffset", lambda: self._offsets.get(tp, -1))
        g.gauge("committedOffset", lambda: self._committed.get(tp, -1))
        g.gauge("pendingRecords", lambda: self.lag.get(split, 0))

    # -- checkpoints ---------------------------------------------------------------------------

    def snapshot_state(self) -> dict[str, Any]:
        return state_of(self._ctx.subtask_index, self._offsets)

    def snapshot_checkpoint(self, checkpoint_id: int) -> dict[str, Any]:
        self._pending[checkpoint_id] = dict(self._offsets)
        return self.snapshot_state()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        covered = [c for c in self._pending if c <= checkpoint_id]
        if not covered:
            return
        offsets = self._pending[max(covered)]
        for c in covered:
            del self._pending[c]
        src = self._source
        if not (src.commit_on_checkpoint and src.group_id and offsets):
            return
        tps = [self._ck.TopicPartition(tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())]
        try:
            self._consumer.commit(offsets=tps, asynchronous=True)
            self._committed.update(offsets)
        except self._ck.KafkaException as exc:  # lag monitoring only: recovery uses the checkpoint
            log.warning("committing offsets of checkpoint %d to group %r failed: %s", checkpoint_id, src.group_id, exc)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._pending.pop(checkpoint_id, None)

    def close(self) -> None:
        try:
            self._consumer.close()
        except RuntimeError:
            pass


class KafkaSourceBuilder:
    """Configures a :class:`KafkaSource` (PyFlink's builder); bootstrap servers and topics are required."""

    def __init__(self) -> None:
        self._bootstrap = ""
        self._properties: dict[str, Any] = {}
        self._subscription: Subscription | None = None
        self._starting = KafkaOffsetsInitializer.earliest()
        self._stopping: KafkaOffsetsInitializer | None = None
        self._deserializer: KafkaRecordDeserializationSchema | None = None

    def set_bootstrap_servers(self, bootstrap_servers: str) -> KafkaSourceBuilder:
        self._bootstrap = bootstrap_servers
        return self

    def set_topics(self, *topics: str) -> KafkaSourceBuilder:
        names = tuple(t for group in topics for t in ([group] if isinstance(group, str) else group))
        if not names or not all(names):
            raise UsageError("set_topics: name at least one topic")
        self._subscription = Subscription(topics=names)
        return self

    def set_topic_pattern(self, topic_pattern: str) -> KafkaSourceBuilder:
        self._subscription = Subscription(pattern=topic_pattern)
        return self

    def set_partitions(self, partitions: Any) -> KafkaSourceBuilder:
        tps = tuple(sorted(KafkaPartition(tp.topic, int(tp.partition)) for tp in partitions))
        if not tps:
            raise UsageError("set_partitions: name at least one KafkaTopicPartition")
        self._subscription = Subscription(partitions=tps)
        return self

    def set_group_id(self, group_id: str) -> KafkaSourceBuilder:
        self._properties["group.id"] = group_id
        return self

    def set_client_id_prefix(self, prefix: str) -> KafkaSourceBuilder:
        self._properties["client.id"] = prefix
        return self

    def set_starting_offsets(self, starting_offsets_initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        self._starting = starting_offsets_initializer
        return self

    def set_unbounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        raise UsageError("set_unbounded(stopping offsets) is not supported: an unbounded KafkaSource reads on",
                         remedy="use set_bounded(...) to stop at given offsets")

    def set_bounded(self, stopping_offsets_initializer: KafkaOffsetsInitializer | None = None) -> KafkaSourceBuilder:
        """Stop at these offsets (``latest()`` by default: the ends when the job is built)."""
        self._stopping = stopping_offsets_initializer or KafkaOffsetsInitializer.latest()
        return self

    def set_value_only_deserializer(self, deserialization_schema: DeserializationSchema) -> KafkaSourceBuilder:
        self._deserializer = KafkaRecordDeserializationSchema.value_only(deserialization_schema)
        return self

    def set_deserializer(self, record_deserializer: KafkaRecordDeserializationSchema) -> KafkaSourceBuilder:
        """A deserializer of whole records (key, headers, timestamp): KafkaRecordDeserializationSchema."""
        self._deserializer = record_deserializer
        return self

    def set_property(self, key: str, value: Any) -> KafkaSourceBuilder:
        self._properties[key] = value
        return self

    def set_properties(self, props: dict[str, Any]) -> KafkaSourceBuilder:
        self._properties.update(props)
        return self

    def build(self) -> KafkaSource:
        """Checks the servers and the topics (exit 3 when no broker answers, 4 for a missing
        topic) and, for a bounded source, fixes where each partition ends."""
        ck = kafka_module()  # in the job program, before the job is submitted
        bootstrap = self._bootstrap or str(self._properties.get("bootstrap.servers", ""))
        if self._subscription is None:
            raise UsageError("KafkaSource needs topics", remedy="call set_topics(...), set_topic_pattern(...) or set_partitions(...)")
        client_config(bootstrap, self._properties)  # refuses missing bootstrap servers
        source = KafkaSource(bootstrap, self._properties, self._subscription, self._starting, None,
                             self._deserializer or KafkaRecordDeserializationSchema.value_only(SimpleStringSchema()))
        consumer = ck.Consumer(source.consumer_config())
        try:
            timeout = _timeout_s(self._properties)
            cluster = cluster_partitions(consumer, self._subscription, bootstrap, timeout, require_topics=True)
            if self._stopping is not None:
                tps = self._subscription.select(cluster)
                with kafka_errors(bootstrap, f"looking up the end offsets of {self._subscription.describe()}"):
                    source.stopping = resolve_offsets(consumer, self._stopping, tps, timeout, source.group_id)
                source.boundedness = Boundedness.BOUNDED
        finally:
            consumer.close()
        return source
