"""Keyed state backends (heap and RocksDB, one suite): every state kind, snapshots, rescaling and errors."""

from __future__ import annotations

import pickle

import pytest

from flinkpy.common import Types
from flinkpy.datastream.functions import AggregateFunction, ReduceFunction
from flinkpy.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from flinkpy.errors import FlinkpyError, InvalidProgramError
from backends import new_backend, use_backend
from flinkpy.state.key_groups import (
    assign_to_key_group,
    compute_operator_index_for_key_group,
    key_group_range_for_operator,
)

MAXP = 128


class Sum(ReduceFunction):
    def reduce(self, value1: int, value2: int) -> int:
        return value1 + value2


class Average(AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, accumulator: tuple[int, int]) -> tuple[int, int]:
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, acc_a: tuple[int, int], acc_b: tuple[int, int]) -> tuple[int, int]:
        return (acc_a[0] + acc_b[0], acc_a[1] + acc_b[1])


@pytest.fixture(autouse=True)
def _each_backend(state_backend) -> None:
    use_backend(state_backend)


def full_backend():
    return new_backend(MAXP, range(MAXP))


def test_value_state_is_per_key() -> None:
    b = full_backend()
    s = b.get_partitioned_state(ValueStateDescriptor("v", Types.INT()))
    b.set_current_key("a")
    assert s.value() is None
    s.update(1)
    b.set_current_key("b")
    assert s.value() is None
    s.update(2)
    b.set_current_key("a")
    assert s.value() == 1
    assert b.current_key == "a"
    assert b.current_key_group == assign_to_key_group("a", MAXP)
    s.clear()
    assert s.value() is None
    assert b.num_keys() == 1
    b.set_current_key("b")
    s.update(None)  # as in Flink, updating to None clears
    assert b.num_keys() == 0


def test_list_state() -> None:
    b = full_backend()
    s = b.get_partitioned_state(ListStateDescriptor("l", Types.STRING()))
    b.set_current_key(1)
    assert list(s.get()) == []
    s.add("x")
    s.add_all(["y", "z"])
    got = s.get()
    s.add("w")
    assert list(got) == ["x", "y", "z"], "get() must not alias the stored list"
    assert list(s) == ["x", "y", "z", "w"]
    s.update(["only"])
    assert list(s.get()) == ["only"]
    s.update([])
    assert list(s.get()) == [] and b.num_keys() == 0
    s.add_all([])
    assert b.num_keys() == 0
    with pytest.raises(ValueError):
        s.add(None)


def test_map_state() -> None:
    b = full_backend()
    s = b.get_partitioned_state(MapStateDescriptor("m", Types.STRING(), Types.INT()))
    b.set_current_key(("k", 1))
    assert s.is_empty() and s.get("a") is None and not s.contains("a")
    s.put("a", 1)
    s.put_all({"b": 2, "c": 3})
    s["d"] = 4
    assert s.get("a") == 1 and s["b"] == 2 and "c" in s and s.contains("d")
    assert sorted(s.keys()) == ["a", "b", "c", "d"]
    assert sorted(s.values()) == [1, 2, 3, 4]
    assert sorted(s.items()) == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    for k in s:  # iterating while removing is safe
        s.remove(k) if k in ("a", "b") else None
    del s["c"]
    assert list(s) == ["d"] and not s.is_empty()
    with pytest.raises(KeyError):
        s["missing"]
    s.remove("d")
    assert s.is_empty() and b.num_keys() == 0
    s.put("z", 0)
    s.clear()
    assert s.is_empty()


@pytest.mark.parametrize("reduce", [Sum(), lambda a, b: a + b])
def test_reducing_state(reduce: object) -> None:
    b = full_backend()
    s = b.get_partitioned_state(ReducingStateDescriptor("r", reduce, Types.LONG()))
    b.set_current_key("a")
    assert s.get() is None
    for v in (1, 2, 3):
        s.add(v)
    assert s.get() == 6
    b.set_current_key("b")
    s.add(10)
    assert s.get() == 10
    s.clear()
    assert s.get() is None


def test_aggregating_state() -> None:
    b = full_backend()
    s = b.get_partitioned_state(AggregatingStateDescriptor("avg", Average(), Types.TUPLE([Types.LONG(), Types.LONG()])))
    b.set_current_key("a")
    assert s.get() is None
    for v in (1, 2, 6):
        s.add(v)
    assert s.get() == 3.0
    assert b.snapshot()["states"]["avg"]["key_groups"][b.current_key_group]["a"] == (9, 3)


def test_same_name_returns_same_object_and_kind_conflicts_raise() -> None:
    b = full_backend()
    v1 = b.get_partitioned_state(ValueStateDescriptor("s"))
    assert b.get_partitioned_state(ValueStateDescriptor("s")) is v1
    with pytest.raises(InvalidProgramError, match="'s' is already registered as value state.*list"):
        b.get_partitioned_state(ListStateDescriptor("s"))


def test_state_registered_after_key_is_set_is_bound() -> None:
    b = full_backend()
    b.set_current_key("a")
    s = b.get_partitioned_state(ValueStateDescriptor("late"))
    s.update(5)
    assert s.value() == 5


def test_access_without_current_key_raises() -> None:
    b = full_backend()
    descriptors = [
        ValueStateDescriptor("v"), ListStateDescriptor("l"), MapStateDescriptor("m"),
        ReducingStateDescriptor("r", Sum()), AggregatingStateDescriptor("a", Average()),
    ]
    states = [b.get_partitioned_state(d) for d in descriptors]
    for s, call in zip(states, [lambda s: s.value(), lambda s: s.get(), lambda s: s.get("x"),
                                lambda s: s.add(1), lambda s: s.get()]):
        with pytest.raises(FlinkpyError, match="without a current key"):
            call(s)
    with pytest.raises(FlinkpyError, match="no current key"):
        b.current_key
    b.set_current_key("a")
    states[0].update(1)
    b.clear_current_key()
    with pytest.raises(FlinkpyError, match="without a current key"):
        states[0].update(2)


def test_key_outside_range_raises_naming_key_group_and_range() -> None:
    kg = assign_to_key_group("a", MAXP)
    other = range(0, kg) if kg > 0 else range(kg + 1, MAXP)
    b = new_backend(MAXP, other)
    with pytest.raises(FlinkpyError) as err:
        b.set_current_key("a")
    msg = str(err.value)
    assert "'a'" in msg and f"key group {kg}" in msg and f"{other.start}..{other.stop - 1}" in msg


def fill(b, keys: range) -> None:
    v = b.get_partitioned_state(ValueStateDescriptor("v"))
    lst = b.get_partitioned_state(ListStateDescriptor("l"))
    m = b.get_partitioned_state(MapStateDescriptor("m"))
    r = b.get_partitioned_state(ReducingStateDescriptor("r", Sum()))
    a = b.get_partitioned_state(AggregatingStateDescriptor("a", Average()))
    for i in keys:
        b.set_current_key(f"key-{i}")
        v.update(i)
        lst.add_all([i, i + 1])
        m.put("sq", i * i)
        r.add(i)
        r.add(1)
        a.add(i)


def check(b, keys: list[int]) -> None:
    v = b.get_partitioned_state(ValueStateDescriptor("v"))
    lst = b.get_partitioned_state(ListStateDescriptor("l"))
    m = b.get_partitioned_state(MapStateDescriptor("m"))
    r = b.get_partitioned_state(ReducingStateDescriptor("r", Sum()))
    a = b.get_partitioned_state(AggregatingStateDescriptor("a", Average()))
    for i in keys:
        b.set_current_key(f"key-{i}")
        assert v.value() == i
        assert list(lst.get()) == [i, i + 1]
        assert dict(m.items()) == {"sq": i * i}
        assert r.get() == i + 1
        assert a.get() == float(i)


def test_snapshot_restore_round_trip_through_pickle() -> None:
    b = full_backend()
    fill(b, range(500))
    data = pickle.dumps(b.snapshot(), protocol=4)
    # later writes do not leak into the taken snapshot
    lst = b.get_partitioned_state(ListStateDescriptor("l"))
    b.set_current_key("key-0")
    lst.add(99)
    restored = full_backend()
    restored.restore([pickle.loads(data)])
    assert restored.num_keys() == 500
    assert sorted(restored.state_names()) == ["a", "l", "m", "r", "v"]
    check(restored, list(range(500)))
    snap = pickle.loads(data)
    assert snap["version"] == 1
    assert {s["kind"] for s in snap["states"].values()} == {
        "value", "list", "map", "reducing", "aggregating"}


@pytest.mark.parametrize("old_p,new_p", [(1, 2), (2, 1), (3, 5), (4, 4)])
def test_rescale_keeps_every_key_exactly_once(old_p: int, new_p: int) -> None:
    keys = range(1000)
    old = [new_backend(MAXP, key_group_range_for_operator(MAXP, old_p, i)) for i in range(old_p)]
    for i in keys:
        owner = compute_operator_index_for_key_group(MAXP, old_p, assign_to_key_group(f"key-{i}", MAXP))
        fill(old[owner], range(i, i + 1))
    snaps = [pickle.loads(pickle.dumps(b.snapshot())) for b in old]
    new = [new_backend(MAXP, key_group_range_for_operator(MAXP, new_p, i)) for i in range(new_p)]
    for b in new:
        b.restore(snaps)
    assert sum(b.num_keys() for b in new) == len(keys)
    seen: set[str] = set()
    for idx, b in enumerate(new):
        mine = [i for i in keys
                if compute_operator_index_for_key_group(MAXP, new_p, assign_to_key_group(f"key-{i}", MAXP)) == idx]
        check(b, mine)
        for kg_map in b.table("v").values():
            assert not seen & set(kg_map)
            seen |= set(kg_map)
    assert len(seen) == len(keys)


def test_restore_conflicts_and_versions() -> None:
    b = full_backend()
    fill(b, range(3))
    snap = b.snapshot()
    other = full_backend()
    other.get_partitioned_state(ListStateDescriptor("v"))
    with pytest.raises(InvalidProgramError, match="'v' is value state in the snapshot but list"):
        other.restore([snap])
    with pytest.raises(FlinkpyError, match="version 99"):
        full_backend().restore([{"version": 99, "states": {}}])
    # a restored kind is remembered before the function registers its state
    fresh = full_backend()
    fresh.restore([snap])
    with pytest.raises(InvalidProgramError):
        fresh.get_partitioned_state(MapStateDescriptor("v"))


def test_raw_table_is_the_state_storage() -> None:
    b = full_backend()
    s = b.get_partitioned_state(ValueStateDescriptor("count"))
    b.set_current_key("a")
    s.update(7)
    assert b.table("count") == {b.current_key_group: {"a": 7}}
    b.table("count")[b.current_key_group]["a"] = 8
    assert s.value() == 8
    assert b.table("fresh") == {} and "fresh" in b.state_names()


def test_backend_rejects_bad_ranges() -> None:
    with pytest.raises(FlinkpyError):
        new_backend(128, range(0, 129))
    with pytest.raises(FlinkpyError):
        new_backend(128, range(0, 128, 2))
