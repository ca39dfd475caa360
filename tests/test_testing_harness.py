"""flinkpy.testing: user functions on the engine's operators, with a manual clock and snapshots.

Each function kind runs through OperatorHarness (keyed and non-keyed process functions, windows
with their assigner, trigger and function, two-input and broadcast functions); snapshots are
checked to be checkpoints like a job's and to restore at another parallelism; and
assert_restore_equivalent passes for functions that keep their state in managed state and fails,
naming the step, for one that keeps it in an attribute of its own. Expected outputs are computed
from the inputs in each test, not copied from a run.
"""

from __future__ import annotations

import pytest

from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.common import Time, Types
from flinkpy.common.output_tag import OutputTag
from flinkpy.datastream import (
    AggregateFunction,
    BroadcastProcessFunction,
    CheckpointedFunction,
    CoProcessFunction,
    EmbeddedRocksDBStateBackend,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ProcessFunction,
)
from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from flinkpy.datastream.window import (
    CountTrigger,
    ProcessWindowFunction,
    PurgingTrigger,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from flinkpy.errors import InvalidProgramError
from flinkpy.state.key_groups import assign_to_key_group, compute_operator_index_for_key_group
from flinkpy.testing import (
    Element,
    OperatorHarness,
    ProcessingTime,
    RestoreDivergence,
    StreamRecord,
    Watermark,
    assert_restore_equivalent,
)

LATE = OutputTag("late")
KEY = lambda r: r[0]  # noqa: E731


class SessionCount(KeyedProcessFunction):
    """Counts a key's records and reports the count when its key has been quiet for 10 ms of
    event time (a timer per record, the older ones deleted), or every 100 ms of processing time;
    records behind the watermark go to the side output."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.INT()))
        self.due = ctx.get_state(ValueStateDescriptor("due", Types.LONG()))

    def process_element(self, value, ctx):
        timers = ctx.timer_service()
        if ctx.timestamp() <= timers.current_watermark():
            yield LATE, value
            return
        self.count.update((self.count.value() or 0) + value[1])
        if self.due.value() is not None:
            timers.delete_event_time_timer(self.due.value())
        self.due.update(ctx.timestamp() + 10)
        timers.register_event_time_timer(ctx.timestamp() + 10)
        timers.register_processing_time_timer(timers.current_processing_time() // 100 * 100 + 100)

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), self.count.value(), str(ctx.time_domain())


class AttributeCount(KeyedProcessFunction):
    """The bug: a running sum per key in a dict of the function's own, not in managed state."""

    def open(self, ctx):
        self.sums = {}

    def process_element(self, value, ctx):
        self.sums[value[0]] = self.sums.get(value[0], 0) + value[1]
        yield value[0], self.sums[value[0]]


class Batches(ProcessFunction, CheckpointedFunction):
    """Not keyed: buffers records in operator list state and emits their sum every 3."""

    def initialize_state(self, context):
        self.buffer = context.get_operator_state_store().get_list_state(ListStateDescriptor("buffer", Types.INT()))

    def process_element(self, value, ctx):
        self.buffer.add(value)
        items = list(self.buffer.get())
        if len(items) == 3:
            self.buffer.clear()
            yield sum(items)


def keyed(fn):
    return lambda s: s.key_by(KEY).process(fn)


def test_keyed_process_function_with_timers_side_output_and_manual_clock():
    with OperatorHarness(keyed(SessionCount()), processing_time=1_000) as h:
        assert h.keyed_inputs
        h.process_element(("a", 1), timestamp=5)
        h.process_element(("a", 2), timestamp=8)
        h.process_element(("b", 4), timestamp=9)
        assert h.event_time_timers == 2  # a's first timer was deleted
        assert h.processing_time_timers == 2  # one per key at 1100
        assert h.process_watermark(17).records == []
        assert h.process_watermark(18).records == [StreamRecord(("a", 3, "TimeDomain.EVENT_TIME"), 18)]
        assert h.process_element(("a", 7), timestamp=12).records == []
        assert h.side_output(LATE) == [StreamRecord(("a", 7), 12)]
        fired = h.set_processing_time(1_100).records
        assert sorted(fired, key=str) == [StreamRecord(("a", 3, "TimeDomain.PROCESSING_TIME")), StreamRecord(("b", 4, "TimeDomain.PROCESSING_TIME"))]
        assert h.watermarks == [17, 18]
        assert h.current_processing_time() == 1_100


def test_process_function_on_a_stream_that_is_not_keyed():
    class Stamp(ProcessFunction):
        def process_element(self, value, ctx):
            now = ctx.timer_service().current_processing_time()
            if value < 0:
                ctx.output(LATE, value)
            else:
                yield value, now

    with OperatorHarness(lambda s: s.process(Stamp()), processing_time=42) as h:
        assert not h.keyed_inputs
        h.process_elements([1, -2, 3])
        h.set_processing_time(50)
        h.process_element(4)
        assert h.values == [(1, 42), (3, 42), (4, 50)]
        assert h.side_output("late") == [StreamRecord(-2)]


def test_windows_assigner_trigger_and_function():
    class Describe(ProcessWindowFunction):
        def process(self, key, context, elements):
            w = context.window()
            yield key, w.start, w.end, sorted(v for _, v in elements)

    tumbling = lambda s: s.key_by(KEY).window(TumblingEventTimeWindows.of(Time.milliseconds(10))).side_output_late_data(LATE).process(Describe())  # noqa: E731
    with OperatorHarness(tumbling) as h:
        for v, t in [(1, 1), (2, 9), (3, 10), (4, 25)]:
            h.process_element(("k", v), timestamp=t)
        assert h.process_watermark(19).records == [StreamRecord(("k", 0, 10, [1, 2]), 9), StreamRecord(("k", 10, 20, [3]), 19)]
        h.process_element(("k", 5), timestamp=3)
        assert h.side_output(LATE) == [StreamRecord(("k", 5), 3)]

    sliding = lambda s: s.key_by(KEY).window(SlidingEventTimeWindows.of(Time.milliseconds(10), Time.milliseconds(5))).reduce(lambda a, b: (a[0], a[1] + b[1]))  # noqa: E731
    with OperatorHarness(sliding) as h:
        h.run([Element(("k", 1), 1), Element(("k", 2), 6), Element(("k", 4), 11), Watermark(30)])
        assert h.output == [StreamRecord(("k", 1), 4), StreamRecord(("k", 3), 9), StreamRecord(("k", 6), 14), StreamRecord(("k", 4), 19)]

    counted = lambda s: s.key_by(KEY).window(TumblingProcessingTimeWindows.of(Time.milliseconds(100))).trigger(PurgingTrigger.of(CountTrigger.of(2))).reduce(lambda a, b: (a[0], a[1] + b[1]))  # noqa: E731
    with OperatorHarness(counted, processing_time=1_000) as h:
        assert h.process_element(("k", 1)).records == []
        assert h.process_element(("k", 2)).records == [StreamRecord(("k", 3), 1_099)]  # the window's last ms
        h.process_element(("k", 5))
        h.set_processing_time(1_100)  # the window ends; the count trigger never fires for one element
        assert h.values == [("k", 3)]


def test_two_input_functions():
    class Pair(KeyedCoProcessFunction):
        def open(self, ctx):
            self.order = ctx.get_state(ValueStateDescriptor("order", Types.PICKLED_BYTE_ARRAY()))

        def process_element1(self, value, ctx):
            self.order.update(value)
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5)

        def process_element2(self, value, ctx):
            if self.order.value() is not None:
                yield self.order.value(), value
                self.order.clear()

        def on_timer(self, timestamp, ctx):
            if self.order.value() is not None:
                yield ctx.get_current_key(), "unshipped"

    join = lambda orders, shipments: orders.key_by(KEY).connect(shipments.key_by(KEY)).process(Pair())  # noqa: E731
    with OperatorHarness(join, inputs=2) as h:
        h.process_element1(("o1", 10), timestamp=1)
        h.process_element1(("o2", 20), timestamp=2)
        assert h.process_element2(("o1", "shipped"), timestamp=3).values == [(("o1", 10), ("o1", "shipped"))]
        assert h.process_watermark1(10).records == []  # input 2 holds event time back
        assert h.current_watermark < 10
        assert h.process_watermark2(10).values == [("o2", "unshipped")]

    class Tag(CoProcessFunction):
        def process_element1(self, value, ctx):
            yield "left", value

        def process_element2(self, value, ctx):
            yield "right", value

    with OperatorHarness(lambda a, b: a.connect(b).process(Tag()), inputs=2) as h:
        h.process_element(1, input=2)
        h.process_element(2)
        assert h.values == [("right", 1), ("left", 2)]


RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())


class Threshold(KeyedBroadcastProcessFunction):
    """Emits a key's records above the broadcast threshold; a rule change re-checks every key's last value."""

    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last", Types.INT()))

    def process_element(self, value, ctx):
        self.last.update(value[1])
        limit = ctx.get_broadcast_state(RULES).get("limit")
        if limit is not None and value[1] > limit:
            yield value

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("limit", value)
        found = []
        ctx.apply_to_keyed_state(ValueStateDescriptor("last", Types.INT()), lambda key, state: found.append((key, state.value())))
        yield from sorted(("now above", k, v) for k, v in found if v > value)


def test_broadcast_process_functions():
    build = lambda data, rules: data.key_by(KEY).connect(rules.broadcast(RULES)).process(Threshold())  # noqa: E731
    with OperatorHarness(build, inputs=2, parallelism=2) as h:
        h.process_element(("a", 5))
        h.process_element(("b", 9))
        assert h.process_element(7, input=2).values == [("now above", "b", 9)]  # one subtask holds b
        assert h.process_element(("a", 8)).values == [("a", 8)]

    class Plain(BroadcastProcessFunction):
        def process_element(self, value, ctx):
            yield value * (ctx.get_broadcast_state(RULES).get("factor") or 1)

        def process_broadcast_element(self, value, ctx):
            ctx.get_broadcast_state(RULES).put("factor", value)

    with OperatorHarness(lambda d, r: d.connect(r.broadcast(RULES)).process(Plain()), inputs=2, parallelism=3) as h:
        h.process_element(3, input=2)
        h.process_elements([1, 2, 3, 4])  # round robin over the 3 subtasks, each with the factor
        assert sorted(h.values) == [3, 6, 9, 12]


def test_snapshot_is_a_checkpoint_and_restores_at_another_parallelism(tmp_path):
    keys = [f"k{i}" for i in range(12)]
    with OperatorHarness(keyed(SessionCount()), checkpoint_dir=str(tmp_path), processing_time=0) as h:
        for i, k in enumerate(keys):
            h.process_element((k, i + 1), timestamp=i)
        h.process_watermark(5)
        snap = h.snapshot()
    assert CheckpointStorage(str(tmp_path)).verify(snap.path).restorable
    assert snap.watermarks == (5,) and snap.parallelism == 1

    with OperatorHarness(keyed(SessionCount()), restore_from=snap, parallelism=3) as r:
        assert r.current_watermark == 5  # the last watermark is delivered again
        owner = {k: compute_operator_index_for_key_group(128, 3, assign_to_key_group(k, 128)) for k in keys}
        assert len(set(owner.values())) == 3, "the keys should spread over the three subtasks"
        for sub, s in enumerate(r.subtasks):  # each subtask restored exactly the keys of its key groups
            assert sorted(s.chain.backend.keys_of("count")) == sorted((k, assign_to_key_group(k, 128)) for k in keys if owner[k] == sub)
        assert r.event_time_timers == 12 and r.processing_time_timers == 12
        fired = r.process_watermark(100).records
        assert sorted(fired, key=str) == sorted((StreamRecord((k, i + 1, "TimeDomain.EVENT_TIME"), i + 10) for i, k in enumerate(keys)), key=str)
        assert r.snapshot().checkpoint_id == snap.checkpoint_id + 1


SCRIPT = [
    Element(("a", 1), 1), Element(("b", 2), 2), ProcessingTime(50), Element(("a", 3), 4), Watermark(5),
    Element(("c", 4), 6), Element(("a", 9), 3), Watermark(13), ProcessingTime(120), Element(("b", 1), 20), Watermark(40),
]


def test_restore_equivalence_holds_for_managed_state():
    assert_restore_equivalent(keyed(SessionCount()), SCRIPT, restore_parallelism=[1, 3])
    window = lambda s: s.key_by(KEY).window(SlidingEventTimeWindows.of(Time.milliseconds(10), Time.milliseconds(5))).reduce(lambda a, b: (a[0], a[1] + b[1]))  # noqa: E731
    assert_restore_equivalent(window, [s for s in SCRIPT if not isinstance(s, ProcessingTime)], parallelism=2, restore_parallelism=[1, 2])
    rules = [Element(("a", 5)), Element(3, input=2), Element(("b", 2)), Element(("a", 1)), Element(1, input=2), Element(("b", 4))]
    broadcast = lambda data, r: data.key_by(KEY).connect(r.broadcast(RULES)).process(Threshold())  # noqa: E731
    assert_restore_equivalent(broadcast, rules, inputs=2, restore_parallelism=[2])
    assert_restore_equivalent(lambda s: s.process(Batches()), [Element(i) for i in range(1, 8)])  # operator state


class Mean(AggregateFunction):
    def create_accumulator(self):
        return 0, 0

    def add(self, value, accumulator):
        return accumulator[0] + value[1], accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


class Expiring(KeyedCoProcessFunction):
    """Input 1 opens an order; input 2 closes it; an order still open 5 ms later expires."""

    def open(self, ctx):
        self.open_order = ctx.get_state(ValueStateDescriptor("open", Types.PICKLED_BYTE_ARRAY()))

    def process_element1(self, value, ctx):
        self.open_order.update(value)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5)

    def process_element2(self, value, ctx):
        if self.open_order.value() is not None:
            self.open_order.clear()
            yield "closed", value[0]

    def on_timer(self, timestamp, ctx):
        if self.open_order.value() is not None:
            self.open_order.clear()
            yield "expired", ctx.get_current_key()


def test_restore_equivalence_of_an_aggregate_window_and_a_keyed_co_process_function():
    mean = lambda s: s.key_by(KEY).window(TumblingProcessingTimeWindows.of(Time.milliseconds(100))).aggregate(Mean())  # noqa: E731
    script = [Element(("a", 1)), Element(("b", 4)), ProcessingTime(50), Element(("a", 3)), ProcessingTime(100),
              Element(("b", 2)), Element(("a", 6)), ProcessingTime(250)]
    assert_restore_equivalent(mean, script, parallelism=2, restore_parallelism=[1, 3])
    orders = [Element(("o1", 1), 1), Element(("o2", 1), 2), Watermark(2), Element(("o1", "ok"), 3, input=2), Watermark(3, input=2),
              Element(("o3", 1), 4), Watermark(10), Element(("o3", "ok"), 8, input=2), Watermark(20, input=2)]
    join = lambda a, b: a.key_by(KEY).connect(b.key_by(KEY)).process(Expiring())  # noqa: E731
    with OperatorHarness(join, inputs=2) as h:
        h.run(orders)
        # event time is the least of both inputs': o2's timer (7) fires only at input 2's watermark 20
        assert h.values == [("closed", "o1"), ("closed", "o3"), ("expired", "o2")]
    assert_restore_equivalent(join, orders, inputs=2, restore_parallelism=[1, 2])


def test_restore_equivalence_on_rocksdb():
    assert_restore_equivalent(keyed(SessionCount()), SCRIPT[:8], at=[4], restore_parallelism=[2], state_backend=EmbeddedRocksDBStateBackend())


def test_restore_equivalence_catches_state_in_a_plain_attribute():
    script = [Element(("a", 1)), Element(("b", 2)), Element(("a", 3)), Element(("a", 4))]
    with pytest.raises(RestoreDivergence) as failure:
        assert_restore_equivalent(keyed(AttributeCount()), script, restore_parallelism=[1])
    message = str(failure.value)
    # the earliest snapshot that loses a's sum: after step 1, and step 3 is the first to show it
    assert "restored from a snapshot after step 1 of 4 (parallelism 1) at parallelism 1: step 3 (element ('a', 3)), main output" in message
    assert "missing:       [('a', 4)]" in message and "unexpected:    [('a', 3)]" in message
    first = failure.value.divergences[0]
    assert (first.snapshot_after, first.step, first.missing, first.unexpected) == (1, 2, (StreamRecord(("a", 4)),), (StreamRecord(("a", 3)),))
    assert {d.snapshot_after for d in failure.value.divergences} == {1, 2, 3}  # a snapshot before any record loses nothing


def test_harness_refuses_a_pipeline_of_several_vertices():
    with pytest.raises(InvalidProgramError, match="one chain of operators, but build\\(\\) makes 2"):
        OperatorHarness(lambda s: s.key_by(KEY).process(SessionCount()).key_by(KEY).process(SessionCount()))


def test_the_example_tests_of_sensor_alerts_pass(monkeypatch):
    """examples/sensor_alerts_test.py, the page's example (docs/api/testing.md), passes."""
    import importlib

    from conftest import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    module = importlib.import_module("sensor_alerts_test")
    tests = [f for name, f in sorted(vars(module).items()) if name.startswith("test_")]
    assert len(tests) == 4
    for test in tests:
        test()


def test_the_page_examples_run_and_its_failure_sample_is_what_the_harness_prints():
    """docs/api/testing.md: its Python blocks run (their tests pass), and the failure it shows is
    the one assert_restore_equivalent raises for the attribute-keeping function."""
    import re

    from conftest import ROOT

    page = (ROOT / "docs" / "api" / "testing.md").read_text()
    namespace: dict = {}
    for block in re.findall(r"```python\n(.*?)```", page, re.S):
        exec(compile(block, "docs/api/testing.md", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()
    sample = re.search(r"```\n(the output differs.*?)```", page, re.S).group(1).strip()
    with pytest.raises(RestoreDivergence) as failure:
        assert_restore_equivalent(keyed(AttributeCount()), [Element(("a", 1)), Element(("b", 2)), Element(("a", 3)), Element(("a", 4))], restore_parallelism=[1])
    assert str(failure.value) == sample


def test_a_snapshot_that_changes_the_output_is_caught():
    class CountsSnapshots(ProcessFunction, CheckpointedFunction):
        """The bug: taking a snapshot changes what the function does next."""

        def initialize_state(self, context):
            self.snapshots = 0

        def snapshot_state(self, context):
            self.snapshots += 1

        def process_element(self, value, ctx):
            yield value, self.snapshots

    with pytest.raises(RestoreDivergence, match=r"taking snapshots \(the first after step 0 of 2\) changed the output: step 1 \(element 'x'\)"):
        assert_restore_equivalent(lambda s: s.process(CountsSnapshots()), [Element("x"), Element("y")])


def test_a_snapshot_whose_state_no_operator_claims_is_refused_not_restored_empty():
    """A window without a uid whose trigger changed gets another operator id: its state would be
    left behind, and the restored harness would start empty. Refused, as a job's restore refuses
    it, unless allow_non_restored_state drops it."""
    windowed = lambda trigger: lambda s: (s.key_by(KEY).window(TumblingEventTimeWindows.of(Time.milliseconds(10)))  # noqa: E731
                                         .trigger(trigger).reduce(lambda a, b: (a[0], a[1] + b[1])))
    with OperatorHarness(windowed(CountTrigger.of(3))) as h:
        h.process_element(("a", 1), timestamp=1)
        snap = h.snapshot()
    with pytest.raises(InvalidProgramError, match="the snapshot has state for operators this function does not have"):
        OperatorHarness(windowed(PurgingTrigger.of(CountTrigger.of(3))), restore_from=snap)
    with OperatorHarness(windowed(PurgingTrigger.of(CountTrigger.of(3))), restore_from=snap, allow_non_restored_state=True) as r:
        assert r.process_element(("a", 2), timestamp=2).records == []
    with OperatorHarness(windowed(CountTrigger.of(3)), restore_from=snap) as same:  # the same operator claims it
        same.process_element(("a", 2), timestamp=2)
        assert same.process_element(("a", 3), timestamp=3).values == [("a", 6)]
