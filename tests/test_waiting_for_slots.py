"""A job that lost its only TaskManager waits for slots, says so, and resumes when one joins."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

import psutil
import pytest

from flinkpy.errors import ExitCode

from conftest import wait_for

JOB = textwrap.dedent(
    """
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(lambda n: n % 5).reduce(lambda a, b: a + b).uid("sums").add_sink(lambda v: None))
    env.execute("waits-for-slots")
    """
)


@pytest.mark.timeout(90)
def test_restart_waits_for_a_taskmanager_and_resumes_when_one_is_added(flinkpy_home: Path, cli, tmp_path: Path) -> None:
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster

    from flinkpy.config import load_config

    home = ClusterHome(flinkpy_home)
    # the supervisor would start the lost TaskManager again (tests/test_supervision.py): here it must not
    info = start_cluster(home, taskmanagers=1, slots=2, rest_port=0,
                         config=load_config(env={}, overrides={"resourcemanager.taskmanager-restart.enabled": "false"}))
    try:
        job = tmp_path / "job.py"
        job.write_text(JOB)
        res = cli("run", "-d", "-p", "2", "-D", "execution.checkpointing.interval=100ms",
                  "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.delay=0s",
                  "-D", "restart-strategy.fixed-delay.attempts=5", "--json", str(job))
        assert res.returncode == 0, res.stderr
        jid = json.loads(res.stdout)["jobs"][0]["jid"]

        def show() -> dict:
            return json.loads(cli("job", "show", jid, "--json").stdout)

        def checkpoints() -> int:
            return json.loads(cli("checkpoint", "list", jid, "--json").stdout)["counts"]["completed"]

        wait_for(lambda: checkpoints() >= 2, timeout=30, message="two checkpoints")
        tm = psutil.Process(info.taskmanagers[0].pid)
        os.kill(tm.pid, signal.SIGKILL)
        wait_for(lambda: any(e["type"] == "waiting-for-resources" for e in show()["events"]), timeout=30,
                 message="the job to say it waits for slots")
        assert show()["state"] == "RESTARTING"
        added = cli("cluster", "add-taskmanager", "--slots", "2", "--json")
        assert added.returncode == 0, added.stderr
        new_tm = json.loads(added.stdout)["id"]
        wait_for(lambda: show()["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in show()["vertices"]),
                 timeout=30, message="the job running again")
        doc = show()
        assert doc["restarts"] >= 1
        assert {s["taskmanager-id"] for v in doc["vertices"] for s in v["subtasks"]} == {new_tm}
        # the wait was retried on every tick; the JobManager's log says it once
        jm_log = (flinkpy_home / "log" / "jobmanager.log").read_text()
        assert jm_log.count(f"job {jid} waits for 2 slot(s) to restart") == 1, jm_log[-3000:]
        restored = json.loads(cli("checkpoint", "list", jid, "--json").stdout)["latest"]["restored"]
        assert restored is not None and restored["id"] >= 2
        assert cli("cancel", jid).returncode == 0
        wait_for(lambda: show()["state"] == "CANCELED", timeout=30)
    finally:
        stop_cluster(home, timeout_s=10)


@pytest.mark.timeout(120)
def test_a_submitted_job_waits_for_slots_other_jobs_hold(flinkpy_home: Path, cli, tmp_path: Path) -> None:
    """Flink's slot.request.timeout: a job submitted while its slots are taken (the runbook's
    `cancel` then `run`) waits and runs when they are released; it fails when the wait times out,
    can be cancelled while it waits, and a job that needs more slots than the cluster has fails at
    once."""
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster

    home = ClusterHome(flinkpy_home)
    start_cluster(home, taskmanagers=1, slots=2, rest_port=0)
    try:
        job = tmp_path / "job.py"
        job.write_text(JOB)

        def submit(*extra: str, state: str = "CREATED") -> str:
            res = cli("run", "-d", "-p", "2", "--json", *extra, str(job))
            assert res.returncode == 0, res.stderr
            (submitted,) = json.loads(res.stdout)["jobs"]
            assert submitted["state"] in ((state, "RUNNING") if state == "RUNNING" else (state,)), submitted
            return submitted["jid"]

        def show(jid: str) -> dict:
            return json.loads(cli("job", "show", jid, "--json").stdout)

        first = submit(state="RUNNING")
        wait_for(lambda: show(first)["state"] == "RUNNING", timeout=30, message="the first job running")
        second = submit()  # both slots are the first job's
        wait_for(lambda: any(e["type"] == "waiting-for-resources" for e in show(second)["events"]), timeout=30,
                 message="the second job to say it waits for slots")
        assert show(second)["state"] == "CREATED"
        impatient = submit("-D", "slot.request.timeout=1s")
        cancelled = submit()
        assert cli("cancel", cancelled).returncode == 0
        wait_for(lambda: show(cancelled)["state"] == "CANCELED", timeout=30, message="the waiting job CANCELED")
        wait_for(lambda: show(impatient)["state"] == "FAILED", timeout=30, message="the impatient job FAILED")
        cause = json.loads(cli("job", "exceptions", impatient, "--json").stdout)["root-exception"]
        assert "slot.request.timeout" in cause and "NoResourceAvailable" in cause
        assert cli("cancel", first).returncode == 0
        wait_for(lambda: show(second)["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in show(second)["vertices"]),
                 timeout=30, message="the waiting job running on the released slots")
        res = cli("run", "-d", "-p", "3", str(job))  # more than the cluster has: no waiting
        # it failed before running: -d says so with the job's exit code, and the id on stdout
        assert res.returncode == ExitCode.JOB_FAILED, (res.returncode, res.stderr)
        assert "waits for slots" not in res.stderr and "NoResourceAvailableException" in res.stderr
        failed = res.stderr.split("JobID ")[1].split()[0]
        assert res.stdout == failed + "\n"
        assert show(failed)["state"] == "FAILED"
        assert cli("cancel", second).returncode == 0
    finally:
        stop_cluster(home, timeout_s=10)


@pytest.mark.timeout(90)
def test_a_restart_waits_for_slots_no_longer_than_slot_request_timeout(flinkpy_home: Path, cli, tmp_path: Path) -> None:
    """No job waits in RESTARTING forever: each slot.request.timeout spent waiting is a failed
    attempt of the restart strategy, and once the strategy gives up the job FAILS, saying why."""
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster
    from flinkpy.config import load_config

    home = ClusterHome(flinkpy_home)
    info = start_cluster(home, taskmanagers=1, slots=2, rest_port=0,
                         config=load_config(env={}, overrides={"resourcemanager.taskmanager-restart.enabled": "false"}))
    try:
        job = tmp_path / "job.py"
        job.write_text(JOB)
        res = cli("run", "-d", "-p", "2", "-D", "slot.request.timeout=1s", "-D", "restart-strategy.type=fixed-delay",
                  "-D", "restart-strategy.fixed-delay.delay=0s", "-D", "restart-strategy.fixed-delay.attempts=2", "--json", str(job))
        assert res.returncode == 0, res.stderr
        jid = json.loads(res.stdout)["jobs"][0]["jid"]

        def show() -> dict:
            return json.loads(cli("job", "show", jid, "--json").stdout)

        wait_for(lambda: show()["state"] == "RUNNING", timeout=30, message="the job running")
        os.kill(info.taskmanagers[0].pid, signal.SIGKILL)
        # attempt 1 is the TaskManager's loss, attempt 2 the first timed-out wait; the second one fails it
        wait_for(lambda: show()["state"] == "FAILED", timeout=30, message="the job FAILED after its waits timed out")
        doc = show()
        assert sum(e["type"] == "restarting" and "slot.request.timeout" in e.get("cause", "") for e in doc["events"]) == 1, doc["events"]
        cause = json.loads(cli("job", "exceptions", jid, "--json").stdout)["root-exception"]
        assert "NoResourceAvailableException" in cause and "slot.request.timeout (1000 ms)" in cause
    finally:
        stop_cluster(home, timeout_s=10)
