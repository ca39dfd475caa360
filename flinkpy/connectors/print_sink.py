"""PrintSink and DiscardingSink: the sinks of ``DataStream.print()`` and of benchmarks.

PrintSink writes ``str(record)`` one per line, prefixed the way Flink prefixes them so that
output from several subtasks can be told apart: ``"3> "`` is subtask 3 (counted from 1) at
parallelism > 1, ``"name:3> "`` with a sink identifier, ``"name> "`` with an identifier at
parallelism 1, nothing otherwise. A batch is written with one ``write`` and one ``flush``: a
print per record would make printing the slowest operator of most example jobs.

>>> w = PrintSink("out").create_writer(ReaderContext(subtask_index=1, parallelism=2))
>>> w.write([1, "a"])
out:2> 1
out:2> a

A stream with type information prints as PyFlink prints it (Java's form:
:mod:`flinkpy.common.printed_forms`); a stream without prints ``str(record)``, as in PyFlink:

>>> from flinkpy.common.types import Row
>>> from flinkpy.common.typeinfo import Types
>>> w = PrintSink(type_info=Types.ROW_NAMED(["id", "name", "ok"], [Types.INT(), Types.STRING(), Types.BOOLEAN()]))
>>> w.create_writer(ReaderContext(subtask_index=0, parallelism=1)).write([Row(id=1, name="a b", ok=None)])
+I[1, a b, null]
>>> PrintSink().create_writer(ReaderContext(subtask_index=0, parallelism=1)).write([Row(1, "a")])
<Row(1, 'a')>
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from flinkpy.common.printed_forms import printer
from flinkpy.common.typeinfo import TypeInformation
from flinkpy.connectors.base import ReaderContext, Sink, SinkWriter


def print_prefix(identifier: str | None, subtask_index: int, parallelism: int) -> str:
    """The line prefix Flink's print sink uses.

    >>> print_prefix(None, 0, 1), print_prefix(None, 0, 4), print_prefix("x", 0, 1)
    ('', '1> ', 'x> ')
    """
    prefix = identifier or ""
    if parallelism > 1:
        prefix = f"{prefix}:{subtask_index + 1}" if prefix else str(subtask_index + 1)
    return f"{prefix}> " if prefix else ""


class PrintSinkWriter(SinkWriter):
    """Writes a batch to stdout (or stderr) with one write call."""

    def __init__(self, prefix: str, to_stderr: bool, text: Callable[[Any], str] = str) -> None:
        self._prefix = prefix
        self._to_stderr = to_stderr
        self._text = text

    def write(self, records: list) -> None:
        if not records:
            return
        # looked up per batch, so redirections made after start-up (and pytest's capture) apply
        stream = sys.stderr if self._to_stderr else sys.stdout
        prefix = self._prefix
        if self._text is not str:
            records = [self._text(r) for r in records]
        if prefix:
            text = "".join(f"{prefix}{r}\n" for r in records)
        else:
            text = "\n".join(map(str, records)) + "\n"
        stream.write(text)
        stream.flush()


class PrintSink(Sink):
    """Prints every record, as ``DataStream.print(sink_identifier)`` does; ``type_info``: the
    stream's type information, which says how its records print (see the module docstring)."""

    guarantee = "at-least-once"
    needs = "nothing; records replayed after a failure are printed again"

    def __init__(
        self, sink_identifier: str | None = None, to_stderr: bool = False, type_info: TypeInformation | None = None
    ) -> None:
        self.sink_identifier = sink_identifier
        self.to_stderr = to_stderr
        self.type_info = type_info

    def text(self) -> Callable[[Any], str]:
        """How one record is printed (the Spark runner's print writer uses it too)."""
        return printer(self.type_info)

    def create_writer(self, ctx: ReaderContext) -> PrintSinkWriter:
        prefix = print_prefix(self.sink_identifier, ctx.subtask_index, ctx.parallelism)
        return PrintSinkWriter(prefix, self.to_stderr, self.text())

    def __repr__(self) -> str:
        return f"PrintSink({self.sink_identifier!r}, to_stderr={self.to_stderr})"


class DiscardingSinkWriter(SinkWriter):
    def write(self, records: list) -> None:
        pass


class DiscardingSink(Sink):
    """Drops every record: measures a pipeline without the cost of its output.

    >>> DiscardingSink().create_writer(ReaderContext(0, 1)).write([1, 2, 3])
    """

    guarantee = "exactly-once"
    needs = "nothing: it writes nothing"

    def create_writer(self, ctx: ReaderContext) -> DiscardingSinkWriter:
        return DiscardingSinkWriter()

    def __repr__(self) -> str:
        return "DiscardingSink()"
