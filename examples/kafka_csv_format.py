"""Kafka with CSV rows, as PyFlink's kafka_csv_format example: (id, word) rows as CSV lines.

    python examples/kafka_csv_format.py --bootstrap-servers 127.0.0.1:9092 --bounded

--bounded stops at the topic's end when the job starts. Runs on PyFlink with ``pyflink`` imports.
"""

import argparse
import sys

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
from flinkpy.datastream.formats.csv import CsvRowDeserializationSchema

TOPIC = "test_csv_topic"


def read_from_kafka(env, servers, bounded):
    rows = CsvRowDeserializationSchema.Builder(Types.ROW([Types.INT(), Types.STRING()])).build()
    source = KafkaSource.builder().set_bootstrap_servers(servers).set_group_id("test_group_1").set_topics(TOPIC)
    source.set_starting_offsets(KafkaOffsetsInitializer.earliest()).set_value_only_deserializer(rows)
    if bounded:
        source.set_bounded(KafkaOffsetsInitializer.latest())
    env.from_source(source.build(), WatermarkStrategy.no_watermarks(), "kafka source").print()
    env.execute()


if __name__ == "__main__":
    options = argparse.ArgumentParser()
    options.add_argument("--bootstrap-servers", default="localhost:9092")
    options.add_argument("--bounded", action="store_true")
    known, _ = options.parse_known_args(sys.argv[1:])
    read_from_kafka(StreamExecutionEnvironment.get_execution_environment(), known.bootstrap_servers, known.bounded)
