"""`flinkpy savepoint prune`: retention of a savepoint directory by count and by age.

Real savepoints (state file and ``_metadata``, written through CheckpointStorage as a JobManager
writes them) in a temporary directory; no cluster: protection is given as the library's
argument, and the CLI runs with --offline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from flinkpy.checkpoint import CheckpointStorage, keyed_state, new_metadata, new_operator, new_subtask
from flinkpy.client.savepoints import prune_directory
from flinkpy.errors import ExitCode

pytestmark = pytest.mark.timeout(60)

A, B = "a" * 32, "b" * 32
DAY_MS = 86_400_000
NOW = 100 * DAY_MS


def savepoint(root: Path, job_id: str, checkpoint_id: int, completed_ms: int) -> str:
    storage = CheckpointStorage(str(root))
    target = f"{root}/savepoint-{job_id[:6]}-{checkpoint_id:012x}"
    handle = storage.write_state_in(target, "sums-0.keyed", b"state of %d" % checkpoint_id)
    doc = new_metadata(
        job_id=job_id, job_name="sums", checkpoint_id=checkpoint_id, kind="savepoint", savepoint_format="canonical",
        trigger_timestamp=completed_ms - 1, completion_timestamp=completed_ms,
        operators=[new_operator(operator_id="op", uid="sums", name="sums", vertex_id=1, parallelism=1, max_parallelism=128,
                                subtasks=[new_subtask(0, keyed_state=keyed_state(handle, (0, 127), {"total": {"kind": "value", "entries": 1}}))])],
    )
    storage.write_metadata_in(target, doc)
    return target


@pytest.fixture
def history(tmp_path: Path) -> dict[str, str]:
    """Job A: savepoints 1..4, one a day (4 the newest); job B: one savepoint, 30 days old."""
    sps = {f"a{n}": savepoint(tmp_path, A, n, NOW - (5 - n) * DAY_MS) for n in range(1, 5)}
    sps["b1"] = savepoint(tmp_path, B, 1, NOW - 30 * DAY_MS)
    return sps


def remaining(root: Path) -> set[str]:
    return {p.parent.name for p in root.glob("*/_metadata")}


def test_keep_and_max_age_dispose_per_job_but_never_the_newest_or_a_protected_one(tmp_path: Path, history: dict[str, str]) -> None:
    names = {v: k for k, v in history.items()}
    planned = prune_directory(str(tmp_path), keep=2, max_age_ms=None, now_ms=NOW, protected=[history["a1"]], dry_run=True)
    assert {names[d.path]: d.dispose for d in planned} == {"a4": False, "a3": False, "a2": True, "a1": False, "b1": False}
    assert len(remaining(tmp_path)) == 5  # a dry run deletes nothing
    done = prune_directory(str(tmp_path), keep=None, max_age_ms=int(1.5 * DAY_MS), now_ms=NOW, protected=[history["a1"] + "/_metadata"])
    assert [names[d.path] for d in done if d.dispose] == ["a3", "a2"]  # newest first
    assert {d.reason for d in done if names[d.path] == "a1"} == {"a job was started from it"}
    assert remaining(tmp_path) == {Path(history[k]).name for k in ("a4", "a1", "b1")}
    assert not Path(history["a2"]).exists()  # its state file went with its _metadata
    again = prune_directory(str(tmp_path), keep=None, max_age_ms=int(1.5 * DAY_MS), now_ms=NOW, protected=[history["a1"]])
    assert not any(d.dispose for d in again)  # idempotent


def test_the_cli_prunes_for_cron_and_refuses_without_a_rule(tmp_path: Path, history: dict[str, str]) -> None:
    res = run_cli("savepoint", "prune", "--keep", "1", "--offline", "--json", str(tmp_path))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert sorted(Path(s["path"]).name for s in doc["savepoints"] if s["dispose"]) == sorted(Path(history[k]).name for k in ("a1", "a2", "a3"))
    assert remaining(tmp_path) == {Path(history[k]).name for k in ("a4", "b1")}
    none = run_cli("savepoint", "prune", "--offline", str(tmp_path))
    assert none.returncode == ExitCode.USAGE and "--keep N, --max-age" in none.stderr
