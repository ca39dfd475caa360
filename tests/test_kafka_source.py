"""KafkaSource against both Kafka-protocol servers (noida-db and Tansu, ``kafka_any``).

Reader tests drive :class:`KafkaSourceReader` directly (assignment, offsets, rescaled restores,
per-partition event time). Job tests run on one cluster per module: the verification job (a
keyed running count into the two-phase-commit VerifyingSink) reading keyed sequences from a
4-partition topic, with a SIGKILL of a source task, and a stop-with-savepoint rescale 2 -> 3 -> 1;
``flinkpy.connectors.verification.check`` finds nothing lost and nothing twice. Bad input
(unreachable servers, a missing topic, a record the schema cannot read) ends in one line.

Inputs are small; the kill's subtask comes from a seeded RNG (printed; FLINKPY_TEST_SEED).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, cli_json, run_cli, running_cluster, wait_for
from flinkpy.common import Duration, RestartStrategies, Types, WatermarkStrategy
from flinkpy.common.watermark_strategy import TimestampAssigner
from flinkpy.common.serialization import SimpleStringSchema
from flinkpy.connectors.base import Boundedness, ReaderContext
from flinkpy.connectors.kafka_client import KafkaTopicNotFoundError, KafkaUnreachableError
from flinkpy.connectors.verification import VerifyingSink, check, read_committed
from flinkpy.datastream import KeyedProcessFunction, MapFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource, KafkaTopicPartition
from flinkpy.datastream.state import ValueStateDescriptor
from flinkpy.errors import UsageError
from flinkpy.task.watermarks import SplitWatermarks
from kafka_servers import CONSUMER_DEFAULTS
from test_recovery import vertex_id

KEYS = 8
PARTITIONS = 4


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED") or random.randrange(2**32))
    print(f"{name}: seed {seed} (rerun with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory):
    """One cluster for the module; jobs built here (execute_async) and the CLI go to it."""
    path = tmp_path_factory.mktemp("kafka-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLINKPY_HOME", str(path))
        with running_cluster(path, taskmanagers=1, slots=4) as info:
            mp.setenv("FLINKPY_JOBMANAGER", info.rest_address)
            yield info


def produce_sequences(server: Any, topic: str, first: int, last: int) -> None:
    """``"key:seq"`` for seq in first..last of every key, key k into partition k % 4, in order."""
    for k in range(KEYS):
        server.produce(topic, [f"{k}:{s}" for s in range(first, last + 1)], partition=k % PARTITIONS)


def source(server: Any, topic: str, **props: Any) -> KafkaSource:
    b = (KafkaSource.builder().set_bootstrap_servers(server.bootstrap).set_topics(topic)
         .set_starting_offsets(KafkaOffsetsInitializer.earliest())
         .set_value_only_deserializer(SimpleStringSchema()))
    for k, v in props.items():
        b.set_property(k, v)
    return b.build()


def drain(readers: list, want: int, timeout: float = 20, max_records: int = 100) -> list:
    """Poll ``readers`` in turn until at least ``want`` records came (or the deadline)."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        for r in readers:
            out.extend(r.poll(max_records) or [])
    return out


# -- readers ---------------------------------------------------------------------------------


def test_rescaled_readers_read_every_record_once(kafka_any) -> None:
    topic = kafka_any.new_topic(PARTITIONS)
    produce_sequences(kafka_any, topic, 1, 6)
    src = source(kafka_any, topic)
    got: list = []
    states: list = []
    for parallelism, take in ((2, 10), (3, 10), (1, KEYS * 6)):
        readers = [src.create_reader(ReaderContext(i, parallelism, restored_state=states)) for i in range(parallelism)]
        owned = sorted(tp for r in readers for tp in r.split_ids())
        assert owned == sorted(f"{topic}-{p}" for p in range(PARTITIONS)), owned  # each partition once
        got += drain(readers, take - (len(got) if parallelism == 1 else 0), max_records=2)
        states = [r.snapshot_state() for r in readers]
        for r in readers:
            r.close()
    assert sorted(got) == sorted(f"{k}:{s}" for k in range(KEYS) for s in range(1, 7))
    offsets = {split: o for st in states for split, o in st["offsets"].items()}
    assert offsets == {f"{topic}-{p}": 12 for p in range(PARTITIONS)}


def test_bounded_partitions_timestamps_and_split_watermarks(kafka_any) -> None:
    topic = kafka_any.new_topic(2)
    kafka_any.produce(topic, ["a", "b"], partition=0)
    kafka_any.produce(topic, ["c"], partition=1)
    src = (KafkaSource.builder().set_bootstrap_servers(kafka_any.bootstrap)
           .set_partitions([KafkaTopicPartition(topic, 1)]).set_bounded().build())
    reader = src.create_reader(ReaderContext(0, 1))
    batch = drain([reader], 1)
    assert batch == ["c"] and reader.poll(10) is None  # the named partition only, then the end
    reader.close()
    unbounded = source(kafka_any, topic).create_reader(ReaderContext(0, 1))
    stamped = []
    deadline = time.monotonic() + 20
    while len(stamped) < 3 and time.monotonic() < deadline:
        b = unbounded.poll(10)
        stamped += list(zip(b, b.timestamps, b.splits))
    unbounded.close()
    now_ms = time.time() * 1000
    assert sorted(v for v, _, _ in stamped) == ["a", "b", "c"]
    assert all(abs(ts - now_ms) < 60_000 for _, ts, _ in stamped), stamped  # Kafka's record timestamps
    assert {s for v, _, s in stamped if v != "c"} == {f"{topic}-0"}
    wm = SplitWatermarks(WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_millis(50)))
    p0, p1 = f"{topic}-0", f"{topic}-1"
    wm.sync([p0, p1], now=0.0)
    assert wm.current(now=0.01) == (None, False)  # a partition without records holds event time back
    highest: dict[str, int] = {}
    for _, ts, split in stamped:
        wm.on_timestamps(split, [ts], now=0.0)
        highest[split] = max(highest.get(split, ts), ts)
    assert wm.current(now=0.01) == (min(highest.values()) - 1, False)
    wm.on_timestamps(p0, [highest[p0] + 1000], now=0.1)  # partition 1 idle for 100 ms: left out
    assert wm.current(now=0.1) == (highest[p0] + 999, False)


def test_flink_kafka_consumer_reads_like_a_kafka_source(kafka_any) -> None:
    import pickle

    from flinkpy.datastream.connectors.kafka import FlinkKafkaConsumer

    topic = kafka_any.new_topic(2)
    kafka_any.produce(topic, ["x", "y"], partition=1)
    consumer = FlinkKafkaConsumer(topic, SimpleStringSchema(), {"bootstrap.servers": kafka_any.bootstrap, "group.id": "legacy"})
    consumer.set_start_from_earliest()
    shipped = pickle.loads(pickle.dumps(consumer))  # as the job graph carries it to the tasks
    readers = [shipped.create_reader(ReaderContext(i, 2)) for i in range(2)]
    assert sorted(drain(readers, 2)) == ["x", "y"]
    assert {tp for r in readers for tp in r.split_ids()} == {f"{topic}-0", f"{topic}-1"}
    for r in readers:
        r.close()
    # Flink's scan.bounded.mode: latest-offset ends the read where the partitions end now
    props = {"bootstrap.servers": kafka_any.bootstrap, "scan.bounded.mode": "latest-offset"}
    bounded = pickle.loads(pickle.dumps(FlinkKafkaConsumer(topic, SimpleStringSchema(), props)))
    assert bounded.boundedness == Boundedness.BOUNDED
    assert sorted(bounded.source().stopping.values()) == [0, 2]
    with pytest.raises(UsageError, match="scan.bounded.mode 'timestamp' is not supported"):
        FlinkKafkaConsumer(topic, SimpleStringSchema(), {**props, "scan.bounded.mode": "timestamp"})


# -- jobs --------------------------------------------------------------------------------------


class Parse(MapFunction):
    def map(self, value: str) -> tuple:
        k, s = value.split(":")
        return int(k), int(s)


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: tuple, ctx: Any):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield (value[0], value[1], count)


def job(server: Any, topic: str, out: Path, parallelism: int, group: str) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    src = source(server, topic, **{"group.id": group})
    records = env.from_source(src, WatermarkStrategy.no_watermarks(), "kafka").uid("kafka")
    counted = records.map(Parse()).uid("parse").key_by(lambda r: r[0]).process(RunningCount()).uid("count")
    counted.sink_to(VerifyingSink(str(out))).uid("verify")
    return env


def committed(out: Path) -> list:
    return list(read_committed(out)) if out.exists() else []


def exact(out: Path, per_key: int) -> dict:
    report = check(committed(out), KEYS, per_key)
    assert (report["lost"], report["duplicated"], report["mismatched"]) == (0, 0, 0), report
    return report


def vertex_metrics(rest: Any, jid: str, vid: int) -> dict[str, float]:
    """The Kafka figures of a vertex, by Flink's identifiers (``<subtask>.<operator>.<scope>.<name>``)."""
    path = f"/jobs/{jid}/vertices/{vid}/metrics"
    ids = [m["id"] for m in rest.request("GET", path) if "KafkaSourceReader" in m["id"]]
    if not ids:
        return {}
    return {m["id"]: float(m["value"]) for m in rest.request("GET", path, params={"get": ",".join(ids)})}


def group_offsets(server: Any, topic: str, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, **CONSUMER_DEFAULTS})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        c.close()


def test_exactly_once_after_a_source_task_is_killed(kafka_any, kafka_cluster, tmp_path: Path) -> None:
    rng = seeded("kill")
    topic = kafka_any.new_topic(PARTITIONS)
    per_key = 60
    produce_sequences(kafka_any, topic, 1, per_key // 2)
    out, group = tmp_path / "out", f"g-{topic}"
    env = job(kafka_any, topic, out, 2, group)
    vid = vertex_id(env, "kafka")
    client = env.execute_async("kafka kill")
    jid = client.get_job_id()
    wait_for(lambda: len(committed(out)) > 0, timeout=30, message="a first committed checkpoint")
    kill = run_cli("fault", "kill-task", jid, "--vertex", "kafka", "--subtask", str(rng.randrange(2)))
    assert kill.returncode == 0, kill.stderr
    produce_sequences(kafka_any, topic, per_key // 2 + 1, per_key)
    wait_for(lambda: len(committed(out)) >= KEYS * per_key, timeout=40, message="every record committed")
    # offsets reach the group once a checkpoint after the last record completes (lag monitoring)
    ends = {p: 2 * per_key for p in range(PARTITIONS)}
    wait_for(lambda: group_offsets(kafka_any, topic, group) == ends, timeout=20, message=f"group offsets {ends}")
    # the lag per partition reaches the metrics (REST, as job show, top and Prometheus read them)
    from flinkpy.cluster import ClusterHome
    from flinkpy.network.rest_client import RestClient

    rest = RestClient(kafka_cluster.rest_address, ClusterHome(Path(os.environ["FLINKPY_HOME"])).token())
    offsets = lambda: {k: v for k, v in vertex_metrics(rest, jid, vid).items() if k.endswith("currentOffset")}  # noqa: E731
    wait_for(lambda: len(offsets()) == PARTITIONS and set(offsets().values()) == {2 * per_key}, timeout=20,
             message="currentOffset of every partition", describe=offsets)
    lag = lambda: {k: v for k, v in vertex_metrics(rest, jid, vid).items() if k.endswith("pendingRecords")}  # noqa: E731
    wait_for(lambda: len(lag()) == PARTITIONS and set(lag().values()) == {0}, timeout=20,
             message="no lag left on any partition", describe=lag)
    # job show sums the subtasks' figures once each has reported since its restart
    def shown_lag() -> Any:
        (source_vertex,) = [v for v in cli_json("job", "show", jid)["vertices"] if "kafka" in v["name"]]
        return source_vertex["metrics"].get("pendingRecords")

    wait_for(lambda: shown_lag() == 0, timeout=20, message="job show's pendingRecords of the source", describe=shown_lag)
    client.cancel()
    wait_for(lambda: client.get_job_status() in ("CANCELED", "FAILED"), timeout=20)
    exact(out, per_key)
    assert cli_json("job", "show", jid)["restarts"] >= 1


def test_rescale_2_3_1_through_stop_with_savepoint(kafka_any, kafka_cluster, tmp_path: Path) -> None:
    from flinkpy.program.context import ExecutionContext, execution_context

    topic = kafka_any.new_topic(PARTITIONS)
    out, group, per_key = tmp_path / "out", f"g-{topic}", 30
    produce_sequences(kafka_any, topic, 1, 10)
    location = None
    for step, parallelism in enumerate((2, 3, 1)):
        env = job(kafka_any, topic, out, parallelism, group)
        ctx = ExecutionContext(address=kafka_cluster.rest_address, savepoint_path=location) if location else None
        if ctx is not None:
            with execution_context(ctx):
                client = env.execute_async(f"kafka rescale {parallelism}")
        else:
            client = env.execute_async(f"kafka rescale {parallelism}")
        want = KEYS * 10 * (step + 1)
        wait_for(lambda: len(committed(out)) >= want, timeout=40, message=f"{want} committed records")
        if step == 2:
            client.cancel()
            break
        stop = run_cli("stop", "--json", "--savepoint-path", str(tmp_path / "sps"), client.get_job_id())
        assert stop.returncode == 0, stop.stderr
        location = json.loads(stop.stdout)["location"]
        produce_sequences(kafka_any, topic, 10 * (step + 1) + 1, 10 * (step + 2))
        if step == 0 and kafka_any.kind == "noida":  # the CLI's views: one server shows them
            shown = run_cli("checkpoint", "inspect", location)
            assert shown.returncode == 0, shown.stderr
            assert f"offsets.{topic}-0: " in shown.stdout and f"offsets.{topic}-3: " in shown.stdout, shown.stdout
            program = tmp_path / "plan_job.py"
            program.write_text(PLAN_JOB)
            plan = cli_json("savepoint", "plan", "-n", "-p", "3", location, str(program), kafka_any.bootstrap, topic)
            (op,) = [o for o in plan["operators"] if o["uid"] == "kafka"]
            named = sorted(s.split("@")[0] for r in op["splits"] for s in r["splits"])
            assert len(op["splits"]) == 3 and named == [f"{topic}-{p}" for p in range(PARTITIONS)], op
    wait_for(lambda: client.get_job_status() in ("CANCELED", "FAILED"), timeout=20)
    exact(out, per_key)


class ValueTime(TimestampAssigner):
    def extract_timestamp(self, value: str, record_timestamp: int) -> int:
        return int(value.split(":")[1])


def test_event_time_windows_over_per_partition_watermarks(kafka_any, kafka_cluster) -> None:
    """A job whose WatermarkStrategy runs per partition (idleness included) fires every window
    with every record of it."""
    if kafka_any.kind != "noida":
        pytest.skip("the engine's side, alike on both servers: noida-db shows it")
    from flinkpy.datastream.window import TumblingEventTimeWindows

    topic = kafka_any.new_topic(2)
    kafka_any.produce(topic, ["a:1000", "a:1200", "a:5000", "a:9000"], partition=0)
    kafka_any.produce(topic, ["b:1500", "b:1600", "b:9500"], partition=1)
    src = KafkaSource.builder().set_bootstrap_servers(kafka_any.bootstrap).set_topics(topic).set_bounded().build()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    strategy = (WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_seconds(1))
                .with_timestamp_assigner(ValueTime()))
    pairs = env.from_source(src, strategy, "kafka").map(lambda v: (v[0], 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
    counts = pairs.key_by(lambda x: x[0]).window(TumblingEventTimeWindows.of(Duration.of_seconds(2))).reduce(lambda a, b: (a[0], a[1] + b[1]))
    with counts.execute_and_collect("per-partition watermarks") as results:
        got = sorted(results)
    assert got == [("a", 1), ("a", 1), ("a", 2), ("b", 1), ("b", 2)]


PLAN_JOB = textwrap.dedent("""
    import sys
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.kafka import KafkaSource

    source = KafkaSource.builder().set_bootstrap_servers(sys.argv[1]).set_topics(sys.argv[2]).build()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka").uid("kafka").print()
    env.execute("plan")
""")


# -- bad input ---------------------------------------------------------------------------------


JOB = textwrap.dedent("""
    import sys
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.kafka import KafkaSource
    from flinkpy.datastream.formats.json import JsonRowDeserializationSchema
    from flinkpy.common import Types

    servers, topic = sys.argv[1], sys.argv[2]
    schema = JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED(["n"], [Types.INT()])).build()
    source = (KafkaSource.builder().set_bootstrap_servers(servers).set_topics(topic)
              .set_property("default.api.timeout.ms", "2000").set_value_only_deserializer(schema).set_bounded().build())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "kafka").print()
    env.execute("bad input")
""")


def test_bad_input_ends_in_one_line(kafka_any, kafka_cluster, tmp_path: Path) -> None:
    if kafka_any.kind != "noida":
        pytest.skip("the errors come from the client's metadata requests, alike on both servers: noida-db shows them")
    path = tmp_path / "job.py"
    path.write_text(JOB)
    unreachable = run_cli("run", str(path), "127.0.0.1:1", "events")
    assert unreachable.returncode == KafkaUnreachableError.exit_code == 3, unreachable.stderr
    assert "no Kafka broker answers at 127.0.0.1:1" in unreachable.stderr and "Traceback" not in unreachable.stderr
    missing = run_cli("run", str(path), kafka_any.bootstrap, "no-such-topic")
    assert missing.returncode == KafkaTopicNotFoundError.exit_code == 4, missing.stderr
    assert "topic 'no-such-topic' does not exist" in missing.stderr and "Traceback" not in missing.stderr
    topic = kafka_any.new_topic(1)
    kafka_any.produce(topic, ['{"n": 1}', "not json"])
    bad = run_cli("run", str(path), kafka_any.bootstrap, topic)
    assert bad.returncode == 5, bad.stderr
    assert f"record at offset 1 of partition {topic}-0 cannot be deserialized" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


# -- PyFlink's Kafka examples ------------------------------------------------------------------


def test_pyflink_kafka_examples_read_what_was_written(kafka_any, tmp_path: Path) -> None:
    """examples/kafka_*_format.py (PyFlink's, imports renamed) run whole on noida-db: each writes
    its rows to its topic, then reads the topic back and prints what it read, which must be the
    records the topic holds (decoded here on their own) and no others."""
    if kafka_any.kind != "noida":
        pytest.skip("the examples run against noida-db only (one server is enough for them)")
    import io

    import fastavro

    avro = fastavro.parse_schema({"type": "record", "name": "TestRecord",
                                  "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}]})
    decoders = {  # a record's value as the line the example's print sink writes for it
        "json": lambda v: "+I[{}, {}]".format(*json.loads(v).values()),
        "csv": lambda v: "+I[{}, {}]".format(*v.decode().rstrip("\n").split(",")),
        "avro": lambda v: "+I[{id}, {name}]".format(**fastavro.schemaless_reader(io.BytesIO(v), avro)),
        "bytearray": lambda v: v.decode(),
    }
    # on embedded clusters (started side by side), whose print sinks write to the examples' stdout
    env = {k: v for k, v in os.environ.items() if k not in ("FLINKPY_JOBMANAGER", "FLINKPY_HOME")}
    runs = {}
    for fmt in decoders:
        kafka_any.create_topic(f"test_{fmt}_topic")
        runs[fmt] = subprocess.Popen([sys.executable, str(EXAMPLES / f"kafka_{fmt}_format.py"), "--bootstrap-servers",
                                      kafka_any.bootstrap, "--bounded"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**env, "FLINKPY_HOME": str(tmp_path / fmt)}, stdin=subprocess.DEVNULL)
    for fmt, proc in runs.items():
        stdout, stderr = proc.communicate(timeout=90)
        assert proc.returncode == 0, f"{fmt}: {stderr}"
        written = [decoders[fmt](m.value()) for m in kafka_any.read(f"test_{fmt}_topic")]
        assert len(written) == (3 if fmt == "bytearray" else 7), f"{fmt}: the topic holds {written}"
        printed = [line.split("> ", 1)[-1] for line in stdout.splitlines()]
        printed = [line for line in printed if line.startswith(("+I[", "{"))]
        assert sorted(printed) == sorted(written), f"{fmt}: printed {printed}, the topic holds {written}\n{stdout}"
