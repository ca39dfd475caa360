"""Keyed state scoped to a window: the namespaced states window operators keep per key.

A trigger's state and a ProcessWindowFunction's per-window state live in one backend value
state per descriptor, whose value is ``{namespace: raw}``, so checkpoints, restores and
rescaling carry them like any other keyed state (see :mod:`flinkpy.task.window_operator`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from flinkpy.common.state import ValueStateDescriptor
from flinkpy.errors import InvalidProgramError


class _NamespacedState:
    """One state of the current key and one namespace, kept in a backend value state whose
    value is ``{namespace: raw}``. Every change is written back with ``update()``: a value read
    from the RocksDB backend is a private copy (the heap backend hands out its own dict, which
    it copies before the first write after a snapshot)."""

    __slots__ = ("_cell", "_ns", "_descriptor")

    def __init__(self, cell: Any, namespace: Any, descriptor: Any) -> None:
        self._cell = cell
        self._ns = namespace
        self._descriptor = descriptor

    def _raw(self) -> Any:
        d = self._cell.value()
        return None if d is None else d.get(self._ns)

    def _set(self, raw: Any) -> None:
        d = self._cell.value()
        if raw is None:
            if d is not None and self._ns in d:
                del d[self._ns]
                self._cell.update(d or None)
        elif d is None:
            self._cell.update({self._ns: raw})
        else:
            d[self._ns] = raw
            self._cell.update(d)

    def clear(self) -> None:
        self._set(None)


class _NsValueState(_NamespacedState):
    __slots__ = ()

    def value(self) -> Any:
        return self._raw()

    def update(self, value: Any) -> None:
        self._set(value)


class _NsListState(_NamespacedState):
    __slots__ = ()

    def get(self) -> list:
        return list(self._raw() or ())

    def __iter__(self) -> Any:
        return iter(self.get())

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if any(v is None for v in values):
            raise ValueError(f"cannot add None to list state {self._descriptor.name!r}")
        if values:
            self._set((self._raw() or []) + values)

    def update(self, values: Iterable[Any]) -> None:
        self._set(list(values or ()) or None)


class _NsMapState(_NamespacedState):
    __slots__ = ()

    def _map(self) -> dict:
        return self._raw() or {}

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def put(self, key: Any, value: Any) -> None:
        self.put_all({key: value})

    def put_all(self, dict_value: Any) -> None:
        m = dict(self._map())
        m.update(dict_value)
        self._set(m or None)

    def remove(self, key: Any) -> None:
        m = dict(self._map())
        m.pop(key, None)
        self._set(m or None)

    def contains(self, key: Any) -> bool:
        return key in self._map()

    __contains__ = contains

    def items(self) -> list:
        return list(self._map().items())

    def keys(self) -> list:
        return list(self._map().keys())

    def values(self) -> list:
        return list(self._map().values())

    def is_empty(self) -> bool:
        return not self._map()

    def __iter__(self) -> Any:
        return iter(self.keys())


class _NsReducingState(_NamespacedState):
    __slots__ = ()

    def get(self) -> Any:
        return self._raw()

    def add(self, value: Any) -> None:
        current = self._raw()
        self._set(value if current is None else self._descriptor.reduce(current, value))


class _NsAggregatingState(_NamespacedState):
    __slots__ = ()

    def get(self) -> Any:
        acc = self._raw()
        return None if acc is None else self._descriptor.agg_function.get_result(acc)

    def add(self, value: Any) -> None:
        agg = self._descriptor.agg_function
        acc = self._raw()
        self._set(agg.add(value, agg.create_accumulator() if acc is None else acc))


_VIEWS = {
    "value": _NsValueState,
    "list": _NsListState,
    "map": _NsMapState,
    "reducing": _NsReducingState,
    "aggregating": _NsAggregatingState,
}


class NamespacedStates:
    """Keyed states scoped to a namespace (a window), over value states of a keyed backend."""

    def __init__(self, backend: Any, prefix: str) -> None:
        self._backend = backend
        self._prefix = prefix
        self._cells: dict[str, tuple[Any, str]] = {}

    def _cell(self, descriptor: Any) -> Any:
        entry = self._cells.get(descriptor.name)
        if entry is None:
            cell = self._backend.get_partitioned_state(ValueStateDescriptor(self._prefix + descriptor.name))
            entry = self._cells[descriptor.name] = (cell, descriptor.kind)
        elif entry[1] != descriptor.kind:
            raise InvalidProgramError(
                f"window state {descriptor.name!r} is already {entry[1]} state and cannot be used as {descriptor.kind} state",
                remedy="give each state its own name",
            )
        return entry[0]

    def state(self, descriptor: Any, namespace: Any) -> Any:
        view = _VIEWS.get(descriptor.kind)
        if view is None:
            raise InvalidProgramError(f"{type(descriptor).__name__} is not a keyed state descriptor")
        return view(self._cell(descriptor), namespace, descriptor)

    def merge(self, descriptor: Any, target: Any, sources: Iterable[Any]) -> None:
        """Fold the state of ``sources`` into ``target`` and clear the sources."""
        cell = self._cell(descriptor)
        d = cell.value()
        if not d:
            return
        kind = descriptor.kind
        acc = d.get(target)
        for ns in sources:
            if ns == target or ns not in d:
                continue
            raw = d.pop(ns)
            if acc is None:
                acc = raw
            elif kind == "list":
                acc = acc + raw
            elif kind == "reducing":
                acc = descriptor.reduce(acc, raw)
            elif kind == "aggregating":
                acc = descriptor.agg_function.merge(acc, raw)
            elif kind == "map":
                acc = {**acc, **raw}
            else:
                raise InvalidProgramError(
                    f"{kind} state {descriptor.name!r} cannot be merged",
                    remedy="use list, reducing, aggregating or map state in triggers of merging windows",
                )
        if acc is not None:
            d[target] = acc
        cell.update(d or None)


class StateStore:
    """What ``window_state()`` and ``global_state()`` return: PyFlink's KeyedStateStore."""

    def __init__(self, get: Callable[[Any], Any]) -> None:
        self._get = get

    def get_state(self, state_descriptor: Any) -> Any:
        return self._get(state_descriptor)

    get_list_state = get_map_state = get_reducing_state = get_aggregating_state = get_state
