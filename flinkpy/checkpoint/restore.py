"""Which state each new subtask restores: a pure assignment from a checkpoint's ``_metadata``.

State is matched to operators by operator id (the uid, or the generated id). For a subtask of a
vertex with parallelism ``p`` and max parallelism ``m``:

- keyed state: the handles of the old subtasks whose key-group ranges overlap this subtask's
  range (the backend keeps only its own key groups) — which is what makes rescaling work;
- operator state and source positions: every old subtask's, in old subtask order (operator
  list state is split evenly or given whole — union — by the task itself; sources re-split the
  remaining input; sinks take the old subtasks with ``index % p == subtask``).

>>> meta = {"operators": [{"operator_id": "sums", "max_parallelism": 4, "subtasks": [
...     {"subtask": 0, "keyed_state": {"path": "a", "key_groups": [0, 1]}, "operator_state": None, "source_offsets": None},
...     {"subtask": 1, "keyed_state": {"path": "b", "key_groups": [2, 3]}, "operator_state": None, "source_offsets": None}]}]}
>>> spec = restore_spec(meta, "file:///cp/chk-3", ["sums"], subtask=0, parallelism=1, max_parallelism=4)
>>> [h["path"] for h in spec["operators"]["sums"]["keyed"]]
['a', 'b']
"""

from __future__ import annotations

from typing import Any

from flinkpy.errors import ConfigurationError
from flinkpy.state.key_groups import key_group_range_for_operator


def restore_spec(
    metadata: dict[str, Any],
    checkpoint_dir: str,
    operator_ids: list[str],
    *,
    subtask: int,
    parallelism: int,
    max_parallelism: int,
) -> dict[str, Any]:
    """The ``restore`` part of a task deployment descriptor."""
    mine = key_group_range_for_operator(max_parallelism, parallelism, subtask)
    by_id = {op["operator_id"]: op for op in metadata.get("operators", [])}
    operators: dict[str, Any] = {}
    for operator_id in operator_ids:
        op = by_id.get(operator_id)
        if op is None:
            continue
        if op.get("max_parallelism", max_parallelism) != max_parallelism and any(s.get("keyed_state") for s in op["subtasks"]):
            raise ConfigurationError(
                f"operator {op.get('name') or operator_id!r} was checkpointed with max parallelism "
                f"{op.get('max_parallelism')} but now has {max_parallelism}: its keyed state cannot be split",
                remedy="keep pipeline.max-parallelism (or the operator's set_max_parallelism) unchanged across restores",
            )
        subtasks = sorted(op["subtasks"], key=lambda s: s["subtask"])
        keyed = []
        for s in subtasks:
            handle = s.get("keyed_state")
            if handle:
                start, end = handle["key_groups"]
                if start < mine.stop and end >= mine.start:
                    keyed.append(handle)
        operators[operator_id] = {
            "keyed": keyed,
            "operator": [s.get("operator_state") for s in subtasks],
            "source_offsets": [s.get("source_offsets") for s in subtasks],
            "old_parallelism": len(subtasks),
        }
        if any(s.get("channel_state") for s in subtasks):
            operators[operator_id]["channel_state"] = [s.get("channel_state") for s in subtasks]
    return {
        "checkpoint_id": metadata.get("checkpoint_id"),
        "kind": metadata.get("kind", "checkpoint"),
        "dir": checkpoint_dir,
        "operators": operators,
    }


def channel_state_conflict(metadata: dict[str, Any], vertices: list[tuple[str, list[str], int]]) -> str | None:
    """Why an unaligned checkpoint's channel state cannot be restored into these vertices
    ((name, operator ids, parallelism) each), or None when it can.

    In-flight buffers belong to one channel between one producer and one consumer subtask:
    they are put back only onto the same channels — same chains, same parallelism.

    >>> meta = {"checkpoint_id": 4, "operators": [{"operator_id": "a", "parallelism": 2,
    ...     "subtasks": [{"subtask": 0, "channel_state": {"path": "x"}}, {"subtask": 1}]}]}
    >>> channel_state_conflict(meta, [("map", ["a"], 2)]) is None
    True
    >>> channel_state_conflict(meta, [("map", ["a"], 3)])
    "operator 'a' has parallelism 3, not 2 as in the checkpoint"
    """
    if not any(s.get("channel_state") for op in metadata.get("operators", []) for s in op["subtasks"]):
        return None
    old = {op["operator_id"]: op for op in metadata.get("operators", [])}
    new: dict[str, int] = {}
    heads = set()
    for _, operator_ids, parallelism in vertices:
        for position, operator_id in enumerate(operator_ids):
            new[operator_id] = parallelism
            if position == 0:
                heads.add(operator_id)
    for operator_id, op in old.items():
        if operator_id not in new:
            return f"operator {op.get('name') or operator_id!r} of the checkpoint is not in the job"
        if new[operator_id] != op.get("parallelism", len(op["subtasks"])):
            return f"operator {op.get('name') or operator_id!r} has parallelism {new[operator_id]}, not {op.get('parallelism', len(op['subtasks']))} as in the checkpoint"
        if any(s.get("channel_state") for s in op["subtasks"]) and operator_id not in heads:
            return f"operator {op.get('name') or operator_id!r} no longer starts its chain"
    if set(new) - set(old):
        return f"the job has operators the checkpoint does not: {', '.join(sorted(set(new) - set(old)))}"
    return None


def unmatched_state(metadata: dict[str, Any], operator_ids: set[str]) -> list[dict[str, Any]]:
    """Operators of the checkpoint with state that no operator of the new job claims."""
    out = []
    for op in metadata.get("operators", []):
        if op["operator_id"] in operator_ids:
            continue
        if any(s.get("keyed_state") or s.get("operator_state") or s.get("source_offsets") for s in op["subtasks"]):
            out.append(op)
    return out
