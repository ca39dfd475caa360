"""One savepoint request of a job, from ``POST /jobs/<id>/savepoints`` to its outcome.

The JobManager keeps one :class:`SavepointRequest` per trigger id; :meth:`SavepointRequest.to_json`
is the status document ``GET /jobs/<id>/savepoints/<trigger>`` answers, in the shape of Flink's
REST API (scripts and the CLI read it).

>>> r = SavepointRequest(target="file:///sp", stop=False, drain=False, format="canonical", requested_ms=0)
>>> r.to_json()
{'status': {'id': 'IN_PROGRESS'}, 'checkpoint_id': None}
>>> r.status = SavepointStatus.COMPLETED; r.checkpoint_id = 3; r.location = "file:///sp/savepoint-1"
>>> r.to_json()["operation"]
{'location': 'file:///sp/savepoint-1'}
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from flinkpy.jobmanager.savepoint_history import SavepointTrigger


class SavepointStatus(enum.Enum):
    QUEUED = "QUEUED"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"

    @property
    def is_open(self) -> bool:
        """Not finished yet: a second request of the same job is refused meanwhile."""
        return self in (SavepointStatus.QUEUED, SavepointStatus.IN_PROGRESS)


@dataclass
class SavepointRequest:
    #: the directory asked for (or the job's default savepoint directory)
    target: str
    stop: bool
    drain: bool
    #: ``canonical`` or ``native``
    format: str
    requested_ms: int
    #: who asked for it (kept in the job's savepoint history)
    trigger: SavepointTrigger = SavepointTrigger.MANUAL
    status: SavepointStatus = SavepointStatus.QUEUED
    checkpoint_id: int | None = None
    #: the savepoint's own directory, once it started
    dir: str = ""
    #: where the completed savepoint is
    location: str = ""
    #: why it failed
    failure: str = ""

    def fail(self, reason: str) -> None:
        self.status, self.failure = SavepointStatus.FAILED, reason

    def to_json(self) -> dict[str, Any]:
        if self.status is SavepointStatus.COMPLETED:
            return {"status": {"id": "COMPLETED"}, "operation": {"location": self.location}, "checkpoint_id": self.checkpoint_id}
        if self.status is SavepointStatus.FAILED:
            cause = {"class": "flinkpy.SavepointException", "stack-trace": self.failure or "failed"}
            return {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": cause}}
        return {"status": {"id": "IN_PROGRESS"}, "checkpoint_id": self.checkpoint_id}
