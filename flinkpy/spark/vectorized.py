"""A user's function over whole columns, where that gives exactly what calling it per record gives.

A function qualifies when it is *arithmetic*: its code (a lambda, a function, or the method of a
``MapFunction`` / ``FilterFunction`` / ``KeySelector`` object) does nothing but read its
arguments, constants, globals and attributes, index tuples, do arithmetic and comparisons on
numbers and build tuples; no call, no branch, no store outside its own locals
(:func:`arithmetic`). Such a function is called once per batch with :class:`Col` proxies in place
of numbers, each holding a whole column: each operation the function does runs over the column
in numpy, with Python's meaning (``%`` and ``//`` floor, ``/`` true division, bools counting as
ints in arithmetic). Whatever numpy could answer differently is refused before it runs: a zero
divisor (Python raises), an int that could reach :data:`~flinkpy.spark.columns.INT_LIMIT`
(int64 could overflow), anything but numbers. A refusal (:class:`NotVectorized`) sends the
batch down the per-record road, which calls the function on each record as before, and raises
what Python raises there.

A keyed reduce qualifies when each field of its result is the accumulator's field, the new
record's field, or their sum, min or max, field by field (``KeyedStream.sum/min/max``, or a
function such as ``lambda a, b: (a[0], a[1] + b[1])``): :func:`reduce_plan`, and
:func:`running_reduce` computes every running update of a batch per key.
"""

from __future__ import annotations

import dis
import types
from typing import Any, Callable

from flinkpy.spark.columns import INT_LIMIT, Columns, holdable


class NotVectorized(Exception):
    """The batch (or the function) cannot be run over columns: run it per record."""


#: opcodes an arithmetic function may contain (CPython 3.10-3.13); a call, a jump, a store
#: outside the frame, an import, a nested function or comprehension: none of them
_OPCODES = frozenset({
    "RESUME", "NOP", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL",
    "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_CONST", "LOAD_SMALL_INT", "LOAD_GLOBAL",
    "LOAD_DEREF", "LOAD_ATTR", "LOAD_NAME",
    "STORE_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "POP_TOP", "COPY", "SWAP",
    "BINARY_OP", "BINARY_SUBSCR", "BINARY_SLICE", "BUILD_SLICE", "COMPARE_OP", "UNARY_NEGATIVE", "UNARY_INVERT",
    "BUILD_TUPLE", "RETURN_VALUE", "RETURN_CONST",
    # before 3.11
    "BINARY_ADD", "BINARY_SUBTRACT", "BINARY_MULTIPLY", "BINARY_TRUE_DIVIDE", "BINARY_FLOOR_DIVIDE",
    "BINARY_MODULO", "BINARY_AND", "BINARY_OR", "BINARY_XOR", "ROT_TWO", "DUP_TOP",
})
#: BINARY_OP arguments that are not arithmetic Python keeps on numbers the same way numpy does
_REFUSED_BINARY = frozenset({"**", "**=", "<<", "<<=", ">>", ">>=", "@", "@="})

_checked: dict[Any, bool] = {}


def _code_of(fn: Any) -> Any:
    if isinstance(fn, (types.FunctionType, types.MethodType)):
        return fn.__code__
    return None


def arithmetic(fn: Callable) -> bool:
    """Whether ``fn``'s code is arithmetic on its arguments only (see the module docstring)."""
    code = _code_of(fn)
    if code is None:
        return False
    known = _checked.get(code)
    if known is None:
        known = _checked[code] = _arithmetic_code(code)
    return known


def _arithmetic_code(code: Any) -> bool:
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):  # generator, coroutine, async generator
        return False
    for ins in dis.get_instructions(code):
        if ins.opname not in _OPCODES:
            return False
        if ins.opname == "BINARY_OP" and ins.argrepr in _REFUSED_BINARY:
            return False
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, types.CodeType):
            return False
    return True


def _int_bound(array: Any) -> int:
    if len(array) == 0:
        return 0
    return max(abs(int(array.min())), abs(int(array.max())))


class Col:
    """A column standing for a number in an arithmetic function traced over a batch."""

    __slots__ = ("a", "bound")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, a: Any, bound: int | None = None) -> None:
        self.a = a
        #: for an int column, a bound on its magnitude (numpy's results are exact below INT_LIMIT)
        if bound is None:
            kind = a.dtype.kind
            bound = _int_bound(a) if kind == "i" else 1 if kind == "b" else None
        self.bound = bound

    def __bool__(self) -> bool:
        raise NotVectorized("a branch on a record's value")

    def __iter__(self) -> Any:
        raise NotVectorized("iterating over a number")

    def __index__(self) -> int:
        raise NotVectorized("a record's value as an index")

    def __getattr__(self, name: str) -> Any:
        raise NotVectorized(f"attribute {name!r} of a record's value")

    def __getitem__(self, item: Any) -> Any:
        raise NotVectorized("indexing a number")

    # arithmetic ------------------------------------------------------------------------------

    def __add__(self, o: Any) -> Col: return _arith("+", self, o)
    def __radd__(self, o: Any) -> Col: return _arith("+", o, self)
    def __sub__(self, o: Any) -> Col: return _arith("-", self, o)
    def __rsub__(self, o: Any) -> Col: return _arith("-", o, self)
    def __mul__(self, o: Any) -> Col: return _arith("*", self, o)
    def __rmul__(self, o: Any) -> Col: return _arith("*", o, self)
    def __truediv__(self, o: Any) -> Col: return _arith("/", self, o)
    def __rtruediv__(self, o: Any) -> Col: return _arith("/", o, self)
    def __floordiv__(self, o: Any) -> Col: return _arith("//", self, o)
    def __rfloordiv__(self, o: Any) -> Col: return _arith("//", o, self)
    def __mod__(self, o: Any) -> Col: return _arith("%", self, o)
    def __rmod__(self, o: Any) -> Col: return _arith("%", o, self)
    def __and__(self, o: Any) -> Col: return _bits("&", self, o)
    def __rand__(self, o: Any) -> Col: return _bits("&", o, self)
    def __or__(self, o: Any) -> Col: return _bits("|", self, o)
    def __ror__(self, o: Any) -> Col: return _bits("|", o, self)
    def __xor__(self, o: Any) -> Col: return _bits("^", self, o)
    def __rxor__(self, o: Any) -> Col: return _bits("^", o, self)

    def __neg__(self) -> Col:
        a = _as_number(self.a)
        return Col(-a, self.bound)

    def __invert__(self) -> Col:
        a = _as_number(self.a)
        if a.dtype.kind != "i":
            raise NotVectorized("~ of a float")
        return Col(~a, self.bound + 1)

    # comparisons -----------------------------------------------------------------------------

    def __lt__(self, o: Any) -> Col: return _compare("<", self, o)
    def __le__(self, o: Any) -> Col: return _compare("<=", self, o)
    def __gt__(self, o: Any) -> Col: return _compare(">", self, o)
    def __ge__(self, o: Any) -> Col: return _compare(">=", self, o)
    def __eq__(self, o: Any) -> Col: return _compare("==", self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Col: return _compare("!=", self, o)  # type: ignore[override]


def _operand(x: Any) -> tuple[Any, int | None, str]:
    """(numpy value, int bound or None, kind) of a Col or a Python number."""
    if type(x) is Col:
        return x.a, x.bound, x.a.dtype.kind
    t = type(x)
    if t is bool:
        return x, 1, "b"
    if t is int:
        if abs(x) >= INT_LIMIT:
            raise NotVectorized("an int constant beyond the exact range")
        return x, abs(x), "i"
    if t is float:
        return x, None, "f"
    raise NotVectorized(f"an operand of type {t.__name__}")


def _as_number(a: Any) -> Any:
    """Bools count as ints in Python's arithmetic (numpy's are logical)."""
    import numpy as np

    if isinstance(a, np.ndarray):
        return a.astype(np.int64) if a.dtype.kind == "b" else a
    return int(a) if type(a) is bool else a


def _zero_in(b: Any) -> bool:
    import numpy as np

    return bool(np.any(b == 0)) if isinstance(b, np.ndarray) else b == 0


def _arith(op: str, x: Any, y: Any) -> Col:
    import numpy as np

    a, ba, ka = _operand(x)
    b, bb, kb = _operand(y)
    a, b = _as_number(a), _as_number(b)
    ints = ka in "ib" and kb in "ib"
    if op in ("/", "//", "%") and _zero_in(b):
        raise NotVectorized("a division by zero")  # Python raises ZeroDivisionError: per record
    if op == "+":
        r, bound = a + b, (ba + bb if ints else None)  # type: ignore[operator]
    elif op == "-":
        r, bound = a - b, (ba + bb if ints else None)  # type: ignore[operator]
    elif op == "*":
        r, bound = a * b, (ba * bb if ints else None)  # type: ignore[operator]
    elif op == "/":
        r, bound = np.true_divide(a, b), None
    elif op == "//":
        r, bound = np.floor_divide(a, b), (ba if ints else None)
    else:
        r, bound = np.remainder(a, b), (bb if ints else None)
    if bound is not None and bound >= INT_LIMIT:
        raise NotVectorized("an int result that could leave the exact range")
    if not isinstance(r, np.ndarray):
        raise NotVectorized("a result of constants alone")
    return Col(r, bound)


def _bits(op: str, x: Any, y: Any) -> Col:
    import numpy as np

    a, ba, ka = _operand(x)
    b, bb, kb = _operand(y)
    if "f" in (ka, kb):
        raise NotVectorized(f"{op} of a float")
    r = a & b if op == "&" else a | b if op == "|" else a ^ b
    if not isinstance(r, np.ndarray):
        raise NotVectorized("a result of constants alone")
    both_bool = ka == "b" and kb == "b"
    return Col(r, None if both_bool else 2 * max(ba or 1, bb or 1))


def _compare(op: str, x: Any, y: Any) -> Col:
    import numpy as np

    a, _, _ = _operand(x)
    b, _, _ = _operand(y)
    r = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}[op](a, b)
    return Col(r)


# -- running a function over a batch ----------------------------------------------------------


def _arguments(batch: Columns) -> Any:
    cols = [Col(f) for f in batch.fields]
    return tuple(cols) if batch.tupled else cols[0]


def _column(x: Any, n: int) -> Any:
    """A function's result (a field of it) as a column of ``n``: a Col, or a constant repeated."""
    import numpy as np

    if type(x) is Col:
        return x.a
    if type(x) in (bool, int, float):
        if type(x) is int and abs(x) >= INT_LIMIT:
            raise NotVectorized("an int constant beyond the exact range")
        return np.full(n, x, dtype=np.bool_ if type(x) is bool else np.int64 if type(x) is int else np.float64)
    raise NotVectorized(f"a result of type {type(x).__name__}")


def call(fn: Callable, batch: Columns) -> Columns:
    """``fn`` (arithmetic) applied to every record of ``batch``: the results as columns."""
    try:
        result = fn(_arguments(batch))
    except NotVectorized:
        raise
    except Exception as e:  # what Python would raise per record, it raises there
        raise NotVectorized(f"{type(e).__name__} over columns") from None
    n = len(batch)
    if type(result) is tuple:
        if not result:
            raise NotVectorized("an empty tuple")
        fields = tuple(_column(x, n) for x in result)
        out = Columns(fields, tupled=True)
    else:
        out = Columns((_column(result, n),), tupled=False)
    if not all(holdable(f) for f in out.fields):
        raise NotVectorized("a result column numpy cannot hold exactly")
    return out


def mask(fn: Callable, batch: Columns) -> Any:
    """The records ``fn`` (an arithmetic filter) keeps, as a boolean mask: its truth per record."""
    kept = call(fn, batch)
    if kept.tupled:
        raise NotVectorized("a filter returning a tuple")  # always true per record: rare, and kept simple
    f = kept.fields[0]
    return f if f.dtype.kind == "b" else f != 0


def keys(fn: Callable, batch: Columns) -> Any:
    """Every record's key, as one numpy column (keys that are tuples are not vectorized)."""
    import numpy as np

    out = call(fn, batch)
    if out.tupled:
        raise NotVectorized("a tuple key")
    k = out.fields[0]
    if k.dtype.kind == "f" and bool(np.isnan(k).any()):
        raise NotVectorized("a NaN key")  # every NaN is a key of its own in a dict
    return k
