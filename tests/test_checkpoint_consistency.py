"""The consistency oracle: every completed checkpoint of the even/odd job is a consistent cut.

The job sums the integers from a parallel NumberSequenceSource by parity. A checkpoint records
each source subtask's position (the ranges it has not read yet) and the keyed sums. For a
consistent snapshot (exactly-once), the sums in the state must equal — exactly — the sums of the
integers *before* the recorded positions: the integers the sources emitted before their barrier.
At-least-once may count records from behind a barrier on a faster channel, so there the state
may only be ahead, never behind. Expected values are computed here, independently, from the
offsets in ``_metadata``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import wait_for
from flinkpy.state import canonical

N = 10**12  # effectively unbounded: the test cancels the job

JOB = textwrap.dedent(
    """
    import sys
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_source(NumberSequenceSource(1, %d), WatermarkStrategy.no_watermarks(), "numbers")
    (numbers.map(lambda n: ("even" if n %% 2 == 0 else "odd", n))
        .key_by(lambda pair: pair[0])
        .sum(1).uid("sums")
        .add_sink(lambda value: None))
    env.execute("even-odd-oracle")
    """
    % N
)


def _sum_range(a: int, b: int, parity: int) -> int:
    """Sum of the integers in [a, b) with n % 2 == parity."""
    first = a if a % 2 == parity else a + 1
    if first >= b:
        return 0
    last = b - 1 if (b - 1) % 2 == parity else b - 2
    count = (last - first) // 2 + 1
    return (first + last) * count // 2


def _expected(offsets: list[dict]) -> dict[str, int]:
    """Sums of the integers the sources emitted: 1..N minus every range still unread."""
    total = {"even": _sum_range(1, N + 1, 0), "odd": _sum_range(1, N + 1, 1)}
    for off in offsets:
        for a, b in off["ranges"]:
            total["even"] -= _sum_range(a, b, 0)
            total["odd"] -= _sum_range(a, b, 1)
    return total


def _state_sums(checkpoint_dir: Path, metadata: dict) -> dict[str, int]:
    sums = {"even": 0, "odd": 0}
    (sums_op,) = [op for op in metadata["operators"] if op["uid"] == "sums"]
    for sub in sums_op["subtasks"]:
        handle = sub["keyed_state"]
        if handle is None:
            continue
        snapshot = canonical.loads((checkpoint_dir / handle["path"]).read_bytes())
        for groups in snapshot["states"]["_reduce"]["key_groups"].values():
            for key, value in groups.items():
                sums[key] += value[1]
    return sums


def _run_and_collect(cli, tmp_path: Path, mode: str, checkpoints: int) -> tuple[list[tuple[Path, dict]], dict]:
    job = tmp_path / "oracle.py"
    job.write_text(JOB)
    res = cli(
        "run", "-d", "-p", "2",
        "-D", "execution.checkpointing.interval=100ms",
        "-D", f"execution.checkpointing.mode={mode}",
        "-D", "execution.checkpointing.num-retained=1000",
        "-D", "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
        "--json", str(job),
    )
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]

    def completed() -> int:
        r = cli("checkpoint", "list", jid, "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["counts"]["completed"]

    wait_for(lambda: completed() >= checkpoints, timeout=60, message=f"{checkpoints} completed checkpoints")
    stats = json.loads(cli("checkpoint", "list", jid, "--json").stdout)
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: json.loads(cli("job", "show", jid, "--json").stdout)["state"] == "CANCELED", timeout=30)
    found = []
    for meta in sorted(tmp_path.glob("home/checkpoints/*/chk-*/_metadata")):
        found.append((meta.parent, json.loads(meta.read_text())))
    assert len(found) >= checkpoints, f"expected the retained checkpoints on disk, found {len(found)}"
    return found, stats


@pytest.mark.timeout(120)
def test_every_exactly_once_checkpoint_is_a_consistent_cut(cluster, cli, tmp_path: Path) -> None:
    found, stats = _run_and_collect(cli, tmp_path, "EXACTLY_ONCE", 10)
    for directory, metadata in found:
        assert metadata["mode"] == "EXACTLY_ONCE"
        (source,) = [op for op in metadata["operators"] if op["name"] == "numbers"]
        offsets = [sub["source_offsets"] for sub in source["subtasks"]]
        assert _state_sums(directory, metadata) == _expected(offsets), f"inconsistent checkpoint {directory}"
    # the keyed task reads two channels: its checkpoints aligned barriers
    assert any(h.get("alignment_duration_max", 0) is not None for h in stats["history"])


@pytest.mark.timeout(120)
def test_at_least_once_checkpoints_never_lose_a_record(cluster, cli, tmp_path: Path) -> None:
    found, _ = _run_and_collect(cli, tmp_path, "AT_LEAST_ONCE", 5)
    for directory, metadata in found:
        (source,) = [op for op in metadata["operators"] if op["name"] == "numbers"]
        expected = _expected([sub["source_offsets"] for sub in source["subtasks"]])
        state = _state_sums(directory, metadata)
        assert state["even"] >= expected["even"] and state["odd"] >= expected["odd"], directory
