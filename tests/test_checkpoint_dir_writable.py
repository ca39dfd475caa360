"""The checkpoint directory is checked for writability when a job is submitted (exit 8).

Found by the fault drill (issue #19): a job whose execution.checkpointing.dir could not be
written ran, failed every checkpoint and restarted in a loop instead of being refused. Tests
run as root here, so "not writable" is a path under a regular file, which no user can create.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import run_cli
from flinkpy.errors import ExitCode

pytestmark = pytest.mark.timeout(120)

JOB = """
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

env = StreamExecutionEnvironment.get_execution_environment()
env.from_source(NumberSequenceSource(1, 3), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers").print()
env.execute("tiny")
"""


@pytest.fixture
def job(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.py"
    path.write_text(textwrap.dedent(JOB))
    return path


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_unwritable_checkpoint_dir_is_refused_at_submission(tmp_path: Path, flinkpy_home: Path, job: Path, scheme: str) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file")
    target = f"{scheme}{blocker}/checkpoints"
    res = run_cli("run", "-D", "execution.checkpointing.interval=1s", "-D", f"execution.checkpointing.dir={target}", str(job))
    assert res.returncode == ExitCode.CONFIGURATION, res.stderr
    assert f"the checkpoint directory {target} is not writable" in res.stderr
    assert "execution.checkpointing.dir" in res.stderr
    assert "3\n" not in res.stdout  # the job never ran


def test_writable_checkpoint_dir_runs_and_leaves_no_probe(tmp_path: Path, flinkpy_home: Path, job: Path) -> None:
    target = tmp_path / "checkpoints"
    res = run_cli("run", "-D", "execution.checkpointing.interval=1s", "-D", f"execution.checkpointing.dir={target}", str(job))
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == ["1", "2", "3"]
    assert not [p for p in target.rglob(".write-probe-*")]
