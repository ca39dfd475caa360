"""The processes of one host of a cluster across hosts: a JobManager here, TaskManagers there.

``flinkpy jobmanager start`` runs the JobManager of a cluster (no TaskManagers) in this host's
home; ``flinkpy taskmanager start --jobmanager HOST:PORT`` runs a TaskManager in another host's
home that registers with it, as Flink's ``jobmanager.sh`` and ``taskmanager.sh`` do. The two
hosts share one thing, the cluster's secret: it reaches the TaskManager's host as a file
(``--secret-file``, mode 0600) or in the environment (``FLINKPY_CLUSTER_SECRET``), never on a
command line, where every local user could read it in the process list, and is kept in that
host's home with mode 0600 like the JobManager's.
"""

from __future__ import annotations

import json
import os
import secrets as _secrets
import signal
import socket
import time
from pathlib import Path
from typing import Any

from flinkpy.cluster.home import ClusterHome, ProcessInfo, alive
from flinkpy.cluster.spawning import cluster_addresses, open_private, spawn, taskmanager_address_argv, wait_gone
from flinkpy.errors import ConfigurationError, ExitCode, ConflictError, FlinkpyError, OperationTimeoutError
from flinkpy.files import write_json_atomically
from flinkpy.network.auth import read_secret
from flinkpy.processes import create_time, log_tail, module_command

#: the environment variable a TaskManager's host may carry the cluster's secret in
SECRET_ENV = "FLINKPY_CLUSTER_SECRET"
#: what a TaskManager prints once the JobManager accepted it (its readiness line)
REGISTERED = "registered"


def install_secret(home: ClusterHome, *, secret_file: Path | None, environ: "dict[str, str] | os._Environ[str]") -> None:
    """Put the cluster's secret into ``home`` (mode 0600) from ``secret_file`` or ``environ``;
    keep the home's own when neither gives one. ``ConfigurationError`` when there is none at all.

    The file is read with the same check as the JobManager's (a secret others can read is
    refused), so a copy made with a careless mode fails here, not in a handshake later.
    """
    given = read_secret(secret_file) if secret_file is not None else (environ.get(SECRET_ENV) or "").strip() or None
    target = home.path / "secret"
    if given is None:
        if target.exists():
            return
        raise ConfigurationError(
            f"no cluster secret for the TaskManager in {home.path}",
            remedy=f"copy the JobManager home's 'secret' file to this host (mode 0600) and pass --secret-file PATH, or set {SECRET_ENV}",
        )
    home.path.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = home.path / f".secret-{_secrets.token_hex(4)}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(given)
    os.replace(partial, target)


def _record(home: ClusterHome, tm_id: str) -> Path:
    return home.path / "hosted" / f"taskmanager-{tm_id}.json"


def hosted_taskmanagers(home: ClusterHome) -> list[tuple[ProcessInfo, str]]:
    """The TaskManagers ``taskmanager start`` runs in ``home`` that are still alive, each with
    the JobManager address it registered with."""
    found = []
    for path in sorted((home.path / "hosted").glob("taskmanager-*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        proc = ProcessInfo(rec["id"], int(rec["pid"]), float(rec["create_time"]), rec["log"], rec["stdout"])
        if alive(proc):
            found.append((proc, rec["jobmanager"]))
        else:
            path.unlink(missing_ok=True)
    return found


def start_taskmanager(home: ClusterHome, jobmanager: tuple[str, int], *, slots: int, config: Any, tm_id: str | None = None,
                      timeout_s: float = 30.0) -> ProcessInfo:
    """Start a TaskManager in ``home`` (whose secret :func:`install_secret` put there) that
    registers with the JobManager at ``jobmanager`` (its RPC address); returns once it has.
    It places its data channels by ``config``'s taskmanager.* keys and stops when the
    JobManager shuts it down or is gone."""
    home.ensure()
    (home.path / "hosted").mkdir(mode=0o700, exist_ok=True)
    taken = {p.id for p, _ in hosted_taskmanagers(home)}
    if tm_id is None:
        n = 1
        while f"tm-{socket.gethostname()}-{n}" in taken:
            n += 1
        tm_id = f"tm-{socket.gethostname()}-{n}"
    elif tm_id in taken:
        raise ConflictError(f"TaskManager {tm_id} already runs in {home.path}", remedy="give another --id, or stop it with 'flinkpy taskmanager stop'")
    host, port = jobmanager
    address = f"{host}:{port}"
    log_path = home.log_dir / f"taskmanager-{tm_id}.log"
    out_path = home.log_dir / f"taskmanager-{tm_id}.out"
    offset = log_path.stat().st_size if log_path.exists() else 0
    interval = int(config.get("heartbeat.interval")) if config is not None else 10000
    argv = module_command("flinkpy.taskmanager.process", "--home", str(home.path), "--id", tm_id, "--slots", str(slots),
                          "--heartbeat-interval-ms", str(interval), "--jobmanager", address,
                          *taskmanager_address_argv(cluster_addresses(config).taskmanager))
    with open_private(out_path) as out:
        proc = spawn(argv, log_path, out, detach=True, extra_env={"FLINKPY_STDOUT_FILE": str(out_path), "PYTHONUNBUFFERED": "1"})
    info = ProcessInfo(tm_id, proc.pid, create_time(proc.pid), str(log_path), str(out_path), argv)
    deadline = time.monotonic() + timeout_s
    line = f"TaskManager {tm_id} {REGISTERED}"
    while not _logged(log_path, offset, line):
        if proc.poll() == ExitCode.CONFIGURATION:
            raise ConfigurationError(f"the JobManager at {address} refused TaskManager {tm_id}: {log_tail(log_path, 1)}",
                                     remedy="give it the secret of that JobManager's home (--secret-file or " + SECRET_ENV + ")")
        if proc.poll() is not None:
            raise FlinkpyError(f"TaskManager {tm_id} exited before it registered with the JobManager at {address} "
                               f"(code {proc.returncode}): {log_tail(log_path, 2)}", remedy=f"see {log_path}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise OperationTimeoutError(f"TaskManager {tm_id} did not register with the JobManager at {address} within {timeout_s:.0f}s",
                                        remedy=f"check that {address} is the JobManager's jobmanager.rpc.address and port and is reachable from this host; see {log_path}")
        time.sleep(0.02)
    write_json_atomically(_record(home, tm_id), {"id": tm_id, "pid": info.pid, "create_time": info.create_time, "log": str(log_path),
                                                 "stdout": str(out_path), "jobmanager": address})
    return info


def _logged(path: Path, offset: int, line: str) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return line.encode() in f.read()
    except FileNotFoundError:
        return False


def stop_taskmanagers(home: ClusterHome, *, tm_id: str | None = None, timeout_s: float = 10.0) -> list[ProcessInfo]:
    """SIGTERM the TaskManagers ``taskmanager start`` runs in ``home`` (or the one ``tm_id``
    names), wait until they are gone (killing what is left after ``timeout_s``); returns them."""
    import psutil

    chosen = [p for p, _ in hosted_taskmanagers(home) if tm_id is None or p.id == tm_id]
    procs = []
    for p in chosen:
        try:
            os.kill(p.pid, signal.SIGTERM)
            procs.append(psutil.Process(p.pid))
        except (ProcessLookupError, psutil.Error):
            pass
    for left in wait_gone(procs, timeout_s):
        try:
            left.kill()
        except psutil.Error:
            pass
    wait_gone(procs, timeout_s)
    for p in chosen:
        _record(home, p.id).unlink(missing_ok=True)
    return chosen
