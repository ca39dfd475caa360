"""Kafka values as raw bytes, PyFlink's kafka_bytearray_format example with its imports renamed.

Writes three JSON documents, encoded by the job, to test_bytearray_topic as byte arrays, then
reads the topic from its beginning and prints each value decoded. PyFlink's original is for
Flink 2.0 (which brought ByteArraySchema and dropped FlinkKafkaProducer), so it writes with a
KafkaSink and reads with a KafkaSource. The topic must exist.

    python examples/kafka_bytearray_format.py --bootstrap-servers 127.0.0.1:9092 --bounded

--bootstrap-servers and --bounded (stop the read at the end the topic has when it starts) are
flinkpy's additions. On PyFlink 2.0 or later: ``pyflink`` imports and the Kafka connector jar.
"""

import argparse
import json
import logging
import sys

from flinkpy.common import ByteArraySchema, Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import (KafkaOffsetsInitializer, KafkaRecordSerializationSchema, KafkaSink,
                                                 KafkaSource)


def write_to_kafka(env, servers):
    countries = [(1, "USA"), (2, "Canada"), (3, "Germany")]
    data = [(json.dumps({"id": i, "country": c}).encode("utf-8"),) for i, c in countries]
    ds = env.from_collection(data, type_info=Types.ROW([Types.PRIMITIVE_ARRAY(Types.BYTE())]))
    # bytes out, declared as such (PyFlink would otherwise pickle them)
    ds = ds.map(lambda row: row[0], output_type=Types.PRIMITIVE_ARRAY(Types.BYTE()))
    serializer = (KafkaRecordSerializationSchema.builder().set_topic("test_bytearray_topic")
                  .set_value_serialization_schema(ByteArraySchema()).build())
    sink = (KafkaSink.builder().set_record_serializer(serializer).set_bootstrap_servers(servers)
            .set_property("group.id", "test_group").build())
    ds.sink_to(sink)
    env.execute()


def read_from_kafka(env, servers, bounded):
    builder = (KafkaSource.builder().set_topics("test_bytearray_topic")
               .set_value_only_deserializer(ByteArraySchema())
               .set_properties({"bootstrap.servers": servers, "group.id": "test_group_1"})
               .set_starting_offsets(KafkaOffsetsInitializer.earliest()))
    if bounded:
        builder.set_bounded(KafkaOffsetsInitializer.latest())
    ds = env.from_source(builder.build(), watermark_strategy=WatermarkStrategy.no_watermarks(), source_name="kafka source")
    # the values come as bytes: the job decodes them
    ds.map(lambda data: data.decode("utf-8")).print()
    env.execute()


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
    cli = argparse.ArgumentParser()
    cli.add_argument("--bootstrap-servers", default="localhost:9092")
    cli.add_argument("--bounded", action="store_true")
    given, _ = cli.parse_known_args(sys.argv[1:])

    env = StreamExecutionEnvironment.get_execution_environment()
    print("start writing data to kafka")
    write_to_kafka(env, given.bootstrap_servers)
    print("start reading data from kafka")
    read_from_kafka(env, given.bootstrap_servers, given.bounded)
