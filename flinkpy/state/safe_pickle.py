"""Decoding state files without running code they name: a restricted unpickler for analysis.

State files are pickles, and a pickle names the callables that rebuild its objects: loading
one from an untrusted source can run any function importable on the machine. A restore must
load the job's own classes (the job's code runs anyway), but ``flinkpy state analyze`` only
needs keys, values and their sizes, and is pointed at snapshots copied from elsewhere. So it
decodes with :class:`RestrictedUnpickler`, which resolves only

- plain Python values: the builtin containers and scalars, ``collections`` (OrderedDict,
  deque, defaultdict, Counter), ``datetime``, ``decimal.Decimal``, ``fractions.Fraction``,
  ``uuid.UUID``, and ``copyreg``'s reconstructors for them;
- flinkpy's own value types: classes under ``flinkpy.`` that are dataclasses, named tuples or
  enums (``Row``, ``RowKind``, windows, source splits), which rebuild without side effects;

and refuses every other global (a job's own class, ``os.system``, ``builtins.eval``) with
:class:`UntrustedClassError`, naming it. ``--trusted`` switches back to Python's unpickler.

>>> import pickle, os
>>> loads(pickle.dumps({"k": [1, 2.5, ("a", b"b")], "when": __import__("datetime").date(2026, 1, 1)}))
{'k': [1, 2.5, ('a', b'b')], 'when': datetime.date(2026, 1, 1)}
>>> class Evil:
...     def __reduce__(self):
...         return (os.system, ("echo pwned",))
>>> loads(pickle.dumps(Evil()))
Traceback (most recent call last):
...
flinkpy.state.safe_pickle.UntrustedClassError: the state holds a reference to posix.system, which is not a plain Python value or a flinkpy type
"""

from __future__ import annotations

import dataclasses
import enum
import io
import pickle
from typing import IO, Any

from flinkpy.errors import FlinkpyError

_SAFE: dict[str, frozenset[str]] = {
    "builtins": frozenset({"dict", "list", "tuple", "set", "frozenset", "int", "float", "complex", "str", "bytes",
                           "bytearray", "bool", "range", "slice", "object", "NoneType"}),
    "collections": frozenset({"OrderedDict", "deque", "defaultdict", "Counter"}),
    "datetime": frozenset({"date", "datetime", "time", "timedelta", "timezone", "tzinfo"}),
    "decimal": frozenset({"Decimal"}),
    "fractions": frozenset({"Fraction"}),
    "uuid": frozenset({"UUID", "SafeUUID"}),
    "copyreg": frozenset({"_reconstructor", "__newobj__", "__newobj_ex__"}),
    "_codecs": frozenset({"encode"}),  # how protocols 0-2 spell bytes
}


class UntrustedClassError(FlinkpyError):
    """A state file names a global the restricted unpickler does not load."""

    def __init__(self, qualified: str):
        super().__init__(f"the state holds a reference to {qualified}, which is not a plain Python value or a flinkpy type")
        self.qualified = qualified


def _flinkpy_value_type(obj: Any) -> bool:
    return isinstance(obj, type) and (
        dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum) or (issubclass(obj, tuple) and obj is not tuple)
        or obj.__qualname__ in ("Row", "CountWindow", "GlobalWindow", "TimestampedValue")
    )


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves only the globals listed in this module's docstring."""

    def find_class(self, module: str, name: str) -> Any:
        if name in _SAFE.get(module, ()):
            return super().find_class(module, name)
        if module == "flinkpy" or module.startswith("flinkpy."):
            obj = super().find_class(module, name)
            if _flinkpy_value_type(obj):
                return obj
        raise UntrustedClassError(f"{module}.{name}")


def load(f: IO[bytes]) -> Any:
    """One object from ``f``, with the restricted unpickler."""
    return RestrictedUnpickler(f).load()


def loads(data: bytes) -> Any:
    """One object from ``data``, with the restricted unpickler."""
    return RestrictedUnpickler(io.BytesIO(data)).load()


def load_list(raw: bytes) -> list[Any]:
    """A list state's concatenated pickles (RocksDB's encoding), with the restricted unpickler."""
    f = io.BytesIO(raw)
    out = []
    while f.tell() < len(raw):
        out.append(RestrictedUnpickler(f).load())
    return out
