"""The broadcast state pattern's state, moved between the engine and Spark.

On the engine every subtask of a ``BroadcastProcessFunction`` or ``KeyedBroadcastProcessFunction``
keeps its own copy of the broadcast states, as operator state in mode "broadcast"
(:mod:`flinkpy.state.operator`), and the keyed one keeps its keyed state and timers by key
group in its keyed backend. On Spark the operator runs in one Spark group
(:mod:`flinkpy.spark.broadcast`) over the engine's heap backend, whose tables it keeps in the
map state :data:`KEYED_CELLS` (``(state, key group) -> pickled {key: value}``, timers among
them) and the broadcast states in :data:`BROADCAST_CELLS` (``(state, pickled key) -> pickled
value``).

engine -> Spark: one old subtask's copy of the broadcast states (:func:`~flinkpy.state.operator.broadcast_copies`,
the copy the engine's own restore gives subtask 0) and the keyed state in the runners' common
terms (:class:`~flinkpy.spark.keyed_move.KeyedStates`) become the rows of the group's
``initialState`` (:func:`initial_rows`), which ``BroadcastProcessor.handleInitialState``
writes into its two map states in the query's first batch.

Spark -> engine: :func:`from_spark` decodes the two map states' entries read back from
Spark's state store; the broadcast states become the engine's operator state of one old
subtask (:func:`engine_operator_state`), which every new subtask restores, and the keyed state
is written by key group as any keyed operator's.

>>> from flinkpy.spark.keyed_move import KeyedStates
>>> keyed = KeyedStates(states={"total": ("value", {"a": 5})}, event_timers={"a": {(99, None)}})
>>> rows = initial_rows(keyed, {"rules": {"factor": 3}}, b"")
>>> sorted((r.name, r.kind) for r in rows)
[('_timers.event', 'keyed-table'), ('rules', 'broadcast-entry'), ('total', 'keyed-table')]
>>> keyed_back, broadcast = from_spark([(r.name, pickle.loads(r.part), r.value) for r in rows if r.kind == KEYED_TABLE],
...     [(r.name, r.part, r.value) for r in rows if r.kind == BROADCAST_ENTRY], {"total": "value"})
>>> keyed_back == keyed, broadcast
(True, {'rules': {'factor': 3}})
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable, Mapping

from flinkpy.spark import keyed_move
from flinkpy.spark.keyed import one_group
from flinkpy.spark.keyed_move import InitialRow, KeyedStates

#: the broadcast operator's Spark map states (flinkpy.spark.broadcast.BroadcastProcessor)
KEYED_CELLS = "_flinkpy_keyed"
BROADCAST_CELLS = "_flinkpy_broadcast"
#: key groups of the keyed state in the one Spark group (the engine's default max parallelism)
MAX_PARALLELISM = 128
#: the kinds of the operator's initialState rows: a heap table of a key group, a broadcast state's entry
KEYED_TABLE, BROADCAST_ENTRY = "keyed-table", "broadcast-entry"


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


def initial_rows(keyed: KeyedStates | None, broadcast: Mapping[str, Mapping[Any, Any]], prefix: bytes) -> list[InitialRow]:
    """The ``initialState`` rows of a broadcast operator whose grouping keys start with
    ``prefix``: every row is the one group's. A keyed table's ``part`` is its pickled key
    group, a broadcast entry's its pickled key."""
    group = keyed_move.grouping_key(one_group(None), prefix)
    rows = []
    if keyed is not None and keyed.ttl:
        from flinkpy.errors import InvalidProgramError

        raise InvalidProgramError(
            f"a broadcast operator's keyed state with a time-to-live ({', '.join(sorted(keyed.ttl))}) does not move to Spark",
            remedy="give the state a new name, or keep the job on the engine")
    if keyed is not None:
        for name, entry in keyed_move.to_engine(keyed, MAX_PARALLELISM).items():
            rows.extend(InitialRow(group, name, KEYED_TABLE, _dumps(kg), _dumps(table))
                        for kg, table in sorted(entry["key_groups"].items()) if table)
    for name, items in broadcast.items():
        rows.extend(InitialRow(group, name, BROADCAST_ENTRY, _dumps(key), _dumps(value)) for key, value in items.items())
    return rows


def from_spark(keyed_cells: Iterable[tuple[str, int, bytes]], broadcast_cells: Iterable[tuple[str, bytes, bytes]],
               kinds: Mapping[str, str]) -> tuple[KeyedStates, dict[str, dict[Any, Any]]]:
    """(keyed state, broadcast states by name) of a broadcast operator from its Spark map
    states' entries: ``(state, key group, pickled table)`` and ``(state, pickled key, pickled
    value)``. ``kinds``: the engine's kind of each keyed state the function declares ("value"
    where unknown)."""
    states: dict[str, dict[str, Any]] = {}
    for name, kg, blob in keyed_cells:
        entry = states.setdefault(name, {"kind": kinds.get(name, "value"), "key_groups": {}})
        entry["key_groups"][int(kg)] = pickle.loads(blob)
    broadcast: dict[str, dict[Any, Any]] = {}
    for name, key, value in broadcast_cells:
        broadcast.setdefault(name, {})[pickle.loads(key)] = pickle.loads(value)
    return keyed_move.from_engine([{"states": states}]), broadcast


def engine_operator_state(broadcast: Mapping[str, Mapping[Any, Any]]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(the engine's operator-state file content, its `_metadata` summary) of one subtask that
    holds ``broadcast``: the engine's restore gives every new subtask this copy."""
    from flinkpy.state.operator import OperatorStateBackend

    backend = OperatorStateBackend()
    for name, items in broadcast.items():
        backend.get_broadcast_state(name).load(items)
    return {"functions": backend.snapshot()}, backend.summary()
