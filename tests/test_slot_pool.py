"""SlotPool: slots are spread across TaskManagers, refused when short, and released per job."""

from __future__ import annotations

from collections import Counter

import pytest

from flinkpy.jobmanager.slot_pool import NotEnoughSlots, SlotPool

pytestmark = pytest.mark.timeout(10)


def pool(**tms: int) -> SlotPool:
    p = SlotPool()
    for tm, slots in tms.items():
        p.add_taskmanager(tm.replace("_", "-"), slots)
    return p


def test_spreads_across_taskmanagers() -> None:
    p = pool(tm_1=2, tm_2=2)
    assert p.allocate("a", 2) == {0: "tm-1", 1: "tm-2"}
    assert p.free("tm-1") == 1 and p.free("tm-2") == 1 and p.available == 2 and p.total == 4


def test_prefers_the_taskmanager_with_most_free_slots() -> None:
    p = pool(tm_1=1, tm_2=3, tm_3=2)
    got = p.allocate("a", 4)
    assert sorted(got) == [0, 1, 2, 3]
    assert Counter(got.values()) == {"tm-2": 2, "tm-3": 1, "tm-1": 1}
    assert got[0] == "tm-2"
    assert p.available == 2


def test_refuses_when_short_and_takes_nothing() -> None:
    p = pool(tm_1=2, tm_2=2)
    p.allocate("a", 3)
    with pytest.raises(NotEnoughSlots) as err:
        p.allocate("b", 2)
    assert "needs 2 slot(s)" in str(err.value) and "1 free" in str(err.value) and "4 slot(s) in total" in str(err.value)
    assert p.available == 1  # the refused request holds nothing
    with pytest.raises(NotEnoughSlots):
        pool().allocate("c", 1)


def test_release_frees_only_that_job() -> None:
    p = pool(tm_1=2, tm_2=2)
    p.allocate("a", 2)
    p.allocate("b", 2)
    assert p.available == 0
    p.release("a")
    assert p.available == 2 and p.free("tm-1") == 1 and p.free("tm-2") == 1
    p.release("a")  # idempotent
    assert p.available == 2
    assert p.allocate("c", 2) == {0: "tm-1", 1: "tm-2"}


def test_removed_taskmanager_takes_its_slots_away() -> None:
    p = pool(tm_1=2, tm_2=2)
    p.allocate("a", 2)
    p.remove_taskmanager("tm-1")
    assert p.total == 2 and p.available == 1 and p.free("tm-1") == 0
    with pytest.raises(NotEnoughSlots):
        p.allocate("b", 2)
    p.remove_taskmanager("tm-unknown")  # unknown: nothing happens
    assert p.total == 2


def test_many_jobs_never_oversubscribe() -> None:
    p = pool(tm_1=3, tm_2=2, tm_3=4)
    jobs = []
    for n in (2, 3, 1, 2, 1):
        jobs.append(f"j{len(jobs)}")
        p.allocate(jobs[-1], n)
        for tm in p.capacity:
            assert 0 <= p.free(tm) <= p.capacity[tm]
    assert p.available == 0
    with pytest.raises(NotEnoughSlots):
        p.allocate("one-more", 1)
