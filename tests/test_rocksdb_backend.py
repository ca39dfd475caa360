"""What only the RocksDB backend has: its byte layout, point-in-time snapshots, canonical
documents equal to the heap backend's, native checkpoints and their restore (also rescaled),
working directories, and configuration. The shared semantics are in the conformance suite
(tests/test_heap_state.py and the others parametrized by tests/backends.py)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from flinkpy.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from flinkpy.errors import ConfigurationError
from flinkpy.state import canonical
from flinkpy.state.heap import HeapKeyedStateBackend
from flinkpy.state.key_groups import assign_to_key_group, key_group_range_for_operator
from flinkpy.state.rocksdb import DIR_PREFIX, RocksDBKeyedStateBackend, RocksDBOptions
from flinkpy.task.timers import InternalTimerService

MAXP = 128


@pytest.fixture
def rocks(tmp_path: Path):
    made: list[RocksDBKeyedStateBackend] = []

    def make(kg_range: range = range(MAXP)) -> RocksDBKeyedStateBackend:
        b = RocksDBKeyedStateBackend(MAXP, kg_range, local_dir=str(tmp_path / "local"))
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def fill(b, keys, rng: random.Random) -> None:
    v = b.get_partitioned_state(ValueStateDescriptor("v"))
    lst = b.get_partitioned_state(ListStateDescriptor("l"))
    m = b.get_partitioned_state(MapStateDescriptor("m"))
    r = b.get_partitioned_state(ReducingStateDescriptor("r", lambda a, c: a + c))
    for k in keys:
        b.set_current_key(k)
        x = rng.randint(0, 1000)
        v.update((k, x))
        lst.add_all([x, -x])
        m.put(x % 5, str(x))
        m.put("n", x)
        r.add(x)


def test_snapshot_is_point_in_time_and_canonical_like_the_heap(rocks) -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    keys = [f"k{i}" for i in range(300)] + list(range(100)) + [("t", 1)]
    heap, rdb = HeapKeyedStateBackend(MAXP, range(MAXP)), rocks()
    for b in (heap, rdb):
        fill(b, keys, random.Random(seed))
    frozen = rdb.snapshot_sync()
    expected = heap.snapshot()
    # writes after the synchronous part do not reach the snapshot
    fill(rdb, keys[:50] + ["late"], random.Random(seed + 1))
    doc = canonical.loads(frozen.serialize())
    assert doc == expected
    assert frozen.summary() == heap.snapshot_sync().summary()
    assert not frozen.empty and frozen.key_group_range == range(MAXP)
    assert rdb.snapshot() != expected  # the later writes are in the DB
    assert rdb.num_keys() == len(keys) + 1


def test_a_key_group_is_one_range_and_rescale_keeps_only_own_groups(rocks) -> None:
    keys = [f"key-{i}" for i in range(2000)]
    old = rocks()
    fill(old, keys, random.Random(7))
    doc = old.snapshot()
    parts = [rocks(key_group_range_for_operator(MAXP, 3, i)) for i in range(3)]
    for p in parts:
        p.restore([doc])
    assert sum(p.num_keys() for p in parts) == len(keys)
    for p in parts:
        groups = {kg for state in p.snapshot()["states"].values() for kg in state["key_groups"]}
        assert groups <= set(p.key_group_range)
    # raw DB keys are ordered by key group first
    raw = [k for k, _ in parts[1].db.items() if not k.startswith(b"\xff\xff")]
    assert [int.from_bytes(k[:2], "big") for k in raw] == sorted(int.from_bytes(k[:2], "big") for k in raw)


def test_keys_compare_by_serialized_bytes(rocks) -> None:
    """As in Flink's RocksDB backend (and unlike the heap's dicts): 1 and True are two keys."""
    b = rocks()
    s = b.get_partitioned_state(ValueStateDescriptor("v"))
    b.set_current_key(1)
    s.update("int")
    b.set_current_key(True)
    assert s.value() is None
    s.update("bool")
    b.set_current_key(1)
    assert s.value() == "int"


def test_native_checkpoint_restores_as_working_db_and_rescaled(rocks, tmp_path: Path) -> None:
    keys = [f"key-{i}" for i in range(1500)]
    halves = [rocks(key_group_range_for_operator(MAXP, 2, i)) for i in range(2)]
    for i, b in enumerate(halves):
        mine = [k for k in keys if assign_to_key_group(k, MAXP) in b.key_group_range]
        fill(b, mine, random.Random(i))
        b.set_current_key(mine[0])
        InternalTimerService(b, lambda *a: None, lambda *a: None).register_event_time_timer(42, "ns")
    timer_keys = [[k for k in keys if assign_to_key_group(k, MAXP) in b.key_group_range][0] for b in halves]
    dirs, docs = [], []
    for i, b in enumerate(halves):
        target = str(tmp_path / f"chk-{i}")
        files = b.native_checkpoint(target)
        assert "CURRENT" in files and any(f.endswith(".sst") for f in files)
        sst = next(f for f in files if f.endswith(".sst"))
        assert os.stat(os.path.join(target, sst)).st_nlink >= 2, "SST files are hard links"
        dirs.append((target, b.key_group_range))
        docs.append(b.snapshot())
        fill(b, [timer_keys[i]], random.Random(9))  # later writes stay out of the checkpoint

    same = rocks(halves[0].key_group_range)
    same.restore_native([dirs[0]])
    assert same.snapshot() == docs[0]
    assert same.state_names() and sorted(same.state_names()) == sorted(halves[0].state_names())
    # a restored DB is a working DB: it takes writes, and states bind to it
    v = same.get_partitioned_state(ValueStateDescriptor("v"))
    same.set_current_key(timer_keys[0])
    v.update("new")
    assert v.value() == "new"

    merged: dict = {}
    for d in docs:
        for name, st in d["states"].items():
            merged.setdefault(name, {}).update(st["key_groups"])
    for i in range(3):
        r = key_group_range_for_operator(MAXP, 3, i)
        part = rocks(r)
        part.restore_native(dirs)
        got = part.snapshot()["states"]
        for name, groups in merged.items():
            assert got[name]["key_groups"] == {kg: g for kg, g in groups.items() if kg in r}, name
        fired: list = []
        InternalTimerService(part, lambda *a: fired.append(a), lambda *a: None).advance_watermark(100)
        assert fired == [(k, "ns", 42) for k in timer_keys if assign_to_key_group(k, MAXP) in r]


def test_close_deletes_the_working_directory_and_dead_tasks_dirs_are_swept(tmp_path: Path) -> None:
    local = tmp_path / "local"
    b = RocksDBKeyedStateBackend(MAXP, range(MAXP), local_dir=str(local))
    assert Path(b.working_dir).parent == local and Path(b.working_dir).name.startswith(f"{DIR_PREFIX}{os.getpid()}-")
    # a task process that dies without closing (SIGKILL) leaves its directory behind
    code = (
        "import os, sys\n"
        "from flinkpy.state.rocksdb import RocksDBKeyedStateBackend\n"
        f"b = RocksDBKeyedStateBackend(128, range(128), local_dir={str(local)!r})\n"
        "print(b.working_dir, flush=True)\n"
        "os._exit(0)\n"
    )
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert os.path.isdir(dead)
    other = RocksDBKeyedStateBackend(MAXP, range(MAXP), local_dir=str(local))
    assert not os.path.exists(dead), "the dead task's directory is swept"
    assert os.path.isdir(b.working_dir), "a live process's directory is kept"
    for x in (b, other):
        x.close()
        assert not os.path.exists(x.working_dir)
    b.close()  # idempotent


def test_options_from_flink_keys_and_bad_values() -> None:
    o = RocksDBOptions.from_config({
        "state.backend.rocksdb.localdir": "/x",
        "state.backend.rocksdb.block.cache-size": "4 mb",
        "state.backend.rocksdb.writebuffer.size": "2mb",
        "state.backend.rocksdb.writebuffer.count": "3",
    })
    assert (o.local_dir, o.block_cache_size, o.write_buffer_size, o.write_buffer_count) == ("/x", 4 << 20, 2 << 20, 3)
    with pytest.raises(ConfigurationError, match="state.backend.rocksdb.writebuffer.size"):
        RocksDBOptions.from_config({"state.backend.rocksdb.writebuffer.size": "big"})
    with pytest.raises(ConfigurationError, match="localdir"):
        RocksDBKeyedStateBackend(MAXP, range(MAXP), local_dir="/proc/not-writable")


def test_compaction_options_reach_the_store(tmp_path: Path) -> None:
    o = RocksDBOptions.from_config({
        "state.backend.rocksdb.compaction.style": "universal",
        "state.backend.rocksdb.compaction.level.max-size-level-base": "64 mb",
        "state.backend.rocksdb.compaction.level.target-file-size-base": "16mb",
    })
    assert (o.compaction_style, o.max_size_level_base, o.target_file_size_base) == ("UNIVERSAL", 64 << 20, 16 << 20)
    with pytest.raises(ConfigurationError, match="compaction.style.*LEVEL, UNIVERSAL"):
        RocksDBOptions.from_config({"state.backend.rocksdb.compaction.style": "FIFO"})
    b = RocksDBKeyedStateBackend(MAXP, range(MAXP), local_dir=str(tmp_path), options=o)
    try:
        written = "".join(p.read_text() for p in Path(b.working_dir).rglob("OPTIONS-*"))  # RocksDB's own record
        assert "compaction_style=kCompactionStyleUniversal" in written
        assert "target_file_size_base=16777216" in written and "max_bytes_for_level_base=67108864" in written
    finally:
        b.close()
