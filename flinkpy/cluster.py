"""Local clusters: a JobManager and TaskManagers as background processes on this machine.

A cluster lives in its *home* (``$FLINKPY_HOME`` or ``~/.flinkpy``)::

    secret              the cluster's secret and REST token (mode 0600)
    flinkpy.yaml        configuration (optional)
    cluster.json        what is running: REST address, pids (with their start times)
    jobmanager.json     the JobManager's endpoints, written by it once it listens
    log/                jobmanager.log, taskmanager-<id>.log, taskmanager-<id>.out (printed output)

The embedded cluster that ``env.execute()`` starts when no cluster is configured is the same
processes in a temporary home, stopped when the job ends (Flink's MiniCluster, with real processes).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from flinkpy.errors import ClusterUnreachableError, ConflictError, FlinkpyError, OperationTimeoutError
from flinkpy.processes import create_time, log_tail, running


@dataclass
class ProcessInfo:
    id: str
    pid: int
    create_time: float = 0.0
    log_path: str = ""
    stdout_path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "pid": self.pid, "log": self.log_path, "stdout": self.stdout_path}


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

    def to_dict(self) -> dict[str, Any]:
        doc = {
            "home": str(self.home),
            "rest_address": self.rest_address,
            "jobmanager": self.jobmanager.to_dict(),
            "taskmanagers": [tm.to_dict() for tm in self.taskmanagers],
            "started": self.started,
        }
        if self.ha is not None:
            leader_id = (self.leader or {}).get("id")
            doc["high_availability"] = {
                "zookeeper": self.ha["quorum"],
                "cluster_id": self.ha["cluster_id"],
                "leader": self.leader,
                "jobmanagers": [dict(jm.to_dict(), alive=_alive(jm), role="leader" if jm.id == leader_id else "standby")
                                for jm in self.jobmanagers],
            }
        return doc


class ClusterHome:
    """The directory a cluster keeps its secret, state and logs in."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def resolve(cls, path: str | Path | None = None) -> "ClusterHome":
        if path is None:
            path = os.environ.get("FLINKPY_HOME") or Path.home() / ".flinkpy"
        return cls(Path(path).expanduser())

    @property
    def log_dir(self) -> Path:
        return self.path / "log"

    @property
    def config_file(self) -> Path:
        return self.path / "flinkpy.yaml"

    def ensure(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        secret = self.path / "secret"
        if not secret.exists():
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))

    def token(self) -> str:
        try:
            return (self.path / "secret").read_text().strip()
        except FileNotFoundError as e:
            raise LookupError(f"no cluster secret in {self.path}") from e

    def __str__(self) -> str:
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)


def _as_home(home: "ClusterHome | str | Path") -> ClusterHome:
    return home if isinstance(home, ClusterHome) else ClusterHome(Path(home))


def _alive(proc: ProcessInfo) -> bool:
    return running(proc.pid, proc.create_time)


def _spawn(cmd: list[str], log_path: Path, stdout: "IO[Any] | int | None", *, detach: bool, extra_env: dict[str, str]) -> subprocess.Popen:
    env = dict(os.environ)
    env.update(extra_env)
    env["FLINKPY_LOG_FILE"] = str(log_path)
    log = open(log_path, "ab", buffering=0)
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=stdout if stdout is not None else log,
            stderr=log,
            env=env,
            start_new_session=detach,
            close_fds=True,
        )
    finally:
        log.close()


def _wait_gone(procs: "list[Any]", timeout_s: float) -> "list[Any]":
    """Wait until each process has ended; returns those still alive at the deadline.

    A zombie counts as ended: once its parent is gone it waits for init to reap it, which can
    take seconds in a container, and it holds nothing but its pid.
    """
    import psutil

    deadline = time.monotonic() + timeout_s
    pending = list(procs)
    while pending:
        still = []
        for p in pending:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    still.append(p)
            except psutil.Error:
                pass
        pending = still
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    return pending


def _wait_for_jobmanager(home: ClusterHome, proc: subprocess.Popen, log_path: Path, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    path = home.path / "jobmanager.json"
    while time.monotonic() < deadline:
        try:
            info = json.loads(path.read_text())
            if info.get("pid") == proc.pid:
                return info
        except (FileNotFoundError, ValueError):
            pass
        if proc.poll() is not None:
            raise FlinkpyError(
                f"the JobManager exited during start-up (code {proc.returncode}): {log_tail(log_path, 3)}",
                remedy=f"see {log_path}",
            )
        time.sleep(0.01)
    raise OperationTimeoutError(f"the JobManager did not become ready within {timeout_s:.0f}s", remedy=f"see {log_path}")


def _wait_for_taskmanagers(rest_address: str, token: str, n: int, procs: list[subprocess.Popen], logs: list[Path], timeout_s: float) -> None:
    from flinkpy.client.rest import RestClient

    client = RestClient(rest_address, token, timeout_s=5)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if client.overview()["taskmanagers"] >= n:
            return
        for proc, log in zip(procs, logs):
            if proc.poll() is not None:
                raise FlinkpyError(f"a TaskManager exited during start-up (code {proc.returncode}): {log_tail(log, 3)}", remedy=f"see {log}")
        time.sleep(0.01)
    raise OperationTimeoutError(f"{n} TaskManager(s) did not register within {timeout_s:.0f}s", remedy=f"see the logs in {logs[0].parent}")


def _launch(
    home: ClusterHome,
    *,
    taskmanagers: int,
    slots: int,
    rest_port: int,
    rest_address: str,
    heartbeat_interval_ms: int,
    heartbeat_timeout_ms: int,
    detach: bool,
    tm_stdout: "IO[Any] | int | None",
    timeout_s: float,
) -> tuple[ClusterInfo, list[subprocess.Popen]]:
    home.ensure()
    try:
        (home.path / "jobmanager.json").unlink()
    except FileNotFoundError:
        pass
    py = sys.executable
    jm_log = home.log_dir / "jobmanager.log"
    env = {"PYTHONUNBUFFERED": "1"}
    jm = _spawn(
        [py, "-m", "flinkpy.jobmanager.process", "--home", str(home.path), "--rest-port", str(rest_port),
         "--rest-address", rest_address, "--heartbeat-timeout-ms", str(heartbeat_timeout_ms)],
        jm_log, None, detach=detach, extra_env=env,
    )
    procs = [jm]
    tm_infos: list[ProcessInfo] = []
    tm_logs: list[Path] = []
    try:
        # TaskManagers start while the JobManager boots; they wait for jobmanager.json themselves
        for i in range(taskmanagers):
            tm_id = f"tm-{i + 1}"
            log_path = home.log_dir / f"taskmanager-{tm_id}.log"
            out_path = home.log_dir / f"taskmanager-{tm_id}.out"
            out_file: Any = tm_stdout
            opened = None
            if tm_stdout is None:
                opened = open(out_path, "ab", buffering=0)
                out_file = opened
            tm = _spawn(
                [py, "-m", "flinkpy.taskmanager.process", "--home", str(home.path), "--id", tm_id, "--slots", str(slots),
                 "--heartbeat-interval-ms", str(heartbeat_interval_ms)],
                log_path, out_file, detach=detach,
                extra_env={"FLINKPY_STDOUT_FILE": str(out_path) if tm_stdout is None else ""},
            )
            if opened is not None:
                opened.close()
            procs.append(tm)
            tm_logs.append(log_path)
            tm_infos.append(ProcessInfo(tm_id, tm.pid, create_time(tm.pid), str(log_path), str(out_path) if tm_stdout is None else ""))
        info = _wait_for_jobmanager(home, jm, jm_log, timeout_s)
        _wait_for_taskmanagers(info["rest_address"], home.token(), taskmanagers, procs[1:], tm_logs, timeout_s)
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        raise
    cluster = ClusterInfo(
        home=home.path,
        rest_address=info["rest_address"],
        jobmanager_pid=jm.pid,
        jobmanager=ProcessInfo("jobmanager", jm.pid, create_time(jm.pid), str(jm_log)),
        taskmanagers=tm_infos,
        started=time.time(),
    )
    return cluster, procs


def start_cluster(home: "ClusterHome | str | Path", *, taskmanagers: int = 1, slots: int = 1, rest_port: int = 8081, config: Any = None, timeout_s: float = 30.0, jobmanagers: int = 1) -> ClusterInfo:
    """Start a background cluster in ``home``; returns once every TaskManager has registered
    (with high availability in ``config``: once a leader is elected and they registered with it)."""
    home = _as_home(home)
    running = find_cluster(home)
    if running is not None:
        raise ConflictError(
            f"a cluster is already running in {home.path} (REST {running.rest_address})",
            remedy="stop it with 'flinkpy cluster stop', or use another FLINKPY_HOME",
        )

    def cfg(key: str, default: Any) -> Any:
        return config.get(key) if config is not None else default

    from flinkpy.ha.services import HaConfig

    ha = HaConfig.from_config(config, default_storage_dir=str(home.path / "ha")) if config is not None else None
    if ha is None and jobmanagers > 1:
        from flinkpy.errors import UsageError

        raise UsageError(
            f"{jobmanagers} JobManagers need high availability: only one of them can lead",
            remedy="add --ha zookeeper --zookeeper-quorum HOST:PORT (see 'flinkpy zookeeper start')",
        )
    if ha is not None:
        from flinkpy.ha.cluster import launch_ha

        cluster = launch_ha(
            home, ha, jobmanagers=jobmanagers, taskmanagers=taskmanagers, slots=slots, rest_port=rest_port,
            rest_address=cfg("rest.bind-address", "127.0.0.1"),
            heartbeat_interval_ms=int(cfg("heartbeat.interval", 10000)),
            heartbeat_timeout_ms=int(cfg("heartbeat.timeout", 50000)), timeout_s=timeout_s,
        )
        write_record(home, cluster)
        return cluster
    cluster, _ = _launch(
        home,
        taskmanagers=taskmanagers,
        slots=slots,
        rest_port=rest_port,
        rest_address=cfg("rest.bind-address", "127.0.0.1"),
        heartbeat_interval_ms=int(cfg("heartbeat.interval", 10000)),
        heartbeat_timeout_ms=int(cfg("heartbeat.timeout", 50000)),
        detach=True,
        tm_stdout=None,
        timeout_s=timeout_s,
    )
    tmp = home.path / ".cluster.json.tmp"
    tmp.write_text(json.dumps(_cluster_record(cluster)))
    os.replace(tmp, home.path / "cluster.json")
    return cluster


def add_taskmanager(home: "ClusterHome | str | Path", *, slots: int = 1, config: Any = None, timeout_s: float = 30.0) -> ProcessInfo:
    """Start one more TaskManager for the cluster running in ``home`` (to add capacity, or to
    replace a lost one a job is waiting for); returns once it has registered."""
    from flinkpy.client.rest import RestClient

    home = _as_home(home)
    info = find_cluster(home)
    if info is None:
        raise ClusterUnreachableError(
            f"no cluster is running in {home.path}", remedy="start one with 'flinkpy cluster start'"
        )
    taken = {tm.id for tm in info.taskmanagers}
    n = len(taken) + 1
    while f"tm-{n}" in taken:
        n += 1
    tm_id = f"tm-{n}"
    log_path = home.log_dir / f"taskmanager-{tm_id}.log"
    out_path = home.log_dir / f"taskmanager-{tm_id}.out"
    interval = int(config.get("heartbeat.interval")) if config is not None else 10000
    rest = RestClient(info.rest_address, home.token(), timeout_s=5)
    before = rest.overview()["taskmanagers"]
    with open(out_path, "ab", buffering=0) as out_file:
        proc = _spawn(
            [sys.executable, "-m", "flinkpy.taskmanager.process", "--home", str(home.path), "--id", tm_id,
             "--slots", str(slots), "--heartbeat-interval-ms", str(interval)],
            log_path, out_file, detach=True, extra_env={"FLINKPY_STDOUT_FILE": str(out_path), "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + timeout_s
    while not any(tm["id"] == tm_id for tm in rest.taskmanagers()):
        if proc.poll() is not None:
            raise FlinkpyError(f"TaskManager {tm_id} exited during start-up (code {proc.returncode}): {log_tail(log_path, 3)}", remedy=f"see {log_path}")
        if time.monotonic() > deadline:
            raise OperationTimeoutError(f"TaskManager {tm_id} did not register within {timeout_s:.0f}s", remedy=f"see {log_path}")
        time.sleep(0.01)
    del before
    tm = ProcessInfo(tm_id, proc.pid, create_time(proc.pid), str(log_path), str(out_path))
    info.taskmanagers.append(tm)
    tmp = home.path / ".cluster.json.tmp"
    tmp.write_text(json.dumps(_cluster_record(info)))
    os.replace(tmp, home.path / "cluster.json")
    return tm


def _cluster_record(c: ClusterInfo) -> dict[str, Any]:
    rec = {
        "rest_address": c.rest_address,
        "started": c.started,
        "jobmanager": vars(c.jobmanager),
        "taskmanagers": [vars(tm) for tm in c.taskmanagers],
    }
    if c.ha is not None:
        rec["ha"] = c.ha
        rec["jobmanagers"] = [vars(jm) for jm in c.jobmanagers]
    return rec


def write_record(home: ClusterHome, c: ClusterInfo) -> None:
    tmp = home.path / ".cluster.json.tmp"
    tmp.write_text(json.dumps(_cluster_record(c)))
    os.replace(tmp, home.path / "cluster.json")


def _read_record(home: ClusterHome) -> ClusterInfo | None:
    try:
        rec = json.loads((home.path / "cluster.json").read_text())
    except (FileNotFoundError, ValueError):
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
    )


def find_cluster(home: "ClusterHome | str | Path") -> ClusterInfo | None:
    """The cluster running in ``home``, or None (no record, or its JobManager is gone).

    With high availability the cluster runs while any of its JobManagers does, and its REST
    address is the leader's, looked up in ZooKeeper (the recorded one if ZooKeeper cannot say).
    """
    info = _read_record(_as_home(home))
    if info is None:
        return None
    if info.ha is None:
        return info if _alive(info.jobmanager) else None
    alive = [jm for jm in info.jobmanagers if _alive(jm)]
    if not alive and not any(_alive(tm) for tm in info.taskmanagers):
        return None
    from flinkpy.ha.cluster import current_leader

    info.leader = current_leader(info.ha)
    if info.leader is not None:
        info.rest_address = info.leader["rest_address"]
        info.jobmanager_pid = int(info.leader["pid"])
        info.jobmanager = next((jm for jm in info.jobmanagers if jm.id == info.leader["id"]), info.jobmanager)
    return info


def rest_client_for(info: ClusterInfo, token: str | None, timeout_s: float = 10) -> Any:
    """A REST client of the cluster; with high availability it follows the leader."""
    from flinkpy.client.rest import RestClient

    if info.ha is None:
        return RestClient(info.rest_address, token, timeout_s=timeout_s)
    from flinkpy.ha.cluster import leader_resolver

    return RestClient(info.rest_address, token, timeout_s=timeout_s, leader=leader_resolver(info.ha))


def stop_cluster(home: "ClusterHome | str | Path", timeout_s: float = 30.0) -> list[ProcessInfo]:
    """Stop the cluster in ``home`` and every process it started (tasks included). Idempotent."""
    import psutil

    home = _as_home(home)
    info = _read_record(home)
    if info is None:
        return []
    procs = [p for p in [*info.taskmanagers, *(info.jobmanagers or [info.jobmanager])] if _alive(p)]
    tree: list[psutil.Process] = []
    for p in procs:
        try:
            root = psutil.Process(p.pid)
            tree += [root, *root.children(recursive=True)]
        except psutil.Error:
            pass
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    alive = _wait_gone(tree, timeout_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    _wait_gone(alive, 5)
    for name in ("cluster.json", "jobmanager.json"):
        try:
            (home.path / name).unlink()
        except FileNotFoundError:
            pass
    if info.ha is not None:
        shutil.rmtree(home.path / "jobmanagers", ignore_errors=True)
    return procs


class EmbeddedCluster:
    """A cluster for one job: real JobManager and TaskManager processes in a temporary home.

    >>> with EmbeddedCluster(slots=1) as c:    # doctest: +SKIP
    ...     c.rest_address
    """

    def __init__(self, *, slots: int, taskmanagers: int = 1, job_stdout: "IO[Any] | int | None" = None, timeout_s: float = 30.0):
        self.slots = slots
        self.taskmanagers = taskmanagers
        self.job_stdout = job_stdout
        self.timeout_s = timeout_s
        self.home = ClusterHome(Path(tempfile.mkdtemp(prefix="flinkpy-embedded-")))
        self._procs: list[subprocess.Popen] = []
        self.info: ClusterInfo | None = None

    @property
    def rest_address(self) -> str:
        assert self.info is not None
        return self.info.rest_address

    def token(self) -> str:
        return self.home.token()

    def __enter__(self) -> "EmbeddedCluster":
        stdout: Any = self.job_stdout if self.job_stdout is not None else sys.stdout.fileno()
        try:
            self.info, self._procs = _launch(
                self.home,
                taskmanagers=self.taskmanagers,
                slots=self.slots,
                rest_port=0,
                rest_address="127.0.0.1",
                heartbeat_interval_ms=1000,
                heartbeat_timeout_ms=30000,
                detach=False,
                tm_stdout=stdout,
                timeout_s=self.timeout_s,
            )
        except BaseException:
            shutil.rmtree(self.home.path, ignore_errors=True)
            raise
        return self

    def logs(self) -> str:
        return "\n".join(log_tail(p, 40) for p in sorted(self.home.log_dir.glob("*.log")))

    def __exit__(self, *exc: Any) -> None:
        import psutil

        tree: list[psutil.Process] = []
        for p in self._procs:
            try:
                root = psutil.Process(p.pid)
                tree += [root, *root.children(recursive=True)]
            except psutil.Error:
                pass
        for p in reversed(self._procs):  # TaskManagers first, then the JobManager
            if p.poll() is None:
                p.terminate()
        alive = _wait_gone(tree, 10)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        for p in self._procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if os.environ.get("FLINKPY_KEEP_EMBEDDED_HOME"):
            print(f"flinkpy: embedded cluster home kept at {self.home.path}", file=sys.stderr)
        else:
            shutil.rmtree(self.home.path, ignore_errors=True)
