"""The CheckpointCoordinator as a pure state machine: events with a manual clock in, actions out."""

from __future__ import annotations

import json

import pytest

from flinkpy.errors import ConfigurationError
from flinkpy.jobmanager.checkpoint_coordinator import (
    Abort,
    CheckpointCoordinator,
    CheckpointingOptions,
    CheckpointTriggerRefused,
    CompletedCheckpoint,
    Discard,
    SweepShared,
    FailJob,
    Finalize,
    NotifyComplete,
    TriggerAtSources,
)
from flinkpy.jobmanager.checkpoint_stats import checkpoint_stats

SOURCE, MAP, SINK = (1, 0), (2, 0), (2, 1)
TASKS = [SOURCE, MAP, SINK]


def coordinator(**opts) -> CheckpointCoordinator:
    return CheckpointCoordinator(CheckpointingOptions(**opts), TASKS, [SOURCE])


def ack_all(cc: CheckpointCoordinator, cid: int, now_ms: int, size: int = 10) -> list:
    actions: list = []
    for i, task in enumerate(TASKS):
        actions += cc.acknowledge(task, cid, {"task": task, "cid": cid}, {"state_size": size, "sync_ms": i, "async_ms": 2 * i}, now_ms)
    return actions


def complete(cc: CheckpointCoordinator, cid: int, now_ms: int) -> list:
    actions = ack_all(cc, cid, now_ms)
    assert [type(a) for a in actions] == [Finalize]
    return cc.finalized(cid, f"memory://ck/job/chk-{cid}", now_ms)


def triggered(actions: list) -> list[int]:
    return [a.checkpoint_id for a in actions if isinstance(a, TriggerAtSources)]


# -- periodic triggering -----------------------------------------------------------------------


def test_periodic_trigger_follows_the_interval():
    cc = coordinator(interval_ms=100)
    actions = cc.tick(0)
    assert actions == [TriggerAtSources(1, 0, "checkpoint", "EXACTLY_ONCE", [SOURCE])]
    complete(cc, 1, 10)
    assert cc.tick(99) == []
    assert triggered(cc.tick(100)) == [2]
    assert cc.tick(150) == []  # one in flight (max_concurrent 1)


def test_periodic_trigger_off_without_interval():
    cc = coordinator(interval_ms=None)
    assert cc.tick(0) == [] and cc.tick(10**9) == []


def test_min_pause_counts_from_the_last_completion():
    cc = coordinator(interval_ms=100, min_pause_ms=80)
    cc.tick(0)
    complete(cc, 1, 90)
    assert cc.tick(100) == []  # interval elapsed, but only 10 ms of pause
    assert cc.tick(169) == []
    assert triggered(cc.tick(170)) == [2]


def test_max_concurrent_limits_periodic_triggers():
    cc = coordinator(interval_ms=10, max_concurrent=2)
    assert triggered(cc.tick(0)) == [1]
    assert triggered(cc.tick(10)) == [2]
    assert cc.tick(20) == []
    assert sorted(cc.pending) == [1, 2]


# -- acknowledgement, completion, retention -----------------------------------------------------


def test_acks_finalize_and_complete():
    cc = coordinator(interval_ms=100)
    cc.tick(0)
    assert cc.acknowledge(SOURCE, 1, {"offset": 3}, {"state_size": 5}, 10) == []
    assert cc.acknowledge(MAP, 1, {}, {"state_size": 6}, 11) == []
    [fin] = cc.acknowledge(SINK, 1, {}, {"state_size": 7}, 12)
    assert isinstance(fin, Finalize) and fin.checkpoint.checkpoint_id == 1
    assert fin.checkpoint.states[SOURCE] == {"offset": 3}
    assert 1 in cc.pending  # still pending until the metadata is written
    assert cc.finalized(1, "memory://ck/j/chk-1", 20) == [NotifyComplete(1)]
    assert cc.pending == {}
    done = cc.latest_completed
    assert isinstance(done, CompletedCheckpoint)
    assert (done.checkpoint_id, done.completion_ms, done.state_size, done.external_path) == (1, 20, 18, "memory://ck/j/chk-1")
    assert done.states[SOURCE] == {"offset": 3}


@pytest.mark.parametrize("retained", [1, 3])
def test_retention_discards_oldest_first(retained):
    cc = coordinator(interval_ms=10, retained=retained)
    discarded: list[int] = []
    for cid in range(1, 6):
        assert triggered(cc.tick(cid * 10)) == [cid]
        actions = complete(cc, cid, cid * 10 + 1)
        assert actions[0] == NotifyComplete(cid)
        discarded += [a.checkpoint_id for a in actions if isinstance(a, Discard)]
        assert all(a.external_path == f"memory://ck/job/chk-{a.checkpoint_id}" for a in actions if isinstance(a, Discard))
    assert discarded == list(range(1, 6 - retained))
    assert [c.checkpoint_id for c in cc.completed] == list(range(6 - retained, 6))


def test_savepoints_are_not_discarded_by_retention():
    cc = coordinator(interval_ms=None, retained=1)
    sp, _ = cc.trigger(0, kind="savepoint")
    complete(cc, sp, 1)
    for now in (10, 20):
        cid, _ = cc.trigger(now)
        complete(cc, cid, now + 1)
    assert [(c.checkpoint_id, c.kind) for c in cc.completed] == [(1, "savepoint"), (3, "checkpoint")]


def test_late_and_duplicate_acks_are_ignored():
    cc = coordinator(interval_ms=100)
    cc.tick(0)
    assert cc.acknowledge(SOURCE, 1, {"v": 1}, {}, 1) == []
    assert cc.acknowledge(SOURCE, 1, {"v": 2}, {}, 2) == []  # duplicate: first one wins
    assert cc.pending[1].states[SOURCE] == {"v": 1}
    assert cc.acknowledge((9, 9), 1, {}, {}, 2) == []  # not a task of this job
    assert cc.acknowledge(MAP, 1, {}, {}, 3) == []
    assert [type(a) for a in cc.acknowledge(SINK, 1, {}, {}, 4)] == [Finalize]
    assert cc.acknowledge(SINK, 1, {}, {}, 5) == []  # duplicate after Finalize
    cc.finalized(1, "p1", 6)
    assert cc.acknowledge(SINK, 1, {}, {}, 7) == []  # completed
    assert cc.acknowledge(SINK, 42, {}, {}, 7) == []  # unknown
    assert cc.num_late_messages == 2


# -- failures ----------------------------------------------------------------------------------


def test_timeout_aborts_and_counts():
    cc = coordinator(interval_ms=1000, timeout_ms=500, tolerable_failures=1)
    cc.tick(0)
    cc.acknowledge(SOURCE, 1, {}, {}, 10)
    assert cc.tick(499) == []
    actions = cc.tick(500)
    assert [type(a) for a in actions] == [Abort, Discard]
    assert actions[0].checkpoint_id == 1 and "expired after 500 ms" in actions[0].reason and "1/3" in actions[0].reason
    assert actions[1] == Discard(1, None)
    assert cc.consecutive_failures == 1 and cc.pending == {}
    cc.acknowledge(MAP, 1, {}, {}, 501)  # late
    assert cc.num_late_messages == 1


def test_decline_with_no_tolerance_fails_the_job():
    cc = coordinator(interval_ms=100)
    cc.tick(0)
    actions = cc.decline(MAP, 1, "disk full", 5)
    assert actions[:2] == [Abort(1, "declined by task 2:0: disk full"), Discard(1, None)]
    [fail] = actions[2:]
    assert isinstance(fail, FailJob)
    assert "checkpoint 1 failed: declined by task 2:0: disk full" in fail.reason
    assert "tolerable failed checkpoints (0" in fail.reason


def test_tolerable_failures_and_reset_by_completion():
    cc = coordinator(interval_ms=10, tolerable_failures=2)

    def fail_next(now: int) -> list:
        [cid] = triggered(cc.tick(now))
        return cc.decline(SINK, cid, "boom", now + 1)

    assert not any(isinstance(a, FailJob) for a in fail_next(0))
    assert not any(isinstance(a, FailJob) for a in fail_next(10))
    assert cc.consecutive_failures == 2
    [cid] = triggered(cc.tick(20))
    complete(cc, cid, 21)
    assert cc.consecutive_failures == 0
    assert not any(isinstance(a, FailJob) for a in fail_next(30))
    assert not any(isinstance(a, FailJob) for a in fail_next(40))
    fails = [a for a in fail_next(50) if isinstance(a, FailJob)]
    assert len(fails) == 1 and "checkpoint 6 failed" in fails[0].reason and "(2," in fails[0].reason


def test_finalize_failed_counts_as_failure():
    cc = coordinator(interval_ms=10, tolerable_failures=5)
    cc.tick(0)
    ack_all(cc, 1, 1)
    actions = cc.finalize_failed(1, "permission denied", 2)
    assert actions == [Abort(1, "writing its metadata failed: permission denied"), Discard(1, None)]
    assert cc.consecutive_failures == 1
    # the metadata finally turns up after the abort: its files are orphans
    assert cc.finalized(1, "memory://x/chk-1", 3) == [Discard(1, "memory://x/chk-1")]


def test_savepoint_failures_do_not_fail_the_job():
    cc = coordinator(interval_ms=None)
    sp, _ = cc.trigger(0, kind="savepoint")
    assert cc.decline(SOURCE, sp, "nope", 1) == [Abort(sp, "declined by task 1:0: nope"), Discard(sp, None)]
    assert cc.consecutive_failures == 0


def test_completion_subsumes_older_pending():
    cc = coordinator(interval_ms=10, max_concurrent=3)
    cc.tick(0)
    cc.tick(10)
    cc.tick(20)
    ack_all(cc, 2, 25)
    actions = cc.finalized(2, "p2", 26)
    assert actions == [NotifyComplete(2), Abort(1, "subsumed"), Discard(1, None)]
    assert sorted(cc.pending) == [3]
    assert cc.consecutive_failures == 0
    assert cc.latest_failed.reason == "subsumed" and not cc.latest_failed.counted


# -- bounded jobs, manual triggers, shutdown, restore ------------------------------------------


def test_task_finished_stops_triggering_and_aborts_waiting_pending():
    cc = coordinator(interval_ms=10, max_concurrent=2)
    cc.tick(0)
    cc.tick(10)
    cc.acknowledge(SINK, 1, {}, {}, 11)  # checkpoint 1 has the sink's ack, 2 does not
    actions = cc.task_finished(SINK, 12)
    assert actions == [Abort(2, "task finished"), Discard(2, None)]
    assert sorted(cc.pending) == [1] and cc.consecutive_failures == 0
    ack_all(cc, 1, 13)
    cc.finalized(1, "p1", 14)
    assert cc.tick(1000) == []
    with pytest.raises(CheckpointTriggerRefused, match="finished"):
        cc.trigger(1000)


def test_manual_trigger_ignores_interval_but_respects_max_concurrent():
    cc = coordinator(interval_ms=10_000)
    cc.tick(0)
    complete(cc, 1, 5)
    cid, actions = cc.trigger(6, reason="cli")
    assert cid == 2 and actions == [TriggerAtSources(2, 6, "checkpoint", "EXACTLY_ONCE", [SOURCE])]
    with pytest.raises(CheckpointTriggerRefused) as err:
        cc.trigger(7)
    assert "already in progress (2)" in err.value.reason and "max-concurrent" in str(err.value)
    assert cc.tick(10_000) == []  # periodic one too: one is in flight


def test_shutdown_refuses_triggers_and_aborts_pending_without_counting():
    cc = coordinator(interval_ms=10, max_concurrent=2)
    cc.tick(0)
    actions = cc.shutdown(5, job_state="CANCELED")
    assert actions == [Abort(1, "job canceled"), Discard(1, None)]
    assert cc.consecutive_failures == 0
    assert cc.tick(100) == []
    with pytest.raises(CheckpointTriggerRefused, match="no longer running"):
        cc.trigger(100)


def _with_three_completed(**opts) -> CheckpointCoordinator:
    cc = coordinator(interval_ms=None, retained=3, **opts)
    sp, _ = cc.trigger(0, kind="savepoint")
    complete(cc, sp, 1)
    for now in (10, 20, 30):
        cid, _ = cc.trigger(now)
        complete(cc, cid, now + 1)
    return cc


@pytest.mark.parametrize(
    "job_state, retain, discarded",
    [
        ("CANCELED", False, [2, 3, 4]),
        ("CANCELED", True, []),
        ("FINISHED", False, [2, 3, 4]),
        ("FAILED", False, []),
        ("SUSPENDED", False, []),
    ],
)
def test_shutdown_retention(job_state, retain, discarded):
    cc = _with_three_completed(retain_on_cancellation=retain)
    actions = cc.shutdown(100, job_state=job_state)
    assert [a.checkpoint_id for a in actions if isinstance(a, Discard)] == discarded
    assert all(a.external_path == f"memory://ck/job/chk-{a.checkpoint_id}" for a in actions)
    assert 1 in [c.checkpoint_id for c in cc.completed]  # the savepoint stays


def test_restored_sets_next_id():
    cc = coordinator(interval_ms=10)
    assert cc.restored(41, "memory://ck/j/chk-41", 5) == []
    assert triggered(cc.tick(5)) == [42]
    cc.restored(3, "memory://old", 6)  # never goes backwards
    assert cc.next_id == 43


# -- statistics --------------------------------------------------------------------------------


def test_stats_json_shape_and_numbers():
    cc = coordinator(interval_ms=100, max_concurrent=2, tolerable_failures=10)
    cc.restored(0, "memory://ck/j/chk-0", 0, is_savepoint=True)
    # checkpoint 1 completes: trigger 100, acks up to 130, sizes 10+20+30
    cc.tick(100)
    for i, task in enumerate(TASKS):
        cc.acknowledge(task, 1, {}, {"state_size": 10 * (i + 1), "sync_ms": i, "async_ms": 5 * i, "alignment_ms": 7, "alignment_bytes": 100, "processed_data": 1}, 110 + 10 * i)
    cc.finalized(1, "memory://ck/j/chk-1", 135)
    # checkpoint 2 declined; checkpoint 3 in progress
    cc.tick(200)
    cc.acknowledge(SOURCE, 2, {}, {"state_size": 4}, 205)
    cc.decline(MAP, 2, "snapshot failed", 210)
    cc.tick(300)
    stats = checkpoint_stats(cc, 340)
    json.dumps(stats)  # it is JSON
    assert stats["counts"] == {"restored": 1, "total": 3, "in_progress": 1, "completed": 1, "failed": 1}
    assert stats["summary"]["state_size"] == {"min": 60, "max": 60, "avg": 60}
    assert stats["summary"]["end_to_end_duration"] == {"min": 30, "max": 30, "avg": 30}
    assert stats["summary"]["alignment_buffered"] == {"min": 300, "max": 300, "avg": 300}
    latest = stats["latest"]
    assert latest["restored"] == {"id": 0, "restore_timestamp": 0, "is_savepoint": True, "external_path": "memory://ck/j/chk-0"}
    assert latest["savepoint"] is None
    completed = latest["completed"]
    assert completed["id"] == 1 and completed["status"] == "COMPLETED" and completed["external_path"] == "memory://ck/j/chk-1"
    assert (completed["sync_duration_max"], completed["async_duration_max"], completed["alignment_duration_max"]) == (2, 10, 7)
    assert (completed["num_subtasks"], completed["num_acknowledged_subtasks"], completed["processed_data"]) == (3, 3, 3)
    failed = latest["failed"]
    assert failed["id"] == 2 and failed["failure_message"] == "declined by task 2:0: snapshot failed"
    assert failed["failure_timestamp"] == 210 and failed["num_acknowledged_subtasks"] == 1 and failed["state_size"] == 4
    history = stats["history"]
    assert [(h["id"], h["status"]) for h in history] == [(3, "IN_PROGRESS"), (2, "FAILED"), (1, "COMPLETED")]
    assert history[0]["end_to_end_duration"] == 40 and history[0]["latest_ack_timestamp"] == -1
    assert history[0]["checkpoint_type"] == "CHECKPOINT" and history[0]["failure_message"] is None
    assert set(history[0]) == {
        "id", "status", "is_savepoint", "checkpoint_type", "trigger_timestamp", "latest_ack_timestamp", "state_size",
        "checkpointed_size", "end_to_end_duration", "alignment_buffered", "processed_data", "num_subtasks",
        "num_acknowledged_subtasks", "external_path", "failure_message", "failure_timestamp", "sync_duration_max",
        "async_duration_max", "alignment_duration_max", "unaligned_checkpoint", "persisted_data",
        "persisted_input_data", "persisted_output_data",
    }  # fmt: skip
    # an aligned checkpoint in progress: nothing persisted in flight (yet)
    assert history[0]["unaligned_checkpoint"] is False
    assert (history[0]["persisted_data"], history[0]["persisted_input_data"], history[0]["persisted_output_data"]) == (0, 0, 0)
    assert len(checkpoint_stats(cc, 340, history_size=2)["history"]) == 2


def test_stats_history_is_bounded_and_empty_stats_are_zero():
    cc = CheckpointCoordinator(CheckpointingOptions(interval_ms=1), TASKS, [SOURCE], history_limit=5)
    empty = checkpoint_stats(cc, 0)
    assert empty["summary"]["state_size"] == {"min": 0, "max": 0, "avg": 0}
    assert empty["latest"] == {"completed": None, "savepoint": None, "failed": None, "restored": None}
    for now in range(20):
        [cid] = triggered(cc.tick(now * 10))
        complete(cc, cid, now * 10 + 1)
    assert [r.checkpoint_id for r in cc.history] == [20, 19, 18, 17, 16]
    assert checkpoint_stats(cc, 1000)["counts"]["completed"] == 20


def test_savepoint_stats():
    cc = coordinator(interval_ms=None)
    sp, [trig] = cc.trigger(0, kind="savepoint")
    assert trig.kind == "savepoint"
    complete(cc, sp, 3)
    stats = checkpoint_stats(cc, 5)
    assert stats["latest"]["savepoint"]["id"] == sp and stats["latest"]["completed"] is None
    assert stats["history"][0]["checkpoint_type"] == "SAVEPOINT" and stats["history"][0]["is_savepoint"] is True


# -- configuration -----------------------------------------------------------------------------


def test_from_config_defaults_and_keys():
    assert CheckpointingOptions.from_config({}) == CheckpointingOptions()
    opts = CheckpointingOptions.from_config(
        {
            "execution.checkpointing.interval": "1 s",
            "execution.checkpointing.mode": "at_least_once",
            "execution.checkpointing.timeout": "10 min",
            "execution.checkpointing.min-pause": "100 ms",
            "execution.checkpointing.max-concurrent-checkpoints": "2",
            "execution.checkpointing.tolerable-failed-checkpoints": "3",
            "execution.checkpointing.num-retained": "4",
            "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
            "parallelism.default": "2",
        }
    )
    assert opts == CheckpointingOptions(1000, "AT_LEAST_ONCE", 600_000, 100, 2, 3, 4, True)
    assert CheckpointingOptions.from_config({"execution.checkpointing.interval": "250"}).interval_ms == 250
    for value in ("DELETE_ON_CANCELLATION", "NO_EXTERNALIZED_CHECKPOINTS"):
        opts = CheckpointingOptions.from_config({"execution.checkpointing.externalized-checkpoint-retention": value})
        assert opts.retain_on_cancellation is False


@pytest.mark.parametrize(
    "key, value, allowed",
    [
        ("interval", "soon", "positive duration"),
        ("interval", "0", "unset"),
        ("mode", "MAYBE_ONCE", "EXACTLY_ONCE, AT_LEAST_ONCE"),
        ("timeout", "0 s", "positive duration"),
        ("min-pause", "5 parsecs", "duration"),
        ("max-concurrent-checkpoints", "0", ">= 1"),
        ("tolerable-failed-checkpoints", "-1", ">= 0"),
        ("num-retained", "two", ">= 1"),
        ("externalized-checkpoint-retention", "KEEP", "RETAIN_ON_CANCELLATION"),
    ],
)
def test_from_config_errors_name_key_value_and_allowed(key, value, allowed):
    with pytest.raises(ConfigurationError) as err:
        CheckpointingOptions.from_config({f"execution.checkpointing.{key}": value})
    text = str(err.value)
    assert f"execution.checkpointing.{key}" in text and repr(value) in text and allowed in text


# -- shared state of incremental checkpoints ------------------------------------------------


def _incremental(files: list[str], checkpoint_id: int = 1) -> dict:
    """A task's ack (as the dispatcher passes it): one operator whose keyed state references
    ``files`` in shared/."""
    shared = [{"file": f.rsplit("/", 1)[-1], "url": f, "size": 1, "checksum": "sha256:" + "0" * 64, "checkpoint_id": checkpoint_id} for f in files]
    return {"state": [{"operator_id": "op", "keyed_state": {"path": "k", "format": "rocksdb-incremental", "shared": shared}, "operator_state": None, "source_offsets": None}]}


def _complete(cc, cid: int, files: dict, now: int) -> list:
    """Trigger checkpoint ``cid`` and acknowledge it from every task with ``files`` per task."""
    assert cc.tick(now)[0].checkpoint_id == cid
    for task in sorted(cc.tasks):
        actions = cc.acknowledge(task, cid, _incremental(files.get(task, []), cid), {}, now + 1)
    assert [type(a) for a in actions] == [Finalize]
    return cc.finalized(cid, f"p{cid}", now + 2)


def test_shared_files_are_deleted_when_the_last_retained_checkpoint_referencing_them_goes():
    cc = coordinator(interval_ms=100, retained=2)
    _complete(cc, 1, {SOURCE: ["s/a", "s/b"]}, 0)
    assert cc.base_checkpoint_id == 1
    _complete(cc, 2, {SOURCE: ["s/b", "s/c"]}, 100)
    discards = [a for a in _complete(cc, 3, {SOURCE: ["s/c", "s/d"], MAP: ["s/e"]}, 200) if isinstance(a, Discard)]
    assert [(d.checkpoint_id, d.shared) for d in discards] == [(1, ("s/a",))]  # s/b: still in 2
    discards = [a for a in _complete(cc, 4, {SOURCE: ["s/d"]}, 300) if isinstance(a, Discard)]
    assert [(d.checkpoint_id, d.shared) for d in discards] == [(2, ("s/b",))]  # s/c: still in 3
    assert cc.shared.files() == {"s/c", "s/d", "s/e"}
    shutdown = cc.shutdown(400, job_state="FINISHED")
    assert sorted(f for a in shutdown if isinstance(a, Discard) for f in a.shared) == ["s/c", "s/d", "s/e"]
    assert [a.keep for a in shutdown if isinstance(a, SweepShared)] == [frozenset()]


def test_a_failed_checkpoint_deletes_only_the_shared_files_nobody_registered():
    cc = coordinator(interval_ms=100, retained=1)
    _complete(cc, 1, {SOURCE: ["s/a"]}, 0)
    cc.tick(100)
    cc.acknowledge(SOURCE, 2, _incremental(["s/a", "s/new"], 2), {}, 101)
    actions = cc.decline(MAP, 2, "boom", 102)
    assert [d.shared for d in actions if isinstance(d, Discard)] == [("s/new",)]
    # an acknowledgement arriving after the checkpoint ended: its new uploads go too
    late = cc.acknowledge(SINK, 2, _incremental(["s/a", "s/late"], 2), {}, 103)
    assert [(d.checkpoint_id, d.shared) for d in late] == [(2, ("s/late",))]
    assert cc.shared.files() == {"s/a"}


def test_a_claimed_checkpoint_is_built_on_and_discarded_once_subsumed():
    cc = coordinator(interval_ms=100, retained=1)
    old = {"checkpoint_id": 7, "operators": [{"operator_id": "op", "subtasks": [{"subtask": 0, "keyed_state": _incremental(["o/x", "o/y"], 7)["state"][0]["keyed_state"]}]}]}
    cc.restored(7, "file:///old/chk-7", 0, metadata=old, owned=True, foreign=True)
    assert cc.base_checkpoint_id == 7 and cc.next_id == 8
    actions = _complete(cc, 8, {SOURCE: ["o/x", "s/z"]}, 100)
    [adopted] = [a for a in actions if isinstance(a, Discard)]
    assert (adopted.checkpoint_id, adopted.external_path, adopted.shared, adopted.foreign) == (7, "file:///old/chk-7", ("o/y",), True)


def test_no_claim_neither_builds_on_nor_deletes_the_restored_checkpoint():
    cc = coordinator(interval_ms=100, retained=1)
    old = {"checkpoint_id": 7, "operators": [{"operator_id": "op", "subtasks": [{"subtask": 0, "keyed_state": _incremental(["o/x"], 7)["state"][0]["keyed_state"]}]}]}
    cc.restored(7, "file:///old/chk-7", 0, metadata=old, owned=False, foreign=True)
    assert cc.base_checkpoint_id is None
    actions = _complete(cc, 8, {SOURCE: ["s/z"]}, 100)
    assert not [a for a in actions if isinstance(a, Discard)]
    assert not [a for a in cc.shutdown(200, job_state="FINISHED") if isinstance(a, Discard) and a.foreign]


# -- the final checkpoint ----------------------------------------------------------------------


def test_the_end_of_every_sources_input_triggers_the_final_checkpoint_at_once():
    cc = CheckpointCoordinator(CheckpointingOptions(interval_ms=60_000), [SOURCE, (1, 1), MAP], [SOURCE, (1, 1)])
    assert triggered(cc.tick(0)) == [1]
    for task in (SOURCE, (1, 1), MAP):
        cc.acknowledge(task, 1, {}, {}, 5)
    cc.finalized(1, "memory://ck/job/chk-1", 6)
    assert cc.end_of_data(SOURCE, 10) == []  # the other source still reads
    assert cc.end_of_data(MAP, 11) == []  # not a source: it does not count
    (trigger,) = cc.end_of_data((1, 1), 12)  # long before the interval is due
    assert trigger == TriggerAtSources(2, 12, "checkpoint", "EXACTLY_ONCE", [SOURCE, (1, 1)], final=True)
    for task in (SOURCE, (1, 1), MAP):
        cc.acknowledge(task, 2, {}, {}, 20)
    assert cc.finalized(2, "memory://ck/job/chk-2", 21)[0] == NotifyComplete(2, final=True)
    assert cc.tick(120_000) == []  # nothing after the final checkpoint


def test_a_failed_final_checkpoint_is_taken_again_and_a_restart_before_it_waits_for_the_sources():
    cc = coordinator(interval_ms=100)
    assert triggered(cc.tick(0)) == [1]
    assert cc.end_of_data(SOURCE, 10) == []  # checkpoint 1 is in flight (max_concurrent 1)
    assert complete(cc, 1, 20)[0] == NotifyComplete(1, final=False)
    (trigger,) = cc.tick(21)  # at once, not when the interval is due
    assert (trigger.checkpoint_id, trigger.final) == (2, True)
    cc.decline(MAP, 2, "injected", 30)
    assert cc.tick(50) == []  # tried again after the interval, like any checkpoint
    (trigger,) = cc.tick(121)
    assert (trigger.checkpoint_id, trigger.final) == (3, True)
    cc.failover(TASKS, 210)  # the source reads again from checkpoint 1: not final until it ends again
    (trigger,) = cc.tick(300)
    assert (trigger.checkpoint_id, trigger.final) == (4, False)
    assert complete(cc, 4, 310)[0] == NotifyComplete(4, final=False)
    (trigger,) = cc.end_of_data(SOURCE, 320)
    assert (trigger.checkpoint_id, trigger.final) == (5, True)
    assert complete(cc, 5, 330)[0] == NotifyComplete(5, final=True)
    cc.failover([SINK], 340)  # restarted after it: it restores the final checkpoint and finishes
    assert cc.final.completed and cc.tick(1000) == []
