"""The FileSink's two-phase commit under real crashes: the task writing the part files is
SIGKILLed at each phase of the protocol — records written but not prepared, prepared but not
acknowledged, checkpoint complete but not committed — and the committed output must equal the
failure-free output exactly (every line once), with no hidden file left behind.

The expected output is computed here: the job maps each number n of 1..N to ``n*n``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from flinkpy.common import Encoder, RestartStrategies, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import DataGeneratorSource, FileSink, OutputFileConfig, RollingPolicy
from flinkpy.datastream.connectors.file_system import BucketAssigner
from test_recovery import assert_recovered, only_job, start, vertex_id  # noqa: F401 - fixture

N = 400_000
#: the source's pace (records/s): the job lasts ~2 s whatever the machine's load, so that
#: checkpoint 2 always completes while the sink still runs
RATE = 200_000


def square_job(out: Path) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    numbers = env.from_source(DataGeneratorSource(lambda i: i + 1, N, records_per_second=RATE), WatermarkStrategy.no_watermarks(), "numbers")
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=256 * 1024))
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("sq").with_part_suffix(".txt").build())
        .build()
    )
    # rebalance: the sink is its own task, so a crash point on it kills only the writer
    numbers.map(lambda n: n * n).rebalance().sink_to(sink).name("squares")
    return env


def output(out: Path) -> tuple[Counter[str], list[Path]]:
    visible: Counter[str] = Counter()
    hidden = []
    for path in out.rglob("*"):
        if not path.is_file():
            continue
        if path.name.startswith("."):
            hidden.append(path)
        else:
            assert path.name.startswith("sq-") and path.name.endswith(".txt"), path
            visible.update(path.read_text().splitlines())
    return visible, hidden


@pytest.mark.timeout(60)
@pytest.mark.parametrize("point", ["sink-before-prepare", "sink-after-prepare", "sink-before-commit"])
def test_committed_files_are_exact_after_a_crash_at_each_phase(start, tmp_path: Path, point: str) -> None:  # noqa: F811
    out = tmp_path / "out"
    env = square_job(out)
    rule: dict[str, Any] = {"point": point, "vertex": vertex_id(env, "squares"), "subtask": 0, "checkpoint": 2}
    start(faults=[rule])
    env.execute("squares")

    assert_recovered(only_job()["jid"], cause="SIGKILL")
    visible, hidden = output(out)
    expected = Counter(str(n * n) for n in range(1, N + 1))
    assert visible == expected, (
        f"{sum((visible - expected).values())} lines too many, {sum((expected - visible).values())} missing"
    )
    assert hidden == [], f"leftover in-progress files: {hidden}"
