"""Keyed state of process functions and general-path windows, moved between the runners.

The engine keeps a keyed operator's state in its canonical document
(``{"states": {name: {"kind", "key_groups": {kg: {key: value}}}}}``, timers in the tables
``_timers.event`` / ``_timers.processing`` as ``{(key, namespace, timestamp): None}``). On Spark
the same operator keeps each state in a Spark state variable of the same name, scoped to the
grouping key (the pickled key, behind a two-byte operator index when several keyed operators
share a keyed depth), and its timers in one value state, ``_flinkpy_timers``
(:class:`~flinkpy.spark.state.SparkTimers`). :class:`KeyedStates` is what both have in common:
each state's values by user key, and each key's timers.

engine -> Spark: :func:`from_engine` reads the documents of every old subtask,
:func:`initial_rows` turns them into the rows of the ``initialState`` of
``transformWithStateInPandas`` (one per value, list element, map entry and key's timers), which
the processor writes in ``handleInitialState``, in the query's first batch only.

Spark -> engine: :func:`from_spark` decodes the rows Spark's state data source reads back,
:func:`to_engine` writes the canonical document, key groups by ``max_parallelism``, which the
engine restores at any parallelism.

>>> keyed = from_engine([{"version": 1, "states": {"seen": {"kind": "list", "key_groups": {3: {"a": [1, 2]}}},
...     "_timers.event": {"kind": "value", "key_groups": {3: {("a", None, 10): None}}}}}])
>>> keyed.states, keyed.event_timers
({'seen': ('list', {'a': [1, 2]})}, {'a': {(10, None)}})
>>> [(r.name, r.kind) for r in initial_rows(keyed, b"")]
[('seen', 'list'), ('_flinkpy_timers', 'timers')]
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping


#: the engine's timer tables (flinkpy.task.timers) and SparkTimers' state variable
EVENT_TIMERS, PROCESSING_TIMERS = "_timers.event", "_timers.processing"
SPARK_TIMERS = "_flinkpy_timers"
#: states a function declares after open() on Spark: entries of this map (SparkKeyedBackend.LATE)
LATE_STATES = "_flinkpy_late_states"
#: the processor's own bookkeeping on Spark, not a state of the operator
SPARK_ONLY = frozenset({"_flinkpy_final_rows"})
#: the initialState rows of transformWithStateInPandas (grouped by ``key``, as the input)
INITIAL_DDL = "key binary, name string, kind string, part binary, value binary"
TIMERS_KIND = "timers"


@dataclass
class KeyedStates:
    """One keyed operator's state by user key, in the runners' common terms.

    ``states``: name -> (kind, {key: value}); a list state's value is its list, a map state's
    the dict of its entries, a reducing or aggregating state's its folded value or accumulator.
    A state with a time-to-live keeps its stored form, each value with its last-access timestamp
    (:mod:`flinkpy.state.ttl`): both runners store it so, and the timestamps move unchanged, so
    an expired value stays expired and a live one keeps its remaining time (as Flink's restore).
    Timers: {key: {(timestamp, namespace)}} per time domain.
    """

    states: dict[str, tuple[str, dict[Any, Any]]] = field(default_factory=dict)
    #: the time-to-live (ms) of each state that has one: its values are the TTL wrapper's
    #: ``(value, last access)`` pairs (per list element and map entry), the same on both runners
    ttl: dict[str, int] = field(default_factory=dict)
    #: states Spark kept in its late states' map (declared after open(), as a window trigger's
    #: are), where it does not record whether they have a time-to-live: the engine's restore
    #: says so rather than take them for states without one (``"ttl_unknown"`` in its document)
    ttl_unknown: set[str] = field(default_factory=set)
    event_timers: dict[Any, set[tuple[int, Any]]] = field(default_factory=dict)
    processing_timers: dict[Any, set[tuple[int, Any]]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not any(values for _, values in self.states.values()) and not self.event_timers and not self.processing_timers


@dataclass(frozen=True)
class InitialRow:
    """One row of a moved operator's ``initialState`` on Spark (:data:`INITIAL_DDL`)."""

    key: bytes
    name: str
    kind: str
    #: a map entry's pickled key
    part: bytes | None
    #: the pickled value; a list's pickled elements pickled as one list (Spark hands a key's
    #: initial rows over in chunks, in no order, and a list's order must hold)
    value: bytes

    def astuple(self) -> tuple[bytes, str, str, bytes | None, bytes]:
        return (self.key, self.name, self.kind, self.part, self.value)


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


def grouping_key(key: Any, prefix: bytes = b"") -> bytes:
    """A user key as the chain before a keyed operator groups it on Spark (levels.py, chain.py)."""
    return prefix + _dumps(key)


def from_engine(documents: Iterable[Mapping[str, Any]], *, operator: str = "") -> KeyedStates:
    """The keyed state of one operator from the canonical documents of its old subtasks."""
    out = KeyedStates()
    for doc in documents:
        for name, entry in (doc.get("states") or {}).items():
            groups = entry.get("key_groups") or {}
            if name in (EVENT_TIMERS, PROCESSING_TIMERS):
                timers = out.event_timers if name == EVENT_TIMERS else out.processing_timers
                for table in groups.values():
                    for key, namespace, ts in table:
                        timers.setdefault(key, set()).add((int(ts), namespace))
                continue
            if entry.get("ttl_ms") is not None:
                out.ttl[name] = int(entry["ttl_ms"])
            elif entry.get("ttl_unknown"):
                out.ttl_unknown.add(name)
            kind = entry.get("kind", "value")
            values = out.states.setdefault(name, (kind, {}))[1]
            for table in groups.values():
                values.update(table)
    return out


def initial_rows(keyed: KeyedStates, prefix: bytes) -> list[InitialRow]:
    """The ``initialState`` rows of ``keyed`` for an operator whose grouping keys start with ``prefix``."""
    rows: list[InitialRow] = []
    for name, (kind, values) in keyed.states.items():
        for key, value in values.items():
            k = grouping_key(key, prefix)
            if kind == "list":
                if value:
                    rows.append(InitialRow(k, name, kind, None, _dumps([_dumps(v) for v in value])))
            elif kind == "map":
                rows.extend(InitialRow(k, name, kind, _dumps(mk), _dumps(mv)) for mk, mv in value.items())
            elif value is not None:
                rows.append(InitialRow(k, name, kind, None, _dumps(value)))
    for key in set(keyed.event_timers) | set(keyed.processing_timers):
        event, processing = keyed.event_timers.get(key, set()), keyed.processing_timers.get(key, set())
        rows.append(InitialRow(grouping_key(key, prefix), SPARK_TIMERS, TIMERS_KIND, None, _dumps((set(event), set(processing)))))
    return rows


def timer_sets(stored: Any) -> tuple[set[tuple[int, Any]], set[tuple[int, Any]]]:
    """(event-time, processing-time) timers of a key as SparkTimers stores them (a set of
    event-time timers, or a pair of sets once it has processing-time ones)."""
    if isinstance(stored, tuple):
        return set(stored[0]), set(stored[1])
    return set(stored or ()), set()


def from_spark(kinds: Mapping[str, str], values: Mapping[str, Iterable[tuple[bytes, Any]]], *, prefix: bytes = b"",
               ttl: Mapping[str, int] | None = None) -> KeyedStates:
    """The keyed state of one operator read back from Spark's state store.

    ``values``: per Spark state variable (the operator's prefix removed), its rows as (grouping
    key, decoded payload): a value state's pickled value, a list state's pickled elements, a map
    state's (pickled key, pickled value) entries; the late states' map holds (name, pickled
    value) entries, and ``_flinkpy_timers`` the key's timers. ``kinds``: the engine's kind of
    each state (its descriptor), "value" where unknown; ``ttl``: the time-to-live (ms) of the
    states that have one (their values are already the TTL wrapper's pairs, moved unchanged),
    known for those declared in open() only: a late state's TTL is unknown (``ttl_unknown``).
    """
    out = KeyedStates(ttl={name: int(ms) for name, ms in (ttl or {}).items()})

    def user_key(grouping: bytes) -> Any:
        if prefix and grouping[: len(prefix)] != prefix:
            raise ValueError(f"grouping key {grouping!r} lacks the operator's prefix {prefix!r}")
        return pickle.loads(grouping[len(prefix):])

    for name, rows in values.items():
        if name in SPARK_ONLY:
            continue
        for grouping, payload in rows:
            key = user_key(grouping)
            if name == SPARK_TIMERS:
                event, processing = timer_sets(pickle.loads(payload))
                if event:
                    out.event_timers.setdefault(key, set()).update(event)
                if processing:
                    out.processing_timers.setdefault(key, set()).update(processing)
            elif name == LATE_STATES:
                late, blob = payload
                out.states.setdefault(late, (kinds.get(late, "value"), {}))[1][key] = pickle.loads(blob)
                if late not in out.ttl:
                    out.ttl_unknown.add(late)
            else:
                kind = kinds.get(name, "value")
                table = out.states.setdefault(name, (kind, {}))[1]
                if kind == "list":
                    table[key] = [pickle.loads(b) for b in payload]
                elif kind == "map":
                    table[key] = {pickle.loads(k): pickle.loads(v) for k, v in payload}
                else:
                    table[key] = pickle.loads(payload)
    return out


def to_engine(keyed: KeyedStates, max_parallelism: int) -> dict[str, dict[str, Any]]:
    """The ``states`` of the engine's canonical document of ``keyed`` (every key group)."""
    from flinkpy.state.key_groups import assign_to_key_group

    states: dict[str, dict[str, Any]] = {}
    for name, (kind, values) in keyed.states.items():
        groups: dict[int, dict[Any, Any]] = {}
        for key, value in values.items():
            groups.setdefault(assign_to_key_group(key, max_parallelism), {})[key] = value
        states[name] = {"kind": kind, "key_groups": groups}
        if name in keyed.ttl:
            states[name]["ttl_ms"] = keyed.ttl[name]
        elif name in keyed.ttl_unknown:
            states[name]["ttl_unknown"] = True
    for name, timers in ((EVENT_TIMERS, keyed.event_timers), (PROCESSING_TIMERS, keyed.processing_timers)):
        groups = {}
        for key, entries in timers.items():
            table = groups.setdefault(assign_to_key_group(key, max_parallelism), {})
            for ts, namespace in entries:
                table[(key, namespace, ts)] = None
        if groups:
            states[name] = {"kind": "value", "key_groups": groups}
    return states
