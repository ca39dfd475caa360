"""Programs shaped beyond one pipeline per file run on Spark with the engine's results.

- *a SourceFunction* (``add_source``) into Redis sinks, stopped and started again mid-way;
- *an interval join*: examples/orders_shipments.py;
- *several execute() calls*: a file shaped like PyFlink's ``basic_operations.py`` (a helper that
  prints a stream and calls ``env.execute()``, here twice, for a map over named rows and a keyed
  running sum: each Spark job costs a driver's start) runs two jobs on each runner, one after the
  other, each with its own job id; ``flinkpy run --runner spark`` prints what ``flinkpy run`` prints on
  the engine, job by job.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, run_cli

pytest.importorskip("pyspark", reason="PySpark is not installed (pip install -e '.[spark]')")

from test_spark_operators import _engine_records  # noqa: E402  (tests/ is on sys.path)

pytestmark = pytest.mark.timeout(600)

TWO_JOBS = '''
import json

from flinkpy.common import Types
from flinkpy.datastream import StreamExecutionEnvironment


def show(ds, env, name):
    ds.print()
    env.execute(name)


def with_tel_plus_one(row):
    info = json.loads(row.info)
    info["tel"] += 1
    return row.id, json.dumps(info, sort_keys=True)


def main():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    people = [(1, {"name": "Ada", "tel": 100, "addr": {"country": "UK"}}),
              (2, {"name": "Linus", "tel": 200, "addr": {"country": "Finland"}}),
              (3, {"name": "Grace", "tel": 300, "addr": {"country": "USA"}}),
              (4, {"name": "Alan", "tel": 400, "addr": {"country": "UK"}})]
    ds = env.from_collection([(i, json.dumps(p)) for i, p in people],
                             type_info=Types.ROW_NAMED(["id", "info"], [Types.INT(), Types.STRING()]))
    show(ds.map(with_tel_plus_one), env, "map")
    show(ds.map(lambda row: (json.loads(row.info)["addr"]["country"], json.loads(row.info)["tel"]),
                output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
         .key_by(lambda t: t[0]).sum(1), env, "key_by")


if __name__ == "__main__":
    main()
'''


def _cli_process(*args: str) -> subprocess.Popen:
    """``flinkpy ARGS`` started, not waited for (read it with ``communicate``)."""
    return subprocess.Popen([sys.executable, "-m", "commands.main", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, cwd=str(ROOT))


def _printed(stdout: str) -> list[str]:
    """The records a run printed, in order (PyFlink's print form, without a subtask prefix)."""
    return [line.split("> ", 1)[-1] for line in stdout.splitlines() if line.strip()]


def test_a_file_with_two_execute_calls_runs_two_jobs_as_on_the_engine(flinkpy_home: Path, tmp_path: Path) -> None:
    job = tmp_path / "basic_operations.py"
    job.write_text(TWO_JOBS)
    # both runners at once: each waits on its own processes much of the time
    engine = _cli_process("run", str(job))
    spark = run_cli("run", "--runner", "spark", str(job), timeout=540, env={"SPARK_LOCAL_IP": "127.0.0.1"})
    assert spark.returncode == 0, spark.stderr[-3000:]
    engine_out, engine_err = engine.communicate(timeout=120)
    assert engine.returncode == 0, engine_err[-3000:]
    engine_records, spark_records = _printed(engine_out), _printed(spark.stdout)
    assert len(engine_records) == 4 + 4 and engine_records[-1] == "(UK,500)", engine_records
    # the map job's records in the engine's order, then the running sums per key in its order
    assert spark_records[:4] == engine_records[:4]
    for country in ("UK", "Finland", "USA"):
        assert [r for r in spark_records[4:] if r.startswith(f"({country},")] == [r for r in engine_records[4:] if r.startswith(f"({country},")]
    assert sorted(spark_records) == sorted(engine_records)
    listed = json.loads(run_cli("list", "-a", "--json").stdout)["jobs"]
    assert sorted((j["name"], j["state"]) for j in listed if j.get("runner") == "spark") == [("key_by", "FINISHED"), ("map", "FINISHED")], listed
    assert len({j["jid"] for j in listed if j.get("runner") == "spark"}) == 2


FUNCTION_JOB = '''
import sys

from flinkpy.connectors.collect import CollectSink
from flinkpy.connectors.redis_sinks import RedisStreamsSink, RedisUpsertSink
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.functions import KeyedBroadcastProcessFunction, SourceFunction
from flinkpy.datastream.state import MapStateDescriptor, ValueStateDescriptor

#: the readings announced as marks, broadcast
MARKS = MapStateDescriptor("marks", None, None)


class Readings(SourceFunction):
    """Sensor readings from a loop of the user's: not replayable from a position."""

    def __init__(self, count):
        self.count = count
        self.running = True

    def run(self, ctx):
        for i in range(self.count):
            if not self.running:
                return
            ctx.collect(("s%d" % (i % 3), i))

    def cancel(self):
        self.running = False


class Counted(KeyedBroadcastProcessFunction):
    """Running counts that carry on only if their state does: marks in broadcast state, readings
    per sensor in keyed state."""

    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", None))

    def process_element(self, reading, ctx):
        self.seen.update((self.seen.value() or 0) + 1)
        yield (reading[0], self.seen.value())

    def process_broadcast_element(self, reading, ctx):
        marks = ctx.get_broadcast_state(MARKS)
        marks.put(reading[1], True)
        yield ("marks", len(list(marks.keys())))


if __name__ == "__main__":
    count, out, url, name = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    readings = env.add_source(Readings(count), "readings")
    sums = readings.map(lambda r: (r[0], r[1] * 2)).key_by(lambda r: r[0]).sum(1)
    sums.sink_to(CollectSink(out))
    marks = readings.filter(lambda r: r[1] % 50 == 0).broadcast(MARKS)
    readings.key_by(lambda r: r[0]).connect(marks).process(Counted()).name("counted").sink_to(CollectSink(out + "-broadcast"))
    sums.sink_to(RedisStreamsSink.builder().set_url(url).set_topic(name).set_partitions(2).set_key_selector(lambda r: r[0]).build())
    sums.sink_to(RedisUpsertSink.builder().set_url(url).set_hash(name + "-totals").set_key_selector(lambda r: r[0])
                 .set_value_selector(lambda r: r[1]).build())
    env.execute("source function")
'''


@pytest.fixture(scope="module")
def spark():
    from flinkpy.spark.session import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="flinkpy-spark-program-shapes")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


def test_a_source_function_and_redis_sinks_run_on_spark_exactly_once_across_a_restart(spark, redis_server, flinkpy_home: Path,
                                                                                     tmp_path: Path) -> None:
    """add_source(SourceFunction) into a keyed running sum written to a collect sink, a Redis
    Streams topic of two partitions and a Redis hash: the same records as on the engine, in its
    order per key (in a partition, keys interleave as Spark's batches order them), although the query is stopped after two micro-batches and
    started again on its checkpoint location (the function ran once, its journal replays; a
    replayed batch's appends are skipped by their batch id). Beside it a KeyedBroadcastProcessFunction
    counts the marks broadcast to it and each sensor's readings: counts that carry on across the
    restart only with its broadcast state and keyed state."""
    from flinkpy.spark.capture import capture_job
    from flinkpy.spark.plan import MAX_RECORDS_KEY, translate
    from flinkpy.spark.sinks import read_collected

    from conftest import wait_for

    count = 600
    job = tmp_path / "function_job.py"
    job.write_text(FUNCTION_JOB)
    out, chk = tmp_path / "spark-out", str(tmp_path / "chk")
    out.mkdir()
    (tmp_path / "spark-out-broadcast").mkdir()
    args = [str(count), str(out), redis_server.url, "spark"]

    def start(name: str, interval: int | None):
        (captured,) = capture_job(str(job), args)
        plan = translate(captured.env, config={MAX_RECORDS_KEY: "100"}, job_name="source function")
        assert "SourceFunction run once on the driver" in plan.explain() and "one MULTI/EXEC" in plan.explain()
        return plan.start(spark, checkpoint_location=chk, trigger_interval_ms=interval, query_name=name)

    engine_out = tmp_path / "engine-out"
    engine_out.mkdir()
    (tmp_path / "engine-out-broadcast").mkdir()
    env = dict(os.environ, FLINKPY_HOME=str(flinkpy_home))
    engine = subprocess.Popen([sys.executable, str(job), str(count), str(engine_out), redis_server.url, "engine"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, env=env)
    query = start("function_1", 200)
    wait_for(lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 1, timeout=240,
             message="two committed micro-batches", describe=lambda: query.exception())
    query.stop()
    assert 0 < len(read_collected(str(out))) < count, "the query should have been stopped in the middle of its input"
    query = start("function_2", None)
    query.awaitTermination(240)
    assert not query.isActive and query.exception() is None
    spark_records = read_collected(str(out))

    _, err = engine.communicate(timeout=120)
    assert engine.returncode == 0, err
    engine_records = _engine_records(engine_out)
    assert len(engine_records) == count
    for key in ("s0", "s1", "s2"):
        assert [r for r in spark_records if r[0] == key] == [r for r in engine_records if r[0] == key]
    assert sorted(spark_records) == sorted(engine_records)
    client = redis_server.client()
    for p in (0, 1):  # each key's sums in one partition, in the engine's order (keys interleave otherwise)
        spark_entries = [ast.literal_eval(fields[b"value"].decode()) for _, fields in client.xrange(f"spark:{p}")]
        engine_entries = [ast.literal_eval(fields[b"value"].decode()) for _, fields in client.xrange(f"engine:{p}")]
        for key in ("s0", "s1", "s2"):
            assert [e for e in spark_entries if e[0] == key] == [e for e in engine_entries if e[0] == key], f"partition {p}, {key}"
        assert sorted(spark_entries) == sorted(engine_entries)
    assert sum(client.xlen(f"spark:{p}") for p in (0, 1)) == count
    assert client.hgetall("spark-totals") == client.hgetall("engine-totals") and len(client.hgetall("spark-totals")) == 3
    counted = Counter(read_collected(str(tmp_path / "spark-out-broadcast")))
    assert counted == Counter(_engine_records(tmp_path / "engine-out-broadcast"))
    marks = [("marks", m) for m in range(1, count // 50 + 1)]
    assert counted == Counter(marks + [(f"s{k}", n) for k in range(3) for n in range(1, count // 3 + 1)])


def test_the_interval_join_example_equals_the_engine(spark, tmp_path: Path) -> None:
    """examples/orders_shipments.py (orders and shipments up to five minutes out of order, joined
    when shipped within the hour) in several micro-batches: the engine's pairs, which a plain
    Python join of the input gives too; the orders' and shipments' buffers are dropped by timers
    as the watermark passes, on Spark's timers."""
    from collections import Counter

    from flinkpy.connectors.collect import CollectSink
    from flinkpy.spark.capture import capture_job
    from flinkpy.spark.plan import MAX_RECORDS_KEY, translate
    from flinkpy.spark.sinks import read_collected
    from test_examples import load_example, printed_records, run_example

    (captured,) = capture_job(str(EXAMPLES / "orders_shipments.py"), ["--orders", "150"])
    (sink,) = [n for n in captured.stream_graph.nodes.values() if n.is_sink]
    out = tmp_path / "out"
    out.mkdir()
    sink.fn = CollectSink(str(out))
    plan = translate(captured.env, config={MAX_RECORDS_KEY: "60"}, job_name="orders_shipments")
    assert "'shipped within the hour' (uid orders-shipments) -> groupBy(operator, key).transformWithStateInPandas" in plan.explain()
    query = plan.start(spark, checkpoint_location=str(tmp_path / "chk"), trigger_interval_ms=None, query_name="interval_join")
    engine = run_example("orders_shipments.py", "--orders", "150", timeout=120)
    assert engine.returncode == 0, engine.stderr
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None
    example = load_example("orders_shipments.py")
    orders = {o[0]: o for o in example.orders(150)}
    expected: Counter = Counter()
    for _, order_id, carrier, shipped in example.shipments(150):
        _, customer, _, placed = orders[order_id]
        if placed <= shipped <= placed + 60 * example.MINUTE:
            expected[(order_id, customer, carrier, (shipped - placed) // example.MINUTE)] += 1
    assert Counter(printed_records(engine.stdout)) == expected and len(expected) > 100
    assert Counter(read_collected(str(out))) == expected
