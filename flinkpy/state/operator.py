"""Operator state: per-subtask state that is redistributed when parallelism changes.

As Flink's operator state, in three modes:

- *list* (a CheckpointedFunction's ``get_list_state``): split evenly over the new subtasks on
  restore (the concatenation of every old subtask's list, in subtask order, cut into contiguous
  chunks);
- *union* (``get_union_list_state``): every new subtask gets the whole concatenation;
- *broadcast* (``get_broadcast_state``, the broadcast state pattern): a map that every subtask
  holds a copy of, all copies equal because only the broadcast records change them, in the same
  order everywhere. New subtask ``i`` takes the copy of old subtask ``i % old_parallelism``, so a
  rescale in either direction keeps it.

Each subtask snapshots its own state; redistribution happens at restore, from all old snapshots.

>>> from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor
>>> old = [OperatorStateBackend(), OperatorStateBackend()]
>>> old[0].get_list_state(ListStateDescriptor("offsets")).update([1, 2])
>>> old[1].get_list_state(ListStateDescriptor("offsets")).update([3])
>>> for b in old:
...     b.get_broadcast_state(MapStateDescriptor("rules")).put("limit", 10)
>>> snaps = [b.snapshot() for b in old]
>>> new = OperatorStateBackend(); new.restore(snaps, subtask_index=2, parallelism=3)
>>> list(new.get_list_state(ListStateDescriptor("offsets")).get())
[3]
>>> dict(new.get_broadcast_state(MapStateDescriptor("rules")).items())
{'limit': 10}
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from flinkpy.common.state import ListState
from flinkpy.errors import InvalidProgramError
from flinkpy.state.broadcast import BroadcastMapState

SNAPSHOT_VERSION = 1
#: the modes of operator state, and the kind each is shown as (checkpoint and savepoint analysis)
KINDS = {"split": "list", "union": "union", "broadcast": "broadcast"}


def kind_of(mode: str | None) -> str:
    """The kind a snapshotted operator state of ``mode`` is shown as ("list", "union", "broadcast")."""
    return KINDS.get(mode or "split", "list")


def broadcast_copies(snapshots: list[Mapping[str, Any] | None], subtask_index: int) -> dict[str, dict[Any, Any]]:
    """The copy of each broadcast state that new subtask ``subtask_index`` restores from the old
    subtasks' snapshots (in old subtask order; None where one had none): old subtask
    ``subtask_index % old parallelism``'s, or the first old subtask's that has the state.
    Flink's rule; every copy is equal when the broadcast side is deterministic.

    >>> copies = [{"states": {"rules": {"mode": "broadcast", "items": {"limit": i}}}} for i in (10, 11)]
    >>> broadcast_copies(copies, 3), broadcast_copies([None, copies[1]], 0)
    ({'rules': {'limit': 11}}, {'rules': {'limit': 11}})
    """
    by_name: dict[str, dict[int, dict[Any, Any]]] = {}
    for old_index, snap in enumerate(snapshots):
        for name, entry in (snap or {}).get("states", {}).items():
            if entry["mode"] == "broadcast":
                by_name.setdefault(name, {})[old_index] = entry["items"]
    mine = subtask_index % max(len(snapshots), 1)
    return {name: by_old.get(mine, by_old[min(by_old)]) for name, by_old in by_name.items()}


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

    # -- the backend's side (shared with BroadcastMapState) ---------------------------------
    def copy_items(self) -> list[Any]:
        return list(self.items)

    def load(self, items: Iterable[Any]) -> None:
        self.items = list(items)

    def count(self) -> int:
        return len(self.items)


class OperatorStateBackend:
    """The operator state of one operator in one subtask, by state name."""

    def __init__(self) -> None:
        self.states: dict[str, OperatorListState | BroadcastMapState] = {}
        self._restored: dict[str, tuple[str, Any]] = {}
        self.restored = False

    def _get(self, descriptor: Any, mode: str) -> Any:
        name = descriptor.get_name() if hasattr(descriptor, "get_name") else str(descriptor)
        state = self.states.get(name)
        if state is not None:
            if state.mode != mode:
                raise InvalidProgramError(
                    f"operator state {name!r} is {kind_of(state.mode)} state and cannot be used again as {kind_of(mode)} state",
                    remedy="give each operator state of an operator its own name",
                )
            return state
        state = BroadcastMapState(name) if mode == "broadcast" else OperatorListState(name, mode)
        restored = self._restored.get(name)
        if restored is not None:
            if restored[0] != mode:
                raise InvalidProgramError(
                    f"operator state {name!r} is {kind_of(restored[0])} state in the snapshot but {kind_of(mode)} state in this job",
                    remedy="keep the state's kind, or give the new state another name",
                )
            state.load(restored[1])
        self.states[name] = state
        return state

    def get_list_state(self, state_descriptor: Any) -> OperatorListState:
        return self._get(state_descriptor, "split")  # type: ignore[no-any-return]

    def get_union_list_state(self, state_descriptor: Any) -> OperatorListState:
        return self._get(state_descriptor, "union")  # type: ignore[no-any-return]

    def get_broadcast_state(self, state_descriptor: Any) -> BroadcastMapState:
        """The broadcast (map) state of ``state_descriptor`` (a MapStateDescriptor)."""
        return self._get(state_descriptor, "broadcast")  # type: ignore[no-any-return]

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "states": {name: {"mode": s.mode, "items": s.copy_items()} for name, s in self.states.items()},
        }

    def summary(self) -> dict[str, dict[str, Any]]:
        return {name: {"kind": kind_of(s.mode), "entries": s.count()} for name, s in self.states.items()}

    def restore(self, snapshots: list[Mapping[str, Any] | None], *, subtask_index: int, parallelism: int) -> None:
        """Take this subtask's share of the old subtasks' state (given in old subtask order; an
        old subtask that snapshotted none is None)."""
        merged: dict[str, tuple[str, list[Any]]] = {}
        for snap in snapshots:
            for name, entry in (snap or {}).get("states", {}).items():
                if entry["mode"] == "broadcast":
                    continue
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
            self._restore_state(name, mode, share)
        for name, items in broadcast_copies(snapshots, subtask_index).items():
            self._restore_state(name, "broadcast", items)
        self.restored = any(s is not None for s in snapshots)

    def _restore_state(self, name: str, mode: str, share: Any) -> None:
        self._restored[name] = (mode, share)
        state = self.states.get(name)
        if state is not None and state.mode == mode:
            state.load(share)
