"""Kafka with CSV rows, PyFlink's kafka_csv_format example with its imports renamed.

Writes seven (id, word) rows to test_csv_topic as CSV lines (FlinkKafkaProducer), then reads the
topic from its beginning and prints the rows (FlinkKafkaConsumer). The topic must exist.

    python examples/kafka_csv_format.py --bootstrap-servers 127.0.0.1:9092 --bounded

--bootstrap-servers and --bounded are flinkpy's additions; --bounded stops the read at the end
the topic has when it starts (``scan.bounded.mode``: ``latest-offset``, which PyFlink's consumer
ignores). On PyFlink: ``pyflink`` imports and the Kafka connector jar (``env.add_jars``).
"""

import argparse
import logging
import sys

from flinkpy.common import Types
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import FlinkKafkaConsumer, FlinkKafkaProducer
from flinkpy.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema


def write_to_kafka(env, servers):
    type_info = Types.ROW([Types.INT(), Types.STRING()])
    ds = env.from_collection([(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")],
                             type_info=type_info)
    producer = FlinkKafkaProducer(topic="test_csv_topic",
                                  serialization_schema=CsvRowSerializationSchema.Builder(type_info).build(),
                                  producer_config={"bootstrap.servers": servers, "group.id": "test_group"})
    ds.add_sink(producer)
    env.execute()


def read_from_kafka(env, servers, bounded):
    type_info = Types.ROW([Types.INT(), Types.STRING()])
    properties = {"bootstrap.servers": servers, "group.id": "test_group_1"}
    if bounded:
        properties["scan.bounded.mode"] = "latest-offset"
    consumer = FlinkKafkaConsumer(topics="test_csv_topic",
                                  deserialization_schema=CsvRowDeserializationSchema.Builder(type_info).build(),
                                  properties=properties)
    consumer.set_start_from_earliest()
    env.add_source(consumer).print()
    env.execute()


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
    options = argparse.ArgumentParser()
    options.add_argument("--bootstrap-servers", default="localhost:9092")
    options.add_argument("--bounded", action="store_true")
    known, _ = options.parse_known_args(sys.argv[1:])

    env = StreamExecutionEnvironment.get_execution_environment()
    print("start writing data to kafka")
    write_to_kafka(env, known.bootstrap_servers)
    print("start reading data from kafka")
    read_from_kafka(env, known.bootstrap_servers, known.bounded)
