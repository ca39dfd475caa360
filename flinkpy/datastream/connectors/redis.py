"""The Redis connectors: a Redis Streams source and sink (topics of partitioned streams, entry
ids as offsets) and an upsert sink.

>>> from flinkpy.datastream.connectors.redis import RedisStreamsSource, RedisUpsertSink
>>> RedisStreamsSource.guarantee, RedisUpsertSink.guarantee
('exactly-once', 'exactly-once')
"""

from flinkpy.connectors.redis_common import (
    OffsetOutOfRangeError,
    RedisUnreachableError,
    create_topic,
    stream_key,
)
from flinkpy.connectors.redis_sinks import (
    RedisStreamsSink,
    RedisStreamsSinkBuilder,
    RedisUpsertSink,
    RedisUpsertSinkBuilder,
    partition_for,
    produce,
)
from flinkpy.connectors.redis_streams import (
    RedisStreamsOffsetsInitializer,
    RedisStreamsSource,
    RedisStreamsSourceBuilder,
    StreamEntry,
)

__all__ = [
    "OffsetOutOfRangeError",
    "RedisStreamsOffsetsInitializer",
    "RedisStreamsSink",
    "RedisStreamsSinkBuilder",
    "RedisStreamsSource",
    "RedisStreamsSourceBuilder",
    "RedisUnreachableError",
    "RedisUpsertSink",
    "RedisUpsertSinkBuilder",
    "StreamEntry",
    "create_topic",
    "partition_for",
    "produce",
    "stream_key",
]
