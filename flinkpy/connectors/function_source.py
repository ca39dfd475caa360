"""A legacy SourceFunction (``run(ctx)`` calling ``ctx.collect``) as a Source.

``run`` is a blocking loop of the user's, so it runs in a thread and hands records over through
a bounded queue: the queue's bound is the backpressure. Not replayable: no guarantee beyond
at-most-once after a failure (prefer ``from_source`` with a replayable Source).
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from flinkpy.connectors.base import ReaderContext, Source, SourceReader

_END = object()


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
        self._q.put(value)

    def emit_watermark(self, watermark: Any) -> None:
        pass


class _FunctionReader(SourceReader):
    def __init__(self, fn: Any):
        self.fn = fn
        self._q: "queue.Queue[Any]" = queue.Queue(maxsize=10_000)
        self._error: BaseException | None = None
        self._done = False
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
        out: list = []
        try:
            item = self._q.get(timeout=0.05)
        except queue.Empty:
            return out
        while True:
            if item is _END:
                self._done = True
                if self._error is not None:
                    raise self._error
                return out if out else None
            out.append(item)
            if len(out) >= max_records:
                return out
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return out

    def close(self) -> None:
        cancel = getattr(self.fn, "cancel", None)
        if callable(cancel):
            cancel()
