"""CPU time and resident memory of processes, read from ``/proc`` (Linux; elsewhere: zeros).

A TaskManager reports the sum over its process tree — itself, its task launcher and its task
processes — because that is what the worker costs the machine. CPU is a rate, so the caller
keeps the previous reading: :class:`CpuSampler` turns cumulative CPU seconds into a
percentage of one core over the time between two samples.

>>> s = CpuSampler()
>>> s.usage_percent(cpu_s=1.0, now_s=10.0), s.usage_percent(cpu_s=1.5, now_s=11.0)
(0.0, 50.0)
"""

from __future__ import annotations

import os
from typing import Iterable

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds ``pid`` has used; 0.0 when it is gone (or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0
    # the command name may hold spaces and parentheses: the fields start after the last ')'
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` in bytes; 0 when it is gone (or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def tree_figures(pids: Iterable[int]) -> tuple[float, int]:
    """(CPU seconds, resident bytes) summed over ``pids``."""
    cpu, rss = 0.0, 0
    for pid in set(pids):
        cpu += cpu_seconds(pid)
        rss += rss_bytes(pid)
    return cpu, rss


class CpuSampler:
    """CPU usage in percent of one core between consecutive samples of cumulative CPU time.

    A process tree loses the CPU time of a task that exited; a sample that goes backwards
    starts a new baseline instead of reporting a negative usage."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None

    def usage_percent(self, cpu_s: float, now_s: float) -> float:
        last, self._last = self._last, (cpu_s, now_s)
        if last is None or now_s <= last[1] or cpu_s < last[0]:
            return 0.0
        return round(100.0 * (cpu_s - last[0]) / (now_s - last[1]), 1)
