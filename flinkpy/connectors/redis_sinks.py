"""Redis sinks: append to a Redis Streams topic (at-least-once), or upsert by key (idempotent).

:class:`RedisStreamsSink` appends every record as a new entry (``XADD``) to one partition of a
topic (see :mod:`flinkpy.connectors.redis_common` for topics and partitions), so that another job
can read it with :class:`~flinkpy.connectors.redis_streams.RedisStreamsSource`: jobs chained
through Redis. The partition is ``stable_hash(key) % partitions`` when a key selector is set (so a
key always lands in one partition, in order), round-robin otherwise. The record is serialized
into the entry's ``value`` field. Each batch the writer receives is pipelined (one round trip
per few thousand records) and acknowledged by Redis before ``write`` returns — nothing is
buffered, so there is nothing left to flush at a snapshot: everything before a checkpoint's
barrier is in Redis before the checkpoint completes. A failure replays the records after the checkpoint,
and they are appended again: **at-least-once**. ``set_max_len(n)`` keeps each stream at its
newest ``n`` entries (exact ``MAXLEN``) — a reader that falls behind loses the trimmed entries.

:class:`RedisUpsertSink` writes each record under its key: ``HSET <hash> <key> <value>`` (or
``SET <prefix><key> <value>``), the last record of a key in a batch winning. A replay writes the
same keys again; when results are deterministic per key (a keyed aggregation, say) the replayed
values are the ones written before the failure, so the final contents are exact:
**exactly-once for deterministic keyed results** (a reader may see a key step back to an older
value while the replay catches up).

>>> sink = (RedisUpsertSink.builder().set_url("redis://127.0.0.1:6379/0").set_hash("totals")
...         .set_key_selector(lambda r: r[0]).set_value_selector(lambda r: r[1]).build())
>>> sink.guarantee
'exactly-once'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flinkpy.common.serialization import SerializationSchema, SimpleStringSchema
from flinkpy.connectors.base import ReaderContext, Sink, SinkWriter
from flinkpy.connectors.drivers import REDIS, require
from flinkpy.connectors.redis_common import (
    DEFAULT_VALUE_FIELD,
    connect,
    redis_errors,
    resolve_partitions,
    stream_key,
)
from flinkpy.errors import UsageError
from flinkpy.state.key_groups import stable_hash

#: commands sent per pipeline round trip at most (a big batch takes a few)
PIPELINE_CHUNK = 5_000


def partition_for(key: Any, partitions: int) -> int:
    """The partition of a record with ``key``: the same in every process and run.

    >>> partition_for("user-7", 4) == partition_for("user-7", 4)
    True
    """
    return stable_hash(key) % partitions


def _check_url(url: str | None, what: str) -> str:
    if not url:
        raise UsageError(f"{what} needs a URL", remedy="call set_url('redis://HOST:PORT/DB')")
    return url


# -- Redis Streams sink ------------------------------------------------------------------------


class RedisStreamsSink(Sink):
    """Appends records to a topic's streams; build it with :meth:`builder`."""

    guarantee = "at-least-once"
    needs = (
        "checkpointing (batches are acknowledged by Redis before the checkpoint completes); "
        "records replayed after a failure are appended again"
    )

    def __init__(
        self,
        url: str,
        topic: str,
        partitions: int,
        key_selector: Callable[[Any], Any] | None,
        serializer: SerializationSchema,
        value_field: str,
        max_len: int | None,
    ) -> None:
        require(REDIS)  # in the job program, before the job is submitted
        self.url = url
        self.topic = topic
        self.partitions = partitions
        self.key_selector = key_selector
        self.serializer = serializer
        self.value_field = value_field
        self.max_len = max_len

    @staticmethod
    def builder() -> RedisStreamsSinkBuilder:
        return RedisStreamsSinkBuilder()

    def create_writer(self, ctx: ReaderContext) -> RedisStreamsWriter:
        return RedisStreamsWriter(self, ctx)

    def __repr__(self) -> str:
        return f"RedisStreamsSink({self.url!r}, topic={self.topic!r}, partitions={self.partitions})"


class RedisStreamsWriter(SinkWriter):
    """``XADD``s each batch through one pipeline; nothing is buffered between batches."""

    def __init__(self, sink: RedisStreamsSink, ctx: ReaderContext) -> None:
        self._sink = sink
        self._keys = [stream_key(sink.topic, p) for p in range(sink.partitions)]
        self._next = ctx.subtask_index % sink.partitions  # round-robin, staggered by subtask
        self._client = connect(sink.url)

    def write(self, records: list) -> None:
        sink = self._sink
        serialize = sink.serializer.serialize
        select = sink.key_selector
        n = sink.partitions
        field = sink.value_field
        with redis_errors(sink.url, f"writing to topic {sink.topic!r}"):
            pipe = self._client.pipeline(transaction=False)
            for i, record in enumerate(records):
                if select is not None:
                    p = partition_for(select(record), n)
                else:
                    p = self._next
                    self._next = (p + 1) % n
                pipe.xadd(self._keys[p], {field: serialize(record)}, maxlen=sink.max_len, approximate=False)
                if (i + 1) % PIPELINE_CHUNK == 0:
                    pipe.execute()
            pipe.execute()

    def close(self) -> None:
        self._client.close()


class RedisStreamsSinkBuilder:
    """Configures a :class:`RedisStreamsSink`; ``set_url`` and ``set_topic`` are required."""

    def __init__(self) -> None:
        self._url: str | None = None
        self._topic: str | None = None
        self._partitions: int | None = None
        self._key_selector: Callable[[Any], Any] | None = None
        self._serializer: SerializationSchema = SimpleStringSchema()
        self._value_field = DEFAULT_VALUE_FIELD
        self._max_len: int | None = None

    def set_url(self, url: str) -> RedisStreamsSinkBuilder:
        self._url = url
        return self

    def set_topic(self, topic: str) -> RedisStreamsSinkBuilder:
        if not topic:
            raise UsageError("set_topic: the topic name is empty")
        self._topic = topic
        return self

    def set_partitions(self, partitions: int) -> RedisStreamsSinkBuilder:
        """The partition count; without it, the topic's existing streams tell (at build time)."""
        if int(partitions) < 1:
            raise UsageError(f"set_partitions: a topic has at least one partition, got {partitions}")
        self._partitions = int(partitions)
        return self

    def set_key_selector(self, key_selector: Callable[[Any], Any]) -> RedisStreamsSinkBuilder:
        """Partition by ``stable_hash(key_selector(record))``: a key's records stay in order."""
        self._key_selector = key_selector
        return self

    def set_value_serialization_schema(self, schema: SerializationSchema) -> RedisStreamsSinkBuilder:
        self._serializer = schema
        return self

    def set_value_field(self, field: str) -> RedisStreamsSinkBuilder:
        self._value_field = field
        return self

    def set_max_len(self, max_len: int) -> RedisStreamsSinkBuilder:
        """Trim each stream to its newest ``max_len`` entries on every append (exact)."""
        if int(max_len) < 1:
            raise UsageError(f"set_max_len: must be at least 1, got {max_len}")
        self._max_len = int(max_len)
        return self

    def build(self) -> RedisStreamsSink:
        url = _check_url(self._url, "RedisStreamsSink")
        if not self._topic:
            raise UsageError("RedisStreamsSink needs a topic", remedy="call set_topic('name')")
        partitions = resolve_partitions(url, self._topic, self._partitions)
        return RedisStreamsSink(
            url, self._topic, partitions, self._key_selector, self._serializer,
            self._value_field, self._max_len,
        )


def produce(
    url: str,
    topic: str,
    records: Iterable[Any],
    *,
    partitions: int | None = None,
    key_selector: Callable[[Any], Any] | None = None,
    serializer: SerializationSchema | None = None,
) -> None:
    """Append ``records`` to a topic exactly as :class:`RedisStreamsSink` would (test data, or
    feeding a job from a script)."""
    builder = RedisStreamsSink.builder().set_url(url).set_topic(topic)
    if partitions is not None:
        builder.set_partitions(partitions)
    if key_selector is not None:
        builder.set_key_selector(key_selector)
    if serializer is not None:
        builder.set_value_serialization_schema(serializer)
    writer = builder.build().create_writer(ReaderContext(subtask_index=0, parallelism=1))
    try:
        writer.write(list(records))
    finally:
        writer.close()


# -- upsert sink -------------------------------------------------------------------------------


class RedisUpsertSink(Sink):
    """Writes each record's value under its key, in a hash or as plain keys; see the module
    docstring for the guarantee. Build it with :meth:`builder`."""

    guarantee = "exactly-once"
    needs = (
        "deterministic results per key (a replay rewrites the same values); checkpointing; "
        "readers may see a key's older value again while a replay catches up"
    )

    def __init__(
        self,
        url: str,
        hash_name: str | None,
        key_prefix: str | None,
        key_selector: Callable[[Any], Any],
        value_selector: Callable[[Any], Any] | None,
        serializer: SerializationSchema,
    ) -> None:
        require(REDIS)  # in the job program, before the job is submitted
        self.url = url
        self.hash_name = hash_name
        self.key_prefix = key_prefix
        self.key_selector = key_selector
        self.value_selector = value_selector
        self.serializer = serializer

    @staticmethod
    def builder() -> RedisUpsertSinkBuilder:
        return RedisUpsertSinkBuilder()

    def create_writer(self, ctx: ReaderContext) -> RedisUpsertWriter:
        return RedisUpsertWriter(self)

    def __repr__(self) -> str:
        where = f"hash={self.hash_name!r}" if self.hash_name else f"key_prefix={self.key_prefix!r}"
        return f"RedisUpsertSink({self.url!r}, {where})"


class RedisUpsertWriter(SinkWriter):
    """One ``HSET`` (or ``MSET``) per batch with the batch's last value of each key."""

    def __init__(self, sink: RedisUpsertSink) -> None:
        self._sink = sink
        self._client = connect(sink.url)

    def write(self, records: list) -> None:
        sink = self._sink
        key_of = sink.key_selector
        value_of = sink.value_selector
        serialize = sink.serializer.serialize
        latest: dict[Any, Any] = {}
        for record in records:
            latest[key_of(record)] = record
        if not latest:
            return
        mapping = {
            _redis_key(k): serialize(value_of(r) if value_of is not None else r)
            for k, r in latest.items()
        }
        with redis_errors(sink.url, "writing upserts"):
            if sink.hash_name is not None:
                self._client.hset(sink.hash_name, mapping=mapping)
            else:
                prefix = sink.key_prefix or ""
                self._client.mset({_prefixed(prefix, k): v for k, v in mapping.items()})

    def close(self) -> None:
        self._client.close()


def _redis_key(key: Any) -> str | bytes:
    """Keys are written as given when str or bytes, otherwise as ``str(key)``."""
    return key if isinstance(key, (str, bytes)) else str(key)


def _prefixed(prefix: str, key: str | bytes) -> str | bytes:
    return prefix.encode() + key if isinstance(key, bytes) else prefix + key


class RedisUpsertSinkBuilder:
    """Configures a :class:`RedisUpsertSink`: ``set_url``, ``set_key_selector`` and one of
    ``set_hash`` / ``set_key_prefix`` are required."""

    def __init__(self) -> None:
        self._url: str | None = None
        self._hash: str | None = None
        self._prefix: str | None = None
        self._key_selector: Callable[[Any], Any] | None = None
        self._value_selector: Callable[[Any], Any] | None = None
        self._serializer: SerializationSchema = SimpleStringSchema()

    def set_url(self, url: str) -> RedisUpsertSinkBuilder:
        self._url = url
        return self

    def set_hash(self, name: str) -> RedisUpsertSinkBuilder:
        """Write ``HSET name <key> <value>``."""
        self._hash, self._prefix = name, None
        return self

    def set_key_prefix(self, prefix: str) -> RedisUpsertSinkBuilder:
        """Write ``SET <prefix><key> <value>`` (one Redis key per record key)."""
        self._prefix, self._hash = prefix, None
        return self

    def set_key_selector(self, key_selector: Callable[[Any], Any]) -> RedisUpsertSinkBuilder:
        self._key_selector = key_selector
        return self

    def set_value_selector(self, value_selector: Callable[[Any], Any]) -> RedisUpsertSinkBuilder:
        """What of the record is stored (the whole record by default), before serialization."""
        self._value_selector = value_selector
        return self

    def set_value_serialization_schema(self, schema: SerializationSchema) -> RedisUpsertSinkBuilder:
        self._serializer = schema
        return self

    def build(self) -> RedisUpsertSink:
        url = _check_url(self._url, "RedisUpsertSink")
        if self._key_selector is None:
            raise UsageError("RedisUpsertSink needs a key", remedy="call set_key_selector(fn)")
        if self._hash is None and self._prefix is None:
            raise UsageError(
                "RedisUpsertSink needs a place to write",
                remedy="call set_hash('name') (one hash) or set_key_prefix('prefix:') (plain keys)",
            )
        return RedisUpsertSink(
            url, self._hash, self._prefix, self._key_selector, self._value_selector, self._serializer
        )
