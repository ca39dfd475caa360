"""Sources hear that a checkpoint completed (Flink's ``SourceReader.notifyCheckpointComplete``
and ``CheckpointListener`` on a legacy ``SourceFunction``): a reader is told after the
checkpoint whose snapshot covered its records completed, on the thread that polls it, so that it
can acknowledge or commit what the checkpoint covers.

Each source here ends itself once it has heard of two completed checkpoints: the jobs finish only
if the notifications arrive (no sleeps, no polling of the test's own)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from conftest import module_cluster
from flinkpy.common import WatermarkStrategy
from flinkpy.common.functions import CheckpointListener
from flinkpy.connectors.base import Boundedness, Source, SourceReader
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.functions import SinkFunction, SourceFunction

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory):
    with module_cluster(tmp_path_factory, "notify-home", taskmanagers=1, slots=4) as home:
        yield home


class CountingReader(SourceReader):
    """Hands out 0, 1, 2, ...; logs, for each completed checkpoint, the position its snapshot
    took; ends after two completions."""

    def __init__(self, log: str, thread_log: list):
        self.log = log
        self.position = 0
        self.snapshots: list[int] = []
        self.completed: list[tuple[int, int]] = []
        self.poll_thread = None

    def poll(self, max_records):
        self.poll_thread = threading.get_ident()
        if len(self.completed) >= 2:
            return None
        out = list(range(self.position, self.position + min(max_records, 10)))
        self.position += len(out)
        return out

    def snapshot_state(self):
        self.snapshots.append(self.position)
        return self.position

    def notify_checkpoint_complete(self, checkpoint_id):
        assert threading.get_ident() == self.poll_thread, "notified on another thread than the poller's"
        self.completed.append((checkpoint_id, self.snapshots[-1]))
        with open(self.log, "a") as f:
            f.write(json.dumps({"checkpoint": checkpoint_id, "covered": self.snapshots[-1]}) + "\n")


class CountingSource(Source):
    boundedness = Boundedness.CONTINUOUS_UNBOUNDED

    def __init__(self, log: str):
        self.log = log

    def create_reader(self, ctx):
        return CountingReader(self.log, [])


class Discard(SinkFunction):
    def invoke(self, value, context):
        pass


def test_a_source_reader_hears_of_completed_checkpoints(shared_cluster, tmp_path: Path) -> None:
    log = tmp_path / "completed.jsonl"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(100)
    env.from_source(CountingSource(str(log)), WatermarkStrategy.no_watermarks(), "counting").add_sink(Discard())
    env.execute("source-notifications")
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    # two while it read, then the job's final checkpoint, taken after its input ended
    assert len(entries) == 3
    ids = [e["checkpoint"] for e in entries]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert entries[0]["covered"] <= entries[1]["covered"] <= entries[2]["covered"]


class AckingFunction(SourceFunction, CheckpointListener):
    """A legacy source that runs until two checkpoints completed, writing each completion."""

    def __init__(self, log: str):
        self.log = log
        self.running = True

    def run(self, ctx):
        self.completions = threading.Event()
        self.count = 0
        n = 0
        while self.running and self.count < 2:
            ctx.collect(n)
            n += 1
            self.completions.wait(0.001)

    def notify_checkpoint_complete(self, checkpoint_id):
        with open(self.log, "a") as f:
            f.write(f"{checkpoint_id}\n")
        self.count += 1

    def cancel(self):
        self.running = False


def test_a_source_function_that_listens_hears_of_completed_checkpoints(shared_cluster, tmp_path: Path) -> None:
    log = tmp_path / "completed.txt"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(100)
    env.add_source(AckingFunction(str(log))).add_sink(Discard())
    env.execute("source-function-notifications")
    ids = [int(x) for x in log.read_text().split()]
    assert len(ids) >= 2 and ids == sorted(set(ids))
