"""`flinkpy zookeeper start|stop|status` with the real ZooKeeper of the distribution, and the
``zookeeper`` fixture the high-availability tests use."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import psutil
import pytest
from conftest import cli_json, wait_for

from flinkpy.ha.zookeeper_server import find_zookeeper, stop_zookeeper


def _gone(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _kazoo(quorum: str):
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=quorum, timeout=5)
    zk.start(timeout=15)
    return zk


@pytest.fixture
def zk_home(flinkpy_home: Path):
    """The cluster home; whatever a test started there is stopped even when it fails."""
    yield flinkpy_home
    stop_zookeeper(flinkpy_home, timeout_s=5)


@pytest.mark.timeout(60)
def test_single_server_start_status_use_stop(cli, zk_home: Path) -> None:
    res = cli("zookeeper", "start", "--port", "0", "--tick-time", "200", "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    [server] = info["servers"]
    pid, port = server["pid"], server["client_port"]
    assert info["quorum"] == f"127.0.0.1:{port}" and server["mode"] == "standalone"
    assert info["min_session_timeout_ms"] == 400 and info["max_session_timeout_ms"] == 4000
    # the server outlives the command that started it, and runs from the home
    proc = psutil.Process(pid)
    assert "org.apache.zookeeper.server.quorum.QuorumPeerMain" in proc.cmdline()
    assert (zk_home / "zookeeper" / "1" / "zoo.cfg").is_file() and (zk_home / "zookeeper" / "zookeeper.json").is_file()

    again = cli("zookeeper", "start", "--port", "0")
    assert again.returncode == 9, again.stderr
    assert "already running" in again.stderr and info["quorum"] in again.stderr

    res = cli("zookeeper", "status", "--json")
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout)
    assert st["serving"] is True and st["quorum"] == info["quorum"]
    assert st["servers"][0]["alive"] is True and st["servers"][0]["mode"] == "standalone"
    human = cli("zookeeper", "status")
    assert human.returncode == 0 and info["quorum"] in human.stdout and "standalone" in human.stdout

    zk = _kazoo(st["quorum"])
    try:
        zk.create("/flinkpy/test", b"hello", makepath=True)
        assert zk.get("/flinkpy/test")[0] == b"hello"
    finally:
        zk.stop()
        zk.close()

    res = cli("zookeeper", "stop", "--json")
    assert res.returncode == 0, res.stderr
    assert [s["pid"] for s in json.loads(res.stdout)["stopped"]] == [pid]
    wait_for(lambda: _gone(pid), 10, message=f"ZooKeeper pid {pid} to be gone")
    assert not (zk_home / "zookeeper" / "zookeeper.json").exists()

    res = cli("zookeeper", "stop")
    assert res.returncode == 0 and "No ZooKeeper is running" in res.stdout
    res = cli("zookeeper", "status", "--json")
    assert res.returncode == 3, res.stderr
    assert json.loads(res.stdout)["error"]["kind"] == "ClusterUnreachable"


@pytest.mark.timeout(90)
def test_ensemble_elects_one_leader_and_survives_the_loss_of_it(zk_home: Path) -> None:
    info = cli_json("zookeeper", "start", "--servers", "3", "--port", "0", "--tick-time", "200")
    assert len(info["servers"]) == 3 and len(info["quorum"].split(",")) == 3
    st = cli_json("zookeeper", "status")
    modes = sorted(s["mode"] for s in st["servers"])
    assert modes == ["follower", "follower", "leader"], modes
    leader = next(s for s in st["servers"] if s["mode"] == "leader")
    for s in st["servers"]:
        assert f"server.{s['id']}=127.0.0.1:{s['peer_port']}:{s['election_port']}" in (zk_home / "zookeeper" / "1" / "zoo.cfg").read_text()

    zk = _kazoo(st["quorum"])
    try:
        zk.create("/ha/value", b"before", makepath=True)
        os.kill(leader["pid"], signal.SIGKILL)
        wait_for(lambda: _gone(leader["pid"]), 10, message="the killed leader to be gone")

        def new_leader() -> dict | None:
            doc = cli_json("zookeeper", "status")
            return next((s for s in doc["servers"] if s["mode"] == "leader"), None)

        elected = wait_for(new_leader, 30, interval=0.1, message="a new leader among the two survivors")
        assert elected["id"] != leader["id"]
        # the client fails over to a surviving server; the data is still there and writable
        zk.retry(zk.set, "/ha/value", b"after")
        assert zk.retry(zk.get, "/ha/value")[0] == b"after"
    finally:
        zk.stop()
        zk.close()

    stopped = cli_json("zookeeper", "stop")["stopped"]
    assert sorted(s["id"] for s in stopped) == sorted(s["id"] for s in st["servers"] if s["id"] != leader["id"])
    for s in st["servers"]:
        wait_for(lambda: _gone(s["pid"]), 10, message=f"ZooKeeper server {s['id']} to be gone")
    assert find_zookeeper(zk_home) is None


@pytest.mark.timeout(30)
def test_missing_installation_and_taken_port_are_reported(cli, zk_home: Path) -> None:
    res = cli("zookeeper", "start", "--json", env={"FLINKPY_ZOOKEEPER_JAR": str(zk_home / "no-such-zookeeper.jar")})
    assert res.returncode == 4, res.stderr
    assert "apt-get install zookeeper" in res.stderr and "no-such-zookeeper.jar" in res.stderr
    assert json.loads(res.stdout)["error"]["kind"] == "NotFound"

    res = cli("zookeeper", "start", env={"PATH": "/nonexistent", "JAVA_HOME": ""})
    assert res.returncode == 4 and "java" in res.stderr and "apt-get install" in res.stderr

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = cli("zookeeper", "start", "--port", str(port))
    assert res.returncode == 9 and f"port {port}" in res.stderr and "in use" in res.stderr

    res = cli("zookeeper", "start", "--servers", "2")
    assert res.returncode == 8 and "odd" in res.stderr
    assert find_zookeeper(zk_home) is None and not (zk_home / "zookeeper" / "zookeeper.json").exists()


@pytest.mark.timeout(60)
def test_fixture_restarts_on_the_same_port_with_the_same_data(zookeeper) -> None:
    from kazoo.protocol.states import KazooState

    quorum = zookeeper.quorum
    assert zookeeper.status().servers[0].mode == "standalone"
    zk = zookeeper.client(timeout=2)
    zk.create("/jobs/j1", b"graph", makepath=True)
    old = zookeeper.pids

    zookeeper.stop()
    wait_for(lambda: zk.state != KazooState.CONNECTED, 10, message="the client to notice the outage")
    zookeeper.start()
    assert zookeeper.quorum == quorum and zookeeper.pids != old
    assert zk.retry(zk.get, "/jobs/j1")[0] == b"graph"

    zookeeper.kill()
    assert all(_gone(pid) for pid in zookeeper.pids)
    zookeeper.start()
    assert zookeeper.quorum == quorum
    zk.retry(zk.set, "/jobs/j1", b"graph-2")
    assert zk.retry(zk.get, "/jobs/j1")[0] == b"graph-2"

