"""Sensor data in event time: out-of-order readings, alerts with timers, sessions, late data.

Each sensor reports (sensor, temperature, timestamp ms). Readings arrive out of order, up to
3 seconds late, and a few arrive far too late. The job:

- alerts when a sensor's temperature has risen continuously for 2 seconds of event time (a
  KeyedProcessFunction with an event-time timer, as in the book's temperature-increase example);
- reports each sensor's activity sessions (readings with gaps under 5 s) with their maximum
  temperature — an event-time session window;
- sends readings that arrive after their session closed (beyond 1 s of allowed lateness) to a
  side output, printed as "late".

    python examples/sensor_alerts.py
"""

import random
import sys

from flinkpy.common import Time, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, OutputTag, StreamExecutionEnvironment
from flinkpy.datastream.state import ValueStateDescriptor
from flinkpy.datastream.window import EventTimeSessionWindows, ProcessWindowFunction

LATE = OutputTag("late-readings")


def readings(seed: int = 11) -> list[tuple[str, float, int]]:
    rng = random.Random(seed)
    out = []
    for sensor in ("s1", "s2", "s3"):
        t, temp = rng.randrange(1000), 20.0
        while t < 60_000:
            temp += rng.choice([-0.5, 0.3, 0.4, 0.6])
            out.append((sensor, round(temp, 1), t))
            t += rng.randrange(300, 900) if rng.random() > 0.05 else rng.randrange(6000, 9000)  # pauses make sessions
    out.sort(key=lambda r: r[2])
    # arrive out of order: swap neighbours, and delay a few readings by 20 s (too late)
    for i in range(0, len(out) - 1, 3):
        out[i], out[i + 1] = out[i + 1], out[i]
    for i in range(25, len(out), 97):
        late = out.pop(i)
        out.insert(min(len(out), i + 60), late)
    return out


class EveryReading:
    """A punctuated watermark generator: after every reading, the watermark is the largest
    timestamp seen minus the 3 s out-of-orderness bound. Watermarks then sit at exact places in
    the stream, so what counts as late is the same on every run (``WatermarkStrategy.for_generator``
    takes objects like Flink's WatermarkGenerator)."""

    def __init__(self, bound_ms: int = 3000):
        self.bound_ms = bound_ms
        self.highest = None

    def on_event(self, event, timestamp, output):
        self.highest = timestamp if self.highest is None else max(self.highest, timestamp)
        output.emit_watermark(self.highest - self.bound_ms - 1)

    def on_periodic_emit(self, output):
        pass


class RisingTemperatureAlert(KeyedProcessFunction):
    """Alert when the temperature rose in every reading for 2 s of event time."""

    def open(self, runtime_context):
        self.last_temp = runtime_context.get_state(ValueStateDescriptor("last-temp", None))
        self.timer = runtime_context.get_state(ValueStateDescriptor("timer", None))

    def process_element(self, value, ctx):
        sensor, temp, ts = value
        previous = self.last_temp.value()
        self.last_temp.update(temp)
        timer = self.timer.value()
        if previous is not None and temp <= previous and timer is not None:
            ctx.timer_service().delete_event_time_timer(timer)
            self.timer.clear()
        elif previous is not None and temp > previous and timer is None:
            self.timer.update(ts + 2000)
            ctx.timer_service().register_event_time_timer(ts + 2000)

    def on_timer(self, timestamp, ctx):
        self.timer.clear()
        yield ("ALERT", ctx.get_current_key(), f"temperature rising for 2 s up to {timestamp} ms")


class Session(ProcessWindowFunction):
    def process(self, key, context, elements):
        temps = [r[1] for r in elements]
        w = context.window()
        yield ("SESSION", key, w.start, w.end, len(temps), max(temps))


def build(env, events):
    strategy = WatermarkStrategy.for_generator(EveryReading).with_timestamp_assigner(lambda reading, _: reading[2])
    # stamped where the readings enter, in their arrival order: one stamper, one watermark
    timed = env.from_collection(events).assign_timestamps_and_watermarks(strategy).set_parallelism(1)
    by_sensor = timed.key_by(lambda r: r[0])
    alerts = by_sensor.process(RisingTemperatureAlert())
    sessions = (
        by_sensor.window(EventTimeSessionWindows.with_gap(Time.seconds(5)))
        .allowed_lateness(1000)
        .side_output_late_data(LATE)
        .process(Session())
    )
    late = sessions.get_side_output(LATE).map(lambda r: ("LATE", r[0], r[2]))
    return alerts, sessions, late


if __name__ == "__main__":
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    alerts, sessions, late = build(env, readings())
    alerts.union(sessions, late).print()
    env.execute("sensor_alerts")
