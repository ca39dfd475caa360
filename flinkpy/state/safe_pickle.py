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

Plain values can still be made to allocate: a 40-byte pickle that calls ``bytes(1 << 30)`` or
``list(range(1 << 30))`` asks for gigabytes. The constructors that build from a size or an
iterable are called through a budget instead — what one file's pickles may allocate that way,
:data:`BYTES_PER_FILE_BYTE` times the file's size plus :data:`BUDGET_FLOOR` — and a file that
asks for more is refused (:class:`AllocationLimitError`) before anything is allocated. A real
state file builds its values from the data it holds, far within the budget.

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
>>> try:
...     loads(b"\\x80\\x02cbuiltins\\nbytes\\nJ\\x00\\x00\\x00@\\x85R.")  # bytes(1 << 30) from 26 bytes
... except AllocationLimitError as e:
...     print(e.message)
a 26-byte state file asks for 1073741824 bytes through builtins.bytes; at most 1050240 are allowed for it
"""

from __future__ import annotations

import dataclasses
import enum
import io
import os
import pickle
import weakref
from typing import IO, Any, Callable

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


#: what one file's pickles may allocate through constructors, per byte of the file ...
BYTES_PER_FILE_BYTE = 64
#: ... plus this much, so that a small file of small values is never refused
BUDGET_FLOOR = 1 << 20
#: constructors that allocate by a size or an iterable they are given (``range`` is lazy itself)
_ALLOCATING = frozenset({("builtins", n) for n in ("bytes", "bytearray", "list", "tuple", "set", "frozenset", "dict")}
                        | {("collections", n) for n in ("deque", "Counter", "OrderedDict", "defaultdict")})
#: what an element built from a ``range`` costs (an int object and a reference), and from a container (a reference)
_PER_RANGE_ITEM, _PER_ITEM = 40, 8


class AllocationLimitError(FlinkpyError):
    """A state file asks for more memory than its size can justify (see the module docstring)."""


class _Budget:
    def __init__(self, file_size: int) -> None:
        self.file_size = file_size
        self.limit = self.left = BUDGET_FLOOR + BYTES_PER_FILE_BYTE * file_size

    def spend(self, cost: int, what: str) -> None:
        if cost > self.left:
            raise AllocationLimitError(f"a {self.file_size}-byte state file asks for {cost} bytes through {what}; "
                                       f"at most {self.limit} are allowed for it",
                                       remedy="the file is not a state file flinkpy wrote; analyze it with --trusted only if you trust it")
        self.left -= cost


def _cost(args: tuple[Any, ...]) -> int:
    """Roughly what building from ``args`` allocates: a size, or elements of a range or container."""
    total = 0
    for a in args:
        if isinstance(a, bool):
            continue
        if isinstance(a, int):
            total += max(a, 0)
        elif isinstance(a, range):
            total += max(0, -((a.start - a.stop) // a.step)) * _PER_RANGE_ITEM
        elif hasattr(a, "__len__"):
            total += len(a) * _PER_ITEM
    return total


def _guarded(constructor: Callable[..., Any], budget: _Budget, what: str) -> Callable[..., Any]:
    def build(*args: Any, **kwargs: Any) -> Any:
        budget.spend(_cost(args), what)
        return constructor(*args, **kwargs)

    return build


#: each open file's budget, shared by the unpicklers that read pickles one after another from it
_budgets: "weakref.WeakKeyDictionary[Any, _Budget]" = weakref.WeakKeyDictionary()


def _size_of(f: IO[bytes]) -> int:
    if isinstance(f, io.BytesIO):
        return f.getbuffer().nbytes
    try:
        return os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        here = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(here)
        return end


def _budget_of(f: IO[bytes]) -> _Budget:
    try:
        budget = _budgets.get(f)
        if budget is None:
            budget = _budgets[f] = _Budget(_size_of(f))
        return budget
    except TypeError:  # not weakly referable: a budget for this pickle alone
        return _Budget(_size_of(f))


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
    """``pickle.Unpickler`` that resolves only the globals listed in this module's docstring,
    and calls the allocating ones through the budget of the file it reads."""

    def __init__(self, file: IO[bytes], **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self.budget = _budget_of(file)

    def find_class(self, module: str, name: str) -> Any:
        if name in _SAFE.get(module, ()):
            found = super().find_class(module, name)
            return _guarded(found, self.budget, f"{module}.{name}") if (module, name) in _ALLOCATING else found
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
