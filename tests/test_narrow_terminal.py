"""The words on an 80-column screen (issue 37, §6): what `checkpoint inspect`, error messages,
`restart-strategy` and `checkpoint trigger` print, read as a person at COLUMNS=80 reads them."""

from __future__ import annotations

import json
import os
import pty
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli, wait_for
from flinkpy.checkpoint import CheckpointStorage
from flinkpy.checkpoint.metadata import new_metadata, new_operator, new_subtask, operator_state
from flinkpy.errors import ExitCode

pytestmark = pytest.mark.timeout(120)

NARROW = {"COLUMNS": "80"}


def on_a_terminal(*args: str) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal 80 columns wide; (exit code, what it wrote there)."""
    leader, follower = pty.openpty()
    env = {**os.environ, **NARROW}
    proc = subprocess.Popen([sys.executable, "-m", "commands.main", *args], cwd=str(ROOT), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the follower side closed: the process ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(30), b"".join(chunks).decode().replace("\r\n", "\n")


def test_a_long_error_wraps_at_word_boundaries_on_a_terminal(tmp_path: Path) -> None:
    missing = tmp_path / "a-directory-with-a-long-name" / "and-another-one" / "the_job_that_is_not_here.py"
    code, text = on_a_terminal("run", str(missing))
    assert code == ExitCode.NOT_FOUND, text
    lines = [line for line in text.splitlines() if line]
    assert len(lines) > 1 and all(len(line) <= 80 or " " not in line.strip() for line in lines), text
    words = " ".join(line.strip() for line in lines).split()
    # every word whole: joined again, the lines give back the one-line message a script sees
    res = run_cli("run", str(missing))
    assert words == res.stderr.split(), (text, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1  # not a terminal: one line, as before


def test_restart_strategy_says_unlimited_where_flink_stores_int_max() -> None:
    res = run_cli("restart-strategy", "explain", "exponential-delay", "--failures", "2", env=NARROW)
    assert res.returncode == 0, res.stderr
    assert "attempts-before-reset-backoff=unlimited" in res.stdout and "2147483647" not in res.stdout, res.stdout
    doc = json.loads(run_cli("restart-strategy", "explain", "exponential-delay", "--failures", "2", "--json").stdout)
    assert doc["strategy"]["attempts-before-reset-backoff"] == 2147483647  # JSON keeps Flink's number


def test_checkpoint_inspect_at_80_columns_cuts_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("FLINKPY_TEST_SEED", random.randrange(2**32)))
    print(f"seed: {seed} (re-run with FLINKPY_TEST_SEED={seed})")
    rng = random.Random(seed)
    url = str(tmp_path / "chk-3")
    storage = CheckpointStorage(url)
    op_id = "%032x" % rng.getrandbits(128)  # a generated id, no uid: the table must show it whole
    offsets = {"splits": [{"split_id": "orders-partition-0", "position": 123456789}], "pending_acknowledgements": 17}
    h = storage.write_state_in(url, "src.op", rng.randbytes(32))
    states = {"buffered_elements_of_the_reader": {"kind": "list", "entries": 3}}
    ops = [new_operator(operator_id=op_id, uid=None, name="Source: orders from a queue", vertex_id=1, parallelism=1,
                        max_parallelism=128,
                        subtasks=[new_subtask(0, source_offsets=offsets, operator_state=operator_state(h, states))])]
    storage.write_metadata_in(url, new_metadata(job_id="3f2a9c0e11aa22bb33cc44dd55ee66ff", job_name="orders", checkpoint_id=3,
                                                 trigger_timestamp=1000, completion_timestamp=1200, operators=ops))
    res = run_cli("checkpoint", "inspect", url, env=NARROW)
    assert res.returncode == 0, res.stderr
    text = res.stdout
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    assert "…" not in text and "┃" not in text, text  # too narrow for the table: records
    assert f"Source: orders from a queue [id {op_id}]" in lines, text
    assert "  subtask 0/1: 32 B" in lines, text
    assert "    states: buffered_elements_of_the_reader (list, 3)" in lines, text
    # offsets: one key: value line each, never JSON broken mid-token
    assert lines[lines.index("    source offsets:") + 1:][:3] == [
        "      pending_acknowledgements: 17",
        "      splits.0.position: 123456789",
        "      splits.0.split_id: orders-partition-0",
    ], text
    wide = run_cli("checkpoint", "inspect", url, env={"COLUMNS": "200"})
    assert "┃ Operator" in wide.stdout and "splits.0.split_id: orders-partition-0" in wide.stdout, wide.stdout

JOB = """
import time
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource

def slow(n):
    time.sleep(0.001)

env = StreamExecutionEnvironment.get_execution_environment()
env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(10)
env.from_source(NumberSequenceSource(1, 10**9), WatermarkStrategy.no_watermarks(), "numbers").add_sink(slow)
env.execute("declines")
"""


def test_a_failed_checkpoint_exits_12_and_names_the_job_in_its_remedy(cluster, tmp_path: Path) -> None:
    job = tmp_path / "declines.py"
    job.write_text(JOB)
    res = run_cli("run", "-d", str(job))
    assert res.returncode == 0, res.stderr
    jid = res.stdout.strip().split()[-1]
    wait_for(lambda: json.loads(run_cli("job", "show", jid, "--json").stdout)["state"] == "RUNNING", 30, message="RUNNING")
    assert run_cli("fault", "fail-checkpoint", jid, "--count", "1").returncode == 0
    res = run_cli("checkpoint", "trigger", jid, "--timeout", "60s")
    assert res.returncode == ExitCode.SAVEPOINT_FAILED, (res.returncode, res.stderr)
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert re.search(rf"checkpoint \d+ of job {jid} failed", res.stderr), res.stderr
    assert f"flinkpy checkpoint list {jid}" in res.stderr and "JOB_ID" not in res.stderr, res.stderr
    run_cli("cancel", jid)
