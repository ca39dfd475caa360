"""Unaligned checkpoints (#22): barriers overtake the buffers in flight, stored as channel state.

The barrier handler is tested pure (barriers in, decisions out); the non-blocking output channel
on a real socket pair. The engine tests extend the consistency oracle: under back-pressure
(a slowed sink), every completed unaligned checkpoint — keyed sums *plus* the records in its
channel state — must equal, exactly, the sums of the integers the sources emitted before their
barrier, and some checkpoint must have had data in flight. SIGKILLs during an unaligned
checkpoint and right after one completes must leave the sums exact; an unaligned checkpoint with
channel state is refused, before anything starts, at another parallelism.
"""

from __future__ import annotations

import json
import pickle
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import cli_json, wait_for
from flinkpy.common import RestartStrategies, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.network import channels as net
from flinkpy.network.framing import FrameReader
from flinkpy.task.barriers import (
    BarrierAligner, Canceled, RecordingDone, StartUnaligned, SwitchToUnaligned, UnalignedBarrierHandler,
)
from test_checkpoint_consistency import _expected, _state_sums
from test_recovery import (  # noqa: F401
    assert_recovered, even_odd_env, exception_entries, expected_sums, first, last_per_key, only_job, parity, start, vertex_id,
)

UNALIGNED = "execution.checkpointing.unaligned.enabled"
TIMEOUT = "execution.checkpointing.aligned-checkpoint-timeout"


# -- the barrier handler ---------------------------------------------------------------------------


def test_first_barrier_snapshots_and_the_others_end_the_recording() -> None:
    h = UnalignedBarrierHandler(3)
    assert h.on_barrier(2, 5, now_ms=0) == [StartUnaligned(5, frozenset({0, 1}))]
    assert [h.is_recording(c) for c in range(3)] == [True, True, False]
    assert h.on_barrier(2, 5, now_ms=1) == []  # a duplicate changes nothing
    assert h.on_barrier(0, 5, now_ms=4) == []
    assert h.on_barrier(1, 5, now_ms=9) == [RecordingDone(5, 9)]
    assert not h.aligning and h.on_barrier(0, 5, now_ms=10) == []  # stale once done


def test_one_channel_snapshots_and_completes_at_once() -> None:
    h = UnalignedBarrierHandler(1)
    assert h.on_barrier(0, 1, now_ms=3) == [StartUnaligned(1, frozenset()), RecordingDone(1, 0)]


def test_a_newer_barrier_cancels_the_recording_of_an_older_one() -> None:
    h = UnalignedBarrierHandler(2)
    h.on_barrier(0, 1, now_ms=0)
    assert h.on_barrier(0, 2, now_ms=5) == [StartUnaligned(2, frozenset({1}), canceled=1)]
    assert h.on_barrier(1, 1, now_ms=6) == []  # the canceled checkpoint's late barrier
    assert h.on_barrier(1, 2, now_ms=7) == [RecordingDone(2, 2)]


def test_ended_channels_count_as_arrived_and_abort_stops_recording() -> None:
    h = UnalignedBarrierHandler(2)
    assert h.on_end_of_partition(1, now_ms=0) == []
    assert h.on_barrier(0, 3, now_ms=1) == [StartUnaligned(3, frozenset()), RecordingDone(3, 0)]
    h = UnalignedBarrierHandler(2)
    h.on_barrier(0, 4, now_ms=0)
    assert h.abort(4) and not h.is_recording(1) and h.on_barrier(1, 4, now_ms=1) == []


# -- the aligned-checkpoint timeout: aligned barriers that switch to unaligned ---------------------


def test_an_alignment_switches_once_it_has_lasted_the_timeout_and_not_before() -> None:
    h = UnalignedBarrierHandler(3)
    assert h.on_aligned_barrier(0, 4, now_ms=1_000, timeout_ms=50) == []
    assert h.on_aligned_barrier(2, 4, now_ms=1_020, timeout_ms=50) == []
    assert h.deadline_ms == 1_050  # timed from the first barrier read
    assert h.tick(now_ms=1_049) == [] and not h.aligning
    assert h.tick(now_ms=1_061) == [SwitchToUnaligned(4, frozenset({1}), waited_ms=61)]
    assert h.deadline_ms is None and h.tick(now_ms=2_000) == []  # once
    assert [h.is_recording(c) for c in range(3)] == [False, True, False]
    assert h.on_aligned_barrier(1, 4, now_ms=1_080, timeout_ms=50) == [RecordingDone(4, 80)]
    assert h.on_aligned_barrier(0, 4, now_ms=1_090, timeout_ms=50) == []  # stale once done


def test_an_alignment_whose_barriers_all_arrived_switches_with_nothing_to_record() -> None:
    h = UnalignedBarrierHandler(2)
    h.on_aligned_barrier(0, 1, now_ms=0, timeout_ms=10)
    h.on_aligned_barrier(1, 1, now_ms=1, timeout_ms=10)
    assert h.tick(now_ms=10) == [SwitchToUnaligned(1, frozenset(), 10), RecordingDone(1, 10)]


def test_a_savepoint_never_switches() -> None:
    h = UnalignedBarrierHandler(2)
    assert h.on_aligned_barrier(0, 3, now_ms=0, timeout_ms=None) == []
    assert h.deadline_ms is None and h.tick(now_ms=10**9) == []


def test_no_switch_once_the_aligner_completed_or_the_coordinator_aborted() -> None:
    h = UnalignedBarrierHandler(2)
    h.on_aligned_barrier(0, 1, now_ms=0, timeout_ms=50)
    h.alignment_done(1)
    assert h.tick(now_ms=100) == []
    h.on_aligned_barrier(0, 2, now_ms=100, timeout_ms=50)
    assert not h.abort(2) and h.tick(now_ms=1_000) == []
    assert h.on_aligned_barrier(1, 2, now_ms=1_001, timeout_ms=50) == []  # stale: aborted


def test_a_newer_barrier_cancels_the_timed_alignment_or_the_switched_recording() -> None:
    h = UnalignedBarrierHandler(2)
    h.on_aligned_barrier(0, 1, now_ms=0, timeout_ms=50)
    assert h.on_aligned_barrier(0, 2, now_ms=30, timeout_ms=50) == []  # the aligner declines 1
    assert h.tick(now_ms=60) == []  # 1 no longer switches; 2 is timed from 30
    assert h.tick(now_ms=80) == [SwitchToUnaligned(2, frozenset({1}), 50)]
    assert h.on_aligned_barrier(0, 3, now_ms=90, timeout_ms=50) == [Canceled(2)]
    assert not h.is_recording(1) and h.on_aligned_barrier(1, 2, now_ms=95, timeout_ms=50) == []


def test_an_unaligned_barrier_of_a_timed_checkpoint_starts_it_at_once() -> None:
    """An upstream task switched: its barrier comes unaligned; the channels whose aligned
    barrier was read are not recorded."""
    h = UnalignedBarrierHandler(3)
    h.on_aligned_barrier(2, 6, now_ms=0, timeout_ms=50)
    assert h.on_barrier(0, 6, now_ms=5) == [StartUnaligned(6, frozenset({1}))]
    assert h.deadline_ms is None and h.on_aligned_barrier(1, 6, now_ms=9, timeout_ms=50) == [RecordingDone(6, 9)]


def test_the_aligner_gives_up_an_alignment_that_went_unaligned() -> None:
    a = BarrierAligner(2)
    a.on_barrier(0, 1, now_ms=0)
    assert a.supersede(2) == 1 and not a.is_blocked(0)
    assert a.on_barrier(1, 2, now_ms=5) is None  # its queued barriers are stale


# -- configuration ----------------------------------------------------------------------------------


def test_the_keys_and_the_api_switch_unaligned_checkpoints_on() -> None:
    from flinkpy.checkpoint.options import CheckpointingOptions
    from flinkpy.datastream import StreamExecutionEnvironment

    assert CheckpointingOptions.from_config({UNALIGNED: "true"}).unaligned
    assert not CheckpointingOptions.from_config({}).unaligned
    assert CheckpointingOptions.from_config({UNALIGNED: "true", "execution.checkpointing.aligned-checkpoint-timeout": "0"}).unaligned
    config = StreamExecutionEnvironment.get_execution_environment().get_checkpoint_config()
    assert not config.is_unaligned_checkpoints_enabled()
    assert config.enable_unaligned_checkpoints().is_unaligned_checkpoints_enabled()


def test_the_aligned_checkpoint_timeout_is_read_and_a_negative_one_refused_naming_the_key() -> None:
    from flinkpy.checkpoint.options import CheckpointingOptions
    from flinkpy.common import Duration
    from flinkpy.errors import ConfigurationError

    assert CheckpointingOptions.from_config({UNALIGNED: "true", TIMEOUT: "30 s"}).aligned_timeout_ms == 30_000
    assert CheckpointingOptions.from_config({UNALIGNED: "true"}).aligned_timeout_ms == 0
    with pytest.raises(ConfigurationError, match=f"invalid value '-5 ms' for configuration key '{TIMEOUT}'"):
        CheckpointingOptions.from_config({UNALIGNED: "true", TIMEOUT: "-5 ms"})
    config = StreamExecutionEnvironment.get_execution_environment().get_checkpoint_config()
    assert config.get_aligned_checkpoint_timeout() == Duration.of_millis(0)
    assert config.set_aligned_checkpoint_timeout(Duration.of_seconds(2)).get_aligned_checkpoint_timeout() == Duration.of_seconds(2)
    with pytest.raises(ValueError, match="must not be negative"):
        config.set_aligned_checkpoint_timeout(Duration.of_millis(-1))


# -- the output channel that never blocks ---------------------------------------------------------


@pytest.mark.timeout(10)
def test_output_queues_without_credit_and_the_barrier_overtakes() -> None:
    a, b = socket.socketpair()
    try:
        out = net.QueuingOutputChannel(a, 1, 0, "test channel")
        reader = FrameReader(b)
        out.credit.grant(1)
        out.send_data(b"one")
        out.send_data(b"two")  # no credit: queued, the call returns
        out.send_event(net.WATERMARK, b"w")  # behind the queued data, never ahead of it
        assert [k for k, _ in out.queue] == [net.DATA, net.WATERMARK] and out.queued_data() == [(net.DATA, b"two")]
        out.send_priority(net.BARRIER, b"b")
        frames = [reader.read_one(), reader.read_one()]
        assert frames == [(net.DATA, b"one"), (net.BARRIER, b"b")]
        b.sendall(net.CREDIT_ONE)
        out.on_readable()
        assert not out.queue
        assert [reader.read_one(), reader.read_one()] == [(net.DATA, b"two"), (net.WATERMARK, b"w")]
    finally:
        a.close()
        b.close()


# -- the engine: the consistency oracle ------------------------------------------------------------

N = 10**12

#: the oracle's even/odd job with a sink slowed to build back-pressure (a sleep per record)
JOB = textwrap.dedent(
    """
    import time
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_source(NumberSequenceSource(1, %d), WatermarkStrategy.no_watermarks(), "numbers")
    (numbers.map(lambda n: ("even" if n %% 2 == 0 else "odd", n))
        .key_by(lambda pair: pair[0])
        .sum(1).uid("sums")
        .add_sink(lambda value: time.sleep(0.00005)))
    env.execute("even-odd-unaligned")
    """
    % N
)


def _records(frames: list) -> list:
    out = []
    for kind, payload in frames:
        batch = pickle.loads(payload)
        out.extend(batch if kind == net.DATA else batch[0])
    return out


def _channel_sums(directory: Path, metadata: dict) -> tuple[dict[str, int], int]:
    """Sums of the (parity, n) records in flight in the checkpoint, and the bytes they took."""
    sums = {"even": 0, "odd": 0}
    nbytes = 0
    for op in metadata["operators"]:
        for sub in op["subtasks"]:
            handle = sub.get("channel_state")
            if not handle:
                continue
            nbytes += handle["input_bytes"] + handle["output_bytes"]
            state = pickle.loads((directory / handle["path"]).read_bytes())
            for frames in [*state["inputs"].values(), *state["outputs"].values()]:
                for key, n in _records(frames):
                    sums[key] += n
    return sums, nbytes


def _run_retained(cli, path: Path, text: str, *settings: str, args: tuple[str, ...] = ()) -> str:
    """Submit ``text`` detached at parallelism 2 with unaligned checkpoints every 200 ms, all
    retained past a cancel, and ``settings``; returns the job id."""
    path.write_text(text)
    options = [f"{UNALIGNED}=true", "execution.checkpointing.interval=200ms", "execution.checkpointing.num-retained=1000",
               "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION", *settings]
    res = cli("run", "-d", "-p", "2", *[a for o in options for a in ("-D", o)], "--json", str(path), *args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def _cancel_after_data_in_flight(cli, tmp_path: Path, jid: str) -> tuple[dict, Path]:
    """Wait for a completed checkpoint with data in flight, cancel the job; that checkpoint's
    statistics entry and its retained directory."""

    def in_flight() -> list[dict]:
        doc = json.loads(cli("checkpoint", "list", jid, "--json").stdout)
        return [h for h in doc["history"] if h["status"] == "COMPLETED" and h["persisted_data"] > 0]

    wait_for(lambda: in_flight(), timeout=60, message="a completed checkpoint with data in flight")
    entry = in_flight()[0]
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: json.loads(cli("job", "show", jid, "--json").stdout)["state"] == "CANCELED", timeout=30)
    directory = next(p.parent for p in tmp_path.glob(f"home/checkpoints/{jid}/chk-{entry['id']}/_metadata"))
    return entry, directory


@pytest.mark.timeout(120)
def test_every_unaligned_checkpoint_with_its_channel_state_is_an_exact_cut(cluster, cli, tmp_path: Path) -> None:
    jid = _run_retained(cli, tmp_path / "oracle.py", JOB)

    def completed() -> int:
        return json.loads(cli("checkpoint", "list", jid, "--json").stdout)["counts"]["completed"]

    wait_for(lambda: completed() >= 8, timeout=80, message="8 completed unaligned checkpoints")
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: json.loads(cli("job", "show", jid, "--json").stdout)["state"] == "CANCELED", timeout=30)
    found = [(m.parent, json.loads(m.read_text())) for m in sorted(tmp_path.glob("home/checkpoints/*/chk-*/_metadata"))]
    assert len(found) >= 8
    in_flight = []
    for directory, metadata in found:
        assert metadata["alignment"] == "unaligned"
        (source,) = [op for op in metadata["operators"] if op["name"] == "numbers"]
        state = _state_sums(directory, metadata)
        channels, nbytes = _channel_sums(directory, metadata)
        in_flight.append(nbytes)
        cut = {k: state[k] + channels[k] for k in state}
        assert cut == _expected([s["source_offsets"] for s in source["subtasks"]]), f"inconsistent checkpoint {directory}"
    print(f"bytes in flight per checkpoint: {in_flight}")
    assert any(in_flight), "no checkpoint had data in flight: the test built no back-pressure"


# -- exactly-once across SIGKILLs ------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "point, subtask",
    [
        # the keyed task took its snapshot at the first barrier of checkpoint 3 and records
        ("alignment", 0),
        # checkpoint 3 is complete, and the keyed task dies as it hears so
        ("after-complete", 1),
    ],
)
def test_even_odd_sums_are_exact_after_a_sigkill_with_unaligned_checkpoints(start, point: str, subtask: int) -> None:
    """The recovery proof's even/odd job with unaligned checkpoints: a SIGKILL of the keyed task,
    a restore (with the channel state of the last checkpoint), and the sums are exact."""
    from flinkpy.common import Configuration

    env, sums = even_odd_env(N_KILL)
    env.configure(Configuration({UNALIGNED: "true", "taskmanager.memory.segment-size": "4 kb"}))
    start(faults=[{"point": point, "vertex": vertex_id(env, "sums"), "subtask": subtask, "checkpoint": 3}])

    assert last_per_key(sums.execute_and_collect("even-odd-unaligned")) == expected_sums(N_KILL)

    jid = only_job()["jid"]
    job = assert_recovered(jid, cause="SIGKILL")
    assert job["restarts"] == 1, [e["message"] for e in exception_entries(jid)]


#: long enough for checkpoint 3 at 100 ms
N_KILL = 600_000


def slowly(pair: tuple) -> tuple:
    """The keyed task's pace: a sleep per record, so its input channels fill up."""
    import time

    time.sleep(0.00005)
    return pair


@pytest.mark.timeout(90)
def test_a_restore_puts_the_channel_state_back_and_the_sums_stay_exact(start) -> None:
    """Back-pressure on the keyed task (it sleeps per record), so checkpoint 3 stores buffers
    in flight; the keyed task is SIGKILLed as it hears that checkpoint 3 completed, the job
    restores from it — operator state and channel state — and the final sums are exact."""
    from flinkpy.common import Configuration

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)  # a history of fewer than 100 checkpoints: the restored one stays listed
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    env.configure(Configuration({UNALIGNED: "true", "taskmanager.memory.segment-size": "4 kb"}))
    numbers = env.from_source(NumberSequenceSource(1, N_RESTORE), WatermarkStrategy.no_watermarks(), "numbers")
    sums = numbers.map(parity).name("pair").key_by(first).sum(1).name("sums").map(slowly)
    start(faults=[{"point": "after-complete", "vertex": vertex_id(env, "sums"), "subtask": 0, "checkpoint": 3}])

    assert last_per_key(sums.execute_and_collect("even-odd-unaligned-restore")) == expected_sums(N_RESTORE)

    jid = only_job()["jid"]
    job = assert_recovered(jid, cause="SIGKILL")
    assert job["restarts"] == 1, [e["message"] for e in exception_entries(jid)]
    stats = cli_json("checkpoint", "list", jid, "--history", "100")
    restored = stats["latest"]["restored"]["id"]
    (entry,) = [h for h in stats["history"] if h["id"] == restored] or [stats]
    assert entry["unaligned_checkpoint"] and entry["persisted_data"] > 0, entry


N_RESTORE = 200_000


# -- restoring at another parallelism is refused; the CLI shows the kind and the bytes in flight -----


@pytest.mark.timeout(120)
def test_an_unaligned_checkpoint_is_shown_and_refused_at_another_parallelism(cluster, cli, tmp_path: Path) -> None:
    job = tmp_path / "slow.py"
    jid = _run_retained(cli, job, JOB)
    entry, directory = _cancel_after_data_in_flight(cli, tmp_path, jid)
    assert entry["unaligned_checkpoint"] and entry["persisted_data"] == entry["persisted_input_data"] + entry["persisted_output_data"]
    table = cli("checkpoint", "list", jid, env={"COLUMNS": "80"})
    assert table.returncode == 0 and "unaligned" in table.stdout, table.stdout
    assert max(len(line) for line in table.stdout.splitlines() if line[:1] in "┏┃┡│└") <= 80, table.stdout

    inspected = json.loads(cli("checkpoint", "inspect", str(directory), "--json").stdout)
    summary = inspected["summary"]
    assert summary["alignment"] == "unaligned"
    assert summary["in_flight_input_bytes"] + summary["in_flight_output_bytes"] == entry["persisted_data"]
    text = cli("checkpoint", "inspect", str(directory), env={"COLUMNS": "80"})
    assert "checkpoint (unaligned)" in text.stdout and "In flight (channel state)" in text.stdout, text.stdout
    assert cli("checkpoint", "verify", str(directory)).returncode == 0  # the channel-state files are checked too

    refused = cli("run", "-d", "-p", "3", "-s", str(directory), "-D", f"{UNALIGNED}=true", str(job))
    assert refused.returncode != 0
    assert f"unaligned checkpoint {entry['id']}" in refused.stderr and "take a savepoint" in refused.stderr, refused.stderr
    # the JobManager refuses it too, for a client that does not check (here: the check disabled)
    bypass = (
        "import sys; import flinkpy.checkpoint.restore as r; r.channel_state_conflict = lambda m, v: None; "
        "from commands.main import main; sys.argv[1:] = sys.argv[2:]; main()"
    )
    unchecked = subprocess.run(
        [sys.executable, "-c", bypass, "--", "run", "-d", "-p", "3", "-s", str(directory), "-D", f"{UNALIGNED}=true", str(job)],
        capture_output=True, text=True, timeout=60, cwd=str(Path(__file__).resolve().parent.parent), stdin=subprocess.DEVNULL,
    )
    assert unchecked.returncode != 0, unchecked.stdout
    assert f"unaligned checkpoint {entry['id']}" in unchecked.stderr and "parallelism 3" in unchecked.stderr, unchecked.stderr
    listed = json.loads(cli("job", "list", "--json").stdout)
    assert all(j["jid"] == jid for j in listed.get("jobs", listed) if isinstance(j, dict)), "nothing else started"


# -- an unaligned checkpoint restored into a job with aligned checkpoints -----------------------------

N_BOUNDED = 100_000

#: a bounded even/odd job whose sink appends every sum to a file (slowly: back-pressure)
BOUNDED_JOB = textwrap.dedent(
    """
    import sys, time
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    OUT = sys.argv[1]

    def append(value, out=OUT):
        time.sleep(0.0001)
        with open(out, "a") as f:
            f.write(f"{value[0]} {value[1]}\\n")

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_source(NumberSequenceSource(1, %d), WatermarkStrategy.no_watermarks(), "numbers")
    (numbers.map(lambda n: ("even" if n %% 2 == 0 else "odd", n))
        .key_by(lambda pair: pair[0])
        .sum(1).uid("sums")
        .add_sink(append))
    env.execute("even-odd-bounded")
    """
    % N_BOUNDED
)


@pytest.mark.timeout(150)
def test_an_unaligned_checkpoint_restores_into_an_aligned_job_exactly(cluster, cli, tmp_path: Path) -> None:
    """Started from a retained unaligned checkpoint with data in flight, a job with aligned
    checkpoints sends the restored output buffers and processes the restored input buffers
    first (blocking on credit as aligned mode does); the final sums are exact."""
    job, out = tmp_path / "bounded.py", tmp_path / "sums.txt"
    jid = _run_retained(cli, job, BOUNDED_JOB, args=(str(out),))
    _, directory = _cancel_after_data_in_flight(cli, tmp_path, jid)

    resumed = cli("run", "-p", "2", "-s", str(directory), "--json", str(job), str(out), timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    last: dict[str, int] = {}
    for line in out.read_text().splitlines():
        key, value = line.split()
        last[key] = int(value)
    assert last == expected_sums(N_BOUNDED)


# -- the aligned-checkpoint timeout, end to end ------------------------------------------------------


@pytest.mark.timeout(90)
def test_under_back_pressure_alignments_time_out_to_unaligned_and_every_checkpoint_is_an_exact_cut(cluster, cli, tmp_path: Path) -> None:
    """Checkpoints start aligned; behind the slowed sink's backlog the keyed task's alignment
    outlasts 50 ms and it switches: the checkpoint is unaligned, with data in flight, and still
    an exact cut (state plus channel state)."""
    jid = _run_retained(cli, tmp_path / "oracle.py", JOB, f"{TIMEOUT}=50ms")

    def history() -> list[dict]:
        return [h for h in json.loads(cli("checkpoint", "list", jid, "--history", "100", "--json").stdout)["history"] if h["status"] == "COMPLETED"]

    wait_for(lambda: len(history()) >= 4 and any(h["unaligned_checkpoint"] and h["persisted_data"] > 0 for h in history()),
             timeout=60, message="4 completed checkpoints, one switched to unaligned with data in flight")
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: json.loads(cli("job", "show", jid, "--json").stdout)["state"] == "CANCELED", timeout=30)
    listed = {h["id"]: h for h in history()}
    found = [(m.parent, json.loads(m.read_text())) for m in sorted(tmp_path.glob(f"home/checkpoints/{jid}/chk-*/_metadata"))]
    kinds = []
    for directory, metadata in found:
        entry = listed.get(metadata["checkpoint_id"])
        if entry is not None:  # the kind the statistics show is the kind the metadata records
            assert (metadata["alignment"] == "unaligned") == entry["unaligned_checkpoint"], (metadata["checkpoint_id"], entry)
        (source,) = [op for op in metadata["operators"] if op["name"] == "numbers"]
        state = _state_sums(directory, metadata)
        channels, nbytes = _channel_sums(directory, metadata)
        kinds.append((metadata["checkpoint_id"], metadata["alignment"], nbytes))
        if metadata["alignment"] == "aligned":
            assert nbytes == 0
        cut = {k: state[k] + channels[k] for k in state}
        assert cut == _expected([s["source_offsets"] for s in source["subtasks"]]), f"inconsistent checkpoint {directory}"
    print(f"(id, kind, bytes in flight) per checkpoint: {kinds}")
    assert any(kind == "unaligned" and nbytes > 0 for _, kind, nbytes in kinds), kinds


@pytest.mark.timeout(60)
def test_a_restore_from_a_checkpoint_that_switched_to_unaligned_keeps_the_sums_exact(start) -> None:
    """The keyed task falls behind (it sleeps per record), its alignment of checkpoint 3 outlasts
    50 ms and switches; it is SIGKILLed as it hears checkpoint 3 completed, the job restores from
    it — operator state and channel state — and the final sums are exact."""
    from flinkpy.common import Configuration, Duration

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().enable_unaligned_checkpoints().set_aligned_checkpoint_timeout(Duration.of_millis(50))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    env.configure(Configuration({"taskmanager.memory.segment-size": "16 kb"}))
    numbers = env.from_source(NumberSequenceSource(1, N_RESTORE), WatermarkStrategy.no_watermarks(), "numbers")
    sums = numbers.map(parity).name("pair").key_by(first).sum(1).name("sums").map(slowly)
    start(faults=[{"point": "after-complete", "vertex": vertex_id(env, "sums"), "subtask": 0, "checkpoint": 3}])

    assert last_per_key(sums.execute_and_collect("even-odd-switched-restore")) == expected_sums(N_RESTORE)

    jid = only_job()["jid"]
    job = assert_recovered(jid, cause="SIGKILL")
    assert job["restarts"] == 1, [e["message"] for e in exception_entries(jid)]
    stats = cli_json("checkpoint", "list", jid, "--history", "100")
    restored = stats["latest"]["restored"]["id"]
    (entry,) = [h for h in stats["history"] if h["id"] == restored]
    assert entry["unaligned_checkpoint"] and entry["persisted_data"] > 0, entry


@pytest.mark.timeout(60)
def test_with_a_long_timeout_and_no_back_pressure_checkpoints_stay_aligned(cluster, cli, tmp_path: Path) -> None:
    jid = _run_retained(cli, tmp_path / "fast.py", JOB.replace("time.sleep(0.00005)", "None"), f"{TIMEOUT}=60s")

    def completed() -> list[dict]:
        return [h for h in json.loads(cli("checkpoint", "list", jid, "--history", "100", "--json").stdout)["history"] if h["status"] == "COMPLETED"]

    wait_for(lambda: len(completed()) >= 3, timeout=40, message="3 completed checkpoints")
    assert all(not h["unaligned_checkpoint"] and h["persisted_data"] == 0 for h in completed()), completed()
    table = cli("checkpoint", "list", jid, env={"COLUMNS": "120"})
    assert table.returncode == 0 and "unaligned" not in table.stdout and "aligned" in table.stdout, table.stdout
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: json.loads(cli("job", "show", jid, "--json").stdout)["state"] == "CANCELED", timeout=30)
    found = list(tmp_path.glob(f"home/checkpoints/{jid}/chk-*/_metadata"))
    assert found and all(json.loads(m.read_text())["alignment"] == "aligned" for m in found)
