"""Buffer debloating (#22): consumers size their producers' buffers by time, not by bytes.

The state machine (:class:`flinkpy.network.debloat.BufferDebloater`) is tested pure: throughput
samples in, announced sizes out. The announcement is tested on a real socket pair (consumer ->
producer frame), the producer's side on a RecordWriter with fake channels. The engine test runs
one slowed-sink job twice on one cluster, debloating off and on, and compares the aligned
checkpoints' durations from the job's own statistics; the recovery test SIGKILLs a task of a
job with debloating on and checks the sums are still exact.
"""

from __future__ import annotations

import pickle
import socket
import statistics
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_for
from flinkpy.errors import ConfigurationError
from flinkpy.graph.stream_graph import FORWARD
from flinkpy.network import channels as net
from flinkpy.network.debloat import BufferDebloater
from flinkpy.task.record_writer import RecordWriter
from test_recovery import assert_recovered, even_odd_env, exception_entries, expected_sums, last_per_key, only_job, start, vertex_id  # noqa: F401

DEBLOAT = "taskmanager.network.memory.buffer-debloat."


def debloater(**kw: Any) -> BufferDebloater:
    args: dict[str, Any] = {"target_ms": 1000, "buffers": 4, "max_size": 32768, "min_size": 256, "samples": 1, "threshold_pct": 25}
    args.update(kw)
    return BufferDebloater(**args)


# -- the state machine ---------------------------------------------------------------------------


def test_size_is_throughput_times_target_over_the_buffers_in_flight() -> None:
    d = debloater(target_ms=500, buffers=8)
    # 40 KB/s: half a second of it is 20 KB, in 8 buffers 2.5 KB each
    assert d.on_period(processed_bytes=8000, busy_s=0.2) == 2500
    assert d.announced == 2500 and d.throughput == 40_000


def test_waiting_for_input_is_not_slowness() -> None:
    """1000 bytes in a 1 s period of which the task was busy 0.1 s: 10 KB/s, not 1 KB/s (an idle
    consumer must not shrink its buffers, starve and shrink them again)."""
    d = debloater()
    assert d.on_period(processed_bytes=1000, busy_s=0.1) == 2500
    assert d.on_period(processed_bytes=0, busy_s=0.0) is None  # waited all period: nothing learned
    assert d.throughput == 10_000


def test_sizes_stay_within_min_and_segment_size() -> None:
    d = debloater()
    assert d.on_period(processed_bytes=10, busy_s=1.0) == 256  # 10 B/s: the minimum
    assert d.on_period(processed_bytes=10**9, busy_s=1.0) == 32768  # 1 GB/s: the segment size
    assert d.on_period(processed_bytes=10**10, busy_s=1.0) is None  # already there


def test_small_changes_are_not_announced_but_bounds_are() -> None:
    d = debloater(threshold_pct=25)
    assert d.on_period(processed_bytes=40_000, busy_s=1.0) == 10_000
    assert d.on_period(processed_bytes=48_000, busy_s=1.0) is None  # +20%: within the threshold
    assert d.on_period(processed_bytes=52_000, busy_s=1.0) == 13_000  # +30%
    assert d.on_period(processed_bytes=41_600, busy_s=1.0) is None  # -20% of 13000
    d2 = debloater(threshold_pct=25, min_size=9000)
    assert d2.on_period(processed_bytes=40_000, busy_s=1.0) == 10_000
    assert d2.on_period(processed_bytes=30_000, busy_s=1.0) == 9000  # within 25%, but the bound


def test_throughput_is_a_moving_average_over_the_samples() -> None:
    d = debloater(samples=19, threshold_pct=0)  # weight of the newest sample: 2 / 20
    d.on_period(processed_bytes=100_000, busy_s=1.0)
    assert d.on_period(processed_bytes=0, busy_s=1.0) == 22_500  # one stalled period: -10%
    assert d.throughput == pytest.approx(90_000)
    for _ in range(100):
        d.on_period(processed_bytes=0, busy_s=1.0)
    assert d.announced == 256  # a consumer that stays stalled gets the smallest buffers


def test_time_to_consume() -> None:
    d = debloater()
    assert d.time_to_consume_ms(5000) is None
    d.on_period(processed_bytes=10_000, busy_s=1.0)
    assert d.time_to_consume_ms(5000) == 500


@pytest.mark.parametrize(
    "kw, words",
    [({"target_ms": 0}, "target"), ({"buffers": 0}, "buffer"), ({"min_size": 0}, "smallest"), ({"min_size": 40000}, "smallest"), ({"samples": 0}, "sample")],
)
def test_nonsense_is_refused(kw: dict[str, int], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        debloater(**kw)
    with pytest.raises(ValueError):
        debloater().on_period(processed_bytes=-1, busy_s=1.0)


# -- configuration -------------------------------------------------------------------------------


def test_keys_have_flinks_defaults_and_reach_the_tasks() -> None:
    from flinkpy.config import load_config
    from flinkpy.jobmanager.job_options import JobOptions

    cfg = load_config(env={})
    assert cfg.get(DEBLOAT + "enabled") is False
    assert (cfg.get(DEBLOAT + "target"), cfg.get(DEBLOAT + "period"), cfg.get(DEBLOAT + "samples")) == (1000, 200, 20)
    assert (cfg.get(DEBLOAT + "threshold-percentages"), cfg.get("taskmanager.memory.min-segment-size")) == (25, 256)
    assert JobOptions.parse({}, "file:///ck").task.debloat_target_ms == 0  # off: no target
    on = JobOptions.parse({DEBLOAT + "enabled": "true", DEBLOAT + "target": "300 ms", DEBLOAT + "period": "50 ms"}, "file:///ck").task
    assert (on.debloat_target_ms, on.debloat_period_ms) == (300, 50)


@pytest.mark.parametrize(
    "key, value, allowed",
    [(DEBLOAT + "enabled", "yes", "true or false"), (DEBLOAT + "target", "0 ms", "at least 1 ms"), (DEBLOAT + "period", "soon", "duration"),
     (DEBLOAT + "samples", "0", "positive integer"), (DEBLOAT + "threshold-percentages", "-5", "integer >= 0")],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: str, allowed: str) -> None:
    from flinkpy.jobmanager.job_options import JobOptions

    with pytest.raises(ConfigurationError) as err:
        JobOptions.parse({key: value}, "file:///ck")
    assert key in err.value.message and repr(value) in err.value.message and allowed in (err.value.remedy or "")


def test_min_segment_size_above_the_segment_size_is_refused() -> None:
    from flinkpy.jobmanager.job_options import JobOptions

    with pytest.raises(ConfigurationError, match="min-segment-size"):
        JobOptions.parse({DEBLOAT + "enabled": "true", "taskmanager.memory.min-segment-size": "64 kb"}, "file:///ck")


def test_a_bad_value_on_the_command_line_exits_with_the_configuration_code(cli, tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text("print('never runs')\n")
    res = cli("run", "-D", f"{DEBLOAT}target=0 ms", str(job))
    assert res.returncode == 8, res.stderr
    assert f"{DEBLOAT}target" in res.stderr and "at least 1 ms" in res.stderr and "never runs" not in res.stdout


# -- the wire: consumer announces, producer cuts -----------------------------------------------------


def test_the_gate_announces_a_new_size_to_every_producer() -> None:
    pairs = [socket.socketpair() for _ in range(2)]
    try:
        inputs = [net.InputChannel(b, 0, i, 4, f"test channel {i}") for i, (_, b) in enumerate(pairs)]
        outputs = [net.OutputChannel(a, 0, 0, f"test channel {i}") for i, (a, _) in enumerate(pairs)]
        gate = net.InputGateDebloat(inputs, debloater(buffers=8, threshold_pct=0), period_s=0.2, now=100.0)
        inputs[0].return_credit(3000)
        inputs[1].return_credit(1000)
        gate.tick(100.1, idle_s=0.0)  # before the period's end: nothing
        assert gate.buffer_size == 32768
        # 4000 bytes in 0.2 s of which 0.1 s waiting for input: 40 KB/s, 1 s of it in 8 buffers
        gate.tick(100.2, idle_s=0.1)
        assert gate.buffer_size == 5000
        for out in outputs:
            out.sock.settimeout(5)
            out._absorb(out.reader.feed())
            assert out.buffer_size == 5000
        # a finished channel hears nothing more
        inputs[1].finished = True
        inputs[0].return_credit(100_000)
        gate.tick(100.4, idle_s=0.1)
        assert gate.buffer_size == 32768
        outputs[0]._absorb(outputs[0].reader.feed())
        assert outputs[0].buffer_size == 32768
        outputs[1].sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            outputs[1].sock.recv(1)
    finally:
        for a, b in pairs:
            a.close()
            b.close()


class SizedChannel:
    """An OutputChannel stand-in that keeps the payload sizes and carries an announced size."""

    def __init__(self) -> None:
        self.consumer = 0
        self.buffer_size = 0
        self.sizes: list[int] = []
        self.records: list[int] = []

    def check_size(self, payload: bytes, records: int) -> None:
        pass  # no frame limit here

    def send_data(self, payload: bytes, kind: int = net.DATA) -> None:
        self.sizes.append(len(payload))
        self.records += pickle.loads(payload)

    def send_event(self, kind: int, payload: bytes = b"") -> None:
        pass


def test_the_writer_cuts_its_buffers_to_the_announced_size() -> None:
    ch = SizedChannel()
    w = RecordWriter([ch], FORWARD, key_selector=None, max_parallelism=128, consumer_parallelism=1,  # type: ignore[list-item]
                     buffer_timeout_ms=100, segment_size=32768)
    for i in range(40):
        w.emit(list(range(i * 2000, (i + 1) * 2000)))
    assert max(ch.sizes[-5:]) > 8192  # undebloated: buffers grow towards the segment size
    ch.buffer_size = 600
    mark = len(ch.sizes)
    for i in range(40, 80):
        w.emit(list(range(i * 2000, (i + 1) * 2000)))
    w.flush()
    settled = ch.sizes[mark + 20 : -1]
    assert settled and max(settled) <= 600 and statistics.median(settled) >= 300, settled[:20]
    assert ch.records == list(range(80 * 2000))  # nothing lost or reordered by the resizing


# -- the engine ------------------------------------------------------------------------------------


def run_backpressured(rest: Any, settings: dict[str, str], *, skip: int, checkpoints: int, timeout: float) -> dict[str, Any]:
    """The benchmark's job (paced source, sink at a tenth of its rate) until ``checkpoints``
    checkpoints completed after the first ``skip``: their statistics and the sink's metrics."""
    from flinkpy.benchmarks.backpressure import build
    from flinkpy.common import Configuration
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(Configuration({"taskmanager.memory.segment-size": "16 kb", **settings}))
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    build(env, 20_000.0)
    client = env.execute_async("debloat-" + ("on" if settings else "off"))
    jid = client.get_job_id()

    def stats() -> dict[str, Any]:
        return rest.request("GET", f"/jobs/{jid}/checkpoints", params={"history": 100})

    try:
        wait_for(lambda: stats()["counts"]["completed"] >= skip + checkpoints, timeout, interval=0.2,
                 message=f"{skip + checkpoints} checkpoints of a back-pressured job")
        final = stats()
        (sink,) = [v for v in rest.job(jid)["vertices"] if "throttled sink" in v["name"]]
    finally:
        client.cancel()
    done = sorted((h for h in final["history"] if h["status"] == "COMPLETED"), key=lambda h: h["id"])[skip:]
    return {"durations": [h["end_to_end_duration"] for h in done], "alignments": [h["alignment_duration_max"] for h in done],
            "subtasks": [s.get("metrics", {}) for s in sink["subtasks"]], "failed": final["counts"]["failed"]}


@pytest.mark.timeout(180)
def test_debloating_shortens_aligned_checkpoints_under_backpressure(start, flinkpy_home: Path) -> None:
    """One job, twice on one cluster: its sink takes a tenth of its source's rate. Without
    debloating a barrier queues behind every credit's full buffer (16 KB segments: seconds of
    work); with it (target 250 ms) the sink announces buffers worth about the target, and the
    aligned checkpoints take a fraction of the time."""
    from flinkpy.cluster import ClusterHome
    from flinkpy.network.rest_client import RestClient

    info = start(taskmanagers=1, slots=4)
    rest = RestClient(info.rest_address, ClusterHome(flinkpy_home).token())
    # the first checkpoints come before the backlog has built up (off) or the size has settled (on)
    off = run_backpressured(rest, {}, skip=2, checkpoints=2, timeout=100)
    on = run_backpressured(rest, {DEBLOAT + "enabled": "true", DEBLOAT + "target": "250 ms", DEBLOAT + "period": "100 ms"},
                           skip=2, checkpoints=3, timeout=60)
    print(f"off: {off['durations']} ms, alignments {off['alignments']}; on: {on['durations']} ms, alignments {on['alignments']}")
    print(f"sink subtasks with debloating: {on['subtasks']}")
    assert not off["failed"] and not on["failed"]
    assert statistics.median(on["durations"]) * 3 < statistics.median(off["durations"]), (on["durations"], off["durations"])
    assert all("debloatedBufferSize" not in m for m in off["subtasks"])
    for m in on["subtasks"]:
        # the sink cut its producers' buffers far below the segment size, and what is queued
        # on its input channels takes about the target to process
        assert 256 <= m["debloatedBufferSize"] <= 16384 // 4, m
        assert 0 <= m["estimatedTimeToConsumeBuffersMs"] <= 2000, m


# -- exactly-once with debloating on ---------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "point, subtask",
    [
        # the keyed task holds a channel back, waiting for the other barrier of checkpoint 3
        ("alignment", 0),
        # checkpoint 3 is complete, and the keyed task dies as it hears so
        ("after-complete", 1),
    ],
)
def test_even_odd_sums_are_exact_after_a_sigkill_with_debloating(start, point: str, subtask: int) -> None:
    """The recovery proof's even/odd job with debloating on and a short target, so that buffer
    sizes change all along: a SIGKILL of the keyed task, a restore, and the sums are exact."""
    from flinkpy.common import Configuration

    env, sums = even_odd_env(N_DEBLOAT)
    env.configure(Configuration({DEBLOAT + "enabled": "true", DEBLOAT + "target": "5 ms", DEBLOAT + "period": "20 ms",
                                 "metrics.fetcher.update-interval": "100 ms"}))
    start(faults=[{"point": point, "vertex": vertex_id(env, "sums"), "subtask": subtask, "checkpoint": 3}])

    assert last_per_key(sums.execute_and_collect("even-odd-debloated")) == expected_sums(N_DEBLOAT)

    jid = only_job()["jid"]
    job = assert_recovered(jid, cause="SIGKILL")
    assert job["restarts"] == 1, [e["message"] for e in exception_entries(jid)]
    (keyed,) = [v for v in job["vertices"] if "sums" in v["name"]]
    sizes = [s["metrics"].get("debloatedBufferSize") for s in keyed["subtasks"]]
    assert all(size is not None and size < 32768 for size in sizes), sizes  # debloating was at work


#: long enough for checkpoint 3 at 100 ms
N_DEBLOAT = 600_000


def test_the_benchmark_part_and_its_report() -> None:
    """``--only backpressure`` is a part of the benchmark; its report has a line per configuration."""
    from flinkpy.benchmarks.__main__ import parse_args
    from flinkpy.benchmarks.backpressure import report

    assert parse_args(["--only", "backpressure"]).only == "backpressure"
    entry = {"checkpoints": 15, "duration_ms_median": 15000.0, "duration_ms_p99": 16000.0, "alignment_ms_median": 4000.0,
             "alignment_ms_max": 4500.0, "sink_rate": 4000.0}
    lines = report({"source_rate": 40000.0, "sink_rate": 4000.0, "aligned": entry, "debloated": dict(entry, duration_ms_median=1500.0)})
    assert "15000 ms" in lines[1] and "1500 ms" in lines[2] and lines[-1].strip() == "unaligned: not measured"
    unaligned = dict(entry, duration_ms_median=120.0, persisted_data_median=300 * 1024.0, sink_rate_vs_aligned=0.98)
    lines = report({"source_rate": 40000.0, "sink_rate": 4000.0, "aligned": entry, "unaligned": unaligned})
    assert "120 ms" in lines[2] and lines[-1].strip().endswith("300 KiB in flight per checkpoint; sink throughput 98.0% of aligned")
