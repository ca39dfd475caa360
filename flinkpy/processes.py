"""Processes recorded by pid: is the one we started still the one running under that pid?

A pid can be reused after its process ended; the process's start time, recorded with the pid,
tells them apart. Used for the cluster's and the local ZooKeeper's process records.
"""

from __future__ import annotations

import os
from typing import Any, Iterable


#: a JobManager's exit status when its REST endpoint cannot be bound (the port is taken)
CANNOT_BIND_EXIT = 3


def create_time(pid: int) -> float:
    """When process ``pid`` started (0.0 if there is none)."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def process_tree(pids: "Iterable[int]") -> list[Any]:
    """The processes ``pids`` and all their descendants, as psutil handles (ones already gone
    are left out): taken before a stop, so that grandchildren are waited for too."""
    import psutil

    tree: list[Any] = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    return tree


def running(pid: int, started: float) -> bool:
    """Process ``pid`` runs, is not a zombie, and (when ``started`` is known) is the same process."""
    import psutil

    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and (not started or abs(p.create_time() - started) < 1.0)
    except psutil.Error:
        return False


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could bind ``host:port`` now (with SO_REUSEADDR, as Java's servers do).

    Used to refuse an explicit port that is taken before starting a JVM that would otherwise
    quietly move to another one (Spark) or fail late (ZooKeeper).
    """
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def log_tail(path: str | os.PathLike[str], lines: int, sep: str = "\n") -> str:
    """The last ``lines`` lines of a process's log ("" when it cannot be read), for error messages."""
    from pathlib import Path

    try:
        return sep.join(Path(path).read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs ``python -m module args`` as one of flinkpy's own processes.

    ``-P`` keeps the working directory off the process's ``sys.path``: a cluster process is
    started wherever the user happens to type, and a file there named like a module of the
    standard library (``inspect.py``, ``random.py``) would otherwise replace that module in every
    JobManager, TaskManager, launcher and task. The job's own directory and its python.files
    reach the tasks' ``sys.path`` through the job's archive, not through the working directory.

    >>> module_command("flinkpy.cluster.supervisor", "--home", "h")[1:]
    ['-P', '-m', 'flinkpy.cluster.supervisor', '--home', 'h']
    """
    import sys

    return [sys.executable, "-P", "-m", module, *args]
