"""What each task process of a running job holds: memory and sockets (the scaling part's
"past 16 cores" figures).

A task is a child of a TaskManager's zygote (:mod:`flinkpy.taskmanager.zygote`). While a job
runs, :class:`TaskFootprint` looks at every such process below this one once a second: its
unique memory (USS: the pages no other process shares, what one more task costs; the code
forked from the zygote is shared until written) and its open sockets (the control connection
and one per channel: a hash edge at parallelism p gives each of its tasks p). Each task's
largest figures count; the medians over the job's tasks, the largest, and the job's total of
sockets are reported. Looking costs a read of each task's memory map per second, so the sampled
run is not the timed one.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass
from typing import Any

ZYGOTE = "flinkpy.taskmanager.zygote"


@dataclass(frozen=True)
class Footprint:
    tasks: int
    #: bytes, median and largest over the tasks of each task's largest unique memory
    uss: float
    uss_max: int
    #: open sockets, median and largest over the tasks; the job's total at its largest
    sockets: float
    sockets_max: int
    sockets_total: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class TaskFootprint:
    """A sampler thread over the task processes below this process (``with`` it around a job)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self._interval = interval_s
        self._stop = threading.Event()
        self._uss: dict[int, int] = {}
        self._sockets: dict[int, int] = {}
        self._total = 0
        self._thread = threading.Thread(target=self._run, name="task-footprint", daemon=True)

    def __enter__(self) -> "TaskFootprint":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _tasks(self) -> list[Any]:
        import psutil

        out = []
        for p in psutil.Process().children(recursive=True):
            try:
                parent = p.parent()
                if parent is not None and ZYGOTE in " ".join(parent.cmdline()) and ZYGOTE in " ".join(p.cmdline()):
                    out.append(p)
            except psutil.Error:
                continue
        return out

    def sample(self) -> None:
        import psutil

        total = 0
        for p in self._tasks():
            try:
                uss = p.memory_full_info().uss
                sockets = len(p.net_connections(kind="all"))
            except psutil.Error:
                continue
            self._uss[p.pid] = max(self._uss.get(p.pid, 0), uss)
            self._sockets[p.pid] = max(self._sockets.get(p.pid, 0), sockets)
            total += sockets
        self._total = max(self._total, total)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def result(self) -> Footprint | None:
        if not self._uss:
            return None
        uss = list(self._uss.values())
        socks = list(self._sockets.values())
        return Footprint(len(uss), statistics.median(uss), max(uss), statistics.median(socks), max(socks), self._total)
