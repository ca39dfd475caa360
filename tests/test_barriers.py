"""Barrier alignment and tracking as pure state machines: scripted barriers on several channels."""

from __future__ import annotations

import pytest

from flinkpy.task.barriers import BarrierAligner, BarrierTracker, Canceled, Snapshot

pytestmark = pytest.mark.timeout(10)


def test_aligner_blocks_each_channel_from_its_barrier_until_all_arrived() -> None:
    a = BarrierAligner(3)
    assert a.on_barrier(1, 7, now_ms=100) is None
    assert [a.is_blocked(c) for c in range(3)] == [False, True, False]
    assert a.on_barrier(0, 7, now_ms=110) is None
    assert [a.is_blocked(c) for c in range(3)] == [True, True, False]
    done = a.on_barrier(2, 7, now_ms=135)
    assert done == Snapshot(7, 35)
    assert not any(a.is_blocked(c) for c in range(3)) and not a.aligning


def test_a_single_channel_snapshots_on_its_first_barrier() -> None:
    assert BarrierAligner(1).on_barrier(0, 1, now_ms=5) == Snapshot(1, 0)


def test_finished_channels_count_as_aligned() -> None:
    a = BarrierAligner(2)
    assert a.on_end_of_partition(0, now_ms=1) is None
    assert a.on_barrier(1, 3, now_ms=2) == Snapshot(3, 0)
    b = BarrierAligner(2)
    b.on_barrier(0, 4, now_ms=10)
    assert b.on_end_of_partition(1, now_ms=30) == Snapshot(4, 20)


def test_a_newer_barrier_cancels_the_alignment_in_progress() -> None:
    a = BarrierAligner(2)
    a.on_barrier(0, 1, now_ms=0)
    result = a.on_barrier(1, 2, now_ms=5)  # checkpoint 1 can no longer complete here
    assert result == Canceled(1)
    assert a.is_blocked(1) and not a.is_blocked(0) and a.current == 2
    assert a.on_barrier(0, 1, now_ms=6) is None  # stale barrier of the canceled checkpoint
    assert a.on_barrier(0, 2, now_ms=9) == Snapshot(2, 4)


def test_duplicate_and_old_barriers_are_ignored() -> None:
    a = BarrierAligner(2)
    a.on_barrier(0, 5, now_ms=0)
    assert a.on_barrier(1, 5, now_ms=1) == Snapshot(5, 1)
    assert a.on_barrier(0, 5, now_ms=2) is None
    assert a.on_barrier(1, 4, now_ms=3) is None
    assert not a.is_blocked(0) and not a.is_blocked(1)


def test_abort_from_the_coordinator_releases_the_channels() -> None:
    a = BarrierAligner(2)
    a.on_barrier(0, 3, now_ms=0)
    assert a.abort(3) is True
    assert not a.is_blocked(0)
    assert a.on_barrier(1, 3, now_ms=1) is None  # the aborted checkpoint's remaining barrier
    assert a.abort(9) is False
    assert a.on_barrier(0, 9, now_ms=2) is None  # aborted before any barrier arrived


def test_tracker_never_blocks_and_snapshots_on_the_last_barrier() -> None:
    t = BarrierTracker(3)
    assert t.on_barrier(0, 1, now_ms=0) is None
    assert not t.is_blocked(0)
    assert t.on_barrier(2, 1, now_ms=4) is None
    assert t.on_barrier(1, 1, now_ms=10) == Snapshot(1, 10)
    assert t.on_barrier(1, 1, now_ms=11) is None


def test_tracker_handles_overlapping_checkpoints_and_end_of_partition() -> None:
    t = BarrierTracker(2)
    t.on_barrier(0, 1, now_ms=0)
    t.on_barrier(0, 2, now_ms=1)
    assert t.on_barrier(1, 2, now_ms=2) == Snapshot(2, 1)  # 1 can no longer complete
    assert t.on_barrier(1, 1, now_ms=3) is None
    t.on_barrier(0, 3, now_ms=4)
    assert t.on_end_of_partition(1, now_ms=6) == Snapshot(3, 2)
