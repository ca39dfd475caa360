"""Kafka connectors as PyFlink's ``pyflink.datastream.connectors.kafka`` exposes them.

>>> from flinkpy.datastream.connectors.kafka import KafkaSink, DeliveryGuarantee
>>> KafkaSink.builder().set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE) is not None
True
"""

from flinkpy.connectors.base import DeliveryGuarantee
from flinkpy.connectors.kafka_serialization import KafkaRecordSerializationSchema, KafkaRecordSerializationSchemaBuilder
from flinkpy.connectors.kafka_sink import KafkaSink
from flinkpy.connectors.kafka_sink_builder import FlinkKafkaProducer, KafkaSinkBuilder, Semantic

__all__ = [
    "DeliveryGuarantee",
    "FlinkKafkaProducer",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "Semantic",
]
