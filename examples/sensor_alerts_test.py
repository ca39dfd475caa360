"""Unit tests of sensor_alerts.py's functions with flinkpy.testing: no cluster, a manual clock.

RisingTemperatureAlert (a KeyedProcessFunction with event-time timers) and the session window
with allowed lateness and a late-data side output run on the engine's own operators, state
backend and timers, in this process. The last test snapshots and restores the alert function
before every step of a script, at parallelism 1 and 3, and checks that the output never changes.

    python examples/sensor_alerts_test.py        # or: python -m pytest examples/sensor_alerts_test.py
"""

from flinkpy.common import Time
from flinkpy.datastream.window import EventTimeSessionWindows
from flinkpy.testing import Element, OperatorHarness, StreamRecord, Watermark, assert_restore_equivalent

from sensor_alerts import LATE, RisingTemperatureAlert, Session

SENSOR = lambda reading: reading[0]  # noqa: E731


def alerts(stream):
    return stream.key_by(SENSOR).process(RisingTemperatureAlert())


def sessions(stream):
    return (stream.key_by(SENSOR).window(EventTimeSessionWindows.with_gap(Time.seconds(5)))
            .allowed_lateness(1000).side_output_late_data(LATE).process(Session()))


def test_alert_after_two_seconds_of_rising_temperature():
    with OperatorHarness(alerts) as h:
        for temp, ts in [(20.0, 0), (20.5, 500), (21.0, 1200)]:
            h.process_element(("s1", temp, ts), timestamp=ts)
        assert h.event_time_timers == 1  # set at the first rise, 500 + 2000
        assert h.process_watermark(2499).records == []
        assert h.process_watermark(2500).records == [
            StreamRecord(("ALERT", "s1", "temperature rising for 2 s up to 2500 ms"), 2500)]


def test_a_drop_cancels_the_alert():
    with OperatorHarness(alerts) as h:
        h.run([Element(("s1", 20.0, 0), 0), Element(("s1", 21.0, 500), 500), Element(("s1", 19.0, 900), 900)])
        assert h.event_time_timers == 0
        assert h.process_watermark(10_000).records == []


def test_sessions_and_late_readings():
    with OperatorHarness(sessions) as h:
        h.run([Element(("s1", 20.0, 0), 0), Element(("s1", 23.0, 3000), 3000), Element(("s1", 21.0, 20_000), 20_000)])
        assert h.process_watermark(8_000).records == [StreamRecord(("SESSION", "s1", 0, 8000, 2, 23.0), 7999)]
        # within the allowed lateness (kept until the watermark passes 7999 + 1000): fires again
        assert h.process_element(("s1", 25.0, 500), timestamp=500).records == [
            StreamRecord(("SESSION", "s1", 0, 8000, 3, 25.0), 7999)]
        h.process_watermark(9_000)
        h.process_element(("s1", 30.0, 100), timestamp=100)  # the session is gone: late
        assert h.side_output(LATE) == [StreamRecord(("s1", 30.0, 100), 100)]


def test_alerts_survive_any_snapshot_and_restore():
    script = []
    for i, (sensor, temp) in enumerate([("s1", 20.0), ("s2", 18.0), ("s1", 20.4), ("s2", 18.5), ("s1", 20.9),
                                        ("s2", 18.1), ("s1", 21.5), ("s2", 18.9), ("s1", 21.6), ("s2", 19.4)]):
        ts = i * 600
        script += [Element((sensor, temp, ts), ts), Watermark(ts - 1000)]
    script.append(Watermark(20_000))
    assert_restore_equivalent(alerts, script, restore_parallelism=[1, 3])


if __name__ == "__main__":
    tests = [f for name, f in sorted(globals().items()) if name.startswith("test_")]
    for test in tests:
        test()
        print(f"ok   {test.__name__}")
    print(f"{len(tests)} tests passed")
