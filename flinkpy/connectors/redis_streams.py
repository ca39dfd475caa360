"""RedisStreamsSource: a partitioned, replayable log on Redis Streams, read exactly once.

**Topics and partitions.** A *topic* is a fixed set of partitions, and partition ``p`` of topic
``t`` is the Redis stream at key ``t:p`` (``events:0``, ``events:1``, ...): :func:`stream_key`.
Partitions are numbered from 0. The partition count is part of the job, as a Kafka topic's is:
given with ``set_partitions(n)``, or, when not given, discovered once when the source is built
(``SCAN`` for keys ``<topic>:<number>`` of type stream; the count is the highest number + 1).
Discovering at build time, in the client, rather than in each reader, means every subtask and
every restart of the job sees the same partitions; a topic that gains partitions is picked up by
the next submission of the job (a restore keeps reading the partitions it has offsets for).

**Offsets.** Entry ids (``<ms>-<seq>``, strictly increasing within a stream) are the offsets.
A reader's state is, for each partition it owns, the id of the last entry it emitted; reading
resumes strictly after it (``XREAD`` with that id). ``"0-0"`` means "from the beginning".

**Assignment and rescaling.** Partition ``p`` is read by subtask ``p % parallelism``. On a
restore the engine hands every new subtask the states of all old subtasks; each new subtask
pools their offsets and keeps the partitions that the rule assigns to it at the *new*
parallelism, so a job restored at another parallelism still reads every entry exactly once.

**Starting offsets** (:class:`RedisStreamsOffsetsInitializer`) apply to partitions that have no
restored offset: ``earliest()`` (the default), ``latest()``, ``timestamp(ms)`` or explicit
``offsets({partition: id})``. ``latest()`` is resolved to concrete ids when the source is built,
so a restart before the first checkpoint starts from the same place.

**Bounded mode.** ``set_bounded()`` makes the source stop at the last entries present when it is
built (resolved at build time too); by default it is unbounded and waits for new entries.

**Guarantee.** Exactly-once with checkpointing and a transactional or idempotent sink: the
offsets are snapshotted with the barrier, and a restored reader re-reads exactly the entries
after them. This holds only while the entries are still in Redis: a stream trimmed (``XTRIM``,
``XADD MAXLEN``) past a restored offset is detected when the reader starts and fails the job
naming the partition and the ids, unless the job opted in with ``set_skip_trimmed_entries()``.
The check is conservative: it cannot tell "trimmed exactly up to the first unread entry" from
"unread entries were trimmed", and reports both. A reader that falls behind a trim while running
is not detected until the next restore.

Example (the builder follows PyFlink's ``KafkaSource``)::

    source = (RedisStreamsSource.builder()
              .set_url("redis://127.0.0.1:6379/0")
              .set_topic("events")
              .set_partitions(4)
              .set_starting_offsets(RedisStreamsOffsetsInitializer.earliest())
              .set_value_only_deserializer(SimpleStringSchema())
              .build())
    env.from_source(source, WatermarkStrategy.no_watermarks(), "events").uid("events")
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

from flinkpy.common.serialization import DeserializationSchema, SimpleStringSchema
from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.connectors.drivers import REDIS, require
from flinkpy.connectors.redis_common import (
    BEGINNING,
    DEFAULT_VALUE_FIELD,
    OffsetOutOfRangeError,
    connect,
    last_ids,
    parse_id,
    redis_errors,
    resolve_partitions,
    stream_key,
)
from flinkpy.errors import UsageError

log = logging.getLogger("flinkpy.connectors.redis")

_MAX_SEQ = (1 << 64) - 1


# -- starting offsets --------------------------------------------------------------------------


class RedisStreamsOffsetsInitializer:
    """Where partitions without a restored offset start (as PyFlink's KafkaOffsetsInitializer).

    Every kind reads the entries strictly after an id: ``earliest`` after ``0-0``, ``latest``
    after each partition's last entry when the source is built, ``timestamp(ms)`` from the first
    entry added at or after ``ms``, ``offsets`` after the given ids (partitions missing from the
    mapping start at the earliest entry).

    >>> RedisStreamsOffsetsInitializer.timestamp(1700000000000).resolve("u", "t", 1)
    ['1699999999999-18446744073709551615']
    """

    def __init__(self, kind: str, value: Any = None) -> None:
        self.kind = kind
        self.value = value

    @staticmethod
    def earliest() -> RedisStreamsOffsetsInitializer:
        return RedisStreamsOffsetsInitializer("earliest")

    @staticmethod
    def latest() -> RedisStreamsOffsetsInitializer:
        return RedisStreamsOffsetsInitializer("latest")

    @staticmethod
    def timestamp(timestamp_ms: int) -> RedisStreamsOffsetsInitializer:
        if int(timestamp_ms) < 0:
            raise UsageError(f"starting timestamp must be >= 0, got {timestamp_ms}")
        return RedisStreamsOffsetsInitializer("timestamp", int(timestamp_ms))

    @staticmethod
    def offsets(offsets: dict[int, str]) -> RedisStreamsOffsetsInitializer:
        checked = {int(p): "-".join(map(str, parse_id(i))) for p, i in offsets.items()}
        return RedisStreamsOffsetsInitializer("offsets", checked)

    def resolve(self, url: str, topic: str, partitions: int) -> list[str]:
        """The exclusive start id of every partition."""
        if self.kind == "latest":
            return last_ids(url, topic, partitions)
        if self.kind == "timestamp":
            ms = self.value
            return [f"{ms - 1}-{_MAX_SEQ}" if ms > 0 else BEGINNING] * partitions
        if self.kind == "offsets":
            return [self.value.get(p, BEGINNING) for p in range(partitions)]
        return [BEGINNING] * partitions

    @property
    def verifies(self) -> bool:
        """Whether the resolved ids name entries that were in the stream, so that a trim past
        them is a loss worth reporting (not so for ``earliest`` and ``timestamp``)."""
        return self.kind in ("latest", "offsets")

    def __repr__(self) -> str:
        arg = "" if self.value is None else repr(self.value)
        return f"RedisStreamsOffsetsInitializer.{self.kind}({arg})"


# -- the source --------------------------------------------------------------------------------


class StreamEntry(NamedTuple):
    """A whole stream entry, the record of a source built with ``set_emit_entries()``; field
    values are decoded with the source's deserializer."""

    partition: int
    id: str
    fields: dict[str, Any]


class RedisStreamsSource(Source):
    """Reads a Redis Streams topic; build it with :meth:`builder`. See the module docstring."""

    guarantee = "exactly-once"
    needs = (
        "checkpointing, and a transactional or idempotent sink; the streams must not be trimmed "
        "past entries not yet read"
    )

    def __init__(
        self,
        url: str,
        topic: str,
        partitions: int,
        start_ids: list[str],
        verify_start: bool,
        end_ids: list[str] | None,
        deserializer: DeserializationSchema,
        value_field: str,
        emit_entries: bool,
        skip_trimmed: bool,
        idle_block_ms: int,
    ) -> None:
        require(REDIS)  # in the job program, before the job is submitted
        self.url = url
        self.topic = topic
        self.partitions = partitions
        self.start_ids = start_ids
        self.verify_start = verify_start
        self.end_ids = end_ids
        self.deserializer = deserializer
        self.value_field = value_field
        self.emit_entries = emit_entries
        self.skip_trimmed = skip_trimmed
        self.idle_block_ms = idle_block_ms
        self.boundedness = (
            Boundedness.BOUNDED if end_ids is not None else Boundedness.CONTINUOUS_UNBOUNDED
        )

    @staticmethod
    def builder() -> RedisStreamsSourceBuilder:
        return RedisStreamsSourceBuilder()

    def get_boundedness(self) -> Boundedness:
        return self.boundedness

    def assign(self, ctx: ReaderContext) -> tuple[dict[int, str], set[int]]:
        """The partitions of subtask ``ctx`` with their exclusive start ids, and those of them
        whose start id must still be in the stream (restored or resolved from entries)."""
        restored: dict[int, str] = {}
        by_subtask = {int(s["subtask"]): s for s in ctx.restored_state if s}
        for state in by_subtask.values():
            if state.get("topic") != self.topic:
                continue  # the offsets of another topic: this topic starts afresh
            for p, last in state["offsets"]:
                p = int(p)
                if p not in restored or parse_id(last) > parse_id(restored[p]):
                    restored[p] = str(last)
        partitions = set(range(self.partitions)) | set(restored)
        mine = sorted(p for p in partitions if p % ctx.parallelism == ctx.subtask_index)
        offsets: dict[int, str] = {}
        verify: set[int] = set()
        for p in mine:
            if p in restored:
                offsets[p] = restored[p]
                if restored[p] != BEGINNING:
                    verify.add(p)
            else:
                offsets[p] = self.start_ids[p]
                if self.verify_start and offsets[p] != BEGINNING:
                    verify.add(p)
        return offsets, verify

    def create_reader(self, ctx: ReaderContext) -> RedisStreamsReader:
        offsets, verify = self.assign(ctx)
        return RedisStreamsReader(self, ctx, offsets, verify)

    def __repr__(self) -> str:
        return f"RedisStreamsSource({self.url!r}, topic={self.topic!r}, partitions={self.partitions})"


class RedisStreamsReader(SourceReader):
    """Reads its partitions with one non-blocking ``XREAD`` per poll; its state is
    ``{"topic", "subtask", "parallelism", "offsets": [[partition, last id read], ...]}``."""

    def __init__(
        self, source: RedisStreamsSource, ctx: ReaderContext, offsets: dict[int, str], verify: set[int]
    ) -> None:
        self._source = source
        self._ctx = ctx
        self._offsets = offsets
        self._keys = {p: stream_key(source.topic, p) for p in offsets}
        self._partition_of = {k.encode(): p for p, k in self._keys.items()}
        self._bounded = source.end_ids is not None
        self._end: dict[int, tuple[int, int]] = {}
        if self._bounded:
            self._end = {
                p: parse_id(source.end_ids[p]) if p < len(source.end_ids) else (0, 0)
                for p in offsets
            }
        self._active = [p for p in offsets if not self._finished(p)]
        self._next = 0  # rotation start when there are more partitions than records per poll
        self._idle = False
        self._client = connect(source.url)
        if verify:
            self._verify([p for p in sorted(verify) if p in self._active])

    def _finished(self, p: int) -> bool:
        return p in self._end and parse_id(self._offsets[p]) >= self._end[p]

    def _verify(self, partitions: list[int]) -> None:
        """Fail if a partition's start id was trimmed away along with entries after it."""
        if not partitions:
            return
        src = self._source
        with redis_errors(src.url, f"checking the offsets of topic {src.topic!r}"):
            pipe = self._client.pipeline(transaction=False)
            for p in partitions:
                pipe.xrange(self._keys[p], self._offsets[p], self._offsets[p])
                pipe.xinfo_stream(self._keys[p])
            replies = pipe.execute(raise_on_error=False)
        for i, p in enumerate(partitions):
            exists, info = replies[2 * i], replies[2 * i + 1]
            if isinstance(exists, Exception) and "WRONGTYPE" in str(exists):
                with redis_errors(src.url, f"checking the offsets of topic {src.topic!r}"):
                    raise exists
            if exists and not isinstance(exists, Exception):
                continue
            offset = self._offsets[p]
            if isinstance(info, Exception):  # no such key
                problem = f"stream {self._keys[p]!r} does not exist any more"
            else:
                first = info.get("first-entry")
                last = info.get("last-generated-id") or b"0-0"
                if first is not None:
                    if parse_id(first[0]) < parse_id(offset):
                        continue  # the entry itself was deleted (XDEL); later ones are there
                    problem = f"its oldest entry is now {first[0].decode()}"
                elif parse_id(last) > parse_id(offset):
                    problem = f"it is empty, but entries up to {last.decode()} were added"
                else:
                    continue  # emptied after the offset's own entry: nothing after it is gone
            message = (
                f"partition {p} of topic {src.topic!r} ({src.url}) was trimmed past offset "
                f"{offset}: {problem}, so entries after {offset} may have been removed unread"
            )
            if not src.skip_trimmed:
                raise OffsetOutOfRangeError(
                    message,
                    remedy="keep the streams long enough (MAXLEN/MINID) for restores, or accept "
                    "the loss with set_skip_trimmed_entries() and resume at the oldest entry",
                )
            log.warning("%s; skipping to the oldest entry (set_skip_trimmed_entries)", message)

    def poll(self, max_records: int) -> list | None:
        if not self._active:
            if self._bounded:
                return None
            time.sleep(self._source.idle_block_ms / 1000)  # owns no partition: stay, idle
            return []
        active = self._active
        if len(active) > max_records:  # read a rotating subset, one entry each
            start = self._next % len(active)
            active = (active[start:] + active[:start])[: max(1, max_records)]
            self._next = start + len(active)
        count = max(1, max_records // len(active))
        streams = {self._keys[p]: self._offsets[p] for p in active}
        wait = self._source.idle_block_ms
        block = wait if self._idle and wait > 0 and not self._bounded else None
        with redis_errors(self._source.url, f"reading topic {self._source.topic!r}"):
            reply = self._client.xread(streams, count=count, block=block)
        out: list = []
        done: set[int] = set(active) if self._bounded else set()
        for key, entries in reply or ():
            p = self._partition_of[key]
            end = self._end.get(p)
            if end is not None:
                if parse_id(entries[-1][0]) >= end:
                    entries = [e for e in entries if parse_id(e[0]) <= end]
                else:
                    done.discard(p)
            if entries:
                out.extend(self._records(p, entries))
                self._offsets[p] = entries[-1][0].decode()
        if done:
            # bounded: a partition is done at its end id, or when nothing follows its offset
            # (entries added later have ids above the end id, which was the last one at build)
            self._active = [p for p in self._active if p not in done]
        self._idle = not out
        return out

    def _records(self, p: int, entries: list) -> list:
        src = self._source
        deserialize = src.deserializer.deserialize
        if src.emit_entries:
            return [
                StreamEntry(p, i.decode(), {k.decode(): deserialize(v) for k, v in fields.items()})
                for i, fields in entries
            ]
        field = src.value_field.encode()
        try:
            records = [deserialize(fields[field]) for _, fields in entries]
            # None: the schema skips the entry (a bad record with ignore_parse_errors), as Flink's sources do
            return [r for r in records if r is not None]
        except KeyError:
            bad = next((i, f) for i, f in entries if field not in f)
            raise UsageError(
                f"entry {bad[0].decode()} of stream {self._keys[p]!r} has no field "
                f"{src.value_field!r} (its fields: {sorted(k.decode() for k in bad[1])})",
                remedy="write records into that field, set_value_field(...) to the right one, "
                "or set_emit_entries() to get whole entries",
            ) from None

    def snapshot_state(self) -> dict[str, Any]:
        return {
            "topic": self._source.topic,
            "subtask": self._ctx.subtask_index,
            "parallelism": self._ctx.parallelism,
            "offsets": [[p, last] for p, last in sorted(self._offsets.items())],
        }

    def close(self) -> None:
        self._client.close()


class RedisStreamsSourceBuilder:
    """Configures a :class:`RedisStreamsSource`; ``set_url`` and ``set_topic`` are required."""

    def __init__(self) -> None:
        self._url: str | None = None
        self._topic: str | None = None
        self._partitions: int | None = None
        self._starting = RedisStreamsOffsetsInitializer.earliest()
        self._bounded = False
        self._deserializer: DeserializationSchema = SimpleStringSchema()
        self._value_field = DEFAULT_VALUE_FIELD
        self._emit_entries = False
        self._skip_trimmed = False
        self._idle_block_ms = 10

    def set_url(self, url: str) -> RedisStreamsSourceBuilder:
        """The server: ``redis://HOST:PORT/DB``."""
        self._url = url
        return self

    def set_topic(self, topic: str) -> RedisStreamsSourceBuilder:
        """The topic: partitions are the streams ``<topic>:0`` ... ``<topic>:<n-1>``."""
        if not topic:
            raise UsageError("set_topic: the topic name is empty")
        self._topic = topic
        return self

    def set_partitions(self, partitions: int) -> RedisStreamsSourceBuilder:
        """The partition count; without it, it is discovered from the streams at build time."""
        if int(partitions) < 1:
            raise UsageError(f"set_partitions: a topic has at least one partition, got {partitions}")
        self._partitions = int(partitions)
        return self

    def set_starting_offsets(self, initializer: RedisStreamsOffsetsInitializer) -> RedisStreamsSourceBuilder:
        self._starting = initializer
        return self

    def set_bounded(self) -> RedisStreamsSourceBuilder:
        """End at the last entries present when the source is built (BOUNDED)."""
        self._bounded = True
        return self

    def set_value_only_deserializer(self, schema: DeserializationSchema) -> RedisStreamsSourceBuilder:
        """Records are ``schema.deserialize(entry[value field])`` (SimpleStringSchema by default)."""
        self._deserializer = schema
        return self

    def set_value_field(self, field: str) -> RedisStreamsSourceBuilder:
        self._value_field = field
        return self

    def set_emit_entries(self) -> RedisStreamsSourceBuilder:
        """Records are whole entries: :class:`StreamEntry` (partition, id, fields)."""
        self._emit_entries = True
        return self

    def set_skip_trimmed_entries(self, skip: bool = True) -> RedisStreamsSourceBuilder:
        """Resume at the oldest remaining entry when a restored offset was trimmed away, instead
        of failing: the trimmed entries are lost (a warning is logged)."""
        self._skip_trimmed = skip
        return self

    def set_idle_block_ms(self, millis: int) -> RedisStreamsSourceBuilder:
        """How long a poll may wait for entries after one that found none (default 10 ms; 0 never
        waits). Bounds the extra latency of a barrier or a cancel reaching an idle source."""
        self._idle_block_ms = max(0, int(millis))
        return self

    def build(self) -> RedisStreamsSource:
        if not self._url:
            raise UsageError("RedisStreamsSource needs a URL", remedy="call set_url('redis://HOST:PORT/DB')")
        if not self._topic:
            raise UsageError("RedisStreamsSource needs a topic", remedy="call set_topic('name')")
        partitions = resolve_partitions(self._url, self._topic, self._partitions)
        start_ids = self._starting.resolve(self._url, self._topic, partitions)
        end_ids = last_ids(self._url, self._topic, partitions) if self._bounded else None
        return RedisStreamsSource(
            self._url, self._topic, partitions, start_ids, self._starting.verifies, end_ids,
            self._deserializer, self._value_field, self._emit_entries, self._skip_trimmed,
            self._idle_block_ms,
        )
