"""Credit-based flow control bounds memory: a fast source cannot flood a slow sink.

The end-to-end test runs a job whose source could produce ~10 GB of 1 KB records into a sink
that takes ~1 ms per record, and checks every task process's RSS stays flat while the sink
makes progress. The RecordWriter is tested alone with fake channels.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import wait_for
from flinkpy.graph.stream_graph import FORWARD, HASH, REBALANCE, RESCALE
from flinkpy.state.key_groups import KeyGroupAssigner, compute_operator_index_for_key_group
from flinkpy.task.record_writer import RecordWriter
from test_network import SEED

SLOW_JOB = """
import sys, time
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource

PROGRESS = sys.argv[1]
seen = [0]

def slow_sink(record):
    time.sleep(0.001)
    seen[0] += 1
    if seen[0] % 100 == 0:
        with open(PROGRESS, "a") as f:
            f.write(f"{seen[0]}\\n")

env = StreamExecutionEnvironment.get_execution_environment()
ds = env.from_source(NumberSequenceSource(1, 10**7), WatermarkStrategy.no_watermarks(), "numbers")
ds.map(lambda n: "x" * 1000 + str(n)).rebalance().add_sink(slow_sink).set_parallelism(1)
env.execute("backpressure")
"""

RSS_GROWTH_LIMIT = 30 << 20
RSS_LIMIT = 250 << 20


def progress(path: Path) -> int:
    try:
        lines = path.read_text().split()
    except FileNotFoundError:
        return 0
    return int(lines[-1]) if lines else 0


@pytest.mark.timeout(90)
def test_slow_sink_backpressures_a_fast_source(cluster, flinkpy_home: Path, tmp_path: Path, cli) -> None:
    from flinkpy.network.rest_client import RestClient
    from flinkpy.cluster import ClusterHome

    rest = RestClient(cluster.rest_address, ClusterHome(flinkpy_home).token())
    job, marks = tmp_path / "slow.py", tmp_path / "progress.txt"
    job.write_text(SLOW_JOB)
    res = cli("run", "-d", "-p", "2", str(job), str(marks))
    assert res.returncode == 0, res.stderr
    jid = wait_for(lambda: next((j["jid"] for j in rest.jobs_overview()), None), 20, message="the job listed")
    try:
        wait_for(lambda: progress(marks) >= 500, 40, message="the sink processed 500 records")
        pids = [s["pid"] for v in rest.job(jid)["vertices"] for s in v["subtasks"]]
        assert len(pids) == 3 and all(pids), pids  # 2 source subtasks, 1 sink
        tasks = [psutil.Process(pid) for pid in pids]

        def rss() -> dict[int, int]:
            return {p.pid: p.memory_info().rss for p in tasks}

        start_count = progress(marks)
        samples = [rss()]
        while progress(marks) < start_count + 1500:
            wait_for(lambda: progress(marks) >= start_count + 300 * len(samples), 30, message="more sink progress")
            samples.append(rss())
        first, last = samples[0], samples[-1]
        print(f"RSS samples (MB): {[{pid: round(v / 2**20, 1) for pid, v in s.items()} for s in samples]}")
        for pid in first:
            assert last[pid] - first[pid] < RSS_GROWTH_LIMIT, f"task {pid} grew from {first[pid]} to {last[pid]} bytes"
            assert max(s[pid] for s in samples) < RSS_LIMIT, f"task {pid} uses {max(s[pid] for s in samples)} bytes"

        # back-pressured, not merely fast: the job runs, and the source is far from its 10 GB
        doc = rest.job(jid)
        assert doc["state"] == "RUNNING"
        sent = sum(v.get("records-out", 0) or 0 for v in doc.get("vertices", []) if "numbers" in v.get("name", ""))
        done = progress(marks)
        assert done < 10**7
        if sent:  # when the JobManager reports live counters, the source is close behind the sink
            assert sent < done + 200_000, (sent, done)
    finally:
        rest.cancel_job(jid)
        wait_for(lambda: rest.job(jid)["state"] == "CANCELED", 20, message="the job canceled")


# -- RecordWriter with fake channels ---------------------------------------------------------------


class FakeChannel:
    """Stands in for an OutputChannel: records every buffer (unpickled) and every event."""

    def __init__(self, consumer: int):
        self.consumer = consumer
        self.buffers: list[list] = []
        self.events: list[int] = []
        self.finished = False

    def check_size(self, payload: bytes, records: int) -> None:
        pass  # no frame limit here

    def send_data(self, payload: bytes) -> None:
        import pickle

        self.buffers.append(pickle.loads(payload))

    def send_event(self, kind: int, payload: bytes = b"") -> None:
        self.events.append(kind)

    def finish(self, payload: bytes = b"") -> None:
        self.finished = True

    @property
    def records(self) -> list:
        return [r for b in self.buffers for r in b]


def writer(partitioner: str, n: int, *, timeout_ms: int = 100, segment: int = 1 << 20, key=None, maxp: int = 128) -> tuple[RecordWriter, list[FakeChannel]]:
    chans = [FakeChannel(i) for i in range(n)]
    w = RecordWriter(
        chans,  # type: ignore[arg-type]
        partitioner,
        key_selector=key,
        max_parallelism=maxp,
        consumer_parallelism=n,
        buffer_timeout_ms=timeout_ms,
        segment_size=segment,
        seed=SEED,
    )
    return w, chans


@pytest.mark.timeout(10)
def test_hash_puts_each_key_on_its_channel() -> None:
    rng = random.Random(SEED)
    n, maxp = 3, 128
    w, chans = writer(HASH, n, key=lambda r: r[0], maxp=maxp)
    records = [(rng.choice(["a", "b", "c", "d", "e", 1, 2, 3, (4, 5)]), i) for i in range(5000)]
    for i in range(0, len(records), 37):
        w.emit(records[i : i + 37])
    w.flush()
    assign = KeyGroupAssigner(maxp)
    for ch in chans:
        for key, _ in ch.records:
            assert compute_operator_index_for_key_group(maxp, n, assign(key)) == ch.consumer, (key, ch.consumer)
    # nothing lost, nothing duplicated, order per channel preserved
    assert sorted(r[1] for ch in chans for r in ch.records) == list(range(5000))
    for ch in chans:
        assert [r[1] for r in ch.records] == sorted(r[1] for r in ch.records)
    assert w.records_out == 5000


@pytest.mark.timeout(10)
def test_hash_follows_consumer_order_not_channel_position() -> None:
    """Channels listed out of subtask order still route each key group to its subtask."""
    chans = [FakeChannel(2), FakeChannel(0), FakeChannel(1)]
    w = RecordWriter(chans, HASH, key_selector=lambda r: r, max_parallelism=16, consumer_parallelism=3, buffer_timeout_ms=100, segment_size=1 << 20)  # type: ignore[arg-type]
    w.emit(list(range(300)))
    w.flush()
    assign = KeyGroupAssigner(16)
    for ch in chans:
        assert all(compute_operator_index_for_key_group(16, 3, assign(k)) == ch.consumer for k in ch.records)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("partitioner", [REBALANCE, RESCALE])
def test_round_robin_is_exact(partitioner: str) -> None:
    rng = random.Random(SEED)
    n = 3
    w, chans = writer(partitioner, n)
    total = 0
    while total < 4000:
        size = rng.randrange(0, 50)
        w.emit(list(range(total, total + size)))
        total += size
    w.flush()
    for i, ch in enumerate(chans):
        assert ch.records == list(range(i, total, n)), i
    counts = [len(ch.records) for ch in chans]
    assert max(counts) - min(counts) <= 1


@pytest.mark.timeout(10)
def test_buffers_flush_at_the_target_size() -> None:
    w, (ch,) = writer(FORWARD, 1, segment=1 << 30)
    target = w.targets[0]
    w.emit(list(range(target - 1)))
    assert ch.buffers == [] and w.oldest is not None
    w.emit([target - 1])
    assert ch.buffers == [list(range(target))]
    # small records: the target grows toward the segment size (amortising per-frame costs)
    assert w.targets[0] > target
    w.emit(list(range(10 * w.targets[0])))
    assert all(len(b) <= max(w.targets[0], 16384) for b in ch.buffers)


@pytest.mark.timeout(10)
def test_large_records_shrink_the_target() -> None:
    w, (ch,) = writer(FORWARD, 1, segment=4096)
    before = w.targets[0]
    w.emit(["y" * 1000 + str(i) for i in range(before)])  # one buffer of ~64 KB, far above 2 x 4 KB
    assert len(ch.buffers) == 1 and w.targets[0] < before


@pytest.mark.timeout(10)
def test_flush_if_due_honours_the_timeout_with_an_injected_now() -> None:
    w, (a, b) = writer(REBALANCE, 2, timeout_ms=50)
    assert w.oldest is None
    w.flush_if_due(time.monotonic() + 3600)  # nothing pending: nothing sent
    assert a.buffers == b.buffers == []
    w.emit(["r1", "r2", "r3"])
    t0 = w.oldest
    assert t0 is not None
    w.flush_if_due(t0 + 0.049)
    assert a.buffers == b.buffers == []
    w.emit(["r4"])  # a later record does not restart the clock
    assert w.oldest == t0
    w.flush_if_due(t0 + 0.0501)
    assert a.buffers == [["r1", "r3"]] and b.buffers == [["r2", "r4"]]
    assert w.oldest is None
    w.flush_if_due(t0 + 10)
    assert len(a.buffers) == 1 and len(b.buffers) == 1


@pytest.mark.timeout(10)
def test_zero_timeout_sends_every_record_and_events_follow_records() -> None:
    w, (ch,) = writer(FORWARD, 1, timeout_ms=0)
    w.emit(["a", "b"])
    assert ch.buffers == [["a"], ["b"]]
    w2, (c2,) = writer(FORWARD, 1)
    w2.emit(["x"])
    w2.broadcast_event(5)
    assert c2.buffers == [["x"]] and c2.events == [5]
    w2.emit(["y"])
    w2.finish()
    assert c2.buffers == [["x"], ["y"]] and c2.finished
