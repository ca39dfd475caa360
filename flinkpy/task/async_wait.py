"""The async wait operator: a bounded number of requests in flight, their inputs in the checkpoint.

Each record becomes one request, ``async_invoke(value)``, on the task's event loop: an asyncio
loop in a thread of the task process. The task thread keeps everything else — the queue of
records not yet emitted, the watermarks between them, emitting, snapshots — so a snapshot sees
the queue exactly as the barrier does. A finished request tells the task thread through a
wake-up pipe, which the task's loop waits on beside its channels.

- **Capacity**: at most ``capacity`` records are in the queue (in flight, or done and waiting to
  be emitted). A record that finds it full waits, in the task thread, until a tenth of the
  capacity is free: the task reads no more input meanwhile, and credit-based flow control holds
  the producers back. Requests reach the loop in batches (one wake-up of its thread for all the
  records a batch or a refill enqueued).
- **Order**: ordered mode emits results in input order; unordered mode as requests finish, but
  never across a watermark: the results of records before a watermark go out before it, and
  those after it after it (Flink's segments).
- **Timeout**: a request (all its retries included) gets ``timeout_ms``; then
  ``timeout(value)`` gives its results, or fails the job by default.
- **Retries**: after a result the strategy's result predicate matches, or an exception its
  exception predicate matches, the request is issued again after the strategy's backoff, while
  ``can_retry`` allows; then the last result is emitted or the last exception fails the job.
- **Exactly-once**: the inputs of the queue's records are the operator's state; a restored
  subtask issues them again before any new record, so a crash with requests outstanding loses
  nothing and emits nothing twice (results emitted before the barrier are not in the state).
"""

from __future__ import annotations

import asyncio
import collections
import os
import select
import threading
from typing import Any

from flinkpy.common.async_functions import AsyncOptions, check_results
from flinkpy.task.operators import Operator, Output
from flinkpy.task.watermarks import MAX_WATERMARK

#: the state key under which a snapshot keeps the queue's inputs
STATE_KEY = "async"


class _Request:
    """One record's request: its input, and (once done) its results or its error."""

    __slots__ = ("seq", "value", "timestamp", "segment", "results", "error", "timed_out", "task", "timer", "done")

    def __init__(self, seq: int, value: Any, timestamp: int | None, segment: int):
        self.seq = seq
        self.value = value
        self.timestamp = timestamp
        #: watermarks queued before this record (unordered mode emits within a segment only)
        self.segment = segment
        self.results: list | None = None
        self.error: BaseException | None = None
        self.timed_out = False
        self.task: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None
        #: the task thread took the finished request (only it reads results from then on)
        self.done = False


class AsyncWaitOperator(Operator):
    """``AsyncDataStream.ordered_wait`` / ``unordered_wait`` in a task."""

    def __init__(self, name: str, fn: Any, output: Output, options: AsyncOptions):
        super().__init__(name, fn, output)
        self.options = options
        self.timeout_s = options.timeout_ms / 1000.0 if options.timeout_ms > 0 else None
        predicate = options.retry.retry_predicate()
        self._retry_result = predicate.result_predicate()
        self._retry_exception = predicate.exception_predicate()
        #: records not yet emitted, in input order (their inputs are the operator's state)
        self.queue: dict[int, _Request] = {}
        #: ordered mode: records and watermarks in input order
        self._ordered: collections.deque[_Request | int] = collections.deque()
        #: unordered mode: per segment, the records waiting to be emitted, and the watermark
        #: that closes a segment
        self._pending_in: collections.Counter[int] = collections.Counter()
        self._held: dict[int, list[_Request]] = {}
        self._marks: collections.deque[tuple[int, int]] = collections.deque()
        self._segment = 0
        self._emitting_segment = 0
        self._seq = 0
        #: requests the loop finished, for the task thread (deque appends are thread-safe)
        self._finished: collections.deque[_Request] = collections.deque()
        self._restored: list[tuple[Any, int | None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.wakeup_fd = -1
        self._wake_w = -1
        #: the most requests in flight at once (a figure for tests and metrics)
        self.max_in_flight = 0
        #: a full queue takes records again once it holds this many (see process)
        self._refill_at = options.capacity - max(1, options.capacity // 10)
        #: requests enqueued since the last hand-over to the event loop
        self._unstarted: list[_Request] = []

    # -- life --------------------------------------------------------------------------------

    def set_restored_state(self, inputs: list[tuple[Any, int | None]]) -> None:
        self._restored = list(inputs)

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self.wakeup_fd, self._wake_w = os.pipe()
        os.set_blocking(self.wakeup_fd, False)
        os.set_blocking(self._wake_w, False)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"async-io {self.name}", daemon=True)
        self._thread.start()
        restored, self._restored = self._restored, []
        for value, ts in restored:  # in flight at the checkpoint: issued again, first
            self._enqueue(value, ts)
        self._submit()

    def process(self, values: list, timestamps: list[int] | None) -> None:
        capacity = self.options.capacity
        queue = self.queue
        for i, value in enumerate(values):
            if len(queue) >= capacity:
                # full: back-pressure (the task reads no input meanwhile) until a tenth of the
                # capacity is free again, so that one wake-up refills several slots at once
                self._submit()
                while len(queue) > self._refill_at:
                    self._wait()
            self._enqueue(value, timestamps[i] if timestamps is not None else None)
        self._submit()

    def process_watermark(self, watermark: int) -> None:
        if watermark == MAX_WATERMARK and self.queue:
            # event time ends (the end of input, or a drain before a final savepoint): every
            # record's results go out first, so a savepoint after it holds no request
            self.end_input()
        if not self.queue:
            self.output.process_watermark(watermark)
        elif self.options.ordered:
            self._ordered.append(watermark)
        else:
            self._marks.append((self._segment, watermark))
            self._segment += 1

    def end_input(self) -> None:
        while self.queue or self._ordered or self._marks:
            self._wait()

    def abandon(self) -> None:
        """Stopped with a savepoint without draining: the held records are in the savepoint,
        and the job that resumes from it issues their requests; emitting them here too would
        emit their results twice."""
        for r in self.queue.values():
            if r.task is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(r.task.cancel)
        self.queue.clear()
        self._ordered.clear()
        self._marks.clear()
        self._held.clear()

    def close(self) -> None:
        loop = self._loop
        if loop is not None:
            async def _cancel_all() -> None:
                for t in asyncio.all_tasks():
                    if t is not asyncio.current_task():
                        t.cancel()

            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=5)
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)
            loop.close()
            self._loop = None
            for fd in (self.wakeup_fd, self._wake_w):
                os.close(fd)
        super().close()

    # -- the task thread ---------------------------------------------------------------------

    def snapshot_inputs(self) -> list[tuple[Any, int | None]]:
        """The inputs of the records not yet emitted, in input order: the operator's state."""
        return [(r.value, r.timestamp) for r in self.queue.values()]

    @property
    def has_finished(self) -> bool:
        return bool(self._finished)

    def drain(self) -> None:
        """Emit what the finished requests allow (the task's loop calls it on a wake-up)."""
        try:
            while os.read(self.wakeup_fd, 4096):
                pass
        except BlockingIOError:
            pass
        finished = self._finished
        ordered = self.options.ordered
        ready: list[_Request] = []  # unordered: what may go out now, as one batch
        while finished:
            r = finished.popleft()
            r.done = True
            if r.error is not None:
                self._fail(r)
            if ordered:
                continue
            if r.segment == self._emitting_segment:
                self._pending_in[r.segment] -= 1
                ready.append(r)
            else:
                self._held.setdefault(r.segment, []).append(r)  # behind a watermark still held
        if ordered:
            self._emit_ordered()
            return
        if ready:
            self._emit(ready)
        self._advance_segments()

    def _wait(self) -> None:
        select.select([self.wakeup_fd], [], [], 0.1)
        self.drain()

    def _enqueue(self, value: Any, timestamp: int | None) -> None:
        self._seq += 1
        r = _Request(self._seq, value, timestamp, self._segment)
        self.queue[r.seq] = r
        if self.options.ordered:
            self._ordered.append(r)
        else:
            self._pending_in[r.segment] += 1
        if len(self.queue) > self.max_in_flight:
            self.max_in_flight = len(self.queue)
        self._unstarted.append(r)

    def _submit(self) -> None:
        """Hand the enqueued requests to the event loop: one wake-up of its thread for all."""
        if self._unstarted:
            batch, self._unstarted = self._unstarted, []
            self._loop.call_soon_threadsafe(self._start_all, batch)  # type: ignore[union-attr]

    def _emit(self, requests: list[_Request]) -> None:
        values: list = []
        stamps: list[int] = []
        for r in requests:
            del self.queue[r.seq]
            values.extend(r.results or ())
            if r.timestamp is not None:
                stamps.extend([r.timestamp] * len(r.results or ()))
        if values:
            self.output.process(values, stamps if len(stamps) == len(values) else None)

    def _emit_ordered(self) -> None:
        q = self._ordered
        ready: list[_Request] = []
        while q:
            head = q[0]
            if isinstance(head, int):
                if ready:
                    self._emit(ready)
                    ready = []
                self.output.process_watermark(q.popleft())  # type: ignore[arg-type]
            elif head.done:
                ready.append(q.popleft())  # type: ignore[arg-type]
            else:
                break
        if ready:
            self._emit(ready)

    def _advance_segments(self) -> None:
        """A segment whose records are all out lets its watermark go, then the next segment's
        finished records."""
        while self._marks and self._pending_in[self._emitting_segment] == 0:
            segment, watermark = self._marks.popleft()
            del self._pending_in[segment]
            self.output.process_watermark(watermark)
            self._emitting_segment = segment + 1
            held = self._held.pop(self._emitting_segment, [])
            if held:
                self._pending_in[self._emitting_segment] -= len(held)
                self._emit(held)

    def _fail(self, r: _Request) -> None:
        e = r.error
        assert e is not None
        what = "timed out and its timeout() raised" if r.timed_out else "failed"
        raise RuntimeError(f"async I/O operator {self.name!r}: the request for record {r.value!r} {what}: {type(e).__name__}: {e}") from e

    # -- the event loop's thread ---------------------------------------------------------------

    def _start_all(self, batch: list[_Request]) -> None:
        for r in batch:
            self._start(r)

    def _start(self, r: _Request) -> None:
        loop = self._loop
        if loop is None or r.seq not in self.queue:
            return  # abandoned before it started
        r.task = loop.create_task(self._request(r))
        if self.timeout_s is not None:
            r.timer = loop.call_later(self.timeout_s, self._on_timeout, r)

    def _on_timeout(self, r: _Request) -> None:
        if r.results is None and r.error is None and r.task is not None and not r.task.done():
            r.timed_out = True
            r.task.cancel()

    async def _request(self, r: _Request) -> None:
        results: list | None = None
        error: BaseException | None = None
        try:
            attempts = 0
            while True:
                attempts += 1
                try:
                    results, error = check_results(await self.fn.async_invoke(r.value), "async_invoke()"), None
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - the strategy decides, or the job fails with it
                    results, error = None, e
                if not self._retries(results, error) or not self.options.retry.can_retry(attempts):
                    break
                await asyncio.sleep(self.options.retry.backoff_time_millis(attempts) / 1000.0)
        except asyncio.CancelledError:
            if not r.timed_out:
                raise  # the operator closes
            try:
                results, error = check_results(self.fn.timeout(r.value), "timeout()"), None
            except Exception as e:  # noqa: BLE001
                results, error = None, e
        if r.timer is not None:
            r.timer.cancel()
        r.error = error
        r.results = results if error is None else []
        self._finished.append(r)
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already

    def _retries(self, results: list | None, error: BaseException | None) -> bool:
        if error is not None:
            return self._retry_exception is not None and bool(self._retry_exception(error))
        return self._retry_result is not None and bool(self._retry_result(results))
