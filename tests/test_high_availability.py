"""High availability with a real ZooKeeper: the leading JobManager is SIGKILLed (once, twice in
a row, with a TaskManager lost during the failover), ZooKeeper itself goes away for a while, and
a killed JobManager comes back as a standby — and every job ends with exactly the right result.

The cluster is started through the CLI with ``--ha zookeeper`` and a 2 s ZooKeeper session
timeout (the tests' ZooKeeper ticks every 200 ms so it honours that). Commands get no address:
they find the leader through ZooKeeper, across the failovers. The job is
``examples/even_odd_sum.py`` (throttled so that it outlives the failovers); its sums are known in closed form, and its printed running sums
(at-least-once to stdout) are read back from the TaskManagers' stdout files: the final sum of a
key is the largest printed.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import EXAMPLES, all_gone_after, cli_json, wait_for

SESSION_TIMEOUT = "2s"
COUNT = 2_000_000
#: numbers per second per source subtask: the job lasts ~20 s, whatever the machine
RATE = 50_000


def expected(n: int) -> dict[str, int]:
    m, k = n // 2, (n + 1) // 2
    return {"even": m * (m + 1), "odd": k * k}


def printed_sums(home: Path) -> dict[str, int]:
    sums: dict[str, int] = {}
    for out in (home / "log").glob("taskmanager-*.out"):
        for key, value in re.findall(r"\((even|odd),(\d+)\)", out.read_text()):  # PyFlink's printed form of a typed tuple
            sums[key] = max(sums.get(key, 0), int(value))
    return sums


@pytest.fixture
def ha_cluster(zookeeper, flinkpy_home: Path, cli):
    """``start(jobmanagers=2, taskmanagers=2)`` starts an HA cluster in this test's home;
    stopped at teardown, leaving no process behind."""
    started: list[dict[str, Any]] = []

    def start(jobmanagers: int = 2, taskmanagers: int = 2, *extra: str) -> dict[str, Any]:
        res = cli("cluster", "start", *extra, "--ha", "zookeeper", "--zookeeper-quorum", zookeeper.quorum,
                  "--jobmanagers", str(jobmanagers), "--taskmanagers", str(taskmanagers), "--slots", "2",
                  "--rest-port", "0", "-D", f"high-availability.zookeeper.client.session-timeout={SESSION_TIMEOUT}",
                  "-D", "heartbeat.interval=500ms", "-D", "heartbeat.timeout=5s", "--json")
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        started.append(doc)
        return doc

    yield start
    if started:
        pids = [p["pid"] for doc in started for p in doc["high_availability"]["jobmanagers"] + doc["taskmanagers"]]
        with all_gone_after(pids):
            res = cli("cluster", "stop", "--timeout", "10s")
            assert res.returncode == 0, res.stderr


def leader() -> dict[str, Any] | None:
    return cli_json("cluster", "status")["cluster"]["high_availability"]["leader"]


def submit_even_odd(cli, count: int = COUNT) -> str:
    res = cli("run", "-d", "-p", "2", "-D", "execution.checkpointing.interval=100ms",
              "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.attempts=10",
              "-D", "restart-strategy.fixed-delay.delay=0ms", "--json", str(EXAMPLES / "even_odd_sum.py"), "--count", str(count), "--rate", str(RATE))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def job(jid: str) -> dict[str, Any]:
    return cli_json("job", "show", jid, timeout=90)


def running_under(jid: str, epoch: int, *, or_finished: bool = False) -> dict[str, Any] | None:
    """The job RUNNING with every subtask running, on the leader of ``epoch`` or a later one;
    ``or_finished``: or FINISHED there (on a loaded machine the polls, two CLI calls each, can
    miss the seconds a short job runs after a late failover)."""
    lead = leader()
    if lead is None or lead["epoch"] < epoch:
        return None
    j = job(jid)
    if or_finished and j["state"] == "FINISHED":
        return j
    tasks = [s for v in j["vertices"] for s in v["subtasks"]]
    return j if j["state"] == "RUNNING" and all(s["status"] == "RUNNING" for s in tasks) else None


def completed_checkpoints(jid: str) -> int:
    return cli_json("checkpoint", "list", jid, timeout=90)["counts"]["completed"]


def kill_leader(cli) -> dict[str, Any]:
    res = cli("fault", "kill-jobmanager", "--json")
    assert res.returncode == 0, res.stderr
    target = json.loads(res.stdout)["target"]
    wait_for(lambda: not psutil.pid_exists(target["pid"]) or psutil.Process(target["pid"]).status() == psutil.STATUS_ZOMBIE,
             timeout=10, message="the leader gone")
    return target


def finish_exactly(jid: str, home: Path) -> dict[str, Any]:
    wait_for(lambda: job(jid)["state"] in ("FINISHED", "FAILED", "CANCELED"), timeout=90, interval=0.2, message="the job to end")
    j = job(jid)
    assert j["state"] == "FINISHED", j
    assert printed_sums(home) == expected(COUNT)
    return j


# -- failovers -----------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_killed_leader_a_standby_takes_over_and_the_job_ends_exactly(ha_cluster, cli, flinkpy_home: Path) -> None:
    ha_cluster(jobmanagers=2)
    first = leader()
    assert first is not None and first["epoch"] >= 1
    jid = submit_even_odd(cli)
    wait_for(lambda: completed_checkpoints(jid) >= 3, timeout=30, message="3 checkpoints")
    from flinkpy.client import Client

    # a savepoint schedule set while the job runs must survive the failover too
    Client.from_environment().cluster.set_savepoint_schedule(jid, 3_600_000, max_count=3)
    # a task failure before the failover: its exception and restart must survive the failover
    assert cli("fault", "kill-task", jid, "--vertex", "running sums", "--subtask", "0").returncode == 0
    wait_for(lambda: job(jid)["restarts"] >= 1 and running_under(jid, first["epoch"]), timeout=30, message="the task restarted")
    before = cli_json("checkpoint", "list", jid)["counts"]

    target = kill_leader(cli)
    killed_at = time.monotonic()
    assert target["id"] == first["id"]
    j = wait_for(lambda: running_under(jid, first["epoch"] + 1), timeout=30, interval=0.05, message="the job RUNNING on a new leader")
    print(f"JobManager failover: job RUNNING again {time.monotonic() - killed_at:.2f}s after the kill (session timeout {SESSION_TIMEOUT})")
    assert leader()["id"] != first["id"]
    assert j["jid"] == jid  # the same job, recovered by the new leader
    assert any(e["type"] == "recovered-by-leader" for e in j["events"]), j["events"]

    # histories survived: restarts, exceptions, checkpoint counts and the restore point
    assert j["restarts"] >= 1
    assert (j["savepoints"]["schedule"]["interval"], j["savepoints"]["schedule"]["max-count"]) == (3_600_000, 3)
    entries = cli_json("job", "exceptions", jid)["exceptionHistory"]["entries"]
    assert any("SIGKILL" in e["message"] for e in entries), entries
    stats = cli_json("checkpoint", "list", jid)
    assert stats["counts"]["completed"] >= before["completed"]
    assert stats["latest"]["restored"] is not None and stats["latest"]["restored"]["id"] >= 3
    # the CLI keeps working with no address: `list` finds the job on the new leader (once the
    # leader's address reached the home, which a loaded machine may take a moment to write)
    wait_for(lambda: [x["jid"] for x in cli_json("list")["jobs"]] == [jid], timeout=20,
             message="flinkpy list shows the job on the new leader")

    finish_exactly(jid, flinkpy_home)


@pytest.mark.timeout(150)
def test_two_leaders_killed_in_a_row_and_a_taskmanager_lost_during_the_failover(ha_cluster, cli, flinkpy_home: Path) -> None:
    doc = ha_cluster(jobmanagers=3, taskmanagers=2)
    jid = submit_even_odd(cli)
    wait_for(lambda: completed_checkpoints(jid) >= 2, timeout=30, message="2 checkpoints")
    epoch = leader()["epoch"]

    kill_leader(cli)
    # a TaskManager dies while no JobManager leads: the new leader runs the job on the other one
    tm = doc["taskmanagers"][1]
    psutil.Process(tm["pid"]).kill()
    wait_for(lambda: running_under(jid, epoch + 1), timeout=40, interval=0.05, message="RUNNING after the first failover")
    wait_for(lambda: completed_checkpoints(jid) >= 1 and cli_json("checkpoint", "list", jid)["latest"]["completed"] is not None,
             timeout=30, message="a checkpoint under the second leader")

    second = leader()
    kill_leader(cli)
    wait_for(lambda: running_under(jid, second["epoch"] + 1), timeout=40, interval=0.05, message="RUNNING after the second failover")
    status = cli_json("cluster", "status")
    # the supervisor starts killed JobManagers again: whoever is alive besides the leader stands by
    alive = [jm for jm in status["cluster"]["high_availability"]["jobmanagers"] if jm["alive"]]
    assert [jm["role"] for jm in alive].count("leader") == 1 and all(jm["role"] in ("leader", "standby") for jm in alive), alive
    finish_exactly(jid, flinkpy_home)


@pytest.mark.timeout(120)
def test_a_restarted_jobmanager_joins_as_a_standby_and_can_lead(ha_cluster, cli, flinkpy_home: Path) -> None:
    # by hand: the supervisor must not bring the killed one back (it would contend with the added one)
    ha_cluster(2, 2, "-D", "high-availability.jobmanager-restart.enabled=false")
    first = leader()
    kill_leader(cli)
    wait_for(lambda: (leader() or {}).get("epoch", 0) > first["epoch"], timeout=20, message="a new leader")
    added = cli_json("cluster", "add-jobmanager")
    roles = {jm["id"]: jm["role"] for jm in cli_json("cluster", "status")["cluster"]["high_availability"]["jobmanagers"] if jm["alive"]}
    assert roles[added["id"]] == "standby", roles

    jid = submit_even_odd(cli)
    wait_for(lambda: completed_checkpoints(jid) >= 2, timeout=30, message="2 checkpoints")
    second = leader()
    kill_leader(cli)
    wait_for(lambda: running_under(jid, second["epoch"] + 1), timeout=30, interval=0.05, message="RUNNING on the added JobManager")
    assert leader()["id"] == added["id"]
    finish_exactly(jid, flinkpy_home)


# -- ZooKeeper goes away -------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_zookeeper_outage_stops_the_leader_and_jobs_recover_when_it_returns(ha_cluster, zookeeper, cli, flinkpy_home: Path) -> None:
    doc = ha_cluster(jobmanagers=2)
    jid = submit_even_odd(cli)
    wait_for(lambda: completed_checkpoints(jid) >= 2, timeout=30, message="2 checkpoints")
    rest = {jm["id"]: None for jm in doc["high_availability"]["jobmanagers"]}
    for path in (flinkpy_home / "jobmanagers").glob("*.json"):
        info = json.loads(path.read_text())
        rest[info["id"]] = info["rest_address"]
    token = (flinkpy_home / "secret").read_text().strip()

    zookeeper.stop()
    from flinkpy.network.rest_client import RestClient
    from flinkpy.errors import FlinkpyError

    def leading() -> list[str]:
        """JobManagers that answer as a leader (a standby answers 503, a restarting one not at all)."""
        out = []
        for jm_id, address in rest.items():
            try:
                RestClient(address, token, timeout_s=1).overview()
                out.append(jm_id)
            except FlinkpyError:
                pass
        return out

    # no split brain: once the session is gone, nobody leads
    wait_for(lambda: leading() == [], timeout=15, interval=0.1, message="the leader to stop leading")
    zookeeper.start()
    wait_for(lambda: running_under(jid, 1), timeout=60, interval=0.1, message="the job RUNNING again after the outage")
    assert len(leading()) <= 1
    finish_exactly(jid, flinkpy_home)


def test_start_without_zookeeper_says_what_to_do(cli, flinkpy_home: Path) -> None:
    res = cli("cluster", "start", "--ha", "zookeeper", "--zookeeper-quorum", "127.0.0.1:1",
              "-D", "high-availability.zookeeper.client.connection-timeout=1s")
    assert res.returncode == 3, res.stderr
    assert "cannot reach ZooKeeper at 127.0.0.1:1" in res.stderr and "flinkpy zookeeper start" in res.stderr
    res = cli("cluster", "start", "--jobmanagers", "2")
    assert res.returncode == 2 and "high availability" in res.stderr
