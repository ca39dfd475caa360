"""`_metadata` seals itself, and every reader checks the seal and the files before a restore.

Found by the fault drill (issue #19): one flipped bit in a source offset inside `_metadata` was
accepted by `checkpoint verify` and by `run -s`, and the job restored wrong state (records lost
or duplicated); `savepoint plan` said "would succeed" for a savepoint with a missing file.
Snapshots are written by CheckpointStorage for the operator ids of test_savepoints' program.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import run_cli
from flinkpy.checkpoint.metadata import CHECKSUM_FIELD
from flinkpy.errors import ExitCode
from test_savepoints import JOB_ID, program, rng, write_snapshot  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(120)


def flip_a_bit_in_an_offset(metadata: Path) -> None:
    """XOR the lowest bit of the last digit of the first source offset (still valid JSON)."""
    raw = bytearray(metadata.read_bytes())
    at = raw.index(b'"offset": ') + len(b'"offset": ')
    while chr(raw[at + 1]).isdigit():
        at += 1
    raw[at] ^= 1
    metadata.write_bytes(bytes(raw))


def test_written_metadata_carries_its_checksum(tmp_path: Path, rng) -> None:
    sp = tmp_path / "savepoint-3f2a9c-seal"
    write_snapshot(sp, rng)
    doc = json.loads((sp / "_metadata").read_text())
    assert doc[CHECKSUM_FIELD].startswith("sha256:")


def test_checkpoint_verify_catches_one_flipped_bit_in_an_offset(tmp_path: Path, rng) -> None:
    sp = tmp_path / "savepoint-3f2a9c-flip"
    write_snapshot(sp, rng)
    assert run_cli("checkpoint", "verify", str(sp)).returncode == 0
    flip_a_bit_in_an_offset(sp / "_metadata")
    res = run_cli("checkpoint", "verify", "--json", str(sp))
    assert res.returncode == ExitCode.CONFLICT, res.stderr
    doc = json.loads(res.stdout)
    assert not doc["restorable"]
    assert doc["problems"][0]["path"] == str(sp / "_metadata")
    assert CHECKSUM_FIELD in doc["problems"][0]["problem"]


def test_run_from_a_tampered_savepoint_is_refused_before_anything_starts(tmp_path: Path, rng, program: Path) -> None:
    sp = tmp_path / "savepoint-3f2a9c-run"
    write_snapshot(sp, rng)
    flip_a_bit_in_an_offset(sp / "_metadata")
    started = time.monotonic()
    res = run_cli("run", "-s", str(sp), str(program))
    assert res.returncode == ExitCode.CONFLICT, res.stderr
    assert f"{sp / '_metadata'}: {CHECKSUM_FIELD}" in res.stderr
    assert "embedded" not in res.stderr and "restoring from" not in res.stderr, res.stderr
    assert not res.stdout.strip()  # the job printed nothing: it never ran
    assert time.monotonic() - started < 30


def test_savepoint_plan_refuses_a_tampered_metadata(tmp_path: Path, rng, program: Path) -> None:
    sp = tmp_path / "savepoint-3f2a9c-plan"
    write_snapshot(sp, rng)
    flip_a_bit_in_an_offset(sp / "_metadata")
    res = run_cli("savepoint", "plan", str(sp), str(program))
    assert res.returncode == ExitCode.CONFLICT, res.stderr
    assert CHECKSUM_FIELD in res.stderr


def test_metadata_without_a_checksum_is_read_with_a_warning(tmp_path: Path, rng, program: Path) -> None:
    """What an older flinkpy wrote stays restorable; the reader says it cannot check it."""
    sp = tmp_path / "savepoint-3f2a9c-old"
    write_snapshot(sp, rng)
    doc = json.loads((sp / "_metadata").read_text())
    del doc[CHECKSUM_FIELD]
    (sp / "_metadata").write_text(json.dumps(doc, indent=1))
    res = run_cli("checkpoint", "verify", "--json", str(sp))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["warnings"] and "warning:" in res.stderr and CHECKSUM_FIELD in res.stderr
    res = run_cli("savepoint", "plan", str(sp), str(program))
    assert res.returncode == 0, res.stderr
    assert CHECKSUM_FIELD in res.stderr


@pytest.mark.parametrize("damage", ["missing", "truncated", "one byte changed"])
def test_savepoint_plan_checks_every_state_file(tmp_path: Path, rng, program: Path, damage: str) -> None:
    sp = tmp_path / "savepoint-3f2a9c-files"
    write_snapshot(sp, rng)
    code, doc = _plan(sp, program)
    assert code == 0 and doc["restorable"] and doc["files_checked"] == 2 and doc["damaged_files"] == []
    victim = sp / "sums-1.keyed"
    data = victim.read_bytes()
    if damage == "missing":
        victim.unlink()
    elif damage == "truncated":
        victim.write_bytes(data[:-1])
    else:
        victim.write_bytes(bytes([data[0] ^ 0x80]) + data[1:])
    code, doc = _plan(sp, program)
    assert code == ExitCode.CONFLICT
    assert not doc["restorable"]
    assert [d["path"] for d in doc["damaged_files"]] == [str(victim)]
    assert any(str(victim) in p for p in doc["problems"])


def _plan(sp: Path, program: Path) -> tuple[int, dict]:
    res = run_cli("savepoint", "plan", "--json", str(sp), str(program))
    return res.returncode, json.loads(res.stdout)
