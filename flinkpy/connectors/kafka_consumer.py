"""FlinkKafkaConsumer: PyFlink's legacy Kafka source, as its examples use it, over KafkaSource.

``FlinkKafkaConsumer(topics, deserialization_schema, properties)`` goes to ``env.add_source``;
it starts from the group's committed offsets (``auto.offset.reset`` where there are none, Kafka's
``latest`` by default) unless told otherwise, and commits offsets on completed checkpoints. It
is a :class:`~flinkpy.connectors.kafka_source.KafkaSource` underneath, so it is parallel,
replayable and exactly-once like one; its servers and topics are checked when the job is built.
"""

from __future__ import annotations

from typing import Any

from flinkpy.common.serialization import DeserializationSchema
from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.connectors.kafka_source import KafkaSource
from flinkpy.connectors.kafka_splits import KafkaOffsetsInitializer, KafkaPartition
from flinkpy.errors import UsageError


class FlinkKafkaConsumer(Source):
    """PyFlink's ``FlinkKafkaConsumer``; see the module docstring."""

    guarantee = KafkaSource.guarantee
    needs = KafkaSource.needs
    boundedness = Boundedness.CONTINUOUS_UNBOUNDED

    def __init__(self, topics: str | list[str], deserialization_schema: DeserializationSchema,
                 properties: dict[str, Any]) -> None:
        self._topics = [topics] if isinstance(topics, str) else list(topics)
        if not self._topics:
            raise UsageError("FlinkKafkaConsumer needs at least one topic")
        self._schema = deserialization_schema
        self._properties = dict(properties)
        reset = str(self._properties.get("auto.offset.reset", "latest")).lower()
        self._starting = KafkaOffsetsInitializer.committed_offsets("earliest" if reset in ("earliest", "smallest", "beginning") else "latest")
        self._source: KafkaSource | None = None

    def _configure(self, starting: KafkaOffsetsInitializer) -> FlinkKafkaConsumer:
        self._starting = starting
        self._source = None
        return self

    def set_start_from_earliest(self) -> FlinkKafkaConsumer:
        return self._configure(KafkaOffsetsInitializer.earliest())

    def set_start_from_latest(self) -> FlinkKafkaConsumer:
        return self._configure(KafkaOffsetsInitializer.latest())

    def set_start_from_timestamp(self, startup_offsets_timestamp: int) -> FlinkKafkaConsumer:
        return self._configure(KafkaOffsetsInitializer.timestamp(startup_offsets_timestamp))

    def set_start_from_group_offsets(self) -> FlinkKafkaConsumer:
        return self._configure(KafkaOffsetsInitializer.committed_offsets("latest"))

    def set_start_from_specific_offsets(self, specific_offsets: dict[Any, int]) -> FlinkKafkaConsumer:
        return self._configure(KafkaOffsetsInitializer.offsets(specific_offsets))

    def set_commit_offsets_on_checkpoints(self, commit_on_checkpoints: bool) -> FlinkKafkaConsumer:
        self._properties["commit.offsets.on.checkpoint"] = "true" if commit_on_checkpoints else "false"
        self._source = None
        return self

    def assign_timestamps_and_watermarks(self, watermark_strategy: Any) -> FlinkKafkaConsumer:
        raise UsageError("FlinkKafkaConsumer.assign_timestamps_and_watermarks is not supported",
                         remedy="use KafkaSource with env.from_source(source, watermark_strategy, name)")

    def source(self) -> KafkaSource:
        """The KafkaSource this consumer stands for (built, and its servers checked, once)."""
        if self._source is None:
            self._source = (KafkaSource.builder().set_properties(self._properties)
                            .set_topics(*self._topics).set_starting_offsets(self._starting)
                            .set_value_only_deserializer(self._schema).build())
        return self._source

    def __getstate__(self) -> dict[str, Any]:
        self.source()  # built in the job program, so the task processes do not check again
        return self.__dict__

    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        return self.source().create_reader(ctx)

    def __repr__(self) -> str:
        return f"FlinkKafkaConsumer({self._topics!r})"


__all__ = ["FlinkKafkaConsumer", "KafkaPartition"]
