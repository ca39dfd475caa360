"""Kafka with JSON rows, PyFlink's kafka_json_format example with its imports renamed.

write_to_kafka writes seven (id, word) rows to test_json_topic as JSON objects with a
FlinkKafkaProducer; read_from_kafka reads the topic from its beginning with a FlinkKafkaConsumer
and prints each row. The topic must exist. Two flinkpy additions: --bootstrap-servers, and
--bounded, which makes the read stop at the end the topic has when it starts (Flink's
``scan.bounded.mode`` set to ``latest-offset``; PyFlink's consumer ignores it and reads on until
cancelled).

    python examples/kafka_json_format.py --bootstrap-servers 127.0.0.1:9092 --bounded

On PyFlink (1.15 to 1.20): ``pyflink`` for ``flinkpy`` in the imports, and the Kafka connector
jar added with ``env.add_jars``.
"""

import argparse
import logging
import sys

from flinkpy.common import Types
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import FlinkKafkaConsumer, FlinkKafkaProducer
from flinkpy.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema


def write_to_kafka(env, servers):
    type_info = Types.ROW([Types.INT(), Types.STRING()])
    rows = [(1, "hi"), (2, "hello"), (3, "hi"), (4, "hello"), (5, "hi"), (6, "hello"), (6, "hello")]
    ds = env.from_collection(rows, type_info=type_info)
    serialization_schema = JsonRowSerializationSchema.Builder().with_type_info(type_info).build()
    producer = FlinkKafkaProducer(topic="test_json_topic", serialization_schema=serialization_schema,
                                  producer_config={"bootstrap.servers": servers, "group.id": "test_group"})
    ds.add_sink(producer)  # the stream must carry Rows of the schema's type
    env.execute()


def read_from_kafka(env, servers, bounded):
    deserialization_schema = JsonRowDeserializationSchema.Builder().type_info(Types.ROW([Types.INT(), Types.STRING()])).build()
    properties = {"bootstrap.servers": servers, "group.id": "test_group_1"}
    if bounded:
        properties["scan.bounded.mode"] = "latest-offset"
    consumer = FlinkKafkaConsumer(topics="test_json_topic", deserialization_schema=deserialization_schema,
                                  properties=properties)
    consumer.set_start_from_earliest()
    env.add_source(consumer).print()
    env.execute()


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--bounded", action="store_true", help="Stop reading at the topic's end.")
    args, _ = parser.parse_known_args(sys.argv[1:])

    env = StreamExecutionEnvironment.get_execution_environment()
    print("start writing data to kafka")
    write_to_kafka(env, args.bootstrap_servers)
    print("start reading data from kafka")
    read_from_kafka(env, args.bootstrap_servers, args.bounded)
