"""Kafka with Avro rows, PyFlink's kafka_avro_format example with its imports renamed.

Writes seven (id, name) records of a TestRecord schema to test_avro_topic (FlinkKafkaProducer),
then reads the topic from its beginning and prints them (FlinkKafkaConsumer). The topic must exist.

    python examples/kafka_avro_format.py --bootstrap-servers 127.0.0.1:9092 --bounded

Needs fastavro (``pip install 'flinkpy[avro]'``). --bootstrap-servers and --bounded are flinkpy's
additions; --bounded stops the read at the end the topic has when it starts
(``scan.bounded.mode``: ``latest-offset``, which PyFlink's consumer ignores). On PyFlink:
``pyflink`` imports and the Avro and Kafka connector jars (``env.add_jars``).
"""

import argparse
import logging
import sys

from flinkpy.common import Types
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import FlinkKafkaConsumer, FlinkKafkaProducer
from flinkpy.datastream.formats.avro import AvroRowDeserializationSchema, AvroRowSerializationSchema

SCHEMA = """
{
    "type": "record",
    "name": "TestRecord",
    "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}]
}"""


def write_to_kafka(env, servers):
    ds = env.from_collection([(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")],
                             type_info=Types.ROW([Types.INT(), Types.STRING()]))
    producer = FlinkKafkaProducer(topic="test_avro_topic",
                                  serialization_schema=AvroRowSerializationSchema(avro_schema_string=SCHEMA),
                                  producer_config={"bootstrap.servers": servers, "group.id": "test_group"})
    ds.add_sink(producer)  # Rows, whose fields the schema names in order
    env.execute()


def read_from_kafka(env, servers, bounded):
    properties = {"bootstrap.servers": servers, "group.id": "test_group_1"}
    if bounded:
        properties["scan.bounded.mode"] = "latest-offset"
    consumer = FlinkKafkaConsumer(topics="test_avro_topic",
                                  deserialization_schema=AvroRowDeserializationSchema(avro_schema_string=SCHEMA),
                                  properties=properties)
    consumer.set_start_from_earliest()
    env.add_source(consumer).print()
    env.execute()


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap-servers", default="localhost:9092")
    p.add_argument("--bounded", action="store_true")
    a, _ = p.parse_known_args(sys.argv[1:])

    env = StreamExecutionEnvironment.get_execution_environment()
    print("start writing data to kafka")
    write_to_kafka(env, a.bootstrap_servers)
    print("start reading data from kafka")
    read_from_kafka(env, a.bootstrap_servers, a.bounded)
