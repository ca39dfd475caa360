"""A SinkFunction (``invoke(value, context)``) or a plain callable, as a Sink (at-least-once)."""

from __future__ import annotations

from typing import Any

from flinkpy.connectors.base import ReaderContext, Sink, SinkWriter


class FunctionSink(Sink):
    guarantee = "at-least-once"
    needs = "an idempotent invoke() for exactly-once results: replayed records are invoked again"

    def __init__(self, fn: Any):
        self.fn = fn

    def create_writer(self, ctx: ReaderContext) -> SinkWriter:
        return _FunctionWriter(self.fn)


class _FunctionWriter(SinkWriter):
    def __init__(self, fn: Any):
        self.fn = fn
        self._invoke = getattr(fn, "invoke", None)
        #: a SinkFunction's invoke, which an upstream operator may call per record
        #: (flinkpy.task.operators.Output.per_record); a plain callable takes batches only
        self.per_record = self._invoke

    def open(self, runtime_context: Any) -> None:
        """A SinkFunction is a rich function: open() before the first record."""
        opener = getattr(self.fn, "open", None)
        if self._invoke is not None and callable(opener):
            opener(runtime_context)

    def flush(self, end_of_input: bool) -> None:
        """A SinkFunction hears the end of a bounded input: ``finish()``, once, before ``close()``."""
        finisher = getattr(self.fn, "finish", None)
        if end_of_input and self._invoke is not None and callable(finisher):
            finisher()

    def close(self) -> None:
        closer = getattr(self.fn, "close", None)
        if self._invoke is not None and callable(closer):
            closer()

    def write(self, records: list) -> None:
        # the bound method in a local: no attribute lookup per record (SinkFunction's context is
        # None, as PyFlink's is for a plain sink; no context object is built per record)
        invoke = self._invoke
        if invoke is not None:
            for r in records:
                invoke(r, None)
        else:
            fn = self.fn
            for r in records:
                fn(r)
