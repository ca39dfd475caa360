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
