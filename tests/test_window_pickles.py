"""Windows, assigners, triggers and evictors pickle as they did when ``flinkpy.common.window`` was
one module: job payloads (cloudpickle) and savepoints (window state keyed by windows) name these
classes by module path, so payloads and snapshots of earlier versions must load, and what we
pickle now must load in an earlier version (the same bytes)."""

from __future__ import annotations

import base64
import pickle

import flinkpy.common.window as window
import flinkpy.datastream.window as api_window
from flinkpy.common.time import Time

#: ``pickle.dumps(_values(), protocol=4)`` written by flinkpy with window.py as one module (1,046 lines)
ONE_MODULE = (
    "gASVeAIAAAAAAABdlCiMFWZsaW5rcHkuY29tbW9uLndpbmRvd5SMGFR1bWJsaW5nRXZlbnRUaW1lV2luZG93c5STlCmBlH2UKIwEc2l6ZZRNiBOMBm9m"
    "ZnNldJRLAHViaAGMHFNsaWRpbmdQcm9jZXNzaW5nVGltZVdpbmRvd3OUk5QpgZR9lChoBk0QJ4wFc2xpZGWUTYgTaAdLAHViaAGMF0V2ZW50VGltZVNl"
    "c3Npb25XaW5kb3dzlJOUKYGUfZQojANnYXCUTbgLjAlleHRyYWN0b3KUTnViaAGMDUdsb2JhbFdpbmRvd3OUk5QpgZRoAYwOUHVyZ2luZ1RyaWdnZXKU"
    "k5QpgZR9lIwObmVzdGVkX3RyaWdnZXKUaAGMDENvdW50VHJpZ2dlcpSTlCmBlH2UjAVjb3VudJRLA3Nic2JoAYwaQ29udGludW91c0V2ZW50VGltZVRy"
    "aWdnZXKUk5QpgZR9lIwIaW50ZXJ2YWyUTegDc2JoAYwMQ291bnRFdmljdG9ylJOUKYGUfZQojAltYXhfY291bnSUSwKMDmRvX2V2aWN0X2FmdGVylIl1"
    "YmgBjAtUaW1lRXZpY3RvcpSTlCmBlH2UKIwLd2luZG93X3NpemWUTegDaCqIdWJoAYwKVGltZVdpbmRvd5STlEsASwqGlFKUaAGMC0NvdW50V2luZG93"
    "lJOUSwSFlFKUaAGMDEdsb2JhbFdpbmRvd5STlClSlGgBjA1UcmlnZ2VyUmVzdWx0lJOUiImGlIWUUpRoAYwQVGltZXN0YW1wZWRWYWx1ZZSTlCmBlE59"
    "lCiMBXZhbHVllIwBeJSMCXRpbWVzdGFtcJRLA3WGlGJlLg=="
)


def _values() -> list:
    w = window
    return [w.TumblingEventTimeWindows.of(Time.seconds(5)), w.SlidingProcessingTimeWindows.of(Time.seconds(10), Time.seconds(5)),
            w.EventTimeSessionWindows.with_gap(Time.seconds(3)), w.GlobalWindows.create(),
            w.PurgingTrigger.of(w.CountTrigger.of(3)), w.ContinuousEventTimeTrigger.of(Time.seconds(1)),
            w.CountEvictor.of(2), w.TimeEvictor.of(Time.seconds(1), True),
            w.TimeWindow(0, 10), w.CountWindow(4), w.GlobalWindow.get(), w.TriggerResult.FIRE, w.TimestampedValue("x", 3)]


def test_what_the_one_module_pickled_loads() -> None:
    loaded = pickle.loads(base64.b64decode(ONE_MODULE))
    assert [repr(v) for v in loaded] == [repr(v) for v in _values()]
    assert loaded[8:12] == _values()[8:12]  # windows as state keys: equal and hashed alike
    assert [hash(v) for v in loaded[8:11]] == [hash(v) for v in _values()[8:11]]


def test_pickled_bytes_are_those_of_the_one_module() -> None:
    assert pickle.dumps(_values(), protocol=4) == base64.b64decode(ONE_MODULE)


def test_every_public_name_is_pickled_under_flinkpy_common_window() -> None:
    for name in window.__all__:
        obj = getattr(window, name)
        assert getattr(api_window, name) is obj
        assert obj.__module__ == "flinkpy.common.window", name
        assert pickle.loads(pickle.dumps(obj)) is obj
    for nested in (window.Trigger.TriggerContext, window.Trigger.OnMergeContext, window.Evictor.EvictorContext,
                   window.WindowAssigner.WindowAssignerContext, window.ProcessWindowFunction.Context):
        assert pickle.loads(pickle.dumps(nested)) is nested
        assert f"{nested.__module__}.{nested.__qualname__}".startswith("flinkpy.common.window.") and nested.__module__ == "flinkpy.common.window"
