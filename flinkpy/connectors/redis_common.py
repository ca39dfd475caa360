"""What the Redis connectors share: topic naming, entry ids, connections and their errors.

A *topic* is a set of Redis streams, one per *partition*: partition ``p`` of topic ``t`` is the
stream at key ``t:p`` (:func:`stream_key`), partitions numbered from 0. A topic has no other
record in Redis; its partition count is the highest partition number whose stream exists, plus
one (:func:`discover_partitions`), unless a job states it. :func:`create_topic` makes the empty
streams of a topic so that its partition count is known before anything is written to it.

Entry ids (``<milliseconds>-<sequence>``) are the offsets; :func:`parse_id` makes them
comparable. :func:`connect` checks the server with a PING, and every call to Redis runs under
:func:`redis_errors`, so an unreachable server is reported as :class:`RedisUnreachableError`
naming the URL. redis-py is imported through :mod:`flinkpy.connectors.drivers` (the ``redis``
extra), and every connector asks for it when it is built.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from flinkpy.connectors.drivers import REDIS, require
from flinkpy.errors import ClusterUnreachableError, NotFoundError, UsageError

#: the exclusive start id that reads a stream from its first entry
BEGINNING = "0-0"
#: the field of an entry that holds a record's serialized value
DEFAULT_VALUE_FIELD = "value"
_ID = re.compile(r"^(\d+)-(\d+)$")


class RedisUnreachableError(ClusterUnreachableError):
    """No Redis server answers at the connector's URL."""


class OffsetOutOfRangeError(NotFoundError):
    """A partition's offset points before the oldest entry still in the stream: the entries in
    between were trimmed and would be lost."""


# -- shared helpers (the sinks use them too) ---------------------------------------------------


def stream_key(topic: str, partition: int) -> str:
    """The Redis key of a topic's partition.

    >>> stream_key("events", 3)
    'events:3'
    """
    return f"{topic}:{partition}"


def parse_id(entry_id: str | bytes) -> tuple[int, int]:
    """An entry id as a comparable pair.

    >>> parse_id("1700000000000-2") < parse_id(b"1700000000001-0")
    True
    """
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    match = _ID.match(text)
    if match is None:
        raise UsageError(
            f"{text!r} is not a Redis stream entry id",
            remedy="entry ids look like '1700000000000-0' (milliseconds-sequence)",
        )
    return int(match.group(1)), int(match.group(2))


def connect(url: str) -> Any:
    """A redis-py client for ``url``, checked with a PING (so a wrong URL fails here, clearly)."""
    redis = require(REDIS)
    try:
        client = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=5)
    except ValueError as e:
        raise UsageError(
            f"bad Redis URL {url!r}: {e}", remedy="use redis://HOST:PORT/DB (or rediss:// for TLS)"
        ) from None
    with redis_errors(url):
        client.ping()
    return client


@contextlib.contextmanager
def connection(url: str) -> Iterator[Any]:
    """A checked client for a few calls, closed afterwards."""
    client = connect(url)
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def redis_errors(url: str, doing: str = "") -> Iterator[None]:
    """Turns redis-py's connection failures into :class:`RedisUnreachableError` naming the URL,
    and a key of the wrong type (a topic name clashing with other data) into a UsageError."""
    redis = require(REDIS)

    what = f" while {doing}" if doing else ""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnreachableError(
            f"Redis at {url} is unreachable{what}: {exc}",
            remedy="check that redis-server runs and listens there, and the connector's URL "
            "(set_url('redis://HOST:PORT/DB'))",
        ) from exc
    except redis.ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        raise UsageError(
            f"Redis at {url} refused a command{what}: a key is not of the type the connector "
            f"expects ({exc})",
            remedy="the topic's keys <topic>:<n> must be streams (and an upsert sink's hash a "
            "hash): choose a topic or hash name not used for other data",
        ) from None


def _scan_pattern(topic: str) -> str:
    """A SCAN MATCH pattern for ``<topic>:*`` with the topic's glob characters escaped."""
    return re.sub(r"([\\*?\[\]])", r"\\\1", topic) + ":*"


def discover_partitions(client: Any, topic: str, url: str = "") -> int:
    """The partition count of ``topic``: highest ``<topic>:<n>`` stream key + 1 (0 if none)."""
    prefix = f"{topic}:".encode()
    highest = -1
    with redis_errors(url, f"looking up the partitions of topic {topic!r}"):
        for key in client.scan_iter(match=_scan_pattern(topic), count=1000, _type="stream"):
            suffix = key[len(prefix):]
            if suffix.isdigit():
                highest = max(highest, int(suffix))
    return highest + 1


def create_topic(url: str, topic: str, partitions: int) -> None:
    """Create the (empty) streams of a topic's partitions; existing ones are left as they are."""
    if partitions < 1:
        raise UsageError(f"topic {topic!r} needs at least one partition, got {partitions}")
    redis = require(REDIS)

    with connection(url) as client, redis_errors(url, f"creating topic {topic!r}"):
        for p in range(partitions):
            key = stream_key(topic, p)
            # a consumer group created with MKSTREAM leaves an empty stream behind when dropped
            try:
                client.xgroup_create(key, "flinkpy-create-topic", id="$", mkstream=True)
            except redis.ResponseError as e:
                if "BUSYGROUP" not in str(e):
                    raise UsageError(f"cannot create stream {key!r}: {e}") from None
            client.xgroup_destroy(key, "flinkpy-create-topic")


def resolve_partitions(url: str, topic: str, partitions: int | None) -> int:
    """``partitions`` when given, else the discovered count; a topic without any is an error."""
    if partitions is not None:
        return partitions
    with connection(url) as client:
        found = discover_partitions(client, topic, url)
    if found == 0:
        raise NotFoundError(
            f"topic {topic!r} has no partitions at {url}: no stream named {topic}:<n> exists",
            remedy="create its streams first (create_topic(url, topic, n), or XADD to "
            f"{topic}:0 ...), or give the count with set_partitions(n)",
        )
    return found


def last_ids(url: str, topic: str, partitions: int) -> list[str]:
    """The id of each partition's last entry now (``0-0`` for an empty or missing stream)."""
    with connection(url) as client, redis_errors(url, f"reading the last offsets of topic {topic!r}"):
        pipe = client.pipeline(transaction=False)
        for p in range(partitions):
            pipe.xrevrange(stream_key(topic, p), "+", "-", count=1)
        replies = pipe.execute()
    return [reply[0][0].decode() if reply else BEGINNING for reply in replies]


