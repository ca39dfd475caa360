"""An unaligned checkpoint's in-flight records cannot move to Spark.

An engine checkpoint taken unaligned holds, beside each operator's state, the records that were
in flight to it on its input channels (``channel_state``); its sources' positions are already past
them. The engine puts them back onto the same channels on restore. Spark has no such channels, and
the state move (:mod:`flinkpy.spark.state_move`) carries positions and state only, so moving such a
checkpoint would lose those records: it is refused, naming each operator that holds some.
Savepoints are always aligned, and so hold none.

>>> doc = {"operators": [{"operator_id": "sums", "name": "running sums", "uid": "sums",
...     "subtasks": [{"subtask": 0, "channel_state": {"path": "c"}}]}]}
>>> [(d.operator, d.what) for d in in_flight_refusals(doc)]
[('running sums', 'in-flight data')]
"""

from __future__ import annotations

from typing import Any, Mapping

from flinkpy.spark.state_move import Move, MoveDecision

REASON = ("the unaligned checkpoint holds records in flight to it, which only the engine can put back: "
          "move from a savepoint (savepoints are aligned)")


def in_flight_refusals(doc: Mapping[str, Any]) -> tuple[MoveDecision, ...]:
    """A refusal per operator of the engine snapshot ``doc`` (its `_metadata`) holding in-flight records."""
    return tuple(
        MoveDecision(op.get("name") or op["operator_id"], op.get("uid"), op["operator_id"], "in-flight data", Move.REFUSED, REASON)
        for op in doc.get("operators", []) if any(s.get("channel_state") for s in op.get("subtasks", [])))
