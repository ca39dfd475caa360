"""The heap keyed state backend: keyed state in Python dicts, organised by key group.

For each state name the backend keeps a *table* ``{key_group: {key: value}}``. Grouping by key
group is what makes rescaling possible: a snapshot lists its key groups, and a backend restored
at another parallelism keeps exactly the groups of its own range.

The engine sets the current key before calling the user function; state objects then read and
write the entry of that key. Setting the key points every registered state at its table's dict
for the key's group, so ``ValueState.value()`` is one dict lookup.

>>> from flinkpy.datastream.state import ValueStateDescriptor
>>> backend = HeapKeyedStateBackend(128, range(0, 128))
>>> count = backend.get_partitioned_state(ValueStateDescriptor("count"))
>>> backend.set_current_key("a")
>>> count.update((count.value() or 0) + 1)
>>> count.value(), backend.num_keys()
(1, 1)
>>> restored = HeapKeyedStateBackend(128, range(0, 128))
>>> restored.restore([backend.snapshot()])
>>> restored.set_current_key("a")
>>> restored.get_partitioned_state(ValueStateDescriptor("count")).value()
1
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain
from typing import Any

from flinkpy.common.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    MapState,
    ReducingState,
    ReducingStateDescriptor,
    State,
    StateDescriptor,
    ValueState,
)
from flinkpy.state.backend import (
    KINDS,
    NO_KEY,
    SNAPSHOT_VERSION,
    KeyedStateBackendBase,
    no_current_key,
)


#: the tables the engine keeps keyed timers in (flinkpy.task.timers), next to the user's states
TIMER_EVENT_TABLE = "_timers.event"
TIMER_PROCESSING_TABLE = "_timers.processing"

#: A table of one state: key group -> {key: value}.
Table = dict[int, dict[Any, Any]]


class _NoCurrentKey(dict):
    """Stands in for the current key group's dict before a key is set.

    Every access raises, so the hot path needs no "is a key set?" check.
    """

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise no_current_key()

    get = __getitem__ = __setitem__ = __delitem__ = __contains__ = pop = setdefault = _fail


_NO_KEY_MAP = _NoCurrentKey()
_NO_KEY: Any = NO_KEY


class _HeapState:
    """Shared plumbing of the heap state objects: the table and the current key's dict."""

    __slots__ = ("name", "table", "_map", "_key", "_frozen", "_thaw")

    def __init__(self, name: str, table: Table) -> None:
        self.name = name
        self.table = table
        self._map: dict[Any, Any] = _NO_KEY_MAP
        self._key: Any = _NO_KEY
        #: key groups shared with a snapshot being written (copy before touching them)
        self._frozen: set[int] = set()
        self._thaw: Any = None

    def _bind(self, key: Any, key_group: int) -> None:
        m = self.table.get(key_group)
        if m is None:
            m = self.table[key_group] = {}
        elif self._frozen and key_group in self._frozen:
            m = self._thaw(self.name, key_group)
        self._map = m
        self._key = key

    def _unbind(self) -> None:
        self._map = _NO_KEY_MAP
        self._key = _NO_KEY

    def clear(self) -> None:
        self._map.pop(self._key, None)


class HeapValueState(_HeapState, ValueState):
    __slots__ = ()

    def value(self) -> Any:
        return self._map.get(self._key)

    def update(self, value: Any) -> None:
        if value is None:
            self._map.pop(self._key, None)
        else:
            self._map[self._key] = value


class HeapListState(_HeapState, ListState):
    __slots__ = ()

    def get(self) -> list[Any]:
        # A copy: the caller may iterate while adding, and snapshots must not see later adds.
        stored = self._map.get(self._key)
        return list(stored) if stored else []

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"cannot add None to list state {self.name!r}")
        stored = self._map.get(self._key)
        if stored is None:
            self._map[self._key] = [value]
        else:
            stored.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if not values:
            return
        if any(v is None for v in values):
            raise ValueError(f"cannot add None to list state {self.name!r}")
        stored = self._map.get(self._key)
        if stored is None:
            self._map[self._key] = values
        else:
            stored.extend(values)

    def update(self, values: Iterable[Any]) -> None:
        values = list(values) if values is not None else []
        if not values:
            self._map.pop(self._key, None)
            return
        if any(v is None for v in values):
            raise ValueError(f"cannot add None to list state {self.name!r}")
        self._map[self._key] = values


class HeapMapState(_HeapState, MapState):
    __slots__ = ()

    def _user_map(self) -> dict[Any, Any]:
        return self._map.get(self._key) or {}

    def get(self, key: Any) -> Any:
        stored = self._map.get(self._key)
        return None if stored is None else stored.get(key)

    def put(self, key: Any, value: Any) -> None:
        stored = self._map.get(self._key)
        if stored is None:
            self._map[self._key] = {key: value}
        else:
            stored[key] = value

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        if not dict_value:
            return
        stored = self._map.get(self._key)
        if stored is None:
            self._map[self._key] = dict(dict_value)
        else:
            stored.update(dict_value)

    def remove(self, key: Any) -> None:
        stored = self._map.get(self._key)
        if stored is not None:
            stored.pop(key, None)
            if not stored:  # an empty map is no state: the key disappears
                del self._map[self._key]

    def contains(self, key: Any) -> bool:
        stored = self._map.get(self._key)
        return stored is not None and key in stored

    def keys(self) -> Iterable[Any]:
        return list(self._user_map().keys())

    def values(self) -> Iterable[Any]:
        return list(self._user_map().values())

    def items(self) -> Iterable[tuple[Any, Any]]:
        return list(self._user_map().items())

    def is_empty(self) -> bool:
        return not self._map.get(self._key)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._user_map()))


class HeapReducingState(_HeapState, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(self, name: str, table: Table, descriptor: ReducingStateDescriptor) -> None:
        super().__init__(name, table)
        self._reduce = descriptor.reduce

    def get(self) -> Any:
        return self._map.get(self._key)

    def add(self, value: Any) -> None:
        m, k = self._map, self._key
        current = m.get(k)
        m[k] = value if current is None else self._reduce(current, value)


class HeapAggregatingState(_HeapState, AggregatingState):
    __slots__ = ("_agg",)

    def __init__(self, name: str, table: Table, descriptor: AggregatingStateDescriptor) -> None:
        super().__init__(name, table)
        self._agg = descriptor.agg_function

    def get(self) -> Any:
        m = self._map
        if self._key not in m:
            return None
        return self._agg.get_result(m[self._key])

    def add(self, value: Any) -> None:
        m, k = self._map, self._key
        acc = m[k] if k in m else self._agg.create_accumulator()
        m[k] = self._agg.add(value, acc)


_STATE_CLASSES: dict[str, type[_HeapState]] = {
    "value": HeapValueState,
    "list": HeapListState,
    "map": HeapMapState,
    "reducing": HeapReducingState,
    "aggregating": HeapAggregatingState,
}


class HeapKeyedStateBackend(KeyedStateBackendBase):
    """Keyed state of one subtask: the key groups in ``key_group_range`` of ``max_parallelism``.

    Not thread-safe: the task's processing thread owns it. ``snapshot()`` copies the tables'
    containers (and the lists and maps of list and map state), so records may be processed
    while the copy is written out; values of value, reducing and aggregating state are shared,
    so user code must not mutate a value in place after ``update()`` if it relies on
    asynchronous snapshots — pickle the snapshot before processing the next record to be safe.
    """

    def __init__(self, max_parallelism: int, key_group_range: range) -> None:
        super().__init__(max_parallelism, key_group_range)
        self._tables: dict[str, Table] = {}
        self._frozen: dict[str, set[int]] = {}
        self._bound: list[_HeapState] = []
        self._views: list[Any] = []

    # -- current key --------------------------------------------------------------------
    def set_current_key_and_group(self, key: Any, key_group: int) -> None:
        """Fast path for callers that already know the key group (it is not checked)."""
        self._current_key = key
        self._current_group = key_group
        for state in self._bound:
            state._bind(key, key_group)
        if self._record_cleaners:
            for cleaner in self._record_cleaners:
                cleaner.step()

    def rebind(self) -> None:
        """Point the state objects at the current key's dicts again (after a thaw elsewhere)."""
        if self._current_key is not _NO_KEY:
            for state in self._bound:
                state._bind(self._current_key, self._current_group)  # type: ignore[arg-type]

    def clear_current_key(self) -> None:
        """Forget the current key: further state access raises until a key is set."""
        self._current_key = _NO_KEY
        self._current_group = None
        for state in self._bound:
            state._unbind()

    # -- states -------------------------------------------------------------------------
    def _new_state(self, name: str, kind: str, descriptor: StateDescriptor) -> _HeapState:
        table = self.table(name)
        cls = _STATE_CLASSES[kind]
        if kind in ("reducing", "aggregating"):
            state = cls(name, table, descriptor)  # type: ignore[call-arg]
        else:
            state = cls(name, table)
        state._frozen = self.frozen(name)
        state._thaw = self.thaw
        if self._current_key is not _NO_KEY:
            state._bind(self._current_key, self._current_group)  # type: ignore[arg-type]
        self._bound.append(state)
        return state

    def table(self, state_name: str) -> Table:
        """The raw table of ``state_name`` (key group -> {key: value}), for engine fast paths."""
        t = self._tables.get(state_name)
        if t is None:
            t = self._tables[state_name] = {}
        return t

    def frozen(self, state_name: str) -> set[int]:
        """The key groups of ``state_name`` that an in-flight snapshot still reads.

        Writers (state objects, the engine's fast paths) must call :meth:`thaw` before they
        modify the dict of a key group in this set.
        """
        f = self._frozen.get(state_name)
        if f is None:
            f = self._frozen[state_name] = set()
        return f

    def thaw(self, state_name: str, key_group: int) -> dict[Any, Any]:
        """Copy-on-write: give ``key_group`` of ``state_name`` a private copy of its dict.

        The snapshot keeps the old dict. Containers of list and map state are copied, and values
        that are not known to be immutable are deep-copied, so that no later write — not even
        the mutation in place of a value object — can reach what the snapshot is writing out.
        """
        t = self.table(state_name)
        old = t[key_group]
        kind = self._kinds.get(state_name, "value")
        copy_value = _COPY_VALUE.get(kind)
        new = {k: copy_value(v) for k, v in old.items()} if copy_value is not None else writable_copy(old)
        t[key_group] = new
        self.frozen(state_name).discard(key_group)
        return new

    def attach_view(self, view: Any) -> None:
        """Let an operator keep value states in a layout of its own (the sliced windows keep
        theirs by time, then key). At every snapshot ``view.freeze()`` returns ``{state name:
        key groups}``, where key groups map key group -> {key: value}; that mapping may be
        computed when it is first read, on the snapshot's thread, so it must not share anything
        the task thread changes afterwards. A view's state replaces the table of that name."""
        self._views.append(view)

    def _frozen_views(self) -> dict[str, Mapping[int, dict[Any, Any]]]:
        frozen: dict[str, Mapping[int, dict[Any, Any]]] = {}
        for view in self._views:
            frozen.update(view.freeze())
        return frozen

    def snapshot_sync(self) -> "FrozenSnapshot":
        """The synchronous part of an asynchronous snapshot: O(number of key groups).

        It copies only the tables' outer maps and marks every key group as shared; writes that
        follow copy a key group's dict first (:meth:`thaw`). The returned object is then
        serialized by :meth:`FrozenSnapshot.serialize`, on another thread, while records flow.
        """
        frozen: dict[str, tuple[str, Any]] = {name: ("value", groups) for name, groups in self._frozen_views().items()}
        for name, t in self._tables.items():
            if name in frozen:
                continue
            frozen[name] = (self._kinds.get(name, "value"), dict(t))
            self.frozen(name).update(t)
        ttl = {name: (policy, self.ttl_clock()) for name, policy in self._ttl.items()}
        return FrozenSnapshot(frozen, self.key_group_range, ttl, self.undeclared_ttl())

    def state_names(self) -> list[str]:
        names = list(self._tables)
        return names + [name for view in self._views for name in view.names if name not in names]

    def num_keys(self) -> int:
        """The number of distinct keys that have any state."""
        keys: set[Any] = set()
        for t in self._tables.values():
            for m in t.values():
                keys.update(m)
        return len(keys)

    def num_entries(self) -> int:
        """The number of (state, key) entries, a cheap size measure."""
        return sum(len(m) for t in self._tables.values() for m in t.values())

    # -- snapshots ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """A picklable copy of all state, by key group; empty key groups are left out.

        ``{"version": 1, "states": {name: {"kind": ..., "key_groups": {kg: {key: value}}}}}``
        """
        states: dict[str, Any] = {}
        undeclared = self.undeclared_ttl()
        for name, groups in self._frozen_views().items():
            states[name] = ttl_entry("value", {kg: dict(m) for kg, m in groups.items() if m}, None, self.ttl_clock)
        for name, t in self._tables.items():
            if name in states:
                continue
            kind = self._kinds.get(name, "value")
            copy_value = _COPY_VALUE.get(kind)
            groups: dict[int, dict[Any, Any]] = {}
            for kg, m in t.items():
                if not m:
                    continue
                if copy_value is None:
                    groups[kg] = dict(m)
                else:
                    groups[kg] = {k: copy_value(v) for k, v in m.items()}
            states[name] = {**ttl_entry(kind, groups, self._ttl.get(name), self.ttl_clock), **undeclared.get(name, {})}
        return {"version": SNAPSHOT_VERSION, "states": states}

    def restore_frames(self, states: Mapping[str, Mapping[str, Any]], frames: Iterable[tuple[str, int, list[tuple[Any, Any]]]]) -> None:
        kinds = {}
        for name, entry in states.items():
            kinds[name] = self._check_restored(name, entry)
            self.table(name)  # a restored state is known even with no key in this range
        for name, kg, entries in frames:
            if kg not in self.key_group_range or not entries:
                continue
            t = self.table(name)
            target = t.get(kg)
            if target is None:
                target = t[kg] = {}
            copy_value = _COPY_VALUE.get(kinds[name])
            if copy_value is None:
                target.update(entries)
            else:
                target.update((k, copy_value(v)) for k, v in entries)
        # Re-point bound states at their (possibly new) key group dicts.
        if self._current_key is not _NO_KEY:
            self.set_current_key_and_group(self._current_key, self._current_group)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"HeapKeyedStateBackend({self._range_text()}, states={sorted(self._tables)})"


def ttl_entry(kind: str, groups: dict[int, dict[Any, Any]], policy: Any, clock: Any) -> dict[str, Any]:
    """A state's snapshot entry; with a TTL policy it records the TTL and, when the policy asks
    for it, leaves the expired values out (full-snapshot cleanup)."""
    if policy is None:
        return {"kind": kind, "key_groups": groups}
    if policy.full_snapshot:
        from flinkpy.state.ttl import drop_expired

        groups = drop_expired(kind, groups, policy, clock())
    return {"kind": kind, "key_groups": groups, "ttl_ms": policy.ttl_ms}


_COPY_VALUE = {"list": list, "map": dict}
#: value types whose objects cannot change after they are stored
_IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None), complex, frozenset})
_IMMUTABLE_OR_TUPLE = _IMMUTABLE | {tuple}


def writable_copy(m: dict[Any, Any]) -> dict[Any, Any]:
    """A copy of ``m`` that can be written while a snapshot reads ``m``: values not known to be
    immutable are deep-copied, so not even a change in place of a value object reaches ``m``."""
    if _all_immutable(m.values()):
        return dict(m)
    return {k: v if _immutable(v) else copy.deepcopy(v) for k, v in m.items()}


def _all_immutable(values: Any) -> bool:
    """``all(_immutable(v) for v in values)``, by the set of the values' types (and of the
    tuples' items' types) taken at C speed: it runs at every snapshot over every key's value."""
    kinds = set(map(type, values))
    if kinds <= _IMMUTABLE:
        return True
    if not kinds <= _IMMUTABLE_OR_TUPLE:
        return False
    items = chain.from_iterable(v for v in values if type(v) is tuple)
    return set(map(type, items)) <= _IMMUTABLE


def _immutable(value: Any) -> bool:
    t = type(value)
    if t in _IMMUTABLE:
        return True
    return t is tuple and all(type(x) in _IMMUTABLE for x in value)


class FrozenSnapshot:
    """What :meth:`HeapKeyedStateBackend.snapshot_sync` hands to the asynchronous part."""

    def __init__(self, states: dict[str, tuple[str, dict[int, dict[Any, Any]]]], key_group_range: range, ttl: dict[str, tuple[Any, int]] | None = None,
                 undeclared: dict[str, dict[str, Any]] | None = None):
        self.states = states
        self.key_group_range = key_group_range
        #: time-to-live policies of states, with the time of the snapshot (full-snapshot cleanup)
        self.ttl = ttl or {}
        #: what restored snapshots said of the TTL of states not declared since (backend.undeclared_ttl)
        self.undeclared = undeclared or {}

    def to_dict(self) -> dict[str, Any]:
        """The same document :meth:`HeapKeyedStateBackend.snapshot` returns (empty groups left out)."""
        states = {}
        for name, (kind, groups) in self.states.items():
            policy, now = self.ttl.get(name, (None, 0))
            states[name] = {**ttl_entry(kind, {kg: m for kg, m in groups.items() if m}, policy, lambda: now), **self.undeclared.get(name, {})}
        return {"version": SNAPSHOT_VERSION, "states": states}

    def write(self, out: Any) -> dict[str, int]:
        """Write the canonical file (flinkpy.state.canonical) to ``out``; return each state's key count."""
        from flinkpy.state.canonical import write_document

        return write_document(out, self.to_dict())

    def serialize(self) -> bytes:
        import io

        out = io.BytesIO()
        self.write(out)
        return out.getvalue()

    def summary(self) -> dict[str, dict[str, Any]]:
        """Each state's kind, entry count and, with a time-to-live, its TTL (``ttl_ms``: what a
        move between runners checks against the job before anything starts)."""
        out: dict[str, dict[str, Any]] = {}
        for name, (kind, groups) in self.states.items():
            out[name] = {"kind": kind, "entries": sum(len(m) for m in groups.values())}
            policy = self.ttl.get(name, (None, 0))[0]
            if policy is not None:
                out[name]["ttl_ms"] = policy.ttl_ms
            out[name].update(self.undeclared.get(name, {}))
        return out

    @property
    def empty(self) -> bool:
        return not any(m for _, groups in self.states.values() for m in groups.values())
