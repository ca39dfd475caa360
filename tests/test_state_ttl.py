"""State time-to-live on the heap backend, with an injected clock: expiry per value, element and
entry; both visibilities and update types; full-snapshot and incremental cleanup; timestamps
that survive a snapshot and restore; enabling or disabling TTL across a restore refused."""

from __future__ import annotations

import os

import pytest

from flinkpy.common import Time
from flinkpy.datastream.functions import AggregateFunction
from flinkpy.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from flinkpy.errors import InvalidProgramError
from flinkpy.state import canonical

from backends import new_backend, use_backend


def ttl(ms: int = 1000, *, on_read: bool = False, return_expired: bool = False, full_snapshot: bool = False,
        incremental: tuple[int, bool] | None = None, background: bool = True) -> StateTtlConfig:
    b = StateTtlConfig.new_builder(Time.milliseconds(ms))
    b = b.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite if on_read else StateTtlConfig.UpdateType.OnCreateAndWrite)
    b = b.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp if return_expired
                               else StateTtlConfig.StateVisibility.NeverReturnExpired)
    if full_snapshot:
        b = b.cleanup_full_snapshot()
    if incremental:
        b = b.cleanup_incrementally(*incremental)
    if not background:
        b = b.disable_cleanup_in_background()
    return b.build()


class Clock:
    def __init__(self) -> None:
        self.now = 10_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def each_backend(state_backend) -> None:
    use_backend(state_backend)


def backend(clock: Clock):
    b = new_backend(128, range(0, 128))
    b.ttl_clock = clock
    return b


def descriptor(cls, name, *args, config: StateTtlConfig):
    d = cls(name, *args)
    d.enable_time_to_live(config)
    return d


@pytest.mark.usefixtures("each_backend")
def test_value_expires_after_its_ttl_and_writes_refresh_it() -> None:
    clock = Clock()
    b = backend(clock)
    s = b.get_partitioned_state(descriptor(ValueStateDescriptor, "v", config=ttl(1000, background=False)))
    b.set_current_key("a")
    s.update(1)
    clock.now += 999
    assert s.value() == 1
    s.update(2)  # written: lives another 1000 ms
    clock.now += 999
    assert s.value() == 2
    clock.now += 1
    assert s.value() is None
    assert b.num_entries() == 0  # an expired value that is read is dropped (NeverReturnExpired)


@pytest.mark.usefixtures("each_backend")
def test_update_on_read_and_return_expired_if_not_cleaned_up() -> None:
    clock = Clock()
    b = backend(clock)
    reads = b.get_partitioned_state(descriptor(ValueStateDescriptor, "r", config=ttl(100, on_read=True, background=False)))
    stale = b.get_partitioned_state(descriptor(ValueStateDescriptor, "s", config=ttl(100, return_expired=True, background=False)))
    b.set_current_key("k")
    reads.update("x")
    stale.update("y")
    for _ in range(5):
        clock.now += 90
        assert reads.value() == "x"  # each read renews it
    assert stale.value() == "y"  # expired, but not cleaned up yet: still visible


@pytest.mark.usefixtures("each_backend")
def test_list_and_map_expire_per_element_and_per_entry() -> None:
    clock = Clock()
    b = backend(clock)
    lst = b.get_partitioned_state(descriptor(ListStateDescriptor, "l", config=ttl(100, background=False)))
    mp = b.get_partitioned_state(descriptor(MapStateDescriptor, "m", config=ttl(100, background=False)))
    b.set_current_key("k")
    lst.add("old")
    mp.put("old", 1)
    clock.now += 60
    lst.add_all(["new1", "new2"])
    mp.put("new", 2)
    clock.now += 50  # "old" is 110 ms old, the others 50
    assert lst.get() == ["new1", "new2"]
    assert mp.get("old") is None and not mp.contains("old") and mp.get("new") == 2
    assert dict(mp.items()) == {"new": 2} and list(mp.keys()) == ["new"] and not mp.is_empty()
    clock.now += 100
    assert lst.get() == [] and mp.is_empty()


@pytest.mark.usefixtures("each_backend")
def test_reducing_and_aggregating_state_expire_as_a_whole() -> None:
    class Avg(AggregateFunction):
        def create_accumulator(self):
            return (0, 0)

        def add(self, value, acc):
            return (acc[0] + value, acc[1] + 1)

        def get_result(self, acc):
            return acc[0] / acc[1]

        def merge(self, a, b):
            return (a[0] + b[0], a[1] + b[1])

    clock = Clock()
    b = backend(clock)
    total = b.get_partitioned_state(descriptor(ReducingStateDescriptor, "sum", lambda x, y: x + y, config=ttl(100, background=False)))
    avg = b.get_partitioned_state(descriptor(AggregatingStateDescriptor, "avg", Avg(), config=ttl(100, background=False)))
    b.set_current_key("k")
    for v in (1, 2, 3):
        total.add(v)
        avg.add(v)
    assert total.get() == 6 and avg.get() == 2.0
    clock.now += 100
    total.add(10)  # the expired sum is not carried over
    assert total.get() == 10 and avg.get() is None


@pytest.mark.usefixtures("each_backend")
def test_full_snapshot_cleanup_leaves_expired_values_out_and_timestamps_survive() -> None:
    clock = Clock()
    b = backend(clock)
    s = b.get_partitioned_state(descriptor(ValueStateDescriptor, "v", config=ttl(100, full_snapshot=True, background=False)))
    for i in range(10):
        b.set_current_key(f"k{i}")
        s.update(i)
        clock.now += 20  # keys 0..5 are 100 ms old or more at the snapshot below: expired
    frozen = b.snapshot_sync()
    doc = canonical.loads(frozen.serialize())
    kept = {k for groups in doc["states"]["v"]["key_groups"].values() for k in groups}
    assert kept == {f"k{i}" for i in range(6, 10)}
    assert doc["states"]["v"]["ttl_ms"] == 100

    restored = backend(clock)
    restored.restore([doc])
    r = restored.get_partitioned_state(descriptor(ValueStateDescriptor, "v", config=ttl(100, background=False)))
    restored.set_current_key("k9")
    assert r.value() == 9
    clock.now += 81  # k9 was written 100 ms before -> 101: expired after the restore as before it
    assert r.value() is None


@pytest.mark.usefixtures("each_backend")
def test_incremental_cleanup_removes_expired_entries_in_the_background() -> None:
    clock = Clock()
    b = backend(clock)
    s = b.get_partitioned_state(descriptor(ValueStateDescriptor, "v", config=ttl(100, incremental=(10, True))))
    for i in range(50):
        b.set_current_key(f"k{i}")
        s.update(i)
    assert b.num_entries() == 50
    clock.now += 200
    frozen = b.snapshot_sync()  # a snapshot shares the dicts: the cleanup must copy, not mutate
    for _ in range(10):  # records of one live key: every record checks 10 more entries
        b.set_current_key("live")
        s.update("x")
    assert b.num_entries() == 1
    assert sum(len(m) for m in frozen.to_dict()["states"]["v"]["key_groups"].values()) == 50  # the snapshot kept its view


@pytest.mark.usefixtures("each_backend")
def test_enabling_or_disabling_ttl_across_a_restore_is_refused() -> None:
    clock = Clock()
    plain = backend(clock)
    s = plain.get_partitioned_state(ValueStateDescriptor("v"))
    plain.set_current_key("a")
    s.update(1)
    doc = plain.snapshot()
    restored = backend(clock)
    restored.restore([doc])
    with pytest.raises(InvalidProgramError, match="time-to-live"):
        restored.get_partitioned_state(descriptor(ValueStateDescriptor, "v", config=ttl(100)))


def test_state_backend_choice_runs_on_both_backends_and_unknown_types_are_refused(tmp_path, cli, flinkpy_home) -> None:
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_state_backend(HashMapStateBackend())
    assert isinstance(env.get_state_backend(), HashMapStateBackend)
    env.set_state_backend(EmbeddedRocksDBStateBackend())
    assert isinstance(env.get_state_backend(), EmbeddedRocksDBStateBackend)

    # the job lists the working directories of its keyed tasks while it runs: they exist only on rocksdb
    local = tmp_path / "local"
    job = tmp_path / "keyed.py"
    job.write_text(
        "import os, sys\n"
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        f"local = {str(local)!r}\n"
        "env.from_collection(['a', 'b', 'a']).key_by(lambda w: w)"
        ".map(lambda w: len([d for d in os.listdir(local) if d.startswith('flinkpy-rocksdb-')]) if os.path.isdir(local) else 0)"
        ".print()\n"
        "env.execute('keyed')\n"
    )
    on_local = ("-D", f"state.backend.rocksdb.localdir={local}")
    res = cli("run", "-D", "state.backend.type=rocksdb", *on_local, str(job))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["1", "1", "1"], res.stdout
    assert os.listdir(local) == [], "a finished task deletes its RocksDB working directory"
    res = cli("run", "-D", "state.backend.type=hashmap", *on_local, str(job))
    assert res.returncode == 0 and res.stdout.split() == ["0", "0", "0"], (res.stdout, res.stderr)

    res = cli("run", "-D", "state.backend.type=filesystem", str(job))
    assert res.returncode == 8 and "state.backend.type" in res.stderr and "Traceback" not in res.stderr
    res = cli("run", "-D", "state.backend.type=rocksdb", "-D", "state.backend.rocksdb.block.cache-size=lots", str(job))
    assert res.returncode == 8 and "state.backend.rocksdb.block.cache-size" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.usefixtures("each_backend")
def test_a_restored_states_ttl_survives_snapshots_taken_before_it_is_declared_again() -> None:
    """A state declared lazily (a window trigger's) may not be asked for again before the next
    checkpoint: that snapshot keeps the TTL the restored one recorded (and the mark of a state
    moved from Spark whose TTL is unknown), so the restore after it checks the declaration
    against what the state had rather than against nothing."""
    from flinkpy.state.key_groups import assign_to_key_group

    clock = Clock()
    kg = assign_to_key_group("a", 128)
    first = {"version": 1, "states": {"v": {"kind": "value", "ttl_ms": 100, "key_groups": {kg: {"a": (1, clock.now)}}},
                                      "u": {"kind": "value", "ttl_unknown": True, "key_groups": {kg: {"a": 2}}}}}
    b = backend(clock)
    b.restore([first])
    frozen = b.snapshot_sync()
    for doc in (b.snapshot(), canonical.loads(frozen.serialize())):
        assert {n: {k: v for k, v in e.items() if k != "key_groups"} for n, e in doc["states"].items()} == {
            "v": {"kind": "value", "ttl_ms": 100}, "u": {"kind": "value", "ttl_unknown": True}}
    assert {n: (e.get("ttl_ms"), e.get("ttl_unknown")) for n, e in frozen.summary().items()} == {"v": (100, None), "u": (None, True)}

    again = backend(clock)
    again.restore([b.snapshot()])
    v = again.get_partitioned_state(descriptor(ValueStateDescriptor, "v", config=ttl(100)))
    again.set_current_key("a")
    assert v.value() == 1
    with pytest.raises(InvalidProgramError, match="state 'u' comes from Spark, which could not carry its time-to-live"):
        again.get_partitioned_state(descriptor(ValueStateDescriptor, "u", config=ttl(100)))
    # declared without a TTL, the state restores as it is and later snapshots say it has none
    plain = again.get_partitioned_state(ValueStateDescriptor("u"))
    assert plain.value() == 2 and "ttl_unknown" not in again.snapshot()["states"]["u"]
    refused = backend(clock)
    refused.restore([b.snapshot()])
    with pytest.raises(InvalidProgramError, match="state 'v' was checkpointed with time-to-live and is now declared without it"):
        refused.get_partitioned_state(ValueStateDescriptor("v"))
