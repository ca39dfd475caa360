"""Processes recorded by pid: is the one we started still the one running under that pid?

A pid can be reused after its process ended; the process's start time, recorded with the pid,
tells them apart. Used for the cluster's and the local ZooKeeper's process records.
"""

from __future__ import annotations


def create_time(pid: int) -> float:
    """When process ``pid`` started (0.0 if there is none)."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def running(pid: int, started: float) -> bool:
    """Process ``pid`` runs, is not a zombie, and (when ``started`` is known) is the same process."""
    import psutil

    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and (not started or abs(p.create_time() - started) < 1.0)
    except psutil.Error:
        return False
