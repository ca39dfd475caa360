"""Every operator, or a reason: jobs shaped as DAGs run on Spark with the engine's results.

The Spark runner translates a job graph into one streaming query over rows that carry their
route (flinkpy/spark/plan.py). Three jobs exercise what a single pipeline cannot express:

- *fan-out*: a process function's main output and two side outputs, each read by other
  operators; its main output read by two; a union of main and side output; four sinks written
  by one foreachBatch; two keyed reduces sharing one keyed depth;
- *keyed after keyed*: event-time windows of one second, then windows of five seconds and a
  keyed process function with timers over their results, then a keyed reduce — three keyed
  depths in one bounded query that must end by itself; the process function's outputs depend on
  whether each timer fires before or after the record at its own timestamp, as on the engine;
- examples/sensor_alerts.py: a keyed process function and a session window on one keyed stream,
  the window's late data as a side output, everything unioned into one print sink; and
  examples/max_two_sources.py: two sources unioned into a keyed process function; and
  examples/fraud_rules.py: broadcast state (rules broadcast to a keyed stream, at parallelism 2),
  held to the reference that tests/test_broadcast_state.py holds the engine's alerts to.

Each job runs on flinkpy's engine (its embedded local cluster, parallelism 1, as ``python JOB``
runs it) and on Spark (one local[2] session for the module, the three queries at once); every
sink's records must be equal. The fan-out job's results are also computed here from the input,
and sensor_alerts' sessions and late readings by tests/test_examples.py's reference.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT, wait_for

pyspark = pytest.importorskip("pyspark", reason="PySpark is not installed (pip install -e '.[spark]')")

from flinkpy.connectors.collect import CollectSink  # noqa: E402
from flinkpy.spark.capture import capture_job  # noqa: E402
from flinkpy.spark.plan import MAX_RECORDS_KEY, UntranslatableError, translate  # noqa: E402
from flinkpy.spark.sinks import read_collected  # noqa: E402
from test_examples import expected_sensor_sessions, load_example, printed_records, run_example  # noqa: E402

# (flinkpy_home and postgres are conftest's fixtures)

pytestmark = pytest.mark.timeout(600)

DAG_JOB = '''
import sys

from flinkpy.connectors.collect import CollectSink
from flinkpy.common import Time, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, OutputTag, ProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.state import ValueStateDescriptor
from flinkpy.datastream.window import TumblingEventTimeWindows

ODD = OutputTag("odd")
BIG = OutputTag("big")


class Split(ProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            ctx.output(ODD, ("odd", value))
        else:
            yield ("even", value)
        if value > 150:
            ctx.output(BIG, value)


def fan_out(env, outs):
    split = env.from_collection(list(range(1, 201))).process(Split()).name("split")
    evens = split.map(lambda t: (t[0], t[1] * 10)).name("times ten")
    odds = split.get_side_output(ODD)
    odds.key_by(lambda t: t[0]).sum(1).name("odd sums").sink_to(CollectSink(outs[0]))
    evens.union(odds).filter(lambda t: t[1] % 3 == 0).name("thirds").sink_to(CollectSink(outs[1]))
    split.get_side_output(BIG).map(lambda n: ("big", n)).name("big").sink_to(CollectSink(outs[2]))
    evens.key_by(lambda t: t[1] % 4).reduce(lambda a, b: (a[0], a[1] + b[1])).name("by mod 4").sink_to(CollectSink(outs[3]))


class EveryRecord:
    """Punctuated: a watermark after every record, so that the engine's results are one."""

    def __init__(self):
        self.highest = None

    def on_event(self, event, timestamp, output):
        self.highest = timestamp if self.highest is None else max(self.highest, timestamp)
        output.emit_watermark(self.highest - 1)

    def on_periodic_emit(self, output):
        pass


class CountUntilNext(KeyedProcessFunction):
    """Counts a key's window results; a timer 1 s after each reports the count at that time."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", None))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 1000)

    def on_timer(self, timestamp, ctx):
        yield ("count", ctx.get_current_key(), timestamp, self.count.value())


def events():
    return [("abc"[i % 3], i % 7, 10 * i + i % 3) for i in range(600)]


def keyed_after_keyed(env, outs):
    strategy = WatermarkStrategy.for_generator(EveryRecord).with_timestamp_assigner(lambda e, _: e[2])
    timed = env.from_collection(events()).assign_timestamps_and_watermarks(strategy).set_parallelism(1)
    seconds = (timed.key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(Time.seconds(1)))
               .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))).name("per second"))
    per_five = (seconds.key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(Time.seconds(5)))
                .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))).name("per five seconds"))
    per_five.map(lambda e: ("five", e[0], e[1])).sink_to(CollectSink(outs[0]))
    seconds.key_by(lambda e: e[0]).process(CountUntilNext()).name("count until next").sink_to(CollectSink(outs[1]))
    per_five.map(lambda e: (e[0], e[1])).key_by(lambda t: t[0]).sum(1).name("running total").sink_to(CollectSink(outs[2]))


def numbers(env, name):
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    return env.from_source(NumberSequenceSource(1, 3000), WatermarkStrategy.no_watermarks(), name)


def columns_sum(env, outs):
    """Numbers that stay numpy columns on Spark: a map, a key, sum(1), a filter after the reduce."""
    (numbers(env, "numbers").map(lambda n: (n % 7, n * 3 - 4000)).key_by(lambda p: p[0]).sum(1)
     .filter(lambda p: p[1] % 5 == 0).name("fives").sink_to(CollectSink(outs[0])))


def columns_reduce(env, outs):
    """A bool key, a lambda reduce, then a division and a filter that is not arithmetic: the rest
    of that chain per record."""
    (numbers(env, "numbers").key_by(lambda n: n % 3 == 0).reduce(lambda a, b: a + b)
     .map(lambda s: (s % 2, s / 4)).filter(lambda p: str(p[1]).endswith(".5")).name("halves")
     .sink_to(CollectSink(outs[0])))


if __name__ == "__main__":
    which, outs = sys.argv[1], sys.argv[2:]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    jobs = {"fan_out": fan_out, "keyed_after_keyed": keyed_after_keyed, "columns_sum": columns_sum, "columns_reduce": columns_reduce}
    jobs[which](env, outs)
    env.execute(which)
'''

SINKS = {"fan_out": 4, "keyed_after_keyed": 3, "columns_sum": 1, "columns_reduce": 1}


def _run_on_engine(home: Path, program: Path, *args: str) -> subprocess.CompletedProcess:
    """``python PROGRAM ARGS`` with its own cluster home: an embedded local cluster runs it."""
    env = dict(os.environ, FLINKPY_HOME=str(home))
    env.pop("FLINKPY_JOBMANAGER", None)
    return subprocess.run([sys.executable, str(program), *args], capture_output=True, text=True, timeout=120, cwd=str(ROOT),
                          stdin=subprocess.DEVNULL, env=env)


def _start(plan, spark, base: Path, name: str):
    """Start ``plan``'s query; return once it has planned its first micro-batch (queries start one
    after the other: each starts Python processes on the driver, which a busy machine delays)."""
    query = plan.start(spark, checkpoint_location=str(base / name / "chk"), trigger_interval_ms=None, query_name=name)
    wait_for(lambda: query.recentProgress or not query.isActive, timeout=240, message=f"{name}: a first micro-batch")
    return query


def _engine_records(directory: Path) -> list:
    """What a CollectSink wrote on flinkpy's engine (pickled batches in part files)."""
    out: list = []
    for part in sorted(directory.glob("part-*")):
        with open(part, "rb") as f:
            while True:
                try:
                    out.extend(pickle.load(f))
                except EOFError:
                    break
    return out


@pytest.fixture(scope="module")
def spark():
    from flinkpy.spark.session import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="flinkpy-spark-operator-tests")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


#: examples/ run on both runners here (their print sink swapped for a collect sink on Spark);
#: fraud_rules on Spark only: tests/test_broadcast_state.py holds its engine's alerts (at parallelism
#: 1 and 3) to the reference that Spark's are held to here, which spares an embedded cluster
EXAMPLE_JOBS = ("sensor_alerts", "max_two_sources", "fraud_rules")
ENGINE_EXAMPLES = ("sensor_alerts", "max_two_sources")
#: started once the others have ended: five queries starting their Python workers at once on two
#: loaded cores can miss Spark's connect-back deadline
LATER = ("fraud_rules",)


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """Each job on the engine and on Spark: {job: (engine outputs, Spark outputs, plan)}, one list
    of records per sink (engine outputs None for fraud_rules: see EXAMPLE_JOBS); the examples'
    print sinks are swapped for collect sinks on Spark."""
    base = tmp_path_factory.mktemp("spark-operators")
    job_file = base / "dag_job.py"
    job_file.write_text(DAG_JOB)
    started = {}
    for job, sinks in SINKS.items():
        spark_dirs = [base / job / f"spark-{i}" for i in range(sinks)]
        for d in spark_dirs:
            d.mkdir(parents=True)
        (captured,) = capture_job(str(job_file), [job, *map(str, spark_dirs)])
        # several micro-batches: event time and the end of input cross batch boundaries
        plan = translate(captured.env, config={MAX_RECORDS_KEY: "100"}, job_name=job)
        started[job] = (plan, _start(plan, spark, base, job), spark_dirs)
    def start_example(example: str) -> None:
        (captured,) = capture_job(str(EXAMPLES / f"{example}.py"), [])
        (sink,) = [n for n in captured.stream_graph.nodes.values() if n.is_sink]
        out_dir = base / example / "out"
        out_dir.mkdir(parents=True)
        sink.fn = CollectSink(str(out_dir))
        plan = translate(captured.env, config={MAX_RECORDS_KEY: "60"}, job_name=example)
        started[example] = (plan, _start(plan, spark, base, example), [out_dir])

    for example in EXAMPLE_JOBS:
        if example not in LATER:
            start_example(example)
    # the engine meanwhile, one job at a time (embedded local clusters)
    home = base / "home"
    home.mkdir()
    engine: dict = {}
    for job, sinks in SINKS.items():
        dirs = [base / job / f"engine-{i}" for i in range(sinks)]
        for d in dirs:
            d.mkdir(parents=True)
        res = _run_on_engine(home, job_file, job, *map(str, dirs))
        assert res.returncode == 0, res.stderr
        engine[job] = [_engine_records(d) for d in dirs]
    for example in ENGINE_EXAMPLES:
        res = _run_on_engine(home, EXAMPLES / f"{example}.py")
        assert res.returncode == 0, res.stderr
        engine[example] = [printed_records(res.stdout)]
    out = {}
    for job, (plan, query, dirs) in started.items():
        query.awaitTermination(480)
        assert not query.isActive, f"{job}: the bounded query did not end by itself"
        assert query.exception() is None, f"{job}: {query.exception()}"
        out[job] = (engine.get(job), [read_collected(str(d)) for d in dirs], plan)
    for example in LATER:
        start_example(example)
        plan, query, dirs = started[example]
        query.awaitTermination(480)
        assert not query.isActive and query.exception() is None, f"{example}: {query.exception()}"
        out[example] = (None, [read_collected(str(d)) for d in dirs], plan)
    return out


def test_side_outputs_fan_out_union_and_four_sinks_equal_the_engine(runs):
    engine, spark, plan = runs["fan_out"]
    assert plan.multiplexed and "side output 'odd'" in plan.explain() and "side output 'big'" in plan.explain()
    # the source read once, both keyed reduces in one Spark operator, one foreachBatch for four sinks
    assert [[s.kind for s in b] for b in plan.branches] == [["source", "chain"]]
    assert [s.kind for s in plan.stages] == ["keyed", "sink"] and len(plan.stages[0].operators) == 2
    for i, (e, s) in enumerate(zip(engine, spark)):
        assert Counter(s) == Counter(e), f"sink {i}"
    # and independently of both engines
    odds = [n for n in range(1, 201) if n % 2]
    evens = [n for n in range(1, 201) if n % 2 == 0]
    odd_sums = Counter(("odd", sum(odds[: i + 1])) for i in range(len(odds)))
    thirds = Counter([("even", 10 * n) for n in evens if 10 * n % 3 == 0] + [("odd", n) for n in odds if n % 3 == 0])
    big = Counter(("big", n) for n in range(151, 201))
    by_mod: dict = {}
    mod_sums: Counter = Counter()
    for n in evens:
        k = 10 * n % 4
        by_mod[k] = by_mod.get(k, 0) + 10 * n
        mod_sums[("even", by_mod[k])] += 1
    assert [Counter(s) for s in spark] == [odd_sums, thirds, big, mod_sums]
    # per key, each sink got its running values in the engine's order
    assert spark[0] == engine[0]


def test_keyed_after_keyed_three_depths_equal_the_engine_and_the_query_ends(runs):
    engine, spark, plan = runs["keyed_after_keyed"]
    assert [s.kind for s in plan.stages].count("keyed") == 3
    for i, (e, s) in enumerate(zip(engine, spark)):
        assert len(e) > 5, f"sink {i} of the engine wrote too little to tell anything"
        assert Counter(s) == Counter(e), f"sink {i}"
    # a timer at the timestamp of the key's next window result fires after that record, as on
    # the engine (the count includes it), and the last timers fire at the end of the input
    counts = sorted(r for r in spark[1])
    assert all(c[3] >= 2 for c in counts if c[2] < max(x[2] for x in counts)), counts[:5]
    # per key, the running totals of the third keyed depth come in the engine's order
    for key in "abc":
        assert [r for r in spark[2] if r[0] == key] == [r for r in engine[2] if r[0] == key]


def test_numbers_as_columns_give_the_engine_s_records_and_the_ones_computed_here(runs):
    """flinkpy/spark/columns.py: a number sequence's records as numpy columns through arithmetic
    maps, keys, reduces and filters, the filters after the reduce run inside it; over many
    micro-batches (so running values continue from Spark state)."""
    engine, spark, plan = runs["columns_sum"]
    assert "runs inside the keyed reduce" in plan.explain()
    running: dict = {}
    fives = []
    for n in range(1, 3001):
        k = n % 7
        running[k] = running.get(k, 0) + n * 3 - 4000
        if running[k] % 5 == 0:
            fives.append((k, running[k]))
    assert Counter(spark[0]) == Counter(engine[0]) == Counter(fives) and fives
    assert all(type(v) is int for r in spark[0] for v in r)
    engine, spark, plan = runs["columns_reduce"]
    sums: dict = {}
    halves = []
    for n in range(1, 3001):
        k = n % 3 == 0
        sums[k] = sums.get(k, 0) + n
        s = sums[k]
        if str(s / 4).endswith(".5"):
            halves.append((s % 2, s / 4))
    assert Counter(spark[0]) == Counter(engine[0]) == Counter(halves) and halves


def test_sensor_alerts_example_equals_the_engine(runs):
    engine, spark, plan = runs["sensor_alerts"]
    assert Counter(spark[0]) == Counter(engine[0])
    sessions, late = expected_sensor_sessions(load_example("sensor_alerts.py").readings())
    assert sorted(r for r in spark[0] if r[0] == "SESSION") == sorted(sessions)
    assert sorted(r for r in spark[0] if r[0] == "LATE") == sorted(late) and late
    assert any(r[0] == "ALERT" for r in spark[0])


def test_max_two_sources_example_gives_the_engine_maxima(runs):
    """Two sources unioned into one keyed process function: two branches, one keyed depth. Which
    values the job emits depends on how the two sources interleave (on the engine too), so each
    key's emitted values must rise and end at the engine's maximum."""
    engine, spark, plan = runs["max_two_sources"]
    assert len(plan.branches) == 2
    for parity in ("even", "odd"):
        mine = [v for k, v in spark[0] if k == parity]
        theirs = [v for k, v in engine[0] if k == parity]
        assert mine == sorted(set(mine)) and mine[-1] == theirs[-1] == (98 if parity == "even" else 99)


def test_fraud_rules_example_equals_the_engine(runs):
    """Broadcast state on Spark: the rules broadcast to a keyed stream at parallelism 2, each
    transaction judged by a timer once the watermark passed it: the alerts the rules call for,
    which are the engine's (tests/test_broadcast_state.py::test_fraud_rules_example_prints_the_alerts_its_rules_call_for)."""
    from test_broadcast_state import expected_fraud_alerts

    _, spark, plan = runs["fraud_rules"]
    example = load_example("fraud_rules.py")
    expected = expected_fraud_alerts(example.RULE_UPDATES, example.TRANSACTIONS, example.BURST_WINDOW_MS)
    assert Counter(spark[0]) == Counter(expected) and len(expected) > 10
    assert "'check transactions': both inputs' rows in one Spark group (parallelism 1)" in plan.explain()


def _tables(dsn: str) -> tuple[list, list]:
    """The example's two tables, then dropped (the other runner creates them again)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        orders = sorted(conn.execute("SELECT order_id, customer, amount FROM orders").fetchall())
        totals = sorted(conn.execute("SELECT customer, total FROM totals").fetchall())
        conn.execute("DROP TABLE orders")
        conn.execute("DROP TABLE totals")
    return orders, totals


@pytest.mark.timeout(300)
def test_orders_to_postgres_example_equals_the_engine(spark, postgres, flinkpy_home, tmp_path):
    """Three sinks (two-phase-commit inserts, upserts, print) and a source's side output (lines
    the FileSource rejects) unioned with a process function's: the same rows on both runners."""
    from flinkpy.connectors.print_sink import PrintSink

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    good = [f"o{i},c{i % 5},{i * 3}" for i in range(300)]
    (inbox / "a.txt").write_text("\n".join(good[:150] + ["broken line"]) + "\n")
    (inbox / "b.txt").write_bytes(("\n".join(good[150:] + ["o999,c1,notanumber"]) + "\n").encode() + b"\xff\xfe not utf-8\n")
    args = ["--dsn", postgres.dsn, "--inbox", str(inbox), "--static"]
    res = run_example("orders_to_postgres.py", *args, timeout=120)
    assert res.returncode == 0, res.stderr
    engine_tables = _tables(postgres.dsn)
    engine_bad = sorted(line.split("> ", 1)[-1] for line in res.stdout.splitlines() if line.strip())
    (captured,) = capture_job(str(EXAMPLES / "orders_to_postgres.py"), args)
    (printed,) = [n for n in captured.stream_graph.nodes.values() if n.is_sink and isinstance(n.fn, PrintSink)]
    printed.fn = CollectSink(str(tmp_path / "bad"))
    (tmp_path / "bad").mkdir()
    plan = translate(captured.env, config={MAX_RECORDS_KEY: "100"}, job_name="orders")
    query = plan.start(spark, checkpoint_location=str(tmp_path / "chk"), trigger_interval_ms=None, query_name="orders")
    query.awaitTermination(240)
    assert not query.isActive and query.exception() is None
    orders = sorted((f"o{i}", f"c{i % 5}", i * 3) for i in range(300))
    totals = sorted((f"c{c}", sum(i * 3 for i in range(300) if i % 5 == c)) for c in range(5))
    assert engine_tables == (orders, totals)
    assert _tables(postgres.dsn) == (orders, totals)
    bad = sorted(read_collected(str(tmp_path / "bad")))
    assert bad == engine_bad and len(bad) == 3 and any("not valid utf-8" in b for b in bad)


# -- what stays refused: before anything starts -------------------------------------------------


def test_broadcast_is_refused_naming_the_operator():
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).broadcast().map(lambda x: x + 1).name("plus one").uid("plus-one").print()
    with pytest.raises(UntranslatableError) as e:
        translate(env, config={})
    assert "'plus one' (uid 'plus-one')" in str(e.value) and "without broadcast state" in str(e.value)
    assert "BroadcastProcessFunction" in e.value.remedy


def test_periodic_savepoints_are_refused_naming_the_key():
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.errors import ConfigurationError

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).print()
    with pytest.raises(ConfigurationError, match="execution.checkpointing.savepoint.interval: periodic savepoints"):
        translate(env, config={"execution.checkpointing.savepoint.interval": "1h"})
    translate(env, config={"execution.checkpointing.savepoint.interval": "0"})  # 0: none, as unset


def test_timestamps_after_a_keyed_operator_are_refused():
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda t, _: t[1])
    (env.from_collection([("a", 1)]).key_by(lambda t: t[0]).sum(1).assign_timestamps_and_watermarks(strategy).name("restamp")
     .key_by(lambda t: t[0]).sum(1).print())
    with pytest.raises(UntranslatableError, match="'restamp'.*after a keyed operator"):
        translate(env, config={})


def test_a_single_pipeline_keeps_its_plan_without_routes():
    """W1's shape: no route column read anywhere, no pass-through, one keyed operator by key group."""
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection(["a b", "b"]).flat_map(str.split).map(lambda w: (w, 1)).key_by(lambda t: t[0]).sum(1).print()
    plan = translate(env, config={})
    assert not plan.multiplexed
    assert [s.kind for b in plan.branches for s in b] + [s.kind for s in plan.stages] == ["source", "chain", "keyed", "sink"]
    assert "routes" not in plan.explain() and "passes on" not in plan.explain()
