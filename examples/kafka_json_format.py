"""Kafka with JSON rows, as PyFlink's kafka_json_format example: (id, word) rows as JSON objects.

Reads the topic from its beginning and prints each row. With --bounded it stops at the end the
topic had when the job started (PyFlink's example reads on until cancelled).

    python examples/kafka_json_format.py --bootstrap-servers 127.0.0.1:9092 --bounded

The program runs unchanged on PyFlink: replace ``flinkpy`` with ``pyflink`` in the imports.
"""

import argparse
import sys

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
from flinkpy.datastream.formats.json import JsonRowDeserializationSchema

TOPIC = "test_json_topic"
ROW = Types.ROW([Types.INT(), Types.STRING()])


def read_from_kafka(env, servers, bounded):
    schema = JsonRowDeserializationSchema.Builder().type_info(ROW).build()
    builder = (KafkaSource.builder()
               .set_topics(TOPIC)
               .set_value_only_deserializer(schema)
               .set_properties({"bootstrap.servers": servers, "group.id": "test_group_1"})
               .set_starting_offsets(KafkaOffsetsInitializer.earliest()))
    if bounded:
        builder.set_bounded(KafkaOffsetsInitializer.latest())
    env.from_source(builder.build(), watermark_strategy=WatermarkStrategy.no_watermarks(), source_name="kafka source").print()
    env.execute()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--bounded", action="store_true", help="Stop at the topic's end when the job starts.")
    args, _ = parser.parse_known_args(sys.argv[1:])
    env = StreamExecutionEnvironment.get_execution_environment()
    print("start reading data from kafka")
    read_from_kafka(env, args.bootstrap_servers, args.bounded)
