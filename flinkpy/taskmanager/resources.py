"""What a TaskManager costs its machine: CPU and resident memory of its process tree.

The tree is the TaskManager itself, its task launcher and its task processes (forked by the
launcher, so not the TaskManager's children: the TaskManager names them). A thread of the
TaskManager sends these figures to the JobManager once a second, beside its heartbeats, as a
:class:`TaskManagerMetrics` message.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable

from flinkpy.clock import now_ms
from flinkpy.metrics import names
from flinkpy.metrics.process_stats import CpuSampler, tree_figures
from flinkpy.metrics.store import TASKMANAGER_REPORT_INTERVAL_MS
from flinkpy.protocol.messages import TaskManagerMetrics

log = logging.getLogger("flinkpy.taskmanager")

#: seconds between two reports of a TaskManager's resources
REPORT_INTERVAL_S = TASKMANAGER_REPORT_INTERVAL_MS / 1000


class ResourceReporter:
    """Samples the process tree ``pids()`` names and hands each report to ``send``."""

    def __init__(self, tm_id: str, pids: Callable[[], Iterable[int]], tasks: Callable[[], int]):
        self.tm_id = tm_id
        self.pids = pids
        self.tasks = tasks
        self.cpu = CpuSampler()

    def report(self, now_s: float) -> TaskManagerMetrics:
        cpu_s, rss = tree_figures(self.pids())
        figures = {
            names.CPU_USAGE: self.cpu.usage_percent(cpu_s, now_s),
            names.MEMORY_RSS: rss,
            names.NUM_TASKS: self.tasks(),
        }
        return TaskManagerMetrics(tm_id=self.tm_id, timestamp=now_ms(), figures=figures)

    def run(self, send: Callable[[TaskManagerMetrics], None], alive: Callable[[], bool]) -> None:
        """Report until ``alive()`` turns false or ``send`` raises OSError (connection gone)."""
        self.report(time.monotonic())  # the CPU baseline
        while alive():
            time.sleep(REPORT_INTERVAL_S)
            try:
                send(self.report(time.monotonic()))
            except OSError:
                return
            except Exception:  # noqa: BLE001 - the reports must not end the TaskManager
                log.exception("TaskManager %s: sampling resources failed", self.tm_id)

    def start(self, send: Callable[[TaskManagerMetrics], None], alive: Callable[[], bool]) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(send, alive), name="resource-reporter", daemon=True)
        thread.start()
        return thread
