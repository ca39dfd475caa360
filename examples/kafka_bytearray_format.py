"""Kafka values as raw bytes, as PyFlink's kafka_bytearray_format example: JSON documents decoded by the job.

    python examples/kafka_bytearray_format.py --bootstrap-servers 127.0.0.1:9092 --bounded

Runs on PyFlink (2.0 or later, which has ByteArraySchema) with ``pyflink`` imports.
"""

import argparse
import sys

from flinkpy.common import ByteArraySchema, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource

TOPIC = "test_bytearray_topic"


def read_from_kafka(env, servers, bounded):
    stop = KafkaOffsetsInitializer.latest() if bounded else None
    builder = KafkaSource.builder().set_properties({"bootstrap.servers": servers}).set_topics(TOPIC)
    builder = builder.set_value_only_deserializer(ByteArraySchema()).set_starting_offsets(KafkaOffsetsInitializer.earliest())
    source = (builder.set_bounded(stop) if stop else builder).build()
    # the values are bytes: the job decodes them itself
    env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka source").map(lambda data: data.decode("utf-8")).print()
    env.execute()


if __name__ == "__main__":
    cli = argparse.ArgumentParser()
    cli.add_argument("--bootstrap-servers", default="localhost:9092")
    cli.add_argument("--bounded", action="store_true")
    given, _ = cli.parse_known_args(sys.argv[1:])
    read_from_kafka(StreamExecutionEnvironment.get_execution_environment(), given.bootstrap_servers, given.bounded)
