"""A real ZooKeeper for the high-availability tests (fixtures ``zookeeper`` and ``zookeeper_factory``).

The server is the distribution's (``tests/run`` installs Debian's ``zookeeper`` package when it
is missing), started through ``flinkpy.ha.zookeeper_server`` — the code behind
``flinkpy zookeeper start`` — in a temporary home on a free loopback port, with a short
tickTime (200 ms) so that session timeouts down to 400 ms are honoured. It can be stopped,
killed and started again on the same port with the same data, to test ZooKeeper outages::

    def test_outage(zookeeper):
        zk = zookeeper.client()          # a started KazooClient, closed at teardown
        zookeeper.stop()                 # or .kill(): SIGKILL
        zookeeper.start()                # same port, same znodes
        ... cluster started with --zookeeper-quorum zookeeper.quorum ...

Teardown closes the clients, stops the servers and fails the test if a server process is left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import psutil
import pytest

from flinkpy.errors import NotFoundError
from flinkpy.ha.zookeeper_server import (
    ZooKeeperInfo,
    kill_zookeeper,
    start_zookeeper,
    stop_zookeeper,
    zookeeper_status,
)


class ZooKeeper:
    """One local ZooKeeper (a server or an ensemble) in its own home directory."""

    def __init__(self, home: Path, *, servers: int = 1, tick_time_ms: int = 200, min_session_timeout_ms: int = 400,
                 max_session_timeout_ms: int = 20000) -> None:
        self.home = home
        self.servers = servers
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.port = 0  # fixed by the first start, reused by the next ones
        self.info: ZooKeeperInfo | None = None
        self._pids: set[int] = set()
        self._clients: list[Any] = []

    @property
    def quorum(self) -> str:
        """``127.0.0.1:PORT[,...]``: the connect string (for --zookeeper-quorum and kazoo)."""
        assert self.info is not None, "ZooKeeper was never started"
        return self.info.quorum

    @property
    def pids(self) -> list[int]:
        assert self.info is not None
        return [s.pid for s in self.info.servers]

    def start(self, timeout_s: float = 60.0) -> "ZooKeeper":
        """Start (again): the same ports and data directories as before."""
        try:
            self.info = start_zookeeper(
                self.home, port=self.port, servers=self.servers, tick_time_ms=self.tick_time_ms,
                min_session_timeout_ms=self.min_session_timeout_ms, max_session_timeout_ms=self.max_session_timeout_ms,
                timeout_s=timeout_s,
            )
        except NotFoundError as e:
            pytest.fail(f"{e} — run tests/run, which installs it")
        self.port = self.info.servers[0].client_port
        self._pids.update(self.pids)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """A clean stop (SIGTERM); the data is kept."""
        stop_zookeeper(self.home, timeout_s)

    def kill(self, server: int | None = None) -> None:
        """SIGKILL every server, or the one with this id (1-based) of an ensemble."""
        kill_zookeeper(self.home, server)

    def status(self) -> ZooKeeperInfo:
        """Each server's ``alive`` and ``mode`` (standalone/leader/follower/None)."""
        return zookeeper_status(self.home)

    def client(self, timeout: float = 10.0, **kw: Any) -> Any:
        """A started ``kazoo.client.KazooClient`` on the quorum, closed at teardown."""
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.quorum, timeout=timeout, **kw)
        self._clients.append(zk)
        zk.start(timeout=15)
        return zk

    def close(self) -> None:
        for zk in self._clients:
            try:
                zk.stop()
                zk.close()
            except Exception:  # noqa: BLE001 - teardown of a client whose server is gone
                pass
        self._clients.clear()
        self.stop()
        procs = []
        for pid in self._pids:
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(procs, timeout=10)
        alive = [p for p in alive if _running(p)]
        for p in alive:
            p.kill()
        assert not alive, f"ZooKeeper processes left behind: {alive}"


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def zookeeper_factory(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``make(servers=1, tick_time_ms=200, ...)`` -> a started ``ZooKeeper``; all stopped at teardown."""
    made: list[ZooKeeper] = []

    def make(**kw: Any) -> ZooKeeper:
        zk = ZooKeeper(tmp_path_factory.mktemp("zookeeper"), **kw)
        made.append(zk)
        return zk.start()

    make_: Callable[..., ZooKeeper] = make
    yield make_
    problems = []
    for zk in made:
        try:
            zk.close()
        except AssertionError as e:
            problems.append(str(e))
    assert not problems, "; ".join(problems)


@pytest.fixture
def zookeeper(zookeeper_factory: Any) -> ZooKeeper:
    """A running single ZooKeeper server (tickTime 200 ms, sessions 0.4..20 s) on a free port."""
    return zookeeper_factory()
