"""`flinkpy checkpoint inspect` and `verify`, run as operators run them: as subprocesses.

Checkpoints are built with CheckpointStorage in a temporary directory; state bytes come from
a seeded RNG (the seed is printed, and fixed with FLINKPY_TEST_SEED).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from conftest import run_cli
from flinkpy.checkpoint import CheckpointStorage
from flinkpy.errors import ExitCode
from test_checkpoint_storage import JOB, build_checkpoint

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED", random.randrange(2**32)))
    print(f"seed: {seed} (re-run with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


@pytest.fixture
def checkpoint(tmp_path: Path, rng: random.Random) -> tuple[Path, dict, dict]:
    """A valid checkpoint: (its directory, its _metadata document, its state files' bytes)."""
    storage = CheckpointStorage(str(tmp_path / "checkpoints"))
    doc, blobs = build_checkpoint(storage, rng, checkpoint_id=5)
    return tmp_path / "checkpoints" / JOB / "chk-5", doc, blobs


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("flinkpy: error: ")]


def test_inspect_shows_header_operators_subtasks_and_totals(checkpoint: tuple[Path, dict, dict]) -> None:
    chk, doc, blobs = checkpoint
    res = run_cli("checkpoint", "inspect", str(chk), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    text = res.stdout
    for expected in (
        f"Job: running sums ({JOB})",
        "Checkpoint id: 5; kind: checkpoint (aligned); mode: EXACTLY_ONCE",
        "Max parallelism: 128",
        "in 3 file(s), 2 operator(s)",
        "running sums [uid sums]",
        "Source: numbers [uid numbers]",
        "0-63",
        "64-127",
        "total (value, 17)",
        "seen (map, 40)",
        "splits (source, 1)",
        "offset: 1234",
        "split: 0",
        "Total",
    ):
        assert expected in text, f"{expected!r} missing from:\n{text}"
    assert res.stderr == ""


def test_inspect_json_is_one_document_with_metadata_and_summary(checkpoint: tuple[Path, dict, dict]) -> None:
    chk, doc, blobs = checkpoint
    # Any of the checkpoint's names will do: its _metadata file as a file:// URL here.
    res = run_cli("checkpoint", "inspect", (chk / "_metadata").as_uri(), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["metadata"] == doc
    assert out["path"] == chk.as_uri() and out["metadata_path"] == (chk / "_metadata").as_uri()
    assert out["summary"]["total_size"] == sum(len(b) for b in blobs.values())
    assert out["summary"]["files"] == 3


def test_verify_a_valid_checkpoint(checkpoint: tuple[Path, dict, dict]) -> None:
    chk, doc, blobs = checkpoint
    res = run_cli("checkpoint", "verify", str(chk))
    assert res.returncode == 0, res.stderr
    assert f"Restorable: checkpoint 5 of job {JOB}" in res.stdout and "3 file(s)" in res.stdout
    assert res.stderr == ""
    report = json.loads(run_cli("checkpoint", "verify", str(chk), "--json").stdout)
    assert report["restorable"] is True and report["problems"] == []
    assert report["files_checked"] == 3 and report["bytes_checked"] == sum(len(b) for b in blobs.values())


def test_verify_a_checkpoint_with_a_missing_file(checkpoint: tuple[Path, dict, dict]) -> None:
    chk, _, _ = checkpoint
    (chk / "sums-1.keyed").unlink()
    res = run_cli("checkpoint", "verify", str(chk))
    assert res.returncode == ExitCode.CONFLICT == 9
    assert res.stdout == ""
    assert error_lines(res.stderr) == [
        f"flinkpy: error: {chk}/sums-1.keyed: state file is missing",
        f"flinkpy: error: {chk} is not restorable: 1 problem(s)",
    ]


def test_verify_a_checkpoint_with_a_corrupted_file(checkpoint: tuple[Path, dict, dict], rng: random.Random) -> None:
    chk, doc, blobs = checkpoint
    data = bytearray(blobs["sums-0.keyed"])
    data[rng.randrange(len(data))] ^= 0x01
    (chk / "sums-0.keyed").write_bytes(bytes(data))
    res = run_cli("checkpoint", "verify", str(chk), "--json")
    assert res.returncode == ExitCode.CONFLICT
    report = json.loads(res.stdout)
    assert report["restorable"] is False
    assert [p["path"] for p in report["problems"]] == [f"{chk}/sums-0.keyed"]
    assert report["problems"][0]["problem"].startswith("checksum mismatch: _metadata records sha256:")
    (line,) = error_lines(res.stderr)
    assert line.startswith(f"flinkpy: error: {chk}/sums-0.keyed: checksum mismatch")


def test_corrupt_metadata(checkpoint: tuple[Path, dict, dict]) -> None:
    chk, _, _ = checkpoint
    meta = chk / "_metadata"
    meta.write_bytes(meta.read_bytes()[:100])
    for command in ("inspect", "verify"):
        res = run_cli("checkpoint", command, str(chk))
        assert res.returncode == ExitCode.CONFLICT, (command, res.stderr)
        assert error_lines(res.stderr)[0].startswith(f"flinkpy: error: {meta}: truncated or not JSON")


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_missing_path_is_not_found(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nope" / "chk-1"
    res = run_cli("checkpoint", command, str(missing))
    assert res.returncode == ExitCode.NOT_FOUND == 4
    assert res.stdout == ""
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"flinkpy: error: no checkpoint at {missing}")
    res = run_cli("checkpoint", command, str(missing), "--json")
    assert res.returncode == ExitCode.NOT_FOUND
    assert json.loads(res.stdout)["error"]["exit_code"] == 4


def test_incomplete_checkpoint_is_not_found(tmp_path: Path, rng: random.Random) -> None:
    storage = CheckpointStorage(str(tmp_path))
    storage.write_state(JOB, 8, "sums-0.keyed", rng.randbytes(8))
    res = run_cli("checkpoint", "verify", storage.checkpoint_dir(JOB, 8))
    assert res.returncode == ExitCode.NOT_FOUND
    (line,) = res.stderr.splitlines()
    assert "is not a complete checkpoint: it has no _metadata" in line
