"""Starting, watching and reaping a cluster's processes (shared by the standalone and HA launchers).

A cluster's files are its operators' alone: its processes run with umask 077 (so what they write
— logs, job output, shipped job code, checkpoint files, and what their task processes write — is
0600 in 0700 directories), and the log and output files opened here for them are 0600 too: the
REST token protects the same data, and a world-readable log would hand it to any local user.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from flinkpy.addresses import ClusterAddresses, Endpoint, resolve

#: the file mode creation mask of every process of a cluster
PRIVATE_UMASK = 0o077


def open_private(path: "Path | str") -> IO[bytes]:
    """``path`` opened for appending, unbuffered, created with mode 0600 when new."""
    return open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab", buffering=0)


def spawn(cmd: list[str], log_path: Path, stdout: "IO[Any] | int | None", *, detach: bool, extra_env: dict[str, str]) -> subprocess.Popen:
    env = dict(os.environ)
    env.update(extra_env)
    env["FLINKPY_LOG_FILE"] = str(log_path)
    log = open_private(log_path)
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=stdout if stdout is not None else log,
            stderr=log,
            env=env,
            start_new_session=detach,
            close_fds=True,
            umask=PRIVATE_UMASK,
        )
    finally:
        log.close()


def wait_gone(procs: "list[Any]", timeout_s: float) -> "list[Any]":
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


def jobmanager_address_argv(addresses: ClusterAddresses) -> list[str]:
    """The JobManager process's flags that place its RPC and REST endpoints (the REST port is
    the caller's: several JobManagers of one cluster take several ports).

    >>> from flinkpy.addresses import resolve
    >>> jobmanager_address_argv(resolve({"jobmanager.rpc.address": "10.0.0.5", "rest.bind-address": "0.0.0.0"}.get))
    ['--rpc-address', '10.0.0.5', '--rpc-bind-host', '10.0.0.5', '--rpc-port', '0', '--rest-address', '10.0.0.5', '--rest-bind-address', '0.0.0.0']
    """
    rpc, rest = addresses.rpc, addresses.rest
    return ["--rpc-address", str(rpc.advertised), "--rpc-bind-host", str(rpc.bind), "--rpc-port", str(rpc.port),
            "--rest-address", str(rest.advertised), "--rest-bind-address", str(rest.bind)]


def taskmanager_address_argv(endpoint: Endpoint) -> list[str]:
    """The TaskManager process's flags for its data endpoint; what is unset it learns from its
    connection to the JobManager.

    >>> taskmanager_address_argv(Endpoint(None, None, 0))
    ['--data-port', '0']
    >>> taskmanager_address_argv(Endpoint("10.0.0.7", "0.0.0.0", 6121))
    ['--data-port', '6121', '--host', '10.0.0.7', '--bind-host', '0.0.0.0']
    """
    argv = ["--data-port", str(endpoint.port)]
    if endpoint.advertised:
        argv += ["--host", endpoint.advertised]
    if endpoint.bind:
        argv += ["--bind-host", endpoint.bind]
    return argv


def cluster_addresses(config: Any) -> ClusterAddresses:
    """The addresses ``config`` (a :class:`flinkpy.config.Config`, or None: every default) gives."""
    return resolve(config.get if config is not None else (lambda key: None))
