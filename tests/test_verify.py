"""The verification source and sink, `flinkpy verify`, and `flinkpy fault network`.

Pure parts (the source's restore at another parallelism, the sink's two phases, the checker)
run without a cluster. The network faults run the verification job on the 2 x 2 ``cluster``
with checkpoints and a restart strategy, and the output must be exact: nothing lost, nothing
duplicated, every count equal to its seq.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, wait_for
from flinkpy.connectors.base import ReaderContext
from flinkpy.connectors.verification import SequenceSource, VerifyingSink, check, read_committed
from flinkpy.errors import ExitCode

FLAGS = (
    "-D", "execution.checkpointing.interval=100ms",
    "-D", "restart-strategy.type=fixed-delay",
    "-D", "restart-strategy.fixed-delay.attempts=100",
    "-D", "restart-strategy.fixed-delay.delay=0s",
    "-D", "execution.checkpointing.tolerable-failed-checkpoints=100",
)


def drain(reader: Any) -> list:
    out: list = []
    while (batch := reader.poll(7)) is not None:
        out += batch
    return out


# -- pure ------------------------------------------------------------------------------------


def test_sequence_source_emits_every_seq_once_across_subtasks() -> None:
    src = SequenceSource(keys=5, per_key=20)
    records = [r for i in range(3) for r in drain(src.create_reader(ReaderContext(subtask_index=i, parallelism=3)))]
    assert sorted(records) == [(k, s) for k in range(5) for s in range(1, 21)]


@pytest.mark.parametrize("old_p,new_p", [(2, 3), (3, 1), (2, 2)])
def test_sequence_source_resumes_at_another_parallelism(old_p: int, new_p: int) -> None:
    src = SequenceSource(keys=7, per_key=30)
    readers = [src.create_reader(ReaderContext(subtask_index=i, parallelism=old_p)) for i in range(old_p)]
    before = [r for rd in readers for r in rd.poll(25)]
    states = [rd.snapshot_state() for rd in readers]
    states = json.loads(json.dumps(states))  # they travel as JSON in _metadata
    after = [r for i in range(new_p) for r in drain(src.create_reader(ReaderContext(subtask_index=i, parallelism=new_p, restored_state=states)))]
    assert sorted(before + after) == [(k, s) for k in range(7) for s in range(1, 31)]


def test_sequence_source_rate_limits_its_polls() -> None:
    reader = SequenceSource(keys=2, per_key=10_000, rate=10).create_reader(ReaderContext(subtask_index=0, parallelism=1))
    assert len(reader.poll(1000)) <= 2  # 10/s: at most one token (plus the first) right away


def test_verifying_sink_commits_on_completion_and_restores_pending(tmp_path: Path) -> None:
    ctx = ReaderContext(subtask_index=0, parallelism=1)
    w = VerifyingSink(tmp_path).create_writer(ctx)
    w.write([(0, 1, 1), (0, 2, 2)])
    s1 = w.snapshot_state(1)
    w.write([(0, 3, 3)])
    s2 = w.snapshot_state(2)
    w.write([(0, 4, 4)])  # after the last snapshot: replayed after a failure
    assert list(read_committed(tmp_path)) == []
    w.notify_checkpoint_complete(1)
    assert list(read_committed(tmp_path)) == [[0, 1, 1], [0, 2, 2]]
    # the task dies before checkpoint 2's notification; the job restores checkpoint 2
    restored = VerifyingSink(tmp_path).create_writer(ReaderContext(subtask_index=0, parallelism=1, restored_state=[s2]))
    assert sorted(read_committed(tmp_path)) == [[0, 1, 1], [0, 2, 2], [0, 3, 3]]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".pending")]
    restored.write([(0, 4, 4)])
    restored.flush(end_of_input=True)
    assert sorted(read_committed(tmp_path)) == [[0, s, s] for s in range(1, 5)]
    assert s1["pending"] and s1["subtask"] == 0


def test_verifying_sink_discards_pending_files_of_an_uncompleted_checkpoint(tmp_path: Path) -> None:
    w = VerifyingSink(tmp_path).create_writer(ReaderContext(subtask_index=1, parallelism=2))
    w.write([(1, 1, 1)])
    s1 = w.snapshot_state(1)
    w.write([(1, 2, 2)])
    w.snapshot_state(2)  # never completes
    other = VerifyingSink(tmp_path).create_writer(ReaderContext(subtask_index=0, parallelism=2))
    other.write([(0, 1, 1)])
    other.snapshot_state(2)
    VerifyingSink(tmp_path).create_writer(ReaderContext(subtask_index=1, parallelism=2, restored_state=[s1]))
    assert list(read_committed(tmp_path)) == [[1, 1, 1]]
    # subtask 0's pending file is not subtask 1's to discard
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(".pending-0-")]) == 1


def test_check_reports_missing_duplicates_and_mismatches() -> None:
    r = check([[0, 1, 1], [0, 2, 2], [0, 2, 3], [1, 2, 1], [9, 1, 1]], keys=2, per_key=2)
    assert (r["lost"], r["duplicated"], r["mismatched"], r["unexpected"]) == (1, 1, 2, 1)
    assert r["keys"]["0"] == {"missing": [], "duplicates": [2], "duplicate-copies": 1, "state-mismatches": 1}
    assert r["keys"]["1"]["missing"] == [1]


# -- the command -----------------------------------------------------------------------------


def write_part(directory: Path, records: list) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"part-{len(list(directory.iterdir()))}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.timeout(60)
def test_verify_exit_codes(tmp_path: Path, cli) -> None:
    out = tmp_path / "out"
    write_part(out, [[k, s, s] for k in range(2) for s in range(1, 4)])
    (out / ".pending-0-x.jsonl").write_text("[0, 1, 1]\n")  # not committed: not output
    ok = cli("verify", str(out), "--keys", "2", "--per-key", "3", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["lost"] == 0
    write_part(out, [[0, 3, 4]])
    dup = cli("verify", str(out), "--keys", "2", "--per-key", "3")
    assert dup.returncode == ExitCode.VERIFY_FAILED == 13
    assert "key 0: 0 missing , 1 duplicate(s) (3), 1 state mismatch(es)" in dup.stdout
    assert cli("verify", str(out), "--keys", "2", "--per-key", "3", "--at-least-once").returncode == 0
    lost = cli("verify", str(out), "--keys", "3", "--per-key", "3", "--at-least-once", "--json")
    assert lost.returncode == 13 and json.loads(lost.stdout)["keys"]["2"]["missing"] == [1, 2, 3]
    assert cli("verify", str(tmp_path / "nope"), "--keys", "1", "--per-key", "1").returncode == ExitCode.NOT_FOUND


# -- network faults on a cluster ---------------------------------------------------------------


def run_verification_job(cli, out: Path, keys: int, per_key: int, rate: float) -> str:
    res = cli("run", "-d", "-p", "2", *FLAGS, "--json", str(EXAMPLES / "verification_job.py"),
              "--keys", str(keys), "--per-key", str(per_key), "--rate", str(rate), "--out", str(out))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def job_state(cli, jid: str) -> dict[str, Any]:
    res = cli("job", "show", jid, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def all_running(cli, jid: str) -> dict[str, Any] | None:
    job = job_state(cli, jid)
    subs = [s for v in job["vertices"] for s in v["subtasks"]]
    return job if job["state"] == "RUNNING" and all(s["status"] == "RUNNING" for s in subs) else None


def finished(cli, jid: str) -> dict[str, Any] | None:
    job = job_state(cli, jid)
    assert job["state"] not in ("FAILED", "CANCELED"), job
    return job if job["state"] == "FINISHED" else None


def assert_exact(cli, out: Path, keys: int, per_key: int) -> None:
    res = cli("verify", str(out), "--keys", str(keys), "--per-key", str(per_key), "--json")
    report = json.loads(res.stdout)
    assert (report["lost"], report["duplicated"], report["mismatched"]) == (0, 0, 0), report
    assert res.returncode == 0


@pytest.mark.timeout(120)
def test_network_delay_slows_a_source_and_the_output_stays_exact(cluster, cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    jid = run_verification_job(cli, out, keys=4, per_key=1500, rate=2000)
    wait_for(lambda: all_running(cli, jid), timeout=30, message="every subtask RUNNING")
    res = cli("fault", "network", jid, "--delay", "200ms", "--for", "1s", "--vertex", "sequences", "--subtask", "0", "--json")
    assert res.returncode == 0, res.stderr
    entry = json.loads(res.stdout)
    assert entry["kind"] == "network" and entry["params"] == {"delay_ms": 200.0, "seconds": 1.0}
    job = wait_for(lambda: finished(cli, jid), timeout=60, message="job FINISHED")
    assert job["restarts"] == 0  # a slow link is not a failure
    assert_exact(cli, out, 4, 1500)
    history = json.loads(cli("fault", "history", jid, "--json").stdout)["faults"]
    assert [e["kind"] for e in history] == ["network"]


@pytest.mark.timeout(120)
def test_network_drop_breaks_channels_and_the_job_recovers_exactly(cluster, cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    jid = run_verification_job(cli, out, keys=4, per_key=1500, rate=2000)
    wait_for(lambda: all_running(cli, jid), timeout=30, message="every subtask RUNNING")
    res = cli("fault", "network", jid, "--drop-connection", "--seed", "3", "--json")
    assert res.returncode == 0, res.stderr
    job = wait_for(lambda: finished(cli, jid), timeout=60, message="job FINISHED")
    assert job["restarts"] >= 1
    assert_exact(cli, out, 4, 1500)
    exceptions = json.loads(cli("job", "exceptions", jid, "--json").stdout)["exceptionHistory"]["entries"]
    assert exceptions, "the broken channel is in the exception history"


@pytest.mark.timeout(60)
def test_network_fault_usage_errors(cluster, cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    jid = run_verification_job(cli, out, keys=2, per_key=100_000, rate=2000)
    wait_for(lambda: all_running(cli, jid), timeout=30, message="every subtask RUNNING")
    assert cli("fault", "network", jid).returncode == ExitCode.USAGE
    assert cli("fault", "network", jid, "--delay", "1s", "--drop-connection").returncode == ExitCode.USAGE
    # the sink sends nothing: no channel to slow
    assert cli("fault", "network", jid, "--delay", "1s", "--vertex", "verifying sink").returncode == ExitCode.CONFLICT
    assert cli("cancel", jid).returncode == 0
