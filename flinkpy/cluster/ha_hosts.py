"""A high-availability cluster across namespace hosts: ZooKeeper on a host of its own, and
JobManagers and TaskManagers each on another (:mod:`flinkpy.cluster.netns`), so that a drill can
cut the leading JobManager off from ZooKeeper and watch a standby take over.

What the ZooKeeper-partition test and the partitions benchmark share: :class:`HaHosts` starts
ZooKeeper (``flinkpy zookeeper start`` run inside its host, bound to every address so that the
other hosts reach it) and gives the :class:`~flinkpy.ha.services.HaConfig` that points at it;
then each JobManager and TaskManager starts on its host with that configuration, its log in the
home's ``log/``. The JobManagers share one cluster home (the file system is shared, as a shared
mount would be); a JobManager writes ``jobmanagers/<id>.json`` with its REST address once it
serves. Needs root, as every namespace host does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from flinkpy.cluster.home import ClusterHome
from flinkpy.cluster.netns import Hosts
from flinkpy.ha.services import HaConfig
from flinkpy.processes import module_command

#: the environment of the processes started on the hosts (their log lines unbuffered)
_UNBUFFERED = {"PYTHONUNBUFFERED": "1"}


class HaHosts:
    """ZooKeeper on host ``zookeeper`` of ``hosts`` and the cluster whose home is ``base/home``
    (ZooKeeper's files in ``base/zk``, the HA storage in ``base/ha``); ``with`` starts ZooKeeper
    and stops it at the end (the hosts themselves stay the caller's)."""

    def __init__(self, hosts: Hosts, base: Path, *, zookeeper: str = "zk", cluster_id: str = "drill",
                 session_timeout_s: float = 2.0) -> None:
        self.hosts, self.base, self.zookeeper = hosts, base, zookeeper
        self.cluster_id, self.session_timeout_s = cluster_id, session_timeout_s
        self.home = base / "home"
        self.ha: HaConfig | None = None

    def __enter__(self) -> HaHosts:
        self.start_zookeeper()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_zookeeper()

    def _cli(self, *args: str, timeout_s: float) -> subprocess.CompletedProcess:
        """``flinkpy ARGS`` on ZooKeeper's host, in ZooKeeper's own home."""
        env = dict(os.environ, FLINKPY_HOME=str(self.base / "zk"), **_UNBUFFERED)
        return self.hosts.run(self.zookeeper, [sys.executable, "-m", "commands.main", *args], capture_output=True, text=True,
                              env=env, timeout=timeout_s)

    def start_zookeeper(self, timeout_s: float = 120) -> HaConfig:
        """Start ZooKeeper (a 200 ms tick, so that sessions of a few seconds are allowed) and make
        the cluster home; the HA configuration of the cluster's processes."""
        started = self._cli("zookeeper", "start", "--port", "0", "--tick-time", "200", "--bind-address", "0.0.0.0", "--json",
                            timeout_s=timeout_s)
        if started.returncode != 0:
            raise RuntimeError(f"ZooKeeper did not start on host {self.zookeeper}: {started.stderr.strip()}")
        port = json.loads(started.stdout)["servers"][0]["client_port"]
        self.ha = HaConfig(quorum=f"{self.hosts[self.zookeeper].address}:{port}", cluster_id=self.cluster_id,
                           storage_dir=str(self.base / "ha"), session_timeout_s=self.session_timeout_s, connection_timeout_s=60.0)
        ClusterHome(self.home).ensure()
        (self.home / "jobmanagers").mkdir(exist_ok=True)
        return self.ha

    def stop_zookeeper(self, timeout_s: float = 60) -> None:
        self._cli("zookeeper", "stop", timeout_s=timeout_s)

    def _ha_argument(self) -> str:
        if self.ha is None:
            raise RuntimeError("start ZooKeeper first (HaHosts.start_zookeeper, or use it in a with statement)")
        return json.dumps(self.ha.to_dict())

    def start_jobmanager(self, name: str, *args: str) -> subprocess.Popen:
        """A JobManager with id ``name`` on host ``name``, its REST and RPC endpoints on the host's
        address; ``args``: more of its command-line options."""
        address = self.hosts[name].address
        argv = module_command("flinkpy.jobmanager.process", "--home", str(self.home), "--id", name, "--rest-port", "0",
                              "--rest-address", address, "--rpc-address", address, *args, "--ha", self._ha_argument())
        with open(self.home / "log" / f"jobmanager-{name}.log", "ab") as log:
            return self.hosts.popen(name, argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **_UNBUFFERED))

    def start_taskmanager(self, name: str, *, slots: int, home: Path | None = None, heartbeat_interval_ms: int = 300) -> subprocess.Popen:
        """A TaskManager with id ``name`` on host ``name``, advertising the host's address. With
        ``home`` it keeps a home of its own there, as on a machine of its own (only the cluster's
        secret is copied); else it shares the JobManagers' home."""
        if home is None:
            home, log_name = self.home, f"taskmanager-{name}.log"
        else:
            home.mkdir(parents=True, exist_ok=True)
            (home / "log").mkdir(exist_ok=True)
            secret = home / "secret"
            secret.write_bytes((self.home / "secret").read_bytes())
            secret.chmod(0o600)
            log_name = "taskmanager.log"
        argv = module_command("flinkpy.taskmanager.process", "--home", str(home), "--id", name, "--slots", str(slots),
                              "--heartbeat-interval-ms", str(heartbeat_interval_ms), "--ha", self._ha_argument(),
                              "--host", self.hosts[name].address)
        with open(home / "log" / log_name, "ab") as log:
            return self.hosts.popen(name, argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **_UNBUFFERED))

    def rest_address(self, jobmanager: str) -> str:
        """The REST address JobManager ``jobmanager`` serves at (once it wrote its record)."""
        return json.loads((self.home / "jobmanagers" / f"{jobmanager}.json").read_text())["rest_address"]

    def has_started(self, jobmanager: str) -> bool:
        """Whether JobManager ``jobmanager`` serves (as leader or standby) and said where."""
        return (self.home / "jobmanagers" / f"{jobmanager}.json").exists()

    def log(self, jobmanager: str) -> str:
        return (self.home / "log" / f"jobmanager-{jobmanager}.log").read_text(errors="replace")

    def token(self) -> str:
        return ClusterHome(self.home).token()

