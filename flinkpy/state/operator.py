"""Operator state: per-subtask lists that are redistributed when parallelism changes.

As Flink's operator state for a CheckpointedFunction: a *list* state is split evenly over the new
subtasks on restore (the concatenation of every old subtask's list, in subtask order, cut into
contiguous chunks); a *union* list state gives every new subtask the whole concatenation. Each
subtask snapshots its own lists; redistribution happens at restore, from all old snapshots.

>>> from flinkpy.datastream.state import ListStateDescriptor
>>> old = [OperatorStateBackend(), OperatorStateBackend()]
>>> old[0].get_list_state(ListStateDescriptor("offsets")).update([1, 2])
>>> old[1].get_list_state(ListStateDescriptor("offsets")).update([3])
>>> snaps = [b.snapshot() for b in old]
>>> new = OperatorStateBackend(); new.restore(snaps, subtask_index=0, parallelism=1)
>>> list(new.get_list_state(ListStateDescriptor("offsets")).get())
[1, 2, 3]
"""

from __future__ import annotations

from typing import Any, Iterable

from flinkpy.common.state import ListState

SNAPSHOT_VERSION = 1


class OperatorListState(ListState):
    def __init__(self, name: str, mode: str):
        self.name = name
        self.mode = mode  # "split" or "union"
        self.items: list[Any] = []

    def get(self) -> Iterable[Any]:
        return list(self.items)

    def add(self, value: Any) -> None:
        self.items.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        self.items.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        self.items = list(values) if values is not None else []

    def clear(self) -> None:
        self.items = []


class OperatorStateBackend:
    def __init__(self) -> None:
        self.states: dict[str, OperatorListState] = {}
        self._restored: dict[str, tuple[str, list[Any]]] = {}
        self.restored = False

    def _get(self, descriptor: Any, mode: str) -> OperatorListState:
        name = descriptor.get_name() if hasattr(descriptor, "get_name") else str(descriptor)
        state = self.states.get(name)
        if state is None:
            state = self.states[name] = OperatorListState(name, mode)
            if name in self._restored:
                state.items = list(self._restored[name][1])
        return state

    def get_list_state(self, state_descriptor: Any) -> OperatorListState:
        return self._get(state_descriptor, "split")

    def get_union_list_state(self, state_descriptor: Any) -> OperatorListState:
        return self._get(state_descriptor, "union")

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "states": {name: {"mode": s.mode, "items": list(s.items)} for name, s in self.states.items()},
        }

    def summary(self) -> dict[str, dict[str, Any]]:
        return {name: {"kind": "union" if s.mode == "union" else "list", "entries": len(s.items)} for name, s in self.states.items()}

    def restore(self, snapshots: list[dict[str, Any]], *, subtask_index: int, parallelism: int) -> None:
        """Take this subtask's share of the old subtasks' lists (given in old subtask order)."""
        merged: dict[str, tuple[str, list[Any]]] = {}
        for snap in snapshots:
            for name, entry in snap.get("states", {}).items():
                mode, items = merged.get(name, (entry["mode"], []))
                items.extend(entry["items"])
                merged[name] = (mode, items)
        for name, (mode, items) in merged.items():
            if mode == "union":
                share = items
            else:
                start = len(items) * subtask_index // parallelism
                end = len(items) * (subtask_index + 1) // parallelism
                share = items[start:end]
            self._restored[name] = (mode, share)
            if name in self.states:
                self.states[name].items = list(share)
        self.restored = bool(snapshots)
