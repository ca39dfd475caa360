"""The window operator, driven directly: a real heap backend, a fake timer service, no processes.

Window specs are built through the public API (WindowedStream on a StreamExecutionEnvironment),
so the tests also check what the API puts into the StreamGraph. Expected results are computed
independently from the input with plain Python.
"""

from __future__ import annotations

import heapq
import itertools
import pickle
import random
from collections import defaultdict
from typing import Any

import pytest

from flinkpy.common.time import Duration, Time
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.functions import AggregateFunction, ReduceFunction
from flinkpy.datastream.output_tag import OutputTag
from flinkpy.datastream.state import ValueStateDescriptor
from flinkpy.datastream.window import (
    AllWindowFunction,
    ContinuousEventTimeTrigger,
    CountEvictor,
    CountTrigger,
    DeltaEvictor,
    EventTimeSessionWindows,
    GlobalWindow,
    GlobalWindows,
    ProcessAllWindowFunction,
    ProcessingTimeSessionWindows,
    ProcessWindowFunction,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    TimeEvictor,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowFunction,
)
from flinkpy.datastream.window_stream import AllWindowedStream, WindowedStream, count_window, count_window_all
from flinkpy.errors import InvalidProgramError
from flinkpy.state import canonical
from backends import new_backend, use_backend
from flinkpy.common.window_spec import WindowSpec
from flinkpy.task.window_operator import WindowOperator

MIN_WM = -(2**63)
MAX_WM = 2**63 - 1


# ---------------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _each_backend(state_backend) -> None:
    """Window contents, trigger and window state live in the keyed backend: run on both."""
    use_backend(state_backend)


class Collect:
    """An Output that records (value, timestamp) pairs."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, int | None]] = []

    def process(self, values: list, timestamps: list[int] | None) -> None:
        stamps = timestamps if timestamps is not None else [None] * len(values)
        assert len(stamps) == len(values)
        self.records.extend(zip(values, stamps))


class FakeTimers:
    """Per-operator timers on (timestamp, key, namespace), deduplicated, fired in time order."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.watermark = MIN_WM
        self.now = 0
        self._seq = itertools.count()
        self.live: dict[str, set] = {"event": set(), "proc": set()}
        self._heaps: dict[str, list] = {"event": [], "proc": []}

    def _add(self, domain: str, ts: int, ns: Any, key: Any = None, kg: Any = None) -> None:
        # the key group as the engine keeps it: the current one, not the key's hash
        if key is None:
            key, kg = self.backend.current_key, self.backend.current_key_group
        entry = (ts, key, ns, kg)
        if entry not in self.live[domain]:
            self.live[domain].add(entry)
            heapq.heappush(self._heaps[domain], (ts, next(self._seq), entry))

    def register_event_time_timer(self, timestamp: int, namespace: Any) -> None:
        self._add("event", timestamp, namespace)

    def delete_event_time_timer(self, timestamp: int, namespace: Any) -> None:
        self.live["event"].discard((timestamp, self.backend.current_key, namespace, self.backend.current_key_group))

    def register_processing_time_timer(self, timestamp: int, namespace: Any) -> None:
        self._add("proc", timestamp, namespace)

    def delete_processing_time_timer(self, timestamp: int, namespace: Any) -> None:
        self.live["proc"].discard((timestamp, self.backend.current_key, namespace, self.backend.current_key_group))

    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        return self.now

    def _fire(self, domain: str, upto: int, callback: Any) -> None:
        heap, live = self._heaps[domain], self.live[domain]
        while heap and heap[0][0] <= upto:
            _, _, entry = heapq.heappop(heap)
            if entry not in live:
                continue
            live.discard(entry)
            ts, key, ns, kg = entry
            self.backend.set_current_key_and_group(key, kg)
            callback(key, ns, ts)

    def advance_watermark(self, watermark: int, op: WindowOperator) -> None:
        self.watermark = watermark
        self._fire("event", watermark, op.on_event_time)

    def advance_processing_time(self, now: int, op: WindowOperator) -> None:
        self.now = now
        self._fire("proc", now, op.on_processing_time)

    def pending(self) -> dict[str, set]:
        return {d: set(s) for d, s in self.live.items()}

    def restore(self, pending: dict[str, set]) -> None:
        for domain, entries in pending.items():
            for ts, key, ns, kg in sorted(entries, key=lambda e: e[0]):
                self._add(domain, ts, ns, key, kg)


class Harness:
    def __init__(self, spec: WindowSpec, key_selector: Any, backend: Any = None, op_class: type = WindowOperator) -> None:
        self.backend = backend or new_backend(128, range(0, 128))
        self.out = Collect()
        self.late = Collect()
        self.op = op_class("Window", spec, self.out, key_selector, self.backend, False)
        self.timers = FakeTimers(self.backend)
        self.op.timers = self.timers
        if spec.late_tag_id is not None:
            self.op.side_outputs = {spec.late_tag_id: self.late}
        self.op.open(None)

    def send(self, records: list[tuple[Any, int | None]]) -> None:
        values = [v for v, _ in records]
        stamps = [t for _, t in records]
        self.op.process(values, None if any(t is None for t in stamps) else stamps)

    def watermark(self, wm: int) -> None:
        self.timers.advance_watermark(wm, self.op)
        fired = getattr(self.op, "timers_fired", None)
        if fired is not None:  # as the engine's chain does after the timers of a watermark
            fired()

    def finish(self) -> None:
        self.watermark(MAX_WM)
        self.op.end_input()
        self.op.close()


def env() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment()


def first(t: tuple) -> Any:
    return t[0]


def keyed(key: Any = first) -> Any:
    return env().from_collection([("x", 0)]).key_by(key)


def spec_of(stream: Any) -> tuple[WindowSpec, Any]:
    node = stream._node
    assert node.kind == "window"
    assert isinstance(node.fn, WindowSpec)
    return node.fn, node.key_selector


def harness(stream: Any) -> Harness:
    spec, selector = spec_of(stream)
    return Harness(pickle.loads(pickle.dumps(spec)) if _picklable(spec) else spec, selector)


def _picklable(obj: Any) -> bool:
    try:
        pickle.dumps(obj)
        return True
    except Exception:
        return False


def add_values(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1])


def by_value(records: list) -> list:
    return sorted(records, key=repr)


# A deterministic input: (key, value) records with event timestamps.
SEED = 20240607


def make_input(n: int = 200, keys: str = "abc", span: int = 1000, seed: int = SEED) -> list[tuple[tuple[str, int], int]]:
    rnd = random.Random(seed)
    return sorted(
        (((rnd.choice(keys), rnd.randint(1, 9)), rnd.randint(0, span)) for _ in range(n)),
        key=lambda r: r[1],
    )


def run_sorted(h: Harness, records: list, wm_every: int = 10) -> None:
    for i in range(0, len(records), wm_every):
        batch = records[i : i + wm_every]
        h.send(batch)
        h.watermark(batch[-1][1] - 1)
    h.finish()


# ---------------------------------------------------------------------------------------------
# Expected results, computed without windows machinery
# ---------------------------------------------------------------------------------------------


def tumbling_expected(records: list, size: int) -> dict[tuple[str, int], list[int]]:
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for (k, v), ts in records:
        groups[(k, ts - ts % size)].append(v)
    return groups


def sliding_expected(records: list, size: int, slide: int) -> dict[tuple[str, int], list[int]]:
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for (k, v), ts in records:
        for start in range((ts - size) // slide * slide, ts + 1, slide):  # every multiple of slide
            if start <= ts < start + size:
                groups[(k, start)].append(v)
    return groups


def sessions_expected(records: list, gap_of: Any) -> dict[tuple[str, int, int], list[int]]:
    per_key: dict[str, list] = defaultdict(list)
    for (k, v), ts in records:
        per_key[k].append((ts, ts + gap_of((k, v)), v))
    result: dict[tuple[str, int, int], list[int]] = {}
    for k, items in per_key.items():
        items.sort()
        start, end, vals = None, None, []
        for s, e, v in items:
            if start is not None and s <= end:
                end = max(end, e)
                vals.append(v)
                continue
            if start is not None:
                result[(k, start, end)] = vals
            start, end, vals = s, e, [v]
        result[(k, start, end)] = vals
    return result


# ---------------------------------------------------------------------------------------------
# Event-time windows
# ---------------------------------------------------------------------------------------------


def test_tumbling_reduce_matches_grouping_by_window_start() -> None:
    records = make_input()
    h = harness(WindowedStream(keyed(), TumblingEventTimeWindows.of(Time.milliseconds(100))).reduce(add_values))
    run_sorted(h, records)
    expected = [((k, sum(vs)), start + 99) for (k, start), vs in tumbling_expected(records, 100).items()]
    assert by_value(h.out.records) == by_value(expected)
    assert h.backend.num_entries() == 0  # every window was cleaned up


def test_tumbling_offset_and_duration_sizes() -> None:
    ws = WindowedStream(keyed(), TumblingEventTimeWindows.of(Duration.of_millis(100), Time.milliseconds(30)))
    h = harness(ws.reduce(add_values))
    h.send([(("a", 1), 29), (("a", 2), 30), (("a", 4), 129), (("a", 8), 130)])
    h.finish()
    assert h.out.records == [(("a", 1), 29), (("a", 6), 129), (("a", 8), 229)]


class CountAndSum(AggregateFunction):
    def create_accumulator(self) -> list:
        return [0, 0]

    def add(self, value: tuple, accumulator: list) -> list:
        return [accumulator[0] + 1, accumulator[1] + value[1]]

    def get_result(self, accumulator: list) -> tuple:
        return tuple(accumulator)

    def merge(self, a: list, b: list) -> list:
        return [a[0] + b[0], a[1] + b[1]]


def test_sliding_aggregate() -> None:
    records = make_input()
    stream = WindowedStream(keyed(), SlidingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(30))).aggregate(CountAndSum())
    h = harness(stream)
    run_sorted(h, records)
    expected = [((len(vs), sum(vs)), start + 99) for (_, start), vs in sliding_expected(records, 100, 30).items()]
    assert by_value(h.out.records) == by_value(expected)


class Describe(ProcessWindowFunction):
    """Emits (key, window start, window end, sorted values)."""

    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Any) -> Any:
        w = context.window()
        yield key, w.start, w.end, sorted(v for _, v in elements)


def test_session_windows_merge_and_process_sees_the_merged_window() -> None:
    records = make_input(n=120, span=3000)
    h = harness(WindowedStream(keyed(), EventTimeSessionWindows.with_gap(Time.milliseconds(40))).process(Describe()))
    run_sorted(h, records, wm_every=7)
    expected = [((k, s, e, sorted(vs)), e - 1) for (k, s, e), vs in sessions_expected(records, lambda r: 40).items()]
    assert by_value(h.out.records) == by_value(expected)
    assert any(e - s > 40 for (_, s, e, _), _ in h.out.records), "the input should produce merged sessions"
    assert h.backend.num_entries() == 0


def test_session_bridged_by_an_out_of_order_element() -> None:
    h = harness(WindowedStream(keyed(), EventTimeSessionWindows.with_gap(Time.milliseconds(10))).process(Describe()))
    h.send([(("a", 1), 0), (("a", 2), 25)])  # two sessions: [0, 10) and [25, 35)
    h.send([(("a", 3), 12)])  # [12, 22) bridges neither alone...
    h.send([(("a", 4), 9)])  # ...[9, 19) joins [0, 10) and [12, 22)
    h.watermark(100)
    assert h.out.records == [(("a", 0, 22, [1, 3, 4]), 21), (("a", 25, 35, [2]), 34)]


class GapByValue(SessionWindowTimeGapExtractor):
    def extract(self, element: tuple) -> int:
        return element[1] * 10


def test_dynamic_gap_sessions() -> None:
    records = make_input(n=80, span=2000)
    stream = WindowedStream(keyed(), EventTimeSessionWindows.with_dynamic_gap(GapByValue())).reduce(add_values)
    h = harness(stream)
    run_sorted(h, records, wm_every=5)
    expected = [((k, sum(vs)), e - 1) for (k, s, e), vs in sessions_expected(records, lambda r: r[1] * 10).items()]
    assert by_value(h.out.records) == by_value(expected)


class ListApply(WindowFunction):
    def apply(self, key: Any, window: TimeWindow, inputs: Any) -> Any:
        return [(key, window.start, sorted(v for _, v in inputs))]


def test_apply_window_function() -> None:
    records = make_input(n=60)
    h = harness(WindowedStream(keyed(), TumblingEventTimeWindows.of(Time.milliseconds(250))).apply(ListApply()))
    run_sorted(h, records)
    expected = [((k, start, sorted(vs)), start + 249) for (k, start), vs in tumbling_expected(records, 250).items()]
    assert by_value(h.out.records) == by_value(expected)


class Sum(ReduceFunction):
    def reduce(self, a: tuple, b: tuple) -> tuple:
        return (a[0], a[1] + b[1])


class WithWindow(ProcessWindowFunction):
    """Adds the window's start and how often this key fired so far (global state)."""

    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Any) -> Any:
        (only,) = list(elements)
        fired = context.global_state().get_state(ValueStateDescriptor("fired"))
        fired.update((fired.value() or 0) + 1)
        yield key, context.window().start, only[1], fired.value()


def test_reduce_with_process_window_function() -> None:
    records = make_input(n=100)
    h = harness(WindowedStream(keyed(), TumblingEventTimeWindows.of(Time.milliseconds(200))).reduce(Sum(), WithWindow()))
    run_sorted(h, records)
    expected_sums = tumbling_expected(records, 200)
    got = [v for v, _ in h.out.records]
    assert by_value([(k, s, total) for k, s, total, _ in got]) == by_value(
        [(k, s, sum(vs)) for (k, s), vs in expected_sums.items()]
    )
    for k in "abc":  # the per-key counter counts 1, 2, 3, ... in window order
        assert [n for key, _, _, n in sorted(got, key=lambda r: r[1]) if key == k] == list(
            range(1, sum(1 for kk, _ in expected_sums if kk == k) + 1)
        )


def test_out_of_order_input_within_the_bound_gives_the_sorted_result() -> None:
    records = make_input(n=300, span=2000)
    bound = 50
    rnd = random.Random(SEED + 1)
    # Shuffle with bounded disorder: sort by timestamp plus a delay of at most `bound`.
    shuffled = sorted(records, key=lambda r: r[1] + rnd.randint(0, bound))

    def run(inp: list) -> list:
        h = harness(WindowedStream(keyed(), SlidingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(50))).process(Describe()))
        max_ts = MIN_WM
        for i in range(0, len(inp), 8):
            batch = inp[i : i + 8]
            h.send(batch)
            max_ts = max(max_ts, *(t for _, t in batch))
            h.watermark(max_ts - bound - 1)  # a bounded-out-of-orderness watermark
        h.finish()
        assert not h.late.records
        return h.out.records

    assert shuffled != records
    assert by_value(run(shuffled)) == by_value(run(records))


# ---------------------------------------------------------------------------------------------
# Lateness
# ---------------------------------------------------------------------------------------------


def test_allowed_lateness_refires_then_late_data_goes_to_the_side_output() -> None:
    late = OutputTag("late")
    ws = WindowedStream(keyed(), TumblingEventTimeWindows.of(Time.milliseconds(10)))
    stream = ws.allowed_lateness(5).side_output_late_data(late).reduce(add_values)
    assert stream._node.params["late_data_tag"] == late
    h = harness(stream)
    h.send([(("a", 1), 1), (("a", 2), 5), (("b", 7), 8)])
    h.watermark(9)
    assert by_value(h.out.records) == by_value([(("a", 3), 9), (("b", 7), 9)])
    h.send([(("a", 10), 3)])  # late but within lateness: the window fires again, updated
    assert h.out.records[-1] == (("a", 13), 9)
    h.watermark(14)  # cleanup time of [0, 10) with lateness 5
    h.send([(("a", 100), 4), (("a", 1), 12)])  # the first is beyond the lateness
    assert h.late.records == [(("a", 100), 4)]
    h.finish()
    assert h.out.records[-1] == (("a", 1), 19)
    assert len(h.out.records) == 4
    assert h.backend.num_entries() == 0


def test_late_data_is_dropped_without_a_side_output() -> None:
    h = harness(WindowedStream(keyed(), TumblingEventTimeWindows.of(Time.milliseconds(10))).reduce(add_values))
    h.send([(("a", 1), 1)])
    h.watermark(20)
    h.send([(("a", 5), 2)])
    h.finish()
    assert h.out.records == [(("a", 1), 9)]


# ---------------------------------------------------------------------------------------------
# Count and global windows, triggers, evictors
# ---------------------------------------------------------------------------------------------


def values_of(records: list) -> list:
    return [v for v, _ in records]


def test_count_window_tumbling() -> None:
    h = harness(count_window(keyed(), 3).reduce(add_values))
    h.send([(("a", i), None) for i in range(1, 8)] + [(("b", 100), None)])
    h.finish()  # the partial windows (a: 7, b: 100) never fire
    assert h.out.records == [(("a", 6), MAX_WM), (("a", 15), MAX_WM)]


def test_count_window_sliding() -> None:
    h = harness(count_window(keyed(), 3, 2).apply(lambda key, window, inputs: [[v for _, v in inputs]]))
    h.send([(("a", i), None) for i in range(1, 8)])
    h.finish()
    # every 2 elements, the last (up to) 3
    assert values_of(h.out.records) == [[1, 2], [2, 3, 4], [4, 5, 6]]


def test_global_window_count_trigger_fires_cumulatively_and_purging_resets() -> None:
    keep = harness(WindowedStream(keyed(), GlobalWindows.create()).trigger(CountTrigger.of(2)).reduce(add_values))
    purge = harness(
        WindowedStream(keyed(), GlobalWindows.create()).trigger(PurgingTrigger.of(CountTrigger.of(2))).reduce(add_values)
    )
    for h in (keep, purge):
        h.send([(("a", i), None) for i in (1, 2, 3, 4, 5)])
        h.finish()
    assert values_of(keep.out.records) == [("a", 3), ("a", 10)]
    assert values_of(purge.out.records) == [("a", 3), ("a", 7)]


def test_global_windows_default_trigger_never_fires() -> None:
    h = harness(WindowedStream(keyed(), GlobalWindows.create()).reduce(add_values))
    h.send([(("a", 1), None)])
    h.finish()
    assert h.out.records == []


def test_count_evictor_keeps_the_last_elements() -> None:
    stream = WindowedStream(keyed(), TumblingEventTimeWindows.of(Time.milliseconds(100))).evictor(CountEvictor.of(2)).reduce(add_values)
    h = harness(stream)
    h.send([(("a", v), ts) for v, ts in [(1, 1), (2, 2), (3, 3), (4, 150)]])
    h.finish()
    assert h.out.records == [(("a", 5), 99), (("a", 4), 199)]


def test_time_evictor_and_evict_after() -> None:
    ws = WindowedStream(keyed(), GlobalWindows.create()).trigger(CountTrigger.of(3))
    h = harness(ws.evictor(TimeEvictor.of(Time.milliseconds(10))).apply(lambda k, w, xs: [[v for _, v in xs]]))
    h.send([(("a", v), ts) for v, ts in [(1, 0), (2, 5), (3, 12), (4, 13), (5, 14), (6, 30)]])
    # fire 1 at (0, 5, 12): keep ts > 2 -> [2, 3]; fire 2 adds (13, 14, 30): keep ts > 20 -> [6]
    assert values_of(h.out.records) == [[2, 3], [6]]
    after = harness(
        WindowedStream(keyed(), GlobalWindows.create()).trigger(CountTrigger.of(2))
        .evictor(CountEvictor.of(1, do_evict_after=True))
        .apply(lambda k, w, xs: [[v for _, v in xs]])
    )
    after.send([(("a", v), None) for v in (1, 2, 3, 4)])
    assert values_of(after.out.records) == [[1, 2], [2, 3, 4]]


def test_delta_evictor() -> None:
    ws = WindowedStream(keyed(), GlobalWindows.create()).trigger(CountTrigger.of(4))
    h = harness(ws.evictor(DeltaEvictor.of(5.0, lambda old, new: abs(new[1] - old[1]))).apply(lambda k, w, xs: [[v for _, v in xs]]))
    h.send([(("a", v), None) for v in (1, 8, 12, 10)])
    assert values_of(h.out.records) == [[8, 12, 10]]


def test_continuous_event_time_trigger_fires_early() -> None:
    ws = WindowedStream(keyed(), TumblingEventTimeWindows.of(Time.milliseconds(100))).trigger(
        ContinuousEventTimeTrigger.of(Time.milliseconds(30))
    )
    h = harness(ws.reduce(add_values))
    h.send([(("a", 1), 5)])
    h.watermark(30)  # the first early firing: every 30 ms from the first element's period
    assert h.out.records == [(("a", 1), 99)]
    h.send([(("a", 2), 40), (("a", 4), 70)])
    h.finish()  # early firings at 60 and 90, then the window's end
    assert h.out.records == [(("a", 1), 99)] + [(("a", 7), 99)] * 3
    assert h.backend.num_entries() == 0 and not h.timers.live["event"]


# ---------------------------------------------------------------------------------------------
# Processing time
# ---------------------------------------------------------------------------------------------


def test_processing_time_tumbling_windows_use_the_injected_clock() -> None:
    h = harness(WindowedStream(keyed(), TumblingProcessingTimeWindows.of(Time.milliseconds(100))).reduce(add_values))
    h.timers.now = 1_005
    h.send([(("a", 1), None), (("b", 2), None)])
    h.timers.now = 1_050
    h.send([(("a", 3), None)])
    h.timers.advance_processing_time(1_098, h.op)
    assert h.out.records == []
    h.timers.now = 1_099
    h.send([(("a", 5), None)])
    h.timers.advance_processing_time(1_150, h.op)
    assert by_value(h.out.records) == by_value([(("a", 9), 1_099), (("b", 2), 1_099)])
    h.send([(("a", 7), None)])
    h.timers.advance_processing_time(1_200, h.op)
    assert h.out.records[-1] == (("a", 7), 1_199)
    assert h.backend.num_entries() == 0


def test_processing_time_sessions() -> None:
    h = harness(WindowedStream(keyed(), ProcessingTimeSessionWindows.with_gap(Time.milliseconds(10))).reduce(add_values))
    for now, v in [(0, 1), (5, 2), (13, 4), (30, 8)]:
        h.timers.advance_processing_time(now, h.op)
        h.send([(("a", v), None)])
    h.timers.advance_processing_time(100, h.op)
    # [0, 10) + [5, 15) + [13, 23) are one session; [30, 40) another
    assert h.out.records == [(("a", 7), 22), (("a", 8), 39)]


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: WindowedStream(keyed(), EventTimeSessionWindows.with_gap(Time.milliseconds(30))).trigger(
            PurgingTrigger.of(CountTrigger.of(3))
        ).process(Describe()),
        lambda: WindowedStream(keyed(), EventTimeSessionWindows.with_gap(Time.milliseconds(30))).aggregate(CountAndSum()),
        lambda: WindowedStream(keyed(), SlidingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(25)))
        .allowed_lateness(40)
        .evictor(CountEvictor.of(5))
        .reduce(add_values),
    ],
    ids=["session-count-trigger", "session-aggregate", "sliding-lateness-evictor"],
)
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_snapshot_and_restore_mid_stream_gives_the_same_output(build: Any, asynchronous: bool) -> None:
    records = make_input(n=240, span=2400)
    rnd = random.Random(SEED + 2)
    records = sorted(records, key=lambda r: r[1] + rnd.randint(0, 60))  # some late data too
    batches = [records[i : i + 9] for i in range(0, len(records), 9)]

    def feed(h: Harness, part: list) -> None:
        for batch in part:
            h.send(batch)
            h.timers.advance_watermark(max(t for _, t in batch) - 50, h.op)

    reference = harness(build())
    feed(reference, batches)
    reference.finish()

    first_half = harness(build())
    middle = len(batches) // 2
    feed(first_half, batches[:middle])
    if asynchronous:  # copy-on-write: serialized only after the operator went on writing
        frozen = first_half.backend.snapshot_sync()
    else:
        snapshot = pickle.dumps(first_half.backend.snapshot())
    pending = first_half.timers.pending()
    watermark = first_half.timers.watermark
    emitted = list(first_half.out.records)
    assert first_half.backend.num_entries() > 0
    # Keep processing in the old operator: none of it may leak into the snapshot.
    feed(first_half, batches[middle:])
    if asynchronous:
        snapshot = frozen.serialize()

    backend = new_backend(128, range(0, 128))
    backend.restore([canonical.loads(snapshot)])  # a serialized snapshot is a canonical file
    spec, selector = spec_of(build())
    resumed = Harness(spec, selector, backend)
    resumed.timers.watermark = watermark
    resumed.timers.restore(pending)  # the engine's job: timers come back from the snapshot
    resumed.out.records = emitted
    feed(resumed, batches[middle:])
    resumed.finish()
    # Timers due at the same time may fire in another order after a restore.
    assert sorted(resumed.out.records, key=lambda r: (r[1], repr(r[0]))) == sorted(
        reference.out.records, key=lambda r: (r[1], repr(r[0]))
    )


# ---------------------------------------------------------------------------------------------
# API and errors
# ---------------------------------------------------------------------------------------------


def test_event_time_windows_need_timestamps() -> None:
    h = harness(WindowedStream(keyed(), TumblingEventTimeWindows.of(Time.seconds(1))).reduce(add_values))
    with pytest.raises(InvalidProgramError, match="no timestamps") as info:
        h.op.process([("a", 1)], None)
    assert "assign_timestamps_and_watermarks" in str(info.value)


def test_window_node_and_default_triggers() -> None:
    stream = WindowedStream(keyed(), TumblingEventTimeWindows.of(Time.seconds(1))).reduce(add_values, output_type="T")
    spec, selector = spec_of(stream)
    assert selector is stream._node.key_selector and selector(("k", 1)) == "k"
    assert type(spec.trigger).__name__ == "EventTimeTrigger"
    assert stream.get_name() == "Window(TumblingEventTimeWindows(1000), EventTimeTrigger(), add_values)"
    assert stream._node.params["output_type"] == "T"
    graph = stream._env._graph
    (edge,) = graph.inputs_of(stream._node.id)
    assert edge.partitioner == "HASH"
    proc = spec_of(WindowedStream(keyed(), TumblingProcessingTimeWindows.of(Time.seconds(1))).reduce(add_values))[0]
    assert type(proc.trigger).__name__ == "ProcessingTimeTrigger"
    glob = spec_of(WindowedStream(keyed(), GlobalWindows.create()).reduce(add_values))[0]
    assert type(glob.trigger).__name__ == "NeverTrigger"
    with pytest.raises(InvalidProgramError):
        WindowedStream(keyed(), EventTimeSessionWindows.with_gap(Time.seconds(1))).trigger(_NonMerging())


class _NonMerging(CountTrigger):
    def __init__(self) -> None:
        super().__init__(1)

    def can_merge(self) -> bool:
        return False


class CollectAll(ProcessAllWindowFunction):
    def process(self, context: Any, elements: Any) -> Any:
        yield context.window().start, sorted(v for _, v in elements)


def test_window_all_runs_at_parallelism_one_without_a_key() -> None:
    ds = env().from_collection([("x", 0)])
    stream = AllWindowedStream(ds, TumblingEventTimeWindows.of(Time.milliseconds(10))).process(CollectAll())
    assert stream._node.parallelism == 1 and stream._node.max_allowed_parallelism == 1
    with pytest.raises(InvalidProgramError):
        stream.set_parallelism(4)
    h = harness(stream)
    h.send([(("a", 1), 1), (("b", 2), 3), (("c", 3), 12)])
    h.finish()
    assert h.out.records == [((0, [1, 2]), 9), ((10, [3]), 19)]
    counted = harness(count_window_all(ds, 2).apply(AllSizes()))
    counted.send([(("a", 1), None), (("b", 2), None), (("c", 3), None)])
    assert values_of(counted.out.records) == [(GlobalWindow(), 2)]


class AllSizes(AllWindowFunction):
    def apply(self, window: Any, inputs: Any) -> Any:
        return [(window, len(list(inputs)))]
