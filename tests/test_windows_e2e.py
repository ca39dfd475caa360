"""Event-time windows end to end: real clusters, out-of-order input, results equal to a reference.

The reference (``ref_*`` below) is an independent plain-Python model of Flink's event-time
window semantics: tumbling, sliding and session assignment, the watermark, allowed lateness and
late side output. The jobs read seeded out-of-order input whose disorder stays within the
watermark bound, so no record is late and the windows' contents do not depend on batching,
parallelism, buffer timeouts or on tasks dying mid-run.

A crashed run may emit a window twice (restored from a checkpoint taken before the window fired,
it fires again with the same contents), so *the result* of a job is the SET of its distinct
(window, key, value) outputs, and no (window, key) may carry two different values.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter, defaultdict
from typing import Any, Iterable

import pytest

from flinkpy.common import Duration, RestartStrategies, Time, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.datastream.window import (
    EventTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from test_recovery import assert_recovered, only_job, start, vertex_id  # noqa: F401 (start: fixture)

MIN_WM = -(2**63)
MAX_WM = 2**63 - 1


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED") or random.randrange(2**32))
    print(f"{name}: seed {seed} (rerun with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


# ---------------------------------------------------------------------------------------------
# The reference: window assignment and a sequential model of the event-time window operator
# ---------------------------------------------------------------------------------------------


def ref_tumbling(ts: int, size: int) -> list[tuple[int, int]]:
    start = ts - ts % size  # Python's % is a floor modulo: right for negative timestamps too
    return [(start, start + size)]


def ref_sliding(ts: int, size: int, slide: int) -> list[tuple[int, int]]:
    last = ts - ts % slide
    return [(s, s + size) for s in range(last, ts - size, -slide)]


def ref_sessions(stamps: Iterable[int], gap: int) -> list[tuple[int, int, list[int]]]:
    """(start, end, member timestamps) of the sessions of one key: [ts, ts + gap) windows
    merged while they overlap or touch."""
    out: list[list] = []
    for ts in sorted(stamps):
        if out and ts <= out[-1][1]:
            out[-1][1] = max(out[-1][1], ts + gap)
            out[-1][2].append(ts)
        else:
            out.append([ts, ts + gap, [ts]])
    return [(s, e, m) for s, e, m in out]


def ref_all_on_time(events: Iterable[tuple[Any, int, Any]], assign, combine) -> dict[tuple[Any, tuple[int, int]], Any]:
    """Nothing late: every (key, window) of the input with its combined values."""
    acc: dict = {}
    for key, ts, value in events:
        for w in assign(ts):
            acc[(key, w)] = value if (key, w) not in acc else combine(acc[(key, w)], value)
    return acc


def ref_punctuated_windows(events: list[tuple[Any, int, Any]], assign, combine, *, bound: int, lateness: int):
    """The window operator behind a punctuated watermark (``max_ts - bound - 1`` after every
    event), for non-merging assigners with the EventTimeTrigger and a reduce.

    Returns ``(fired, late)``: ``fired`` is the list of (key, window, value) firings in order
    (a window fires when the watermark passes its end, and again for each element that arrives
    within the allowed lateness), ``late`` the elements dropped to the side output.
    """
    contents: dict = {}
    timers: set = set()  # (window max timestamp, key, window)
    fired: list = []
    late: list = []
    wm = MIN_WM
    max_ts = None

    def advance(to: int) -> None:
        nonlocal wm
        wm = max(wm, to)
        for t, key, w in sorted(x for x in timers if x[0] <= wm):
            timers.discard((t, key, w))
            if (key, w) in contents:
                fired.append((key, w, contents[(key, w)]))
        for key, w in [kw for kw in contents if kw[1][1] - 1 + lateness <= wm]:
            del contents[(key, w)]  # the cleanup timer

    for key, ts, value in events:
        skipped = True
        for w in assign(ts):
            if w[1] - 1 + lateness <= wm:
                continue  # the window is gone
            skipped = False
            contents[(key, w)] = value if (key, w) not in contents else combine(contents[(key, w)], value)
            if w[1] - 1 <= wm:
                fired.append((key, w, contents[(key, w)]))  # late but within the lateness: fire again
            else:
                timers.add((w[1] - 1, key, w))
        if skipped and ts + lateness <= wm:
            late.append((key, ts, value))
        max_ts = ts if max_ts is None else max(max_ts, ts)
        advance(max_ts - bound - 1)
    advance(MAX_WM)
    return fired, late


def distinct_results(records: Iterable[tuple]) -> set:
    """The set of distinct outputs; no (kind, window, key) may have two different values."""
    results = set(records)
    by_window: dict = defaultdict(set)
    for kind, start, end, key, value in results:
        by_window[(kind, start, end, key)].add(value)
    conflicting = {k: v for k, v in by_window.items() if len(v) > 1}
    assert not conflicting, f"windows with different results: {dict(list(conflicting.items())[:5])}"
    return results


def test_reference_assigners_agree_with_flink_examples() -> None:
    # the examples of pyflink's window assigners (and of flinkpy.datastream.window's docstring)
    assert ref_tumbling(7_300, 5_000) == [(5000, 10000)]
    assert ref_sliding(7_300, 10_000, 5_000) == [(5000, 15000), (0, 10000)]
    assert ref_sliding(-1, 5_000, 1_000) == [(-1000 - 1000 * i, 4000 - 1000 * i) for i in range(5)]
    assert ref_sessions([1, 5, 20, 14, 30], 6) == [(1, 11, [1, 5]), (14, 26, [14, 20]), (30, 36, [30])]
    fired, late = ref_punctuated_windows(
        [("a", 500, 1), ("a", 1500, 1), ("a", 900, 1), ("a", 3000, 1), ("a", 600, 1)],
        lambda ts: ref_tumbling(ts, 1000), lambda a, b: a + b, bound=0, lateness=1000,
    )
    # 1500 closes [0, 1000); 900 is late but within the lateness (fires again); 3000 closes
    # [1000, 2000) and drops [0, 1000) (cleanup at 1999); 600 is too late
    assert fired == [("a", (0, 1000), 1), ("a", (0, 1000), 2), ("a", (1000, 2000), 1), ("a", (3000, 4000), 1)]
    assert late == [("a", 600, 1)]


# ---------------------------------------------------------------------------------------------
# 1. Determinism: the same windows at any parallelism, buffer timeout, and across crashes
# ---------------------------------------------------------------------------------------------

BOUND_MS = 2_000
STEP_MS = 40  # event n's nominal time is n * STEP_MS; the jitter (< BOUND_MS) moves it later
SLIDE_SIZE, SLIDE = 5_000, 1_000
TUMBLE = 3_000
GAP = 700
WORDS = ["to", "be", "or", "not", "that", "is", "the", "question"]


class Events:
    """Event n of a seeded, out-of-order stream: (word, timestamp, value). A pure function of n
    (cheap to ship to the tasks); disorder is below the watermark bound, so nothing is late."""

    def __init__(self, seed: int, period: int = 1009):
        rng = random.Random(seed)
        self.period = period
        self.jitter = [rng.randrange(BOUND_MS) for _ in range(period)]
        # skewed word choice, so keys have gaps long enough to close sessions
        self.words = [WORDS[min(int(rng.expovariate(0.5)), len(WORDS) - 1)] for _ in range(period)]
        self.values = [rng.randrange(1, 100) for _ in range(period)]

    def ts(self, n: int) -> int:
        return n * STEP_MS + self.jitter[n % self.period]

    def __call__(self, n: int) -> tuple[str, int, int]:
        i = n % self.period
        return (self.words[i], self.ts(n), self.values[i])


class Tag(ProcessWindowFunction):
    """(kind, window start, window end, key, reduced value)."""

    def __init__(self, kind: str):
        self.kind = kind

    def process(self, key, context, elements):
        w = context.window()
        for value in elements:
            yield (self.kind, w.start, w.end, key, value)


class SessionStats(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        yield ("session", w.start, w.end, key, (len(elements), sum(e[2] for e in elements)))


def word_of(event: tuple) -> str:
    return event[0]


def add_values(a: tuple, b: tuple) -> tuple:
    return (a[0], max(a[1], b[1]), a[2] + b[2])


def count_words(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1], a[2] + b[2])


def windows_job(env: StreamExecutionEnvironment, events: Events, n: int):
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND_MS)).with_timestamp_assigner(
        lambda number, _: events.ts(number)
    )
    timed = env.from_source(NumberSequenceSource(1, n), strategy, "numbers").map(events).name("events")
    by_word = timed.key_by(word_of)
    sliding = (
        timed.map(lambda e: (e[0], e[1], 1)).key_by(word_of)
        .window(SlidingEventTimeWindows.of(Time.milliseconds(SLIDE_SIZE), Time.milliseconds(SLIDE)))
        .reduce(count_words, window_function=Tag("sliding")).name("sliding")
    )
    tumbling = by_word.window(TumblingEventTimeWindows.of(Time.milliseconds(TUMBLE))).reduce(add_values, window_function=Tag("tumbling")).name("tumbling")
    sessions = by_word.window(EventTimeSessionWindows.with_gap(Time.milliseconds(GAP))).process(SessionStats()).name("sessions")
    return sliding.union(tumbling, sessions).map(lambda r: r if r[0] == "session" else r[:4] + (r[4][2],))


def reference(events: Events, n: int) -> set:
    evs = [events(i) for i in range(1, n + 1)]
    out = set()
    slid = ref_all_on_time(((w, ts, 1) for w, ts, _ in evs), lambda ts: ref_sliding(ts, SLIDE_SIZE, SLIDE), lambda a, b: a + b)
    out |= {("sliding", w[0], w[1], key, count) for (key, w), count in slid.items()}
    tumb = ref_all_on_time(((w, ts, v) for w, ts, v in evs), lambda ts: ref_tumbling(ts, TUMBLE), lambda a, b: a + b)
    out |= {("tumbling", w[0], w[1], key, total) for (key, w), total in tumb.items()}
    per_key: dict = defaultdict(list)
    for w, ts, v in evs:
        per_key[w].append((ts, v))
    for key, pairs in per_key.items():
        for start, end, members in ref_sessions((ts for ts, _ in pairs), GAP):
            # sessions of a key neither overlap nor touch: [start, end) holds exactly its members
            total = sum(v for ts, v in pairs if start <= ts < end)
            out.add(("session", start, end, key, (len(members), total)))
    return out


def test_reference_sessions_count_duplicate_timestamps() -> None:
    # ref_sessions lists a member per event; reference() relies on that for equal timestamps
    assert ref_sessions([5, 5, 5], 10) == [(5, 15, [5, 5, 5])]


N_EVENTS = 6_000


@pytest.mark.timeout(60)
@pytest.mark.parametrize("parallelism, buffer_timeout", [(1, 0), (1, 100), (2, 0), (2, 100), (4, 0), (4, 100)])
def test_windows_are_deterministic(flinkpy_home, parallelism: int, buffer_timeout: int) -> None:
    rng = seeded(f"windows p={parallelism} timeout={buffer_timeout}")
    events = Events(rng.randrange(2**32))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_buffer_timeout(buffer_timeout)
    got = list(windows_job(env, events, N_EVENTS).execute_and_collect(f"windows p{parallelism}"))
    assert len(got) == len(set(got)), "without a crash, every window fires exactly once"
    expected = reference(events, N_EVENTS)
    assert distinct_results(got) == expected, diff(distinct_results(got), expected)


def diff(got: set, expected: set) -> str:
    return f"missing {sorted(expected - got)[:5]} ({len(expected - got)}), unexpected {sorted(got - expected)[:5]} ({len(got - expected)})"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("point, checkpoint", [("running", None), ("alignment", 1)])
def test_windows_are_exact_after_a_crash(start, point: str, checkpoint: int | None) -> None:
    rng = seeded(f"windows crash at {point}")
    events = Events(rng.randrange(2**32))
    n = 25_000  # long enough to run through a few checkpoints at 100 ms
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    job = windows_job(env, events, n)
    rule: dict[str, Any] = {"point": point, "vertex": vertex_id(env, "sliding"), "subtask": 1}
    if checkpoint is not None:
        rule["checkpoint"] = checkpoint
    start(faults=[rule])
    got = list(job.execute_and_collect("windows crash"))
    expected = reference(events, n)
    assert distinct_results(got) == expected, diff(distinct_results(got), expected)
    assert_recovered(only_job()["jid"], cause="SIGKILL")
    print(f"{len(got)} outputs, {len(got) - len(set(got))} repeated after the restore")


def test_the_plan_says_which_window_path_each_operator_takes() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    windows_job(env, Events(1), 10)
    paths = {w["operator"]: w["path"] for n in json.loads(env.get_execution_plan())["nodes"] for w in n.get("windows", [])}
    assert {name.split("(")[0]: path for name, path in paths.items()} == {"sliding": "sliced", "tumbling": "sliced", "sessions": "general"}, paths
