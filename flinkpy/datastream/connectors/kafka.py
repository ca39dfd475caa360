"""Kafka connectors as PyFlink's ``pyflink.datastream.connectors.kafka`` exposes them.

>>> from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaTopicPartition
>>> KafkaOffsetsInitializer.offsets({KafkaTopicPartition("events", 0): 42}).value
{KafkaPartition(topic='events', partition=0): 42}
"""

from flinkpy.connectors.kafka_consumer import FlinkKafkaConsumer
from flinkpy.connectors.kafka_source import (
    KafkaRecord,
    KafkaRecordDeserializationSchema,
    KafkaSource,
    KafkaSourceBuilder,
)
from flinkpy.connectors.kafka_splits import KafkaOffsetsInitializer, KafkaTopicPartition
from flinkpy.connectors.kafka_splits import OffsetResetStrategy as KafkaOffsetResetStrategy

__all__ = [
    "FlinkKafkaConsumer",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaRecord",
    "KafkaRecordDeserializationSchema",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaTopicPartition",
]
