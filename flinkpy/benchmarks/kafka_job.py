"""Contender (c) of the Kafka benchmark: the job as a flinkpy user writes it, run whole with
``flinkpy run``: a KafkaSource (bounded at the input's end) -> split -> key_by word -> count ->
an EXACTLY_ONCE KafkaSink, parallelism 2, exactly-once checkpoints every second. Written in
PyFlink's API (its imports renamed); the same file runs with ``--runner spark``.

    flinkpy run flinkpy/benchmarks/kafka_job.py BOOTSTRAP INPUT OUTPUT GROUP
"""

import sys

from flinkpy.common import SimpleStringSchema, Types, WatermarkStrategy
from flinkpy.datastream import CheckpointingMode, StreamExecutionEnvironment
from flinkpy.datastream.connectors.base import DeliveryGuarantee
from flinkpy.datastream.connectors.kafka import (KafkaOffsetsInitializer, KafkaRecordSerializationSchema, KafkaSink,
                                                 KafkaSource)


def split(line):
    for word in line.split():
        yield word, 1


def main(bootstrap: str, source_topic: str, sink_topic: str, group: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    source = (KafkaSource.builder()
              .set_bootstrap_servers(bootstrap)
              .set_topics(source_topic)
              .set_group_id(group)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest())
              .set_bounded(KafkaOffsetsInitializer.latest())
              .set_value_only_deserializer(SimpleStringSchema())
              .set_property("isolation.level", "read_committed")
              .build())
    sink = (KafkaSink.builder()
            .set_bootstrap_servers(bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                   .set_topic(sink_topic)
                                   .set_value_serialization_schema(SimpleStringSchema())
                                   .build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix(group)
            .build())
    (env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
     .flat_map(split, output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
     .key_by(lambda wc: wc[0])
     .reduce(lambda a, b: (a[0], a[1] + b[1]))
     .map(lambda wc: f"{wc[0]} {wc[1]}", output_type=Types.STRING())
     .sink_to(sink))
    env.execute("kafka word count")


if __name__ == "__main__":
    main(*sys.argv[1:5])
