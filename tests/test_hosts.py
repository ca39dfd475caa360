"""A cluster across hosts: Flink's address keys, one host's processes, the secret they share,
and checkpoint storage every host must reach.

The "hosts" here are addresses of the loopback network (127.0.0.2, 127.0.0.3: every one of
127.0.0.0/8 is local on Linux) and cluster homes of their own, so the tests run anywhere and
quickly; a process bound to one of them is not reachable at another, so an address that is
ignored shows. The JobManager of the module's cluster publishes 127.0.0.2 and binds its RPC
endpoint to every interface; its TaskManager lives in another home, got the secret as a file,
and advertises 127.0.0.3 with data ports from a chosen one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

from conftest import ROOT, all_gone_after, run_cli, wait_for
from flinkpy.errors import ExitCode

JM_HOST, TM_HOST = "127.0.0.2", "127.0.0.3"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on."""
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections("tcp") if c.status == psutil.CONN_LISTEN}


def _cli_ok(*args: str, env: dict[str, str]) -> Any:
    res = run_cli(*args, "--json", env=env)
    assert res.returncode == 0, f"flinkpy {' '.join(args)} exited {res.returncode}: {res.stderr}"
    return json.loads(res.stdout)


class TwoHosts:
    def __init__(self, jm_home: Path, tm_home: Path, jm: dict[str, Any], tm: dict[str, Any], data_port: int) -> None:
        self.jm_home, self.tm_home, self.jm, self.tm, self.data_port = jm_home, tm_home, jm, tm, data_port

    def env(self, home: Path) -> dict[str, str]:
        return {"FLINKPY_HOME": str(home), "FLINKPY_JOBMANAGER": "", "FLINKPY_CLUSTER_SECRET": ""}


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoHosts]:
    jm_home, tm_home = tmp_path_factory.mktemp("host-a"), tmp_path_factory.mktemp("host-b")
    jm_env = {"FLINKPY_HOME": str(jm_home), "FLINKPY_JOBMANAGER": ""}
    jm = _cli_ok("jobmanager", "start", "--rest-port", "0", "-D", f"jobmanager.rpc.address={JM_HOST}",
                 "-D", "jobmanager.bind-host=0.0.0.0", env=jm_env)
    pids = [jm["jobmanager"]["pid"]]
    try:
        secret = tm_home / "copied-secret"
        shutil.copyfile(jm_home / "secret", secret)
        secret.chmod(0o600)
        data_port = _free_port(TM_HOST)
        tm = _cli_ok("taskmanager", "start", "--jobmanager", jm["rpc_address"], "--slots", "2", "--secret-file", str(secret),
                     "--id", "tm-b", "-D", f"taskmanager.host={TM_HOST}", "-D", f"taskmanager.data.port={data_port}",
                     env={"FLINKPY_HOME": str(tm_home), "FLINKPY_CLUSTER_SECRET": ""})
        pids.append(tm["pid"])
        yield TwoHosts(jm_home, tm_home, jm, tm, data_port)
    finally:
        with all_gone_after(pids, timeout=15):
            run_cli("cluster", "stop", "--timeout", "10s", env=jm_env)


def test_each_endpoint_binds_where_told_and_publishes_the_advertised_address(two_hosts: TwoHosts) -> None:
    """RPC: advertised 127.0.0.2, bound to every interface; REST: bound and published at
    127.0.0.2 (rest.address falls back to jobmanager.rpc.address); nothing on 127.0.0.1."""
    rpc_host, rpc_port = two_hosts.jm["rpc_address"].rsplit(":", 1)
    assert rpc_host == JM_HOST
    rest_url = two_hosts.jm["rest_address"]
    assert rest_url.startswith(f"http://{JM_HOST}:")
    rest_port = int(rest_url.rsplit(":", 1)[1])
    assert _listening(two_hosts.jm["jobmanager"]["pid"]) == {("0.0.0.0", int(rpc_port)), (JM_HOST, rest_port)}


def test_a_taskmanager_of_another_home_registers_with_its_advertised_host(two_hosts: TwoHosts) -> None:
    tms = _cli_ok("cluster", "status", env=two_hosts.env(two_hosts.jm_home))["taskmanagers"]
    assert [(tm["id"], tm["host"], tm["slotsNumber"]) for tm in tms] == [("tm-b", TM_HOST, 2)]
    # the secret came as a file and is kept in that host's home, private
    assert (two_hosts.tm_home / "secret").read_text() == (two_hosts.jm_home / "secret").read_text()
    assert (two_hosts.tm_home / "secret").stat().st_mode & 0o077 == 0
    cmdline = " ".join(psutil.Process(two_hosts.tm["pid"]).cmdline())
    assert (two_hosts.jm_home / "secret").read_text() not in cmdline


def test_tasks_exchange_data_on_the_taskmanagers_host_and_data_ports(two_hosts: TwoHosts, tmp_path: Path) -> None:
    """A job of two connected tasks: the upstream one listens at taskmanager.host on a port
    from taskmanager.data.port up, and the records cross to the downstream one."""
    job = tmp_path / "job.py"
    job.write_text(
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        # paced (about 2 s of input), so that the tasks' listeners are up when the test looks
        "env.from_collection(list(range(20000))).map(lambda x: (__import__('time').sleep(0.0001), (x % 7, 1))[1])"
        ".key_by(lambda t: t[0])"
        ".reduce(lambda a, b: (a[0], a[1] + b[1])).print()\n"
        "env.execute('across hosts')\n"
    )
    env = two_hosts.env(two_hosts.jm_home)
    res = run_cli("run", "--json", "-d", "-p", "2", str(job), env=env)
    assert res.returncode == 0, res.stderr
    job_id = json.loads(res.stdout)["jobs"][0]["jid"]

    def task_listeners() -> set[tuple[str, int]]:
        found = set()
        for child in psutil.Process(two_hosts.tm["pid"]).children(recursive=True):
            try:
                found |= _listening(child.pid)
            except psutil.Error:
                pass
        return found

    seen: set[tuple[str, int]] = set()

    def finished() -> bool:
        seen.update(task_listeners())
        return _cli_ok("job", "show", job_id, env=env)["state"] == "FINISHED"

    wait_for(finished, timeout=60, message="the job did not finish")
    assert seen, "no task listened for its consumers"
    assert all(host == TM_HOST and two_hosts.data_port <= port < two_hosts.data_port + 1000 for host, port in seen), seen
    out = Path(two_hosts.tm["stdout"]).read_text()
    totals: dict[int, int] = {}
    for key, count in re.findall(r"^(?:\d+> )?\((\d+), (\d+)\)$", out, re.M):  # "1> (key, running count)"
        totals[int(key)] = max(totals.get(int(key), 0), int(count))
    assert totals == {k: len(range(k, 20000, 7)) for k in range(7)}


def test_without_the_secret_a_taskmanager_is_refused_before_it_starts(two_hosts: TwoHosts, tmp_path: Path) -> None:
    env = {"FLINKPY_HOME": str(tmp_path / "host-c"), "FLINKPY_CLUSTER_SECRET": ""}
    res = run_cli("taskmanager", "start", "--jobmanager", two_hosts.jm["rpc_address"], env=env)
    assert res.returncode == ExitCode.CONFIGURATION, res.stderr
    assert "no cluster secret" in res.stderr and "--secret-file" in res.stderr and "FLINKPY_CLUSTER_SECRET" in res.stderr
    readable = tmp_path / "secret"
    readable.write_text((two_hosts.jm_home / "secret").read_text())
    readable.chmod(0o644)
    res = run_cli("taskmanager", "start", "--jobmanager", two_hosts.jm["rpc_address"], "--secret-file", str(readable), env=env)
    assert res.returncode == ExitCode.CONFIGURATION and "accessible by others" in res.stderr, res.stderr
    # a wrong secret in the environment: the JobManager's handshake turns it away
    res = run_cli("taskmanager", "start", "--jobmanager", two_hosts.jm["rpc_address"], "--timeout", "10s",
                  env=dict(env, FLINKPY_CLUSTER_SECRET="0" * 64))
    assert res.returncode == ExitCode.CONFIGURATION and "refused TaskManager" in res.stderr and "secret" in res.stderr, res.stderr


def test_an_advertised_wildcard_is_refused_naming_the_keys(tmp_path: Path) -> None:
    res = run_cli("jobmanager", "start", "--rest-port", "0", "-D", "jobmanager.rpc.address=0.0.0.0",
                  env={"FLINKPY_HOME": str(tmp_path), "FLINKPY_JOBMANAGER": ""})
    assert res.returncode == ExitCode.CONFIGURATION
    assert "jobmanager.rpc.address is 0.0.0.0" in res.stderr and "jobmanager.bind-host" in res.stderr
    assert not (tmp_path / "jobmanager.json").exists()


def _private_mounts_work() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare(1) for a mount namespace"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return None if probe.returncode == 0 else f"unshare -m failed: {probe.stderr.decode().strip()}"


@pytest.mark.skipif(_private_mounts_work() is not None and not os.environ.get("CI"), reason=str(_private_mounts_work()))
def test_a_checkpoint_directory_a_taskmanager_does_not_share_is_refused_naming_its_host(two_hosts: TwoHosts, tmp_path: Path) -> None:
    """The TaskManager's host has a directory of its own at the configured path (an empty
    tmpfs in a mount namespace of its own, as a second machine would): the job is refused
    at submission (exit 8), naming the TaskManager and its host, before anything runs."""
    shared = tmp_path / "checkpoints"
    shared.mkdir()
    secret = tmp_path / "secret"
    shutil.copyfile(two_hosts.jm_home / "secret", secret)
    secret.chmod(0o600)
    tm_home = tmp_path / "host-d"
    start = (f"mount -t tmpfs none {shared} && exec {sys.executable} -m commands.main taskmanager start "
             f"--json --jobmanager {two_hosts.jm['rpc_address']} --id tm-d --secret-file {secret}")
    env = dict(os.environ, FLINKPY_HOME=str(tm_home), FLINKPY_CLUSTER_SECRET="", PYTHONPATH=str(ROOT))
    res = subprocess.run(["unshare", "-m", "sh", "-c", start],
                         capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)
    assert res.returncode == 0, res.stderr
    pid = json.loads(res.stdout)["pid"]
    try:
        job = tmp_path / "job.py"
        job.write_text("from flinkpy.datastream import StreamExecutionEnvironment\n"
                       "env = StreamExecutionEnvironment.get_execution_environment()\n"
                       "env.from_collection([1, 2, 3]).print()\nenv.execute('refused')\n")
        res = run_cli("run", "-D", "execution.checkpointing.interval=1s", "-D", f"execution.checkpointing.dir=file://{shared}", str(job),
                      env=two_hosts.env(two_hosts.jm_home))
        assert res.returncode == ExitCode.CONFIGURATION, res.stderr
        assert "TaskManager tm-d on host " in res.stderr and "not shared" in res.stderr and "execution.checkpointing.dir" in res.stderr
        assert not any(p.name.startswith(".jobmanager-probe") for p in shared.rglob("*")), "the JobManager's marker stayed"
    finally:
        with all_gone_after([pid], timeout=15):
            run_cli("taskmanager", "stop", "--id", "tm-d", env={"FLINKPY_HOME": str(tm_home)})

