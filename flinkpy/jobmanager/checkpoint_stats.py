"""Checkpoint statistics in the shape of Flink's ``GET /jobs/:jobid/checkpoints`` response.

A read-only view of a CheckpointCoordinator: counts since the start, a min/max/avg summary over
every completed checkpoint, the latest completed checkpoint, savepoint, failure and restore, and
a bounded history (newest first). Sizes are bytes, durations and timestamps milliseconds.

>>> from flinkpy.jobmanager.checkpoint_coordinator import CheckpointCoordinator, CheckpointingOptions
>>> cc = CheckpointCoordinator(CheckpointingOptions(interval_ms=100), [(1, 0)], [(1, 0)])
>>> _ = cc.tick(0)
>>> stats = checkpoint_stats(cc, now_ms=30)
>>> stats["counts"]["in_progress"], stats["history"][0]["status"], stats["history"][0]["end_to_end_duration"]
(1, 'IN_PROGRESS', 30)
"""

from __future__ import annotations

from typing import Any

from flinkpy.jobmanager.checkpoint_coordinator import (
    CheckpointCoordinator,
    CheckpointRecord,
    CompletedCheckpoint,
    FailedCheckpoint,
    PendingCheckpoint,
    RunningSummary,
)


def _summary(s: RunningSummary) -> dict[str, int]:
    return {"min": s.min or 0, "max": s.max or 0, "avg": s.avg}


def _total(record: CheckpointRecord, name: str, fallback: str | None = None) -> int:
    total = 0
    for m in record.metrics.values():
        value = m.get(name, m.get(fallback, 0) if fallback else 0)
        total += int(value or 0)
    return total


def _max(record: CheckpointRecord, name: str) -> float:
    """The largest value over the subtasks; durations keep sub-millisecond precision (a
    synchronous snapshot part typically takes a fraction of a millisecond)."""
    value = max((float(m.get(name, 0) or 0) for m in record.metrics.values()), default=0.0)
    return int(value) if value.is_integer() else round(value, 3)


def checkpoint_detail(record: CheckpointRecord, now_ms: int) -> dict[str, Any]:
    """One history entry (also used for ``latest.completed``, ``latest.savepoint``, ``latest.failed``)."""
    if isinstance(record, PendingCheckpoint):
        status, end_ms = "IN_PROGRESS", now_ms
    elif isinstance(record, CompletedCheckpoint):
        status, end_ms = "COMPLETED", record.latest_ack_ms or record.completion_ms
    else:
        status, end_ms = "FAILED", record.latest_ack_ms or record.failure_ms
    failed = isinstance(record, FailedCheckpoint)
    return {
        "id": record.checkpoint_id,
        "status": status,
        "is_savepoint": record.is_savepoint,
        "checkpoint_type": "SAVEPOINT" if record.is_savepoint else "CHECKPOINT",
        "trigger_timestamp": record.trigger_ms,
        "latest_ack_timestamp": record.latest_ack_ms if record.latest_ack_ms is not None else -1,
        "state_size": record.state_size,
        "checkpointed_size": _total(record, "checkpointed_size", "state_size"),
        "end_to_end_duration": max(0, end_ms - record.trigger_ms),
        "alignment_buffered": _total(record, "alignment_bytes"),
        #: unaligned checkpoints: the in-flight buffers stored as channel state (Flink's names)
        "unaligned_checkpoint": any(m.get("unaligned") for m in record.metrics.values()),
        "persisted_data": _total(record, "in_flight_input_bytes") + _total(record, "in_flight_output_bytes"),
        "persisted_input_data": _total(record, "in_flight_input_bytes"),
        "persisted_output_data": _total(record, "in_flight_output_bytes"),
        "processed_data": _total(record, "processed_data"),
        "num_subtasks": len(record.tasks),
        "num_acknowledged_subtasks": len(record.ack_ms),
        "external_path": record.external_path if isinstance(record, CompletedCheckpoint) else None,
        "failure_message": record.reason if failed else None,  # type: ignore[union-attr]
        "failure_timestamp": record.failure_ms if failed else None,  # type: ignore[union-attr]
        "sync_duration_max": _max(record, "sync_ms"),
        "async_duration_max": _max(record, "async_ms"),
        "alignment_duration_max": _max(record, "alignment_ms"),
    }


def checkpoint_stats(coordinator: CheckpointCoordinator, now_ms: int, *, history_size: int = 10) -> dict[str, Any]:
    """The JSON document of Flink's checkpoint statistics endpoint (``history_size`` newest entries)."""
    cc = coordinator
    in_progress = len(cc.pending)
    restored = cc.restored_from
    return {
        "counts": {
            "restored": cc.num_restored,
            "total": cc.num_completed + cc.num_failed + in_progress,
            "in_progress": in_progress,
            "completed": cc.num_completed,
            "failed": cc.num_failed,
        },
        "summary": {name: _summary(s) for name, s in cc.summary.items()},
        "latest": {
            "completed": checkpoint_detail(cc.latest_completed_checkpoint, now_ms) if cc.latest_completed_checkpoint else None,
            "savepoint": checkpoint_detail(cc.latest_savepoint, now_ms) if cc.latest_savepoint else None,
            "failed": checkpoint_detail(cc.latest_failed, now_ms) if cc.latest_failed else None,
            "restored": (
                {
                    "id": restored.checkpoint_id,
                    "restore_timestamp": restored.restore_ms,
                    "is_savepoint": restored.is_savepoint,
                    "external_path": restored.external_path,
                }
                if restored
                else None
            ),
        },
        "history": [checkpoint_detail(r, now_ms) for r in cc.history[: max(0, history_size)]],
    }
