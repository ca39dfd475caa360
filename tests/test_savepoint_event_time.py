"""Event time across savepoints: open windows and pending timers survive a stop, a move and a
rescale; ``stop --drain`` fires every window before the savepoint.

The job counts events per key in 1-second tumbling event-time windows. Events carry timestamps
i * 10 ms; a punctuated generator puts the watermark right after each event, so which windows
have fired at any point depends only on the data. Expected counts are computed here.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from conftest import wait_for

N = 40_000
KEYS = 7

JOB = textwrap.dedent(
    """
    import sys, time
    from flinkpy.common import Time, WatermarkStrategy
    from flinkpy.connectors.base import Boundedness
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
    from flinkpy.datastream.window import ProcessWindowFunction, TumblingEventTimeWindows

    OUT = sys.argv[1]

    class Slow(NumberSequenceSource):
        '''The same numbers, but slow enough to stop the job in the middle.'''

        def create_reader(self, ctx):
            reader = super().create_reader(ctx)
            poll = reader.poll

            def slow_poll(max_records):
                time.sleep(0.002)
                return poll(min(max_records, 20))

            reader.poll = slow_poll
            return reader

    class EveryEvent:
        def __init__(self):
            self.highest = None

        def on_event(self, event, timestamp, output):
            self.highest = timestamp if self.highest is None else max(self.highest, timestamp)
            output.emit_watermark(self.highest - 1)

        def on_periodic_emit(self, output):
            pass

    class Emit(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield (key, context.window().start, sum(1 for _ in elements))

    env = StreamExecutionEnvironment.get_execution_environment()
    strategy = WatermarkStrategy.for_generator(EveryEvent).with_timestamp_assigner(lambda n, _: n * 10)
    (env.from_source(Slow(0, %d - 1), strategy, "numbers").uid("numbers").set_parallelism(1)
        .key_by(lambda n: n %% %d)
        .window(TumblingEventTimeWindows.of(Time.seconds(1)))
        .process(Emit()).uid("windows")
        .map(lambda r, out=OUT: print(repr(r), file=open(out, "a"), flush=True) or r).uid("log"))
    env.execute("windows-across-savepoints")
    """
    % (N, KEYS)
)


def expected() -> Counter:
    counts: Counter = Counter()
    for n in range(N):
        counts[(n % KEYS, (n * 10) // 1000 * 1000)] += 1
    return counts


def read(out: Path) -> dict:
    results: dict = {}
    for line in out.read_text().splitlines():
        key, start, count = eval(line)  # noqa: S307 - our own repr() output
        assert results.get((key, start), count) == count, f"window {(key, start)} fired with two counts"
        results[(key, start)] = count
    return results


def _stop(cli, jid: str, target: Path, drain: bool) -> str:
    args = ["stop", jid, "--savepoint-path", str(target), "--json"] + (["--drain"] if drain else [])
    res = cli(*args, timeout=90)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    location = doc.get("location") or doc.get("path") or doc.get("operation", {}).get("location")
    assert location, doc
    return location


def _submit(cli, job: Path, out: Path, parallelism: int, savepoint: str | None, *options: str) -> str:
    args = ["run", "-d", "-p", str(parallelism), "--json", *options]
    if savepoint:
        args += ["-s", savepoint]
    res = cli(*args, str(job), str(out))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def _running(cli, jid: str) -> bool:
    doc = json.loads(cli("job", "show", jid, "--json").stdout)
    return doc["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in doc["vertices"])


@pytest.mark.timeout(150)
def test_open_windows_survive_stop_move_and_rescale(cluster, cli, tmp_path: Path) -> None:
    job, out = tmp_path / "job.py", tmp_path / "out.txt"
    job.write_text(JOB)
    jid = _submit(cli, job, out, 2, None)
    wait_for(lambda: _running(cli, jid) and out.exists() and len(out.read_text().splitlines()) >= 10, timeout=60,
             message="some windows fired")
    location = _stop(cli, jid, tmp_path / "sp", drain=False)
    fired_before = read(out)
    assert len(fired_before) < len(expected()), "the job finished before it was stopped"
    moved = tmp_path / "moved"
    shutil.move(location, moved)
    # restore at another parallelism: window contents and timers move with their key groups
    jid2 = _submit(cli, job, out, 3, str(moved))
    wait_for(lambda: json.loads(cli("job", "show", jid2, "--json").stdout)["state"] == "FINISHED", timeout=90,
             message="the restored job to finish")
    assert read(out) == dict(expected())


@pytest.mark.timeout(150)
def test_stop_with_drain_fires_every_window_before_the_savepoint(cluster, cli, tmp_path: Path) -> None:
    job, out = tmp_path / "job.py", tmp_path / "out.txt"
    job.write_text(JOB)
    jid = _submit(cli, job, out, 2, None)
    wait_for(lambda: _running(cli, jid) and out.exists() and len(out.read_text().splitlines()) >= 10, timeout=60,
             message="some windows fired")
    _stop(cli, jid, tmp_path / "sp", drain=True)
    fired = read(out)
    exp = expected()
    # every window that had any event before the stop fired; the counts of all but the last
    # window of each key are complete, and nothing fired twice
    assert fired, "drain fired nothing"
    last_start = max(start for _, start in fired)
    for (key, start), count in fired.items():
        if start < last_start:
            assert count == exp[(key, start)], (key, start)
        else:
            assert count <= exp[(key, start)]


# The same job on the sliced window path: sliding 1 s / 250 ms windows counting with a reduce and
# a window function, stopped with a savepoint and rescaled 2 -> 3 -> 1 -> 2, from the heap backend
# to RocksDB and back, and at last upgraded with an evictor, which puts the window on the general
# path (its windows are built from the savepoint's slices).
SLIDING_JOB = JOB.replace("TumblingEventTimeWindows", "SlidingEventTimeWindows").replace(
    f"    .key_by(lambda n: n % {KEYS})\n    .window(SlidingEventTimeWindows.of(Time.seconds(1)))\n    .process(Emit())",
    f"    .map(lambda n: (n, 1)).key_by(lambda p: p[0] % {KEYS})\n"
    "    .window(SlidingEventTimeWindows.of(Time.seconds(1), Time.milliseconds(250)))\n"
    "    .reduce(lambda a, b: (a[0], a[1] + b[1]), window_function=lambda k, w, xs: [(k, w.start, x[1]) for x in xs])",
)


EVICTING_JOB = SLIDING_JOB.replace("import ProcessWindowFunction,", "import CountEvictor, ProcessWindowFunction,").replace(
    ".reduce(lambda a, b", ".evictor(CountEvictor.of(10**9)).reduce(lambda a, b"
)


def sliding_expected() -> Counter:
    counts: Counter = Counter()
    for n in range(N):
        ts = n * 10
        for start in range(ts - ts % 250 - 750, ts + 1, 250):
            counts[(n % KEYS, start)] += 1
    return counts


@pytest.mark.timeout(240)
def test_sliced_windows_survive_stop_rescale_and_an_evictor_added(cluster, cli, tmp_path: Path) -> None:
    assert "SlidingEventTimeWindows.of(Time.seconds(1), Time.milliseconds(250))" in SLIDING_JOB
    job, out = tmp_path / "job.py", tmp_path / "out.txt"
    job.write_text(SLIDING_JOB)
    info = cli("info", "--json", str(job), str(out))
    assert info.returncode == 0, info.stderr
    assert [w["path"] for n in json.loads(info.stdout)["nodes"] for w in n.get("windows", [])] == ["sliced"]
    jid = _submit(cli, job, out, 2, None)
    wait_for(lambda: _running(cli, jid) and out.exists() and len(out.read_text().splitlines()) >= 10, timeout=60,
             message="some windows fired")
    first = _stop(cli, jid, tmp_path / "sp1", drain=False)
    fired = len(read(out))
    # p=3 on RocksDB: the heap path's slices (kept by time, in the operator) restore as the
    # store path's keyed state and timers, and back on the heap at p=1
    jid = _submit(cli, job, out, 3, first, "-D", "state.backend.type=rocksdb")
    wait_for(lambda: _running(cli, jid) and len(read(out)) >= fired + 10, timeout=60, message="windows fired at p=3")
    second = _stop(cli, jid, tmp_path / "sp2", drain=False)
    assert len(read(out)) < len(sliding_expected()), "the job finished before the second stop"
    jid = _submit(cli, job, out, 1, second)
    fired = len(read(out))
    wait_for(lambda: _running(cli, jid) and len(read(out)) >= fired + 10, timeout=60, message="windows fired at p=1")
    third = _stop(cli, jid, tmp_path / "sp3", drain=False)
    assert len(read(out)) < len(sliding_expected()), "the job finished before the third stop"
    evicting = tmp_path / "evicting.py"
    evicting.write_text(EVICTING_JOB)
    info = json.loads(cli("info", "--json", str(evicting), str(out)).stdout)
    assert [w["path"] for n in info["nodes"] for w in n.get("windows", [])] == ["general"]
    jid = _submit(cli, evicting, out, 2, third)
    wait_for(lambda: json.loads(cli("job", "show", jid, "--json").stdout)["state"] == "FINISHED", timeout=120,
             message="the upgraded job to finish")
    assert read(out) == dict(sliding_expected())
