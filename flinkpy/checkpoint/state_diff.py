"""Comparing the state of two snapshots key by key: what ``flinkpy state diff A B`` reports.

:func:`diff` reads two checkpoints or savepoints (any fsspec URL; a directory or its
`_metadata`) with the reader of :mod:`flinkpy.checkpoint.analysis` (files verified first,
pickles decoded by the restricted unpickler unless ``trusted``), matches their operators by
operator id (the uid, or the generated id, as a restore does) and, for every keyed state,
compares the keys themselves: a key is *added* (only in B), *removed* (only in A), *changed*
(its value differs) or *unchanged*. Keys are compared as decoded values, never by file or key
group, so snapshots of different parallelism or max parallelism compare as well as two of the
same. Values are equal when ``==`` says so or when they pickle to the same bytes (objects
without ``__eq__``). Operator (non-keyed) state is compared per operator and state name, its
items over all subtasks taken as a multiset.

It also ranks the states that grew most (bytes in B minus bytes in A, ``bytes`` measured as
:mod:`flinkpy.checkpoint.analysis` does) and the keys that grew most.

Memory: one operator's keyed state of A is held while B's files of that operator are read.

>>> import tempfile
>>> from flinkpy.checkpoint import CheckpointStorage, keyed_state, new_metadata, new_operator, new_subtask
>>> from flinkpy.state.heap import HeapKeyedStateBackend
>>> from flinkpy.datastream.state import ValueStateDescriptor
>>> def snapshot(cid, values):
...     backend = HeapKeyedStateBackend(128, range(0, 128))
...     count = backend.get_partitioned_state(ValueStateDescriptor("count", None))
...     for key, n in values.items():
...         backend.set_current_key(key)
...         count.update(n)
...     frozen = backend.snapshot_sync()
...     handle = storage.write_state("job", cid, "sums-0-keyed", frozen.serialize())
...     op = new_operator(operator_id="sums", uid="sums", name="sums", vertex_id=1, parallelism=1,
...         max_parallelism=128, subtasks=[new_subtask(0, keyed_state=keyed_state(handle, (0, 127), frozen.summary()))])
...     storage.write_metadata("job", cid, new_metadata(job_id="job", job_name="demo", checkpoint_id=cid,
...         trigger_timestamp=1, completion_timestamp=2, operators=[op]))
...     return storage.checkpoint_dir("job", cid)
>>> storage = CheckpointStorage(tempfile.mkdtemp())
>>> result = diff(snapshot(1, {"a": 1, "b": 2}), snapshot(2, {"b": 3, "c": 4}))
>>> st = result["operators"][0]["states"][0]
>>> st["name"], st["added"], st["removed"], st["changed"], st["unchanged"], result["identical"]
('count', 1, 1, 1, 0, False)
"""

from __future__ import annotations

import heapq
import itertools
import pickle
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from flinkpy.checkpoint.analysis import (
    StateFileReader,
    key_repr,
    keyed_values,
    not_restorable,
    operator_state_values,
)
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.errors import NotFoundError, UsageError

_PROTOCOL = 5

#: what happened to a key between A and B
ADDED, REMOVED, CHANGED, UNCHANGED = "added", "removed", "changed", "unchanged"


def _size(obj: Any) -> int:
    return len(pickle.dumps(obj, protocol=_PROTOCOL))


def same_value(a: Any, b: Any) -> bool:
    """Equal by ``==``, or (for objects compared by identity) by their pickled bytes.

    >>> same_value({"x": [1, 2]}, {"x": [1, 2]}), same_value(1, 2)
    (True, False)
    """
    try:
        if a == b:
            return True
    except Exception:  # noqa: BLE001 - a value whose __eq__ raises: fall back to its bytes
        pass
    try:
        return pickle.dumps(a, protocol=_PROTOCOL) == pickle.dumps(b, protocol=_PROTOCOL)
    except Exception:  # noqa: BLE001 - cannot be pickled again: compared by == alone
        return False


@dataclass
class _Snapshot:
    """One verified snapshot and the reader of its files."""

    path: str
    metadata: dict[str, Any]
    reader: StateFileReader

    def header(self) -> dict[str, Any]:
        m = self.metadata
        return {"path": self.path, "job_id": m["job_id"], "job_name": m["job_name"], "checkpoint_id": m["checkpoint_id"],
                "kind": m["kind"], "max_parallelism": m["max_parallelism"]}


def _open(path: str, storage_options: Mapping[str, Any] | None, trusted: bool) -> _Snapshot:
    storage = CheckpointStorage(path, storage_options=storage_options)
    report = storage.verify(path)  # NotFoundError (exit 4) when there is no complete checkpoint
    if not report.restorable:
        raise not_restorable(report)
    assert report.metadata is not None
    return _Snapshot(report.path, report.metadata, StateFileReader(storage, report.path, trusted=trusted))


@dataclass
class _StateTally:
    """One keyed state of one operator, compared."""

    name: str
    kind: str
    counts: Counter[str] = field(default_factory=Counter)
    keys_a: int = 0
    keys_b: int = 0
    entries_a: int = 0
    entries_b: int = 0
    bytes_a: int = 0
    bytes_b: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "internal": self.name.startswith("_"),
            "keys_a": self.keys_a, "keys_b": self.keys_b,
            "added": self.counts[ADDED], "removed": self.counts[REMOVED],
            "changed": self.counts[CHANGED], "unchanged": self.counts[UNCHANGED],
            "entries_a": self.entries_a, "entries_b": self.entries_b,
            "bytes_a": self.bytes_a, "bytes_b": self.bytes_b, "bytes_delta": self.bytes_b - self.bytes_a,
        }


def _entries(kind: str, value: Any) -> int:
    if kind in ("list", "map") or isinstance(value, dict):  # a timer table's value: the key's timers
        try:
            return len(value)
        except TypeError:
            return 1
    return 1


def _keyed(snap: _Snapshot, op: Mapping[str, Any] | None) -> Iterator[tuple[str, str, Any, Any]]:
    """(state, kind, key, value) of every key of an operator's keyed state; (state, kind, None, None) first per state."""
    if op is None:
        return
    for sub in sorted(op["subtasks"], key=lambda s: s["subtask"]):
        handle = sub.get("keyed_state")
        if handle:
            for name, kind, kg, key, value in keyed_values(snap.reader.load(handle), snap.reader.url(handle)):
                yield name, kind, (None if kg is None else key), (None if kg is None else (value,))


def _operator_items(snap: _Snapshot, op: Mapping[str, Any] | None) -> dict[str, tuple[str, list[Any]]]:
    """State name -> (kind, items over every subtask) of an operator's non-keyed state."""
    found: dict[str, tuple[str, list[Any]]] = {}
    for sub in sorted((op or {"subtasks": []})["subtasks"], key=lambda s: s["subtask"]):
        handle = sub.get("operator_state")
        if handle:
            for name, kind, items in operator_state_values(snap.reader.load(handle)):
                listed = list(items) if kind != "sink" and isinstance(items, (list, tuple)) else [items]
                found.setdefault(name, (kind, []))[1].extend(listed)
    return found


def _compare_operator(a: _Snapshot, b: _Snapshot, op_a: Mapping[str, Any] | None, op_b: Mapping[str, Any] | None,
                      top: int, top_heap: list[tuple[int, int, dict[str, Any]]], order: Iterator[int]) -> dict[str, Any]:
    op = op_b or op_a
    assert op is not None
    label = {"operator": op["name"], "uid": op.get("uid"), "operator_id": op["operator_id"]}
    tallies: dict[str, _StateTally] = {}
    held: dict[str, dict[Any, tuple[Any, int]]] = {}  # A's keys of each state: key -> (value, bytes)

    def note(state: str, kind: str, key: Any, change: str, bytes_a: int, bytes_b: int) -> None:
        tallies[state].counts[change] += 1
        delta = bytes_b - bytes_a
        if top and delta > 0 and (len(top_heap) < top or delta > top_heap[0][0]):
            item = (delta, -next(order), {**label, "state": state, "kind": kind, "key": key_repr(key), "change": change,
                                          "bytes_a": bytes_a, "bytes_b": bytes_b, "bytes_delta": delta})
            (heapq.heappush if len(top_heap) < top else heapq.heapreplace)(top_heap, item)

    for name, kind, key, boxed in _keyed(a, op_a):
        tally = tallies.setdefault(name, _StateTally(name, kind))
        if boxed is None:
            held.setdefault(name, {})
            continue
        size = _size((key, boxed[0]))
        held[name][key] = (boxed[0], size)
        tally.keys_a += 1
        tally.entries_a += _entries(kind, boxed[0])
        tally.bytes_a += size
    for name, kind, key, boxed in _keyed(b, op_b):
        tally = tallies.setdefault(name, _StateTally(name, kind))
        if boxed is None:
            continue
        value = boxed[0]
        size = _size((key, value))
        tally.keys_b += 1
        tally.entries_b += _entries(kind, value)
        tally.bytes_b += size
        before = held.get(name, {}).pop(key, None)
        if before is None:
            note(name, kind, key, ADDED, 0, size)
        else:
            note(name, kind, key, UNCHANGED if same_value(before[0], value) else CHANGED, before[1], size)
    for name, keys in held.items():
        for key, (_, size) in keys.items():
            note(name, tallies[name].kind, key, REMOVED, size, 0)
        keys.clear()

    operator_state = []
    items_a, items_b = _operator_items(a, op_a), _operator_items(b, op_b)
    for name in list(items_a) + [n for n in items_b if n not in items_a]:
        kind, la = items_a.get(name, (items_b.get(name, ("?", []))[0], []))
        lb = items_b.get(name, (kind, []))[1]
        bytes_a, bytes_b = sum(_size(i) for i in la), sum(_size(i) for i in lb)
        changed = Counter(pickle.dumps(i, protocol=_PROTOCOL) for i in la) != Counter(pickle.dumps(i, protocol=_PROTOCOL) for i in lb)
        operator_state.append({"name": name, "kind": kind, "entries_a": len(la), "entries_b": len(lb),
                               "bytes_a": bytes_a, "bytes_b": bytes_b, "bytes_delta": bytes_b - bytes_a, "changed": changed})
    return {
        "operator_id": op["operator_id"], "uid": op.get("uid"), "name": op["name"],
        "status": "both" if op_a and op_b else ("added" if op_b else "removed"),
        "parallelism_a": op_a["parallelism"] if op_a else None, "parallelism_b": op_b["parallelism"] if op_b else None,
        "max_parallelism_a": op_a["max_parallelism"] if op_a else None,
        "max_parallelism_b": op_b["max_parallelism"] if op_b else None,
        "states": [t.to_dict() for t in tallies.values()],
        "operator_state": operator_state,
    }


def _matches(op: Mapping[str, Any], uid: str) -> bool:
    return uid in (op.get("uid"), op["operator_id"])


def diff(
    path_a: str,
    path_b: str,
    *,
    uid: str | None = None,
    top: int = 10,
    storage_options: Mapping[str, Any] | None = None,
    trusted: bool = False,
) -> dict[str, Any]:
    """Compare the state of the snapshot at ``path_a`` with the one at ``path_b``.

    Returns a JSON-serializable dict::

        {"a": {"path", "job_id", "job_name", "checkpoint_id", "kind", "max_parallelism"}, "b": {...},
         "identical", "uid",
         "totals": {"added", "removed", "changed", "unchanged", "bytes_a", "bytes_b", "bytes_delta"},
         "operators": [{"operator_id", "uid", "name", "status" (both, added, removed),
                        "parallelism_a", "parallelism_b", "max_parallelism_a", "max_parallelism_b",
                        "states": [{"name", "kind", "internal", "keys_a", "keys_b", "added", "removed",
                                    "changed", "unchanged", "entries_a", "entries_b",
                                    "bytes_a", "bytes_b", "bytes_delta"}],
                        "operator_state": [{"name", "kind", "entries_a", "entries_b", "bytes_a", "bytes_b",
                                            "bytes_delta", "changed"}]}],
         "grown": [{"operator", "uid", "operator_id", "state", "kind", "bytes_a", "bytes_b", "bytes_delta",
                    "keys_a", "keys_b"}],
         "top_keys": [{"operator", "uid", "operator_id", "state", "kind", "key", "change",
                       "bytes_a", "bytes_b", "bytes_delta"}]}

    ``uid`` limits the comparison to the operator with that uid (or operator id);
    ``NotFoundError`` when neither snapshot has it. ``grown`` lists the ``top`` states whose
    bytes grew most (largest growth first, growth above 0 only); ``top_keys`` the ``top`` keys
    that grew most (growth above 0 only; an added key grows by all its bytes). ``identical`` is true when no key was
    added, removed or changed, no operator state changed and no operator with state is only in
    one snapshot.
    """
    if top < 0:
        raise UsageError(f"top must be 0 or more, got {top}")
    a, b = _open(path_a, storage_options, trusted), _open(path_b, storage_options, trusted)
    ops_a = {op["operator_id"]: op for op in a.metadata["operators"]}
    ops_b = {op["operator_id"]: op for op in b.metadata["operators"]}
    ids = list(ops_a) + [i for i in ops_b if i not in ops_a]
    if uid is not None:
        ids = [i for i in ids if _matches(ops_a.get(i) or ops_b[i], uid)]
        if not ids:
            raise NotFoundError(f"neither {a.path} nor {b.path} has an operator with uid {uid}",
                                remedy="see the uids with 'flinkpy state analyze PATH'")
    top_heap: list[tuple[int, int, dict[str, Any]]] = []
    order = itertools.count()
    operators = [_compare_operator(a, b, ops_a.get(i), ops_b.get(i), top, top_heap, order) for i in ids]
    states = [(op, st) for op in operators for st in op["states"]]
    totals = {k: sum(st[k] for _, st in states) for k in (ADDED, REMOVED, CHANGED, UNCHANGED, "bytes_a", "bytes_b")}
    totals["bytes_delta"] = totals["bytes_b"] - totals["bytes_a"]
    grown = sorted((st for st in states if st[1]["bytes_delta"] > 0), key=lambda s: -s[1]["bytes_delta"])[:top]
    one_sided = any(op["status"] != "both" and (op["states"] and any(st["keys_a"] or st["keys_b"] for st in op["states"])
                                               or op["operator_state"]) for op in operators)
    identical = (not (totals[ADDED] or totals[REMOVED] or totals[CHANGED]) and not one_sided
                 and not any(s["changed"] for op in operators for s in op["operator_state"]))
    return {
        "a": a.header(),
        "b": b.header(),
        "identical": identical,
        "uid": uid,
        "totals": totals,
        "operators": operators,
        "grown": [{"operator": op["name"], "uid": op["uid"], "operator_id": op["operator_id"], "state": st["name"],
                   "kind": st["kind"], "bytes_a": st["bytes_a"], "bytes_b": st["bytes_b"], "bytes_delta": st["bytes_delta"],
                   "keys_a": st["keys_a"], "keys_b": st["keys_b"]} for op, st in grown],
        "top_keys": [row for _, _, row in sorted(top_heap, key=lambda t: (-t[0], -t[1]))],
    }
