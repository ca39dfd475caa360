"""Starting, watching and reaping a cluster's processes (shared by the standalone and HA launchers)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import IO, Any


def spawn(cmd: list[str], log_path: Path, stdout: "IO[Any] | int | None", *, detach: bool, extra_env: dict[str, str]) -> subprocess.Popen:
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
