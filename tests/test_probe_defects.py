"""The defects a hostile probe found (issue 38), each on real processes, as the probe met them.

Most requests go to one cluster shared by the module (``shared``); the cases that need a cluster
of their own shape (a TaskManager in another working directory, a busy port) start one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, module_cluster, run_cli, wait_for
from flinkpy.errors import ExitCode

pytestmark = pytest.mark.timeout(120)

LONG_JOB = """
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource

env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(200)
ds = env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
ds.map(lambda n: (n % 10, n)).uid("pairs").key_by(lambda t: t[0]).sum(1).uid("sums").add_sink(lambda x: None)
env.execute("long")
"""

FAILING_JOB = """
from flinkpy.datastream import StreamExecutionEnvironment

def boom(n):
    raise ValueError("probe: record %d is bad" % n)

env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1, 2, 3]).map(boom).print()
env.execute("failing")
"""


SLOW_CHAINED_JOB = """
import time
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource

def slow(n):
    time.sleep(0.05)
    return n

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.enable_checkpointing(300)
env.from_source(NumberSequenceSource(1, 10**9), WatermarkStrategy.no_watermarks(), "numbers").map(slow).add_sink(lambda x: None)
env.execute("slow-chained")
"""


BIG_RECORD_JOB = """
from flinkpy.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.from_collection([1]).map(lambda n: "x" * 200_000).key_by(lambda s: len(s)).map(len).print()
env.execute("big-record")
"""


def cli_in(cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The CLI run from another working directory (``run_cli`` runs it from the repository)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "commands.main", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=str(cwd), stdin=subprocess.DEVNULL)


def one_document(res: subprocess.CompletedProcess) -> Any:
    """The one JSON document on stdout (json.loads refuses a second one after it)."""
    return json.loads(res.stdout)


def submit_long(tmp_path: Path, *args: str, cwd: Path | None = None) -> str:
    job = tmp_path / "long.py"
    job.write_text(LONG_JOB)
    res = cli_in(cwd or ROOT, "run", "-d", "--json", *args, str(job))
    assert res.returncode == 0, res.stderr
    jid = one_document(res)["jobs"][0]["jid"]
    wait_for(lambda: one_document(run_cli("job", "show", jid, "--json"))["state"] == "RUNNING", timeout=30, message=f"job {jid} RUNNING")
    return jid


class Rest:
    """Requests with the cluster's token, answers as (status, document)."""

    def __init__(self, home: Path) -> None:
        self.address = json.loads((home / "cluster.json").read_text())["rest_address"]
        self.token = (home / "secret").read_text().strip()

    def __call__(self, method: str, path: str, body: bytes | None = None, timeout: float = 10) -> tuple[int, Any]:
        req = urllib.request.Request(self.address + path, data=body, method=method, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory):
    with module_cluster(tmp_path_factory, "probe") as home:
        yield home


@pytest.fixture(scope="module")
def long_job(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    jid = submit_long(tmp_path_factory.mktemp("long"))
    yield jid
    run_cli("cancel", jid)


# ------------------------------------------------------------------ 1 (High): relative savepoint paths


@pytest.mark.timeout(180)
def test_a_relative_savepoint_path_is_resolved_by_the_client_and_the_savepoint_restores(flinkpy_home: Path, tmp_path: Path) -> None:
    """A cluster started in one directory, a TaskManager added from another, a job at -p 2, and
    `flinkpy stop JOB --savepoint-path relsp` from a third: every state file in one place."""
    jm_dir, tm_dir, client_dir = (tmp_path / d for d in ("jm", "tm", "client"))
    for d in (jm_dir, tm_dir, client_dir):
        d.mkdir()
    res = cli_in(jm_dir, "cluster", "start", "--taskmanagers", "1", "--slots", "1", "--rest-port", "0")
    assert res.returncode == 0, res.stderr
    try:
        res = cli_in(tm_dir, "cluster", "add-taskmanager", "--slots", "1")
        assert res.returncode == 0, res.stderr
        jid = submit_long(tmp_path, "-p", "2", cwd=client_dir)
        res = cli_in(client_dir, "stop", jid, "--savepoint-path", "relsp", "--json", timeout=90)
        assert res.returncode == 0, res.stderr
        location = one_document(res)["location"]
        assert location.startswith(str(client_dir / "relsp") + "/"), location
        verify = cli_in(tm_dir, "checkpoint", "verify", location)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert not (jm_dir / "relsp").exists() and not (tm_dir / "relsp").exists()
    finally:
        run_cli("cluster", "stop")


def test_a_savepoint_whose_state_file_is_elsewhere_is_found_incomplete(tmp_path: Path) -> None:
    """What the JobManager checks before it writes a savepoint's _metadata (and reports it
    complete): every file the document lists, at the size its handle says."""
    from flinkpy.checkpoint.storage import CheckpointStorage
    from flinkpy.checkpoint.targets import missing_state_files

    storage = CheckpointStorage(str(tmp_path / "ck"))
    directory = str(tmp_path / "sp" / "savepoint-abc")
    handles = [storage.write_state_in(directory, f"op-{i}.keyed", b"x" * (i + 1)) for i in range(2)]
    doc = {"operators": [{"subtasks": [{"keyed_state": h} for h in handles]}]}
    assert missing_state_files(storage, directory, doc) == []
    os.unlink(os.path.join(directory, handles[1]["path"]))
    (Path(directory) / handles[0]["path"]).write_bytes(b"longer than it was")
    problems = missing_state_files(storage, directory, doc)
    assert len(problems) == 2 and "state file is missing" in problems[1] and "its handle says 1" in problems[0], problems


# ------------------------------------------------------------------ 2: idle connections


def test_idle_connections_without_a_token_do_not_lock_the_cli_out(shared: Path) -> None:
    """32 idle sockets held the REST server's 32 threads for its 30 s read timeout, and 11 of 12
    'flinkpy list' failed "serving its maximum of requests". Here 48 send nothing or half a
    header, and stay connected while the CLI is used."""
    host, port = Rest(shared).address.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(48)]
    try:
        for s in idle[::2]:
            s.sendall(b"GET /overview HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):
            res = run_cli("list", "--json")
            assert res.returncode == 0, res.stderr
    finally:
        for s in idle:
            s.close()


# ------------------------------------------------------------------ 3: run --json prints one document


def test_run_json_of_a_failing_job_prints_exactly_one_document(shared: Path, tmp_path: Path) -> None:
    job = tmp_path / "failing.py"
    job.write_text(FAILING_JOB)
    res = run_cli("run", "--json", str(job))
    assert res.returncode == ExitCode.JOB_FAILED, res.stderr
    doc = one_document(res)
    assert doc["error"]["exit_code"] == ExitCode.JOB_FAILED and "probe: record" in doc["error"]["message"]
    assert doc["jobs"][0]["state"] == "FAILED"
    # more parallelism than the cluster has slots: the job fails at once, one document
    res = run_cli("run", "--json", "-d", "-p", "64", str(job))
    assert res.returncode == ExitCode.JOB_FAILED, res.stderr
    doc = one_document(res)
    assert set(doc) == {"jobs", "error"} and "64 slot(s)" in doc["error"]["message"]
    # a savepoint that is not there: one document too
    res = run_cli("run", "--json", "-s", str(tmp_path / "no-such-savepoint"), str(job))
    assert res.returncode == ExitCode.NOT_FOUND, res.stderr
    assert set(one_document(res)) == {"error"}


# ------------------------------------------------------------------ 4: a busy REST port


def test_a_busy_rest_port_is_reported_as_such(flinkpy_home: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = run_cli("cluster", "start", "--rest-port", str(port), "--taskmanagers", "1")
    assert res.returncode == ExitCode.CONFLICT, res.stderr
    assert "cannot bind the REST endpoint" in res.stderr and f":{port}" in res.stderr and "--rest-port" in res.stderr
    assert "Traceback" not in res.stderr and "AttributeError" not in res.stderr
    assert run_cli("cluster", "status").returncode != 0


# ------------------------------------------------------------------ 5: a deleted cluster home


def _cluster_pids(home: Path) -> tuple[list[int], int]:
    """(JobManager and TaskManager pids, supervisor pid) from the home's record."""
    rec = json.loads((home / "cluster.json").read_text())
    return [rec["jobmanager"]["pid"], *(tm["pid"] for tm in rec["taskmanagers"])], rec["supervisor"]["pid"]


def _gone(pids: list[int]) -> bool:
    import psutil

    return all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids)


def _kill_all(pids: list[int]) -> None:
    import psutil

    from conftest import tree_of

    for p in tree_of(pids):
        try:
            p.kill()
        except psutil.Error:
            pass


def test_a_cluster_whose_home_is_deleted_stops(flinkpy_home: Path) -> None:
    res = run_cli("cluster", "start", "--taskmanagers", "1", "--rest-port", "0")
    assert res.returncode == 0, res.stderr
    pids, supervisor = _cluster_pids(flinkpy_home)
    try:
        import shutil

        shutil.rmtree(flinkpy_home)
        wait_for(lambda: _gone([*pids, supervisor]), timeout=20, message="every process of the cluster gone with its home")
    finally:
        _kill_all([*pids, supervisor])


def test_cluster_stop_finds_the_processes_of_a_deleted_home(flinkpy_home: Path) -> None:
    """The supervisor (which would notice) is gone too: 'cluster stop' finds the rest by their
    command lines and stops them."""
    import shutil
    import signal

    res = run_cli("cluster", "start", "--taskmanagers", "1", "--rest-port", "0")
    assert res.returncode == 0, res.stderr
    pids, supervisor = _cluster_pids(flinkpy_home)
    try:
        os.kill(supervisor, signal.SIGKILL)
        wait_for(lambda: _gone([supervisor]), timeout=10, message="the supervisor killed")
        shutil.rmtree(flinkpy_home)
        res = run_cli("cluster", "stop", "--json")
        assert res.returncode == 0, res.stderr
        stopped = one_document(res)["stopped"]
        assert sorted(p["pid"] for p in stopped) == sorted(pids), stopped
        wait_for(lambda: _gone(pids), timeout=15, message="the JobManager and TaskManager stopped")
    finally:
        _kill_all(pids)


# ------------------------------------------------------------------ 6: a slow operator chained to a source


def test_a_slow_operator_chained_to_a_source_does_not_hold_checkpoints(shared: Path, tmp_path: Path) -> None:
    """50 ms a record behind the source: the source polled 1,024 records and ran them all
    through the chain (51 s) before it took a trigger; checkpoints now complete within seconds."""
    job = tmp_path / "slow.py"
    job.write_text(SLOW_CHAINED_JOB)
    res = run_cli("run", "-d", "--json", str(job))
    assert res.returncode == 0, res.stderr
    jid = one_document(res)["jobs"][0]["jid"]
    rest = Rest(shared)
    try:
        wait_for(lambda: rest("GET", f"/jobs/{jid}/checkpoints")[1]["counts"]["completed"] >= 2, timeout=25,
                 message="two checkpoints of the slow chained job complete",
                 describe=lambda: rest("GET", f"/jobs/{jid}/checkpoints")[1]["counts"])
    finally:
        run_cli("cancel", jid)


# ------------------------------------------------------------------ 9: private files


def test_a_clusters_files_are_private(shared: Path, long_job: str, tmp_path: Path) -> None:
    """Logs, job output, shipped code and checkpoint files were 0644 in 0755 directories."""
    from flinkpy.cluster import ClusterHome

    rest = Rest(shared)
    wait_for(lambda: rest("GET", f"/jobs/{long_job}/checkpoints")[1]["counts"]["completed"] >= 1, timeout=20, message="a checkpoint")
    files, dirs = [], []
    for root, dirnames, filenames in os.walk(shared):
        dirs += [Path(root) / d for d in dirnames]
        files += [Path(root) / f for f in filenames]
    assert any(f.suffix == ".log" for f in files) and any(f.suffix == ".out" for f in files)
    assert any("chk-" in str(f) for f in files), "no checkpoint file to look at"
    loose = [f"{p} {oct(p.stat().st_mode & 0o777)}" for p in files if p.exists() and p.stat().st_mode & 0o077]
    loose += [f"{p} {oct(p.stat().st_mode & 0o777)}" for p in dirs if p.exists() and p.stat().st_mode & 0o077]
    assert not loose, loose
    home = ClusterHome(tmp_path / "new" / "home")
    home.ensure()
    assert (home.path.stat().st_mode & 0o777, home.log_dir.stat().st_mode & 0o777) == (0o700, 0o700)


# ------------------------------------------------------------------ 10: jobs of a killed JobManager


@pytest.mark.timeout(150)
def test_the_jobs_of_a_killed_jobmanager_are_listed_lost_with_their_latest_checkpoint(flinkpy_home: Path, tmp_path: Path) -> None:
    import signal

    res = run_cli("cluster", "start", "--taskmanagers", "1", "--slots", "2", "--rest-port", "0")
    assert res.returncode == 0, res.stderr
    pids, supervisor = _cluster_pids(flinkpy_home)
    try:
        jid = submit_long(tmp_path)
        rest = Rest(flinkpy_home)
        wait_for(lambda: rest("GET", f"/jobs/{jid}/checkpoints")[1]["counts"]["completed"] >= 1, timeout=30, message="a checkpoint")
        os.kill(pids[0], signal.SIGKILL)

        def lost() -> Any:
            res = run_cli("list", "-a", "--json")
            jobs = one_document(res)["jobs"] if res.returncode == 0 else []
            return next((j for j in jobs if j["jid"] == jid and j["state"] == "LOST"), None)

        job = wait_for(lost, timeout=60, message="the job listed LOST by the new JobManager")
        assert job["latest-checkpoint"] and Path(job["latest-checkpoint"], "_metadata").is_file(), job
        shown = one_document(run_cli("job", "show", jid, "--json"))
        assert shown["state"] == "LOST" and job["latest-checkpoint"] in shown["remedy"]
        assert "LOST" in run_cli("cluster", "status").stdout
        assert jid not in run_cli("list").stdout  # not running
        # the TaskManager started again meanwhile waited for the new JobManager instead of dying
        wait_for(lambda: rest("GET", "/overview")[1]["taskmanagers"] == 1, timeout=60, message="the TaskManager registered again")
        logs = "".join(p.read_text(errors="replace") for p in (flinkpy_home / "log").glob("taskmanager-*"))
        assert "Traceback" not in logs, logs[-3000:]
    finally:
        run_cli("cluster", "stop")
        pids2, sup2 = _cluster_pids(flinkpy_home) if (flinkpy_home / "cluster.json").exists() else ([], 0)
        _kill_all([*pids, supervisor, *pids2])


# ------------------------------------------------------------------ 11: a record over the frame limit


def test_a_record_over_the_frame_limit_names_its_size_the_limit_and_the_key(shared: Path, tmp_path: Path) -> None:
    """A 300 MB record failed against an undocumented 256 MiB limit with "the producer failed";
    the same with a 200 kB record and the limit lowered to 64 kb."""
    job = tmp_path / "big.py"
    job.write_text(BIG_RECORD_JOB)
    res = run_cli("run", "--json", "-D", "taskmanager.network.max-frame-size=64 kb", "-D", "restart-strategy.type=none", str(job))
    assert res.returncode == ExitCode.JOB_FAILED, res.stderr
    message = one_document(res)["error"]["message"]
    assert "a record of 200" in message and "taskmanager.network.max-frame-size (65536 bytes)" in message, message
    res = run_cli("run", "-D", "taskmanager.network.max-frame-size=1 b", str(job))
    assert res.returncode == ExitCode.CONFIGURATION and "taskmanager.network.max-frame-size" in res.stderr, res.stderr


# ------------------------------------------------------------------ 7 and 13: bad REST parameters


@pytest.mark.parametrize("route, parameter", [
    ("execution-result?timeout=nan", "timeout"),
    ("execution-result?timeout=-1", "timeout"),
    ("execution-result?timeout=abc", "timeout"),
    ("execution-result?timeout=inf", "timeout"),
    ("checkpoints?history=abc", "history"),
])
def test_bad_query_parameters_are_answered_400_naming_them(shared: Path, long_job: str, route: str, parameter: str) -> None:
    """timeout=nan spun a JobManager thread at 100% CPU for the life of the job; abc gave 500."""
    status, doc = Rest(shared)("GET", f"/jobs/{long_job}/{route}", timeout=5)
    assert status == 400, doc
    assert doc["errors"][0].startswith(f"query parameter {parameter}="), doc


def test_deeply_nested_json_is_answered_400(shared: Path, long_job: str) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    for path in (f"/jobs/{long_job}/savepoints", "/jobs"):
        status, doc = Rest(shared)("POST", path, deep)
        assert status == 400 and "nests too deeply" in doc["errors"][0], doc


# ------------------------------------------------------------------ 8: savepoints nobody can read back


def test_a_savepoint_into_memory_or_a_relative_path_is_refused(shared: Path, long_job: str) -> None:
    res = run_cli("savepoint", "trigger", long_job, "memory://x")
    assert res.returncode == ExitCode.USAGE, res.stderr
    assert "memory" in res.stderr and "could never be restored" in res.stderr and "Traceback" not in res.stderr
    rest = Rest(shared)
    for target in ("memory://x", "relsp"):
        status, doc = rest("POST", f"/jobs/{long_job}/savepoints", json.dumps({"target-directory": target}).encode())
        assert status == 400 and target in doc["errors"][0], doc
