"""A cluster that heals: its supervisor starts dead TaskManagers (and, under HA, JobManagers)
again, `cluster stop` stops it first, and an embedded cluster dies with its client.

The rules themselves (backoff, reset, giving up) are tested on the pure state machine with
made-up times; the rest with real processes and SIGKILL.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import ROOT, all_gone_after, cli_json, wait_for
from flinkpy.cluster.supervision import ClusterLost, GiveUp, RestartPolicy, Respawn, Supervision, Waiting, policies_from_config

# -- the rules ---------------------------------------------------------------------------------------

POLICY = RestartPolicy(initial_backoff_ms=100, max_backoff_ms=400, reset_threshold_ms=10_000, max_attempts=4)


def crash(s: Supervision, proc_id: str, at: int) -> list[Any]:
    """The process dies at ``at``; returns what the supervisor decided (and restarts it when due)."""
    decided = s.exited(proc_id, at)
    for a in decided:
        if isinstance(a, Waiting):
            assert s.due(at + a.backoff_ms - 1) == []
            assert s.due(at + a.backoff_ms) == [Respawn(proc_id, a.attempt)]
            s.started(proc_id, "taskmanager", at + a.backoff_ms)
    return decided


def test_backoff_doubles_up_to_the_max_and_a_stable_run_resets_it() -> None:
    s = Supervision({"taskmanager": POLICY}, ha=False)
    s.started("tm-1", "taskmanager", 0)
    backoffs = [crash(s, "tm-1", t)[0].backoff_ms for t in (10, 2_000, 4_000)]
    assert backoffs == [100, 200, 400]
    # ran 10 s before dying: a fresh sequence
    assert crash(s, "tm-1", 4_400 + 10_000) == [Waiting("tm-1", 100, 1)]


def test_a_crash_loop_is_given_up_after_max_attempts() -> None:
    s = Supervision({"taskmanager": POLICY}, ha=False)
    s.started("tm-1", "taskmanager", 0)
    decided = [crash(s, "tm-1", 1_000 * i)[0] for i in range(1, 6)]
    assert [type(a) for a in decided] == [Waiting] * 4 + [GiveUp]
    assert "max-attempts 4" in decided[-1].reason
    assert s.due(100_000) == []


def test_disabled_restarts_and_a_lost_jobmanager_without_ha() -> None:
    off = Supervision({"taskmanager": RestartPolicy(enabled=False)}, ha=False)
    off.started("tm-1", "taskmanager", 0)
    assert off.exited("tm-1", 5) == [GiveUp("tm-1", "restarts are disabled")]

    # an embedded cluster (restart_lone_jobmanager False) ends with its JobManager
    s = Supervision({"taskmanager": POLICY, "jobmanager": POLICY}, ha=False)
    s.started("jobmanager", "jobmanager", 0)
    s.started("tm-1", "taskmanager", 0)
    assert isinstance(s.exited("jobmanager", 10)[0], ClusterLost)
    assert isinstance(s.exited("tm-1", 20)[0], GiveUp)  # it stops with its JobManager
    # a background cluster's lone JobManager is started again, and its TaskManagers too
    bg = Supervision({"taskmanager": POLICY, "jobmanager": POLICY}, ha=False, restart_lone_jobmanager=True)
    bg.started("jobmanager", "jobmanager", 0)
    bg.started("tm-1", "taskmanager", 0)
    assert bg.exited("jobmanager", 10) == [Waiting("jobmanager", 100, 1)]
    assert bg.exited("tm-1", 20) == [Waiting("tm-1", 100, 1)]
    ha = Supervision({"taskmanager": POLICY, "jobmanager": POLICY}, ha=True)
    ha.started("jm-1", "jobmanager", 0)
    assert ha.exited("jm-1", 10) == [Waiting("jm-1", 100, 1)]


def test_policies_come_from_flink_style_keys() -> None:
    from flinkpy.config import load_config

    cfg = load_config(env={}, overrides={"resourcemanager.taskmanager-restart.backoff.initial": "250ms",
                                         "high-availability.jobmanager-restart.enabled": "false"})
    policies = policies_from_config(cfg)
    assert policies["taskmanager"].enabled and policies["taskmanager"].initial_backoff_ms == 250
    assert not policies["jobmanager"].enabled and policies["jobmanager"].initial_backoff_ms == 250
    assert policies_from_config(None)["taskmanager"] == RestartPolicy()


# -- real processes ----------------------------------------------------------------------------------

FOREVER = textwrap.dedent(
    """
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(lambda n: n % 5).reduce(lambda a, b: a + b).uid("sums").add_sink(lambda v: None))
    env.execute("forever")
    """
)


def running_everywhere(jid: str) -> dict[str, Any] | None:
    doc = cli_json("job", "show", jid)
    tasks = [s for v in doc["vertices"] for s in v["subtasks"]]
    return doc if doc["state"] == "RUNNING" and all(s["status"] == "RUNNING" for s in tasks) else None


@pytest.mark.timeout(120)
def test_a_killed_taskmanager_is_started_again_and_the_job_runs_again(flinkpy_home: Path, cli, tmp_path: Path) -> None:
    started = cli_json("cluster", "start", "--taskmanagers", "1", "--slots", "2", "--rest-port", "0",
                       "-D", "resourcemanager.taskmanager-restart.backoff.initial=200ms")
    supervisor = started["supervisor"]
    assert supervisor["alive"]
    pids = [started["jobmanager"]["pid"], started["taskmanagers"][0]["pid"], supervisor["pid"]]
    try:
        job = tmp_path / "job.py"
        job.write_text(FOREVER)
        res = cli("run", "-d", "-p", "2", "-D", "execution.checkpointing.interval=100ms", "-D", "restart-strategy.type=fixed-delay",
                  "-D", "restart-strategy.fixed-delay.delay=0s", "-D", "restart-strategy.fixed-delay.attempts=5", "--json", str(job))
        assert res.returncode == 0, res.stderr
        jid = json.loads(res.stdout)["jobs"][0]["jid"]
        wait_for(lambda: cli_json("checkpoint", "list", jid)["counts"]["completed"] >= 2, timeout=30, message="two checkpoints")
        victim = started["taskmanagers"][0]
        os.kill(victim["pid"], signal.SIGKILL)

        def replaced() -> dict[str, Any] | None:
            tms = cli_json("cluster", "status")["cluster"]["taskmanagers"]
            return tms[0] if tms and tms[0]["pid"] != victim["pid"] and tms[0]["restarts"] == 1 else None

        tm = wait_for(replaced, timeout=30, message="tm-1 started again by the supervisor")
        assert tm["id"] == "tm-1" and tm["log"] == victim["log"]  # same id, same log file (appended)
        doc = wait_for(lambda: running_everywhere(jid), timeout=40, message="the job RUNNING again, without add-taskmanager")
        assert doc["restarts"] >= 1
        assert {s["taskmanager-id"] for v in doc["vertices"] for s in v["subtasks"]} == {"tm-1"}
        assert "started taskmanager tm-1 again" in (flinkpy_home / "log" / "supervisor.log").read_text()
        # people see it too: the supervisor, and tm-1's restart in its row
        text = cli("cluster", "status", env={"COLUMNS": "100"}).stdout
        assert text.startswith("Supervisor: pid "), text
        header = next(line for line in text.splitlines() if "Restarts" in line)
        row = next(line for line in text.splitlines() if re.match(r"│ tm-1 ", line))
        cells = lambda line: [c.strip() for c in re.split(r"[┃│]", line)]  # noqa: E731
        assert cells(row)[cells(header).index("Restarts")] == "1", text
        assert cli("cancel", jid).returncode == 0
    finally:
        with all_gone_after(pids + [tm["pid"] for tm in cli_json("cluster", "status")["cluster"]["taskmanagers"]]):
            res = cli("cluster", "stop", "--timeout", "10s")
            assert res.returncode == 0, res.stderr
    # the supervisor went first: nothing was started again during the stop
    assert not psutil.pid_exists(supervisor["pid"]) or psutil.Process(supervisor["pid"]).status() == psutil.STATUS_ZOMBIE
    assert not (flinkpy_home / "cluster.json").exists()


def embedded_homes(tmpdir: Path) -> list[Path]:
    return sorted(tmpdir.glob("flinkpy-embedded-*"))


def processes_of(home: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if str(home) in " ".join(p.info.get("cmdline") or []) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            pass
    return found


@pytest.mark.timeout(120)
def test_a_killed_jobmanager_without_ha_comes_back_at_the_same_address(flinkpy_home: Path, cli, tmp_path: Path) -> None:
    """A background cluster without HA: its JobManager, SIGKILLed, is started again at the same
    REST address, its TaskManagers register with the new one, and jobs run on it (the old
    job is gone with the old JobManager, as in Flink without HA)."""
    started = cli_json("cluster", "start", "--taskmanagers", "2", "--rest-port", "0",
                       "-D", "resourcemanager.taskmanager-restart.backoff.initial=200ms")
    old_jm = started["jobmanager"]
    try:
        job = tmp_path / "job.py"
        job.write_text(FOREVER)
        res = cli("run", "-d", "--json", str(job))
        assert res.returncode == 0, res.stderr
        os.kill(old_jm["pid"], signal.SIGKILL)

        def healed() -> dict[str, Any] | None:
            res = cli("cluster", "status", "--json")
            if res.returncode != 0:
                return None
            doc = json.loads(res.stdout)
            ready = (doc["cluster"]["jobmanager"]["pid"] != old_jm["pid"] and doc["overview"]["taskmanagers"] == 2
                     and doc["cluster"]["rest_address"] == started["rest_address"])
            return doc if ready else None

        doc = wait_for(healed, timeout=60, message="a new JobManager at the same address, with both TaskManagers")
        assert doc["cluster"]["jobmanager"]["restarts"] == 1
        # without HA the old job is not restarted: the new JobManager lists it LOST, with how to resume it
        old_jobs = cli_json("list", "-a")["jobs"]
        assert [j["state"] for j in old_jobs] == ["LOST"], old_jobs
        res = cli("run", "-d", "--json", str(job))
        assert res.returncode == 0, res.stderr
        jid = json.loads(res.stdout)["jobs"][0]["jid"]
        wait_for(lambda: running_everywhere(jid), timeout=30, message="a new job running on the healed cluster")
        assert "the jobs it ran are gone" in (flinkpy_home / "log" / "supervisor.log").read_text()
    finally:
        res = cli("cluster", "stop", "--timeout", "10s")
        assert res.returncode == 0, res.stderr


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how, sig", [("flinkpy run", signal.SIGKILL), ("flinkpy run", signal.SIGTERM), ("python JOB.py", signal.SIGKILL)])
def test_an_embedded_cluster_dies_with_its_client(how: str, sig: signal.Signals, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    job = tmp_path / "job.py"
    job.write_text(FOREVER)
    env = {k: v for k, v in os.environ.items() if k not in ("FLINKPY_HOME", "FLINKPY_JOBMANAGER")}
    env.update(TMPDIR=str(tmpdir), FLINKPY_HOME=str(tmp_path / "no-cluster-here"))
    cmd = [sys.executable, "-m", "commands.main", "run", str(job)] if how == "flinkpy run" else [sys.executable, str(job)]
    client = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        home = wait_for(lambda: (embedded_homes(tmpdir) or [None])[0], timeout=30, message="the embedded cluster's home")
        # the job runs: its tasks exist (forked by the TaskManager's launcher)
        wait_for(lambda: (home / "cluster.json").exists() and any(
            "flinkpy.taskmanager.zygote" in " ".join(c.cmdline()) for p in processes_of(home) for c in p.children(recursive=True)
        ), timeout=30, message="the embedded cluster running the job")
        before = processes_of(home)
        kinds = {next(m for m in ("cluster.supervisor", "jobmanager", "taskmanager") if m in " ".join(p.cmdline())) for p in before}
        assert kinds == {"jobmanager", "taskmanager", "cluster.supervisor"}, before
        tree = [q for p in before for q in [p, *p.children(recursive=True)]]
        client.send_signal(sig)
        client.wait(10)
        from flinkpy.cluster.spawning import wait_gone

        left = wait_gone(tree, 20)  # a zombie counts as gone: it waits for init, holding nothing
        assert not left, f"left behind: {left}"
        wait_for(lambda: not home.exists(), timeout=20, message="the embedded home (and its secret) removed")
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        client.stderr.close()  # type: ignore[union-attr]


@pytest.mark.timeout(90)
def test_a_taskmanager_paused_past_the_heartbeat_timeout_registers_again_when_it_wakes(flinkpy_home: Path, cli, tmp_path: Path) -> None:
    """Frozen (SIGSTOP) past heartbeat.timeout, the TaskManager is declared lost and its tasks
    failed; woken (SIGCONT), the same process drops those tasks and offers its slots again, and
    the job that waited for them runs on it. (No supervisor here: nothing may replace it.)"""
    started = cli_json("cluster", "start", "--taskmanagers", "1", "--slots", "2", "--rest-port", "0",
                       "-D", "heartbeat.interval=200ms", "-D", "heartbeat.timeout=1s",
                       "-D", "resourcemanager.taskmanager-restart.enabled=false")
    tm_pid = started["taskmanagers"][0]["pid"]
    try:
        job = tmp_path / "job.py"
        job.write_text(FOREVER)
        res = cli("run", "-d", "-p", "2", "-D", "execution.checkpointing.interval=100ms", "-D", "restart-strategy.type=fixed-delay",
                  "-D", "restart-strategy.fixed-delay.delay=0s", "-D", "restart-strategy.fixed-delay.attempts=5", "--json", str(job))
        assert res.returncode == 0, res.stderr
        jid = json.loads(res.stdout)["jobs"][0]["jid"]
        before = wait_for(lambda: running_everywhere(jid), timeout=30, message="the job running")
        old_tasks = {s["pid"] for v in before["vertices"] for s in v["subtasks"]}
        os.kill(tm_pid, signal.SIGSTOP)
        try:
            wait_for(lambda: cli_json("cluster", "status")["overview"]["taskmanagers"] == 0, timeout=20,
                     message="the paused TaskManager declared lost")
        finally:
            os.kill(tm_pid, signal.SIGCONT)
        tms = wait_for(lambda: cli_json("cluster", "status")["taskmanagers"], timeout=20, message="the TaskManager registered again")
        assert [(tm["id"], tm["pid"]) for tm in tms] == [("tm-1", tm_pid)], tms
        after = wait_for(lambda: running_everywhere(jid), timeout=30, message="the job running on it again")
        assert after["restarts"] >= 1
        assert not old_tasks & {s["pid"] for v in after["vertices"] for s in v["subtasks"]}
        wait_for(lambda: not [p for p in old_tasks if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE],
                 timeout=10, message="the tasks it ran before the pause gone")
        assert cli("cancel", jid).returncode == 0
    finally:
        with all_gone_after([tm_pid, started["jobmanager"]["pid"]]):
            assert cli("cluster", "stop", "--timeout", "10s").returncode == 0


FAILS_ALWAYS = textwrap.dedent(
    """
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    def boom(n):
        raise ValueError(f"boom at {n}")

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers").map(boom).print()
    env.execute("fails-always")
    """
)


@pytest.mark.timeout(90)
def test_an_attached_run_says_as_it_happens_that_the_job_fails_and_restarts(tmp_path: Path) -> None:
    """A job that fails the same way on every restart is visible within seconds on stderr (one
    line per event, with the cause), not a silent loop; stdout stays the job's."""
    job = tmp_path / "job.py"
    job.write_text(FAILS_ALWAYS)
    env = {k: v for k, v in os.environ.items() if k not in ("FLINKPY_HOME", "FLINKPY_JOBMANAGER")}
    env["FLINKPY_HOME"] = str(tmp_path / "no-cluster-here")
    client = subprocess.Popen(
        [sys.executable, "-m", "commands.main", "run", "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.attempts=1000",
         "-D", "restart-strategy.fixed-delay.delay=200ms", str(job)],
        cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    seen: list[str] = []
    try:
        def line_saying(text: str) -> str | None:
            line = client.stderr.readline()  # type: ignore[union-attr]
            if line:
                seen.append(line)
            return next((s for s in seen if text in s), None) or (None if line or client.poll() is None else "ended")

        first = wait_for(lambda: line_saying("to RESTARTING"), timeout=30, interval=0, message="a restart reported",
                         describe=lambda: seen)
        assert first != "ended" and "ValueError: boom at" in first and first.startswith("Job "), first
        again = wait_for(lambda: line_saying("the same failure 3 times in a row"), timeout=30, interval=0,
                         message="the repeating failure reported", describe=lambda: seen)
        assert again != "ended", seen
        assert client.poll() is None, "reported while the job still runs"
    finally:
        client.terminate()  # the embedded cluster goes with it (test_an_embedded_cluster_dies_with_its_client)
        out, _ = client.communicate(timeout=30)
    assert "RESTARTING" not in out


@pytest.mark.timeout(150)
def test_two_jobmanagers_survive_their_leader_killed_twice_in_a_row(zookeeper, flinkpy_home: Path, cli) -> None:
    """Under HA the supervisor starts a killed JobManager again and it joins as a standby: with
    two JobManagers, the second kill finds a standby to take over (before: no JobManager left)."""
    from test_high_availability import completed_checkpoints, finish_exactly, kill_leader, leader, running_under, submit_even_odd

    res = cli("cluster", "start", "--ha", "zookeeper", "--zookeeper-quorum", zookeeper.quorum, "--jobmanagers", "2",
              "--taskmanagers", "2", "--slots", "2", "--rest-port", "0", "-D", "high-availability.zookeeper.client.session-timeout=2s",
              "-D", "heartbeat.interval=500ms", "-D", "heartbeat.timeout=5s",
              "-D", "resourcemanager.taskmanager-restart.backoff.initial=200ms", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    pids = [p["pid"] for p in doc["high_availability"]["jobmanagers"] + doc["taskmanagers"]] + [doc["supervisor"]["pid"]]
    try:
        jid = submit_even_odd(cli)
        wait_for(lambda: completed_checkpoints(jid) >= 2, timeout=30, message="2 checkpoints")
        for kill in (1, 2):
            first = leader()
            target = kill_leader(cli)
            wait_for(lambda: running_under(jid, first["epoch"] + 1, or_finished=True), timeout=90, interval=0.05,
                     message=f"RUNNING (or FINISHED) after kill {kill}")

            def back_as_standby() -> dict[str, Any] | None:
                jms = cli_json("cluster", "status")["cluster"]["high_availability"]["jobmanagers"]
                again = next(jm for jm in jms if jm["id"] == target["id"])
                return again if again["alive"] and again["pid"] != target["pid"] and again["role"] == "standby" else None

            again = wait_for(back_as_standby, timeout=30, message=f"{target['id']} started again as a standby")
            assert again["restarts"] == 1
            wait_for(lambda: completed_checkpoints(jid) >= 1, timeout=30, message="a checkpoint under the new leader")
        finish_exactly(jid, flinkpy_home)
    finally:
        with all_gone_after(pids):
            assert cli("cluster", "stop", "--timeout", "10s").returncode == 0


@pytest.mark.timeout(90)
def test_an_embedded_cluster_starts_a_killed_taskmanager_again(tmp_path: Path) -> None:
    """On by default for the embedded cluster too: the attached run's job resumes on the
    TaskManager its supervisor started again, and the run says so on stderr."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    job = tmp_path / "job.py"
    job.write_text(FOREVER)
    env = {k: v for k, v in os.environ.items() if k not in ("FLINKPY_HOME", "FLINKPY_JOBMANAGER")}
    env.update(TMPDIR=str(tmpdir), FLINKPY_HOME=str(tmp_path / "no-cluster-here"))
    client = subprocess.Popen(
        [sys.executable, "-m", "commands.main", "run", "-D", "resourcemanager.taskmanager-restart.backoff.initial=100ms",
         "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.attempts=5",
         "-D", "restart-strategy.fixed-delay.delay=0s", str(job)],
        cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    seen: list[str] = []
    try:
        home = wait_for(lambda: (embedded_homes(tmpdir) or [None])[0], timeout=30, message="the embedded cluster's home")

        def taskmanagers() -> list[psutil.Process]:
            return [p for p in processes_of(home) if "flinkpy.taskmanager.process" in " ".join(p.cmdline())]


        def said(text: str) -> bool:
            line = client.stderr.readline()  # type: ignore[union-attr]
            seen.append(line)
            return any(text in s for s in seen) or not line

        wait_for(lambda: said("Job has been submitted"), timeout=30, interval=0, message="the job submitted", describe=lambda: seen)
        (tm,) = taskmanagers()
        # its tasks run: forked by its launcher (the launcher's own children)
        wait_for(lambda: any(c.children() for c in tm.children()), timeout=30, message="its tasks")
        tm.kill()

        wait_for(lambda: said("switched from RESTARTING to RUNNING"), timeout=40, interval=0, message="the job running again",
                 describe=lambda: seen)
        assert any("TaskManagerLost" in s or "disconnected" in s for s in seen), seen
        (again,) = taskmanagers()
        assert again.pid != tm.pid and client.poll() is None
    finally:
        client.terminate()
        client.communicate(timeout=30)


def test_the_reporter_words_each_event_once() -> None:
    from flinkpy.client.job_events import JobEventReporter

    r = JobEventReporter("j1")
    job: dict[str, Any] = {"state": "RUNNING", "vertices": [{"parallelism": 2}, {"parallelism": 2}], "events": []}
    assert r.lines(job, {"counts": {"failed": 0}}) == []
    job["events"] = [{"type": "restarting", "failover": "region", "tasks": 2, "backoff_ms": 0, "cause": "ValueError: x"}]
    assert r.lines(job) == ["Job j1: region failover after a failure: ValueError: x (restarting 2 task(s) in 0 ms)"]
    job["events"] += [{"type": "restarting", "tasks": 4, "backoff_ms": 50, "cause": "ValueError: x"},
                      {"type": "waiting-for-resources", "message": "no slot"}]
    job["state"] = "RESTARTING"
    failed = {"counts": {"failed": 2}, "latest": {"failed": {"id": 7, "failure_message": "storage unwritable"}}}
    assert r.lines(job, failed) == [
        "Job j1 switched from RUNNING to RESTARTING: ValueError: x (restarting 4 task(s) in 50 ms; the same failure 2 times in a row)",
        "Job j1 is waiting for slots: no slot",
        "Job j1: checkpoint 7 failed (2 failed so far): storage unwritable",
    ]
    assert r.lines(job, failed) == []  # nothing new
    job["events"] += [{"type": "restarted", "restarts": 1}, {"type": "failed", "reason": "the restart strategy gave up"}]
    assert r.lines(job) == ["Job j1 switched from RESTARTING to RUNNING (restart 1)",
                            "Job j1 switched from RUNNING to FAILING: the restart strategy gave up; last cause: ValueError: x"]


@pytest.mark.timeout(120)
def test_an_attached_run_shows_a_job_that_cannot_checkpoint(flinkpy_home: Path, cli, tmp_path: Path) -> None:
    """Checkpoint storage failing (an injected outage): every checkpoint fails and restarts the
    job; the attached run says so within seconds, and that it is the same failure again."""
    started = cli_json("cluster", "start", "--slots", "2", "--rest-port", "0")
    pids = [started["jobmanager"]["pid"], started["taskmanagers"][0]["pid"], started["supervisor"]["pid"]]
    job = tmp_path / "job.py"
    job.write_text(FOREVER)
    client = subprocess.Popen(
        [sys.executable, "-m", "commands.main", "run", "-D", "execution.checkpointing.interval=100ms",
         "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.attempts=1000",
         "-D", "restart-strategy.fixed-delay.delay=100ms", str(job)],
        cwd=str(ROOT), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    seen: list[str] = []
    try:
        def said(text: str) -> str | None:
            line = client.stderr.readline()  # type: ignore[union-attr]
            seen.append(line)
            return next((s for s in seen if text in s), None) or (None if line else "ended")

        wait_for(lambda: said("Job has been submitted"), timeout=30, interval=0, message="submitted", describe=lambda: seen)
        jid = seen[-1].split("JobID ")[1].split()[0]
        wait_for(lambda: cli_json("checkpoint", "list", jid)["counts"]["completed"] >= 1, timeout=30, message="a checkpoint")
        assert cli("fault", "storage-outage", "--for", "30s").returncode == 0
        line = wait_for(lambda: said("the same failure 2 times in a row"), timeout=30, interval=0,
                        message="the repeating checkpoint failure reported", describe=lambda: seen)
        assert "CheckpointException" in line and "storage" in line and line.startswith(f"Job {jid}"), line
    finally:
        client.terminate()
        client.communicate(timeout=30)
        with all_gone_after(pids):
            assert cli("cluster", "stop", "--timeout", "10s").returncode == 0
