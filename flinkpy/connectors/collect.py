"""The sink behind ``DataStream.execute_and_collect()``: results come back through files.

Each attempt of each subtask appends pickled batches to its own file in a directory the client
created; the client reads them while the job runs (:mod:`flinkpy.client.collect_results`), a
subtask's attempts in the order they ran (so a key's last record is its final one), and notes
how far it has read each file: a writer more than ``AHEAD_BYTES`` ahead of its reader waits, as
a sender without credit would (an unbounded job never fills the disk). A task killed in the
middle of a write leaves at most an unfinished batch at the end of its own file, which the
reader drops: the restarted attempt, writing to a new file, replays it. Client and
TaskManagers share this machine's file system (local clusters), which is what makes this simple
and real.
"""

from __future__ import annotations

import pickle
import shutil
import time
import tempfile
from pathlib import Path
from typing import Any, Callable

from flinkpy.connectors.base import ReaderContext, Sink, SinkWriter
from flinkpy.files import write_atomically


class CollectSink(Sink):
    name = "Collect Sink"
    guarantee = "at-least-once"
    needs = "nothing; results of an attempt that failed stay in the collected output (a key's last value is its final one)"

    def __init__(self, directory: str):
        self.directory = directory

    def create_writer(self, ctx: ReaderContext) -> SinkWriter:
        return _CollectWriter(Path(self.directory) / f"part-{ctx.subtask_index:05d}-{ctx.attempt:05d}")


#: suffix of the file in which the reader records how far it has read a part file
CONSUMED = ".consumed"
#: how far a writer may run ahead of the reader (bytes): beyond, it waits (backpressure)
AHEAD_BYTES = 32 << 20


def mark_consumed(part: Path, offset: int) -> None:
    """The reader has read ``part`` up to ``offset`` (replaced atomically)."""
    write_atomically(part.with_name(part.name + CONSUMED), str(offset))


def _consumed(part: Path) -> int:
    try:
        return int(part.with_name(part.name + CONSUMED).read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


class _CollectWriter(SinkWriter):
    def __init__(self, path: Path):
        # unbuffered, one write per batch; an attempt of the same subtask restarted after a
        # failure of another region (same attempt number) appends: output is at-least-once
        self.path = path
        self.file = open(path, "ab", buffering=0)

    def write(self, records: list) -> None:
        self.file.write(pickle.dumps(records, protocol=5))
        # a reader that is behind (or a program that stopped iterating) holds the job back,
        # as a full network buffer would, instead of filling the disk
        wait = 0.001
        while self.file.tell() - _consumed(self.path) > AHEAD_BYTES:
            if not self.path.parent.exists():
                return  # the reader is gone: its job is being cancelled
            time.sleep(wait)
            wait = min(wait * 2, 0.1)

    def flush(self, end_of_input: bool) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def collect_sink() -> tuple[CollectSink, Callable[[], list[Any]]]:
    directory = tempfile.mkdtemp(prefix="flinkpy-collect-")

    def read() -> list[Any]:
        out: list[Any] = []
        try:
            for part in sorted(p for p in Path(directory).glob("part-*") if CONSUMED not in p.name):
                with open(part, "rb") as f:
                    while True:
                        try:
                            out.extend(pickle.load(f))
                        except EOFError:
                            break
                        except (pickle.UnpicklingError, ValueError, IndexError):
                            break  # the unfinished last batch of a killed attempt
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return out

    return CollectSink(directory), read
