"""Sliced window aggregation against the general window operator, on the same random input.

Each trial draws a window (tumbling or sliding, sizes, slides, offsets, allowed lateness, reduce
or aggregate, with or without a window function) and an out-of-order stream with late records,
runs it through :class:`SlicedWindowOperator` and :class:`WindowOperator` on the same driver
(tests/test_window_operator.py's harness: a real keyed backend, a timer service that fires in
time order) and compares every firing per key in order, and every late record. The seed is
printed and put in every assertion message; FLINKPY_SLICING_SEED replays one.
"""

from __future__ import annotations

import os
import pickle
import random
from collections import defaultdict
from typing import Any

import pytest

from flinkpy.common.time import Time
from flinkpy.datastream.functions import AggregateFunction
from flinkpy.common import Types
from flinkpy.datastream.output_tag import OutputTag
from flinkpy.datastream.state import ValueStateDescriptor
from flinkpy.datastream.window import (
    CountTrigger,
    EventTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowFunction,
)
from flinkpy.datastream.window_stream import WindowedStream
from flinkpy.errors import FlinkpyError
from flinkpy.state import canonical
from flinkpy.state.key_groups import assign_to_key_group
from backends import new_backend, use_backend
from flinkpy.task.window_operator import WindowOperator
from flinkpy.task.window_slicing import GENERAL, SLICED, SlicedWindowOperator, create_window_operator, execution_path
from test_window_operator import MAX_WM, Collect, Harness, add_values, keyed, spec_of

def sliced_operator(*args: Any) -> SlicedWindowOperator:
    """The sliced operator the engine builds for this backend (its slices in the operator on the
    heap backend, in keyed state on RocksDB)."""
    op = create_window_operator(*args)
    assert isinstance(op, SlicedWindowOperator)
    return op


SEED = int(os.environ.get("FLINKPY_SLICING_SEED") or random.SystemRandom().randrange(2**32))


@pytest.fixture(autouse=True)
def _each_backend(state_backend) -> None:
    use_backend(state_backend)


class KeyCountSum(AggregateFunction):
    """(key, count, sum); merge builds a new accumulator, as slices need."""

    def create_accumulator(self) -> tuple:
        return (None, 0, 0)

    def add(self, value: tuple, acc: tuple) -> tuple:
        return (value[0], acc[1] + 1, acc[2] + value[1])

    def get_result(self, acc: tuple) -> tuple:
        return acc

    def merge(self, a: tuple, b: tuple) -> tuple:
        return (a[0] if a[0] is not None else b[0], a[1] + b[1], a[2] + b[2])


class Describe(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        w = context.window()
        yield (key, w.start, w.end, list(elements), context.current_watermark())


class Stateful(ProcessWindowFunction):
    """Counts its firings per key (global state) and per window (window state)."""

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        per_key = context.global_state().get_state(ValueStateDescriptor("firings", Types.INT()))
        per_window = context.window_state().get_state(ValueStateDescriptor("window-firings", Types.INT()))
        per_key.update((per_key.value() or 0) + 1)
        per_window.update((per_window.value() or 0) + 1)
        yield (key, context.window().start, per_key.value(), per_window.value(), list(elements))


class Apply(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        yield (key, window.start, list(inputs))


def _draw_window(rnd: random.Random, event_time: bool, late: OutputTag) -> Any:
    size = rnd.choice([10, 20, 30, 60, 100, 150])
    kind = rnd.choice(["tumbling", "sliding", "sliding"])
    if kind == "tumbling":
        offset = rnd.randrange(size) if rnd.random() < 0.3 else 0
        cls = TumblingEventTimeWindows if event_time else TumblingProcessingTimeWindows
        assigner = cls.of(Time.milliseconds(size), Time.milliseconds(offset))
    else:
        slide = rnd.choice([d for d in range(1, size + 1) if rnd.random() < 0.5 or d == size // 2] or [size])
        offset = rnd.randrange(slide) if rnd.random() < 0.3 else 0
        cls = SlidingEventTimeWindows if event_time else SlidingProcessingTimeWindows
        assigner = cls.of(Time.milliseconds(size), Time.milliseconds(slide), Time.milliseconds(offset))
    ws = WindowedStream(keyed(), assigner)
    if event_time:
        ws = ws.allowed_lateness(rnd.choice([0, 0, 5, 25, 80]))
        if rnd.random() < 0.7:
            ws = ws.side_output_late_data(late)
    fn = rnd.choice([None, Describe(), Apply(), Stateful()])
    if rnd.random() < 0.5:
        return ws.reduce(add_values, fn)
    return ws.aggregate(KeyCountSum(), fn)


def _per_key(records: list) -> dict[Any, list]:
    out: dict[Any, list] = defaultdict(list)
    for value, ts in records:
        out[value[0]].append((value, ts))
    return dict(out)


def _run_trial(trial_seed: int, event_time: bool) -> tuple[dict, dict, list, list, str]:
    rnd = random.Random(trial_seed)
    late = OutputTag("late")
    stream = _draw_window(rnd, event_time, late)
    spec, selector = spec_of(stream)
    assert execution_path(spec)[0] == SLICED, execution_path(spec)
    sliced = Harness(pickle.loads(pickle.dumps(spec)), selector, op_class=sliced_operator)
    general = Harness(pickle.loads(pickle.dumps(spec)), selector)
    keys = "abcde"[: rnd.randint(1, 5)]
    bound = rnd.choice([0, 10, 40, 120])
    n = rnd.randint(50, 400)
    t = rnd.randint(-300, 300)
    wm = -(2**63)
    now = t
    for h in (sliced, general):
        h.timers.now = now  # the processing-time clock never goes back
    for _ in range(n // 4):
        batch = []
        for _ in range(rnd.randint(1, 8)):
            t += rnd.randint(0, 12)
            ts = t - rnd.randint(0, bound) if rnd.random() < 0.6 else t
            if rnd.random() < 0.05:
                ts -= rnd.randint(50, 300)  # far behind: late, maybe beyond the lateness
            batch.append(((rnd.choice(keys), rnd.randint(1, 9)), ts if event_time else None))
        for h in (sliced, general):
            h.send(batch)
        if event_time:
            wm = max(wm, t - bound - 1)
            for h in (sliced, general):
                h.watermark(wm)
        else:
            fire_at = max(t, now)
            # Records arrive after the fired instant: one that arrives in the very millisecond a
            # window fired is added to a fresh copy of it on the general path and to its slices
            # (all of the window again) on the sliced path; see window_slicing's docstring.
            now = fire_at + rnd.randint(1, 3)
            for h in (sliced, general):
                h.timers.advance_processing_time(fire_at, h.op)
                h.timers.now = now
    if event_time:
        for h in (sliced, general):
            h.finish()
    else:
        for h in (sliced, general):
            h.timers.advance_processing_time(t + 10_000, h.op)
    late_s, late_g = _per_key(sliced.late.records), _per_key(general.late.records)
    return _per_key(sliced.out.records), _per_key(general.out.records), late_s, late_g, spec.describe()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("event_time", [True, False], ids=["event-time", "processing-time"])
def test_sliced_and_general_paths_fire_the_same(event_time: bool) -> None:
    print(f"FLINKPY_SLICING_SEED={SEED}")
    master = random.Random(SEED)
    fired = 0
    for trial in range(40 if event_time else 20):
        trial_seed = master.randrange(2**32)
        sliced, general, late_s, late_g, what = _run_trial(trial_seed, event_time)
        where = f"seed {SEED} (FLINKPY_SLICING_SEED), trial {trial} ({trial_seed}), {what}"
        assert sliced == general, where
        assert late_s == late_g, where
        fired += sum(len(v) for v in general.values())
    assert fired > 0


def test_the_choice_of_path() -> None:
    sliding = WindowedStream(keyed(), SlidingEventTimeWindows.of(Time.seconds(5), Time.seconds(1)))
    spec, _ = spec_of(sliding.reduce(add_values))
    assert execution_path(spec) == (SLICED, "slices of 1000 ms")
    assert isinstance(create_window_operator("w", spec, Collect(), lambda v: v[0], new_backend(128, range(128)), False), SlicedWindowOperator)
    general = [
        sliding.process(Describe()),
        WindowedStream(keyed(), SlidingEventTimeWindows.of(Time.seconds(5), Time.seconds(1))).trigger(CountTrigger.of(2)).reduce(add_values),
        WindowedStream(keyed(), EventTimeSessionWindows.with_gap(Time.seconds(1))).reduce(add_values),
        WindowedStream(keyed(), SlidingEventTimeWindows.of(Time.seconds(1), Time.seconds(5))).reduce(add_values),
    ]
    for stream in general:
        spec, _ = spec_of(stream)
        assert execution_path(spec)[0] == GENERAL
        op = create_window_operator("w", spec, Collect(), lambda v: v[0], new_backend(128, range(128)), False)
        assert type(op) is WindowOperator


def _records(n: int, seed: int) -> list:
    rnd = random.Random(seed)
    return sorted(((rnd.choice("abc"), rnd.randint(1, 9)), rnd.randint(0, 2000)) for _ in range(n))


def _sorted_output(h: Harness) -> list:
    return sorted(h.out.records, key=lambda r: (r[1], repr(r[0])))


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_sliced_snapshot_and_restore_mid_stream(asynchronous: bool) -> None:
    def build() -> Any:
        return WindowedStream(keyed(), SlidingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(25))).allowed_lateness(30).reduce(add_values)

    records = sorted(_records(240, SEED), key=lambda r: r[1])
    batches = [records[i : i + 9] for i in range(0, len(records), 9)]

    def feed(h: Harness, part: list) -> None:
        for batch in part:
            h.send(batch)
            h.watermark(max(t for _, t in batch) - 50)

    spec, selector = spec_of(build())
    reference = Harness(spec, selector, op_class=sliced_operator)
    feed(reference, batches)
    reference.finish()
    first = Harness(spec_of(build())[0], selector, op_class=sliced_operator)
    middle = len(batches) // 2
    feed(first, batches[:middle])
    frozen = first.backend.snapshot_sync() if asynchronous else None
    snapshot = None if asynchronous else pickle.dumps(first.backend.snapshot())
    pending, watermark, emitted = first.timers.pending(), first.timers.watermark, list(first.out.records)
    feed(first, batches[middle:])  # none of it may leak into the snapshot
    if frozen is not None:
        snapshot = frozen.serialize()
    backend = new_backend(128, range(0, 128))
    backend.restore([canonical.loads(snapshot)])
    resumed = Harness(spec_of(build())[0], selector, backend, op_class=sliced_operator)
    resumed.timers.watermark = watermark
    resumed.timers.restore(pending)
    resumed.out.records = emitted
    feed(resumed, batches[middle:])
    resumed.finish()
    assert _sorted_output(resumed) == _sorted_output(reference)


@pytest.mark.parametrize("from_sliced", [False, True], ids=["general-to-sliced", "sliced-to-general"])
def test_a_snapshot_of_the_other_path_that_cannot_convert_is_refused_naming_the_operator(from_sliced: bool) -> None:
    """Sliding windows in flight cannot be cut into slices; a window function alone cannot be given
    slices for elements (tests/test_window_layouts.py converts what can be)."""
    sliding = SlidingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(25))
    spec, selector = spec_of(WindowedStream(keyed(), sliding).reduce(add_values))
    target = spec_of(WindowedStream(keyed(), sliding).apply(Apply()))[0] if from_sliced else spec
    old = Harness(spec, selector, op_class=sliced_operator if from_sliced else WindowOperator)
    old.send(_records(20, SEED))
    backend = new_backend(128, range(0, 128))
    backend.restore([canonical.loads(pickle.dumps(old.backend.snapshot()))])
    with pytest.raises(FlinkpyError) as raised:
        Harness(target, selector, backend, op_class=WindowOperator if from_sliced else sliced_operator)
    message = str(raised.value)
    assert "'Window'" in message and ("general" in message and "sliced" in message), message
    assert ("window function alone" if from_sliced else "cannot be split") in message, message
    # an empty snapshot of the other path (every window fired) restores
    old.watermark(MAX_WM)
    empty = new_backend(128, range(0, 128))
    empty.restore([canonical.loads(pickle.dumps(old.backend.snapshot()))])
    Harness(target, selector, empty, op_class=WindowOperator if from_sliced else sliced_operator)


def _in_range(records: list, key_groups: range) -> list:
    return [r for r in records if assign_to_key_group(r[0][0], 128) in key_groups]


def test_key_groups_restored_from_subtasks_that_fired_to_different_times() -> None:
    """Two heap subtasks stop at different watermarks; one operator restores both (on either
    backend). Each key group's windows fire once: what fired before the snapshot does not fire
    again, its records behind its own watermark are late as they were, and the outputs are
    those of two operators that never stopped."""

    def build() -> Any:
        return WindowedStream(keyed(), SlidingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(25))).allowed_lateness(30) \
            .side_output_late_data(OutputTag("late")).reduce(add_values)

    rnd = random.Random(SEED)
    records = sorted((((rnd.choice("abcdefgh"), rnd.randint(1, 9)), rnd.randint(0, 2000)) for _ in range(400)), key=lambda r: r[1])
    cut = len(records) // 2
    halves = (range(0, 64), range(64, 128))
    marks = (records[cut][1] - 120, records[cut][1] - 20)  # the two subtasks' watermarks at the stop
    # after the stop, some records fall behind: between the two watermarks, or behind both
    stragglers = [(v, ts - rnd.choice([0, 0, 0, 40, 90, 150])) for v, ts in records[cut:]]
    stragglers[3:3] = [((k, 5), (marks[0] + marks[1]) // 2) for k in "abcdefgh"]  # between the two
    later = [stragglers[i : i + 7] for i in range(0, len(stragglers), 7)]

    def run_until_stop(h: Harness, part: range, mark: int) -> None:
        h.send(_in_range(records[:cut], part))
        h.watermark(mark)

    docs, before, references = [], [], []
    for part, mark in zip(halves, marks):
        spec, selector = spec_of(build())
        from flinkpy.state.heap import HeapKeyedStateBackend

        old = Harness(spec, selector, HeapKeyedStateBackend(128, part), op_class=sliced_operator)
        run_until_stop(old, part, mark)
        docs.append(canonical.loads(old.backend.snapshot_sync().serialize()))
        before += old.out.records + old.late.records
        ref = Harness(spec_of(build())[0], selector, HeapKeyedStateBackend(128, part), op_class=sliced_operator)
        run_until_stop(ref, part, mark)
        wm = mark
        for batch in later:  # what the restored operator gets, with the watermark it sees
            ref.send(_in_range(batch, part))
            wm = max(wm, max(t for _, t in batch) - 150)
            ref.watermark(wm)
        ref.finish()
        references += ref.out.records + ref.late.records
    backend = new_backend(128, range(0, 128))
    backend.restore(docs)
    spec, selector = spec_of(build())
    resumed = Harness(spec, selector, backend, op_class=sliced_operator)
    wm = -(2**63)
    for batch in later:
        resumed.send(batch)
        wm = max(wm, max(t for _, t in batch) - 150)  # starts below the later subtask's watermark
        resumed.watermark(wm)
    resumed.finish()
    got = before + resumed.out.records + resumed.late.records
    from collections import Counter
    extra, missing = Counter(map(repr, got)) - Counter(map(repr, references)), Counter(map(repr, references)) - Counter(map(repr, got))
    assert not extra and not missing, f"seed {SEED}: extra {sorted(extra)[:8]}, missing {sorted(missing)[:8]}"
    assert max(t for _, t in later[0]) - 150 < marks[1], "the restored watermark should start behind the later subtask's"
    between = [r for r in stragglers if marks[0] < r[1] <= marks[1] and assign_to_key_group(r[0][0], 128) in halves[1]]
    assert between, "some records should be late only by their key group's own watermark"


class ListAcc(AggregateFunction):
    """An accumulator changed in place, as many users write one."""

    def create_accumulator(self) -> list:
        return [0, 0]

    def add(self, value: tuple, acc: list) -> list:
        acc[0] += 1
        acc[1] += value[1]
        return acc

    def get_result(self, acc: list) -> tuple:
        return tuple(acc)

    def merge(self, a: list, b: list) -> list:
        a[0] += b[0]
        a[1] += b[1]
        return a


def test_a_snapshot_keeps_accumulators_that_later_records_change_in_place() -> None:
    spec, selector = spec_of(WindowedStream(keyed(), SlidingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(50))).aggregate(ListAcc()))
    h = Harness(spec, selector, op_class=sliced_operator)
    h.send([(("a", 1), 10), (("a", 2), 20)])
    frozen, pending = h.backend.snapshot_sync(), h.timers.pending()
    h.send([(("a", 4), 30), (("a", 8), 60)])
    h.watermark(99)  # fires [0, 100) and [-50, 50): the merge must not change a slice either
    h.send([(("a", 16), 70)])
    restored = new_backend(128, range(0, 128))
    restored.restore([canonical.loads(frozen.serialize())])
    again = Harness(spec, selector, restored, op_class=sliced_operator)
    again.timers.restore(pending)  # the store path's timers (the heap path has none)
    again.finish()
    assert sorted(again.out.records) == [((2, 3), 49), ((2, 3), 99)]
    h.finish()
    assert sorted(h.out.records) == [((2, 24), 149), ((3, 7), 49), ((4, 15), 99)]
