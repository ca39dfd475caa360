"""Async I/O (``AsyncDataStream``) on real clusters: order, capacity, timeouts, retries, event
time, and exactly-once results after a SIGKILL with requests outstanding.

The async functions sleep (``asyncio.sleep``) for seeded random delays, so requests finish out
of order; each test computes its expectation from its inputs in plain Python. Most jobs share
one background cluster (module scope: a cluster start costs more than the jobs); the crash test
starts its own, with the crash point in its environment.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
from collections import Counter
from pathlib import Path

import pytest

from conftest import wait_for  # noqa: F401  (the kit's one poll)
from flinkpy.common import RestartStrategies, Time, WatermarkStrategy
from flinkpy.datastream import (
    AsyncDataStream,
    AsyncFunction,
    AsyncRetryStrategy,
    ProcessFunction,
    StreamExecutionEnvironment,
    async_retry_predicates,
)
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.datastream.window import TumblingEventTimeWindows
from flinkpy.errors import JobExecutionError
from test_recovery import assert_recovered, checkpoints, exception_entries, last_per_key, only_job, start, vertex_id  # noqa: F401


def seed_of(name: str) -> int:
    seed = int(os.environ.get("FLINKPY_TEST_SEED") or random.randrange(2**32))
    print(f"{name}: seed {seed} (rerun with FLINKPY_TEST_SEED={seed})")
    return seed


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory):
    """One background cluster (1 TaskManager, 4 slots) for the jobs of this module."""
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster

    home_dir = tmp_path_factory.mktemp("async-home")
    saved = {k: os.environ.get(k) for k in ("FLINKPY_HOME", "FLINKPY_JOBMANAGER")}
    os.environ["FLINKPY_HOME"] = str(home_dir)
    home = ClusterHome(home_dir)
    info = start_cluster(home, taskmanagers=1, slots=4, rest_port=0)
    os.environ["FLINKPY_JOBMANAGER"] = info.rest_address
    try:
        yield info
    finally:
        stop_cluster(home, timeout_s=10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def env_of(parallelism: int = 1) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


class SlowDouble(AsyncFunction):
    """Doubles after a random delay; each result carries the most requests this subtask's
    function ever had running at once (the capacity bound, seen from inside)."""

    def __init__(self, seed: int, max_delay_ms: int = 20):
        self.seed = seed
        self.max_delay_ms = max_delay_ms

    def open(self, runtime_context):
        self.rng = random.Random(self.seed + runtime_context.get_index_of_this_subtask())
        self.running = 0
        self.most = 0

    async def async_invoke(self, value):
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(self.rng.randrange(self.max_delay_ms + 1) / 1000.0)
        finally:
            self.running -= 1
        return [(value * 2, self.most)]


# -- order and capacity ------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_ordered_results_keep_input_order_within_capacity(shared_cluster) -> None:
    seed = seed_of("ordered")
    ds = env_of(1).from_collection(list(range(300)))
    out = list(AsyncDataStream.ordered_wait(ds, SlowDouble(seed), Time.seconds(10), capacity=8).execute_and_collect("ordered"))
    assert [v for v, _ in out] == [2 * i for i in range(300)]
    most = max(m for _, m in out)
    assert most <= 8, f"{most} requests ran at once with capacity 8"
    assert most == 8, f"the capacity was never used: at most {most} requests at once"


@pytest.mark.timeout(90)
def test_unordered_results_are_all_there_out_of_order_within_capacity(shared_cluster) -> None:
    seed = seed_of("unordered")
    ds = env_of(2).from_collection(list(range(400)))
    out = list(AsyncDataStream.unordered_wait(ds, SlowDouble(seed), Time.seconds(10), capacity=5).execute_and_collect("unordered"))
    assert sorted(v for v, _ in out) == [2 * i for i in range(400)]
    assert max(m for _, m in out) == 5
    assert [v for v, _ in out] != sorted(v for v, _ in out), "random delays, yet every result came in input order"


class Stamp(ProcessFunction):
    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


@pytest.mark.timeout(90)
def test_unordered_results_never_cross_a_watermark(shared_cluster) -> None:
    """A watermark after every record (its timestamp - 1): a result emitted after a later
    watermark would be late for its window and dropped, so complete window sums prove that
    unordered mode kept each result on its side of the watermarks; timestamps are kept too."""
    seed = seed_of("watermarks")
    n, size = 300, 10

    class EveryRecord:
        def on_event(self, event, timestamp, output):
            output.emit_watermark(timestamp - 1)

        def on_periodic_emit(self, output):
            pass

    strategy = WatermarkStrategy.for_generator(EveryRecord).with_timestamp_assigner(lambda e, _: e)
    ds = env_of(1).from_collection(list(range(n))).assign_timestamps_and_watermarks(strategy)
    doubled = AsyncDataStream.unordered_wait(ds, SlowDouble(seed), Time.seconds(10), capacity=10).map(lambda t: t[0])
    sums = (
        doubled.key_by(lambda v: 0)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(size)))
        .reduce(lambda a, b: a + b)
    )
    got = sorted(sums.execute_and_collect("watermarks"))
    assert got == sorted(sum(2 * i for i in range(s, s + size)) for s in range(0, n, size))


# -- timeouts ----------------------------------------------------------------------------------


class SometimesStuck(AsyncFunction):
    """Multiples of 5 never answer in time; ``timeout`` gives them a fallback."""

    async def async_invoke(self, value):
        await asyncio.sleep(30 if value % 5 == 0 else 0.001)
        return [("ok", value)]

    def timeout(self, value):
        return [("timeout", value)]


@pytest.mark.timeout(90)
def test_a_request_that_times_out_gets_the_results_of_timeout(shared_cluster) -> None:
    ds = env_of(1).from_collection(list(range(40)))
    out = list(AsyncDataStream.unordered_wait(ds, SometimesStuck(), Time.milliseconds(300), capacity=10).execute_and_collect("timeouts"))
    assert sorted(out) == sorted(("timeout" if v % 5 == 0 else "ok", v) for v in range(40))


class Stuck(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(30)
        return [value]


@pytest.mark.timeout(90)
def test_a_timeout_fails_the_job_by_default_with_a_clear_error(shared_cluster) -> None:
    ds = env_of(1).from_collection([1, 2, 3])
    with pytest.raises(JobExecutionError) as e:
        list(AsyncDataStream.ordered_wait(ds, Stuck(), Time.milliseconds(200), capacity=2).execute_and_collect("stuck"))
    text = str(e.value) + str(getattr(e.value, "details", ""))
    assert "async wait operator" in text and "timed out" in text and "override AsyncFunction.timeout" in text


# -- retries -----------------------------------------------------------------------------------


class Flaky(AsyncFunction):
    """Raises ConnectionError on the first ``failures`` attempts of a record, then answers
    with the number of attempts it took; empty results on the first attempt when ``empty``."""

    def __init__(self, failures: int, empty: bool = False, error: type = ConnectionError):
        self.failures = failures
        self.empty = empty
        self.error = error

    def open(self, runtime_context):
        self.attempts: Counter = Counter()

    async def async_invoke(self, value):
        self.attempts[value] += 1
        n = self.attempts[value]
        await asyncio.sleep(0.001)
        if n <= self.failures:
            raise self.error(f"attempt {n} of {value} failed")
        if self.empty and n == self.failures + 1:
            return []
        return [(value, n)]


@pytest.mark.timeout(90)
def test_fixed_delay_retries_on_a_matching_exception(shared_cluster) -> None:
    strategy = AsyncRetryStrategy.fixed_delay(
        max_attempts=3, backoff_time_millis=10,
        exception_predicate=functools.partial(async_retry_predicates.exception_type_predicate, expected_error_type=ConnectionError),
    )
    ds = env_of(1).from_collection(list(range(20)))
    out = AsyncDataStream.ordered_wait_with_retry(ds, Flaky(failures=2), Time.seconds(10), strategy, capacity=4)
    assert list(out.execute_and_collect("fixed delay")) == [(v, 3) for v in range(20)]


@pytest.mark.timeout(90)
def test_exponential_backoff_retries_on_an_empty_result(shared_cluster) -> None:
    strategy = AsyncRetryStrategy.exponential_backoff(
        max_attempts=5, initial_delay=5, max_retry_delay=50, multiplier=2.0,
        result_predicate=async_retry_predicates.empty_result_predicate,
        exception_predicate=async_retry_predicates.has_exception_predicate,
    )
    ds = env_of(1).from_collection(list(range(20)))
    out = AsyncDataStream.unordered_wait_with_retry(ds, Flaky(failures=1, empty=True), Time.seconds(10), strategy, capacity=4)
    # attempt 1 raises, attempt 2 is empty: both retried; attempt 3 answers
    assert sorted(out.execute_and_collect("exponential")) == [(v, 3) for v in range(20)]


@pytest.mark.timeout(90)
def test_an_exception_the_predicate_does_not_match_fails_the_job(shared_cluster) -> None:
    strategy = AsyncRetryStrategy.fixed_delay(
        max_attempts=3, backoff_time_millis=10,
        exception_predicate=functools.partial(async_retry_predicates.exception_type_predicate, expected_error_type=TimeoutError),
    )
    ds = env_of(1).from_collection([7])
    out = AsyncDataStream.unordered_wait_with_retry(ds, Flaky(failures=1, error=ValueError), Time.seconds(10), strategy, capacity=1)
    with pytest.raises(JobExecutionError) as e:
        list(out.execute_and_collect("not retried"))
    text = str(e.value) + str(getattr(e.value, "details", ""))
    assert "attempt 1 of 7 failed" in text and "record 7" in text


@pytest.mark.timeout(90)
def test_retries_stop_when_the_strategy_says_so(shared_cluster) -> None:
    strategy = AsyncRetryStrategy.fixed_delay(max_attempts=2, backoff_time_millis=5,
                                              exception_predicate=async_retry_predicates.has_exception_predicate)
    ds = env_of(1).from_collection([7])
    out = AsyncDataStream.unordered_wait_with_retry(ds, Flaky(failures=10), Time.seconds(10), strategy, capacity=1)
    with pytest.raises(JobExecutionError) as e:
        list(out.execute_and_collect("exhausted"))
    # Flink's rule: attempt n may be retried while n <= max_attempts: 3 attempts in all
    assert "attempt 3 of 7 failed" in str(e.value) + str(getattr(e.value, "details", ""))


# -- refused programs --------------------------------------------------------------------------


def test_bad_programs_are_refused_before_anything_runs() -> None:
    from flinkpy.errors import InvalidProgramError

    class NotAsync(AsyncFunction):
        def async_invoke(self, value):  # type: ignore[override]
            return [value]

    ds = env_of(1).from_collection([1])
    with pytest.raises(InvalidProgramError, match="async def"):
        AsyncDataStream.unordered_wait(ds, NotAsync(), Time.seconds(1))
    strategy = AsyncRetryStrategy.fixed_delay(2, 10, exception_predicate=async_retry_predicates.has_exception_predicate)
    with pytest.raises(InvalidProgramError, match="needs a timeout"):
        AsyncDataStream.unordered_wait_with_retry(ds, SlowDouble(0), Time.milliseconds(0), strategy)
    with pytest.raises(InvalidProgramError, match="capacity"):
        AsyncDataStream.ordered_wait(ds, SlowDouble(0), Time.seconds(1), capacity=0)


def test_the_spark_runner_refuses_async_io_with_a_reason() -> None:
    from flinkpy.spark.plan import UntranslatableError, translate

    env = env_of(1)
    AsyncDataStream.unordered_wait(env.from_collection([1]), SlowDouble(0), Time.seconds(1)).uid("lookup").print()
    with pytest.raises(UntranslatableError) as e:
        translate(env, config={})
    assert "async I/O operator" in str(e.value) and "uid 'lookup'" in str(e.value)
    assert "flinkpy's engine" in e.value.remedy


# -- exactly-once after a SIGKILL with requests outstanding ------------------------------------

N = 12_000
KEYS = 7


class Lookup(AsyncFunction):
    """A "remote" lookup: (key, value) after a random 0-4 ms."""

    def __init__(self, seed: int):
        self.seed = seed

    def open(self, runtime_context):
        self.rng = random.Random(self.seed + runtime_context.get_index_of_this_subtask())

    async def async_invoke(self, value):
        await asyncio.sleep(self.rng.randrange(5) / 1000.0)
        return [(value % KEYS, value)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ordered", [False, True], ids=["unordered", "ordered"])
def test_exactly_once_after_the_async_task_is_killed_with_requests_outstanding(start, ordered: bool) -> None:
    """The async task (chained to its source) SIGKILLs itself when checkpoint 2 completes; its
    capacity is full nearly all the time, so that checkpoint holds requests in flight. Per key,
    the count and the sum of the looked-up values (keyed state, exactly-once) must be exact: a
    request lost on the restore lowers them, one issued twice raises them."""
    seed = seed_of("async exactly-once")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    numbers = env.from_source(NumberSequenceSource(1, N), WatermarkStrategy.no_watermarks(), "numbers")
    wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
    looked_up = wait(numbers, Lookup(seed), Time.seconds(30), capacity=16)
    totals = (
        looked_up.map(lambda kv: (kv[0], 1, kv[1]))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1], a[2] + b[2]))
        .name("totals")
    )
    start(faults=[{"point": "after-complete", "vertex": vertex_id(env, "async wait operator"), "subtask": 0, "checkpoint": 2}])

    got = last_per_key(((k, (c, s)) for k, c, s in totals.execute_and_collect("async exactly-once")))

    expected = {k: (len(range(k or KEYS, N + 1, KEYS)), sum(range(k or KEYS, N + 1, KEYS))) for k in range(KEYS)}
    assert got == expected
    jid = only_job()["jid"]
    job = assert_recovered(jid, cause="SIGKILL")
    assert job["restarts"] == 1, [e["message"] for e in exception_entries(jid)]
    restored = checkpoints(jid)["latest"]["restored"]
    assert restored is not None and restored["id"] >= 2, restored


# -- stop with a savepoint, then resume --------------------------------------------------------

STOPPABLE = """
import asyncio, json, os, sys
from flinkpy.common import Time, WatermarkStrategy
from flinkpy.datastream import AsyncDataStream, AsyncFunction, MapFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

count, out_dir, tag = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Slow(AsyncFunction):
    async def async_invoke(self, n):
        await asyncio.sleep((2 + n % 5) / 1000)
        return [n]


class Seen(MapFunction):
    def open(self, ctx):
        self.index, self.seen = ctx.get_index_of_this_subtask(), []

    def map(self, n):
        self.seen.append(n)
        return n

    def close(self):
        with open(os.path.join(out_dir, f"{tag}-{self.index}.json"), "w") as f:
            json.dump(self.seen, f)


env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(100)
numbers = env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
looked_up = AsyncDataStream.unordered_wait(numbers, Slow(), Time.seconds(30), capacity=4).uid("lookup")
looked_up.map(Seen()).uid("seen")
env.execute("stoppable async")
"""


@pytest.mark.timeout(120)
def test_a_stop_with_a_savepoint_and_a_resume_see_every_result_once(start, tmp_path: Path) -> None:
    """Stopped (no drain) with requests outstanding, the job's savepoint holds them; the resumed
    job issues them. Every result reaches the operator after the async one exactly once over
    both runs: none lost, none emitted by the stopping job as well."""
    import json

    from conftest import run_cli
    from test_savepoint_cli import job_state, one_json, running_with_checkpoint

    start()
    program, out = tmp_path / "stoppable.py", tmp_path / "out"
    program.write_text(STOPPABLE)
    out.mkdir()
    count = 12_000
    res = run_cli("run", "--json", "-d", str(program), str(count), str(out), "first", timeout=120)
    assert res.returncode == 0, res.stderr
    first = json.loads(res.stdout)["jobs"][0]["jid"]
    running_with_checkpoint(first)
    stop = run_cli("stop", "--json", "--savepoint-path", str(tmp_path / "sps"), first)
    assert stop.returncode == 0, stop.stderr
    location = one_json(stop)["location"]
    assert job_state(first) == "FINISHED"
    res = run_cli("run", "-s", location, str(program), str(count), str(out), "second", timeout=120)
    assert res.returncode == 0, res.stderr
    firsts = json.loads((out / "first-0.json").read_text())
    seconds = json.loads((out / "second-0.json").read_text())
    assert 0 < len(firsts) < count, "the stop came after the end of the input"
    both = Counter(firsts + seconds)
    assert sorted(both) == list(range(1, count + 1)), f"lost: {sorted(set(range(1, count + 1)) - set(both))[:10]}"
    assert max(both.values()) == 1, f"seen twice: {[n for n, c in both.items() if c > 1][:10]}"
