"""A SourceFunction (``env.add_source``) on Spark: run once on the driver, read from a journal.

A SourceFunction's ``run(ctx)`` is a loop of the user's that calls ``ctx.collect``; nothing can
ask it for the records from a position again, and Spark plans every micro-batch before it reads
it (and reads it again after a failure). So the driver runs the function, once, in a thread, and
appends what it collects to a *journal* in the query's checkpoint location: length-prefixed
frames, each a pickled list of records, then an end frame when ``run`` returns (or an error
frame when it raises). :class:`JournalSource` is a flinkpy Source over that file whose reader's
position is (byte offset of a frame, records of it already read): replayable to the record, so
the usual data source (:mod:`flinkpy.spark.sources`) plans and replays batches over it exactly
once, and a restarted query goes on from its offsets while the function keeps running.

What the engine gives the same way: the records in the order the function collected them, the
end of the input when ``run`` returns, the job failing when it raises. A restored job (a new
driver) runs the function again from its beginning, as the engine does after a restore: the
journal goes on after what the restored offsets had read. Records stamped by the function
(``collect_with_timestamp``) and its watermarks (``emit_watermark``) fail the query with a
message: Spark's rows take timestamps from a watermark strategy (``assign_timestamps_and_watermarks``).

>>> import pathlib, tempfile
>>> from flinkpy.connectors.base import ReaderContext
>>> class Three:
...     def run(self, ctx):
...         for i in range(3):
...             ctx.collect(i)
...     def cancel(self):
...         pass
>>> path = str(pathlib.Path(tempfile.mkdtemp()) / "journal")
>>> start_journal(Three(), path).join(10)
>>> reader = JournalSource(path).create_reader(ReaderContext(0, 1))
>>> reader.poll(2), reader.poll(10), reader.poll(10)
([0, 1], [2], None)
"""

from __future__ import annotations

import os
import pickle
import struct
import threading
from typing import Any

from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader

_HEADER = struct.Struct(">I")
#: frame kinds: records, the end of run(), run() raised
_RECORDS, _END, _ERROR = 0, 1, 2
#: how often the writer appends what the function collected meanwhile
FLUSH_S = 0.02

_writers: dict[str, threading.Thread] = {}
_writers_lock = threading.Lock()


class SourceFunctionStamps(RuntimeError):
    """The function stamped records or emitted a watermark: not carried onto Spark's rows."""


class _Context:
    """The ``ctx`` a SourceFunction's ``run`` gets (PyFlink's SourceContext)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.buffer: list = []

    def collect(self, value: Any) -> None:
        with self.lock:
            self.buffer.append(value)

    def collect_with_timestamp(self, value: Any, timestamp: int) -> None:
        raise SourceFunctionStamps(
            "ctx.collect_with_timestamp(): a SourceFunction's timestamps do not reach the rows of the Spark runner; "
            "collect() the records and assign their timestamps with assign_timestamps_and_watermarks(...) after add_source()")

    def emit_watermark(self, watermark: Any) -> None:
        raise SourceFunctionStamps(
            "ctx.emit_watermark(): a SourceFunction's watermarks do not reach the Spark runner, whose watermark follows a "
            "watermark strategy; assign one with assign_timestamps_and_watermarks(...) after add_source()")

    def mark_as_temporarily_idle(self) -> None:
        pass

    def take(self) -> list:
        with self.lock:
            out, self.buffer = self.buffer, []
        return out


def journal_path(location: str, index: int) -> str:
    """Where the journal of the query's source number ``index`` lives in its checkpoint location."""
    from flinkpy.spark.supervisor_snapshots import JOURNALS

    return os.path.join(location, JOURNALS, f"source-{index}.journal")


def _frame(kind: int, payload: Any) -> bytes:
    body = pickle.dumps((kind, payload), protocol=5)
    return _HEADER.pack(len(body)) + body


def _ended(path: str) -> bool:
    """Whether the journal at ``path`` holds its function's end (or error) already."""
    reader = _JournalReader(path, 0, 0)
    try:
        while reader.poll(1 << 20):
            pass
    except RuntimeError:  # an error frame
        return True
    return reader.finished


def _whole_frames(path: str) -> int:
    """The length of the journal's whole frames (a copy taken while it was written may end in part of one)."""
    reader = _JournalReader(path, 0, 0)
    while True:
        frame = reader._next_frame()
        if frame is None:
            return reader.offset
        reader.offset += frame[0]


def start_journal(fn: Any, path: str) -> threading.Thread:
    """Run ``fn`` (a SourceFunction) in a thread of this process, appending what it collects to
    the journal at ``path``; once per journal and process (a restarted query keeps the thread).
    A journal that ended already is not written again."""
    with _writers_lock:
        running = _writers.get(path)
        if running is not None:
            return running
        os.makedirs(os.path.dirname(path), exist_ok=True)
        thread = threading.Thread(target=_write, args=(fn, path), name=f"flinkpy-source-function {os.path.basename(path)}", daemon=True)
        if os.path.exists(path):
            if _ended(path):
                thread = threading.Thread(target=lambda: None, daemon=True)
            else:  # a restored journal: the function runs again after its last whole frame
                os.truncate(path, _whole_frames(path))
        _writers[path] = thread
        thread.start()
        return thread


def _write(fn: Any, path: str) -> None:
    ctx = _Context()
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            fn.run(ctx)
        except BaseException as e:  # noqa: BLE001 - written to the journal: the query fails reading it
            failure.append(e)
        finally:
            done.set()

    threading.Thread(target=run, name="flinkpy-source-function-run", daemon=True).start()
    with open(path, "ab") as out:
        while True:
            finished = done.wait(FLUSH_S)
            records = ctx.take()
            if records:
                out.write(_frame(_RECORDS, records))
                out.flush()
            if finished:
                break
        if failure:
            e = failure[0]
            out.write(_frame(_ERROR, f"{type(e).__name__}: {e}"))
        else:
            out.write(_frame(_END, None))
        out.flush()


class JournalSource(Source):
    """The journal of a SourceFunction run by the driver (see the module docstring); one reader."""

    guarantee = "exactly-once"
    boundedness = Boundedness.BOUNDED

    def __init__(self, path: str) -> None:
        self.path = path

    def max_parallelism(self) -> int:
        return 1

    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        offset, skip = ctx.restored_state[0] if ctx.restored_state else (0, 0)
        return _JournalReader(self.path, offset, skip)


class _JournalReader(SourceReader):
    def __init__(self, path: str, offset: int, skip: int) -> None:
        self.path = path
        #: the frame being read and how many of its records were handed out
        self.offset = offset
        self.skip = skip
        self.finished = False
        self.pending: list = []
        self.frame_length = 0

    def _next_frame(self) -> tuple[int, Any] | None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                head = f.read(_HEADER.size)
                if len(head) < _HEADER.size:
                    return None
                (size,) = _HEADER.unpack(head)
                body = f.read(size)
        except FileNotFoundError:
            return None
        if len(body) < size:  # being written
            return None
        return _HEADER.size + size, pickle.loads(body)

    def poll(self, max_records: int) -> list | None:
        out: list = []
        while len(out) < max_records:
            if self.finished:
                return out or None
            if not self.pending:
                frame = self._next_frame()
                if frame is None:
                    return out
                length, (kind, payload) = frame
                if kind == _END:
                    self.finished = True
                    continue
                if kind == _ERROR:
                    raise RuntimeError(f"the SourceFunction's run() raised {payload}")
                self.pending = payload[self.skip:]
                self.frame_length = length
                if not self.pending:
                    self.offset, self.skip = self.offset + length, 0
                    continue
            take = self.pending[: max_records - len(out)]
            out.extend(take)
            self.pending = self.pending[len(take):]
            self.skip += len(take)
            if not self.pending:
                self.offset, self.skip = self.offset + self.frame_length, 0
        return out

    def snapshot_state(self) -> Any:
        return (self.offset, self.skip)
