"""The sink behind ``DataStream.execute_and_collect()``: results come back through files.

Each attempt of each subtask appends pickled batches to its own file in a directory the client
created; after the job finished the client reads them in subtask order, and a subtask's
attempts in the order they ran (so a key's last record is its final one). A task killed in the
middle of a write leaves at most an unfinished batch at the end of its own file, which the
reader drops: the restarted attempt, writing to a new file, replays it. Client and
TaskManagers share this machine's file system (local clusters), which is what makes this simple
and real.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from flinkpy.connectors.base import ReaderContext, Sink, SinkWriter


class CollectSink(Sink):
    name = "Collect Sink"
    guarantee = "at-least-once"
    needs = "nothing; results of an attempt that failed stay in the collected output (a key's last value is its final one)"

    def __init__(self, directory: str):
        self.directory = directory

    def create_writer(self, ctx: ReaderContext) -> SinkWriter:
        return _CollectWriter(Path(self.directory) / f"part-{ctx.subtask_index:05d}-{ctx.attempt:05d}")


class _CollectWriter(SinkWriter):
    def __init__(self, path: Path):
        # unbuffered, one write per batch; an attempt of the same subtask restarted after a
        # failure of another region (same attempt number) appends: output is at-least-once
        self.file = open(path, "ab", buffering=0)

    def write(self, records: list) -> None:
        self.file.write(pickle.dumps(records, protocol=5))

    def flush(self, end_of_input: bool) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def collect_sink() -> tuple[CollectSink, Callable[[], list[Any]]]:
    directory = tempfile.mkdtemp(prefix="flinkpy-collect-")

    def read() -> list[Any]:
        out: list[Any] = []
        try:
            for part in sorted(Path(directory).glob("part-*")):
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
