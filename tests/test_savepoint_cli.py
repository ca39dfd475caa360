"""`flinkpy savepoint trigger | status`, `flinkpy stop` and `flinkpy run -s` against a real cluster.

Jobs run on the ``cluster`` fixture (2 TaskManagers x 2 slots); the CLI runs as subprocesses,
the way operators run it. Waiting is done with ``wait_for`` (deadlines, no sleeps). The
restore test computes the expected even/odd sums in closed form.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, run_cli, wait_for
from flinkpy.errors import ExitCode

pytestmark = pytest.mark.timeout(180)

#: A paced even/odd sum (so a job is still running when it is stopped) whose last sum per key,
#: per subtask, is written to OUT_DIR/<tag>-<subtask>.json when its input ends.
PROGRAM = """
import json, os, sys, time
from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import MapFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

count, out_dir, tag = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Pace(MapFunction):
    def map(self, n):
        if n % 25 == 0:  # about 25 s of input at parallelism 1: a restored run is still running when it is stopped
            time.sleep(0.001)
        return ("even" if n % 2 == 0 else "odd", n)


class LastPerKey(MapFunction):
    def open(self, ctx):
        self.index, self.last = ctx.get_index_of_this_subtask(), {}

    def map(self, pair):
        self.last[pair[0]] = pair[1]
        return pair

    def close(self):
        with open(os.path.join(out_dir, f"{tag}-{self.index}.json"), "w") as f:
            json.dump(self.last, f)


env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(100)
numbers = env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
pairs = numbers.map(Pace(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()])).uid("pace")
sums = pairs.key_by(lambda p: p[0]).sum(1).uid("sums").name("running sums")
sums.map(LastPerKey(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()])).uid("last")
env.execute("paced even_odd_sum")
"""


def program_file(tmp_path: Path) -> Path:
    path = tmp_path / "paced_sums.py"
    path.write_text(textwrap.dedent(PROGRAM))
    return path


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED", random.randrange(2**32)))
    print(f"seed: {seed} (re-run with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


def submit(tmp_path: Path, *run_args: str, count: int = 5_000_000, tag: str = "run") -> str:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    res = run_cli("run", "--json", "-d", *run_args, str(program_file(tmp_path)), str(count), str(out), tag, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def job_state(jid: str) -> str:
    res = run_cli("job", "show", "--json", jid)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    return doc.get("state") or doc.get("job", {}).get("state")


def running_with_checkpoint(jid: str) -> None:
    """Wait until the job runs and has completed a checkpoint (so its tasks are all up)."""

    def ready() -> bool:
        res = run_cli("checkpoint", "list", "--json", jid)
        return res.returncode == 0 and json.loads(res.stdout).get("counts", {}).get("completed", 0) >= 1

    wait_for(ready, timeout=60, interval=0.1, message=f"a completed checkpoint of job {jid}")


def cancel(jid: str) -> None:
    run_cli("cancel", jid)
    wait_for(lambda: job_state(jid) in ("CANCELED", "FINISHED", "FAILED"), timeout=30, interval=0.1, message=f"job {jid} to end")


def one_json(res: subprocess.CompletedProcess) -> Any:
    return json.loads(res.stdout)  # raises unless stdout is exactly one document


# --------------------------------------------------------------------------- trigger / status


def test_trigger_prints_the_path_and_the_savepoint_is_restorable(cluster, tmp_path: Path) -> None:
    jid = submit(tmp_path)
    running_with_checkpoint(jid)
    res = run_cli("savepoint", "trigger", jid, str(tmp_path / "sps"))
    assert res.returncode == 0, res.stderr
    (line,) = res.stdout.splitlines()
    assert line.startswith("Savepoint completed. Path: ")
    location = line.removeprefix("Savepoint completed. Path: ")
    assert Path(location).parent == tmp_path / "sps"
    verify = run_cli("checkpoint", "verify", "--json", location)
    assert verify.returncode == 0 and one_json(verify)["restorable"]
    inspect = one_json(run_cli("checkpoint", "inspect", "--json", location))
    assert inspect["metadata"]["kind"] == "savepoint" and inspect["metadata"]["job_id"] == jid
    # --json: one document with the location
    doc = one_json(run_cli("savepoint", "trigger", "--json", jid, str(tmp_path / "sps")))
    assert doc["status"] == "COMPLETED" and Path(doc["location"]).parent == tmp_path / "sps"
    cancel(jid)


def test_detached_trigger_and_status(cluster, tmp_path: Path) -> None:
    jid = submit(tmp_path)
    running_with_checkpoint(jid)
    res = run_cli("savepoint", "trigger", "--detached", jid)
    assert res.returncode == 0, res.stderr
    trigger_id = res.stdout.strip()
    assert trigger_id and "\n" not in trigger_id

    def completed() -> Any:
        st = run_cli("savepoint", "status", "--json", jid, trigger_id)
        assert st.returncode == 0, st.stderr
        doc = one_json(st)
        return doc if doc["status"]["id"] == "COMPLETED" else None

    doc = wait_for(completed, timeout=60, interval=0.1, message="the savepoint to complete")
    location = doc["operation"]["location"]
    text = run_cli("savepoint", "status", jid, trigger_id)
    assert text.returncode == 0 and text.stdout.strip() == f"Savepoint completed. Path: {location}"
    cancel(jid)


def test_trigger_exit_codes_unknown_and_ended_jobs(cluster, tmp_path: Path) -> None:
    res = run_cli("savepoint", "trigger", "--json", "0" * 32)
    assert res.returncode == ExitCode.NOT_FOUND
    assert one_json(res)["error"]["exit_code"] == ExitCode.NOT_FOUND
    jid = submit(tmp_path)
    running_with_checkpoint(jid)
    cancel(jid)
    res = run_cli("savepoint", "trigger", jid)
    assert res.returncode == ExitCode.CONFLICT, res.stderr
    assert res.stdout == ""


def test_trigger_to_an_unwritable_directory_fails_with_12(cluster, tmp_path: Path) -> None:
    jid = submit(tmp_path)
    running_with_checkpoint(jid)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res = run_cli("savepoint", "trigger", "--json", jid, str(blocker / "sps"))
    assert res.returncode == ExitCode.SAVEPOINT_FAILED, res.stderr
    assert one_json(res)["error"]["exit_code"] == ExitCode.SAVEPOINT_FAILED
    assert job_state(jid) == "RUNNING"  # a failed savepoint does not fail the job
    cancel(jid)


def test_two_concurrent_triggers(cluster, tmp_path: Path) -> None:
    jid = submit(tmp_path)
    running_with_checkpoint(jid)
    sps = tmp_path / "sps"

    def both(*extra: str) -> list[subprocess.CompletedProcess]:
        cmd = [sys.executable, "-m", "commands.main", "savepoint", "trigger", *extra, jid, str(sps)]
        procs = [subprocess.Popen(cmd, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        return [subprocess.CompletedProcess(cmd, p.wait(timeout=120), *p.communicate()) for p in procs]

    # With --if-busy wait, both complete, one after the other, in two different savepoints.
    results = both("--if-busy", "wait")
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    paths = {r.stdout.strip() for r in results}
    assert len(paths) == 2
    # Without it, the one that finds the other in progress exits 9 (if they overlap at all).
    results = both()
    codes = sorted(r.returncode for r in results)
    assert codes in ([0, 0], [0, ExitCode.CONFLICT]), [r.stderr for r in results]
    for r in results:
        if r.returncode == ExitCode.CONFLICT:
            assert "progress" in r.stderr and r.stdout == ""
    cancel(jid)


def test_keep_prunes_only_this_jobs_older_savepoints_but_not_the_restored_one(cluster, tmp_path: Path) -> None:
    sps = tmp_path / "sps"
    first = submit(tmp_path, tag="first")
    running_with_checkpoint(first)
    stop = run_cli("stop", "--json", "--savepoint-path", str(sps), first)
    assert stop.returncode == 0, stop.stderr
    restored_from = one_json(stop)["location"]
    # Another job's savepoint and an unrelated file in the same directory must survive.
    other = submit(tmp_path, tag="other")
    running_with_checkpoint(other)
    other_sp = one_json(run_cli("savepoint", "trigger", "--json", other, str(sps)))["location"]
    cancel(other)
    (sps / "README").write_text("keep me")

    jid = submit(tmp_path, "-s", restored_from, tag="second")
    running_with_checkpoint(jid)
    made = []
    for _ in range(3):
        doc = one_json(run_cli("savepoint", "trigger", "--json", "--keep", "2", jid, str(sps)))
        made.append(doc["location"])
    left = {str(p) for p in sps.iterdir()}
    assert made[2] in left and made[1] in left and made[0] not in left
    assert restored_from in left and other_sp in left and str(sps / "README") in left
    cancel(jid)


# --------------------------------------------------------------------------- stop


def test_stop_prints_the_path_and_waits_for_finished(cluster, tmp_path: Path) -> None:
    jid = submit(tmp_path)
    running_with_checkpoint(jid)
    res = run_cli("stop", jid, "--savepoint-path", str(tmp_path / "sps"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Savepoint completed. Path: ")
    assert job_state(jid) == "FINISHED"
    again = run_cli("stop", "--json", jid)
    assert again.returncode == ExitCode.CONFLICT and one_json(again)["error"]["exit_code"] == ExitCode.CONFLICT


# --------------------------------------------------------------------------- restore end to end


def expected_sums(n: int) -> dict[str, int]:
    evens = n // 2
    odds = (n + 1) // 2
    return {"even": evens * (evens + 1), "odd": odds * odds}


def test_even_odd_sums_are_exact_across_stop_and_restore_1_3_2_with_a_moved_savepoint(cluster, tmp_path: Path) -> None:
    n = 400_000
    out = tmp_path / "out"
    first = submit(tmp_path, "-p", "1", count=n, tag="a")
    running_with_checkpoint(first)
    stop = run_cli("stop", "--json", "--savepoint-path", str(tmp_path / "sps"), first)
    assert stop.returncode == 0, stop.stderr
    location = Path(one_json(stop)["location"])
    moved = tmp_path / "elsewhere" / location.name
    moved.parent.mkdir()
    shutil.move(str(location), moved)

    plan = run_cli("savepoint", "plan", "--json", "-p", "3", str(moved), str(program_file(tmp_path)), str(n), str(out), "b")
    assert plan.returncode == 0, plan.stderr
    assert one_json(plan)["restorable"]

    second = submit(tmp_path, "-p", "3", "-s", str(moved), count=n, tag="b")
    running_with_checkpoint(second)
    stop = run_cli("stop", "--json", "--savepoint-path", str(tmp_path / "sps2"), second)
    assert stop.returncode == 0, stop.stderr

    res = run_cli("run", "-p", "2", "--from-latest", str(tmp_path / "sps2"), str(program_file(tmp_path)), str(n), str(out), "c", timeout=150)
    assert res.returncode == 0, res.stderr
    assert "Restoring from " in res.stderr and "(savepoint " in res.stderr
    final: dict[str, int] = {}
    for f in sorted(out.glob("c-*.json")):
        final.update(json.loads(f.read_text()))
    assert final == expected_sums(n)
