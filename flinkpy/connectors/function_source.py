"""A legacy SourceFunction (``run(ctx)`` calling ``ctx.collect``) as a Source.

``run`` is a blocking loop of the user's, so it runs in a thread and hands records over through
a bounded queue: the queue's bound is the backpressure. Not replayable: no guarantee beyond
at-most-once after a failure (prefer ``from_source`` with a replayable Source).

``ctx.collect_with_timestamp`` and ``ctx.emit_watermark`` travel through the same queue, in the
order the function called them, and reach the chain as :class:`StampedBatch`: the records keep
their timestamps and a watermark stands exactly after the records collected before it, as in
PyFlink.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from flinkpy.connectors.base import ReaderContext, Source, SourceReader, StampedBatch

_END = object()


class _Stamped:
    """A record collected with its event timestamp."""

    __slots__ = ("value", "timestamp")

    def __init__(self, value: Any, timestamp: int):
        self.value = value
        self.timestamp = timestamp


class _Mark:
    """A watermark the function emitted, between the records before and after it."""

    __slots__ = ("watermark",)

    def __init__(self, watermark: int):
        self.watermark = watermark


class FunctionSource(Source):
    guarantee = "none"
    needs = "nothing it can offer: run() is not replayable; use from_source with a replayable Source"

    def __init__(self, fn: Any):
        self.fn = fn

    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        return _FunctionReader(self.fn)


class _Context:
    def __init__(self, q: "queue.Queue[Any]"):
        self._q = q

    def collect(self, value: Any) -> None:
        self._q.put(value)

    def collect_with_timestamp(self, value: Any, timestamp: int) -> None:
        self._q.put(_Stamped(value, int(timestamp)))

    def emit_watermark(self, watermark: Any) -> None:
        # PyFlink passes a Watermark object; a plain number is taken too
        self._q.put(_Mark(int(getattr(watermark, "timestamp", watermark))))

    def mark_as_temporarily_idle(self) -> None:
        pass


class _FunctionReader(SourceReader):
    def __init__(self, fn: Any):
        self.fn = fn
        self._q: "queue.Queue[Any]" = queue.Queue(maxsize=10_000)
        self._error: BaseException | None = None
        self._done = False
        #: an item taken from the queue that starts the next batch (a stamped record after plain ones)
        self._next: Any = None
        self._thread = threading.Thread(target=self._run, name="source-function", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.fn.run(_Context(self._q))
        except BaseException as e:  # surfaced on the task thread by poll()
            self._error = e
        finally:
            self._q.put(_END)

    def poll(self, max_records: int) -> list | None:
        if self._done:
            return None
        item = self._next
        self._next = None
        if item is None:
            try:
                item = self._q.get(timeout=0.05)
            except queue.Empty:
                return []
        out: list = []
        timestamps: list[int] | None = None
        while True:
            if item is _END:
                self._done = True
                if self._error is not None:
                    raise self._error
                return self._batch(out, timestamps) if out else None
            if type(item) is _Mark:
                return StampedBatch(out, timestamps=timestamps, watermark=item.watermark)
            stamped = type(item) is _Stamped
            if out and stamped != (timestamps is not None):
                self._next = item  # a batch's records all have timestamps, or none has
                return self._batch(out, timestamps)
            if stamped:
                if timestamps is None:
                    timestamps = []
                out.append(item.value)
                timestamps.append(item.timestamp)
            else:
                out.append(item)
            if len(out) >= max_records:
                return self._batch(out, timestamps)
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return self._batch(out, timestamps)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        # a SourceFunction that is a CheckpointListener hears it on the task's thread, while its
        # run() goes on in its own (as in Flink, where it holds the checkpoint lock)
        notify = getattr(self.fn, "notify_checkpoint_complete", None)
        if callable(notify):
            notify(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        notify = getattr(self.fn, "notify_checkpoint_aborted", None)
        if callable(notify):
            notify(checkpoint_id)

    @staticmethod
    def _batch(out: list, timestamps: list[int] | None) -> list:
        return out if timestamps is None else StampedBatch(out, timestamps=timestamps)

    def close(self) -> None:
        cancel = getattr(self.fn, "cancel", None)
        if callable(cancel):
            cancel()
