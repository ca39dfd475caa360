"""A Spark standalone cluster on this machine: a master and workers from PySpark's distribution.

What Spark's ``start-master.sh`` / ``start-worker.sh`` do, without their daemon scripts: each
process is ``spark-class org.apache.spark.deploy.master.Master`` (or ``...worker.Worker``) run
from the ``pyspark`` package directory (which is a Spark distribution: ``bin/spark-class`` and
``jars/``), detached from the command that starts it, bound to loopback, with its log and work
directory in the cluster home::

    <home>/spark-standalone/standalone.json     what runs: pids (with start times), ports
    <home>/spark-standalone/log/master.log      the master's log (Spark logs to stderr)
    <home>/spark-standalone/log/worker-<n>.log  worker n's log
    <home>/spark-standalone/work/worker-<n>/    worker n's work directory: executors' stdout/stderr

Executors are JVMs the workers start per application (``CoarseGrainedExecutorBackend``); they
belong to their worker, so stopping the cluster ends them too. Ports are chosen free by the
JVMs themselves (port 0) unless given, and read back from the logs, so two clusters on one
machine never race for a port.

>>> info = start_standalone("/tmp/h", workers=2, cores=1, memory="1g")   # doctest: +SKIP
>>> info.master_url                                                       # doctest: +SKIP
'spark://127.0.0.1:40123'
>>> stop_standalone("/tmp/h")                                             # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from flinkpy.errors import ClusterUnreachableError, ConfigurationError, ConflictError, FlinkpyError, OperationTimeoutError, UsageError
from flinkpy.files import read_json, write_json_atomically
from flinkpy.processes import create_time, log_tail, port_free, running

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: the heap of the master and worker JVMs themselves (executors get --memory)
DAEMON_MEMORY = "512m"
#: what marks an executor JVM in its command line
EXECUTOR_MARK = "CoarseGrainedExecutorBackend"
_MEMORY = re.compile(r"^[1-9][0-9]*[kmgt]?$", re.I)

#: processes started by this process, so that stopping them also reaps them (no zombies)
_children: dict[int, subprocess.Popen] = {}


# --------------------------------------------------------------------------- installation


@dataclass
class SparkInstallation:
    """The Spark distribution PySpark ships, and the Java it runs on."""

    spark_home: str
    java_home: str
    version: str

    @property
    def spark_class(self) -> str:
        return str(Path(self.spark_home) / "bin" / "spark-class")


def find_installation() -> SparkInstallation:
    """PySpark's Spark and a Java; ConfigurationError (exit 8) naming what is missing."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError("a Spark standalone cluster needs PySpark, which is not installed",
                                 remedy="run \"pip install 'flinkpy[spark]'\" (PySpark 4 ships Spark's jars and spark-class)")
    home = Path(list(spec.submodule_search_locations)[0])
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise ConfigurationError(f"PySpark in {home} has no Spark distribution (bin/spark-class, jars/)",
                                 remedy="install PySpark from PyPI (pip install 'pyspark[sql]'), which ships one")
    java_home = _java_home()
    version = "unknown"
    try:
        text = (home / "version.py").read_text()
        m = re.search(r"__version__[^=]*=\s*[\"']([^\"']+)", text)
        version = m.group(1) if m else version
    except OSError:
        pass
    return SparkInstallation(spark_home=str(home), java_home=java_home, version=version)


def _java_home() -> str:
    env = os.environ.get("JAVA_HOME")
    if env and os.access(Path(env) / "bin" / "java", os.X_OK):
        return env
    java = shutil.which("java")
    if java is None:
        raise ConfigurationError("java was not found: Spark runs on Java 17",
                                 remedy="install it with 'apt-get install openjdk-17-jre-headless', or set JAVA_HOME")
    return str(Path(os.path.realpath(java)).parent.parent)


# --------------------------------------------------------------------------- records


@dataclass
class SparkProcess:
    """The master or one worker; ``alive`` and ``state`` are filled in by ``standalone_status``."""

    role: str  # "master" or "worker"
    index: int
    pid: int
    create_time: float
    log: str
    port: int = 0
    webui_port: int = 0
    work_dir: str = ""
    cores: int = 0
    memory: str = ""
    alive: bool | None = None
    state: str | None = None
    worker_id: str | None = None

    def record(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("alive", "state", "worker_id"):
            d.pop(k)
        return d

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["address"] = f"{HOST}:{self.port}" if self.port else None
        d["web_ui"] = f"http://{HOST}:{self.webui_port}" if self.webui_port else None
        return d


@dataclass
class StandaloneCluster:
    """A Spark standalone cluster as recorded in its home."""

    home: Path
    master: SparkProcess
    workers: list[SparkProcess] = field(default_factory=list)
    started: float = 0.0
    spark_home: str = ""
    java_home: str = ""
    version: str = ""
    #: from the master's JSON when the status was taken (None when it did not answer)
    master_state: str | None = None
    applications: list[dict[str, Any]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master.port}"

    @property
    def web_ui(self) -> str:
        return f"http://{HOST}:{self.master.webui_port}"

    def record(self) -> dict[str, Any]:
        return {"master": self.master.record(), "workers": [w.record() for w in self.workers], "started": self.started,
                "spark_home": self.spark_home, "java_home": self.java_home, "version": self.version}

    def to_dict(self) -> dict[str, Any]:
        return {
            "home": str(self.home), "master_url": self.master_url, "web_ui": self.web_ui, "status": self.master_state,
            "version": self.version, "started": self.started,
            "master": self.master.to_dict(), "workers": [w.to_dict() for w in self.workers],
            "alive_workers": sum(1 for w in self.workers if w.state == "ALIVE"),
            "applications": self.applications,
        }


def standalone_dir(home: Any) -> Path:
    """``<home>/spark-standalone``: record, logs and work directories of the home's cluster."""
    return Path(getattr(home, "path", home)).expanduser() / "spark-standalone"


def _record_path(home: Any) -> Path:
    return standalone_dir(home) / "standalone.json"


def _write_record(info: StandaloneCluster) -> None:
    write_json_atomically(_record_path(info.home), info.record(), indent=2)


def _read_record(home: Any) -> StandaloneCluster | None:
    rec = read_json(_record_path(home))
    if rec is None:
        return None
    return StandaloneCluster(
        home=Path(getattr(home, "path", home)).expanduser(), master=SparkProcess(**rec["master"]),
        workers=[SparkProcess(**w) for w in rec.get("workers", [])], started=rec.get("started", 0.0),
        spark_home=rec.get("spark_home", ""), java_home=rec.get("java_home", ""), version=rec.get("version", ""),
    )


# --------------------------------------------------------------------------- processes


def _alive(p: SparkProcess) -> bool:
    child = _children.get(p.pid)
    if child is not None and child.poll() is not None:
        return False
    return running(p.pid, p.create_time)


def _environment(install: SparkInstallation, root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": install.spark_home, "JAVA_HOME": install.java_home, "SPARK_LOCAL_IP": HOST,
        "SPARK_LOG_DIR": str(root / "log"), "SPARK_WORKER_DIR": str(root / "work"),
        "SPARK_PID_DIR": str(root), "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        # the Spark of the pyspark package, not another one a SPARK_CONF_DIR might point at
        "SPARK_CONF_DIR": str(root / "conf"),
    })
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    return env


def _launch(install: SparkInstallation, env: dict[str, str], args: list[str], log: Path, cwd: Path) -> tuple[subprocess.Popen, int]:
    """Start ``spark-class ARGS``; its output appended to ``log``. Returns (process, log offset
    where this run's lines start)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab", buffering=0) as f:
        f.write(f"---- flinkpy: starting {args[0].rsplit('.', 1)[-1]} at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
        offset = f.tell()
        proc = subprocess.Popen(
            [install.spark_class, *args], stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, cwd=str(cwd), env=env,
            start_new_session=True,  # outlives the command and its Ctrl-C; stop signals the whole group
            close_fds=True,
        )
    _children[proc.pid] = proc
    return proc, offset


def _log_since(path: str | Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


_MASTER_URL = re.compile(r"Starting Spark master at spark://[^:\s]+:(\d+)")
_WORKER_ADDR = re.compile(r"Starting Spark worker [^:\s]+:(\d+)")
_WEBUI = re.compile(r"Bound (?:Master|Worker)WebUI to \S+, and started at https?://[^:\s]+:(\d+)")
_BIND_FAILED = re.compile(r"(Address already in use|BindException|Failed to bind|Service '\w+' could not bind)")


def master_json(webui_port: int, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The master's state (workers, applications) from its web UI's JSON, or None."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{webui_port}/json/", timeout=timeout_s) as r:
            return json.loads(r.read().decode())
    except (OSError, ValueError):
        return None


def descendants(pids: list[int]) -> list[Any]:
    """The processes ``pids`` and everything they started (executors, their Python workers)."""
    from flinkpy.processes import process_tree

    return process_tree(pids)


# --------------------------------------------------------------------------- start / stop / status


def start_standalone(
    home: Any,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    port: int = 0,
    timeout_s: float = 120.0,
    on_progress: Callable[[str], None] | None = None,
) -> StandaloneCluster:
    """Start a master and ``workers`` workers (``cores`` cores and ``memory`` for executors each)
    on loopback, as detached processes that outlive the caller; returns once the master accepts
    connections and every worker has registered with it.

    ``port`` is the master's port (0: a free one). Raises ConflictError (exit 9) when a cluster
    already runs in ``home``, ConfigurationError (exit 8) when PySpark or Java is missing,
    OperationTimeoutError (exit 6) when it is not ready within ``timeout_s``.
    """
    if workers < 1 or cores < 1:
        raise UsageError(f"invalid cluster size: {workers} worker(s) of {cores} core(s)", remedy="give at least one worker of one core")
    if not _MEMORY.match(memory):
        raise UsageError(f"invalid memory {memory!r}", remedy="use Spark's syntax, e.g. 1g or 512m")
    if not 0 <= port <= 65535:
        raise UsageError(f"invalid port {port}", remedy="use a port between 1 and 65535, or 0 for a free one")
    install = find_installation()
    current = find_standalone(home)
    if current is not None:
        raise ConflictError(f"a Spark standalone cluster is already running in {current.home} ({current.master_url})",
                            remedy="stop it with 'flinkpy spark stop', or use another FLINKPY_HOME")
    if port and not port_free(port, HOST):
        # Spark would quietly take the next port up: refuse, as the port was asked for
        raise ConflictError(f"port {port} on {HOST} is already in use", remedy="choose another --port, or --port 0 for a free one")
    root = standalone_dir(home)
    for d in (root / "log", root / "work", root / "conf"):
        d.mkdir(parents=True, exist_ok=True)
    env = _environment(install, root)
    say = on_progress or (lambda _msg: None)
    info = StandaloneCluster(home=Path(getattr(home, "path", home)).expanduser(), master=SparkProcess("master", 0, 0, 0.0, ""),
                             started=time.time(), spark_home=install.spark_home, java_home=install.java_home, version=install.version)
    deadline = time.monotonic() + timeout_s
    try:
        log = root / "log" / "master.log"
        proc, offset = _launch(install, env, [MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", "0"], log, root)
        info.master = SparkProcess("master", 0, proc.pid, create_time(proc.pid), str(log))
        _write_record(info)  # before any wait: 'stop' finds the processes of an interrupted start
        say("Starting the Spark master...")
        info.master.port, info.master.webui_port = _wait_ports(proc, log, offset, _MASTER_URL, deadline, "the Spark master")
        _write_record(info)
        say(f"Spark master at {info.master_url}; starting {workers} worker(s)...")
        launched = []
        for i in range(workers):
            wlog = root / "log" / f"worker-{i}.log"
            work = root / "work" / f"worker-{i}"
            work.mkdir(parents=True, exist_ok=True)
            wproc, woffset = _launch(install, env, [WORKER_CLASS, info.master_url, "--host", HOST, "--port", "0", "--webui-port", "0",
                                                    "--cores", str(cores), "--memory", memory, "--work-dir", str(work)], wlog, work)
            info.workers.append(SparkProcess("worker", i, wproc.pid, create_time(wproc.pid), str(wlog), work_dir=str(work),
                                             cores=cores, memory=memory))
            launched.append((wproc, wlog, woffset))
        _write_record(info)
        for w, (wproc, wlog, woffset) in zip(info.workers, launched):
            w.port, w.webui_port = _wait_ports(wproc, wlog, woffset, _WORKER_ADDR, deadline, f"Spark worker {w.index}")
        _write_record(info)
        _wait_registered(info, deadline, say)
    except BaseException:
        _terminate(info, grace_s=0.0)
        try:
            _record_path(home).unlink()
        except FileNotFoundError:
            pass
        raise
    return info


def _wait_ports(proc: subprocess.Popen, log: Path, offset: int, addr: re.Pattern[str], deadline: float, what: str) -> tuple[int, int]:
    """(RPC port, web UI port) from the process's log lines, once both are bound."""
    while True:
        text = _log_since(log, offset)
        a, w = addr.search(text), _WEBUI.search(text)
        if a and w:
            return int(a.group(1)), int(w.group(1))
        if proc.poll() is not None:
            bind = _BIND_FAILED.search(text)
            raise (ConflictError if bind else FlinkpyError)(
                f"{what} exited during start-up (code {proc.returncode}): {log_tail(log, 3, ' | ')}",
                remedy=f"choose another --port, or --port 0 for a free one; see {log}" if bind else f"see {log}")
        if time.monotonic() >= deadline:
            raise OperationTimeoutError(f"{what} did not start listening in time", remedy=f"see {log}")
        time.sleep(0.05)


def _wait_registered(info: StandaloneCluster, deadline: float, say: Callable[[str], None]) -> None:
    want = {w.port for w in info.workers}
    last = -1
    while True:
        doc = master_json(info.master.webui_port)
        alive = {int(w["port"]) for w in (doc or {}).get("workers", []) if w.get("state") == "ALIVE"} & want
        if len(alive) != last:
            last = len(alive)
            say(f"Spark master at {info.master_url}: {len(alive)}/{len(want)} worker(s) registered...")
        if doc is not None and doc.get("status") == "ALIVE" and alive == want:
            _fill_status(info, doc)
            return
        for p in (info.master, *info.workers):
            child = _children.get(p.pid)
            if child is not None and child.poll() is not None:
                raise FlinkpyError(f"Spark {p.role} {p.index if p.role == 'worker' else ''} exited during start-up "
                                   f"(code {child.returncode}): {log_tail(p.log, 3, ' | ')}".replace("  ", " "), remedy=f"see {p.log}")
        if time.monotonic() >= deadline:
            raise OperationTimeoutError(f"only {len(alive)} of {len(want)} Spark worker(s) registered with {info.master_url} in time",
                                        remedy=f"see the logs in {standalone_dir(info.home) / 'log'}")
        time.sleep(0.1)


def _fill_status(info: StandaloneCluster, doc: dict[str, Any] | None) -> None:
    info.master.alive = _alive(info.master)
    info.master_state = (doc or {}).get("status")
    info.master.state = info.master_state if info.master.alive else None
    by_port = {int(w["port"]): w for w in (doc or {}).get("workers", [])}
    for w in info.workers:
        w.alive = _alive(w)
        seen = by_port.get(w.port)
        # the master keeps a worker it lost as DEAD for a while; a live worker with no entry is not registered yet
        w.state = seen.get("state") if seen else None
        w.worker_id = seen.get("id") if seen else None
        if not w.alive and w.state == "ALIVE":
            w.state = "LOST"
    info.applications = [
        {"id": a.get("id"), "name": a.get("name"), "state": a.get("state"), "cores": a.get("cores"),
         "memory_per_executor_mb": a.get("memoryperexecutor") or a.get("memoryperslave"), "user": a.get("user")}
        for a in (doc or {}).get("activeapps", [])
    ]


def find_standalone(home: Any) -> StandaloneCluster | None:
    """The cluster recorded in ``home`` if its master or a worker still runs, else None."""
    info = _read_record(home)
    if info is None or not any(_alive(p) for p in (info.master, *info.workers)):
        return None
    return info


def standalone_status(home: Any) -> StandaloneCluster:
    """The cluster of ``home`` with liveness, the master's state, workers' states and running
    applications filled in; ClusterUnreachableError (exit 3) when none of it runs."""
    info = find_standalone(home)
    if info is None:
        raise ClusterUnreachableError(f"no Spark standalone cluster is running in {standalone_dir(home).parent}",
                                      remedy="start one with 'flinkpy spark start'")
    _fill_status(info, master_json(info.master.webui_port) if _alive(info.master) else None)
    return info


def executors(application_id: str | None = None) -> list[Any]:
    """Executor JVMs on this machine (of one application, when given), as psutil processes."""
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if any(EXECUTOR_MARK in c for c in cmd) and (application_id is None or application_id in cmd):
            out.append(p)
    return out


def executor_id(process: Any) -> str | None:
    """The executor id (``--executor-id N``) in an executor JVM's command line."""
    try:
        cmd = process.cmdline()
    except Exception:  # noqa: BLE001 - psutil.Error: the process is gone
        return None
    for flag, value in zip(cmd, cmd[1:]):
        if flag == "--executor-id":
            return value
    return None


def _terminate(info: StandaloneCluster, grace_s: float) -> list[SparkProcess]:
    """SIGTERM the process groups of master and workers, SIGKILL what is left after ``grace_s``
    (executors and their Python workers included). Returns the processes that were running."""
    import psutil

    procs = [p for p in (info.master, *info.workers) if p.pid and _alive(p)]
    # taken before any signal: a worker that dies first would orphan its executors
    tree = descendants([p.pid for p in procs])
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    _, left = psutil.wait_procs(tree, timeout=grace_s) if grace_s > 0 else ([], tree)
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for q in left:
        try:
            q.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=10)
    for p in (info.master, *info.workers):
        child = _children.pop(p.pid, None)
        if child is not None:
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    return procs


def stop_standalone(home: Any, timeout_s: float = 10.0) -> list[SparkProcess]:
    """Stop the cluster of ``home``: SIGTERM to the master's and workers' process groups, then
    SIGKILL to whatever is left of them and of their executors after ``timeout_s``.

    Returns the processes that were running; stopping when none runs returns [] (idempotent).
    Logs and work directories are kept.
    """
    info = _read_record(home)
    if info is None:
        return []
    stopped = _terminate(info, grace_s=timeout_s)
    try:
        _record_path(home).unlink()
    except FileNotFoundError:
        pass
    return stopped


def check_master(url: str, timeout_s: float = 3.0) -> None:
    """Refuse a ``spark://HOST:PORT[,HOST:PORT...]`` master none of whose addresses accepts a
    connection (ClusterUnreachableError, exit 3): without this, Spark retries for a minute and
    then leaves a stopped SparkContext behind. Other masters are not checked."""
    import socket

    if not url.startswith("spark://"):
        return
    reasons = []
    for address in url[len("spark://"):].split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(f"malformed Spark master URL {url!r}", remedy="write it as spark://HOST:PORT")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return
        except OSError as e:
            reasons.append(f"{host}:{port}: {e.strerror or e}")
    raise ClusterUnreachableError(f"no Spark master answers at {url} ({'; '.join(reasons)})",
                                  remedy="start one with 'flinkpy spark start' and pass the URL it prints, or fix --spark-master / spark.master")
