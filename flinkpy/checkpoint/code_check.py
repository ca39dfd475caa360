"""Decoding every state value of a snapshot with a program's classes: would its state restore?

``flinkpy savepoint plan --check-code`` runs this module in a process of its own, with the new
program's directory first on ``sys.path`` (as a task process has it), so that the program's
modules are imported there and never in the CLI. It reads each state file of the snapshot
(verified first, as ``flinkpy checkpoint verify`` does) and rebuilds every value with those
classes, the way a restore would, and then checks what a restore would not notice at once:

- a class (or its module) that no longer exists, a class whose constructor or ``__setstate__``
  refuses the saved state (a NamedTuple with fields added or removed, a slotted class without
  a saved attribute): the unpickler here records the failure where it happens and goes on, so
  one bad value does not hide the next;
- a dataclass whose fields no longer match the saved object's: a field renamed or removed
  (the saved value would be silently dropped) or one added without a default (reading it
  raises ``AttributeError`` later, in the running job).

Failures are reported per operator, state and error, with the number of keys affected and
the first few keys. Decoding runs the pickles' code as a restore does: check snapshots that
you would restore.

Run as ``python -m flinkpy.checkpoint.code_check SNAPSHOT [--sys-path DIR]``; it prints one
JSON document on stdout (``{"error": {...}}`` with the error's exit code when it could not
check).

>>> import pickle
>>> from fractions import Fraction
>>> value = loads(pickle.dumps({"k": [Fraction(1, 2), 2]}))
>>> value, list(value_problems(value))
({'k': [Fraction(1, 2), 2]}, [])
>>> moved = pickle.dumps({"k": Fraction(1, 2)}, protocol=0).replace(b"fractions", b"no_such_module")
>>> [p.split(":")[0] for p in value_problems(loads(moved))]
['no_such_module.Fraction cannot be imported']
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import pickle
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from flinkpy.checkpoint.analysis import key_repr, keyed_values, not_restorable, operator_state_values
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.errors import FlinkpyError, UsageError
from flinkpy.state import canonical
from flinkpy.state.incremental import is_incremental

#: keys listed per failure (the rest are counted)
EXAMPLES = 5

_SCALARS = (str, bytes, bytearray, int, float, complex, bool, type(None))


class Broken:
    """What a value became when the program's classes could not rebuild it: the error, kept in
    place so that decoding goes on and the key it belongs to can be named."""

    def __init__(self, error: str) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"<not restorable: {self.error}>"

    # whatever the unpickler does next with the object it thinks it built, quietly
    def __call__(self, *args: Any, **kwargs: Any) -> Broken:
        return self

    def __setstate__(self, state: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def add(self, item: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def _qualified(obj: Any) -> str:
    cls = obj if isinstance(obj, type) or callable(obj) and hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', getattr(cls, '__name__', '?'))}"


def _guard(opcode: bytes, consumed: int) -> Any:
    """The pure-Python unpickler's handler of ``opcode`` (which takes ``consumed`` items off the
    stack, the first of them the class, callable or instance it builds with, and pushes one),
    made to leave a :class:`Broken` in place of the object it could not build."""
    original = pickle._Unpickler.dispatch[opcode[0]]  # type: ignore[attr-defined]

    def load(self: Any) -> None:
        stack = self.stack
        base = len(stack) - consumed
        target = stack[base]
        if isinstance(target, Broken):  # built with a class that is missing: stays missing
            del stack[base:]
            stack.append(target)
            return
        try:
            original(self)
        except Exception as exc:  # noqa: BLE001 - the class refused the saved state: that is the finding
            del stack[base:]
            stack.append(Broken(f"{_qualified(target)}: {type(exc).__name__}: {exc}"))

    return load


class CheckingUnpickler(pickle._Unpickler):  # type: ignore[name-defined,misc]
    """Python's own (pure-Python) unpickler, except that a class that cannot be imported, or
    that cannot be built from its saved state, becomes a :class:`Broken` value instead of an
    exception that would end the whole file."""

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]
    dispatch[pickle.REDUCE[0]] = _guard(pickle.REDUCE, 2)
    dispatch[pickle.NEWOBJ[0]] = _guard(pickle.NEWOBJ, 2)
    dispatch[pickle.NEWOBJ_EX[0]] = _guard(pickle.NEWOBJ_EX, 3)
    dispatch[pickle.BUILD[0]] = _guard(pickle.BUILD, 2)

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except Exception as exc:  # noqa: BLE001 - a class or module the program no longer has
            return Broken(f"{module}.{name} cannot be imported: {type(exc).__name__}: {exc}")


def load(f: Any) -> Any:
    return CheckingUnpickler(f).load()


def loads(data: bytes) -> Any:
    return load(io.BytesIO(data))


def _dataclass_problems(obj: Any) -> Iterator[str]:
    cls = type(obj)
    declared = [f.name for f in dataclasses.fields(obj)]
    saved = set(vars(obj)) if hasattr(obj, "__dict__") else set()
    for name in declared:
        if not hasattr(obj, name):
            yield (f"{_qualified(cls)}: field {name!r} has no value in the saved state (renamed, or added without a "
                   "default): reading it raises AttributeError")
    for name in sorted(saved - set(declared)):
        yield (f"{_qualified(cls)}: the saved state has field {name!r}, which the class no longer declares "
               "(renamed or removed): its value would be lost")


def value_problems(value: Any) -> Iterator[str]:
    """Why ``value`` (decoded with :func:`load`) would not restore: each distinct reason once."""
    seen: set[int] = set()
    found: set[str] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, _SCALARS) or id(v) in seen:
            continue
        seen.add(id(v))
        reasons: list[str] = []
        if isinstance(v, Broken):
            reasons = [v.error]
        else:
            if isinstance(v, Mapping):
                todo.extend(v.keys())
                todo.extend(v.values())
            elif isinstance(v, (list, tuple, set, frozenset)) or type(v).__name__ == "deque":
                todo.extend(v)
            if isinstance(v, type):
                continue
            if dataclasses.is_dataclass(v):
                reasons = list(_dataclass_problems(v))
            attrs = getattr(v, "__dict__", None)
            if isinstance(attrs, dict):
                todo.extend(attrs.values())
            for slot in getattr(type(v), "__slots__", ()) if not isinstance(v, tuple) else ():
                if isinstance(slot, str) and hasattr(v, slot):
                    todo.append(getattr(v, slot))
        for reason in reasons:
            if reason not in found:
                found.add(reason)
                yield reason


class _Findings:
    """Failures grouped by operator, state and error."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.values_checked = 0
        self.values_failed = 0

    def check(self, op: Mapping[str, Any], state: str, key: Any, value: Any, where: str | None = None) -> None:
        self.values_checked += 1
        problems = list(value_problems((key, value)))
        self.values_failed += bool(problems)
        for problem in problems:
            row = self.groups.get((op["operator_id"], state, problem))
            if row is None:
                row = self.groups[(op["operator_id"], state, problem)] = {
                    "operator_id": op["operator_id"], "uid": op.get("uid"), "operator": op["name"], "state": state,
                    "error": problem, "keys": 0, "examples": []}
            row["keys"] += 1
            if len(row["examples"]) < EXAMPLES:
                row["examples"].append(where if where is not None else _safe_repr(key))


def _safe_repr(key: Any) -> str:
    try:
        return key_repr(key)
    except Exception:  # noqa: BLE001 - a key of a class that no longer fits its own __repr__
        return f"<a {_qualified(key)} key>"


def check_snapshot(path: str) -> dict[str, Any]:
    """Decode every state value of the snapshot at ``path`` with the classes importable here.

    Returns ``{"path", "values_checked", "values_failed", "failures": [{"operator_id", "uid", "operator",
    "state", "error", "keys", "examples"}]}``; ``keys`` counts the keys (or operator-state
    items) that fail with ``error``, ``examples`` names the first few (``repr`` of the key, or
    ``subtask N item I`` for operator state).
    """
    storage = CheckpointStorage(path)
    report = storage.verify(path)  # NotFoundError (exit 4) when there is no complete checkpoint
    if not report.restorable:
        raise not_restorable(report)
    doc = report.metadata
    assert doc is not None
    findings = _Findings()
    for op in doc["operators"]:
        for sub in sorted(op["subtasks"], key=lambda s: s["subtask"]):
            keyed, op_handle = sub.get("keyed_state"), sub.get("operator_state")
            if keyed:
                if is_incremental(keyed):
                    raise UsageError(
                        f"{report.path} is an incremental checkpoint: its state is in RocksDB's own files",
                        remedy="take a savepoint of the job (flinkpy savepoint trigger JOB_ID) and check that")
                url = f"{report.path.rstrip('/')}/{keyed['path']}"
                snapshot = canonical.loads(storage.read_state(report.path, keyed), load)
                for name, _, kg, key, value in keyed_values(snapshot, url):
                    if kg is not None:
                        findings.check(op, name, key, value)
            if op_handle:
                decoded = canonical.loads(storage.read_state(report.path, op_handle), load)
                for name, kind, items in operator_state_values(decoded):
                    listed = items if kind != "sink" and isinstance(items, (list, tuple)) else [items]
                    for i, item in enumerate(listed):
                        findings.check(op, name, None, item, where=f"subtask {sub['subtask']} item {i}")
    return {"path": report.path, "values_checked": findings.values_checked, "values_failed": findings.values_failed,
            "failures": list(findings.groups.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flinkpy.checkpoint.code_check")
    parser.add_argument("snapshot")
    parser.add_argument("--sys-path", action="append", default=[], help="a directory to import the program's modules from")
    ns = parser.parse_args(argv)
    for p in reversed(ns.sys_path):
        sys.path.insert(0, p)
    try:
        doc = check_snapshot(ns.snapshot)
    except FlinkpyError as exc:
        json.dump({"error": {"kind": type(exc).__name__, "message": exc.message, "remedy": exc.remedy,
                             "exit_code": exc.exit_code}}, sys.stdout)
        return exc.exit_code
    json.dump(doc, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
