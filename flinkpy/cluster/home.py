"""A cluster's home and its record: which processes a local cluster runs, and where.

The home (``$FLINKPY_HOME`` or ``~/.flinkpy``) holds the secret, the configuration, the logs and
``cluster.json``, the record of the running processes (pids with their start times, so that a
reused pid is not mistaken for ours). The standalone and the HA launchers both write it; every
command reads it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from flinkpy.config import default_home
from flinkpy.files import read_json, write_json_atomically
from flinkpy.network.auth import read_secret
from flinkpy.processes import running


@dataclass
class ProcessInfo:
    id: str
    pid: int
    create_time: float = 0.0
    log_path: str = ""
    stdout_path: str = ""
    #: how to start it again (the supervisor restarts it under the same id and log files)
    argv: list[str] = field(default_factory=list)
    #: times the supervisor started it again
    restarts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "pid": self.pid, "log": self.log_path, "stdout": self.stdout_path, "restarts": self.restarts}


@dataclass
class ClusterInfo:
    home: Path
    rest_address: str
    jobmanager_pid: int
    jobmanager: ProcessInfo
    taskmanagers: list[ProcessInfo] = field(default_factory=list)
    started: float = 0.0
    #: high availability: every JobManager (leader and standbys), the HaConfig as a dict, and
    #: the leader as ZooKeeper names it (None when unknown)
    jobmanagers: list[ProcessInfo] = field(default_factory=list)
    ha: dict[str, Any] | None = None
    leader: dict[str, Any] | None = None
    #: the process that starts dead TaskManagers (and HA JobManagers) again, or None
    supervisor: ProcessInfo | None = None
    #: a drill cluster (``cluster start --hosts N``): its network-namespace hosts, as
    #: :meth:`flinkpy.cluster.netns.Hosts.record` gives them; None for an ordinary cluster
    hosts: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = {
            "home": str(self.home),
            "rest_address": self.rest_address,
            "jobmanager": self.jobmanager.to_dict(),
            "taskmanagers": [tm.to_dict() for tm in self.taskmanagers],
            "started": self.started,
        }
        if self.supervisor is not None:
            doc["supervisor"] = dict(self.supervisor.to_dict(), alive=alive(self.supervisor))
        if self.hosts is not None:
            doc["hosts"] = [{"name": h["name"], "address": h["address"]} for h in self.hosts["hosts"]]
        if self.ha is not None:
            leader_id = (self.leader or {}).get("id")
            doc["high_availability"] = {
                "zookeeper": self.ha["quorum"],
                "cluster_id": self.ha["cluster_id"],
                "leader": self.leader,
                "jobmanagers": [dict(jm.to_dict(), alive=alive(jm), role="leader" if jm.id == leader_id else "standby")
                                for jm in self.jobmanagers],
            }
        return doc


class ClusterHome:
    """The directory a cluster keeps its secret, state and logs in."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def resolve(cls, path: str | Path | None = None) -> "ClusterHome":
        return cls(default_home() if path is None else Path(path).expanduser())

    @property
    def log_dir(self) -> Path:
        return self.path / "log"

    @property
    def config_file(self) -> Path:
        return self.path / "flinkpy.yaml"

    def ensure(self) -> None:
        # private: the logs, job output and job code in it are what the token protects
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.log_dir.mkdir(mode=0o700, exist_ok=True)
        secret = self.path / "secret"
        if not secret.exists():
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        self.token()  # a secret others can read is refused before any process starts with it

    def token(self) -> str:
        """The cluster's secret; ``ConfigurationError`` when its mode lets others read it."""
        try:
            return read_secret(self.path / "secret")
        except FileNotFoundError as e:
            raise LookupError(f"no cluster secret in {self.path}") from e

    def __str__(self) -> str:
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)


def as_home(home: "ClusterHome | str | Path") -> ClusterHome:
    return home if isinstance(home, ClusterHome) else ClusterHome(Path(home))


def alive(proc: ProcessInfo) -> bool:
    """Whether the recorded process still runs (its pid, with the same start time)."""
    return running(proc.pid, proc.create_time)


def cluster_record(c: ClusterInfo) -> dict[str, Any]:
    rec = {
        "rest_address": c.rest_address,
        "started": c.started,
        "jobmanager": vars(c.jobmanager),
        "taskmanagers": [vars(tm) for tm in c.taskmanagers],
    }
    if c.ha is not None:
        rec["ha"] = c.ha
        rec["jobmanagers"] = [vars(jm) for jm in c.jobmanagers]
    if c.supervisor is not None:
        rec["supervisor"] = vars(c.supervisor)
    if c.hosts is not None:
        rec["hosts"] = c.hosts
    return rec


@contextlib.contextmanager
def record_lock(home: ClusterHome) -> Iterator[None]:
    """Held around every read-modify-write of ``cluster.json``: the supervisor, ``add-taskmanager``
    and ``add-jobmanager`` all change it, and none may lose another's change."""
    home.path.mkdir(mode=0o700, parents=True, exist_ok=True)
    with os.fdopen(os.open(home.path / ".cluster.lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_record(home: ClusterHome, c: ClusterInfo) -> None:
    write_json_atomically(home.path / "cluster.json", cluster_record(c))


def read_record(home: ClusterHome) -> ClusterInfo | None:
    rec = read_json(home.path / "cluster.json")
    if rec is None:
        return None
    jm = ProcessInfo(**rec["jobmanager"])
    return ClusterInfo(
        home=home.path,
        rest_address=rec["rest_address"],
        jobmanager_pid=jm.pid,
        jobmanager=jm,
        taskmanagers=[ProcessInfo(**tm) for tm in rec["taskmanagers"]],
        started=rec.get("started", 0.0),
        jobmanagers=[ProcessInfo(**j) for j in rec.get("jobmanagers", [])],
        ha=rec.get("ha"),
        supervisor=ProcessInfo(**rec["supervisor"]) if rec.get("supervisor") else None,
        hosts=rec.get("hosts"),
    )


#: the modules a cluster's processes run (each with ``--home DIR``), by the kind of process
CLUSTER_MODULES = {"flinkpy.jobmanager.process": "jobmanager", "flinkpy.taskmanager.process": "taskmanager",
                   "flinkpy.cluster.supervisor": "supervisor"}


def processes_started_in(home: ClusterHome) -> list[tuple[ProcessInfo, Any]]:
    """The cluster processes started with ``--home`` ``home`` (found by their command lines, for a
    cluster whose record is gone with its home), each with its ``psutil.Process``."""
    import psutil

    wanted = str(home.path)
    found: list[tuple[ProcessInfo, Any]] = []
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        module = next((m for m in CLUSTER_MODULES if m in argv), None)
        if module is None or "--home" not in argv or argv.index("--home") + 1 >= len(argv) or argv[argv.index("--home") + 1] != wanted:
            continue
        name = argv[argv.index("--id") + 1] if "--id" in argv[:-1] else CLUSTER_MODULES[module]
        found.append((ProcessInfo(id=name, pid=p.pid), p))
    return found
