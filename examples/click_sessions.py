"""Click sessions per user: a KeyedProcessFunction with value, list and map state and event-time timers.

Each click is (user, page, timestamp ms); clicks arrive up to one second out of order. A user's
session ends after 3 seconds of event time without a click: the function keeps the session's
clicks (ListState), its page counts (MapState) and the time its timer is set for (ValueState),
moves the timer on every click, and when the timer fires emits
``(user, first click ms, last click ms, clicks, most visited page)`` and clears the state.

A click at or after the pending timer's time closes the previous session first, so the result
does not depend on when the watermark happens to reach the function: it is the same on every run,
at any parallelism, and on both runners.

    python examples/click_sessions.py
    flinkpy run -p 2 examples/click_sessions.py --users 5 --seconds 120
    flinkpy run --runner spark examples/click_sessions.py
"""

import argparse
import random
import sys

from flinkpy.common import Duration, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

GAP_MS = 3000
PAGES = ["home", "search", "item", "cart", "help"]


def clicks(users: int = 3, seconds: int = 60, seed: int = 5) -> list[tuple[str, str, int]]:
    """(user, page, timestamp ms), in arrival order: at most 1 s out of order."""
    rng = random.Random(seed)
    out = []
    for u in range(users):
        t = rng.randrange(1000)
        while t < seconds * 1000:
            out.append((f"user{u}", rng.choice(PAGES), t))
            t += rng.randrange(200, 1500) if rng.random() > 0.15 else rng.randrange(4000, 9000)
    out.sort(key=lambda c: c[2])
    for i in range(0, len(out) - 1, 2):  # neighbours swap: less than 1 s apart
        if out[i + 1][2] - out[i][2] < 1000 and rng.random() < 0.5:
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


class ClickSessions(KeyedProcessFunction):
    def open(self, runtime_context):
        self.times = runtime_context.get_list_state(ListStateDescriptor("click-times"))
        self.pages = runtime_context.get_map_state(MapStateDescriptor("page-counts"))
        self.ends_at = runtime_context.get_state(ValueStateDescriptor("session-end"))

    def process_element(self, value, ctx):
        user, page, ts = value
        pending = self.ends_at.value()
        if pending is not None and ts >= pending:
            ctx.timer_service().delete_event_time_timer(pending)
            yield from self._close(user)
            pending = None
        self.times.add(ts)
        self.pages.put(page, (self.pages.get(page) or 0) + 1)
        end = max(pending or 0, ts + GAP_MS)
        if end != pending:
            if pending is not None:
                ctx.timer_service().delete_event_time_timer(pending)
            ctx.timer_service().register_event_time_timer(end)
            self.ends_at.update(end)

    def on_timer(self, timestamp, ctx):
        yield from self._close(ctx.get_current_key())

    def _close(self, user):
        times = list(self.times.get())
        top = sorted(self.pages.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        self.times.clear()
        self.pages.clear()
        self.ends_at.clear()
        yield (user, min(times), max(times), len(times), top)


def build(env, events):
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(1)).with_timestamp_assigner(lambda c, _: c[2])
    return (
        env.from_collection(events)
        .assign_timestamps_and_watermarks(strategy)
        .key_by(lambda c: c[0])
        .process(ClickSessions())
        .uid("click-sessions")
        .name("click sessions")
    )


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=60)
    args, _ = parser.parse_known_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env, clicks(args.users, args.seconds)).print()
    env.execute("click_sessions")


if __name__ == "__main__":
    main(sys.argv[1:])
