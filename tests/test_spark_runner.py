"""The Spark runner's translation: the same jobs give the same results on Spark as on flinkpy.

One SparkSession (local[2]) for the module. The four example jobs are captured from their files
(as ``flinkpy run --runner spark`` does), translated, and run side by side as four streaming
queries — their print sinks swapped for collect sinks so that each query's records come back
separately — then compared with results computed independently of both engines (the same
references tests/test_examples.py holds flinkpy's engine to). A restart from the checkpoint
location in the middle of a paced query must continue exactly: every running sum once, none
missing. Untranslatable jobs are refused before anything starts.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest

from conftest import EXAMPLES, run_cli, wait_for

pyspark = pytest.importorskip("pyspark", reason="PySpark is not installed (pip install -e '.[spark]')")

from flinkpy.connectors.collect import CollectSink  # noqa: E402
from flinkpy.spark.capture import capture_job  # noqa: E402
from flinkpy.spark.plan import MAX_RECORDS_KEY, translate  # noqa: E402
from flinkpy.spark.sinks import read_collected  # noqa: E402
from test_examples import (  # noqa: E402  (tests/ is on sys.path)
    example_text,
    expected_click_sessions,
    expected_running_counts,
    expected_windowed_word_counts,
    load_example,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def spark():
    from flinkpy.spark.session import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="flinkpy-spark-runner-tests")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


def captured_plan(job: str, args: list[str], collect_dir: Path, config: dict | None = None):
    """Capture JOB's graph, send its print output to a collect sink in ``collect_dir``, translate."""
    (captured,) = capture_job(str(EXAMPLES / job), args)
    graph = captured.stream_graph
    (sink,) = [n for n in graph.nodes.values() if n.is_sink]
    collect_dir.mkdir(parents=True, exist_ok=True)
    sink.fn = CollectSink(str(collect_dir))
    return translate(captured.env, config=config or {}, job_name=captured.job_name)


@pytest.fixture(scope="module")
def example_runs(spark, tmp_path_factory):
    """The four example jobs as four concurrent queries; {job: (records, plan)}."""
    base = tmp_path_factory.mktemp("spark-examples")
    jobs = {
        "word_count.py": [],
        "even_odd_sum.py": ["--count", "1000"],
        "windowed_word_count.py": ["--seconds", "20"],
        "click_sessions.py": ["--users", "3", "--seconds", "40"],
    }
    started = {}
    for job, args in jobs.items():
        plan = captured_plan(job, args, base / job / "out")
        query = plan.start(spark, checkpoint_location=str(base / job / "chk"), trigger_interval_ms=None, query_name=job.removesuffix(".py"))
        started[job] = (plan, query)
    for job, (plan, query) in started.items():
        query.awaitTermination(420)
        assert not query.isActive, f"{job}: the bounded query did not end by itself"
        assert query.exception() is None, f"{job}: {query.exception()}"
    return {job: (read_collected(str(base / job / "out")), plan) for job, (plan, _) in started.items()}


def test_word_count_gives_every_running_count_once(example_runs):
    records, plan = example_runs["word_count.py"]
    assert plan.bounded
    words = [w for line in example_text() for w in line.split()]
    assert Counter(records) == expected_running_counts(words)


def test_even_odd_sum_running_sums_are_exact(example_runs):
    records, _ = example_runs["even_odd_sum.py"]
    n = 1000
    evens = [sum(range(2, k + 1, 2)) for k in range(2, n + 1, 2)]
    odds = [sum(range(1, k + 1, 2)) for k in range(1, n + 1, 2)]
    assert Counter(records) == Counter([("even", s) for s in evens] + [("odd", s) for s in odds])


def test_windowed_word_count_equals_the_reference(example_runs):
    records, _ = example_runs["windowed_word_count.py"]
    events = load_example("windowed_word_count.py").lines(20)
    assert Counter(records) == expected_windowed_word_counts(events)


def test_keyed_process_function_with_state_and_timers(example_runs):
    records, plan = example_runs["click_sessions.py"]
    example = load_example("click_sessions.py")
    expected = expected_click_sessions(example.clicks(3, 40), example.GAP_MS)
    assert len(expected) > 10
    assert Counter(records) == expected
    assert "transformWithStateInPandas" in plan.explain() and "click-sessions" in plan.explain()


def test_restart_from_the_checkpoint_location_continues_exactly(spark, tmp_path):
    """A paced even/odd running sum (100 numbers per micro-batch, a batch every 200 ms) is stopped
    after two committed batches and started again on the same checkpoint location."""
    n = 800
    out, chk = tmp_path / "out", str(tmp_path / "chk")
    config = {MAX_RECORDS_KEY: "100"}
    first = captured_plan("even_odd_sum.py", ["--count", str(n)], out, config)
    query = first.start(spark, checkpoint_location=chk, trigger_interval_ms=200, query_name="paced_sums_1")
    wait_for(lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 1, timeout=300,
             message="two committed micro-batches", describe=lambda: query.exception())
    query.stop()
    done_before = len(read_collected(str(out)))
    assert 0 < done_before < n, "the query should have been stopped in the middle of its input"
    second = captured_plan("even_odd_sum.py", ["--count", str(n)], out, config)
    query = second.start(spark, checkpoint_location=chk, trigger_interval_ms=200, query_name="paced_sums_2")
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None
    records = read_collected(str(out))
    evens = [sum(range(2, k + 1, 2)) for k in range(2, n + 1, 2)]
    odds = [sum(range(1, k + 1, 2)) for k in range(1, n + 1, 2)]
    assert Counter(records) == Counter([("even", s) for s in evens] + [("odd", s) for s in odds])


def _source_offsets(chk: str) -> list:
    from flinkpy.spark.supervisor_snapshots import offset_batches, read_offsets

    return read_offsets(chk, offset_batches(chk)[-1])["sources"]


def test_a_bounded_input_is_read_whole_and_a_restart_keeps_the_road_it_started_on(spark, tmp_path):
    """Without a batch limit a bounded input is planned on the driver and read in one micro-batch
    without a Python data source (Spark's offsets are its rate-micro-batch ticks). A query that
    began on the data source (a batch limit) and is started again without the limit continues on
    the data source from its offsets: every running sum once, none missing."""
    from flinkpy.spark.sources import is_data_source_offset

    n = 800
    whole_out, whole_chk = tmp_path / "whole", str(tmp_path / "whole-chk")
    plan = captured_plan("even_odd_sum.py", ["--count", str(n)], whole_out, {})
    assert "read whole in one micro-batch" in plan.explain()
    query = plan.start(spark, checkpoint_location=whole_chk, trigger_interval_ms=None, query_name="whole_sums")
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None
    (offset,) = _source_offsets(whole_chk)
    assert offset is not None and not is_data_source_offset(offset), offset
    expected = Counter([("even", sum(range(2, k + 1, 2))) for k in range(2, n + 1, 2)]
                       + [("odd", sum(range(1, k + 1, 2))) for k in range(1, n + 1, 2)])
    assert Counter(read_collected(str(whole_out))) == expected

    out, chk = tmp_path / "out", str(tmp_path / "chk")
    first = captured_plan("even_odd_sum.py", ["--count", str(n)], out, {MAX_RECORDS_KEY: "100"})
    query = first.start(spark, checkpoint_location=chk, trigger_interval_ms=200, query_name="road_1")
    wait_for(lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 1, timeout=300,
             message="two committed micro-batches", describe=lambda: query.exception())
    query.stop()
    assert 0 < len(read_collected(str(out))) < n, "the query should have been stopped in the middle of its input"
    assert is_data_source_offset(_source_offsets(chk)[0])
    second = captured_plan("even_odd_sum.py", ["--count", str(n)], out, {})
    query = second.start(spark, checkpoint_location=chk, trigger_interval_ms=None, query_name="road_2")
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None
    assert is_data_source_offset(_source_offsets(chk)[0])
    assert Counter(read_collected(str(out))) == expected


def test_a_query_started_again_after_its_final_batch_ends_at_once(spark, tmp_path):
    """The final rows reach the sink once: an attempt that starts after they were committed (a
    restart in the moment between the last commit and the stop, a savepoint taken at the end)
    knows from the checkpoint that the input ended, and ends without writing anything."""
    out, chk = tmp_path / "out", str(tmp_path / "chk")
    first = captured_plan("even_odd_sum.py", ["--count", "60"], out, {})
    query = first.start(spark, checkpoint_location=chk, trigger_interval_ms=None, query_name="ended_1")
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None
    written = sorted(read_collected(str(out)))
    assert len(written) == 60
    again = captured_plan("even_odd_sum.py", ["--count", "60"], out, {})
    query = again.start(spark, checkpoint_location=chk, trigger_interval_ms=None, query_name="ended_2")
    assert query.awaitTermination(120), "the query of an input that had ended did not end"
    assert query.exception() is None and again.sink_driver.finished_before
    assert sorted(read_collected(str(out))) == written


# -- refusals: before anything starts (no Spark needed) --------------------------------------------


def _env():
    from flinkpy.datastream import StreamExecutionEnvironment

    return StreamExecutionEnvironment.get_execution_environment()


def test_a_processing_time_window_translates_in_processing_time_mode():
    """(Run side by side with the engine in tests/test_spark_time_and_ttl.py.)"""
    from flinkpy.common import Time
    from flinkpy.datastream.window import TumblingProcessingTimeWindows

    env = _env()
    (env.from_collection([("a", 1)]).key_by(lambda t: t[0]).window(TumblingProcessingTimeWindows.of(Time.seconds(1)))
     .reduce(lambda a, b: (a[0], a[1] + b[1])).uid("per-second").print())
    plan = translate(env, config={})
    assert plan.processing_time and "(uid per-second) -> groupBy(key).transformWithStateInPandas (ProcessingTime;" in plan.explain()


def test_a_side_output_and_a_source_function_translate():
    from flinkpy.datastream import OutputTag, ProcessFunction

    class Split(ProcessFunction):
        def process_element(self, value, ctx):
            ctx.output(OutputTag("odd"), value)

    env = _env()
    main = env.from_collection([1, 2, 3]).process(Split()).name("split")
    main.get_side_output(OutputTag("odd")).print()
    plan = translate(env, config={})  # tests/test_spark_operators.py runs such jobs
    assert "'split' [side output 'odd'] -> 'Print to Std. Out'" in plan.explain()

    class Forever:
        def run(self, ctx):
            ctx.collect(1)

        def cancel(self):
            pass

    env = _env()
    env.add_source(Forever(), "forever").print()
    plan = translate(env, config={})  # tests/test_spark_program_shapes.py runs one
    assert "'forever' -> SourceFunction run once on the driver" in plan.explain() and "1 partition(s)" in plan.explain()


def test_info_runner_spark_shows_the_spark_plan(flinkpy_home):
    res = run_cli("info", "--runner", "spark", str(EXAMPLES / "word_count.py"))
    assert res.returncode == 0, res.stderr
    # word count's keyed reduce runs by key group on applyInPandasWithState (STREAMING, no timers)
    assert "applyInPandasWithState" in res.stdout and "mapInArrow" in res.stdout and "foreachBatch" in res.stdout
    bad = Path(tempfile.mkdtemp()) / "bad.py"
    bad.write_text(
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_collection([1, 2]).broadcast().map(lambda x: x).uid('everywhere').print()\n"
        "env.execute('bad')\n"
    )
    res = run_cli("info", "--runner", "spark", "--json", str(bad))
    assert res.returncode == 7 and "'everywhere'" in res.stderr and "broadcast" in res.stderr and "Traceback" not in res.stderr


def test_a_filter_after_a_keyed_sum_keeps_exactly_the_running_counts_it_should(spark, tmp_path):
    """A word count with ``.sum(1)`` on tuples and a filter after it (the filter's level takes the
    sum's update bundles at once, see flinkpy/spark/levels.py): every running count that passes,
    once, each word's in increasing order."""
    import random

    from flinkpy.datastream import StreamExecutionEnvironment

    seed = 20261129
    print(f"seed {seed}")
    rng = random.Random(seed)
    lines = [" ".join(rng.choice("abcdefg") for _ in range(rng.randint(1, 8))) for _ in range(400)]
    out = tmp_path / "out"
    out.mkdir()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (env.from_collection(lines).flat_map(lambda line: [(w, 1) for w in line.split()]).key_by(lambda t: t[0]).sum(1)
     .filter(lambda t: t[1] % 3 == 0).sink_to(CollectSink(str(out))))
    plan = translate(env, config={}, job_name="sum_filter")
    query = plan.start(spark, checkpoint_location=str(tmp_path / "chk"), trigger_interval_ms=None, query_name="sum_filter")
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None
    records = read_collected(str(out))
    totals = Counter(w for line in lines for w in line.split())
    assert Counter(records) == Counter((w, k) for w, n in totals.items() for k in range(3, n + 1, 3))
    for word in totals:
        counts = [n for w, n in records if w == word]
        assert counts == sorted(counts), f"{word}: running counts out of order"
