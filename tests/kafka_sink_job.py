"""The Kafka sink's verification job: keyed sequences (SequenceSource) written to a topic through
a KafkaSink, read back by tests/test_kafka_sink.py with read_committed and checked per key.

    python kafka_sink_job.py BOOTSTRAP TOPIC GUARANTEE KEYS PER_KEY RATE [SPLIT [INPUT]]

``SPLIT`` (``split``) puts the sink in a vertex of its own behind a rebalance, so that a fault
point can name it alone. ``INPUT`` (a topic) reads the sequences from Kafka instead (a bounded
KafkaSource, paced to RATE records per second), Kafka to Kafka.
"""

from __future__ import annotations

import ast
import sys
import time

from flinkpy.common import RestartStrategies, SimpleStringSchema, WatermarkStrategy
from flinkpy.connectors.verification import SequenceSource
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.base import DeliveryGuarantee
from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaRecordSerializationSchema, KafkaSink, KafkaSource


class Paced:
    """Parses ``"(key, seq)"`` and holds each subtask to ``rate`` records per second, so that
    checkpoints (and faults) land inside a bounded input read in a blink."""

    def __init__(self, rate: float) -> None:
        self.rate, self.count, self.started = rate, 0, 0.0

    def __call__(self, text: str) -> tuple:
        if not self.count:
            self.started = time.monotonic()
        self.count += 1
        ahead = self.count / self.rate - (time.monotonic() - self.started)
        if ahead > 0.01:
            time.sleep(ahead)  # pacing the input, not waiting for the job's progress
        return ast.literal_eval(text)


def build(bootstrap: str, topic: str, guarantee: str, keys: int, per_key: int, rate: float, split: bool = False,
          input_topic: str | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(150)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(20, 500))
    sink = (KafkaSink.builder()
            .set_bootstrap_servers(bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder()
                                   .set_topic(topic).set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee[guarantee])
            .set_property("transaction.timeout.ms", "5000")
            .set_property("message.timeout.ms", "3000")
            .build())
    if input_topic:
        source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(input_topic)
                  .set_starting_offsets(KafkaOffsetsInitializer.earliest())
                  .set_value_only_deserializer(SimpleStringSchema()).set_bounded().build())
        numbers = env.from_source(source, WatermarkStrategy.no_watermarks(), "sequence").uid("sequence").map(Paced(rate / 2))
    else:
        numbers = env.from_source(SequenceSource(keys, per_key, rate), WatermarkStrategy.no_watermarks(), "sequence").uid("sequence")
    if split:
        numbers = numbers.rebalance()
    numbers.sink_to(sink).name("kafka").uid("kafka")
    return env


if __name__ == "__main__":
    a = sys.argv[1:]
    build(a[0], a[1], a[2], int(a[3]), int(a[4]), float(a[5]), len(a) > 6 and a[6] == "split", a[7] if len(a) > 7 else None).execute(
        "kafka sink verification")
