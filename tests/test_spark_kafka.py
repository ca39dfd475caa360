"""Kafka on the Spark runner, exactly once (flinkpy/spark/kafka.py), against noida-db.

The same job file as on the engine, ``--runner spark``: a KafkaSource read through the runner's
own data source (confluent-kafka consumers on the executors, offsets per partition in Spark's
checkpoint) and an EXACTLY_ONCE KafkaSink written per micro-batch in one Kafka transaction that
also commits the batch id. The expected output (every running sum per key exactly once) is
computed here from the input, and read back ``read_committed``.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from conftest import poll, run_cli, wait_for
from kafka_servers import kafka  # noqa: F401 - the module's noida-db server
from test_spark_jobs import _cli_json, _committed, _wait_state, spark_env  # noqa: F401 - the Spark jobs' fixture and helpers

pytest.importorskip("pyspark", reason="PySpark is not installed")

KEYS = 4

KAFKA_JOB = '''
"""Running sums per key of "key,n" lines from a Kafka topic into a Kafka topic, exactly once."""

import sys
import time

from flinkpy.common import SimpleStringSchema, Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.base import DeliveryGuarantee
from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaRecordSerializationSchema, KafkaSink, KafkaSource


class Parse:
    def __init__(self, work_ms):
        self.work_s = work_ms / 1000

    def __call__(self, line):
        until = time.perf_counter() + self.work_s
        while time.perf_counter() < until:  # busy, as real work is: kill-task picks busy workers
            pass
        key, n = line.split(",")
        return key, int(n)


bootstrap, source_topic, sink_topic = sys.argv[1:4]
env = StreamExecutionEnvironment.get_execution_environment()
source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(source_topic).set_group_id("sums")
          .set_starting_offsets(KafkaOffsetsInitializer.earliest()).set_bounded(KafkaOffsetsInitializer.latest())
          .set_value_only_deserializer(SimpleStringSchema()).build())
sink = (KafkaSink.builder().set_bootstrap_servers(bootstrap)
        .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(sink_topic)
                               .set_value_serialization_schema(SimpleStringSchema()).build())
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix(sink_topic).build())
(env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
 .map(Parse(float(sys.argv[4])), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).uid("parse")
 .key_by(lambda kv: kv[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sums")
 .map(lambda kv: f"{kv[0]} {kv[1]}", output_type=Types.STRING())
 .sink_to(sink).uid("sink"))
env.execute("kafka sums")
'''


def _write_input(kafka, count: int) -> tuple[str, Counter]:  # noqa: F811
    """``count`` lines "k<i>,n" keyed by k<i>, and every running sum per key exactly once."""
    topic = kafka.new_topic(partitions=4, prefix="spark-in")
    sums: dict[str, int] = {}
    expected: Counter = Counter()
    by_key: dict[str, list[str]] = {}
    for n in range(1, count + 1):
        key = f"k{n % KEYS}"
        sums[key] = sums.get(key, 0) + n
        expected[f"{key} {sums[key]}"] += 1
        by_key.setdefault(key, []).append(f"{key},{n}")
    for key, lines in by_key.items():
        kafka.produce(topic, lines, key=key)
    return topic, expected


def _committed_output(kafka, topic: str, expect: int) -> Counter:  # noqa: F811
    return Counter(m.value().decode() for m in kafka.read(topic, expect=expect, timeout=30))


def test_a_replayed_micro_batch_is_not_written_twice(kafka) -> None:  # noqa: F811
    """A new query attempt (a restarted driver) fences the transactional id, reads the batch id
    committed with the last transaction and skips the batches it covers; an attempt's open
    transaction is aborted."""
    from flinkpy.datastream.connectors.base import DeliveryGuarantee
    from flinkpy.datastream.connectors.kafka import KafkaRecordSerializationSchema, KafkaSink
    from flinkpy.common import SimpleStringSchema
    from flinkpy.spark.kafka import KafkaBatchWriter

    topic = kafka.new_topic(partitions=1, prefix="spark-out")
    sink = (KafkaSink.builder().set_bootstrap_servers(kafka.bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix(topic).build())
    first = KafkaBatchWriter(sink, "s1")
    first.begin(0)
    first.write(["a0", "b0"], 0)
    first.write(["a1"], 1)
    # the driver dies while batch 2 is in its transaction: records produced, nothing committed
    first.writer._producer.begin_transaction()
    first.writer.write(["lost"])
    first.writer._producer.flush(10)
    again = KafkaBatchWriter(sink, "s1")
    again.begin(1)  # Spark had committed batch 0 only: it replays 1, then 2
    again.write(["a1"], 1)
    again.write(["a2"], 2)
    again.close()
    got = [m.value().decode() for m in kafka.read(topic, timeout=30)]
    assert got == ["a0", "b0", "a1", "a2"]
    first.writer._producer = None  # fenced: its close must not touch the new attempt's transaction
    first.close()


@pytest.mark.timeout(360)
def test_kafka_job_on_spark_is_exact_across_a_killed_python_worker(kafka, spark_env: Path, flinkpy_home: Path) -> None:  # noqa: F811
    # six micro-batches of 20 per partition, ~1 s of Python work each: time for a kill to land
    # on a Python worker before the input ends, even on a loaded machine
    count = 480
    source, expected = _write_input(kafka, count)
    sink = kafka.new_topic(partitions=1, prefix="spark-out")
    (spark_env / "kafka_sums.py").write_text(KAFKA_JOB)
    doc = _cli_json("run", "--json", "-d", "--runner", "spark", "-p", "2", "-D", "restart-strategy.type=fixed-delay",
                    "-D", "restart-strategy.fixed-delay.delay=100ms", "-D", "restart-strategy.fixed-delay.attempts=3",
                    "-D", "execution.spark.max-records-per-batch=20", str(spark_env / "kafka_sums.py"),
                    kafka.bootstrap, source, sink, "50", timeout=120)
    jid = doc["jobs"][0]["jid"]
    # the session's start and the first batch (Python workers, state store) take most of the time
    wait_for(lambda: _committed(flinkpy_home, jid) >= 1, timeout=200, interval=0.2, message="a first committed batch")
    seed = random.randrange(2**31)
    print(f"seed {seed}")

    def restarted() -> bool:
        return _cli_json("job", "show", jid)["restarts"] >= 1

    def kill_until_the_query_fails() -> bool:
        res = run_cli("fault", "kill-task", jid, "--seed", str(seed), "--json")
        if res.returncode == 0:
            assert json.loads(res.stdout)["target"]["what"] == "Spark Python worker"
            return bool(poll(restarted, timeout=5, interval=0.2))
        return restarted()

    wait_for(kill_until_the_query_fails, timeout=90, interval=0.1, message="a killed Python worker to fail the query")
    final = _wait_state(jid, ("FINISHED", "FAILED", "CANCELED"), timeout=150)
    assert final["state"] == "FINISHED"
    got = _committed_output(kafka, sink, count)
    assert got == expected, f"duplicates {dict(got - expected)}, missing {dict(expected - got)}"


def test_an_unbounded_kafka_source_is_refused_on_spark_with_its_reason(kafka, tmp_path: Path) -> None:  # noqa: F811
    """Its partitions are not known when it is built, and a reader of several partitions would
    read a batch again with other records: the plan says so, naming the source (exit 7)."""
    source = kafka.new_topic(partitions=2, prefix="spark-in")
    sink = kafka.new_topic(partitions=1, prefix="spark-out")
    job = tmp_path / "unbounded.py"
    job.write_text(KAFKA_JOB.replace(".set_bounded(KafkaOffsetsInitializer.latest())", ""))
    res = run_cli("info", "--runner", "spark", str(job), kafka.bootstrap, source, sink, "0", timeout=60)
    assert res.returncode == 7, res.stderr[-2000:]
    assert "one reader per partition" in res.stderr and "lines" in res.stderr
