"""Kafka connectors as PyFlink's ``pyflink.datastream.connectors.kafka`` exposes them.

>>> from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaTopicPartition
>>> KafkaOffsetsInitializer.offsets({KafkaTopicPartition("events", 0): 42}).value
{KafkaPartition(topic='events', partition=0): 42}
>>> from flinkpy.datastream.connectors.kafka import KafkaSink, DeliveryGuarantee
>>> KafkaSink.builder().set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE) is not None
True
"""

from flinkpy.connectors.base import DeliveryGuarantee
from flinkpy.connectors.kafka_consumer import FlinkKafkaConsumer
from flinkpy.connectors.kafka_serialization import KafkaRecordSerializationSchema, KafkaRecordSerializationSchemaBuilder
from flinkpy.connectors.kafka_sink import KafkaSink
from flinkpy.connectors.kafka_sink_builder import FlinkKafkaProducer, KafkaSinkBuilder, Semantic
from flinkpy.connectors.kafka_source import (
    KafkaRecord,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    KafkaSourceBuilder,
)
from flinkpy.connectors.kafka_splits import KafkaOffsetsInitializer, KafkaTopicPartition
from flinkpy.connectors.kafka_splits import OffsetResetStrategy as KafkaOffsetResetStrategy

__all__ = [
    "DeliveryGuarantee",
    "FlinkKafkaConsumer",
    "FlinkKafkaProducer",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaRecord",
    "KafkaRecordDeserializationSchema",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaTopicPartition",
    "Semantic",
]
