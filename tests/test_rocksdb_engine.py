"""The RocksDB backend in the engine: real task processes keep keyed state, timers and window
contents in RocksDB, survive a SIGKILL exactly, and savepoints move between parallelisms and
between backends (heap -> rocksdb at another parallelism -> heap).

Expected results are computed here independently (a per-key model of the timer job, sums per
key and window, closed sums per residue); the heap backend must give the same.
"""

from __future__ import annotations

import json
import random
import textwrap
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from backends import BACKENDS, engine_backend
from conftest import run_cli
from flinkpy.common import RestartStrategies, Time, Types, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.state import ListStateDescriptor
from flinkpy.datastream.window import TumblingEventTimeWindows
from test_recovery import assert_recovered, first, last_per_key, only_job, seeded, split_words, start, vertex_id  # noqa: F401 - start is a fixture
from test_savepoint_cli import PROGRAM as SAVEPOINT_PROGRAM
from test_savepoint_cli import job_state, one_json, running_with_checkpoint

STEP = 100


class Ticks(KeyedProcessFunction):
    """Keeps each key's timestamps in list state and, at every 100 ms boundary its elements
    reach (an event-time timer), emits how many arrived up to it, then forgets them."""

    def open(self, runtime_context):
        self.pending = runtime_context.get_list_state(ListStateDescriptor("pending", Types.LONG()))

    def process_element(self, value, ctx):
        key, ts = value
        self.pending.add(ts)
        ctx.timer_service().register_event_time_timer((ts // STEP + 1) * STEP)
        return []

    def on_timer(self, timestamp, ctx):
        due = [t for t in self.pending.get() if t < timestamp]
        self.pending.update([t for t in self.pending.get() if t >= timestamp])
        yield ("tick", ctx.get_current_key(), timestamp, len(due))


def _stamp(value, _):
    return value[1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend_type", BACKENDS)
def test_keyed_state_timers_and_event_time_windows_are_exact(backend_type: str) -> None:
    rng = seeded("timers and windows")
    records = sorted(((f"k{rng.randrange(40)}", rng.randrange(5000)) for _ in range(4000)), key=lambda r: r[1])
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_state_backend(engine_backend(backend_type))
    stamped = env.from_collection(records).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(_stamp)
    )
    ticks = stamped.key_by(first).process(Ticks())
    windows = (
        stamped.map(lambda r: (r[0], r[1] // 250, 1))
        .key_by(first)
        .window(TumblingEventTimeWindows.of(Time.milliseconds(250)))
        .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]))
        .map(lambda r: ("window", r[0], r[1], r[2]))
    )
    got = Counter(ticks.union(windows).execute_and_collect())

    expected: Counter = Counter()
    per_key_step: Counter = Counter((k, (ts // STEP + 1) * STEP) for k, ts in records)
    expected.update(("tick", k, t, n) for (k, t), n in per_key_step.items())
    expected.update(("window", k, w, n) for (k, w), n in Counter((k, ts // 250) for k, ts in records).items())
    assert got == expected


@pytest.mark.timeout(60)
def test_word_count_on_rocksdb_is_exact_after_a_sigkill(start) -> None:
    rng = seeded("rocksdb word count")
    words = [f"w{i}" for i in range(500)]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(40_000)]
    expected = Counter(w for line in lines for w in line.split())

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    env.set_state_backend(engine_backend("rocksdb"))
    counts = env.from_collection(lines).flat_map(split_words).name("split").key_by(first).sum(1).name("count")
    start(faults=[{"point": "after-complete", "vertex": vertex_id(env, "count"), "subtask": 1, "checkpoint": 1}])

    assert last_per_key(counts.execute_and_collect("rocksdb word count")) == dict(expected)
    assert_recovered(only_job()["jid"], cause="SIGKILL")


#: test_savepoint_cli's paced program, keyed by n % 97 instead of parity (97 keys over many key groups)
PROGRAM = (
    SAVEPOINT_PROGRAM.replace('("even" if n % 2 == 0 else "odd", n)', "(n % 97, n)")
    .replace("Types.STRING()", "Types.INT()")
    .replace('env.execute("paced even_odd_sum")', 'env.execute("residue sums")')
)
assert PROGRAM.count("n % 97") == 1 and "Types.STRING()" not in PROGRAM


@pytest.mark.timeout(180)
def test_savepoints_move_between_backends_and_parallelisms_exactly(cluster, tmp_path: Path) -> None:
    """heap at 2 -> savepoint -> rocksdb at 3 -> savepoint -> heap at 2, to the end: exact sums."""
    n = 1_000_000
    program = tmp_path / "residue_sums.py"
    program.write_text(textwrap.dedent(PROGRAM))
    out = tmp_path / "out"
    out.mkdir()

    def submit(backend: str, parallelism: int, tag: str, *extra: str) -> str:
        res = run_cli("run", "--json", "-d", "-p", str(parallelism), "-D", f"state.backend.type={backend}",
                      "-D", f"state.backend.rocksdb.localdir={tmp_path / 'local'}", *extra,
                      str(program), str(n), str(out), tag, timeout=120)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)["jobs"][0]["jid"]

    def stop(jid: str, where: str) -> str:
        running_with_checkpoint(jid)
        res = run_cli("stop", "--json", "--savepoint-path", str(tmp_path / where), jid)
        assert res.returncode == 0, res.stderr
        assert job_state(jid) in ("FINISHED", "CANCELED")
        return one_json(res)["location"]

    first_sp = stop(submit("hashmap", 2, "a"), "sp1")
    second_sp = stop(submit("rocksdb", 3, "b", "-s", first_sp), "sp2")
    res = run_cli("run", "-p", "2", "-D", "state.backend.type=hashmap", "-s", second_sp,
                  str(program), str(n), str(out), "c", timeout=150)
    assert res.returncode == 0, res.stderr
    final: dict = {}
    for f in sorted(out.glob("c-*.json")):
        final.update({int(k): v for k, v in json.loads(f.read_text()).items()})
    assert final == {r: sum(range(r or 97, n + 1, 97)) for r in range(97)}
    assert not list((tmp_path / "local").glob("flinkpy-rocksdb-*")), "stopped tasks delete their RocksDB directories"


@pytest.mark.timeout(60)
def test_info_shows_the_state_backend_the_job_would_run_with(tmp_path: Path) -> None:
    job = tmp_path / "backend_job.py"
    job.write_text(textwrap.dedent('''
        from flinkpy.datastream import StreamExecutionEnvironment
        from flinkpy.datastream.state_backend import EmbeddedRocksDBStateBackend

        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))
        env.from_collection([1, 2, 3]).key_by(lambda x: x % 2).reduce(lambda a, b: a + b).print()
        env.execute("backend job")
    '''))
    res = run_cli("info", "--json", str(job))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["state_backend"] == {"type": "rocksdb", "incremental": True}
    res = run_cli("info", str(job))
    assert "State backend: rocksdb, incremental checkpoints" in res.stdout
    plain = tmp_path / "plain.py"
    plain.write_text(job.read_text().replace("env.set_state_backend(EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=True))", ""))
    assert json.loads(run_cli("info", "--json", str(plain)).stdout)["state_backend"] == {"type": "hashmap", "incremental": False}
