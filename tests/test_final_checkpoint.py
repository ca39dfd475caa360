"""The final checkpoint: no task commits at the end of its input on its own.

A bounded job's sinks used to commit what their last checkpoint did not cover as soon as their
own input ended. If another subtask then failed before it finished, the job restarted from that
checkpoint and the finished sink's records were written again. Now every task ends its data,
waits for the job's final checkpoint (triggered once every source's input ended) and commits
there; the test makes one subtask fail at the end of its input *after* the other has had every
chance to commit its last records, and the committed output must still hold each record once.

The expected output is computed here: key A's records go to the sink's subtask 0, key B's to its
subtask 1 (found from the key groups), and each line is ``key:n``.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from flinkpy.common import Encoder, RestartStrategies, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors import DataGeneratorSource, FileSink, OutputFileConfig
from flinkpy.datastream.connectors.file_system import BucketAssigner
from flinkpy.state.key_groups import DEFAULT_MAX_PARALLELISM, assign_to_key_group, compute_operator_index_for_key_group
from conftest import wait_for
from test_recovery import checkpoints, exception_entries, job_show, only_job, start  # noqa: F401 - fixture

N = 2000
#: how long subtask 1 waits, at the end of its input, for subtask 0's last record to be committed
WAIT_S = 6.0


def key_of_subtask(subtask: int) -> str:
    """A key whose key group the keyed operator's ``subtask`` owns at parallelism 2."""
    return next(k for k in (f"k{i}" for i in range(100))
                if compute_operator_index_for_key_group(DEFAULT_MAX_PARALLELISM, 2, assign_to_key_group(k, DEFAULT_MAX_PARALLELISM)) == subtask)


def committed_lines(out: Path) -> Counter[str]:
    lines: Counter[str] = Counter()
    for path in out.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            lines.update(path.read_text().splitlines())
    return lines


class FailAtTheEndOnce(KeyedProcessFunction):
    """Emits ``key:n``; at the end of the input (the final watermark fires its timer), the subtask
    of key B waits until key A's last record is committed (or WAIT_S passed) and then fails, once."""

    def __init__(self, out: str, marker: str, last_a: str):
        self.out, self.marker, self.last_a = out, marker, last_a

    def process_element(self, value, ctx):
        key, n = value
        ctx.timer_service().register_event_time_timer(1 << 60)
        yield f"{key}:{n}"

    def on_timer(self, timestamp, ctx):
        if ctx.get_current_key() == self.last_a.split(":")[0] or Path(self.marker).exists():
            return
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and committed_lines(Path(self.out))[self.last_a] == 0:
            time.sleep(0.05)  # inside the user's function: the job's own pace, not the test's
        Path(self.marker).write_text(str(committed_lines(Path(self.out))[self.last_a]))
        raise RuntimeError("failing once at the end of the input")


@pytest.mark.timeout(90)
def test_a_subtask_failing_at_the_end_of_its_input_duplicates_nothing_another_finished(start, tmp_path: Path) -> None:  # noqa: F811
    a, b = key_of_subtask(0), key_of_subtask(1)
    out, marker = tmp_path / "out", tmp_path / "failed-once"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(60_000)  # one checkpoint at the start, then only the final one
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    records = env.from_source(DataGeneratorSource(lambda i: (a if i % 2 == 0 else b, i), N, records_per_second=4000),
                              WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, ts: r[1]), "records")
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("rec").build())
        .build()
    )
    last_a = f"{a}:{max(i for i in range(N) if i % 2 == 0)}"
    records.key_by(lambda r: r[0]).process(FailAtTheEndOnce(str(out), str(marker), last_a)).sink_to(sink).name("sink")
    start()
    env.execute("final checkpoint")

    jid = only_job()["jid"]
    job = job_show(jid)
    assert job["state"] == "FINISHED", job["state"]
    assert job["restarts"] == 1, [e["message"] for e in exception_entries(jid)]
    # with the final checkpoint, key A's last record cannot be committed while key B's subtask
    # has not ended its input: the failing subtask waited for it in vain
    assert marker.read_text() == "0", "a sink committed at the end of its input before every task had ended"
    got = committed_lines(out)
    expected = Counter(f"{a if i % 2 == 0 else b}:{i}" for i in range(N))
    assert got == expected, f"{sum((got - expected).values())} lines too many, {sum((expected - got).values())} missing"


@pytest.mark.timeout(60)
def test_checkpoints_go_on_after_a_bounded_source_beside_an_unbounded_one_ended(start, tmp_path: Path) -> None:  # noqa: F811
    """A source whose input ended waits for the final checkpoint instead of finishing, so the
    job's other sources go on being checkpointed (they stopped when a task had finished)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.enable_checkpointing(100)
    bounded = env.from_collection([1, 2, 3])
    endless = env.from_source(DataGeneratorSource(lambda i: i, None, records_per_second=200), WatermarkStrategy.no_watermarks(), "endless")
    bounded.union(endless).map(lambda n: n).print()
    start()
    client = env.execute_async("mixed")
    try:
        wait_for(lambda: checkpoints(client.get_job_id())["counts"]["completed"] >= 8, timeout=40,
                 message="eight checkpoints completed (the bounded source ended after the first)")
        assert client.get_job_status() == "RUNNING"
    finally:
        client.cancel()
