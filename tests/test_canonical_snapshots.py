"""Full snapshots are streamed canonical files (flinkpy.state.canonical): written frame by frame
from a RocksDB iterator, read frame by frame into either backend, at any parallelism, never
holding a subtask's state in memory; a cut file is refused, and a failed upload leaves nothing.
"""

from __future__ import annotations

import hashlib
import io
import random
import tracemalloc
from pathlib import Path

import pytest

from flinkpy.checkpoint.storage import CheckpointStorage, checksum_of
from flinkpy.datastream.state import ValueStateDescriptor
from flinkpy.errors import FlinkpyError
from flinkpy.state import canonical
from flinkpy.state.heap import HeapKeyedStateBackend
from flinkpy.state.key_groups import assign_to_key_group, key_group_range_for_operator
from test_rocksdb_backend import fill, rocks  # noqa: F401 - rocks is a fixture

MAXP = 128


@pytest.mark.timeout(60)
def test_frames_carry_every_kind_between_backends_and_parallelisms(rocks, monkeypatch) -> None:
    monkeypatch.setattr(canonical, "FRAME_ENTRIES", 7)  # many frames per key group
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    keys = [f"k{i}" for i in range(600)] + list(range(200))
    heap, rdb = HeapKeyedStateBackend(MAXP, range(MAXP)), rocks()
    for b in (heap, rdb):
        fill(b, keys, random.Random(seed))
    expected = heap.snapshot()
    files = {}
    for name, b in (("heap", heap), ("rocksdb", rdb)):
        out = io.BytesIO()
        counts = b.snapshot_sync().write(out)
        assert counts == {n: sum(len(m) for m in e["key_groups"].values()) for n, e in expected["states"].items()}
        files[name] = out.getvalue()
        assert canonical.loads(files[name]) == expected
    # the two backends' files hold the same frames (the same document, streamed the same way)
    for source in files.values():
        parts = [rocks(key_group_range_for_operator(MAXP, 3, i)) for i in range(3)] + [HeapKeyedStateBackend(MAXP, key_group_range_for_operator(MAXP, 2, 1))]
        for p in parts:
            p.restore_file(io.BytesIO(source))
        assert sum(p.num_keys() for p in parts[:3]) == rdb.num_keys()
        merged: dict = {}
        for p in parts[:3]:
            for name, entry in p.snapshot()["states"].items():
                merged.setdefault(name, {}).update(entry["key_groups"])
        assert merged == {name: entry["key_groups"] for name, entry in expected["states"].items()}
        heap_half = parts[3].snapshot()["states"]["v"]["key_groups"]
        assert heap_half == {kg: m for kg, m in expected["states"]["v"]["key_groups"].items() if kg in parts[3].key_group_range}


@pytest.mark.timeout(120)
def test_a_rocksdb_snapshot_is_written_and_restored_in_bounded_memory(rocks, tmp_path: Path) -> None:
    keys, payload = 60_000, 200
    rdb = rocks()
    state = rdb.get_partitioned_state(ValueStateDescriptor("v"))
    for k in range(keys):
        rdb.set_current_key(k)
        state.update(hashlib.blake2b(str(k).encode(), digest_size=64).digest() * 3 + bytes(8))
    frozen = rdb.snapshot_sync()
    path = tmp_path / "snapshot.keyed"
    tracemalloc.start()
    try:
        with open(path, "wb") as out:
            counts = frozen.write(out)
        _, write_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        restored = rocks(range(0, MAXP // 2))
        with open(path, "rb") as f:
            restored.restore_file(f)
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    print(f"file {size / 2**20:.1f} MiB; peak Python memory writing {write_peak / 2**20:.1f} MiB, restoring {read_peak / 2**20:.1f} MiB")
    assert counts == {"v": keys}
    assert size > keys * payload
    # one frame at a time: a small fraction of the state, however large the state
    assert write_peak < size / 4 and read_peak < size / 4
    mine = [k for k in range(keys) if assign_to_key_group(k, MAXP) in restored.key_group_range]
    assert restored.num_keys() == len(mine) and 0 < len(mine) < keys
    value = restored.get_partitioned_state(ValueStateDescriptor("v"))
    for k in mine[::997]:
        restored.set_current_key(k)
        assert value.value() == hashlib.blake2b(str(k).encode(), digest_size=64).digest() * 3 + bytes(8)


def test_a_cut_file_is_refused_with_a_clear_error() -> None:
    heap = HeapKeyedStateBackend(MAXP, range(MAXP))
    fill(heap, range(100), random.Random(1))
    data = heap.snapshot_sync().serialize()
    for cut in (len(data) - 1, len(data) // 2):
        fresh = HeapKeyedStateBackend(MAXP, range(MAXP))
        with pytest.raises(FlinkpyError, match="cut short|truncated") as err:
            fresh.restore_file(io.BytesIO(data[:cut]))
        assert "restore from another checkpoint" in (err.value.remedy or "")


def test_a_streamed_state_file_is_atomic_and_checksummed(tmp_path: Path) -> None:
    storage = CheckpointStorage(str(tmp_path / "chk"))
    directory = storage.checkpoint_dir("job", 1)
    handle, result = storage.write_state_stream(directory, "op-0-keyed", lambda out: (out.write(b"abc"), out.write(b"def"), 42)[-1])
    assert result == 42
    assert handle == {"path": "op-0-keyed", "size": 6, "checksum": checksum_of(b"abcdef")}
    assert storage.read_state(directory, handle) == b"abcdef"

    def broken(out) -> None:
        out.write(b"half of it")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        storage.write_state_stream(directory, "op-1-keyed", broken)
    assert sorted(p.name for p in Path(directory).iterdir()) == ["op-0-keyed"]  # no file, no temporary
    local = tmp_path / "fetched"
    storage.fetch_state(directory, handle, str(local))
    assert local.read_bytes() == b"abcdef"
