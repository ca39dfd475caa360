"""Broadcast state: the map every parallel instance of a broadcast operator keeps a copy of.

:class:`BroadcastMapState` is the read-write state ``process_broadcast_element`` gets;
:class:`ReadOnlyView` is what ``process_element`` (the non-broadcast side) gets: the same map,
with every write refused. The copies stay equal only if the broadcast side alone writes them —
the non-broadcast side sees a different partition of its stream in each instance. The state is
operator state (flinkpy.state.operator, mode "broadcast"): snapshotted by every subtask,
restored from one old subtask's copy.

>>> rules = BroadcastMapState("rules")
>>> rules.put("max_amount", 500)
>>> view = ReadOnlyView(rules)
>>> view.get("max_amount"), view.contains("min_amount"), dict(view.items())
(500, False, {'max_amount': 500})
>>> view.put("max_amount", 1)
Traceback (most recent call last):
  ...
flinkpy.errors.InvalidProgramError: broadcast state 'rules' is read-only in process_element() and on_timer() ...
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, NoReturn

from flinkpy.common.state import BroadcastState, ReadOnlyBroadcastState
from flinkpy.errors import InvalidProgramError


class BroadcastMapState(BroadcastState):
    """One subtask's copy of a broadcast state: a dict, snapshotted whole."""

    mode = "broadcast"

    def __init__(self, name: str):
        self.name = name
        self._map: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self._map.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._map

    def put(self, key: Any, value: Any) -> None:
        self._map[key] = value

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        self._map.update(dict_value)

    def remove(self, key: Any) -> None:
        self._map.pop(key, None)

    def clear(self) -> None:
        self._map = {}

    # lists, not views: the function may change the state while it iterates
    def items(self) -> Iterable[tuple[Any, Any]]:
        return list(self._map.items())

    def keys(self) -> Iterable[Any]:
        return list(self._map)

    def values(self) -> Iterable[Any]:
        return list(self._map.values())

    def is_empty(self) -> bool:
        return not self._map

    # -- the operator state backend's side ----------------------------------------------
    def copy_items(self) -> dict[Any, Any]:
        return dict(self._map)

    def load(self, items: Mapping[Any, Any]) -> None:
        self._map = dict(items)

    def count(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        return f"BroadcastState({self.name!r}, {self._map!r})"


class ReadOnlyView(ReadOnlyBroadcastState):
    """The non-broadcast side's view of a :class:`BroadcastMapState`: reads pass through, writes
    raise an InvalidProgramError that says where writes belong."""

    def __init__(self, state: BroadcastMapState):
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    def items(self) -> Iterable[tuple[Any, Any]]:
        return self._state.items()

    def keys(self) -> Iterable[Any]:
        return self._state.keys()

    def values(self) -> Iterable[Any]:
        return self._state.values()

    def is_empty(self) -> bool:
        return self._state.is_empty()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise InvalidProgramError(
            f"broadcast state {self._state.name!r} is read-only in process_element() and on_timer() "
            "(each parallel instance would change its own copy differently)",
            remedy="change broadcast state in process_broadcast_element(), which every instance runs for every broadcast record",
        )

    put = put_all = remove = clear = __setitem__ = __delitem__ = _refuse

    def __repr__(self) -> str:
        return f"ReadOnlyBroadcastState({self._state.name!r})"
