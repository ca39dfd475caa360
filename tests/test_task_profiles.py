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
