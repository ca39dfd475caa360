"""PyFlink programs as PyFlink's documentation writes them, run unchanged (imports renamed).

Side outputs: a process function yields ``(output_tag, value)`` and the value goes to that
side output (not down the main output as a tuple); one embedded job covers a ProcessFunction, a
KeyedProcessFunction (elements and event-time timers) and a ProcessWindowFunction. Generic
function classes: ``ProcessWindowFunction[IN, OUT, KEY, W]``, ``Trigger[T, W]``. Expected
results are computed here in plain Python."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from conftest import wait_for

from flinkpy.common import Duration, Time, Types, WatermarkStrategy
from flinkpy.common.watermark_strategy import TimestampAssigner
from flinkpy.datastream import KeyedProcessFunction, OutputTag, ProcessFunction, ProcessWindowFunction, StreamExecutionEnvironment
from flinkpy.datastream.window import TumblingEventTimeWindows

ODD = OutputTag("odd", Types.INT())
FIRED = OutputTag("fired", Types.STRING())
SMALL = OutputTag("small-window", Types.STRING())

N = 400


class SplitOdd(ProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            yield ODD, value  # PyFlink's documented way to write to a side output
        else:
            yield value


class TimerPerKey(KeyedProcessFunction):
    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 1)
        yield ("seen", value)

    def on_timer(self, timestamp, ctx):
        yield FIRED, f"{ctx.get_current_key()}@{timestamp}"


class CountPerWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        n = len(list(elements))
        if n < 3:
            yield SMALL, f"{key}:{context.window().start}"
        yield ("window", key, context.window().start, n)


class Stamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value * 10


@pytest.mark.timeout(90)
def test_yielded_tag_value_pairs_go_to_their_side_outputs(flinkpy_home) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    numbers = env.from_collection(list(range(N)), type_info=Types.INT()).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0)).with_timestamp_assigner(Stamp()))
    evens = numbers.process(SplitOdd())
    keyed = evens.key_by(lambda n: n % 5).process(TimerPerKey())
    windows = (numbers.key_by(lambda n: n % 7).window(TumblingEventTimeWindows.of(Time.milliseconds(100)))
               .process(CountPerWindow()))
    labelled = (
        evens.map(lambda n: ("even", n))
        .union(evens.get_side_output(ODD).map(lambda n: ("odd", n)))
        .union(keyed.map(lambda r: ("keyed", r)))
        .union(keyed.get_side_output(FIRED).map(lambda s: ("fired", s)))
        .union(windows.map(lambda r: ("window", r)))
        .union(windows.get_side_output(SMALL).map(lambda s: ("small", s)))
    )
    got = Counter(labelled.execute_and_collect("side outputs"))

    def of(label: str) -> Counter:
        return Counter({v: c for (lab, v), c in got.items() if lab == label})

    assert of("even") == Counter(n for n in range(N) if n % 2 == 0)
    assert of("odd") == Counter(n for n in range(N) if n % 2), "odd values reach the side output, not the main one"
    assert of("keyed") == Counter(("seen", n) for n in range(N) if n % 2 == 0)
    assert of("fired") == Counter(f"{n % 5}@{n * 10 + 1}" for n in range(N) if n % 2 == 0)
    # windows of 100 ms hold 10 consecutive numbers; key n % 7 sees 1 or 2 of them
    windows_expected: Counter = Counter()
    for n in range(N):
        windows_expected[(n % 7, (n * 10) // 100 * 100)] += 1
    assert of("window") == Counter(("window", k, start, c) for (k, start), c in windows_expected.items())
    assert of("small") == Counter(f"{k}:{start}" for (k, start), c in windows_expected.items() if c < 3)
    assert not any(isinstance(v, tuple) and v and isinstance(v[0], OutputTag) for (_, v) in got), "no tag leaked into a main output"


# -- PyFlink's generic function classes, subscripted as its documentation writes them ----------

from typing import Iterable, Tuple  # noqa: E402

from flinkpy.datastream.functions import IN, KEY, OUT, W  # noqa: E402,F401  (PyFlink's names)
from flinkpy.datastream.window import CountWindow, TimeWindow, Trigger, TriggerResult  # noqa: E402


class SumPerWindow(ProcessWindowFunction[Tuple[str, int], Tuple[str, int, int], str, TimeWindow]):
    def process(self, key: str, context: ProcessWindowFunction.Context[TimeWindow],
                elements: Iterable[Tuple[str, int]]) -> Iterable[Tuple[str, int, int]]:
        yield key, context.window().start, sum(v for _, v in elements)


class EveryTwo(Trigger[Tuple[str, int], CountWindow]):
    """Declared generic only to show the class statement works; not run here."""

    def on_element(self, element, timestamp, window, ctx):
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def clear(self, window, ctx):
        pass


@pytest.mark.timeout(60)
def test_generic_function_classes_subscript_as_in_pyflink(flinkpy_home) -> None:
    events = [("ab"[i % 2], i) for i in range(50)]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    stamped = env.from_collection(events).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(PairStamp()))
    got = sorted(stamped.key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(Time.milliseconds(100)))
                 .process(SumPerWindow()).execute_and_collect("generic classes"))
    expected: Counter = Counter()
    for key, i in events:
        expected[(key, i * 10 // 100 * 100)] += i
    assert got == sorted((k, start, total) for (k, start), total in expected.items())
    assert isinstance(EveryTwo(), Trigger)


class PairStamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1] * 10


# -- execute() starts afresh: what ran once does not run again ----------------------------------


@pytest.mark.timeout(90)
def test_each_execute_runs_what_was_built_since_the_last(flinkpy_home) -> None:
    import json

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    first = env.from_collection([1, 2, 3], type_info=Types.INT())
    assert sorted(first.map(lambda n: n * 10).execute_and_collect("first")) == [10, 20, 30]
    # the next job: only what was built since, plus the earlier operators it reads from
    second = env.from_collection([7], type_info=Types.INT())
    second.map(lambda n: -n).name("negate")
    plan = json.loads(env.get_execution_plan())
    names = " ".join(" ".join(node["operators"]) for node in plan["nodes"])
    assert names == "Collection Source negate", plan  # not the first job's map and collect sink
    assert list(second.execute_and_collect("second")) == [7]
    assert sorted(first.map(lambda n: n + 1).execute_and_collect("third")) == [2, 3, 4]  # an earlier source, reused
    with pytest.raises(Exception, match="no operators to execute"):
        env.execute("nothing new")


# -- Rows: Types.ROW / ROW_NAMED make records Rows, as PyFlink's row coder does -----------------


@pytest.mark.timeout(60)
def test_row_types_make_rows_with_field_names(flinkpy_home) -> None:
    from flinkpy.common import Row

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    people = env.from_collection([(1, "ada"), (2, "grace")],
                                 type_info=Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()]))
    pairs = env.from_collection([[3, "x"], Row(4, "y")], type_info=Types.ROW([Types.INT(), Types.STRING()]))
    got = sorted(people.map(lambda r: (r.name, r["id"], r.as_dict()))
                 .union(pairs.map(lambda r: (r.f1, r.f0, r.as_dict())))
                 .execute_and_collect("rows"))
    assert got == [("ada", 1, {"id": 1, "name": "ada"}), ("grace", 2, {"id": 2, "name": "grace"}),
                   ("x", 3, {"f0": 3, "f1": "x"}), ("y", 4, {"f0": 4, "f1": "y"})]
    with pytest.raises(Exception, match="from_collection: .*field"):
        env.from_collection([(1, "a", "extra")], type_info=Types.ROW([Types.INT(), Types.STRING()]))


# -- execute_and_collect is lazy: an unbounded job's records come back while it runs ------------


@pytest.mark.timeout(90)
def test_execute_and_collect_reads_a_running_job_and_cancels_it_when_done(flinkpy_home) -> None:
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    endless = env.from_source(NumberSequenceSource(1, 10**15), WatermarkStrategy.no_watermarks(), "numbers")
    # PyFlink's limit: a list of the first records; the job (which never ends) is cancelled
    assert endless.map(lambda n: n * 2).execute_and_collect("limited", limit=5) == [2, 4, 6, 8, 10]
    # the iterator: records arrive while the job runs; leaving the with-block cancels it
    with endless.filter(lambda n: n % 1000 == 0).execute_and_collect(job_execution_name="iterated") as records:
        first = [next(records) for _ in range(3)]
        job_id = records.job_id
    assert first == [1000, 2000, 3000]
    assert list(records) == []  # closed
    assert job_id


@pytest.mark.timeout(90)
def test_a_job_file_that_takes_what_it_needs_from_an_endless_job_exits_0(flinkpy_home, tmp_path) -> None:
    from conftest import run_cli

    job = tmp_path / "first_ten.py"
    job.write_text(
        "from flinkpy.common import WatermarkStrategy\n"
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "from flinkpy.datastream.connectors.number_seq import NumberSequenceSource\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "ds = env.from_source(NumberSequenceSource(1, 10**15), WatermarkStrategy.no_watermarks(), 'numbers')\n"
        "print(ds.execute_and_collect('first ten', limit=10))\n"
    )
    res = run_cli("run", "--json", str(job), timeout=80)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["jobs"][0]["state"] == "CANCELED", doc  # the program ended it, which is not a failure
    assert "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" in res.stderr  # the program's own print (stdout is the JSON)


@pytest.mark.timeout(90)
def test_an_unread_collect_iterator_holds_its_job_back_instead_of_filling_the_disk(flinkpy_home) -> None:
    import time
    from pathlib import Path

    from flinkpy.connectors.collect import AHEAD_BYTES, CONSUMED
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    endless = env.from_source(NumberSequenceSource(1, 10**15), WatermarkStrategy.no_watermarks(), "numbers")
    with endless.execute_and_collect("unread") as records:
        assert next(records) == 1
        directory = records._tail.directory  # noqa: SLF001 - the files are what this test is about
        parts = lambda: [p for p in Path(directory).glob("part-*") if CONSUMED not in p.name]  # noqa: E731
        wait_for(lambda: parts() and parts()[0].stat().st_size > AHEAD_BYTES // 2, timeout=30, message="the writer ahead of the reader")
        largest, deadline = 0, time.monotonic() + 3
        while time.monotonic() < deadline:  # sampled for 3 s: the writer waits for the reader
            largest = max(largest, parts()[0].stat().st_size)
            time.sleep(0.02)
        assert largest <= AHEAD_BYTES + (4 << 20), largest
        assert [next(records) for _ in range(3)] == [2, 3, 4]  # reading on lets it go on


@pytest.mark.timeout(60)
def test_a_job_runs_where_sys_stdout_is_not_a_file_as_in_a_notebook(flinkpy_home, tmp_path) -> None:
    import subprocess
    import sys

    program = (
        "import io, sys\n"
        "real = sys.stdout\n"
        "sys.stdout = io.StringIO()  # as a notebook's: no file descriptor behind it\n"
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "got = sorted(env.from_collection([3, 1, 2]).map(lambda n: n * n).execute_and_collect())\n"
        "env.from_collection(['printed']).print()\n"
        "env.execute('prints')\n"
        "real.write(repr(got))\n"
    )
    res = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=50, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    # the print sink writes to the interpreter's own standard output
    assert res.stdout == "printed\n[1, 4, 9]", res.stdout
