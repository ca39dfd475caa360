"""The Redis sinks on Spark: written from the driver per micro-batch, keyed by the batch id.

Spark replays a micro-batch after a failure with the same batch id and the same records:

- RedisStreamsSink: the batch's ``XADD``s and a marker, the key ``flinkpy:spark-batch:<sink>``
  set to the batch id, in one ``MULTI``/``EXEC`` transaction; a batch the marker covers already
  was appended before the failure and is skipped. Exactly once (the engine: at-least-once, as a
  replay after its checkpoint appends again); each record to the partition the engine's writer
  picks: by its key's hash, or round-robin over the partitions.
- RedisUpsertSink: the engine's own writer per batch, the batch's last value of each key; a
  replay writes the same values again: exactly once for deterministic results per key, as on
  the engine.

>>> RedisBatchWriter.marker_key("flinkpy_1/totals")
'flinkpy:spark-batch:flinkpy_1/totals'
"""

from __future__ import annotations

from typing import Any

from flinkpy.spark.sinks import BatchWriter


class RedisBatchWriter(BatchWriter):
    """RedisStreamsSink: appends and the batch id in one transaction per batch."""

    guarantee = "exactly-once"

    def __init__(self, sink: Any, sink_id: str) -> None:
        self.sink = sink
        self.marker = self.marker_key(sink_id)
        self.client: Any = None
        self.next_partition = 0

    @staticmethod
    def marker_key(sink_id: str) -> str:
        return f"flinkpy:spark-batch:{sink_id}"

    def write(self, records: list, batch_id: int) -> None:
        from flinkpy.connectors.redis_common import connect, redis_errors, stream_key
        from flinkpy.connectors.redis_sinks import partition_for

        sink = self.sink
        if self.client is None:
            self.client = connect(sink.url)
        with redis_errors(sink.url, f"writing to topic {sink.topic!r}"):
            done = self.client.get(self.marker)
            if done is not None and int(done) >= batch_id:
                return  # appended before a failure: skip the replay
            if not records:
                return
            serialize, select, n = sink.serializer.serialize, sink.key_selector, sink.partitions
            pipe = self.client.pipeline(transaction=True)
            for record in records:
                if select is not None:
                    p = partition_for(select(record), n)
                else:
                    p, self.next_partition = self.next_partition, (self.next_partition + 1) % n
                pipe.xadd(stream_key(sink.topic, p), {sink.value_field: serialize(record)}, maxlen=sink.max_len, approximate=False)
            pipe.set(self.marker, batch_id)
            pipe.execute()

    def describe(self) -> str:
        return f"Redis Streams topic {self.sink.topic!r} (appends and the batch id in one MULTI/EXEC: exactly-once)"


class RedisUpsertBatchWriter(BatchWriter):
    """RedisUpsertSink: the engine's writer, per batch (idempotent for deterministic keyed results)."""

    guarantee = "exactly-once"

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.writer: Any = None

    def write(self, records: list, batch_id: int) -> None:
        from flinkpy.connectors.base import ReaderContext

        if not records:
            return
        if self.writer is None:
            self.writer = self.sink.create_writer(ReaderContext(0, 1))
        self.writer.write(records)

    def describe(self) -> str:
        where = f"hash {self.sink.hash_name!r}" if self.sink.hash_name else f"keys {self.sink.key_prefix or ''}<key>"
        return f"Redis upserts into {where} (the batch's last value per key; a replay writes the same values)"
