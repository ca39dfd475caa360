"""The JobManager's metric store: the latest figures per job, subtask and TaskManager.

Reports arrive from many TaskManager connections at once and readers (REST, Prometheus) come
from other threads; the store is a plain data structure behind one small lock — no I/O, no
clock (timestamps come with the reports), so it is tested without a cluster.

Every report also records when it *arrived* (the JobManager's clock, handed in by the caller):
figures older than two report intervals and a second are stale (:func:`stale`) — the process that
sent them stopped reporting (paused, hung, or cut off) — and readers must not show them as
current.

A subtask's figures belong to one execution attempt: a report of an older attempt than the one
stored (a slow message from before a restart) is dropped, a newer attempt replaces the figures.

>>> store = MetricStore()
>>> store.on_task("j1", "2_0_0", 1000, {"numRecordsIn": 10.0, "busyTimeMsPerSecond": 300.0})
>>> store.on_task("j1", "2_1_0", 1000, {"numRecordsIn": 5.0, "busyTimeMsPerSecond": 900.0})
>>> aggregate(store.subtasks("j1", 2).values())["numRecordsIn"], aggregate(store.subtasks("j1", 2).values())["busyTimeMsPerSecond"]
(15.0, 900.0)
>>> store.on_task("j1", "2_0_1", 2000, {"numRecordsIn": 1.0})
>>> store.on_task("j1", "2_0_0", 1500, {"numRecordsIn": 99.0})  # late, from the old attempt
>>> store.subtasks("j1", 2)[0]["numRecordsIn"]
1.0
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Iterable

from flinkpy.metrics import names

#: how the figures of a vertex's subtasks combine into the vertex's (Flink's web UI shows the
#: sum of counts and rates, the worst busy/back-pressure/pool usage, the lowest watermark)
_SUM = {
    names.NUM_RECORDS_IN, names.NUM_RECORDS_OUT, names.NUM_RECORDS_IN_PER_SECOND, names.NUM_RECORDS_OUT_PER_SECOND,
    names.ACCUMULATED_BUSY, names.ACCUMULATED_IDLE, names.ACCUMULATED_BACK_PRESSURED, names.PENDING_RECORDS,
    names.NUM_BUFFERS_OUT, names.NUM_BYTES_OUT,
}
_MIN = {names.INPUT_WATERMARK, names.OUTPUT_WATERMARK}


#: milliseconds between two resource reports of a TaskManager (CPU, memory, tasks)
TASKMANAGER_REPORT_INTERVAL_MS = 1000


def stale(received_ms: int, now_ms: int, interval_ms: int) -> bool:
    """Whether a report that arrived at ``received_ms`` is too old to show as current: older than
    two report intervals and a second, so one late report, or a second's delay on a busy
    machine, is not yet staleness.

    >>> stale(1000, 3900, 1000), stale(1000, 4001, 1000), stale(0, 1401, 200)
    (False, True, True)
    """
    return now_ms - received_ms > 2 * max(1, interval_ms) + 1000


@dataclass
class SubtaskFigures:
    """The latest report of one subtask."""

    attempt: int
    timestamp: int
    figures: dict[str, float]
    user: list[dict[str, Any]] = field(default_factory=list)
    #: when the report arrived (the JobManager's clock)
    received: int = 0


@dataclass
class TaskManagerFigures:
    """The latest resource report of one TaskManager."""

    timestamp: int
    figures: dict[str, float]
    #: when the report arrived (the JobManager's clock)
    received: int = 0


def aggregate(figures: Iterable[dict[str, float]]) -> dict[str, float]:
    """One vertex's figures from its subtasks' (sum, max or min per metric, as above)."""
    out: dict[str, float] = {}
    for f in figures:
        for name, value in f.items():
            if name not in out:
                out[name] = value
            elif name in _SUM:
                out[name] += value
            elif name in _MIN:
                out[name] = min(out[name], value)
            else:
                out[name] = max(out[name], value)
    return out


def parse_exec_id(exec_id: str) -> tuple[int, int, int]:
    """(vertex id, subtask, attempt) of an execution id ``"<vertex>_<subtask>_<attempt>"``."""
    vertex, subtask, attempt = exec_id.split("_")
    return int(vertex), int(subtask), int(attempt)


class MetricStore:
    """Latest figures by (job, vertex, subtask) and by TaskManager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, dict[tuple[int, int], SubtaskFigures]] = {}
        self._taskmanagers: dict[str, TaskManagerFigures] = {}

    def on_task(self, job_id: str, exec_id: str, timestamp: int, figures: dict[str, float],
                user: list[dict[str, Any]] | None = None, received: int | None = None) -> None:
        try:
            vertex, subtask, attempt = parse_exec_id(exec_id)
        except ValueError:
            return
        with self._lock:
            job = self._tasks.setdefault(job_id, {})
            known = job.get((vertex, subtask))
            if known is not None and (attempt < known.attempt or (attempt == known.attempt and timestamp < known.timestamp)):
                return
            job[(vertex, subtask)] = SubtaskFigures(attempt, timestamp, dict(figures), list(user or []),
                                                    timestamp if received is None else received)

    def on_taskmanager(self, tm_id: str, timestamp: int, figures: dict[str, float], received: int | None = None) -> None:
        with self._lock:
            known = self._taskmanagers.get(tm_id)
            if known is None or timestamp >= known.timestamp:
                self._taskmanagers[tm_id] = TaskManagerFigures(timestamp, dict(figures), timestamp if received is None else received)

    def subtasks(self, job_id: str, vertex: int) -> dict[int, dict[str, float]]:
        """Subtask index -> its latest figures (a copy), for one vertex."""
        with self._lock:
            job = self._tasks.get(job_id, {})
            return {s: dict(f.figures) for (v, s), f in job.items() if v == vertex}

    def subtask_reports(self, job_id: str) -> dict[tuple[int, int], SubtaskFigures]:
        """Every subtask's latest report of one job (copies)."""
        with self._lock:
            job = self._tasks.get(job_id, {})
            return {k: SubtaskFigures(f.attempt, f.timestamp, dict(f.figures), list(f.user), f.received) for k, f in job.items()}

    def taskmanager(self, tm_id: str) -> dict[str, float]:
        with self._lock:
            known = self._taskmanagers.get(tm_id)
            return dict(known.figures) if known else {}

    def taskmanager_report(self, tm_id: str) -> TaskManagerFigures | None:
        """A TaskManager's latest resource report (a copy), or None before its first."""
        with self._lock:
            known = self._taskmanagers.get(tm_id)
            return TaskManagerFigures(known.timestamp, dict(known.figures), known.received) if known else None

    def forget_taskmanager(self, tm_id: str) -> None:
        with self._lock:
            self._taskmanagers.pop(tm_id, None)

    def forget_job(self, job_id: str) -> None:
        with self._lock:
            self._tasks.pop(job_id, None)
