"""How flinkpy's processes end: promptly, once, in order, and never leaving one behind.

- A run of a small job on the embedded cluster ends within seconds every time (a TaskManager
  signalled twice used to hang in its stop handler until it was killed 10 s later).
- A TaskManager sent two SIGTERMs in quick succession exits.
- A client killed while it waits for its cluster's processes to stop leaves none behind.
- Ctrl-C (SIGINT) or SIGTERM on an attached run of a job that never ends cancels the job, stops
  the embedded cluster and exits 130 / 143 with one line; on a running cluster the job keeps
  running and the line says how to cancel it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, running_cluster, wait_for
from flinkpy.processes import running

TINY_JOB = """\
from flinkpy.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1, 2, 3]).map(lambda x: x * 2).print()
env.execute("tiny")
"""

#: a job that never ends: one record every 20 ms, printed (so the test sees it run)
FOREVER_JOB = """\
import time

from flinkpy.datastream import StreamExecutionEnvironment


class Ticks:
    def __init__(self):
        self.running = True

    def run(self, ctx):
        n = 0
        while self.running:
            ctx.collect(n)
            n += 1
            time.sleep(0.02)

    def cancel(self):
        self.running = False


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.add_source(Ticks(), "ticks").print()
env.execute("forever")
"""


def _cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "commands.main", *args]


def _gone(procs: list[psutil.Process]) -> bool:
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.Error:
            continue
    return True


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


@pytest.mark.timeout(420)
def test_runs_of_a_small_job_never_stall_at_exit(tmp_path, flinkpy_home):
    """15 runs of a tiny job through the real CLI: each stops its embedded cluster within a few
    seconds of saying so. The stall it guards against was 10 s there (the stop's deadline, when
    a TaskManager hung in its stop handler), in about one run of two to four. The stop is
    timed, not the whole run: start-up on a machine shared by others takes 2-10 s."""
    job = tmp_path / "tiny.py"
    job.write_text(TINY_JOB)
    limit_s = 5.0  # the stop takes 0.3-1 s on a loaded machine; a stall made it 10 s
    runs = []
    for i in range(15):
        started = time.monotonic()
        proc = subprocess.Popen(_cli_argv("run", str(job)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT))
        stopping = None
        err = []
        for line in proc.stderr:  # stdout is small (three lines): it cannot fill its pipe meanwhile
            err.append(line)
            if "stopping the embedded local cluster" in line:
                stopping = time.monotonic()
        out = proc.stdout.read()
        proc.wait(60)
        ended = time.monotonic()
        assert proc.returncode == 0 and stopping is not None, "".join(err)
        assert sorted(out.split()) == ["2", "4", "6"], out
        runs.append((round(ended - started, 2), round(ended - stopping, 2)))
        assert ended - stopping < limit_s, f"run {i + 1} took {ended - stopping:.1f} s to stop its cluster (runs so far, total and stop: {runs})"


@pytest.mark.timeout(180)
def test_a_taskmanager_sent_two_sigterms_exits(flinkpy_home):
    """The second SIGTERM lands while the first is being carried out (the TaskManager is
    removing its unpacked job files, under their lock): the TaskManager still exits."""
    config = "resourcemanager.taskmanager-restart.enabled: false\n"
    with running_cluster(flinkpy_home, taskmanagers=1, config=config) as info:
        tm = info.taskmanagers[0]
        # what an unpacked job archive leaves: removing it takes a while
        files = flinkpy_home / "taskmanagers" / tm.id / "job" / "files"
        files.mkdir(parents=True)
        for i in range(20000):
            (files / f"m{i}.py").touch()
        proc = psutil.Process(tm.pid)
        os.kill(tm.pid, signal.SIGTERM)
        # the second one once the first is being handled: the directory starts to shrink
        wait_for(lambda: not files.exists() or len(os.listdir(files)) < 20000, timeout=20, message="the TaskManager to start its stop")
        os.kill(tm.pid, signal.SIGTERM)
        try:
            wait_for(lambda: not running(tm.pid, tm.create_time), timeout=15, message=f"TaskManager pid {tm.pid} to exit after two SIGTERMs")
        finally:
            if running(tm.pid, tm.create_time):
                proc.kill()


CLIENT_OF_EMBEDDED = """\
import subprocess, sys
from flinkpy.cluster import EmbeddedCluster

with EmbeddedCluster(slots=1, job_stdout=subprocess.DEVNULL) as c:
    print(" ".join(str(tm.pid) for tm in c.info.taskmanagers), flush=True)
    sys.stdin.readline()
    print("stopping", flush=True)
"""


def _signal_pending(pid: int, signum: int) -> bool:
    """Whether ``signum`` waits to be delivered to (stopped) process ``pid``."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    masks = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(m & (1 << (signum - 1)) for m in masks)


@pytest.mark.timeout(120)
def test_a_client_killed_while_its_cluster_stops_leaves_no_taskmanager(tmp_path):
    """The client asks its TaskManager to stop, the TaskManager does not (it is frozen), and the
    client is SIGKILLed while it waits: the supervisor ends the TaskManager all the same."""
    client = subprocess.Popen([sys.executable, "-c", CLIENT_OF_EMBEDDED], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=str(tmp_path))
    tm_pid = 0
    try:
        tm_pid = int(client.stdout.readline())
        tm = psutil.Process(tm_pid)
        os.kill(tm_pid, signal.SIGSTOP)
        client.stdin.write("\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "stopping"
        wait_for(lambda: _signal_pending(tm_pid, signal.SIGTERM), timeout=20, message="the client to send the TaskManager SIGTERM")
        client.kill()
        client.wait(10)
        wait_for(lambda: _gone([tm]), timeout=20, message=f"the supervisor to end the TaskManager (pid {tm_pid}) of the killed client")
    finally:
        if client.poll() is None:
            client.kill()
        if tm_pid:
            try:
                psutil.Process(tm_pid).kill()
            except psutil.Error:
                pass


def _start_forever(cmd: list[str], cwd: Path) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """Start an attached run of the never-ending job; returns once it prints (RUNNING), with
    the processes it started (the embedded cluster, when there is one)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(cwd), start_new_session=True)
    line = proc.stdout.readline()
    assert line.strip().isdigit(), f"the job did not print: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
    return proc, _descendants(proc.pid)


def _drain(proc: subprocess.Popen) -> str:
    """stderr of the finished ``proc`` (its stdout read to the end, so it never blocks)."""
    proc.stdout.read()
    return proc.stderr.read()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["flinkpy run", "python JOB.py"])
@pytest.mark.parametrize("signum,code,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_stop_signal_cancels_the_job_and_stops_the_embedded_cluster(tmp_path, flinkpy_home, how, signum, code, word):
    job = tmp_path / "forever.py"
    job.write_text(FOREVER_JOB)
    cmd = _cli_argv("run", str(job)) if how == "flinkpy run" else [sys.executable, str(job)]
    proc, cluster = _start_forever(cmd, ROOT if how == "flinkpy run" else tmp_path)
    assert cluster, "no embedded cluster was started"
    try:
        os.kill(proc.pid, signum)
        proc.wait(60)
        err = _drain(proc)
        assert proc.returncode == code, err
        assert "Traceback" not in err, err
        lines = [l for l in err.splitlines() if word in l]
        assert len(lines) == 1 and re.fullmatch(rf"flinkpy: {word}: job [0-9a-f]{{32}} cancelled, embedded cluster stopped", lines[0]), err
        wait_for(lambda: _gone(cluster), timeout=20, message="every process of the embedded cluster to end", describe=lambda: [p for p in cluster if not _gone([p])])
    finally:
        if proc.poll() is None:
            proc.kill()


def _jobs() -> list[dict]:
    res = subprocess.run(_cli_argv("list", "-a", "--json"), capture_output=True, text=True, cwd=str(ROOT))
    return json.loads(res.stdout or "{}").get("jobs", [])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("shutdown_on_exit", [False, True])
def test_ctrl_c_on_a_running_cluster(tmp_path, flinkpy_home, shutdown_on_exit):
    """As Flink's client on a session cluster: the client leaves, the job keeps running, and
    the line says how to cancel it; with execution.shutdown-on-attached-exit it cancels it."""
    job = tmp_path / "forever.py"
    job.write_text(FOREVER_JOB)
    flags = ["-D", "execution.shutdown-on-attached-exit=true"] if shutdown_on_exit else []
    with running_cluster(flinkpy_home, taskmanagers=1):
        proc = subprocess.Popen(_cli_argv("run", *flags, str(job)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=str(ROOT), start_new_session=True)
        try:
            listed = wait_for(lambda: [j for j in _jobs() if j.get("state") == "RUNNING"], timeout=60, message="the job to run")
            job_id = listed[0]["jid"]
            os.kill(proc.pid, signal.SIGINT)
            proc.wait(60)
            err = _drain(proc)
            assert proc.returncode == 130, err
            assert "Traceback" not in err, err
            if shutdown_on_exit:
                assert f"flinkpy: interrupted: job {job_id} cancelled\n" in err, err
                assert any(j["jid"] == job_id and j["state"] == "CANCELED" for j in _jobs())
                return
            assert f"flinkpy: interrupted: job {job_id} keeps running on the cluster at " in err, err
            assert f"(cancel it with 'flinkpy cancel {job_id}')" in err, err
            assert any(j["jid"] == job_id and j["state"] == "RUNNING" for j in _jobs())
            assert subprocess.run(_cli_argv("cancel", job_id), capture_output=True, cwd=str(ROOT)).returncode == 0
        finally:
            if proc.poll() is None:
                proc.kill()


HOSTILE = {
    "inspect.py": "open({marker!r}, 'a').write('inspect\\n')\nraise SystemExit('the working directory was imported')\n",
    "random.py": "open({marker!r}, 'a').write('random\\n')\nraise SystemExit('the working directory was imported')\n",
}


@pytest.mark.timeout(180)
def test_cluster_processes_do_not_import_the_working_directory(tmp_path, flinkpy_home):
    """``inspect.py`` and ``random.py`` in the directory where the user types: the cluster
    starts, the job runs and imports its own helper module, and no cluster process imported
    the hostile files."""
    cwd = tmp_path / "scratch"
    cwd.mkdir()
    marker = tmp_path / "imported-from-cwd"
    for name, body in HOSTILE.items():
        (cwd / name).write_text(body.format(marker=str(marker)))
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    (jobdir / "helper_mod.py").write_text("def double(x):\n    return x * 2\n")
    (jobdir / "job.py").write_text(textwrap.dedent("""\
        from flinkpy.datastream import StreamExecutionEnvironment
        import helper_mod

        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([1, 2, 3]).map(lambda x: helper_mod.double(x) + 100).print()
        env.execute("helpers")
    """))
    # a standalone cluster started from the hostile directory, and an embedded one run from it,
    # by the console script (whose own sys.path starts with its directory, not the working one)
    flinkpy = str(Path(sys.executable).parent / "flinkpy")
    env = dict(os.environ)
    start = subprocess.run([flinkpy, "cluster", "start", "--rest-port", "0"], capture_output=True, text=True, cwd=str(cwd), env=env, timeout=120)
    try:
        assert start.returncode == 0, start.stderr
        res = subprocess.run([flinkpy, "run", str(jobdir / "job.py")], capture_output=True, text=True, cwd=str(cwd), env=env, timeout=120)
        assert res.returncode == 0, res.stderr
        out_files = sorted((flinkpy_home / "log").glob("taskmanager-*.out"))
        printed = "".join(p.read_text() for p in out_files)
        assert sorted(printed.split()) == ["102", "104", "106"], printed
    finally:
        subprocess.run([flinkpy, "cluster", "stop"], capture_output=True, cwd=str(cwd), env=env, timeout=120)
    res = subprocess.run([sys.executable, str(jobdir / "job.py")], capture_output=True, text=True, cwd=str(cwd), env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == ["102", "104", "106"], res.stdout
    assert not marker.exists(), f"a cluster process imported the working directory: {marker.read_text()}"
