"""`flinkpy state analyze` decodes state files with a restricted unpickler unless --trusted.

Found by the fault drill (issue #19): snapshots are pickles, and analysing one copied from
elsewhere ran whatever its pickles named. Now plain values and flinkpy's types are read, any
other global is refused by name (exit 8) without running, and --trusted reads the job's own
classes (with its modules on PYTHONPATH).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli
from flinkpy.errors import ExitCode

pytestmark = pytest.mark.timeout(60)

MODULE = """
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    x: int
    y: int


class Payload:
    '''What a hostile snapshot holds: unpickling it runs a shell command.'''

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))
"""


def write_snapshot(tmp_path: Path, values: dict[str, object]) -> Path:
    """A checkpoint whose keyed ValueState 'v' holds ``values`` (key -> value), written by the heap backend."""
    from flinkpy.checkpoint import CheckpointStorage, keyed_state, new_metadata, new_operator, new_subtask
    from flinkpy.datastream.state import ValueStateDescriptor
    from flinkpy.state.heap import HeapKeyedStateBackend

    backend = HeapKeyedStateBackend(128, range(0, 128))
    state = backend.get_partitioned_state(ValueStateDescriptor("v", None))
    for key, value in values.items():
        backend.set_current_key(key)
        state.update(value)
    frozen = backend.snapshot_sync()
    storage = CheckpointStorage(str(tmp_path / "checkpoints"))
    handle = storage.write_state("job", 1, "op-0.keyed", frozen.serialize())
    op = new_operator(operator_id="op", uid="op", name="points", vertex_id=1, parallelism=1, max_parallelism=128,
                      subtasks=[new_subtask(0, keyed_state=keyed_state(handle, (0, 127), frozen.summary()))])
    storage.write_metadata("job", 1, new_metadata(job_id="job", job_name="demo", checkpoint_id=1, trigger_timestamp=1,
                                                   completion_timestamp=2, operators=[op]))
    return tmp_path / "checkpoints" / "job" / "chk-1"


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "drill_points.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(lib))
    import drill_points

    yield lib, drill_points
    sys.modules.pop("drill_points", None)


def test_plain_values_are_analyzed_without_trust(tmp_path: Path) -> None:
    from decimal import Decimal

    path = write_snapshot(tmp_path, {"a": (1, "x", Decimal("2.5")), "b": {"nested": [1, 2]}})
    res = run_cli("state", "analyze", "--json", str(path))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["totals"]["keys"] == 2


def test_a_pickle_that_would_run_a_command_is_refused_and_nothing_runs(tmp_path: Path, user_module) -> None:
    _, mod = user_module
    marker = tmp_path / "pwned"
    path = write_snapshot(tmp_path, {"k": mod.Payload(str(marker))})
    res = run_cli("state", "analyze", str(path))
    assert res.returncode == ExitCode.CONFIGURATION, res.stderr
    assert "posix.system" in res.stderr and "--trusted" in res.stderr
    assert not marker.exists(), "analysing the snapshot ran the command its pickle names"


def test_the_jobs_own_class_needs_trusted_and_its_module(tmp_path: Path, user_module) -> None:
    lib, mod = user_module
    path = write_snapshot(tmp_path, {"p": mod.Point(1, 2), "q": mod.Point(3, 4)})
    res = run_cli("state", "analyze", str(path))
    assert res.returncode == ExitCode.CONFIGURATION, res.stderr
    assert "drill_points.Point" in res.stderr and "--trusted" in res.stderr
    res = run_cli("state", "analyze", "--trusted", "--json", str(path), env={"PYTHONPATH": f"{lib}:{Path.cwd()}"})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["totals"]["keys"] == 2


def test_a_small_file_that_asks_for_a_gigabyte_is_refused_before_allocating(tmp_path: Path) -> None:
    """Issue 38: a 248-byte file holding bytes(1 << 30) (plain values, no code) made
    'state analyze' allocate 1 GiB; what constructors build is now bounded by the file's size."""
    from flinkpy.checkpoint import CheckpointStorage, keyed_state, new_metadata, new_operator, new_subtask

    crafted = b"\x80\x02cbuiltins\nbytes\nJ\x00\x00\x00@\x85R."  # bytes(1 << 30)
    storage = CheckpointStorage(str(tmp_path / "checkpoints"))
    handle = storage.write_state("job", 1, "op-0.keyed", crafted)
    op = new_operator(operator_id="op", uid="op", name="crafted", vertex_id=1, parallelism=1, max_parallelism=128,
                      subtasks=[new_subtask(0, keyed_state=keyed_state(handle, (0, 127), {}))])
    storage.write_metadata("job", 1, new_metadata(job_id="job", job_name="demo", checkpoint_id=1, trigger_timestamp=1,
                                                   completion_timestamp=2, operators=[op]))
    res = run_cli("state", "analyze", str(tmp_path / "checkpoints" / "job" / "chk-1"))
    assert res.returncode == ExitCode.CONFLICT, res.stderr
    assert f"a {len(crafted)}-byte state file asks for 1073741824 bytes through builtins.bytes" in res.stderr
    assert "Traceback" not in res.stderr
