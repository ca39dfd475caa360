"""Kafka with Avro rows, as PyFlink's kafka_avro_format example: records of a TestRecord schema.

    python examples/kafka_avro_format.py --bootstrap-servers 127.0.0.1:9092 --bounded

Needs fastavro (``pip install 'flinkpy[avro]'``). Runs on PyFlink with ``pyflink`` imports.
"""

import argparse
import sys

from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
from flinkpy.datastream.formats.avro import AvroRowDeserializationSchema

TOPIC = "test_avro_topic"
SCHEMA = """
{
    "type": "record",
    "name": "TestRecord",
    "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}]
}"""


def read_from_kafka(env, servers, bounded):
    kafka = KafkaSource.builder().set_topics(TOPIC).set_property("bootstrap.servers", servers)
    kafka.set_value_only_deserializer(AvroRowDeserializationSchema(avro_schema_string=SCHEMA))
    kafka.set_starting_offsets(KafkaOffsetsInitializer.earliest())
    if bounded:
        kafka.set_bounded(KafkaOffsetsInitializer.latest())
    stream = env.from_source(kafka.build(), WatermarkStrategy.no_watermarks(), "kafka source")
    stream.print()
    env.execute()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap-servers", default="localhost:9092")
    p.add_argument("--bounded", action="store_true")
    a, _ = p.parse_known_args(sys.argv[1:])
    read_from_kafka(StreamExecutionEnvironment.get_execution_environment(), a.bootstrap_servers, a.bounded)
