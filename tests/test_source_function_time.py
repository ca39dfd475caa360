"""A legacy SourceFunction's event time: ``ctx.collect_with_timestamp`` and ``ctx.emit_watermark``.

PyFlink carries both through the job: the records keep the timestamps the function gave them
(windows assign by them), and the watermarks it emitted advance event time where the function
emitted them. The job here has no WatermarkStrategy anywhere, so every timestamp and watermark
the window sees came from the source function. The expected windows are computed here in plain
Python from the same events.
"""

from __future__ import annotations

from collections import defaultdict

from flinkpy.datastream import KeyedProcessFunction, SourceFunction, StreamExecutionEnvironment
from flinkpy.common import Time
from flinkpy.datastream.window import TumblingEventTimeWindows
from test_windows_e2e import seeded

SIZE = 100


class StampingSource(SourceFunction):
    """Emits (key, value) with timestamps, a watermark after each ``every`` records, and then a
    record that is late (behind the last watermark): the window drops it, which only happens
    when the emitted watermark really advanced event time."""

    def __init__(self, events: list[tuple[str, int, int]], every: int):
        self.events = events
        self.every = every

    def run(self, ctx):
        highest = -1
        for i, (key, value, ts) in enumerate(self.events, 1):
            ctx.collect_with_timestamp((key, value), ts)
            highest = max(highest, ts)
            if i % self.every == 0:
                ctx.emit_watermark(highest)
        ctx.emit_watermark(highest)
        ctx.collect_with_timestamp(("late", 1), 0)  # behind the watermark: dropped by the window

    def cancel(self):
        pass


class Stamp(KeyedProcessFunction):
    """The timestamp each record carries, as the function's context reads it."""

    def process_element(self, value, ctx):
        yield value[0], ctx.timestamp()


def test_source_function_timestamps_and_watermarks_drive_event_time_windows(flinkpy_home) -> None:
    rng = seeded("source-function-time")
    # timestamps grow with small disorder; every watermark is the highest timestamp so far,
    # which the disorder never undercuts within a batch of `every` records
    events = []
    for i in range(300):
        events.append((rng.choice("abc"), rng.randrange(1, 10), i * 7))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    src = env.add_source(StampingSource(events, every=10))
    sums = (
        src.key_by(lambda r: r[0])
        .window(TumblingEventTimeWindows.of(Time.milliseconds(SIZE)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    got = sorted(sums.execute_and_collect("source function event time"))
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for key, value, ts in events:
        expected[(key, ts - ts % SIZE)] += value
    assert got == sorted((k, v) for (k, _), v in expected.items())


def test_source_function_timestamps_reach_process_functions(flinkpy_home) -> None:
    events = [("a", 1, 5), ("b", 2, 17), ("a", 3, 42)]
    env = StreamExecutionEnvironment.get_execution_environment()
    src = env.add_source(StampingSource(events, every=2))
    got = sorted(src.key_by(lambda r: r[0]).process(Stamp()).execute_and_collect("stamps"))
    assert got == [("a", 5), ("a", 42), ("b", 17), ("late", 0)]
