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
from typing import Any

import pytest

from conftest import poll, run_cli, wait_for
from kafka_servers import kafka  # noqa: F401 - the module's noida-db server
from test_spark_jobs import _cli_json, _committed, _wait_state, spark_env  # noqa: F401 - the Spark jobs' fixture and helpers

pytest.importorskip("pyspark", reason="PySpark is not installed")

from flinkpy.spark.kafka_offsets import KafkaMicroBatches  # noqa: E402 - after the skip

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


def running_sums(count: int) -> Counter:
    """Every running sum per key of the lines "k<i>,n", n = 1..count, exactly once."""
    sums: dict[str, int] = {}
    expected: Counter = Counter()
    for n in range(1, count + 1):
        key = f"k{n % KEYS}"
        sums[key] = sums.get(key, 0) + n
        expected[f"{key} {sums[key]}"] += 1
    return expected


def write_lines(kafka, topic: str, first: int, last: int) -> None:  # noqa: F811
    """Lines "k<i>,n" for n = first..last, keyed by k<i> (a key's lines in order in its partition)."""
    by_key: dict[str, list[str]] = {}
    for n in range(first, last + 1):
        by_key.setdefault(f"k{n % KEYS}", []).append(f"k{n % KEYS},{n}")
    for key, lines in by_key.items():
        kafka.produce(topic, lines, key=key)


def _write_input(kafka, count: int) -> tuple[str, Counter]:  # noqa: F811
    """A 4-partition topic of ``count`` lines "k<i>,n", and every running sum per key exactly once."""
    topic = kafka.new_topic(partitions=4, prefix="spark-in")
    write_lines(kafka, topic, 1, count)
    return topic, running_sums(count)


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


def test_an_unbounded_kafka_source_is_planned_on_kafka_offsets_and_a_moving_bounded_start_refused(kafka, tmp_path: Path) -> None:  # noqa: F811
    """An unbounded source runs on Spark (its offsets are Kafka's); a bounded one starting at
    latest() is still refused with its reason, naming the source (exit 7)."""
    source = kafka.new_topic(partitions=2, prefix="spark-in")
    sink = kafka.new_topic(partitions=1, prefix="spark-out")
    job = tmp_path / "unbounded.py"
    job.write_text(KAFKA_JOB.replace(".set_bounded(KafkaOffsetsInitializer.latest())", ""))
    res = run_cli("info", "--runner", "spark", str(job), kafka.bootstrap, source, sink, "0", timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Kafka offsets per partition" in res.stdout and "last stable offsets" in res.stdout, res.stdout
    job.write_text(KAFKA_JOB.replace("KafkaOffsetsInitializer.earliest()", "KafkaOffsetsInitializer.latest()"))
    res = run_cli("info", "--runner", "spark", str(job), kafka.bootstrap, source, sink, "0", timeout=60)
    assert res.returncode == 7, res.stderr[-2000:]
    assert "starting offsets latest" in res.stderr and "lines" in res.stderr


def _batch_values(batches: KafkaMicroBatches, start: dict, end: dict) -> list[list[str]]:
    """What the executors read for the batch from ``start`` to ``end``: per Kafka partition, in order."""
    import pickle

    return [[pickle.loads(v) for b in batches.read(part) for v in b.column("value").to_pylist()]
            for part in batches.partitions(start, end)]


def test_unbounded_kafka_batches_end_at_the_last_stable_offset_and_read_again_the_same(kafka) -> None:  # noqa: F811
    """Planning stops each partition before an open transaction; a batch read again (on another
    executor, by an unpickled reader) holds the same records, none of an aborted transaction;
    ``latest()`` is resolved once, in the first batch's end offset, however the topic moves."""
    import pickle

    from confluent_kafka import Producer

    from flinkpy.common import SimpleStringSchema
    from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource

    topic = kafka.new_topic(partitions=2, prefix="spark-in")

    def source(start: Any) -> Any:
        return (KafkaSource.builder().set_bootstrap_servers(kafka.bootstrap).set_topics(topic).set_group_id(f"g-{topic}")
                .set_starting_offsets(start).set_value_only_deserializer(SimpleStringSchema()).build())

    kafka.produce(topic, ["a", "b"], partition=0)
    kafka.produce(topic, ["x"], partition=1)
    txn = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{topic}-txn"})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce(topic, "c", partition=0)
    txn.flush(10)
    batches = KafkaMicroBatches(source(KafkaOffsetsInitializer.earliest()), index=0)
    latest = KafkaMicroBatches(source(KafkaOffsetsInitializer.latest()), index=0)
    first = batches.plan(batches.initial(), 0)
    assert first["p"] == {f"{topic}-0": 2, f"{topic}-1": 1} and first["f"] == {f"{topic}-0": 0, f"{topic}-1": 0}
    assert _batch_values(batches, batches.initial(), first) == [["a", "b"], ["x"]]
    from_latest = latest.plan(latest.initial(), 0)
    assert from_latest["p"] == from_latest["f"] == {f"{topic}-0": 2, f"{topic}-1": 1}
    assert batches.plan(first, 0) is first  # nothing decided since: no batch
    txn.commit_transaction(10)
    txn.begin_transaction()
    txn.produce(topic, "aborted", partition=0)
    txn.flush(10)
    txn.abort_transaction(10)
    kafka.produce(topic, ["d", "e", "f"], partition=0)
    second = batches.plan(first, 3)  # at most three offsets: "c", its commit marker, the aborted record
    assert second["p"][f"{topic}-0"] == 5 and "f" not in second
    assert _batch_values(batches, first, second) == [["c"]]
    # a restarted query's new planner goes on from the end offset Spark logged (as JSON)
    restarted = KafkaMicroBatches(source(KafkaOffsetsInitializer.earliest()), index=0)
    third = restarted.plan(json.loads(json.dumps(second)), 0)
    assert third["p"] == {f"{topic}-0": 9, f"{topic}-1": 1} and "f" not in third
    again = pickle.loads(pickle.dumps(batches))  # an executor's copy, without the planner's consumer
    assert _batch_values(batches, second, third) == _batch_values(again, second, third) == [["d", "e", "f"]]
    batches.commit(third)  # Spark committed the batch: its offsets go to the group, for lag
    from confluent_kafka import Consumer, TopicPartition

    group = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{topic}", "session.timeout.ms": 6000})
    try:
        got = group.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
    finally:
        group.close()
    assert {f"{topic}-{tp.partition}": tp.offset for tp in got} == third["p"]
    # latest() stays where the first batch resolved it: a replay of that batch reads nothing
    assert _batch_values(latest, latest.initial(), from_latest) == []
    assert _batch_values(latest, from_latest, latest.plan(from_latest, 0)) == [["c", "d", "e", "f"]]


@pytest.mark.timeout(300)
def test_pyflink_kafka_json_example_prints_on_spark_what_it_wrote(kafka, spark_env: Path, flinkpy_home: Path) -> None:  # noqa: F811
    """examples/kafka_json_format.py (PyFlink's, imports renamed; two execute() calls: write the
    rows, then read the topic back and print them) on the Spark runner: its print sink shows the
    rows the topic holds, decoded here on their own, as on the engine (tests/test_kafka_source.py)."""
    from conftest import ROOT

    kafka.create_topic("test_json_topic")
    res = run_cli("run", "--runner", "spark", str(ROOT / "examples" / "kafka_json_format.py"), "--bootstrap-servers",
                  kafka.bootstrap, "--bounded", timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    written = ["+I[{}, {}]".format(*json.loads(m.value()).values()) for m in kafka.read("test_json_topic", committed_only=False)]
    assert len(written) == 7, written
    printed = [line.split("> ", 1)[-1] for line in res.stdout.splitlines() if line.rstrip().endswith("]")]
    assert Counter(printed) == Counter(written), res.stdout
