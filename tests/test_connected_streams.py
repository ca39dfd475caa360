"""Connected streams: two inputs into one operator, exact under crashes, stops and rescales.

Results are checked against values computed here from the generated inputs: multisets for the
stateless co-functions, closed forms for the keyed co-process's per-key sums. The keyed
co-process keeps, per key, the sum of each input's numbers and emits both after every record,
so the *last* output of a key is its final state whatever the interleaving of the two inputs —
and any record lost or counted twice by a crash, a stop or a rescale changes it.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest

from backends import engine_backend
from conftest import cli_json, running_cluster, wait_for
from flinkpy.common import RestartStrategies, WatermarkStrategy
from flinkpy.common.typeinfo import Types
from flinkpy.datastream import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    OutputTag,
    Partitioner,
    StreamExecutionEnvironment,
)
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.datastream.functions import MapFunction
from flinkpy.datastream.state import ValueStateDescriptor
from flinkpy.errors import InvalidProgramError
from flinkpy.task.watermarks import MAX_WATERMARK

KEYS = 5


def env_of(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


# -- stateless co-functions --------------------------------------------------------------------


class Tag(CoMapFunction):
    def map1(self, value):
        return ("number", value)

    def map2(self, value):
        return ("word", value)


class Explode(CoFlatMapFunction):
    def flat_map1(self, value):
        yield from [value] * value

    def flat_map2(self, value):
        return list(value)


@pytest.mark.timeout(60)
def test_co_map_and_co_flat_map_call_each_inputs_own_method() -> None:
    env = env_of()
    numbers = env.from_collection([1, 2, 3]).rebalance().map(lambda n: n)  # parallel input
    words = env.from_collection(["ab", "c"])
    assert sorted(numbers.connect(words).map(Tag()).execute_and_collect()) == sorted(
        [("number", 1), ("number", 2), ("number", 3), ("word", "ab"), ("word", "c")]
    )
    env = env_of()
    got = env.from_collection([1, 2, 3]).connect(env.from_collection(["ab", "c"])).flat_map(Explode()).execute_and_collect()
    assert sorted(map(str, got)) == sorted(map(str, [1, 2, 2, 3, 3, 3, "a", "b", "c"]))


LOW = OutputTag("low", Types.INT())


class Route(CoProcessFunction):
    """Input 1's small numbers to a side output (yielded as PyFlink does), the rest with their
    timestamp; input 2 through ``ctx.output``."""

    def process_element1(self, value, ctx):
        if value < 3:
            yield LOW, value
        else:
            yield ("big", value, ctx.timestamp())

    def process_element2(self, value, ctx):
        ctx.output(LOW, -value)


@pytest.mark.timeout(60)
def test_co_process_has_timestamps_and_side_outputs() -> None:
    env = env_of()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda n, _: n * 100)
    first = env.from_collection([1, 2, 3, 4]).assign_timestamps_and_watermarks(strategy)
    routed = first.connect(env.from_collection([7, 8])).process(Route())
    main = routed.execute_and_collect()
    assert sorted(main) == [("big", 3, 300), ("big", 4, 400)]
    env = env_of()
    first = env.from_collection([1, 2, 3, 4])
    routed = first.connect(env.from_collection([7, 8])).process(Route())
    assert sorted(routed.get_side_output(LOW).execute_and_collect()) == [-8, -7, 1, 2]


# -- keyed co-process ---------------------------------------------------------------------------


def keyed(n: int) -> tuple[int, int]:
    return (n % KEYS, n)


def first(pair: tuple) -> Any:
    return pair[0]


class Sums(KeyedCoProcessFunction):
    """Per key: the sum of input 1's numbers and of input 2's; both after every record."""

    def open(self, runtime_context):
        self.left = runtime_context.get_state(ValueStateDescriptor("left", Types.LONG()))
        self.right = runtime_context.get_state(ValueStateDescriptor("right", Types.LONG()))

    def process_element1(self, value, ctx):
        self.left.update((self.left.value() or 0) + value[1])
        yield (ctx.get_current_key(), (self.left.value() or 0, self.right.value() or 0))

    def process_element2(self, value, ctx):
        self.right.update((self.right.value() or 0) + value[1])
        yield (ctx.get_current_key(), (self.left.value() or 0, self.right.value() or 0))


def expected_sums(n: int, m: int) -> dict[int, tuple[int, int]]:
    """Input 1 is 1..n, input 2 is 1..m, both keyed by residue mod KEYS."""
    return {k: (sum(i for i in range(1, n + 1) if i % KEYS == k), sum(i for i in range(1, m + 1) if i % KEYS == k)) for k in range(KEYS)}


def last_per_key(records: Iterable[tuple]) -> dict[Any, Any]:
    last: dict[Any, Any] = {}
    for key, value in records:
        last[key] = value
    return last


def sums_job(env: StreamExecutionEnvironment, n: int, m: int, *, two_keyed_streams: bool = False) -> Any:
    ones = env.from_source(NumberSequenceSource(1, n), WatermarkStrategy.no_watermarks(), "ones").map(keyed)
    twos = env.from_source(NumberSequenceSource(1, m), WatermarkStrategy.no_watermarks(), "twos").map(keyed)
    if two_keyed_streams:
        connected = ones.key_by(first).connect(twos.key_by(first))
    else:
        connected = ones.connect(twos).key_by(first, first)
    return connected.process(Sums()).name("sums")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("two_keyed_streams", [False, True])
def test_keyed_co_process_shares_state_of_a_key_across_inputs(two_keyed_streams: bool) -> None:
    env = env_of()
    job = sums_job(env, 3000, 2000, two_keyed_streams=two_keyed_streams)
    (node,) = [n for n in json.loads(env.get_execution_plan())["nodes"] if "sums" in n["operators"]]
    assert [(p["ship_strategy"], p["side"]) for p in node["predecessors"]] == [("HASH", "first"), ("HASH", "second")]
    assert last_per_key(job.execute_and_collect()) == expected_sums(3000, 2000)


class Deadline(KeyedCoProcessFunction):
    """Input 1 sets an event-time timer at its record's timestamp; when it fires, it reports
    the operator's watermark then."""

    def process_element1(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def process_element2(self, value, ctx):
        return None

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), timestamp, ctx.timer_service().current_watermark())


@pytest.mark.timeout(60)
def test_the_event_time_of_two_inputs_is_the_minimum_of_theirs() -> None:
    """Input 1's watermark passes its timers at once; input 2's stays below them until it ends,
    so the timers fire only with the end of event time (a watermark of input 1 alone would fire
    them at 8999)."""
    env = env_of()
    ahead = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _: r[1])
    early = env.from_collection([("a", 5000), ("a", 9000)]).assign_timestamps_and_watermarks(ahead)
    behind = env.from_collection([("a", t) for t in range(0, 200, 10)]).assign_timestamps_and_watermarks(ahead)
    fired = early.connect(behind).key_by(first, first).process(Deadline()).execute_and_collect()
    assert sorted(fired) == [("a", 5000, MAX_WATERMARK), ("a", 9000, MAX_WATERMARK)]


def test_wrong_functions_are_refused_when_the_job_is_built() -> None:
    env = env_of()
    a, b = env.from_collection([1]), env.from_collection([2])
    with pytest.raises(InvalidProgramError, match="needs keyed connected streams"):
        a.connect(b).process(Sums())
    with pytest.raises(InvalidProgramError, match="CoMapFunction"):
        a.connect(b).map(lambda v: v)
    with pytest.raises(InvalidProgramError, match="CoProcessFunction"):
        a.connect(b).process(Tag())


# -- partition_custom -------------------------------------------------------------------------


class WhoGotIt(MapFunction):
    def open(self, runtime_context):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return (self.subtask, value)


class ByHundreds(Partitioner):
    def partition(self, key, num_partitions):
        return key // 100 % num_partitions


@pytest.mark.timeout(60)
def test_partition_custom_sends_each_record_where_the_partitioner_says() -> None:
    env = env_of(3)
    numbers = list(range(0, 1000, 7))
    got = env.from_collection(numbers).partition_custom(ByHundreds(), lambda n: n).map(WhoGotIt()).execute_and_collect()
    assert sorted(got) == sorted((n // 100 % 3, n) for n in numbers)


@pytest.mark.timeout(60)
def test_partition_custom_out_of_range_fails_the_job_with_the_answer() -> None:
    env = env_of(2)
    env.set_restart_strategy(RestartStrategies.no_restart())
    stream = env.from_collection([1, 2, 3]).partition_custom(lambda key, n: 7, lambda v: v).map(lambda v: v)
    with pytest.raises(Exception, match=r"returned 7 for 1; it must return a subtask index in 0\.\.1"):
        list(stream.execute_and_collect())


# -- exactly once across crashes (SIGKILL at the dangerous moments) ----------------------------

FAULT_ENV = "FLINKPY_FAULT_POINTS"


def vertex_of(env: StreamExecutionEnvironment, name: str) -> int:
    nodes = json.loads(env.get_execution_plan())["nodes"]
    (vid,) = [n["id"] for n in nodes if name in n["operators"]]
    return vid


@pytest.mark.timeout(90)
@pytest.mark.parametrize("point, backend, unaligned", [("alignment", "heap", False), ("after-complete", "rocksdb", False), ("alignment", "heap", True)])
def test_keyed_co_process_is_exact_after_a_crash(point: str, backend: str, unaligned: bool, flinkpy_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two-input task dies (SIGKILL) while it holds one input back for the other's barrier
    of checkpoint 2 (with unaligned checkpoints: while it records the input whose barrier is
    still to come), or as it hears that checkpoint 2 completed; it restarts from the latest
    checkpoint and every per-key sum is still exact (on either state backend)."""
    n, m = 300_000, 200_000
    env = env_of()
    env.set_state_backend(engine_backend(backend))
    env.enable_checkpointing(100)
    if unaligned:
        env.get_checkpoint_config().enable_unaligned_checkpoints()
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    sums = sums_job(env, n, m)
    monkeypatch.setenv(FAULT_ENV, json.dumps([{"point": point, "vertex": vertex_of(env, "sums"), "subtask": 1, "checkpoint": 2}]))
    with running_cluster(flinkpy_home, taskmanagers=1, slots=2) as info:
        monkeypatch.setenv("FLINKPY_JOBMANAGER", info.rest_address)
        assert last_per_key(sums.execute_and_collect("two inputs, one crash")) == expected_sums(n, m)
        (job,) = cli_json("list", "-a")["jobs"]
        shown = cli_json("job", "show", job["jid"])
        assert shown["state"] == "FINISHED" and shown["restarts"] >= 1, shown["events"]


# -- exactly once across stop-with-savepoint and rescale 2 -> 3 -> 1 ---------------------------

N_STOP, M_STOP = 30_000, 20_000

JOB = textwrap.dedent(
    """
    import sys
    from flinkpy.common import WatermarkStrategy
    from flinkpy.common.typeinfo import Types
    from flinkpy.datastream import KeyedCoProcessFunction, StreamExecutionEnvironment
    from flinkpy.datastream.connectors import DataGeneratorSource
    from flinkpy.datastream.state import ValueStateDescriptor

    OUT, KEYS = sys.argv[1], %d

    class Sums(KeyedCoProcessFunction):
        def open(self, runtime_context):
            self.left = runtime_context.get_state(ValueStateDescriptor("left", Types.LONG()))
            self.right = runtime_context.get_state(ValueStateDescriptor("right", Types.LONG()))

        def process_element1(self, value, ctx):
            self.left.update((self.left.value() or 0) + value[1])
            yield (ctx.get_current_key(), self.left.value() or 0, self.right.value() or 0)

        def process_element2(self, value, ctx):
            self.right.update((self.right.value() or 0) + value[1])
            yield (ctx.get_current_key(), self.left.value() or 0, self.right.value() or 0)

    def log(record, out=OUT):
        with open(out, "a") as f:
            print(repr(record), file=f, flush=True)
        return record

    def numbers(count, name):
        # 1..count keyed by residue, slowly enough to stop the job twice in the middle
        source = DataGeneratorSource(lambda i: ((i + 1) %% KEYS, i + 1), count, records_per_second=3000)
        return env.from_source(source, WatermarkStrategy.no_watermarks(), name).uid(name)

    env = StreamExecutionEnvironment.get_execution_environment()
    ones, twos = numbers(%d, "ones"), numbers(%d, "twos")
    (ones.connect(twos).key_by(lambda t: t[0], lambda t: t[0]).process(Sums()).uid("sums")
        .map(log).uid("log"))
    env.execute("two inputs across savepoints")
    """
    % (KEYS, N_STOP, M_STOP)
)


def _submit(cli: Callable, job: Path, out: Path, parallelism: int, savepoint: str | None) -> str:
    args = ["run", "-d", "-p", str(parallelism), "--json"] + (["-s", savepoint] if savepoint else [])
    res = cli(*args, str(job), str(out))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def _stop(cli: Callable, jid: str, target: Path) -> str:
    res = cli("stop", jid, "--savepoint-path", str(target), "--json", timeout=90)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    location = doc.get("location") or doc.get("path") or doc.get("operation", {}).get("location")
    assert location, doc
    return location


def _lines(out: Path) -> int:
    return len(out.read_text().splitlines()) if out.exists() else 0


def _final(out: Path) -> dict[int, tuple[int, int]]:
    last: dict[int, tuple[int, int]] = {}
    for line in out.read_text().splitlines():
        key, left, right = eval(line)  # noqa: S307 - our own repr() output
        last[key] = (left, right)
    return last


@pytest.mark.timeout(240)
def test_keyed_co_process_is_exact_across_stop_and_rescale_2_3_1(cluster, cli, tmp_path: Path) -> None:
    job, out = tmp_path / "job.py", tmp_path / "out.txt"
    job.write_text(JOB)
    jid = _submit(cli, job, out, 2, None)
    for step, parallelism in enumerate((3, 1)):
        seen = _lines(out)
        wait_for(lambda: _lines(out) >= seen + 200, timeout=60, message=f"output before stop {step + 1}")
        savepoint = _stop(cli, jid, tmp_path / f"sp{step}")
        assert _final(out) != expected_sums(N_STOP, M_STOP), "the job finished before it was stopped"
        jid = _submit(cli, job, out, parallelism, savepoint)
    wait_for(lambda: json.loads(cli("job", "show", jid, "--json").stdout)["state"] == "FINISHED", timeout=150,
             message="the job restored at parallelism 1 to finish")
    assert _final(out) == expected_sums(N_STOP, M_STOP)
