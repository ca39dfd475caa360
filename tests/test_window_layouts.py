"""A window operator's state converted between the sliced and the general layout.

Unit tests of :func:`sliced_to_general` and :func:`general_to_sliced` against hand-worked
states, and a property test through the engine's operators (flinkpy.testing's OperatorHarness:
real backends, timers and checkpoints): a stream runs on one path, is snapshotted mid-stream,
restores on the other path and gets the rest; the output must be an uninterrupted run's. The
seed is printed; FLINKPY_LAYOUTS_SEED replays one.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from flinkpy.common.output_tag import OutputTag
from flinkpy.common.time import Time
from flinkpy.common.window import TimeWindow
from flinkpy.datastream.functions import AggregateFunction
from flinkpy.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
from flinkpy.datastream.window import (
    CountEvictor,
    EventTimeTrigger,
    ProcessingTimeTrigger,
    SlidingProcessingTimeWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from flinkpy.errors import InvalidProgramError
from flinkpy.task.window_layouts import WindowLayoutError, general_to_sliced, sliced_to_general
from flinkpy.task.window_slicing import FIRED, GROUP_TIMER_KEY, SLICE_TIMER
from flinkpy.testing import OperatorHarness
from test_window_operator import add_values, keyed, spec_of

SEED = int(os.environ.get("FLINKPY_LAYOUTS_SEED") or random.SystemRandom().randrange(2**32))
SLICES, CONTENTS, EVENT = "_window_slices", "_window_contents", "_timers.event"


def _value(groups: dict) -> dict:
    return {"kind": "value", "key_groups": groups}


def _spec(stream: Any) -> Any:
    return spec_of(stream)[0]


def _sum(a: int, b: int) -> int:
    return a + b


# -- sliced -> general ----------------------------------------------------------------------


def test_sliced_to_general_builds_each_kept_window_from_its_slices() -> None:
    """Sliding 30 ms every 10, lateness 15, key group 5 fired up to 29: windows ending 20 and 30
    fired and wait for late records (cleanup timers only), 40, 50 and 60 have not fired."""
    stream = keyed().window(SlidingEventTimeWindows.of(Time.milliseconds(30), Time.milliseconds(10))).allowed_lateness(15)
    spec = _spec(stream.reduce(_sum))
    states = {
        SLICES: _value({5: {"a": {20: 1, 30: 2, 40: 4}}}),
        FIRED: _value({5: {GROUP_TIMER_KEY: 29}}),
        EVENT: _value({5: {(GROUP_TIMER_KEY, SLICE_TIMER, 39): None}, 6: {("z", "other", 7): None}}),
        "_window_state:n": _value({5: {"a": {TimeWindow(0, 30): 1}}}),
    }
    out = sliced_to_general(states, spec, 128)
    assert out[CONTENTS]["key_groups"] == {
        5: {"a": {TimeWindow(-10, 20): 1, TimeWindow(0, 30): 3, TimeWindow(10, 40): 7, TimeWindow(20, 50): 6, TimeWindow(30, 60): 4}}
    }
    timers = {(w.end, ts) for key, w, ts in out[EVENT]["key_groups"][5]}
    assert timers == {(20, 34), (30, 44), (40, 39), (40, 54), (50, 49), (50, 64), (60, 59), (60, 74)}
    assert out[EVENT]["key_groups"][6] == {("z", "other", 7): None}  # not the window's: kept
    assert out["_window_state:n"] == states["_window_state:n"]
    assert SLICES not in out and FIRED not in out
    assert states[SLICES]["key_groups"][5]["a"] == {20: 1, 30: 2, 40: 4}  # the input is not changed
    # without lateness the fired windows are gone, and an evictor sees one element per slice
    spec = _spec(stream.allowed_lateness(0).evictor(CountEvictor.of(100)).reduce(_sum))
    out = sliced_to_general(states, spec, 128)
    assert out[CONTENTS]["key_groups"][5]["a"] == {
        TimeWindow(10, 40): [(1, 19), (2, 29), (4, 39)], TimeWindow(20, 50): [(2, 29), (4, 39)], TimeWindow(30, 60): [(4, 39)]
    }


def test_sliced_to_general_reads_the_store_paths_timers_and_merges_accumulators() -> None:
    """The store path says what fired with its group timers (the earliest - 1); accumulators of
    an AggregateFunction merge."""
    spec = _spec(keyed().window(TumblingEventTimeWindows.of(Time.milliseconds(10))).aggregate(CountSum()))
    states = {
        SLICES: _value({2: {"a": {10: [1, 5], 20: [2, 7]}}}),
        EVENT: _value({2: {(GROUP_TIMER_KEY, SLICE_TIMER, 19): None}}),
    }
    out = sliced_to_general(states, spec, 128)
    assert out[CONTENTS]["key_groups"] == {2: {"a": {TimeWindow(10, 20): [2, 7]}}}
    assert set(out[EVENT]["key_groups"][2]) == {("a", TimeWindow(10, 20), 19)}


def test_what_the_general_path_cannot_keep_is_refused() -> None:
    stream = keyed().window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
    states = {SLICES: _value({2: {"a": {10: [1, 5]}}})}
    with pytest.raises(WindowLayoutError, match="accumulators"):
        sliced_to_general(states, _spec(stream.evictor(CountEvictor.of(3)).aggregate(CountSum())), 128)
    with pytest.raises(WindowLayoutError, match="not one of"):  # the size changed
        sliced_to_general({SLICES: _value({2: {"a": {15: 3}}})}, _spec(stream.reduce(_sum)), 128)
    assert issubclass(WindowLayoutError, InvalidProgramError)


# -- general -> sliced ----------------------------------------------------------------------


def test_general_to_sliced_makes_each_tumbling_window_one_slice() -> None:
    """Tumbling 10 ms, lateness 5: window [0, 10) fired (its timer at 9 is gone; cleanup at 14
    waits), [10, 20) and [20, 30) have not. Windows up to 10 fired, in every key group."""
    spec = _spec(keyed().window(TumblingEventTimeWindows.of(Time.milliseconds(10))).allowed_lateness(5).reduce(_sum))
    w0, w1, w2 = TimeWindow(0, 10), TimeWindow(10, 20), TimeWindow(20, 30)
    states = {
        CONTENTS: _value({7: {"a": {w0: 3, w1: 4}}, 9: {"b": {w2: 5}}}),
        "_window_trigger:count": _value({7: {"a": {w1: 2}}}),
        EVENT: _value({7: {("a", w0, 14): None, ("a", w1, 19): None, ("a", w1, 24): None}, 9: {("b", w2, 29): None, ("b", w2, 34): None}}),
    }
    out = general_to_sliced(states, spec, 128)
    assert out[SLICES]["key_groups"] == {7: {"a": {10: 3, 20: 4}}, 9: {"b": {30: 5}}}
    assert out[FIRED]["key_groups"] == {kg: {GROUP_TIMER_KEY: 9} for kg in range(128)}
    assert out[EVENT]["key_groups"] == {
        7: {(GROUP_TIMER_KEY, SLICE_TIMER, t): None for t in (14, 19, 24)},
        9: {(GROUP_TIMER_KEY, SLICE_TIMER, t): None for t in (29, 34)},
    }
    assert CONTENTS not in out and "_window_trigger:count" not in out
    # and back: the same windows, timers and contents
    back = sliced_to_general(out, spec, 128)
    assert back[CONTENTS] == states[CONTENTS]
    assert back[EVENT]["key_groups"] == states[EVENT]["key_groups"]


def test_key_groups_of_subtasks_at_different_watermarks_keep_their_own_fired_time() -> None:
    """Window [10, 20) fired in key group 1 (its subtask's watermark passed 19) and not in key
    group 2 (the other subtask's had not): key group 2 must not take 19 as fired."""
    spec = _spec(keyed().window(TumblingEventTimeWindows.of(Time.milliseconds(10))).allowed_lateness(50).reduce(_sum))
    w = TimeWindow(10, 20)
    states = {
        CONTENTS: _value({1: {"a": {w: 1}}, 2: {"b": {w: 2}}}),
        EVENT: _value({1: {("a", w, 69): None}, 2: {("b", w, 19): None, ("b", w, 69): None}}),
    }
    fired = general_to_sliced(states, spec, 4)[FIRED]["key_groups"]
    assert fired == {0: {GROUP_TIMER_KEY: 19}, 1: {GROUP_TIMER_KEY: 19}, 2: {GROUP_TIMER_KEY: -(2**63)}, 3: {GROUP_TIMER_KEY: 19}}


def test_the_elements_an_evictor_kept_fold_into_one_slice() -> None:
    stream = keyed().window(TumblingEventTimeWindows.of(Time.milliseconds(10)))
    w = TimeWindow(10, 20)
    states = {CONTENTS: _value({4: {"a": {w: [(("a", 2), 11), (("a", 3), 15)]}}}), EVENT: _value({4: {("a", w, 19): None}})}
    assert general_to_sliced(states, _spec(stream.reduce(add_values)), 128)[SLICES]["key_groups"] == {4: {"a": {20: ("a", 5)}}}
    assert general_to_sliced(states, _spec(stream.aggregate(CountSum())), 128)[SLICES]["key_groups"] == {4: {"a": {20: [2, 5]}}}
    # a reduced value that looks like such elements in one window but not in all stays as it is
    lists = _spec(stream.reduce(lambda a, b: a + b))
    looks = {CONTENTS: _value({4: {"a": {w: [("x", 12)], TimeWindow(20, 30): [("y", 3)]}}})}
    assert general_to_sliced(looks, lists, 128)[SLICES]["key_groups"] == {4: {"a": {20: [("x", 12)], 30: [("y", 3)]}}}
    # in processing time the elements carry no timestamp
    stream = keyed().window(TumblingProcessingTimeWindows.of(Time.milliseconds(10)))
    states = {CONTENTS: _value({4: {"a": {w: [(("a", 2), None), (("a", 3), None)]}}}), "_timers.processing": _value({4: {("a", w, 19): None}})}
    assert general_to_sliced(states, _spec(stream.reduce(add_values)), 128)[SLICES]["key_groups"] == {4: {"a": {20: ("a", 5)}}}


def test_sliding_windows_in_flight_cannot_be_cut_into_slices() -> None:
    spec = _spec(keyed().window(SlidingEventTimeWindows.of(Time.milliseconds(20), Time.milliseconds(10))).reduce(_sum))
    states = {CONTENTS: _value({1: {"a": {TimeWindow(0, 20): 3}}})}
    with pytest.raises(WindowLayoutError, match="cannot be split"):
        general_to_sliced(states, spec, 128)
    emptied = {CONTENTS: _value({}), EVENT: _value({})}
    assert SLICES not in general_to_sliced(emptied, spec, 128)


def test_processing_time_windows_convert_both_ways() -> None:
    spec = _spec(keyed().window(TumblingProcessingTimeWindows.of(Time.milliseconds(10))).reduce(_sum))
    states = {CONTENTS: _value({3: {"a": {TimeWindow(10, 20): 6}}}), "_timers.processing": _value({3: {("a", TimeWindow(10, 20), 19): None}})}
    sliced = general_to_sliced(states, spec, 128)
    assert sliced[SLICES]["key_groups"] == {3: {"a": {20: 6}}}
    assert set(sliced["_timers.processing"]["key_groups"][3]) == {(GROUP_TIMER_KEY, SLICE_TIMER, 19)}
    assert sliced_to_general(sliced, spec, 128)["_timers.processing"]["key_groups"] == states["_timers.processing"]["key_groups"]


# -- through the engine's operators ---------------------------------------------------------


class CountSum(AggregateFunction):
    """[count, sum] of the values; merge builds a new accumulator."""

    def create_accumulator(self) -> list:
        return [0, 0]

    def add(self, value: tuple, acc: list) -> list:
        return [acc[0] + 1, acc[1] + value[1]]

    def get_result(self, acc: list) -> tuple:
        return tuple(acc)

    def merge(self, a: list, b: list) -> list:
        return [a[0] + b[0], a[1] + b[1]]


class SameAsDefault(EventTimeTrigger):
    """The default trigger's behaviour under another type: the window runs on the general path."""


class SameAsDefaultInProcessingTime(ProcessingTimeTrigger):
    """:class:`SameAsDefault` for processing-time windows."""


LATE = OutputTag("late")


def _build(processing: bool, sliding: bool, aggregate: bool, lateness: int, general: bool, evictor: bool = False) -> Any:
    """The window on the sliced path, or on the general one by an evictor that evicts nothing
    (a reduce only: an AggregateFunction's accumulators are no elements) or a trigger that is
    the default one under another type."""

    def build(s: Any) -> Any:
        sliding_cls, tumbling_cls = (SlidingProcessingTimeWindows, TumblingProcessingTimeWindows) if processing else (SlidingEventTimeWindows, TumblingEventTimeWindows)
        assigner = sliding_cls.of(Time.milliseconds(40), Time.milliseconds(10)) if sliding else tumbling_cls.of(Time.milliseconds(30))
        ws = s.key_by(lambda r: r[0]).window(assigner)
        if not processing:
            ws = ws.allowed_lateness(lateness).side_output_late_data(LATE)
        if general:
            trigger = SameAsDefaultInProcessingTime() if processing else SameAsDefault()
            ws = ws.evictor(CountEvictor.of(10**6)) if evictor and not aggregate else ws.trigger(trigger)
        return (ws.aggregate(CountSum()) if aggregate else ws.reduce(add_values)).uid("totals")

    return build


def _steps(rnd: random.Random, n: int, processing: bool) -> list:
    """Records and watermarks; in processing time, records and clock steps (never to the last
    millisecond of a slide: a record then is in a window that fired, and the paths differ,
    as window_slicing's docstring says)."""
    steps: list = []
    t, wm = 0, -1
    if processing:
        for i in range(n):
            steps.append(("r", (rnd.choice("abcd"), rnd.randint(1, 9)), None))
            if i % 3 == 2:
                t += rnd.randint(1, 12)
                t += t % 10 == 9
                steps.append(("t", t))
        return steps
    for i in range(n):
        t += rnd.randint(0, 6)
        ts = t - rnd.randint(0, 60) if rnd.random() < 0.2 else t
        steps.append(("r", (rnd.choice("abcd"), rnd.randint(1, 9)), ts))
        if i % 4 == 3 and t - 15 > wm:
            wm = t - 15
            steps.append(("w", wm))
    return steps


def _play(h: OperatorHarness, steps: list) -> None:
    for step in steps:
        if step[0] == "r":
            h.process_element(step[1], step[2])
        elif step[0] == "t":
            h.set_processing_time(step[1])
        else:
            h.process_watermark(step[1])


def _finish(h: OperatorHarness) -> None:
    h.process_watermark(2**62)
    h.set_processing_time(10**9)


def _result(*runs: OperatorHarness) -> tuple[list, list]:
    """Every record the runs emitted, and every late one, in a stable order."""
    key = lambda r: (r.timestamp, repr(r.value))  # noqa: E731
    return sorted((r for h in runs for r in h.output), key=key), sorted((r for h in runs for r in h.side_output(LATE)), key=key)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_snapshot_restores_on_the_other_path_with_an_uninterrupted_runs_output(backend: str) -> None:
    print(f"FLINKPY_LAYOUTS_SEED={SEED}")
    state_backend = HashMapStateBackend if backend == "heap" else EmbeddedRocksDBStateBackend

    @seed(SEED)
    @settings(max_examples=10 if backend == "heap" else 5, deadline=None, derandomize=False, suppress_health_check=list(HealthCheck))
    @given(
        processing=st.booleans(), to_general=st.booleans(), evictor_before=st.booleans(), sliding=st.booleans(), aggregate=st.booleans(), lateness=st.sampled_from([0, 0, 20, 45]),
        stream_seed=st.integers(0, 2**32 - 1), cut=st.floats(0.2, 0.8),
    )
    def check(processing: bool, to_general: bool, evictor_before: bool, sliding: bool, aggregate: bool, lateness: int, stream_seed: int, cut: float) -> None:
        sliding = sliding and to_general  # sliding windows in flight do not cut into slices
        before = _build(processing, sliding, aggregate, lateness, general=not to_general, evictor=evictor_before)
        after = _build(processing, sliding, aggregate, lateness, general=to_general, evictor=True)
        steps = _steps(random.Random(stream_seed), 60, processing)
        where = f"seed {SEED} (FLINKPY_LAYOUTS_SEED), stream {stream_seed}, processing={processing} to_general={to_general} evictor_before={evictor_before} sliding={sliding} aggregate={aggregate} lateness={lateness} cut={cut}"
        middle = int(len(steps) * cut)
        with OperatorHarness(before, state_backend=state_backend()) as reference:
            _play(reference, steps)
            _finish(reference)
            expected = _result(reference)
        with OperatorHarness(before, state_backend=state_backend()) as first:
            _play(first, steps[:middle])
            snapshot = first.snapshot()
        with OperatorHarness(after, state_backend=state_backend(), restore_from=snapshot) as resumed:
            _play(resumed, steps[middle:])
            _finish(resumed)
            assert _result(first, resumed) == expected, where

    check()
