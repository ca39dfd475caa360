"""Joins against plain Python: the interval join (operator and jobs, crashes, savepoints and
rescaling), the window join and the window co-group.

Every expected result is computed here from the generated inputs, with no flinkpy code: the
interval join as "same key and ``l.ts + lower <= r.ts <= l.ts + upper``", the window join as
"same key and same window" with Flink's tumbling and sliding window assignment. Inputs keep
their disorder within the watermark's bound, so no record is late unless a test makes it late
on purpose; then the reference knows which ones are.

The operator tests drive the interval-join operator directly, with both state backends, through
a script of records and watermarks — the one place where lateness is deterministic (in a job,
whether a record is behind the watermark depends on how the two inputs' channels interleave).
The job tests run real clusters; the crash tests SIGKILL the join's task at named points and
compare an exactly-once FileSink's committed lines with the reference; the savepoint test stops
the job twice with a savepoint and resumes it at parallelism 2 -> 3 -> 1.
"""

from __future__ import annotations

import json
import random
import textwrap
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from backends import state_backend  # noqa: F401 - fixture
from conftest import wait_for
from flinkpy.common import Duration, Encoder, RestartStrategies, Time, WatermarkStrategy
from flinkpy.datastream import (
    CoGroupFunction,
    FlatJoinFunction,
    JoinFunction,
    OutputTag,
    ProcessFunction,
    ProcessJoinFunction,
    StreamExecutionEnvironment,
)
from flinkpy.datastream.connectors import DataGeneratorSource, FileSink, OutputFileConfig
from flinkpy.datastream.connectors.file_system import BucketAssigner
from flinkpy.datastream.window import (
    CountEvictor,
    CountTrigger,
    GlobalWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from flinkpy.errors import InvalidProgramError
from flinkpy.state.key_groups import KeyGroupAssigner, key_group_range_for_operator
from flinkpy.task.interval_join import IntervalJoinOperator
from flinkpy.task.operators import Output
from flinkpy.task.timers import InternalTimerService
from flinkpy.task.watermarks import MAX_WATERMARK
from test_event_time import Punctuated
from test_recovery import assert_recovered, only_job, seeded, start, vertex_id  # noqa: F401 - fixture
from test_savepoint_event_time import _running, _stop, _submit


# ---------------------------------------------------------------------------------------------
# References (plain Python)
# ---------------------------------------------------------------------------------------------


def ref_interval_join(lefts: list[tuple], rights: list[tuple], lower: int, upper: int) -> Counter:
    """(left id, right id, max timestamp) of every pair of records ``(key, id, ts)`` that joins."""
    by_key: dict = defaultdict(list)
    for r in rights:
        by_key[r[0]].append(r)
    return Counter(
        (l[1], r[1], max(l[2], r[2])) for l in lefts for r in by_key[l[0]] if l[2] + lower <= r[2] <= l[2] + upper
    )


def ref_windows(ts: int, size: int, slide: int) -> list[int]:
    """The start of every window of ``size`` every ``slide`` ms that holds ``ts`` (ts >= 0)."""
    last = ts - ts % slide
    return list(range(last, ts - size, -slide))  # as Flink: starts may be negative


def ref_window_join(firsts: list[tuple], seconds: list[tuple], size: int, slide: int) -> tuple[Counter, Counter]:
    """The window join's (first id, second id, window end - 1) and the co-group's
    (sorted first ids, sorted second ids, window end - 1), per key and window."""
    groups: dict = defaultdict(lambda: ([], []))
    for side, records in ((0, firsts), (1, seconds)):
        for key, ident, ts in records:
            for start in ref_windows(ts, size, slide):
                groups[(key, start)][side].append(ident)
    joined: Counter = Counter()
    grouped: Counter = Counter()
    for (key, start), (a, b) in groups.items():
        end = start + size - 1
        joined.update((x, y, end) for x in a for y in b)
        grouped[(tuple(sorted(a)), tuple(sorted(b)), end)] += 1
    return joined, grouped


# ---------------------------------------------------------------------------------------------
# 1. The operator, driven by a script, with each backend
# ---------------------------------------------------------------------------------------------


class Collect(Output):
    def __init__(self) -> None:
        self.records: list = []

    def process(self, values: list, timestamps: list[int] | None) -> None:
        self.records += zip(values, timestamps or [None] * len(values))

    def process_watermark(self, watermark: int) -> None:
        pass


class Pair(ProcessJoinFunction):
    def process_element(self, left, right, ctx):
        assert (ctx.get_left_timestamp(), ctx.get_right_timestamp()) == (left[2], right[2])
        yield left[1], right[1], ctx.get_timestamp()


def record_key(record: tuple) -> Any:
    return record[0]


class Harness:
    """An interval-join operator on ``backend`` with its timers, main output and late outputs."""

    def __init__(self, backend: Any, lower: int, upper: int):
        self.backend = backend
        self.out, self.late = Collect(), Collect()
        self.op = IntervalJoinOperator(
            "join", Pair(), self.out, record_key, backend, False, key2=record_key, lower=lower, upper=upper,
            late_tags=("late", "late"),
        )
        self.op.side_outputs = {"late": self.late}
        self.op.timers = InternalTimerService(backend, self.op.on_event_time, self.op.on_processing_time)
        self.op.open(None)

    def feed(self, event: tuple) -> None:
        what, payload = event
        if what == "wm":
            self.op.process_watermark(payload)
        elif what == "left":
            self.op.process([payload], [payload[2]])
        else:
            self.op.process2([payload], [payload[2]])


def buffered(backend: Any) -> int:
    """How many records the join's buffers hold (read from the canonical snapshot)."""
    states = backend.snapshot()["states"]
    return sum(
        len(records)
        for name in (IntervalJoinOperator.LEFT_BUFFER, IntervalJoinOperator.RIGHT_BUFFER)
        for keys in states.get(name, {}).get("key_groups", {}).values()
        for buckets in keys.values()
        for records in buckets.values()
    )


def script(rng: random.Random, n: int = 800, keys: int = 6, bound: int = 40) -> tuple[list, list, list, list]:
    """Records ``(key, id, ts)`` of both sides in arrival order with punctuated watermarks; a few
    are late on purpose (strictly behind the watermark when they arrive). Returns the events and
    the on-time left and right records and the late ones."""
    events: list = []
    lefts, rights, late = [], [], []
    highest, wm = -1, None
    for i in range(n):
        side = rng.choice(("left", "right"))
        ts = i * 10 + rng.randrange(bound)  # on time: above every watermark so far
        is_late = wm is not None and wm > 300 and rng.random() < 0.05
        if is_late:
            ts = wm - 1 - rng.randrange(300)
        record = (f"k{rng.randrange(keys)}", i, ts)
        events.append((side, record))
        (late if is_late else lefts if side == "left" else rights).append(record)
        if not is_late:
            highest = max(highest, ts)
        if rng.random() < 0.3 and highest - bound - 1 > (wm if wm is not None else -(2**63)):
            wm = highest - bound - 1
            events.append(("wm", wm))
    return events, lefts, rights, late


BOUNDS = [(-30, 40), (5, 60), (-70, -5), (0, 0)]


@pytest.mark.parametrize("lower, upper", BOUNDS)
def test_operator_joins_exactly_the_pairs_in_bounds_and_sends_late_records_aside(state_backend, lower: int, upper: int) -> None:  # noqa: F811
    events, lefts, rights, late = script(seeded(f"operator {lower} {upper}"))
    assert late, "the script has late records"
    h = Harness(state_backend(), lower, upper)
    for event in events:
        h.feed(event)
    h.op.process_watermark(MAX_WATERMARK)
    got = Counter(value for value, ts in h.out.records)
    assert got == ref_interval_join(lefts, rights, lower, upper)
    assert all(value[2] == ts for value, ts in h.out.records), "outputs carry max(left ts, right ts)"
    assert Counter(value for value, _ in h.late.records) == Counter(late)
    # every buffered record was cleaned up by its timer once the watermark passed it, and the
    # timers are gone too
    assert buffered(h.backend) == 0 and h.backend.num_entries() == 0


def test_operator_cleans_up_behind_the_watermark(state_backend) -> None:  # noqa: F811
    """A left record is buffered until the watermark passes ts + upper, a right one until it
    passes ts - lower; buffers do not grow with the stream."""
    h = Harness(state_backend(), -10, 20)
    h.feed(("left", ("a", 1, 100)))
    h.feed(("right", ("a", 2, 100)))
    h.feed(("left", ("a", 3, 100)))
    assert buffered(h.backend) == 3
    h.feed(("wm", 109))
    assert buffered(h.backend) == 3
    h.feed(("wm", 110))  # right at 100 can only match lefts at <= 110: none can come any more
    assert buffered(h.backend) == 2
    h.feed(("wm", 120))  # lefts at 100 matched rights up to 120
    assert buffered(h.backend) == 0 and h.backend.num_entries() == 0
    assert [v for v, _ in h.out.records] == [(1, 2, 100), (3, 2, 100)]


def test_operator_state_restores_and_rescales_by_key_group(state_backend) -> None:  # noqa: F811
    """Half the script on one subtask, a snapshot, the rest on three subtasks restored from it
    (each with the key groups it owns): together they join exactly what one operator would."""
    events, lefts, rights, late = script(seeded("operator rescale"))
    lower, upper = -25, 35
    first = Harness(state_backend(), lower, upper)
    half = len(events) // 2
    for event in events[:half]:
        first.feed(event)
    snapshot = first.backend.snapshot()
    watermark = max(e[1] for e in events[:half] if e[0] == "wm")
    parts = [Harness(_restored(state_backend, snapshot, i), lower, upper) for i in range(3)]
    assign = KeyGroupAssigner(128)
    for h in parts:
        h.feed(("wm", watermark))  # a restored task hears the watermark again soon
    for event in events[half:]:
        if event[0] == "wm":
            for h in parts:
                h.feed(event)
        else:
            (owner,) = [h for h in parts if assign(event[1][0]) in h.backend.key_group_range]
            owner.feed(event)
    for h in parts:
        h.op.process_watermark(MAX_WATERMARK)
    got = Counter(v for h in [first, *parts] for v, _ in h.out.records)
    assert got == ref_interval_join(lefts, rights, lower, upper)
    assert Counter(v for h in [first, *parts] for v, _ in h.late.records) == Counter(late)


def _restored(factory: Any, snapshot: dict, index: int) -> Any:
    backend = factory(128, key_group_range_for_operator(128, 3, index))
    backend.restore([snapshot])
    return backend


class Split(ProcessJoinFunction):
    """Equal ids' parities go down the main output; the others to side outputs, both ways."""

    def process_element(self, left, right, ctx):
        if left[1] % 2 == right[1] % 2:
            yield left[1], right[1]
        elif left[1] % 2:
            yield ODD_LEFT, (left[1], right[1])
        else:
            ctx.output(EVEN_LEFT, (left[1], right[1]))


ODD_LEFT, EVEN_LEFT = OutputTag("odd-left"), OutputTag("even-left")


def test_operator_side_outputs_carry_the_pair_timestamp(state_backend) -> None:  # noqa: F811
    h = Harness(state_backend(), -10, 10)
    odd, even = Collect(), Collect()
    h.op.fn = Split()
    h.op.side_outputs.update({ODD_LEFT.tag_id: odd, EVEN_LEFT.tag_id: even})
    h.op.open(None)
    for event in [("left", ("a", 1, 100)), ("left", ("a", 2, 104)), ("right", ("a", 3, 103)), ("right", ("a", 4, 95))]:
        h.feed(event)
    assert sorted(h.out.records) == [((1, 3), 103), ((2, 4), 104)]
    assert odd.records == [((1, 4), 100)]
    assert even.records == [((2, 3), 104)]


def test_operator_refuses_records_without_timestamps(state_backend) -> None:  # noqa: F811
    h = Harness(state_backend(), 0, 10)
    with pytest.raises(Exception, match="without an event-time timestamp on its right"):
        h.op.process2([("a", 1, 5)], None)


# ---------------------------------------------------------------------------------------------
# 2. The API: bounds, exclusive bounds, refusals
# ---------------------------------------------------------------------------------------------


class Tagged(ProcessJoinFunction):
    def __init__(self, tag: str):
        self.tag = tag

    def process_element(self, left, right, ctx):
        yield self.tag, left[1], right[1], ctx.get_timestamp()


def punctuated(bound: int) -> WatermarkStrategy:
    """Records ``(key, id, ts)``; after each one the watermark is the largest ts seen - bound - 1."""
    return WatermarkStrategy.for_generator(lambda: Punctuated(bound)).with_timestamp_assigner(lambda e, _: e[2])


class Stamp(ProcessFunction):
    """Attaches each record's timestamp, to check the join's output timestamps."""

    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


def two_inputs(rng: random.Random, n: int, keys: int, bound: int) -> tuple[list[tuple], list[tuple]]:
    """Two inputs ``(key, id, ts)`` whose disorder stays within ``bound`` (nothing late)."""
    firsts = [(rng.randrange(keys), i, i * 7 + rng.randrange(bound)) for i in range(n)]
    seconds = [(rng.randrange(keys), 10_000 + i, i * 7 + rng.randrange(bound)) for i in range(n)]
    return firsts, seconds


VARIANTS = {
    "inclusive": (-20, 30, False, False),
    "lower-exclusive": (-20, 30, True, False),
    "upper-exclusive": (-20, 30, False, True),
    "both-exclusive": (0, 2, True, True),
    "past-only": (-40, -10, False, False),
}


@pytest.mark.timeout(90)
def test_interval_join_job_matches_plain_python_for_every_kind_of_bound(flinkpy_home) -> None:
    bound = 50
    lefts, rights = two_inputs(seeded("interval join bounds"), 1_500, 8, bound)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    left = env.from_collection(lefts).assign_timestamps_and_watermarks(punctuated(bound)).set_parallelism(1)
    right = env.from_collection(rights).assign_timestamps_and_watermarks(punctuated(bound)).set_parallelism(1)
    results = []
    for tag, (lower, upper, lower_ex, upper_ex) in VARIANTS.items():
        joined = left.key_by(record_key).interval_join(right.key_by(record_key)).between(lower, upper)
        if lower_ex:
            joined = joined.lower_bound_exclusive()
        if upper_ex:
            joined = joined.upper_bound_exclusive()
        results.append(joined.process(Tagged(tag)).process(Stamp()))
    got = list(results[0].union(*results[1:]).execute_and_collect("interval join bounds"))

    for tag, (lower, upper, lower_ex, upper_ex) in VARIANTS.items():
        expected = ref_interval_join(lefts, rights, lower + lower_ex, upper - upper_ex)
        mine = [(v[1:], ts) for v, ts in got if v[0] == tag]
        assert Counter(v for v, _ in mine) == expected, tag
        assert all(v[2] == ts for v, ts in mine), f"{tag}: outputs carry the larger timestamp"
    assert {v[0] for v, _ in got} == set(VARIANTS), "every variant joined something"


def test_interval_join_refuses_bad_programs() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    a = env.from_collection([("k", 1, 1)]).key_by(record_key)
    b = env.from_collection([("k", 2, 1)])
    with pytest.raises(InvalidProgramError, match="needs a KeyedStream"):
        a.interval_join(b)
    with pytest.raises(InvalidProgramError, match="reversed"):
        a.interval_join(b.key_by(record_key)).between(10, 5)
    with pytest.raises(InvalidProgramError, match="matches nothing"):
        a.interval_join(b.key_by(record_key)).between(3, 4).lower_bound_exclusive().upper_bound_exclusive().process(Pair())
    with pytest.raises(InvalidProgramError, match="ProcessJoinFunction"):
        a.interval_join(b.key_by(record_key)).between(0, 4).process(42)


@pytest.mark.timeout(60)
def test_interval_join_of_records_without_timestamps_fails_the_job_with_a_remedy(flinkpy_home) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    left = env.from_collection([("k", 1, 1)]).key_by(record_key)
    right = env.from_collection([("k", 2, 1)]).key_by(record_key)
    joined = left.interval_join(right).between(-5, 5).process(Pair())
    with pytest.raises(Exception, match="without an event-time timestamp") as info:
        list(joined.execute_and_collect("no timestamps"))
    assert "assign_timestamps_and_watermarks" in str(info.value)


# ---------------------------------------------------------------------------------------------
# 3. Window join and co-group
# ---------------------------------------------------------------------------------------------


class JoinIds(JoinFunction):
    def __init__(self, tag: str):
        self.tag = tag

    def join(self, first, second):
        return self.tag, first[1], second[1]


class FlatJoinIds(FlatJoinFunction):
    def join(self, first, second):
        if (first[1] + second[1]) % 2 == 0:  # any number of outputs per pair: here 0 or 1
            yield "flat", first[1], second[1]


class GroupIds(CoGroupFunction):
    def __init__(self, tag: str):
        self.tag = tag

    def co_group(self, first, second):
        yield self.tag, tuple(sorted(r[1] for r in first)), tuple(sorted(r[1] for r in second))


@pytest.mark.timeout(90)
def test_window_join_and_co_group_match_plain_python_for_tumbling_and_sliding_windows(flinkpy_home) -> None:
    bound = 40
    firsts, seconds = two_inputs(seeded("window joins"), 1_200, 10, bound)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    a = env.from_collection(firsts).assign_timestamps_and_watermarks(punctuated(bound)).set_parallelism(1)
    b = env.from_collection(seconds).assign_timestamps_and_watermarks(punctuated(bound)).set_parallelism(1)
    shapes = {"tumbling": (300, 300), "sliding": (300, 100)}
    outputs = []
    for name, (size, slide) in shapes.items():
        windows = TumblingEventTimeWindows.of(Time.milliseconds(size)) if size == slide else SlidingEventTimeWindows.of(
            Time.milliseconds(size), Time.milliseconds(slide))
        outputs.append(a.join(b).where(record_key).equal_to(record_key).window(windows).apply(JoinIds("join-" + name)))
        outputs.append(a.co_group(b).where(record_key).equal_to(record_key).window(windows).apply(GroupIds("group-" + name)))
    tumbling = TumblingEventTimeWindows.of(Time.milliseconds(300))
    outputs.append(a.join(b).where(record_key).equal_to(record_key).window(tumbling).apply(FlatJoinIds()))
    outputs.append(a.join(b).where(record_key).equal_to(record_key).window(tumbling).apply(lambda x, y: ("lambda", x[1], y[1])))
    got = list(outputs[0].union(*outputs[1:]).process(Stamp()).execute_and_collect("window joins"))

    by_tag: dict = defaultdict(Counter)
    for (tag, x, y), ts in got:
        by_tag[tag][(x, y, ts)] += 1
    for name, (size, slide) in shapes.items():
        joined, grouped = ref_window_join(firsts, seconds, size, slide)
        assert by_tag["join-" + name] == joined, name
        assert by_tag["group-" + name] == grouped, name
    joined, _ = ref_window_join(firsts, seconds, 300, 300)
    assert by_tag["lambda"] == joined
    assert by_tag["flat"] == Counter({k: n for k, n in joined.items() if (k[0] + k[1]) % 2 == 0})
    assert joined and all(len(by_tag[t]) for t in by_tag), "every variant produced output"


def test_window_join_adds_its_operators_at_apply_with_the_window_settings() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    a, b = env.from_collection([1]), env.from_collection([2])
    before = len(env._graph.nodes)
    trigger, evictor = CountTrigger.of(3), CountEvictor.of(2)
    windowed = (a.join(b).where(lambda x: x).equal_to(lambda x: x).window(GlobalWindows.create())
                .trigger(trigger).evictor(evictor).allowed_lateness(Time.seconds(2)))
    assert len(env._graph.nodes) == before, "nothing is added to the job before apply()"
    spec = windowed.apply(JoinIds("x"))._node.fn
    assert (spec.trigger, spec.evictor, spec.allowed_lateness_ms) == (trigger, evictor, 2_000)
    assert len(env._graph.nodes) == before + 3  # a tagging map per input and the window
    with pytest.raises(InvalidProgramError, match="WindowAssigner"):
        a.co_group(b).where(lambda x: x).equal_to(lambda x: x).window(Time.seconds(1))


def test_window_join_refuses_a_function_of_the_wrong_kind() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    a, b = env.from_collection([1]), env.from_collection([2])
    windows = a.join(b).where(lambda x: x).equal_to(lambda x: x).window(TumblingEventTimeWindows.of(Time.seconds(1)))
    with pytest.raises(InvalidProgramError, match="JoinFunction"):
        windows.apply(42)
    grouped = a.co_group(b).where(lambda x: x).equal_to(lambda x: x).window(TumblingEventTimeWindows.of(Time.seconds(1)))
    with pytest.raises(InvalidProgramError, match="CoGroupFunction"):
        grouped.apply("not a function")


# ---------------------------------------------------------------------------------------------
# 4. Exactly once across a SIGKILL of the join's task
# ---------------------------------------------------------------------------------------------

N = 8_000
KEYS = 40
STEP = 10  # ms between consecutive records of one input
DISORDER = 300  # shipments are up to this late against their index; the watermark allows it
WITHIN = 1_000  # a shipment matches an order of its key shipped within this many ms
RATE = 4_000  # records/s per input: the job lasts ~2 s, long enough for checkpoint 2


def order(i: int) -> tuple:
    return (i % KEYS, i, i * STEP)


def shipment(j: int) -> tuple:
    return ((j * 7) % KEYS, j, j * STEP + (j * 7919) % DISORDER)


class Match(ProcessJoinFunction):
    def process_element(self, left, right, ctx):
        yield left[1], right[1]


def expected_matches() -> Counter:
    pairs = ref_interval_join([order(i) for i in range(N)], [shipment(j) for j in range(N)], 0, WITHIN)
    return Counter(str((i, j)) for i, j, _ in pairs.elements())


def orders_join_job(out: Path, backend: str) -> StreamExecutionEnvironment:
    from backends import engine_backend

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    env.set_state_backend(engine_backend(backend))
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(DISORDER)).with_timestamp_assigner(lambda e, _: e[2])
    orders = env.from_source(DataGeneratorSource(order, N, records_per_second=RATE), strategy, "orders").set_parallelism(1)
    shipments = env.from_source(DataGeneratorSource(shipment, N, records_per_second=RATE), strategy, "shipments").set_parallelism(1)
    matches = (
        orders.key_by(record_key)
        .interval_join(shipments.key_by(record_key))
        .between(Time.milliseconds(0), Time.milliseconds(WITHIN))
        .process(Match())
        .name("join")
    )
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("match").with_part_suffix(".txt").build())
        .build()
    )
    matches.sink_to(sink).name("matches")
    return env


def committed(out: Path) -> Counter:
    lines: Counter = Counter()
    for path in out.rglob("match-*.txt"):
        lines.update(path.read_text().splitlines())
    return lines


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "point, backend",
    [
        # the join task holds one input back, aligning the barriers of checkpoint 2 of both inputs
        ("alignment", "heap"),
        # its buffers of checkpoint 2 are being written
        ("upload", "rocksdb"),
        # checkpoint 2 is complete and the join dies as it hears so
        ("after-complete", "heap"),
    ],
)
def test_interval_join_is_exact_across_a_sigkill_of_its_task(start, tmp_path: Path, point: str, backend: str) -> None:  # noqa: F811
    out = tmp_path / "out"
    env = orders_join_job(out, backend)
    start(faults=[{"point": point, "vertex": vertex_id(env, "join"), "subtask": 0, "checkpoint": 2}])
    env.execute("orders-shipments")

    assert_recovered(only_job()["jid"], cause="SIGKILL")
    got, expected = committed(out), expected_matches()
    assert got == expected, f"{sum((got - expected).values())} matches too many, {sum((expected - got).values())} missing"


# ---------------------------------------------------------------------------------------------
# 5. Stop with a savepoint, resume rescaled: 2 -> 3 -> 1
# ---------------------------------------------------------------------------------------------

SAVEPOINT_N = 6_000

JOB = textwrap.dedent(
    """
    import sys
    from flinkpy.common import Duration, Time, WatermarkStrategy
    from flinkpy.datastream import ProcessJoinFunction, StreamExecutionEnvironment
    from flinkpy.datastream.connectors import DataGeneratorSource
    from flinkpy.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend

    OUT = sys.argv[1]
    BACKEND, N, KEYS, STEP, DISORDER, WITHIN = %r, %d, %d, %d, %d, %d

    def order(i):
        return (i %% KEYS, i, i * STEP)

    def shipment(j):
        return ((j * 7) %% KEYS, j, j * STEP + (j * 7919) %% DISORDER)

    class Match(ProcessJoinFunction):
        def process_element(self, left, right, ctx):
            yield left[1], right[1]

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(200)
    env.set_state_backend(EmbeddedRocksDBStateBackend() if BACKEND == "rocksdb" else HashMapStateBackend())
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(DISORDER)).with_timestamp_assigner(
        lambda e, _: e[2])
    orders = env.from_source(DataGeneratorSource(order, N, records_per_second=450), strategy, "orders")
    shipments = env.from_source(DataGeneratorSource(shipment, N, records_per_second=450), strategy, "shipments")
    (orders.uid("orders").set_parallelism(1).key_by(lambda o: o[0])
        .interval_join(shipments.uid("shipments").set_parallelism(1).key_by(lambda s: s[0]))
        .between(Time.milliseconds(0), Time.milliseconds(WITHIN))
        .process(Match()).uid("join")
        .map(lambda m, out=OUT: print(repr(m), file=open(out, "a"), flush=True) or m).uid("log"))
    env.execute("orders-shipments-rescaled")
    """
    % ("{backend}", SAVEPOINT_N, KEYS, STEP, DISORDER, WITHIN)
)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_interval_join_survives_stop_with_savepoint_and_rescale_2_3_1(cluster, cli, tmp_path: Path, backend: str) -> None:
    job, out = tmp_path / "job.py", tmp_path / "matches.txt"
    job.write_text(JOB.replace("{backend}", backend))
    pairs = ref_interval_join([order(i) for i in range(SAVEPOINT_N)], [shipment(j) for j in range(SAVEPOINT_N)], 0, WITHIN)
    expected = Counter(repr((i, j)) for i, j, _ in pairs.elements())

    def lines() -> int:
        return len(out.read_text().splitlines()) if out.exists() else 0

    savepoint = None
    for parallelism, share in ((2, 0.25), (3, 0.5)):
        jid = _submit(cli, job, out, parallelism, savepoint)
        wait_for(lambda: _running(cli, jid) and lines() >= share * sum(expected.values()), timeout=90,
                 message=f"matches at parallelism {parallelism}")
        savepoint = _stop(cli, jid, tmp_path / f"sp-{parallelism}", drain=False)
        assert lines() < sum(expected.values()), f"the job finished before it was stopped at parallelism {parallelism}"
    jid = _submit(cli, job, out, 1, savepoint)
    wait_for(lambda: json.loads(cli("job", "show", jid, "--json").stdout)["state"] == "FINISHED", timeout=120,
             message="the job to finish at parallelism 1")
    got = Counter(out.read_text().splitlines())
    assert got == expected, f"{sum((got - expected).values())} matches too many, {sum((expected - got).values())} missing"


# ---------------------------------------------------------------------------------------------
# 6. Window joins run on Spark too: they are windows
# ---------------------------------------------------------------------------------------------

SPARK_JOB = textwrap.dedent(
    """
    from flinkpy.common import Time, WatermarkStrategy
    from flinkpy.datastream import CoGroupFunction, StreamExecutionEnvironment
    from flinkpy.datastream.window import SlidingEventTimeWindows, TumblingEventTimeWindows

    FIRSTS, SECONDS = %r, %r

    class Group(CoGroupFunction):
        def co_group(self, first, second):
            yield "group", tuple(sorted(r[1] for r in first)), tuple(sorted(r[1] for r in second))

    env = StreamExecutionEnvironment.get_execution_environment()
    by_ts = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, _: e[2])
    a = env.from_collection(FIRSTS).assign_timestamps_and_watermarks(by_ts)
    b = env.from_collection(SECONDS).assign_timestamps_and_watermarks(by_ts)
    sliding = SlidingEventTimeWindows.of(Time.milliseconds(300), Time.milliseconds(100))
    joined = a.join(b).where(lambda r: r[0]).equal_to(lambda r: r[0]).window(sliding).apply(
        lambda x, y: ("join", x[1], y[1]))
    grouped = a.co_group(b).where(lambda r: r[0]).equal_to(lambda r: r[0]).window(
        TumblingEventTimeWindows.of(Time.milliseconds(300))).apply(Group())
    joined.union(grouped).print()
    env.execute("window joins on spark")
    """
)


@pytest.mark.timeout(400)
def test_window_join_and_co_group_run_on_spark_with_the_same_results(flinkpy_home, cli, tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install -e '.[spark]')")
    from test_examples import printed_records

    rng = seeded("window joins on spark")
    firsts = [(rng.randrange(4), i, i * 10) for i in range(120)]  # in time order: nothing late
    seconds = [(rng.randrange(4), 1_000 + i, i * 10 + 5) for i in range(120)]
    job = tmp_path / "window_joins.py"
    job.write_text(SPARK_JOB % (firsts, seconds))
    res = cli("run", "--runner", "spark", str(job), timeout=380)
    assert res.returncode == 0, res.stderr[-3000:]
    got = Counter(printed_records(res.stdout))
    joined, _ = ref_window_join(firsts, seconds, 300, 100)
    _, grouped = ref_window_join(firsts, seconds, 300, 300)
    expected = Counter(("join", x, y) for x, y, _ in joined.elements())
    expected.update(("group", a, b) for a, b, _ in grouped.elements())
    assert got == expected
