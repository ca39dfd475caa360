"""``FLINKPY_TASK_PROFILE_DIR``: one cProfile dump per task attempt, named after its job, so that
two jobs profiled into one directory keep each its own dumps."""

from __future__ import annotations

import pstats
from pathlib import Path

import pytest

from conftest import running_cluster
from flinkpy.client.program import run_program

TWO_JOBS = """
from flinkpy.datastream import StreamExecutionEnvironment

for name in ("first", "second"):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_collection([1, 2, 3]).map(lambda n: n * 2).print()
    env.execute(name)
"""


@pytest.mark.timeout(60)
def test_two_jobs_profiled_into_one_directory_keep_their_own_dumps(flinkpy_home: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "two_jobs.py"
    job.write_text(TWO_JOBS)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    monkeypatch.setenv("FLINKPY_TASK_PROFILE_DIR", str(profiles))  # the TaskManager's tasks inherit it
    with running_cluster(flinkpy_home, slots=2):
        jobs = run_program(str(job), [])
    assert [j.state for j in jobs] == ["FINISHED", "FINISHED"]
    jids = [j.job_id for j in jobs]
    assert len(set(jids)) == 2
    dumps = sorted(p.name for p in profiles.iterdir())
    # each job is one chained task of parallelism 1, first attempt: vertex 1, subtask 0, attempt 0
    assert dumps == sorted(f"{jid}-1-0-0.prof" for jid in jids), dumps
    for name in dumps:
        assert pstats.Stats(str(profiles / name)).total_calls > 0


WINDOWED_CHECKPOINTED = """
from flinkpy.common import Duration, Time, WatermarkStrategy
from flinkpy.datastream import EmbeddedRocksDBStateBackend, HashMapStateBackend, StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
from flinkpy.datastream.window import TumblingEventTimeWindows

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.enable_checkpointing(50)
env.set_state_backend(BACKEND())
strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(10))
            .with_timestamp_assigner(lambda n, _: n))
(env.from_source(NumberSequenceSource(1, 3000), WatermarkStrategy.no_watermarks(), "numbers")
    .assign_timestamps_and_watermarks(strategy)
    .map(lambda n: (n % 7, n))
    .key_by(lambda pair: pair[0])
    .window(TumblingEventTimeWindows.of(Time.milliseconds(500)))
    .reduce(lambda a, b: (a[0], a[1] + b[1]))
    .print())
env.execute("windowed")
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["HashMapStateBackend", "EmbeddedRocksDBStateBackend"])
def test_a_task_imports_none_of_the_engine_after_its_fork(flinkpy_home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """The zygote has imported the engine before it forks a task: a keyed, windowed, checkpointed
    job's tasks import none of flinkpy's modules (nor the codec that resolving a channel's host
    name needs, nor RocksDB's binding), which every task of every job would otherwise pay again."""
    import flinkpy

    job = tmp_path / "windowed.py"
    job.write_text(WINDOWED_CHECKPOINTED.replace("BACKEND", backend))
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    monkeypatch.setenv("FLINKPY_TASK_PROFILE_DIR", str(profiles))
    with running_cluster(flinkpy_home, slots=4):
        jobs = run_program(str(job), [])
    assert [j.state for j in jobs] == ["FINISHED"]
    dumps = sorted(profiles.iterdir())
    assert len(dumps) == 4  # a source chain and a window chain, two subtasks each
    engine = str(Path(flinkpy.__file__).parent)
    imported = {
        file
        for dump in dumps
        for (file, _, function) in pstats.Stats(str(dump)).stats  # type: ignore[attr-defined]
        if function == "<module>" and (file.startswith(engine) or file.endswith("idna.py") or "rocksdict" in file)
    }
    assert not imported, f"imported by tasks after their fork, not by the zygote: {sorted(imported)}"


FREEZE_COUNTS = """
import gc
import sys

from flinkpy.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
counts = env.from_collection(list(range(8))).rebalance().map(lambda _: gc.get_freeze_count())
with open(sys.argv[1], "w") as out:
    out.write(" ".join(str(c) for c in counts.execute_and_collect("freeze counts")))
"""


@pytest.mark.timeout(60)
def test_a_tasks_garbage_collector_leaves_the_zygotes_objects_alone(flinkpy_home: Path, tmp_path: Path) -> None:
    """Each task starts with what the zygote imported frozen out of its cyclic collector, so
    that no collection in a task writes to (and so copies) the pages it shares with the zygote."""
    import gc

    job = tmp_path / "freeze_counts.py"
    job.write_text(FREEZE_COUNTS)
    found = tmp_path / "counts.txt"
    with running_cluster(flinkpy_home, slots=4):
        jobs = run_program(str(job), [str(found)])
    assert [j.state for j in jobs] == ["FINISHED"]
    counts = [int(c) for c in found.read_text().split()]
    assert len(counts) == 8
    # the engine and its libraries are tens of thousands of objects; this process froze none
    assert gc.get_freeze_count() == 0
    assert min(counts) > 10_000, counts
