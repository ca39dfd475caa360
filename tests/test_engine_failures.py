"""Failures end to end: a user function that raises, a task process killed, a job cancelled.

Jobs run in real processes; the killed task is found by its command line and killed with
SIGKILL, the way the kernel's OOM killer would. Job states are read through the CLI, as an
operator would read them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import cli_json, wait_for
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.errors import JobExecutionError

FAILING_JOB = '''
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource


def explode_on_77(n):
    if n == 77:
        raise ValueError(f"record {n} is cursed")
    return n


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
numbers = env.from_source(NumberSequenceSource(0, 99), WatermarkStrategy.no_watermarks(), "numbers")
numbers.map(explode_on_77).name("exploding map").add_sink(lambda x: None)
env.execute("cursed")
'''

ENDLESS_JOB = '''
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
numbers = env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
(
    numbers.map(lambda n: (n % 10, n)).name("pair")
    .key_by(lambda p: p[0])
    .sum(1).name("sums")
    .add_sink(lambda x: None).name("discard")
)
env.execute("endless")
'''


def explode_on_77(n):
    if n == 77:
        raise ValueError(f"record {n} is cursed")
    return n


@pytest.mark.timeout(30)
def test_user_exception_fails_execute_with_the_users_traceback():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    numbers = env.from_source(NumberSequenceSource(0, 99), WatermarkStrategy.no_watermarks(), "numbers")
    numbers.map(explode_on_77).name("exploding map").add_sink(lambda x: None)
    with pytest.raises(JobExecutionError) as info:
        env.execute("cursed")
    err = info.value
    # subtask 2 of 2 reads 50..99 (the sequence is split into contiguous halves)
    assert "exploding map" in err.message and "(2/2)" in err.message, err.message
    assert "ValueError: record 77 is cursed" in err.message
    assert err.job_id and err.job_id in err.message
    assert err.details is not None
    assert "Traceback (most recent call last)" in err.details
    assert "in explode_on_77" in err.details and 'raise ValueError(f"record {n} is cursed")' in err.details
    assert err.details.rstrip().endswith("ValueError: record 77 is cursed")


CONSUMED_FAILING_JOB = '''
import json
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.errors import JobExecutionError


def explode_on_7(n):
    if n == 7:
        raise ValueError(f"record {n} is cursed")
    return n


for attempt in range(RUNS):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(4)
    exploding = env.from_collection(list(range(10))).map(explode_on_7).name("exploding map")
    for _ in range(3):  # 12 consumers that see the failing producer go away
        exploding.broadcast().add_sink(lambda x: None)
    try:
        env.execute("cursed with consumers")
    except JobExecutionError as e:
        print(json.dumps({"message": e.message, "details": e.details or ""}), flush=True)
'''


@pytest.mark.timeout(60)
def test_root_cause_is_the_users_exception_not_its_consumers_broken_channels(tmp_path: Path):
    """When the failing task has network consumers, they fail too (their producer's channel
    closes). The job's cause must still be the user's exception, the first failure, not one of
    its consequences. Which report reaches the JobManager first is a race, so the job runs a
    few times; each run must name the user's exception. The job runs as a user runs it, as a
    script (its functions travel by value)."""
    runs = 4
    job = tmp_path / "consumed.py"
    job.write_text(CONSUMED_FAILING_JOB.replace("RUNS", str(runs)))
    res = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    causes = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(causes) == runs, res.stdout
    wrong = [c["message"] for c in causes if "record 7 is cursed" not in c["message"] or "in explode_on_7" not in c["details"]]
    assert not wrong, f"{len(wrong)} of {runs} runs blamed a consequence instead of the user's exception: {wrong}"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("flinkpy: error:")]


@pytest.mark.timeout(60)
def test_flinkpy_run_of_a_failing_job_exits_5_with_one_error_line(flinkpy_home, tmp_path: Path, cli):
    job = tmp_path / "cursed.py"
    job.write_text(FAILING_JOB)
    res = cli("run", str(job))
    assert res.returncode == 5, res.stderr
    lines = error_lines(res.stderr)
    assert len(lines) == 1, res.stderr
    assert "failed" in lines[0] and "exploding map" in lines[0] and "(2/2)" in lines[0], lines[0]
    # the user's remote traceback is shown once, so the bad record can be found without --debug;
    # the client's own traceback is not shown
    assert res.stderr.count("Traceback (most recent call last)") == 1, res.stderr
    assert res.stderr.count("in explode_on_77") == 1
    assert "ValueError: record 77 is cursed" in res.stderr
    assert "commands/" not in res.stderr and "flinkpy/client/" not in res.stderr, res.stderr
    assert res.stdout == ""
    # the user's file, line and source, first; not cloudpickle's "<dynamic-code>" after seven
    # engine frames (issue 37, §3)
    frames = [line for line in res.stderr.splitlines() if line.startswith('  File "')]
    assert frames and frames[0] == f'  File "{job}", line 9, in explode_on_77', res.stderr
    assert '    raise ValueError(f"record {n} is cursed")' in res.stderr.splitlines(), res.stderr
    assert "<dynamic-code>" not in res.stderr and "flinkpy/task/" not in res.stderr, res.stderr
    assert "flinkpy frames above the job's code not shown: --debug shows the whole traceback" in res.stderr
    # the embedded cluster is gone when the run ends: the root cause is printed, and no
    # command that would ask that cluster is suggested
    assert "last cause: ValueError: record 77 is cursed" in res.stderr, res.stderr
    assert "flinkpy job exceptions" not in res.stderr, res.stderr

    debug = cli("--debug", "run", str(job))
    assert debug.returncode == 5
    assert len(error_lines(debug.stderr)) == 1, debug.stderr
    assert "commands/run.py" in debug.stderr, "--debug shows where the client raised"
    assert "in explode_on_77" in debug.stderr
    assert "flinkpy/task/" in debug.stderr and "not shown" not in debug.stderr, "--debug: the engine's frames too"


# -- on a background cluster -------------------------------------------------------------------


def task_processes(cluster) -> list[psutil.Process]:
    """The live task processes of the cluster's TaskManagers.

    Tasks are forked by each TaskManager's zygote (and carry its command line); a task started
    directly by the TaskManager would carry ``flinkpy.task.process``.
    """
    found = []
    for tm in cluster.taskmanagers:
        try:
            children = psutil.Process(tm.pid).children()
        except psutil.NoSuchProcess:
            continue
        for child in children:
            try:
                cmd = " ".join(child.cmdline())
                if "flinkpy.taskmanager.zygote" in cmd:
                    found += child.children()
                elif "flinkpy.task.process" in cmd:
                    found.append(child)
            except psutil.Error:
                pass
    alive = []
    for p in found:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def subtask_pids(job_id: str) -> set[int]:
    doc = cli_json("job", "show", job_id)
    return {s["pid"] for v in doc["vertices"] for s in v["subtasks"] if s.get("pid")}


def job_state(job_id: str) -> str | None:
    jobs = cli_json("list", "-a")["jobs"]
    return next((j["state"] for j in jobs if j["jid"] == job_id), None)


def submit_endless(cli, tmp_path: Path, cluster) -> str:
    job = tmp_path / "endless.py"
    job.write_text(ENDLESS_JOB)
    res = cli("run", "-d", "--json", str(job))
    assert res.returncode == 0, res.stderr
    job_id = json.loads(res.stdout)["jobs"][0]["jid"]
    # 2 chains (source -> pair, sums -> discard) x parallelism 2
    wait_for(lambda: job_state(job_id) == "RUNNING" and len(task_processes(cluster)) == 4, timeout=30, message="4 running tasks")

    def all_running():
        doc = cli_json("job", "show", job_id)
        return all(v["status"] == "RUNNING" for v in doc["vertices"])

    wait_for(all_running, timeout=30, message="every vertex RUNNING")
    return job_id


@pytest.mark.timeout(90)
def test_killed_task_process_fails_the_job(cluster, tmp_path: Path, cli):
    job_id = submit_endless(cli, tmp_path, cluster)
    pids = subtask_pids(job_id)
    assert pids == {p.pid for p in task_processes(cluster)}, "the REST API names the task processes"
    pid = sorted(pids)[0]
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for(lambda: job_state(job_id) == "FAILED", timeout=15, message=f"job {job_id} FAILED")
    print(f"FAILED {time.monotonic() - killed_at:.2f}s after the kill")
    wait_for(lambda: not task_processes(cluster), timeout=15, message="the other tasks to be cancelled")

    doc = cli_json("job", "exceptions", job_id)
    entries = doc["exceptionHistory"]["entries"]
    mine = [e for e in entries if f"pid {pid}" in e.get("message", "")]
    assert mine, entries
    assert "SIGKILL" in mine[0]["message"], mine[0]
    assert mine[0]["taskName"] and mine[0]["taskManagerId"], mine[0]
    print("root exception:", doc.get("root-exception"))
    assert f"pid {pid}" in (doc.get("root-exception") or "") and "SIGKILL" in doc["root-exception"], doc

    # the cluster survives its job
    assert all(psutil.pid_exists(tm.pid) for tm in cluster.taskmanagers)


@pytest.mark.timeout(90)
def test_cancel_stops_every_task(cluster, tmp_path: Path, cli):
    job_id = submit_endless(cli, tmp_path, cluster)
    pids = [p.pid for p in task_processes(cluster)]
    res = cli("cancel", job_id)
    assert res.returncode == 0, res.stderr
    wait_for(lambda: job_state(job_id) == "CANCELED", timeout=15, message=f"job {job_id} CANCELED")
    wait_for(lambda: not task_processes(cluster), timeout=15, message="no task process left")
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    # cancelling it again is a conflict: it already ended
    again = cli("cancel", job_id)
    assert again.returncode == 9, again.stderr
