"""PyFlink's ways of making a Kafka sink: ``KafkaSink.builder()`` and the legacy
``FlinkKafkaProducer`` (a SinkFunction in PyFlink, given to ``add_sink``; here a
:class:`~flinkpy.connectors.kafka_sink.KafkaSink` under that name, which ``add_sink`` accepts).

>>> from flinkpy.common import SimpleStringSchema
>>> FlinkKafkaProducer("out", SimpleStringSchema(), {"bootstrap.servers": "b:9092"}, semantic=Semantic.EXACTLY_ONCE)
KafkaSink('b:9092', 'out', EXACTLY_ONCE)
"""

from __future__ import annotations

import enum
from typing import Any

from flinkpy.connectors.base import DeliveryGuarantee
from flinkpy.connectors.kafka_serialization import KafkaRecordSerializationSchema
from flinkpy.connectors.kafka_sink import KafkaSink
from flinkpy.errors import ConfigurationError


class KafkaSinkBuilder:
    """``set_bootstrap_servers``, ``set_record_serializer``, optionally
    ``set_delivery_guarantee`` (default NONE, as in Flink), ``set_transactional_id_prefix`` and
    ``set_property``, then ``build()``."""

    def __init__(self) -> None:
        self._servers: str | None = None
        self._serializer: KafkaRecordSerializationSchema | None = None
        self._guarantee = DeliveryGuarantee.NONE
        self._prefix: str | None = None
        self._properties: dict[str, str] = {}

    def set_bootstrap_servers(self, bootstrap_servers: str) -> KafkaSinkBuilder:
        self._servers = bootstrap_servers
        return self

    def set_record_serializer(self, record_serializer: KafkaRecordSerializationSchema) -> KafkaSinkBuilder:
        self._serializer = record_serializer
        return self

    def set_delivery_guarantee(self, delivery_guarantee: DeliveryGuarantee) -> KafkaSinkBuilder:
        self._guarantee = delivery_guarantee
        return self

    def set_transactional_id_prefix(self, transactional_id_prefix: str) -> KafkaSinkBuilder:
        """EXACTLY_ONCE: names the sink's transactional ids (``<prefix>-<subtask>``); unique among
        the jobs writing to the cluster. Default: derived from the job id and the sink."""
        self._prefix = transactional_id_prefix
        return self

    def set_property(self, key: str, value: str) -> KafkaSinkBuilder:
        """A librdkafka producer property (``transaction.timeout.ms``, ``linger.ms``, ...)."""
        if key == "bootstrap.servers":
            self._servers = value
        else:
            self._properties[key] = value
        return self

    def build(self) -> KafkaSink:
        if not self._servers:
            raise ConfigurationError("KafkaSink.builder() needs bootstrap servers", remedy="call set_bootstrap_servers('host:9092')")
        if self._serializer is None:
            raise ConfigurationError("KafkaSink.builder() needs a record serializer",
                                     remedy="call set_record_serializer(KafkaRecordSerializationSchema.builder()...build())")
        return KafkaSink(self._servers, self._serializer, self._guarantee, self._prefix, self._properties)


class Semantic(enum.Enum):
    """FlinkKafkaProducer's delivery semantics (PyFlink's ``Semantic``)."""

    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    NONE = "NONE"


class FlinkKafkaProducer(KafkaSink):
    """``FlinkKafkaProducer(topic, serialization_schema, producer_config, kafka_producer_pool_size,
    semantic)`` as PyFlink's examples give it to ``stream.add_sink``. ``producer_config`` holds
    ``bootstrap.servers`` and producer properties; the pool size has no use here (one
    transactional id per subtask, see :mod:`flinkpy.connectors.kafka_commit`)."""

    def __init__(self, topic: str, serialization_schema: Any, producer_config: dict[str, Any],
                 kafka_producer_pool_size: int = 5, semantic: Semantic = Semantic.AT_LEAST_ONCE) -> None:
        config = {str(k): str(v) for k, v in (producer_config or {}).items()}
        servers = config.pop("bootstrap.servers", "")
        config.pop("group.id", None)  # PyFlink's examples pass it; a producer has no group
        prefix = config.pop("transactional.id", None)
        serializer = KafkaRecordSerializationSchema.builder().set_topic(topic).set_value_serialization_schema(serialization_schema).build()
        super().__init__(servers, serializer, DeliveryGuarantee[Semantic(semantic).name], prefix, config)
        self.write_timestamps = False  # Flink's legacy producer: off unless asked for

    def set_write_timestamp_to_kafka(self, write_timestamp_to_kafka: bool) -> None:
        """Write each record's event timestamp as its Kafka timestamp (off by default, as in
        Flink's FlinkKafkaProducer; a KafkaSink always does)."""
        self.write_timestamps = bool(write_timestamp_to_kafka)
