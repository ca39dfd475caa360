"""Operator state: redistribution on rescale (pure), and CheckpointedFunction end to end.

The pure tests take snapshots of 3 old subtasks and restore them into 2 and into 5 new ones:
*split* list state must hand out every item exactly once, in contiguous chunks in old-subtask
order; *union* list state gives every new subtask everything. Items come from a seeded RNG.

The end-to-end test runs a counting MapFunction that is also a CheckpointedFunction and a
CheckpointListener, and checks its checkpointed count against the source offsets of the same
checkpoint, and its completion notifications against ``flinkpy checkpoint list``.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli, wait_for
from flinkpy.connectors.number_sequence import split_ranges
from flinkpy.datastream.state import ListStateDescriptor
from flinkpy.state.operator import OperatorStateBackend


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED", random.randrange(2**32)))
    print(f"seed: {seed} (re-run with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


def old_snapshots(rng: random.Random, subtasks: int = 3) -> tuple[list[dict], list[list[str]], list[list[str]]]:
    """Snapshots of ``subtasks`` old backends, each with a split and a union list of distinct items."""
    snaps, splits, unions = [], [], []
    for s in range(subtasks):
        backend = OperatorStateBackend()
        split = [f"split-{s}-{i}" for i in range(rng.randrange(0, 8))]
        union = [f"union-{s}-{i}" for i in range(rng.randrange(1, 4))]
        backend.get_list_state(ListStateDescriptor("offsets", None)).update(split)
        backend.get_union_list_state(ListStateDescriptor("everything", None)).update(union)
        snaps.append(backend.snapshot())
        splits.append(split)
        unions.append(union)
    return snaps, splits, unions


@pytest.mark.timeout(10)
@pytest.mark.parametrize("new_parallelism", [2, 5, 1, 3])
@pytest.mark.parametrize("state_first", [True, False], ids=["state-registered-before-restore", "state-registered-after-restore"])
def test_redistribution_from_three_subtasks(rng: random.Random, new_parallelism: int, state_first: bool) -> None:
    snaps, splits, unions = old_snapshots(rng)
    # round trip through pickle, as the snapshot travels through a checkpoint file
    snaps = [pickle.loads(pickle.dumps(s, protocol=5)) for s in snaps]
    all_split = [x for items in splits for x in items]
    all_union = [x for items in unions for x in items]

    shares, union_shares = [], []
    for index in range(new_parallelism):
        backend = OperatorStateBackend()
        if state_first:
            split_state = backend.get_list_state(ListStateDescriptor("offsets", None))
            union_state = backend.get_union_list_state(ListStateDescriptor("everything", None))
        backend.restore(snaps, subtask_index=index, parallelism=new_parallelism)
        assert backend.restored
        if not state_first:
            split_state = backend.get_list_state(ListStateDescriptor("offsets", None))
            union_state = backend.get_union_list_state(ListStateDescriptor("everything", None))
        shares.append(list(split_state.get()))
        union_shares.append(list(union_state.get()))

    # split: nothing lost, nothing duplicated, contiguous chunks in old-subtask order, even sizes
    assert [x for share in shares for x in share] == all_split
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1, sizes
    # union: every new subtask has all of it
    assert all(share == all_union for share in union_shares)


@pytest.mark.timeout(10)
def test_snapshot_is_a_copy_and_restore_of_nothing_is_not_restored() -> None:
    backend = OperatorStateBackend()
    state = backend.get_list_state(ListStateDescriptor("count", None))
    state.update([1])
    snap = backend.snapshot()
    state.update([2])
    state.add(3)
    assert snap["states"]["count"] == {"mode": "split", "items": [1]}
    assert backend.summary() == {"count": {"kind": "list", "entries": 2}}
    fresh = OperatorStateBackend()
    fresh.restore([], subtask_index=0, parallelism=1)
    assert not fresh.restored
    assert list(fresh.get_list_state(ListStateDescriptor("count", None)).get()) == []


@pytest.mark.timeout(10)
def test_restore_twice_in_a_row_keeps_exactly_once(rng: random.Random) -> None:
    """3 -> 2 -> 5: restoring from restored backends loses and duplicates nothing."""
    snaps, splits, _ = old_snapshots(rng)
    middle = []
    for index in range(2):
        b = OperatorStateBackend()
        b.restore(snaps, subtask_index=index, parallelism=2)
        b.get_list_state(ListStateDescriptor("offsets", None))
        b.get_union_list_state(ListStateDescriptor("everything", None))
        middle.append(b.snapshot())
    final = []
    for index in range(5):
        b = OperatorStateBackend()
        b.restore(middle, subtask_index=index, parallelism=5)
        final += list(b.get_list_state(ListStateDescriptor("offsets", None)).get())
    assert final == [x for items in splits for x in items]


# --------------------------------------------------------------------------- end to end

N = 10**12

JOB = textwrap.dedent(
    f"""
    import sys
    from pathlib import Path
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import MapFunction, StreamExecutionEnvironment
    from flinkpy.datastream.functions import CheckpointedFunction, CheckpointListener
    from flinkpy.datastream.state import ListStateDescriptor
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    NOTIFIED = sys.argv[1]

    class Counting(MapFunction, CheckpointedFunction, CheckpointListener):
        def initialize_state(self, context):
            self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("count", None))
            self.count = sum(self.state.get())

        def open(self, runtime_context):
            self.log = Path(NOTIFIED) / f"subtask-{{runtime_context.get_index_of_this_subtask()}}"

        def snapshot_state(self, context):
            self.state.update([self.count])

        def notify_checkpoint_complete(self, checkpoint_id):
            with open(self.log, "a") as f:
                f.write(f"{{checkpoint_id}}\\n")

        def map(self, value):
            self.count += 1
            return value

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_num_retained_checkpoints(1000)
    numbers = env.from_source(NumberSequenceSource(1, {N}), WatermarkStrategy.no_watermarks(), "numbers")
    numbers.map(Counting()).uid("counter").add_sink(lambda value: None)
    env.execute("counting")
    """
)


def _stats(jid: str) -> dict:
    res = run_cli("checkpoint", "list", jid, "--history", "1000", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _notified(directory: Path) -> dict[int, list[int]]:
    out = {}
    for f in directory.glob("subtask-*"):
        out[int(f.name.split("-")[1])] = [int(line) for line in f.read_text().splitlines() if line.strip()]
    return out


@pytest.mark.timeout(120)
def test_checkpointed_function_state_and_notifications(cluster, flinkpy_home: Path, tmp_path: Path) -> None:
    notified = tmp_path / "notified"
    notified.mkdir()
    job = tmp_path / "counting.py"
    job.write_text(JOB)
    res = run_cli(
        "run", "-d", "-p", "2",
        "-D", "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
        "--json", str(job), str(notified),
    )
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    try:
        wait_for(lambda: len(_notified(notified)) == 2 and all(len(v) >= 2 for v in _notified(notified).values()),
                 timeout=60, message="2 notifications at each subtask")
        # first what was notified, then what is completed: the completed ids only grow
        seen = _notified(notified)
        doc = _stats(jid)
    finally:
        assert run_cli("cancel", jid).returncode == 0
    wait_for(lambda: json.loads(run_cli("job", "show", jid, "--json").stdout)["state"] == "CANCELED", timeout=30)
    completed = {h["id"] for h in doc["history"] if h["status"] == "COMPLETED"}
    assert doc["counts"]["completed"] == len(completed), "the history holds every checkpoint"
    for subtask, ids in seen.items():
        assert ids == sorted(set(ids)), f"subtask {subtask}: notified out of order or twice: {ids}"
        assert set(ids) <= completed, f"subtask {subtask} notified of {sorted(set(ids) - completed)}, not COMPLETED"

    # The state in the checkpoint: the count of the records read before the barrier.
    latest = doc["latest"]["completed"]
    chk = flinkpy_home / "checkpoints" / jid / f"chk-{latest['id']}"
    res = run_cli("checkpoint", "inspect", str(chk), "--json")
    assert res.returncode == 0, res.stderr
    metadata = json.loads(res.stdout)["metadata"]
    (counter,) = [op for op in metadata["operators"] if op["uid"] == "counter"]
    (source,) = [op for op in metadata["operators"] if op["name"] == "numbers"]
    emitted = {}
    for sub in source["subtasks"]:
        ((start, _),) = split_ranges([(1, N + 1)], sub["subtask"], 2)
        emitted[sub["subtask"]] = min(a for a, b in sub["source_offsets"]["ranges"] if a < b) - start
    assert len(counter["subtasks"]) == 2
    for sub in counter["subtasks"]:
        handle = sub["operator_state"]
        assert handle is not None and sub["keyed_state"] is None
        assert handle["states"] == {"count": {"kind": "list", "entries": 1}}
        content = pickle.loads((chk / handle["path"]).read_bytes())
        assert content["functions"]["states"]["count"] == {"mode": "split", "items": [emitted[sub["subtask"]]]}, (
            f"subtask {sub['subtask']}: checkpointed count != records before the barrier"
        )
    assert run_cli("checkpoint", "verify", str(chk)).returncode == 0
