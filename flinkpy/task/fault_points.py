"""Named fault points in the task process, for tests that must crash at a precise moment.

``FLINKPY_FAULT_POINTS`` (in the environment of the cluster's processes) is a JSON list of
``{"point": NAME, "vertex": ID?, "subtask": I?, "checkpoint": N?, "attempt": A (default 0)}``.
When a task reaches a named point that matches, it kills itself with SIGKILL — a real crash,
with no chance to report or clean up. Points:

- ``running``: the task has started processing (before its first checkpoint);
- ``alignment``: a barrier arrived and the task is aligning (holding a channel back);
- ``upload``: the asynchronous part of a snapshot is about to write its files;
- ``before-notify``: the task heard that a checkpoint completed and has told none of its
  operators yet (a source has not acknowledged what the checkpoint covers, a sink not committed);
- ``after-complete``: the task was notified that a checkpoint completed (after its sinks
  committed);
- ``sink-before-prepare``: a sink's snapshot begins: its open transaction holds the records
  written since the last checkpoint, not yet prepared;
- ``sink-after-prepare``: a sink prepared (pre-committed) its transaction for the checkpoint,
  before the task acknowledged it;
- ``sink-before-commit``: the checkpoint is complete, the sink has not committed yet.

Matching on ``attempt`` (default 0) makes the restarted attempt run through. Nothing here runs
unless the variable is set.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from flinkpy.protocol.deployment import TaskDeploymentDescriptor


class FaultPoints:
    def __init__(self, descriptor: TaskDeploymentDescriptor):
        raw = os.environ.get("FLINKPY_FAULT_POINTS")
        self.rules: list[dict[str, Any]] = []
        if raw:
            self.rules = [r for r in json.loads(raw) if self._mine(r, descriptor)]

    @staticmethod
    def _mine(rule: dict[str, Any], d: TaskDeploymentDescriptor) -> bool:
        return (
            rule.get("vertex", d.vertex_id) == d.vertex_id
            and rule.get("subtask", d.subtask) == d.subtask
            and rule.get("attempt", 0) == d.attempt
        )

    def __bool__(self) -> bool:
        return bool(self.rules)

    def reach(self, point: str, checkpoint_id: int | None = None) -> None:
        for rule in self.rules:
            if rule["point"] == point and rule.get("checkpoint", checkpoint_id) == checkpoint_id:
                os.kill(os.getpid(), signal.SIGKILL)
