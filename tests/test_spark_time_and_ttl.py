"""Processing time and state TTL on the Spark runner, beside flinkpy's engine.

One SparkSession (``local[2]``) and one engine cluster (a JobManager and a TaskManager with six
slots) for the module. Each job runs on both; what must be equal is compared, and where
processing time makes outputs differ run to run, the invariants that hold on both are checked:

- processing-time tumbling windows over a monitored directory count every record in exactly one
  window (the sum of the counts is the number of lines written; windows are aligned and distinct);
  processing-time sessions (merging windows) hold one burst of a key each;
- a processing-time timer fires once, not before its time, for a key that gets no more records
  (Spark wakes it with a micro-batch of no input);
- on a bounded input, a step in processing-time mode still fires every event-time timer (checked
  on every micro-batch) and the query ends by itself, also after another keyed step whose timers
  feed it up to the end; processing-time timers fire at most once;
- state TTL: value, list, map and reducing states with both update types and both visibilities
  give the same records on both runners as a reference model of Flink's TTL rules. The function
  waits, inside the job, until the wall clock passes the times its checks need (TTL counts
  processing time: the only way to make it expire is to let that time pass); every "still alive"
  check keeps 700 ms or more of margin.
"""

from __future__ import annotations

import ast
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for

pyspark = pytest.importorskip("pyspark", reason="PySpark is not installed (pip install -e '.[test]')")

from flinkpy.common import Duration, Time  # noqa: E402
from flinkpy.common.watermark_strategy import WatermarkStrategy  # noqa: E402
from flinkpy.connectors.file_source import FileSource, StreamFormat  # noqa: E402
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment  # noqa: E402
from flinkpy.datastream.functions import TimeDomain  # noqa: E402
from flinkpy.datastream.state import (  # noqa: E402
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from flinkpy.datastream.window import (  # noqa: E402
    ContinuousProcessingTimeTrigger,
    ProcessingTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from flinkpy.spark.plan import translate  # noqa: E402

pytestmark = pytest.mark.timeout(420)

WINDOW_MS = 500
SESSION_GAP_MS = 1000
TIMER_DELAY_MS = 300


# ----------------------------------------------------------------------------- shared runners


@pytest.fixture(scope="module")
def spark():
    import sys

    import cloudpickle
    from pyspark import cloudpickle as spark_cloudpickle

    from flinkpy.spark.session import spark_session

    # Spark's Python workers cannot import this test module: its functions travel by value
    for pickler in (cloudpickle, spark_cloudpickle):
        pickler.register_pickle_by_value(sys.modules[__name__])
    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="flinkpy-spark-time-and-ttl")
    yield session
    for pickler in (cloudpickle, spark_cloudpickle):
        pickler.unregister_pickle_by_value(sys.modules[__name__])
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """A background engine cluster that jobs of this module are submitted to."""
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster
    from flinkpy.config import load_config

    home_dir = tmp_path_factory.mktemp("engine-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLINKPY_HOME", str(home_dir))
        home = ClusterHome(home_dir)
        info = start_cluster(home, taskmanagers=1, slots=6, rest_port=0, config=load_config(env={}, overrides={}))
        mp.setenv("FLINKPY_JOBMANAGER", info.rest_address)
        try:
            yield info
        finally:
            stop_cluster(home, timeout_s=10)


class AppendTo:
    """A sink appending each record's repr to a file; read back with :func:`read_records`."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, value: Any) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(repr(value) + "\n")


def read_records(path: Path) -> list:
    if not path.exists():
        return []
    return [ast.literal_eval(line) for line in path.read_text(encoding="utf-8").splitlines() if line.endswith(")")]


def new_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def start_on_spark(spark, env, tmp: Path, name: str):
    plan = translate(env, config={}, job_name=name)
    query = plan.start(spark, checkpoint_location=str(tmp / f"{name}-chk"), trigger_interval_ms=None, query_name=name)
    return plan, query


def finish_on_spark(query, timeout: float = 150) -> None:
    query.awaitTermination(timeout)
    assert not query.isActive, "the bounded query did not end by itself"
    assert query.exception() is None, query.exception()


def stop_on_spark(query) -> None:
    assert query.exception() is None, query.exception()
    query.stop()


def cancel_on_engine(client) -> None:
    client.cancel()
    wait_for(lambda: client.get_job_status() == "CANCELED", timeout=20, message="the job to be canceled")


def monitored_lines(directory: Path) -> FileSource:
    return (FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(directory))
            .monitor_continuously(Duration.of_millis(100)).build())


def write_lines(directory: Path, name: str, lines: list[str]) -> None:
    """Add a file atomically (hidden while written: the source skips names starting with '.')."""
    tmp = directory / f".{name}"
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.rename(tmp, directory / name)


# ----------------------------------------------------------------------------- the time mode


class Deadline(KeyedProcessFunction):
    """A key's first record sets a processing-time timer 300 ms later; it reports when it fired."""

    def open(self, runtime_context):
        self.due = runtime_context.get_state(ValueStateDescriptor("due", None))

    def process_element(self, value, ctx):
        if self.due.value() is None:
            timers = ctx.timer_service()
            due = timers.current_processing_time() + TIMER_DELAY_MS
            self.due.update(due)
            timers.register_processing_time_timer(due)
        return []

    def on_timer(self, timestamp, ctx):
        yield ("fired", ctx.get_current_key(), timestamp, ctx.timer_service().current_processing_time())


class EventTimeout(KeyedProcessFunction):
    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 1000)
        return []


def _register_indirectly(timers, due):
    timers.register_processing_time_timer(due)  # reached only through a module-level helper


class Indirect(KeyedProcessFunction):
    def process_element(self, value, ctx):
        _register_indirectly(ctx.timer_service(), 0)
        return []


def _keyed_kinds(plan) -> str:
    return "\n".join(line for line in plan.explain().splitlines() if "transformWithState" in line)


def test_each_keyed_operator_gets_the_time_mode_it_needs():
    """No Spark needed: the translation's choice, as `flinkpy info --runner spark` shows it."""
    cases = {
        "processing-time window": (lambda ks: ks.window(TumblingProcessingTimeWindows.of(Time.seconds(1))).reduce(max), "ProcessingTime"),
        "event-time window, processing-time trigger": (
            lambda ks: ks.window(TumblingEventTimeWindows.of(Time.seconds(1))).trigger(ContinuousProcessingTimeTrigger.of(Time.seconds(1))).reduce(max),
            "ProcessingTime"),
        "event-time window": (lambda ks: ks.window(SlidingEventTimeWindows.of(Time.seconds(2), Time.seconds(1))).reduce(max), "EventTime"),
        "count window": (lambda ks: ks.count_window(3).reduce(max), "EventTime"),
        "processing-time timers": (lambda ks: ks.process(Deadline()), "ProcessingTime"),
        "processing-time timers through a helper": (lambda ks: ks.process(Indirect()), "ProcessingTime"),
        "state with a TTL": (lambda ks: ks.process(TtlSteps()), "ProcessingTime"),
        "event-time timers only": (lambda ks: ks.process(EventTimeout()), "EventTime"),
    }
    for what, (build, mode) in cases.items():
        env = new_env()
        stream = env.from_collection([("a", 1)]).assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, _: e[1]))
        build(stream.key_by(lambda e: e[0])).print()
        line = _keyed_kinds(translate(env, config={}))
        assert f"({mode};" in line, f"{what}: {line}"


# ----------------------------------------------------------------------------- processing-time windows


class CountPerWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        yield (key, w.start, w.end, len(list(elements)))


def windows_job(env, directory: Path, out: Path) -> None:
    (env.from_source(monitored_lines(directory), WatermarkStrategy.no_watermarks(), "lines")
     .map(lambda line: (line, 1))
     .key_by(lambda t: t[0])
     .window(TumblingProcessingTimeWindows.of(Time.milliseconds(WINDOW_MS)))
     .process(CountPerWindow()).name("count per window")
     .add_sink(AppendTo(str(out))))


def sessions_job(env, directory: Path, out: Path) -> None:
    (env.from_source(monitored_lines(directory), WatermarkStrategy.no_watermarks(), "lines")
     .map(lambda line: (line, 1))
     .key_by(lambda t: t[0])
     .window(ProcessingTimeSessionWindows.with_gap(Time.milliseconds(SESSION_GAP_MS)))
     .process(CountPerWindow()).name("count per session")
     .add_sink(AppendTo(str(out))))


def deadline_job(env, directory: Path, out: Path) -> None:
    (env.from_source(monitored_lines(directory), WatermarkStrategy.no_watermarks(), "keys")
     .key_by(lambda line: line)
     .process(Deadline()).name("deadline")
     .add_sink(AppendTo(str(out))))


def check_windows(records: list, lines: list[str], where: str) -> None:
    assert sum(r[3] for r in records) == len(lines), f"{where}: {records}"
    assert Counter({k: sum(r[3] for r in records if r[0] == k) for k in set(lines)}) == Counter(lines), where
    starts = [(r[0], r[1]) for r in records]
    assert len(starts) == len(set(starts)), f"{where}: a window fired twice: {records}"
    assert all(r[2] - r[1] == WINDOW_MS and r[1] % WINDOW_MS == 0 and r[3] > 0 for r in records), f"{where}: {records}"


def check_deadlines(records: list, keys: list[str], where: str) -> None:
    fired = [r for r in records if r[0] == "fired"]
    assert sorted(r[1] for r in fired) == sorted(keys), f"{where}: every key's timer once: {records}"
    assert all(r[3] >= r[2] for r in fired), f"{where}: a timer fired before its time: {records}"


def total(path: Path) -> int:
    return sum(r[3] for r in read_records(path))


JOBS = {"windows": windows_job, "sessions": sessions_job, "deadlines": deadline_job}


def test_processing_time_windows_and_timers_wake_without_input(spark, engine, tmp_path):
    """Three unbounded jobs on each runner, over files added to a directory while they run:
    tumbling processing-time windows count every line once; processing-time sessions (which
    merge) hold one file's lines of a key each, the files coming more than a gap apart; a
    processing-time timer fires once for each key, which gets no record after its first."""
    lines = [f"k{i % 5}" for i in range(240)]
    bursts = [[f"s{i % 3}" for i in range(30)], [f"s{i % 4}" for i in range(41)]]
    keys = [f"user{i}" for i in range(6)]
    runs = {}
    for runner in ("spark", "engine"):
        for job, build in JOBS.items():
            (tmp_path / runner / job).mkdir(parents=True)
            env = new_env()
            build(env, tmp_path / runner / job, tmp_path / runner / f"{job}.out")
            if runner == "spark":
                plan, handle = start_on_spark(spark, env, tmp_path / runner, f"pt-{job}")
                assert "(ProcessingTime;" in plan.explain()
            else:
                handle = env.execute_async(f"pt-{job}")
            runs[(runner, job)] = handle
    try:
        for runner in ("spark", "engine"):
            base = tmp_path / runner
            # in three files, while the jobs run: windows between them fire with no input at all
            for i in range(3):
                write_lines(base / "windows", f"part-{i}.txt", lines[i * 80:(i + 1) * 80])
            write_lines(base / "deadlines", "keys.txt", keys)
            write_lines(base / "sessions", "burst-0.txt", bursts[0])
        for runner in ("spark", "engine"):
            base = tmp_path / runner
            wait_for(lambda: total(base / "sessions.out") >= len(bursts[0]), timeout=180,
                     message=f"{runner}: the first burst's sessions", describe=lambda: read_records(base / "sessions.out"))
            write_lines(base / "sessions", "burst-1.txt", bursts[1])  # its sessions cannot merge with the first's
        for runner in ("spark", "engine"):
            base = tmp_path / runner
            wait_for(lambda: total(base / "windows.out") >= len(lines), timeout=180,
                     message=f"{runner}: every line counted in a window", describe=lambda: read_records(base / "windows.out"))
            check_windows(read_records(base / "windows.out"), lines, runner)
            wait_for(lambda: len(read_records(base / "deadlines.out")) >= len(keys), timeout=120,
                     message=f"{runner}: every key's deadline", describe=lambda: read_records(base / "deadlines.out"))
            wait_for(lambda: total(base / "sessions.out") >= len(bursts[0]) + len(bursts[1]), timeout=120,
                     message=f"{runner}: the second burst's sessions", describe=lambda: read_records(base / "sessions.out"))
        spark_query = runs[("spark", "deadlines")]
        seen = spark_query.lastProgress["batchId"]
        wait_for(lambda: spark_query.lastProgress["batchId"] >= seen + 3, timeout=60, message="three more micro-batches")
        for runner in ("spark", "engine"):
            base = tmp_path / runner
            check_deadlines(read_records(base / "deadlines.out"), keys, runner)
            sessions = read_records(base / "sessions.out")
            assert Counter((r[0], r[3]) for r in sessions) == Counter(Counter(bursts[0]).items()) + Counter(Counter(bursts[1]).items()), runner
            assert all(r[2] - r[1] >= SESSION_GAP_MS for r in sessions), f"{runner}: {sessions}"
    finally:
        for (runner, _), handle in runs.items():
            if runner == "spark":
                stop_on_spark(handle)
            else:
                cancel_on_engine(handle)


# ----------------------------------------------------------------------------- bounded input


class EventAndProcessingTimers(KeyedProcessFunction):
    """Event-time timers 1 s after each record, and one processing-time timer per key 50 ms after
    its first record."""

    def open(self, runtime_context):
        self.armed = runtime_context.get_state(ValueStateDescriptor("armed", None))

    def process_element(self, value, ctx):
        timers = ctx.timer_service()
        timers.register_event_time_timer(ctx.timestamp() + 1000)
        if self.armed.value() is None:
            self.armed.update(True)
            timers.register_processing_time_timer(timers.current_processing_time() + 50)
        return []

    def on_timer(self, timestamp, ctx):
        if ctx.time_domain() == TimeDomain.PROCESSING_TIME:
            yield ("processing", ctx.get_current_key(), 0)
        else:
            yield ("event", ctx.get_current_key(), timestamp)


EVENTS = [(f"k{i % 7}", 10_000 + i * 37) for i in range(300)]


def both_clocks_job(env, out: Path) -> None:
    (env.from_collection(EVENTS)
     .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, _: e[1]))
     .key_by(lambda e: e[0])
     .process(EventAndProcessingTimers()).name("both clocks")
     .add_sink(AppendTo(str(out))))


def test_a_bounded_input_in_processing_time_mode_fires_every_event_time_timer_and_ends(bounded_runs):
    expected_event = Counter({("event", k, ts + 1000) for k, ts in EVENTS})  # one timer per timestamp
    assert "(ProcessingTime;" in bounded_runs[("both-clocks", "spark")][0].explain()
    for runner in ("spark", "engine"):
        records = bounded_runs[("both-clocks", runner)][1]
        assert Counter(r for r in records if r[0] == "event") == expected_event, runner
        processing = Counter(r[1] for r in records if r[0] == "processing")
        # due 50 ms after a key's first record: fired once, or dropped if the input ended first
        assert all(n == 1 for n in processing.values()) and set(processing) <= {k for k, _ in EVENTS}, runner


class Relay(KeyedProcessFunction):
    """Passes each record on 500 ms of event time later, from an event-time timer, keyed coarser."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 500)
        return []

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key()[:1], timestamp)


def relay_job(env, out: Path) -> None:
    """A processing-time step after an event-time one: its event-time timers are set by records
    that timers of the step before emitted, up to the end of input."""
    (env.from_collection(EVENTS)
     .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, _: e[1]))
     .key_by(lambda e: e[0]).process(Relay()).name("relay")
     .key_by(lambda e: e[0]).process(EventAndProcessingTimers()).name("both clocks after relay")
     .add_sink(AppendTo(str(out))))


def test_a_processing_time_step_after_a_keyed_step_fires_every_event_time_timer(bounded_runs):
    relayed = {(k[:1], ts + 500) for k, ts in EVENTS}
    expected_event = Counter({("event", k, ts + 1000) for k, ts in relayed})
    explain = bounded_runs[("relay", "spark")][0].explain()
    assert "'both clocks after relay' -> groupBy(key).transformWithStateInPandas (ProcessingTime;" in explain
    assert "'relay' -> groupBy(key).transformWithStateInPandas (EventTime;" in explain
    for runner in ("spark", "engine"):
        records = bounded_runs[("relay", runner)][1]
        assert Counter(r for r in records if r[0] == "event") == expected_event, runner
        assert all(n == 1 for n in Counter(r[1] for r in records if r[0] == "processing").values()), runner


class HiddenTimer(KeyedProcessFunction):
    """Registers a processing-time timer through a name the translation cannot read."""

    def process_element(self, value, ctx):
        timers = ctx.timer_service()
        prefix = "register_"
        getattr(timers, prefix + "processing_time_timer")(timers.current_processing_time() + 50)
        return []


def test_a_processing_time_timer_out_of_sight_fails_the_query_saying_why(bounded_runs):
    plan, failure = bounded_runs[("hidden-timer", "spark")]
    assert "'hidden timer' -> groupBy(key).transformWithStateInPandas (EventTime;" in plan.explain()
    assert "'hidden timer' registered a processing-time timer" in failure and "register_processing_time_timer" in failure


# ----------------------------------------------------------------------------- state TTL

TTL_MS = 2000
MARGIN_MS = 50
#: step 1 runs this long after step 0: the checks that expect a value alive keep >= 0.35 TTL of margin
STEP_1_MS = 800


def ttl_config(*, on_read: bool = False, return_expired: bool = False) -> StateTtlConfig:
    b = StateTtlConfig.new_builder(Time.milliseconds(TTL_MS))
    b = b.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite if on_read else StateTtlConfig.UpdateType.OnCreateAndWrite)
    if return_expired:
        # returned until cleaned up: no background cleanup on the engine, so nothing cleans it
        b = b.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp).disable_cleanup_in_background()
    return b.build()


def _with_ttl(descriptor, **kw):
    descriptor.enable_time_to_live(ttl_config(**kw))
    return descriptor


def _now_ms() -> int:
    return int(time.time() * 1000)


def _wait_until(ms: int) -> None:
    """The job itself lets processing time pass (see the module docstring)."""
    while _now_ms() < ms:
        time.sleep(0.005)


class TtlSteps(KeyedProcessFunction):
    """Step n of a key (records ``(key, n)`` in order) writes and reads TTL states; each step
    first waits for the times its checks need, from the times earlier steps wrote down (in a
    state without TTL): a write's timestamp lies between its step's start and end."""

    def open(self, ctx):
        self.created = ctx.get_state(_with_ttl(ValueStateDescriptor("created", None)))
        self.refreshed = ctx.get_state(_with_ttl(ValueStateDescriptor("refreshed", None), on_read=True))
        self.kept = ctx.get_state(_with_ttl(ValueStateDescriptor("kept", None), return_expired=True))
        self.items = ctx.get_list_state(_with_ttl(ListStateDescriptor("items", None)))
        self.entries = ctx.get_map_state(_with_ttl(MapStateDescriptor("entries", None, None)))
        self.total = ctx.get_reducing_state(_with_ttl(ReducingStateDescriptor("total", lambda a, b: a + b, None)))
        self.times = ctx.get_map_state(MapStateDescriptor("times", None, None))  # step -> (start, end)

    def process_element(self, value, ctx):
        step = value[1]
        t = {s: self.times.get(s) for s in range(step)}
        wait = {1: lambda: t[0][0] + STEP_1_MS,
                2: lambda: t[0][1] + TTL_MS + MARGIN_MS,
                3: lambda: t[1][1] + TTL_MS + MARGIN_MS,
                4: lambda: t[3][1] + TTL_MS + MARGIN_MS}.get(step)
        if wait is not None:
            _wait_until(wait())
        start = _now_ms()
        out = getattr(self, f"step{step}")()
        self.times.put(step, (start, _now_ms()))
        yield (value[0], step, *out)

    def step0(self):
        self.created.update("c")
        self.refreshed.update("r")
        self.kept.update("k")
        self.items.add("x")
        self.entries.put("m1", 1)
        self.total.add(1)
        return ()

    def step1(self):
        seen = (self.created.value(), self.refreshed.value())
        self.items.add("y")
        self.entries.put("m2", 2)
        return seen

    def step2(self):
        seen = (self.created.value(), self.refreshed.value(), self.kept.value(), tuple(sorted(self.items.get())),
                tuple(sorted(self.entries.items())), self.total.get())
        self.total.add(5)
        return seen

    def step3(self):
        return (self.refreshed.value(), tuple(sorted(self.items.get())), tuple(sorted(self.entries.items())), self.total.get())

    def step4(self):
        return (self.refreshed.value(), self.total.get(), self.kept.value())


def reference_ttl(keys: list[str]) -> Counter:
    """Flink's TTL rules on nominal times (the steps' earliest starts), independently of flinkpy:
    a value written (or, updated on read, last read) at w is expired from w + TTL on."""
    times = {0: 0, 1: STEP_1_MS, 2: TTL_MS, 3: STEP_1_MS + TTL_MS, 4: 1 + STEP_1_MS + TTL_MS + TTL_MS}
    out = []
    for key in keys:
        store: dict[str, Any] = {}

        def alive(name, now, on_read=False, return_expired=False):
            if name not in store:
                return None
            value, written = store[name]
            if written + TTL_MS <= now:
                if return_expired:
                    return value
                del store[name]
                return None
            if on_read:
                store[name] = (value, now)
            return value

        def elements(prefix, now):
            return tuple(sorted(v for n, (v, w) in list(store.items()) if n.startswith(prefix) and w + TTL_MS > now))

        def entries(now):
            return tuple(sorted((n[2:], v) for n, (v, w) in store.items() if n.startswith("e:") and w + TTL_MS > now))

        t = times[0]
        store.update({"created": ("c", t), "refreshed": ("r", t), "kept": ("k", t), "i:x": ("x", t), "e:m1": (1, t), "total": (1, t)})
        out.append((key, 0))
        t = times[1]
        out.append((key, 1, alive("created", t), alive("refreshed", t, on_read=True)))
        store.update({"i:y": ("y", t), "e:m2": (2, t)})
        t = times[2]
        total = alive("total", t)
        out.append((key, 2, alive("created", t), alive("refreshed", t, on_read=True), alive("kept", t, return_expired=True),
                    elements("i:", t), entries(t), total))
        store["total"] = ((total or 0) + 5, t)
        t = times[3]
        out.append((key, 3, alive("refreshed", t, on_read=True), elements("i:", t), entries(t), alive("total", t)))
        t = times[4]
        out.append((key, 4, alive("refreshed", t, on_read=True), alive("total", t), alive("kept", t, return_expired=True)))
    return Counter(out)


TTL_KEYS = ["a", "b"]


def ttl_job(env, out: Path) -> None:
    records = [(k, step) for step in range(5) for k in TTL_KEYS]  # a key's steps in order, keys interleaved
    env.from_collection(records).key_by(lambda r: r[0]).process(TtlSteps()).name("ttl steps").add_sink(AppendTo(str(out)))


def test_state_ttl_expires_as_on_the_engine(bounded_runs):
    expected = reference_ttl(TTL_KEYS)
    assert expected[("a", 2, None, "r", "k", ("y",), (("m2", 2),), None)] == 1  # the model's own sanity
    assert "(ProcessingTime;" in bounded_runs[("ttl-steps", "spark")][0].explain()  # Spark's TTL cleans up there
    for runner in ("engine", "spark"):
        assert Counter(tuple(r) for r in bounded_runs[("ttl-steps", runner)][1]) == expected, runner


# ----------------------------------------------------------------------------- both bounded jobs, at once


@pytest.fixture(scope="module")
def bounded_runs(spark, engine, tmp_path_factory):
    """The bounded jobs on both runners, all running at the same time:
    {(job, runner): (Spark plan or None, records)}."""
    base = tmp_path_factory.mktemp("bounded")
    started = {}
    for job, build in (("both-clocks", both_clocks_job), ("relay", relay_job), ("ttl-steps", ttl_job)):
        for runner in ("spark", "engine"):
            env = new_env(1)
            build(env, base / f"{job}-{runner}.out")
            if runner == "spark":
                started[(job, runner)] = start_on_spark(spark, env, base, job)
            else:
                started[(job, runner)] = (None, env.execute_async(job))
    env = new_env(1)
    env.from_collection(EVENTS).key_by(lambda e: e[0]).process(HiddenTimer()).name("hidden timer").add_sink(AppendTo(str(base / "hidden")))
    hidden = start_on_spark(spark, env, base, "hidden-timer")  # fails: Spark only
    for (job, runner), (_, handle) in started.items():
        if runner == "spark":
            finish_on_spark(handle)
        else:
            handle.get_job_execution_result(timeout_s=150)  # raises if the job failed
    runs = {key: (plan, read_records(base / f"{key[0]}-{key[1]}.out")) for key, (plan, _) in started.items()}
    with pytest.raises(Exception) as failed:  # awaitTermination raises the query's failure
        hidden[1].awaitTermination(150)
    runs[("hidden-timer", "spark")] = (hidden[0], str(failed.value))
    return runs
