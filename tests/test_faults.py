"""`flinkpy fault`: faults injected through the cluster cause the failures and recoveries they should.

An endless even/odd job (checkpoints every 100 ms, fixed-delay restarts) runs on the 2 x 2
``cluster``; each fault goes CLI -> REST -> JobManager -> TaskManager (-> task). Effects are
observed as an operator would: job details, the exception history, checkpoint statistics, the
fault journal, and process states (psutil) for pauses. The sums in every retained checkpoint
must stay a consistent cut whatever was injected. The chaos schedule is unit-tested pure.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import cli_json, wait_for
from flinkpy.faults import choose
from flinkpy.faults.chaos import plan
from test_recovery import ENDLESS_EVEN_ODD, ENDLESS_N, all_running, cancel_and_check_cuts, completed, exception_entries, job_show, subtasks

FLAGS = (
    "-D", "execution.checkpointing.interval=100ms",
    "-D", "execution.checkpointing.num-retained=1000",
    "-D", "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
    "-D", "restart-strategy.type=fixed-delay",
    "-D", "restart-strategy.fixed-delay.attempts=1000",
    "-D", "restart-strategy.fixed-delay.delay=0s",
    # a failed checkpoint is tolerated (this engine fails the job outright past the tolerance)
    "-D", "execution.checkpointing.tolerable-failed-checkpoints=1000",
)


def submit(cli, tmp_path: Path) -> str:
    job = tmp_path / "endless_even_odd.py"
    job.write_text(ENDLESS_EVEN_ODD % ENDLESS_N)
    res = cli("run", "-d", "-p", "2", *FLAGS, "--json", str(job))
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    wait_for(lambda: all_running(jid), timeout=20, message="every subtask RUNNING")
    wait_for(lambda: completed(jid) >= 1, timeout=20, message="a completed checkpoint")
    return jid


def restarted(jid: str, n: int) -> Any:
    return lambda: (job := all_running(jid)) is not None and job["restarts"] >= n and job


def pid_of(jid: str, vertex_name_part: str, subtask: int) -> int:
    (s,) = [s for v in job_show(jid)["vertices"] if vertex_name_part in v["name"] for s in v["subtasks"] if s["subtask"] == subtask]
    return s["pid"]


def stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


# -- pure ------------------------------------------------------------------------------------


def test_chaos_schedule_is_the_same_for_the_same_seed() -> None:
    kinds = ["kill-task", "kill-taskmanager", "raise", "fail-checkpoint", "pause-task"]
    seed = random.randrange(2**31)
    print(f"seed {seed}")
    a = plan(seed, 60, 5, kinds)
    assert a == plan(seed, 60, 5, kinds)
    assert len(a) == 12 and all(i * 5 <= f.at_s < (i + 1) * 5 for i, f in enumerate(a))
    assert all(f.pause_s < 5 for f in a) and {f.kind for f in a} <= set(kinds)
    assert any(x != y for x, y in zip(a, plan(seed + 1, 60, 5, kinds)))
    assert choose([(2, 1), (1, 0), (1, 1)], 0.0) == (1, 0) == choose([(1, 1), (1, 0)], 0.4)
    with pytest.raises(ValueError):
        plan(seed, 10, 2, ["network"])


# -- job faults ------------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_job_faults_fail_and_recover_and_are_journaled(cluster, cli, flinkpy_home: Path, tmp_path: Path) -> None:
    jid = submit(cli, tmp_path)

    entry = cli_json("fault", "raise", jid, "--vertex", "sums", "--subtask", "0", "--after", "10")
    assert entry["target"]["operator"] == "sums" and entry["target"]["subtask"] == 0, entry
    wait_for(restarted(jid, 1), timeout=20, message="a restart after the injected exception")
    assert any("InjectedFault" in e["exceptionName"] and "sums" in e["message"] and e["restarted"] for e in exception_entries(jid))

    pid = pid_of(jid, "numbers", 1)
    entry = cli_json("fault", "kill-task", jid, "--vertex", "numbers", "--subtask", "1")
    assert entry["target"]["pid"] == pid
    wait_for(restarted(jid, 2), timeout=20, message="a restart after the killed task")
    assert any(f"pid {pid}) was killed by signal SIGKILL" in e["message"] for e in exception_entries(jid))
    # the root cause is the kill (not a consumer's connection reset, whichever came first)
    root = cli_json("job", "exceptions", jid)["root-exception"]
    assert f"pid {pid}) was killed by signal SIGKILL" in root, root

    failed_before = cli_json("checkpoint", "list", jid)["counts"]["failed"]
    cli_json("fault", "fail-checkpoint", jid, "--count", "2")
    # by the counts, not the history: at a checkpoint every 100 ms both declined ones can leave a
    # history of 10 between two polls
    wait_for(lambda: cli_json("checkpoint", "list", jid)["counts"]["failed"] >= failed_before + 2, timeout=60,
             message="two checkpoints declined by the injected fault")
    latest_failed = json.dumps(cli_json("checkpoint", "list", jid)["latest"]["failed"])
    assert "flinkpy fault fail-checkpoint" in latest_failed, latest_failed
    assert all_running(jid) is not None

    pid = pid_of(jid, "sums", 1)
    # 3 s: on a loaded machine the CLI's own exit can outlast a shorter pause before the first look
    seeded = cli_json("fault", "pause-task", jid, "--for", "3s", "--vertex", "sums", "--seed", "5")
    assert seeded["seed"] == 5 and seeded["target"]["pid"] in (pid, pid_of(jid, "sums", 0))
    paused = seeded["target"]["pid"]
    wait_for(lambda: stopped(paused), timeout=10, message="the task stopped")
    wait_for(lambda: not stopped(paused), timeout=10, message="the task resumed")
    n = completed(jid)
    wait_for(lambda: completed(jid) >= n + 2, timeout=20, message="checkpoints after the pause")

    history = cli_json("fault", "history", jid)["faults"]
    assert [e["kind"] for e in history] == ["raise", "kill-task", "fail-checkpoint", "pause-task"], history
    assert all(e["state-before"] == "RUNNING" and e["state-after"] == "RUNNING" for e in history), history
    assert [e["restarts-before"] for e in history] == [0, 1, 2, 2]
    # each fault shows its own effect (up to the next fault), not the job's figures when read
    assert [e["restarts-after"] for e in history] == [1, 2, 2, 2], history
    text = cli("fault", "history", jid)
    assert text.returncode == 0 and "kill-task" in text.stdout and "RUNNING -> RUNNING" in text.stdout, text.stdout

    # unknown targets are refused (exit 4), nothing is journaled for them
    for args in (["kill-task", jid, "--vertex", "no-such-vertex"], ["kill-task", jid, "--vertex", "sums", "--subtask", "7"],
                 ["kill-task", "0" * 32], ["raise", "f" * 32, "--vertex", "sums"], ["kill-taskmanager", "tm-nope"],
                 ["history", "0" * 32]):
        res = cli("fault", *args)
        assert res.returncode == 4, (args, res.returncode, res.stderr)
    assert len(cli_json("fault", "history", jid)["faults"]) == 4
    cancel_and_check_cuts(cli, jid, flinkpy_home, after_restore=2)


# -- cluster faults --------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_cluster_faults_taskmanagers_storage_and_jobmanager(cluster, cli, flinkpy_home: Path, tmp_path: Path) -> None:
    jid = submit(cli, tmp_path)
    tms = {tm.id: tm.pid for tm in cluster.taskmanagers}

    entry = cli_json("fault", "pause-taskmanager", "tm-1" if "tm-1" in tms else sorted(tms)[0], "--for", "1s")
    paused = entry["target"]["pid"]
    assert paused in tms.values() and entry["jobs"] == [jid], entry
    wait_for(lambda: stopped(paused), timeout=10, message="the TaskManager stopped")
    wait_for(lambda: not stopped(paused), timeout=10, message="the TaskManager resumed")

    failed_before = cli_json("checkpoint", "list", jid)["counts"]["failed"]
    cli_json("fault", "storage-outage", "--for", "1s")
    wait_for(lambda: cli_json("checkpoint", "list", jid)["counts"]["failed"] > failed_before, timeout=20, message="a checkpoint failed by the outage")
    latest = cli_json("checkpoint", "list", jid)
    n = latest["counts"]["completed"]
    wait_for(lambda: completed(jid) >= n + 2 and all_running(jid), timeout=30, message="checkpoints complete again after the outage")

    job = all_running(jid)
    restarts = job["restarts"]
    entry = cli_json("fault", "kill-taskmanager", "--seed", "11")
    victim = entry["target"]["taskmanager-id"]
    assert entry["seed"] == 11 and victim in tms
    wait_for(lambda: gone(tms[victim]), timeout=10, message="the TaskManager gone")
    job = wait_for(restarted(jid, restarts + 1), timeout=20, message="the job recovered on the survivor")
    assert all(s["taskmanager-id"] != victim for s in subtasks(job))
    assert any(victim in e["message"] and e["restarted"] for e in exception_entries(jid))
    kinds = [e["kind"] for e in cli_json("fault", "history", jid)["faults"]]
    assert kinds == ["pause-taskmanager", "storage-outage", "kill-taskmanager"], kinds

    res = cli("fault", "kill-jobmanager")
    assert res.returncode == 9 and "high availability" in res.stderr, res.stderr
    assert psutil.pid_exists(cluster.jobmanager_pid)
    res = cli("fault", "kill-jobmanager", "--yes", "--json")
    assert res.returncode == 0, res.stderr
    wait_for(lambda: gone(cluster.jobmanager_pid), timeout=10, message="the JobManager gone")


# -- chaos -----------------------------------------------------------------------------------


@pytest.mark.timeout(75)
def test_seeded_chaos_leaves_the_sums_exact(cluster, cli, flinkpy_home: Path, tmp_path: Path) -> None:
    seed = int(os.environ.get("FLINKPY_TEST_SEED") or random.randrange(2**31))
    print(f"chaos seed {seed} (rerun with FLINKPY_TEST_SEED={seed})")
    jid = submit(cli, tmp_path)
    res = cli("fault", "chaos", jid, "--duration", "10s", "--every", "2s", "--seed", str(seed), "--json",
              "--faults", "kill-task,kill-taskmanager,raise,fail-checkpoint,pause-task", timeout=60)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    print(res.stderr)
    assert summary["seed"] == seed and summary["planned"] == 5
    assert [f["kind"] for f in summary["injected"]] + [f["kind"] for f in summary["skipped"]] != []
    expected = [f.kind for f in plan(seed, 10, 2, ["kill-task", "kill-taskmanager", "raise", "fail-checkpoint", "pause-task"])]
    done = sorted([(f["at_s"], f["kind"]) for f in summary["injected"] + summary["skipped"]])
    assert [k for _, k in done] == expected
    assert len(cli_json("fault", "history", jid)["faults"]) == len(summary["injected"])
    job = wait_for(lambda: all_running(jid), timeout=30, message="the job RUNNING after the chaos")
    assert job["restarts"] >= summary["restarts-observed"]
    n = completed(jid)
    wait_for(lambda: completed(jid) >= n + 2, timeout=20, message="checkpoints after the chaos")
    cancel_and_check_cuts(cli, jid, flinkpy_home, after_restore=1)
