"""A local Apache ZooKeeper — one server or an ensemble — run from the distribution's package.

What Flink's ``start-zookeeper-quorum.sh`` does, on one machine: each server is a plain
``java ... QuorumPeerMain zoo.cfg`` process, detached from the command that starts it, with its
configuration, data and log in the cluster home::

    <home>/zookeeper/zookeeper.json     what runs: pids (with start times), ports, tickTime
    <home>/zookeeper/<n>/zoo.cfg        server n's configuration (rewritten on every start)
    <home>/zookeeper/<n>/data/          its dataDir (myid, snapshots, transaction log), kept
    <home>/zookeeper/<n>/zookeeper.log  its stdout and stderr (log lines with slf4j-simple)

Data directories survive ``stop_zookeeper``: a server started again in the same home (on the
same port, or any) finds its znodes again, like a real one after a restart.

The installation is Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar``, whose
manifest names its dependencies) and ``java`` from ``$JAVA_HOME`` or the PATH. Another jar is
used with ``FLINKPY_ZOOKEEPER_JAR`` (or ``jar=``); a jar without such a manifest, e.g. from
Apache's binary tarball, gets every jar of its directory on the class path.

>>> import tempfile
>>> home = tempfile.mkdtemp()
>>> info = start_zookeeper(home, port=0, tick_time_ms=200)
>>> info.quorum                                 # doctest: +ELLIPSIS
'127.0.0.1:...'
>>> [(s.id, s.mode) for s in info.servers]
[(1, 'standalone')]
>>> [s.id for s in stop_zookeeper(home)]
[1]
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from flinkpy.errors import ClusterUnreachableError, ConfigurationError, ConflictError, FlinkpyError, NotFoundError, OperationTimeoutError
from flinkpy.files import read_json, write_json_atomically
from flinkpy.ha.zookeeper_probe import HOST, four_letter_word, server_mode  # noqa: F401  (importers read them here too)
from flinkpy.processes import create_time, log_tail, port_free, running

#: environment variable naming the ZooKeeper server jar to run
JAR_ENV = "FLINKPY_ZOOKEEPER_JAR"
DEFAULT_JAR = "/usr/share/java/zookeeper.jar"
#: an slf4j binding, so that the server logs at all (without one it is silent)
SLF4J_SIMPLE = "/usr/share/java/slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: four-letter commands the servers answer (``ruok`` for readiness, ``srvr`` for the mode)
FOUR_LETTER_WORDS = "ruok,srvr,stat,mntr,cons,conf,envi"
JVM_OPTS = [
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",  # a faster start, and less CPU while three JVMs start at once
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
]
INSTALL_REMEDY = f"install it with 'apt-get install zookeeper', or set {JAR_ENV} to the path of a zookeeper-3.x.jar"

#: servers started by this process, so that stopping them also reaps them (no zombies)
_children: dict[int, subprocess.Popen] = {}


# --------------------------------------------------------------------------- installation


@dataclass
class ZooKeeperInstallation:
    java: str
    jar: str
    classpath: list[str]

    def command(self, config: Path) -> list[str]:
        return [self.java, *JVM_OPTS, "-cp", os.pathsep.join(self.classpath), MAIN_CLASS, str(config)]


def _manifest_class_path(jar: Path) -> str | None:
    try:
        with zipfile.ZipFile(jar) as z:
            text = z.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    # continuation lines of a manifest start with one space
    joined = re.sub(r"\r?\n ", "", text)
    m = re.search(r"^Class-Path: *(.*)$", joined, re.M)
    return m.group(1).strip() if m else None


def find_installation(jar: str | os.PathLike[str] | None = None) -> ZooKeeperInstallation:
    """The ZooKeeper jar and the java to run it with; NotFoundError (exit 4) saying how to
    install what is missing."""
    explicit = jar if jar is not None else os.environ.get(JAR_ENV) or None
    path = Path(explicit if explicit is not None else DEFAULT_JAR).expanduser()
    if not path.is_file():
        where = f" ({JAR_ENV}={explicit})" if explicit is not None and jar is None else ""
        raise NotFoundError(f"ZooKeeper is not installed: {path} does not exist{where}", remedy=INSTALL_REMEDY)
    java = None
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK):
        java = str(Path(java_home) / "bin" / "java")
    java = java or shutil.which("java")
    if java is None:
        raise NotFoundError(
            "java was not found (ZooKeeper runs on Java)",
            remedy="install it with 'apt-get install default-jre-headless', or set JAVA_HOME",
        )
    classpath = [str(path)]
    if _manifest_class_path(path):
        # Debian's jar names its dependencies in its manifest; add a logging binding
        simple = path.parent / "slf4j-simple.jar"
        for candidate in (simple, Path(SLF4J_SIMPLE)):
            if candidate.is_file():
                classpath.append(str(candidate))
                break
    else:
        classpath.append(str(path.parent / "*"))
    return ZooKeeperInstallation(java=java, jar=str(path), classpath=classpath)


# --------------------------------------------------------------------------- records


@dataclass
class ZooKeeperServer:
    """One server of a local ZooKeeper; ``alive``, ``mode`` and ``version`` are filled by
    ``zookeeper_status``."""

    id: int
    pid: int
    client_port: int
    create_time: float = 0.0
    peer_port: int | None = None
    election_port: int | None = None
    dir: str = ""
    log: str = ""
    #: where its client port is reached on this host (the bind address, or loopback when it
    #: binds every interface)
    host: str = HOST
    alive: bool | None = None
    mode: str | None = None
    version: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"

    def record(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("alive", "mode", "version"):
            d.pop(k)
        return d

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pid": self.pid,
            "address": self.address,
            "client_port": self.client_port,
            "peer_port": self.peer_port,
            "election_port": self.election_port,
            "alive": self.alive,
            "mode": self.mode,
            "version": self.version,
            "dir": self.dir,
            "log": self.log,
        }


@dataclass
class ZooKeeperInfo:
    """A local ZooKeeper (one server, or an ensemble) as recorded in its home."""

    home: Path
    servers: list[ZooKeeperServer] = field(default_factory=list)
    tick_time_ms: int = 2000
    min_session_timeout_ms: int = 4000
    max_session_timeout_ms: int = 40000
    started: float = 0.0

    @property
    def quorum(self) -> str:
        """The connect string for clients: ``127.0.0.1:P1,127.0.0.1:P2,...`` (for --zookeeper-quorum)."""
        return ",".join(s.address for s in self.servers)

    @property
    def leader(self) -> ZooKeeperServer | None:
        return next((s for s in self.servers if s.mode in ("leader", "standalone")), None)

    @property
    def serving(self) -> bool:
        """Whether the last status saw a server that serves requests (standalone, or an ensemble
        with a leader)."""
        return self.leader is not None

    def record(self) -> dict[str, Any]:
        return {
            "servers": [s.record() for s in self.servers],
            "tick_time_ms": self.tick_time_ms,
            "min_session_timeout_ms": self.min_session_timeout_ms,
            "max_session_timeout_ms": self.max_session_timeout_ms,
            "started": self.started,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "home": str(self.home),
            "quorum": self.quorum,
            "serving": self.serving,
            "leader": self.leader.id if self.leader else None,
            "servers": [s.to_dict() for s in self.servers],
            "tick_time_ms": self.tick_time_ms,
            "min_session_timeout_ms": self.min_session_timeout_ms,
            "max_session_timeout_ms": self.max_session_timeout_ms,
            "started": self.started,
        }


def _home_path(home: Any) -> Path:
    return Path(getattr(home, "path", home)).expanduser()


def zookeeper_dir(home: Any) -> Path:
    """``<home>/zookeeper``: configuration, data and logs of the home's ZooKeeper servers."""
    return _home_path(home) / "zookeeper"


def _record_path(home: Any) -> Path:
    return zookeeper_dir(home) / "zookeeper.json"


def _write_record(info: ZooKeeperInfo) -> None:
    write_json_atomically(_record_path(info.home), info.record(), indent=2)


def _read_record(home: Any) -> ZooKeeperInfo | None:
    rec = read_json(_record_path(home))
    if rec is None:
        return None
    return ZooKeeperInfo(
        home=_home_path(home),
        servers=[ZooKeeperServer(**s) for s in rec.get("servers", [])],
        tick_time_ms=rec.get("tick_time_ms", 2000),
        min_session_timeout_ms=rec.get("min_session_timeout_ms", 0),
        max_session_timeout_ms=rec.get("max_session_timeout_ms", 0),
        started=rec.get("started", 0.0),
    )


# --------------------------------------------------------------------------- processes


def _alive(server: ZooKeeperServer) -> bool:
    """The recorded process still runs (and is the same process: its start time matches)."""
    child = _children.get(server.pid)
    if child is not None and child.poll() is not None:
        return False
    return running(server.pid, server.create_time)


def _wait_gone(servers: Iterable[ZooKeeperServer], timeout_s: float) -> list[ZooKeeperServer]:
    deadline = time.monotonic() + timeout_s
    pending = list(servers)
    while pending:
        pending = [s for s in pending if _alive(s)]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    return pending


def _reap(server: ZooKeeperServer) -> None:
    child = _children.pop(server.pid, None)
    if child is not None:
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _signal(server: ZooKeeperServer, sig: int) -> None:
    try:
        os.kill(server.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# --------------------------------------------------------------------------- start / stop / status


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _config_text(*, tick_time_ms: int, data_dir: Path, client_port: int, min_session_timeout_ms: int,
                 max_session_timeout_ms: int, ensemble: list[tuple[int, int, int]], client_address: str = HOST) -> str:
    # followers get at least 10 s to connect and sync, and 4 s of lag, whatever the tickTime
    init_limit = max(10, -(-10000 // tick_time_ms))
    sync_limit = max(5, -(-4000 // tick_time_ms))
    lines = [
        "# written by 'flinkpy zookeeper start' (rewritten on every start)",
        f"tickTime={tick_time_ms}",
        f"initLimit={init_limit}",
        f"syncLimit={sync_limit}",
        f"dataDir={data_dir}",
        f"clientPort={client_port}",
        f"clientPortAddress={client_address}",
        f"minSessionTimeout={min_session_timeout_ms}",
        f"maxSessionTimeout={max_session_timeout_ms}",
        "maxClientCnxns=0",
        "admin.enableServer=false",
        f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
    ]
    for sid, peer, election in ensemble:
        lines.append(f"server.{sid}={HOST}:{peer}:{election}")
    return "\n".join(lines) + "\n"


def _checked_settings(port: int, servers: int, tick_time_ms: int, min_session_timeout_ms: int | None,
                      max_session_timeout_ms: int | None) -> tuple[int, int]:
    """``start_zookeeper``'s arguments checked; returns the session timeouts (min, max) in ms."""
    if servers < 1 or servers % 2 == 0 or servers > 9:
        raise ConfigurationError(f"invalid number of ZooKeeper servers: {servers}", remedy="use 1, or an odd ensemble size such as 3 or 5")
    if tick_time_ms < 1:
        raise ConfigurationError(f"invalid tickTime {tick_time_ms} ms", remedy="use a positive number of milliseconds, e.g. 2000 or 200")
    min_sto = min_session_timeout_ms if min_session_timeout_ms is not None else 2 * tick_time_ms
    max_sto = max_session_timeout_ms if max_session_timeout_ms is not None else 20 * tick_time_ms
    if not 0 < min_sto <= max_sto:
        raise ConfigurationError(
            f"invalid session timeouts: minimum {min_sto} ms, maximum {max_sto} ms",
            remedy="the minimum must be positive and not above the maximum",
        )
    if port < 0 or port + servers - 1 > 65535:
        raise ConfigurationError(f"invalid ZooKeeper port {port}", remedy="use a port between 1 and 65535, or 0 for free ports")
    return min_sto, max_sto


def _client_ports(port: int, servers: int) -> list[int]:
    """``port``, ``port+1``, ... (each checked free), or free ports for ``port=0``."""
    if port == 0:
        return _free_ports(servers)
    client_ports = [port + i for i in range(servers)]
    for p in client_ports:
        if not port_free(p, HOST):
            raise ConflictError(
                f"port {p} on {HOST} is already in use (another ZooKeeper?)",
                remedy="choose another with --port, or --port 0 for free ports",
            )
    return client_ports


def _launch_server(install: ZooKeeperInstallation, root: Path, info: ZooKeeperInfo, sid: int, client_port: int,
                   ensemble: list[tuple[int, int, int]], bind_address: str = HOST) -> tuple[subprocess.Popen, ZooKeeperServer]:
    """Write server ``sid``'s configuration (and ``myid`` in an ensemble) and start its process."""
    server_dir = root / str(sid)
    data_dir = server_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    if ensemble:
        (data_dir / "myid").write_text(f"{sid}\n")
    config = server_dir / "zoo.cfg"
    config.write_text(_config_text(
        tick_time_ms=info.tick_time_ms, data_dir=data_dir, client_port=client_port,
        min_session_timeout_ms=info.min_session_timeout_ms, max_session_timeout_ms=info.max_session_timeout_ms,
        ensemble=ensemble, client_address=bind_address,
    ))
    log = server_dir / "zookeeper.log"
    with open(log, "ab", buffering=0) as logf:
        logf.write(f"---- flinkpy: starting ZooKeeper server {sid} at {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode())
        proc = subprocess.Popen(
            install.command(config),
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            cwd=str(server_dir),
            start_new_session=True,  # outlives the command, and its Ctrl-C
            close_fds=True,
        )
    _children[proc.pid] = proc
    peers = ensemble[sid - 1] if ensemble else None
    server = ZooKeeperServer(
        id=sid, pid=proc.pid, client_port=client_port, create_time=create_time(proc.pid),
        peer_port=peers[1] if peers else None, election_port=peers[2] if peers else None,
        dir=str(server_dir), log=str(log), host=HOST if bind_address in (HOST, "0.0.0.0") else bind_address,
    )
    return proc, server


def start_zookeeper(
    home: Any,
    port: int = 2181,
    servers: int = 1,
    tick_time_ms: int = 2000,
    *,
    min_session_timeout_ms: int | None = None,
    max_session_timeout_ms: int | None = None,
    jar: str | os.PathLike[str] | None = None,
    timeout_s: float = 60.0,
    bind_address: str = HOST,
) -> ZooKeeperInfo:
    """Start ZooKeeper in ``home`` (a ClusterHome or a directory): one server, or an ensemble of
    ``servers`` (odd) servers on loopback, as detached processes that outlive the caller.

    Client ports are ``port``, ``port+1``, ...; ``port=0`` picks free ones, listening on
    ``bind_address`` (``0.0.0.0``: every interface, for JobManagers on other hosts). Peer and election
    ports of an ensemble are always picked free. Session timeouts default to ZooKeeper's
    2 and 20 ticks. Returns once every server answers ``ruok`` and reports its mode (standalone,
    or leader/follower: the ensemble has a quorum). Raises ConflictError (exit 9) when ZooKeeper
    already runs in ``home`` or a port is taken, NotFoundError (exit 4) when ZooKeeper or java
    is not installed, OperationTimeoutError (exit 6) when it is not ready in ``timeout_s``.
    """
    min_sto, max_sto = _checked_settings(port, servers, tick_time_ms, min_session_timeout_ms, max_session_timeout_ms)
    install = find_installation(jar)

    root = zookeeper_dir(home)
    running = find_zookeeper(home)
    if running is not None:
        raise ConflictError(
            f"ZooKeeper is already running in {_home_path(home)} (quorum {running.quorum})",
            remedy="stop it with 'flinkpy zookeeper stop', or use another FLINKPY_HOME",
        )
    client_ports = _client_ports(port, servers)
    quorum_ports = _free_ports(2 * servers) if servers > 1 else []
    ensemble = [(i + 1, quorum_ports[2 * i], quorum_ports[2 * i + 1]) for i in range(servers)] if servers > 1 else []

    info = ZooKeeperInfo(
        home=_home_path(home), tick_time_ms=tick_time_ms, min_session_timeout_ms=min_sto,
        max_session_timeout_ms=max_sto, started=time.time(),
    )
    root.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    try:
        for i in range(servers):
            proc, server = _launch_server(install, root, info, i + 1, client_ports[i], ensemble, bind_address)
            procs.append(proc)
            info.servers.append(server)
        # recorded before the wait, so that 'stop' finds servers of an interrupted start
        _write_record(info)
        _wait_ready(info, procs, timeout_s)
    except BaseException:
        for s in info.servers:
            _signal(s, signal.SIGKILL)
        for s in info.servers:
            _reap(s)
        _wait_gone(info.servers, 5)
        try:
            _record_path(home).unlink()
        except FileNotFoundError:
            pass
        raise
    return info


def _wait_ready(info: ZooKeeperInfo, procs: list[subprocess.Popen], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    expected = {"standalone"} if len(info.servers) == 1 else {"leader", "follower"}
    while True:
        for server, proc in zip(info.servers, procs):
            if proc.poll() is not None:
                raise FlinkpyError(
                    f"ZooKeeper server {server.id} exited during start-up (code {proc.returncode}): {log_tail(server.log, 3)}",
                    remedy=f"see {server.log}",
                )
        ready = True
        for server in info.servers:
            if server.mode not in expected:
                if four_letter_word(server.client_port, "ruok", server.host, timeout_s=0.5) != "imok":
                    ready = False
                    continue
                server.mode, server.version = server_mode(server.client_port, server.host, timeout_s=0.5)
                ready = ready and server.mode in expected
        if ready and (len(info.servers) == 1 or sum(s.mode == "leader" for s in info.servers) == 1):
            for server in info.servers:
                server.alive = True
            return
        if ready:  # an ensemble that reports two leaders is mid-election: ask again
            for server in info.servers:
                server.mode = None
        if time.monotonic() >= deadline:
            waiting = [s for s in info.servers if s.mode not in expected]
            raise OperationTimeoutError(
                f"ZooKeeper did not become ready within {timeout_s:.0f}s (server(s) {', '.join(str(s.id) for s in waiting)} not serving)",
                remedy=f"see {waiting[0].log if waiting else info.servers[0].log}",
            )
        time.sleep(0.05)


def find_zookeeper(home: Any) -> ZooKeeperInfo | None:
    """The ZooKeeper recorded in ``home`` if at least one of its servers still runs, else None."""
    info = _read_record(home)
    if info is None or not any(_alive(s) for s in info.servers):
        return None
    return info


def zookeeper_status(home: Any, timeout_s: float = 1.0) -> ZooKeeperInfo:
    """The ZooKeeper of ``home`` with each server's ``alive``, ``mode`` and ``version`` filled in.

    Raises ClusterUnreachableError (exit 3) when none of its servers runs.
    """
    info = find_zookeeper(home)
    if info is None:
        raise ClusterUnreachableError(
            f"no ZooKeeper is running in {_home_path(home)}", remedy="start one with 'flinkpy zookeeper start'"
        )
    for server in info.servers:
        server.alive = _alive(server)
        if server.alive:
            server.mode, server.version = server_mode(server.client_port, server.host, timeout_s=timeout_s)
    return info


def stop_zookeeper(home: Any, timeout_s: float = 10.0) -> list[ZooKeeperServer]:
    """Stop the ZooKeeper servers of ``home``: SIGTERM, then SIGKILL after ``timeout_s``.

    Returns the servers that were running; stopping when none runs returns [] (idempotent).
    The data directories are kept.
    """
    info = _read_record(home)
    if info is None:
        return []
    running = [s for s in info.servers if _alive(s)]
    for s in running:
        _signal(s, signal.SIGTERM)
    left = _wait_gone(running, timeout_s)
    for s in left:
        _signal(s, signal.SIGKILL)
    _wait_gone(left, 5)
    for s in info.servers:
        _reap(s)
    try:
        _record_path(home).unlink()
    except FileNotFoundError:
        pass
    return running


def kill_zookeeper(home: Any, server: int | None = None, timeout_s: float = 5.0) -> list[ZooKeeperServer]:
    """SIGKILL one server (by id) or all servers of ``home``, and wait until they are gone.

    For tests of ZooKeeper failures: the record stays, so ``stop_zookeeper`` still stops the
    others and ``start_zookeeper`` starts again once none runs.
    """
    info = _read_record(home)
    if info is None:
        return []
    victims = [s for s in info.servers if (server is None or s.id == server) and _alive(s)]
    if server is not None and not any(s.id == server for s in info.servers):
        raise NotFoundError(f"no ZooKeeper server {server} in {_home_path(home)}", remedy=f"servers are {', '.join(str(s.id) for s in info.servers)}")
    for s in victims:
        _signal(s, signal.SIGKILL)
    _wait_gone(victims, timeout_s)
    for s in victims:
        _reap(s)
    return victims
