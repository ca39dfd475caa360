"""The task's metric reporter: samples the task's counters once per interval and reports them.

The hot paths only keep counters they already had — records in (per batch), records out (per
emitted batch), seconds idle (around the loop's one wait) and back-pressured (around a wait for
credit) — plus the moment an ongoing wait began, so a task stuck waiting is reported as waiting
now, not only once the wait ends. Nothing on the hot path takes a lock or reads a clock for
metrics. A daemon thread wakes every ``metrics.fetcher.update-interval``, reads the counters
(plain attribute reads under the GIL), turns them into Flink's figures — rates over the interval,
times in milliseconds per second — and sends one :class:`TaskMetrics` message to the JobManager
through the TaskManager. The cost is one sample per interval, not per record.
"""

from __future__ import annotations

import fcntl
import logging
import struct
import termios
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.clock import now_ms
from flinkpy.metrics import names
from flinkpy.protocol.messages import TaskMetrics

if TYPE_CHECKING:
    from flinkpy.task.task import Task

log = logging.getLogger("flinkpy.task")
_INT = struct.Struct("i")


class TaskMetricsReporter:
    """Samples one task; :meth:`sample` is the pure-ish part (reads counters, keeps the last
    sample for rates), :meth:`start` the thread that sends."""

    def __init__(self, task: Task, interval_s: float, clock: Callable[[], float] = time.monotonic):
        self.task = task
        self.interval_s = interval_s
        self.clock = clock
        self._stop = threading.Event()
        #: (time, records in, records out, idle s, back-pressured s) of the last sample
        self._last: tuple[float, int, int, float, float] | None = None
        self._thread: threading.Thread | None = None
        #: CPU seconds the reporter thread spent sampling and sending: the reports' own cost
        self.cpu_s = 0.0

    # -- reading the task ------------------------------------------------------------------

    def _counters(self, now: float) -> tuple[int, int, float, float]:
        task = self.task
        loop = task.loop
        records_in = loop.records_in if loop is not None else 0
        idle = 0.0
        if loop is not None:
            idle = loop.idle_s
            since = loop.idle_since
            if since:
                idle += max(0.0, now - since)
        records_out = 0
        backpressured = 0.0
        for w in list(task.writers.values()):
            records_out += w.records_out
            for ch in w.channels:
                backpressured += ch.backpressured_s
                since = ch.blocked_since
                if since:
                    backpressured += max(0.0, now - since)
        return records_in, records_out, idle, backpressured

    def _watermarks(self) -> tuple[int, int]:
        task = self.task
        processor = task.input_processor
        wm_in = processor.valve.current if processor is not None else names.MIN_WATERMARK
        outs = [w.watermark for w in task.writers.values()]
        wm_out = max(outs) if outs else wm_in
        return wm_in, wm_out

    def _pool_usage(self) -> tuple[float, float]:
        """(input, output) queue usage, 0..1. Output: buffers sent that the consumer has not
        processed yet (credit spent and not returned), over the credit. Input: buffers waiting
        in the socket (estimated from its unread bytes) or held behind a barrier, over the credit."""
        task = self.task
        credit = max(1, task.descriptor.config.credit)
        outs = [ch for w in task.writers.values() for ch in w.channels]
        out_usage = sum(max(0, credit - ch.credit.available) for ch in outs) / (credit * len(outs)) if outs else 0.0
        processor = task.input_processor
        in_usage = 0.0
        if processor is not None and processor.inputs:
            segment = max(1, task.descriptor.config.segment_size)
            used = 0.0
            for i, ch in enumerate(processor.inputs):
                if ch.finished:
                    continue
                waiting = len(processor.held[i])
                try:
                    raw = fcntl.ioctl(ch.sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
                    waiting += -(-_INT.unpack(raw)[0] // segment)
                except (OSError, ValueError):
                    pass
                used += min(1.0, waiting / credit)
            in_usage = used / len(processor.inputs)
        return min(1.0, in_usage), min(1.0, out_usage)

    def _buffers_out(self) -> tuple[int, int]:
        """Data buffers sent on every output channel, and their bytes (control frames aside)."""
        buffers = sent = 0
        for w in self.task.writers.values():
            for ch in w.channels:
                buffers += ch.buffers_sent
                sent += ch.bytes_sent
        return buffers, sent

    def _debloat_figures(self) -> dict[str, float]:
        """Buffer debloating's figures: the size announced, and the time the bytes queued on
        the input channels (unread in their sockets, or held behind a barrier) take to process
        at the measured throughput (-1 until it is measured)."""
        task = self.task
        debloat = getattr(task, "debloat", None)
        processor = task.input_processor
        if debloat is None or processor is None:
            return {}
        queued = 0
        for i, ch in enumerate(processor.inputs):
            if ch.finished:
                continue
            queued += sum(len(data) for _, data in list(processor.held[i]))
            try:
                queued += _INT.unpack(fcntl.ioctl(ch.sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
            except (OSError, ValueError):
                pass
        estimate = debloat.debloater.time_to_consume_ms(queued)
        return {names.DEBLOATED_BUFFER_SIZE: debloat.buffer_size, names.ESTIMATED_TIME_TO_CONSUME: -1 if estimate is None else estimate}

    def sample(self) -> dict[str, float]:
        """The task's figures now, by Flink's names; rates cover the time since the last sample."""
        now = self.clock()
        records_in, records_out, idle, backpressured = self._counters(now)
        last = self._last
        self._last = (now, records_in, records_out, idle, backpressured)
        figures: dict[str, float] = {
            names.NUM_RECORDS_IN: records_in,
            names.NUM_RECORDS_OUT: records_out,
            names.ACCUMULATED_IDLE: round(idle * 1000),
            names.ACCUMULATED_BACK_PRESSURED: round(backpressured * 1000),
            names.ACCUMULATED_BUSY: round(max(0.0, now - self.task.started - idle - backpressured) * 1000),
        }
        if last is None or now <= last[0]:
            rates = (0.0, 0.0, 0.0, 0.0)
        else:
            dt = now - last[0]
            rates = ((records_in - last[1]) / dt, (records_out - last[2]) / dt, (idle - last[3]) / dt, (backpressured - last[4]) / dt)
        idle_ms = min(1000, max(0, round(rates[2] * 1000)))
        bp_ms = min(1000 - idle_ms, max(0, round(rates[3] * 1000)))
        figures[names.NUM_RECORDS_IN_PER_SECOND] = round(rates[0], 1)
        figures[names.NUM_RECORDS_OUT_PER_SECOND] = round(rates[1], 1)
        figures[names.IDLE_TIME] = idle_ms
        figures[names.BACK_PRESSURED_TIME] = bp_ms
        figures[names.BUSY_TIME] = 1000 - idle_ms - bp_ms if last is not None else 0
        figures[names.INPUT_WATERMARK], figures[names.OUTPUT_WATERMARK] = self._watermarks()
        in_usage, out_usage = self._pool_usage()
        figures[names.IN_POOL_USAGE] = round(in_usage, 3)
        figures[names.OUT_POOL_USAGE] = round(out_usage, 3)
        figures[names.NUM_BUFFERS_OUT], figures[names.NUM_BYTES_OUT] = self._buffers_out()
        figures.update(self._debloat_figures())
        reader = getattr(getattr(self.task, "chain", None), "source_reader", None)
        pending_records = getattr(reader, "pending_records", None)  # readers not derived from SourceReader lack it
        pending = pending_records() if pending_records is not None else None
        if pending is not None:
            figures[names.PENDING_RECORDS] = pending
        return figures

    def report(self) -> TaskMetrics:
        figures = self.sample()
        chain = getattr(self.task, "chain", None)
        user: list[dict[str, Any]] = []
        if chain is not None and len(chain.user_metrics):
            user = chain.user_metrics.sample(self.clock())
        return TaskMetrics(timestamp=now_ms(), figures=figures, user=user)

    # -- the thread ------------------------------------------------------------------------

    def start(self) -> None:
        self.sample()  # the baseline of the first interval's rates
        self._thread = threading.Thread(target=self._run, name="metrics-reporter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            started = time.thread_time()
            try:
                self.task.ctrl.send(self.report())
            except OSError:
                return  # the TaskManager is gone; the task ends on its own
            except Exception:  # noqa: BLE001 - a failed sample must not end the task
                log.exception("task %s: sampling metrics failed", self.task.describe)
            finally:
                self.cpu_s += time.thread_time() - started

    def stop(self, *, final: bool) -> None:
        """Stop the thread; with ``final``, send the last figures (a finished task's totals)."""
        self._stop.set()
        if final:
            started = time.thread_time()
            try:
                self.task.ctrl.send(self.report())
            except OSError:
                pass
            self.cpu_s += time.thread_time() - started
