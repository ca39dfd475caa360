"""Event time end to end: watermarks across inputs, idleness, late data, timers across restores.

Jobs run on real clusters. Expected outputs come from the plain-Python reference in
test_windows_e2e (window assignment and the window operator's semantics behind a punctuated
watermark) or from a sequential model written here (per-key timeouts). Jobs that must stay
running (idle inputs, processing-time timers) write to a file through an appending sink; the
test waits for the expected lines with ``wait_for`` and then cancels the job.
"""

from __future__ import annotations

import ast
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_json, run_cli, wait_for
from flinkpy.common import Duration, RestartStrategies, Time, WatermarkStrategy
from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.datastream import KeyedProcessFunction, OutputTag, StreamExecutionEnvironment
from flinkpy.datastream.functions import TimeDomain
from flinkpy.datastream.state import ValueStateDescriptor
from flinkpy.datastream.window import TumblingEventTimeWindows
from test_recovery import assert_recovered, start, vertex_id  # noqa: F401 (start: fixture)
from test_windows_e2e import MAX_WM, MIN_WM, Tag, ref_punctuated_windows, ref_tumbling, seeded

# ---------------------------------------------------------------------------------------------
# Kit: a punctuated generator, an unbounded source that goes quiet, an appending file sink
# ---------------------------------------------------------------------------------------------


class Punctuated:
    """After every event, the watermark is the largest timestamp seen minus ``bound`` minus 1."""

    def __init__(self, bound: int = 0):
        self.bound = bound
        self.highest: int | None = None

    def on_event(self, event, timestamp, output):
        self.highest = timestamp if self.highest is None else max(self.highest, timestamp)
        output.emit_watermark(self.highest - self.bound - 1)

    def on_periodic_emit(self, output):
        pass


def punctuated(bound: int = 0) -> WatermarkStrategy:
    return WatermarkStrategy.for_generator(lambda: Punctuated(bound)).with_timestamp_assigner(lambda e, _: e[1])


class _QuietReader(SourceReader):
    def __init__(self, items: list, offset: int):
        self.items = items
        self.offset = offset

    def poll(self, max_records: int) -> list:
        batch = self.items[self.offset : self.offset + max_records]
        self.offset += len(batch)
        return batch  # [] forever once the items are out: the source never ends

    def snapshot_state(self) -> int:
        return self.offset


class ThenQuiet(Source):
    """An unbounded source: its items (one subtask), then nothing, forever."""

    boundedness = Boundedness.CONTINUOUS_UNBOUNDED

    def __init__(self, items: list):
        self.items = list(items)

    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        return _QuietReader(self.items, max([0, *[s for s in ctx.restored_state if s is not None]]))

    def max_parallelism(self) -> int:
        return 1


class AppendTo:
    """A sink appending each record's repr to a file (at-least-once: replays append again)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, value: Any) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(repr(value) + "\n")


def read_records(path: Path) -> list:
    if not path.exists():
        return []
    return [ast.literal_eval(line) for line in path.read_text(encoding="utf-8").splitlines() if line.endswith(")")]


def cancel(client: Any) -> None:
    client.cancel()
    wait_for(lambda: client.get_job_status() == "CANCELED", timeout=20, message="the job to be canceled")


def closed_windows(events: list[tuple[str, int, int]], size: int, watermark: int) -> set:
    """(key, start, end, sum) of the tumbling windows whose end a watermark passed."""
    sums: dict = defaultdict(int)
    for key, ts, value in events:
        (w,) = ref_tumbling(ts, size)
        sums[(key, w)] += value
    return {(k, w[0], w[1], s) for (k, w), s in sums.items() if w[1] - 1 <= watermark}


def as_rows(records: list) -> set:
    return {(r[3], r[1], r[2], r[4]) for r in records}


# ---------------------------------------------------------------------------------------------
# 2. Watermarks: the minimum over inputs; idle inputs left out
# ---------------------------------------------------------------------------------------------


def two_sources_job(env: StreamExecutionEnvironment, ahead: list, behind: Any, behind_strategy: WatermarkStrategy, out: Path):
    a = env.from_source(ThenQuiet(ahead), punctuated(), "ahead").set_parallelism(1)
    b = env.from_source(behind, behind_strategy, "behind").set_parallelism(1)
    (
        a.union(b)
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .reduce(lambda x, y: (x[0], max(x[1], y[1]), x[2] + y[2]), window_function=Tag("tumbling"))
        .map(lambda r: r[:4] + (r[4][2],))
        .add_sink(AppendTo(str(out)))
        .set_parallelism(1)
    )


@pytest.mark.timeout(60)
def test_windows_wait_for_the_slowest_input(start, tmp_path: Path) -> None:
    rng = seeded("slowest input")
    ahead = [("a", 100_000 + i * 100, rng.randrange(100)) for i in range(100)]  # event time 100 s..110 s
    behind = [("b", i * 100, rng.randrange(100)) for i in range(100)]  # 0 s..10 s
    out = tmp_path / "windows.txt"
    start(taskmanagers=1, slots=4)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    two_sources_job(env, ahead, ThenQuiet(behind), punctuated(), out)
    client = env.execute_async("slowest input")
    try:
        # "behind" stops at 9.9 s: its watermark (9_899) is the task's, so b's windows up to
        # [8 s, 9 s) close; none of "ahead", whose own watermark is at 109_899
        expected = closed_windows(behind, 1000, 9_899)
        assert len(expected) == 9
        wait_for(lambda: as_rows(read_records(out)) >= expected, timeout=30, message="b's windows up to 9 s")
        # the sink is one subtask behind one window subtask: a window closed by "ahead"'s
        # watermark alone would be in the file before b's windows
        assert as_rows(read_records(out)) == expected
        assert client.get_job_status() == "RUNNING"
    finally:
        cancel(client)


@pytest.mark.timeout(60)
def test_an_idle_input_does_not_hold_event_time_back(start, tmp_path: Path) -> None:
    rng = seeded("idle input")
    active = [("a", i * 100, rng.randrange(100)) for i in range(100)]
    out = tmp_path / "windows.txt"
    start(taskmanagers=1, slots=4)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    idle = punctuated().with_idleness(Duration.of_millis(200))
    two_sources_job(env, active, ThenQuiet([]), idle, out)
    client = env.execute_async("idle input")
    try:
        # the empty input goes idle after 200 ms: "a"'s watermark (9_899) alone decides
        expected = closed_windows(active, 1000, 9_899)
        wait_for(lambda: as_rows(read_records(out)) >= expected, timeout=30, message="a's windows while the job runs")
        assert as_rows(read_records(out)) == expected
        assert client.get_job_status() == "RUNNING"
    finally:
        cancel(client)


# ---------------------------------------------------------------------------------------------
# 3. Late data: allowed lateness re-fires, later records go to the side output
# ---------------------------------------------------------------------------------------------

LATE = OutputTag("late")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("parallelism", [1, 2])
def test_late_records_refire_or_go_to_the_side_output(flinkpy_home, parallelism: int) -> None:
    rng = seeded(f"late data p={parallelism}")
    bound, lateness, size = 300, 1_000, 1_000
    events = []
    for i in range(3_000):
        ts = i * 20 + rng.randrange(bound)  # within the bound: on time
        if rng.random() < 0.08:
            ts -= rng.randrange(3_000)  # late: some within the allowed lateness, some beyond
        events.append((rng.choice("abc"), ts, rng.randrange(1, 10)))

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    timed = env.from_collection(events).assign_timestamps_and_watermarks(punctuated(bound)).set_parallelism(1)
    windows = (
        timed.key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(Time.milliseconds(size)))
        .allowed_lateness(lateness)
        .side_output_late_data(LATE)
        .reduce(lambda x, y: (x[0], x[1], x[2] + y[2]), window_function=Tag("tumbling"))
    )
    results = windows.map(lambda r: r[:4] + (r[4][2],)).union(windows.get_side_output(LATE).map(lambda e: ("late", *e)))
    got = list(results.execute_and_collect("late data"))

    fired, late = ref_punctuated_windows(events, lambda ts: ref_tumbling(ts, size), lambda a, b: a + b, bound=bound, lateness=lateness)
    assert late and len(fired) > len({(k, w) for k, w, _ in fired}), "the input has both kinds of late records"
    got_late = [r[1:] for r in got if r[0] == "late"]
    assert Counter(got_late) == Counter(late)
    # per key, the firings come in the reference's order: each re-firing carries the updated sum
    per_key: dict = defaultdict(list)
    for _, start_, end, key, value in (r for r in got if r[0] != "late"):
        per_key[key].append(((start_, end), value))
    expected: dict = defaultdict(list)
    for key, w, value in fired:
        expected[key].append((w, value))
    assert dict(per_key) == dict(expected)


# ---------------------------------------------------------------------------------------------
# 4. Timers survive a restore
# ---------------------------------------------------------------------------------------------

TIMEOUT_MS = 2_000


class Timeouts(KeyedProcessFunction):
    """Emits ("timeout", key, t) when a key saw no event for 2 s of event time, and
    ("proc", key) from a processing-time timer set 300 ms after the key's first event."""

    def open(self, runtime_context):
        self.last = runtime_context.get_state(ValueStateDescriptor("last", None))
        self.proc = runtime_context.get_state(ValueStateDescriptor("proc", None))

    def process_element(self, value, ctx):
        last = self.last.value()
        timers = ctx.timer_service()
        if last is not None:
            timers.delete_event_time_timer(last + TIMEOUT_MS)
        self.last.update(ctx.timestamp())
        timers.register_event_time_timer(ctx.timestamp() + TIMEOUT_MS)
        if self.proc.value() is None:
            self.proc.update(True)
            timers.register_processing_time_timer(timers.current_processing_time() + 300)

    def on_timer(self, timestamp, ctx):
        if ctx.time_domain() == TimeDomain.PROCESSING_TIME:
            yield ("proc", ctx.get_current_key(), 0)
        else:
            yield ("timeout", ctx.get_current_key(), timestamp)


def ref_timeouts(events: list[tuple[str, int, int]], *, final_watermark: int) -> tuple[set, set]:
    """(fired, pending) timeout timers behind a punctuated watermark of ``max_ts - 1``: a key's
    timer moves to ``ts + 2 s`` with each of its events and fires once the watermark passes it."""
    timers: dict[str, int] = {}
    fired: set = set()
    wm = MIN_WM

    def advance(to: int) -> None:
        nonlocal wm
        wm = max(wm, to)
        for key, t in list(timers.items()):
            if t <= wm:
                fired.add(("timeout", key, t))
                del timers[key]

    for key, ts, _ in events:
        timers[key] = ts + TIMEOUT_MS
        advance(ts - 1)
    advance(final_watermark)
    return fired, {("timeout", k, t) for k, t in timers.items()}


def timeout_events(rng, n: int) -> list[tuple[str, int, int]]:
    """In timestamp order, keys of skewed frequency: the rare ones time out now and then."""
    keys = [f"k{i}" for i in range(8)]
    weights = [2.0**-i for i in range(8)]
    return [(rng.choices(keys, weights)[0], i * 15, 0) for i in range(n)]


def test_reference_timeouts() -> None:
    events = [("a", 0, 0), ("b", 1000, 0), ("a", 1500, 0), ("b", 5000, 0), ("a", 5001, 0)]
    fired, pending = ref_timeouts(events, final_watermark=5000)
    # b's event at 5000 moves b's timer from 3000 to 7000 before the watermark (4999) passes
    # 3000; a's timer (3500) fires at 4999; a's next at 7001 and b's stay pending
    assert fired == {("timeout", "a", 3500)}
    assert pending == {("timeout", "b", 7000), ("timeout", "a", 7001)}


@pytest.mark.timeout(60)
def test_event_time_timers_fire_exactly_after_a_restore(start) -> None:
    rng = seeded("timers after restore")
    events = timeout_events(rng, 30_000)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    timed = env.from_collection(events).assign_timestamps_and_watermarks(punctuated()).set_parallelism(1)
    out = timed.key_by(lambda e: e[0]).process(Timeouts()).name("timeouts").filter(lambda r: r[0] == "timeout")
    start(faults=[{"point": "after-complete", "vertex": vertex_id(env, "timeouts"), "subtask": 0, "checkpoint": 1}])
    got = list(out.execute_and_collect("timeouts"))
    fired, pending = ref_timeouts(events, final_watermark=MAX_WM)  # end of input: every timer fires
    assert not pending
    assert set(got) == fired, f"missing {sorted(fired - set(got))[:5]}, unexpected {sorted(set(got) - fired)[:5]}"
    from test_recovery import only_job

    assert_recovered(only_job()["jid"], cause="SIGKILL")


@pytest.mark.timeout(60)
def test_pending_timers_are_in_the_checkpoint_and_fire_after_a_restore(start, tmp_path: Path) -> None:
    rng = seeded("pending timers")
    events = timeout_events(rng, 3_000)
    out = tmp_path / "timers.txt"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    timed = env.from_source(ThenQuiet(events), punctuated(), "events").set_parallelism(1)
    timed.key_by(lambda e: e[0]).process(Timeouts()).name("timeouts").add_sink(AppendTo(str(out))).set_parallelism(1)
    # keep every checkpoint while the test reads one
    env.get_checkpoint_config().set_num_retained_checkpoints(1000).set_externalized_checkpoint_cleanup("RETAIN_ON_CANCELLATION")
    start(faults=[{"point": "after-complete", "vertex": vertex_id(env, "timeouts"), "subtask": 0, "checkpoint": 2}])
    client = env.execute_async("pending timers")
    jid = client.get_job_id()
    try:
        # the source stops at the last event: the watermark stays at its timestamp - 1, so the
        # last timer of every key stays pending, in every checkpoint from then on
        fired, pending = ref_timeouts(events, final_watermark=events[-1][1] - 1)
        keys = {k for k, _, _ in events}
        want = fired | {("proc", k, 0) for k in keys}
        wait_for(lambda: set(read_records(out)) >= want, timeout=30, message="every timer of the reference")
        assert set(read_records(out)) == want  # and nothing else: no pending timer fired early
        wait_for(lambda: cli_json("job", "show", jid)["restarts"] >= 1, timeout=20, message="the restart")
        first = cli_json("checkpoint", "list", jid)["latest"]["completed"]["id"]
        latest = wait_for(
            lambda: (c := cli_json("checkpoint", "list", jid)["latest"]["completed"]) and c["id"] >= first + 1 and c,
            timeout=20,
            message="a checkpoint taken after every event was read",
        )
        res = run_cli("checkpoint", "inspect", latest["external_path"], "--json")
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        (op,) = [o for o in doc["metadata"]["operators"] if o["name"] == "timeouts"]
        states = [st["keyed_state"]["states"] for st in op["subtasks"] if st["keyed_state"]]
        # entries count key groups: one pending timeout per key, in at most that many groups
        timer_groups = sum(st.get("_timers.event", {}).get("entries", 0) for st in states)
        assert 1 <= timer_groups <= len(pending), states
        assert sum(st.get("_timers.processing", {}).get("entries", 0) for st in states) == 0, "all fired"
    finally:
        cancel(client)
