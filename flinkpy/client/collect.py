"""The sink behind ``DataStream.execute_and_collect()``: results come back through files.

Each subtask appends pickled batches to its own file in a directory the client created; after
the job finished the client reads them in subtask order. Client and TaskManagers share this
machine's file system (local clusters), which is what makes this simple and real.
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
        return _CollectWriter(Path(self.directory) / f"part-{ctx.subtask_index:05d}")


class _CollectWriter(SinkWriter):
    def __init__(self, path: Path):
        # unbuffered, one write per batch: a task killed (or os._exit on cancel) mid-batch must not
        # leave half a pickle in the file that its restarted attempt then appends to
        self.file = open(path, "ab", buffering=0)  # a restarted attempt appends: output is at-least-once

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
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return out

    return CollectSink(directory), read
