"""A keyed reduce over a batch held as columns: every running update at once, per key.

The reduce qualifies when each field of its result is, field by field, the accumulator's (the
key's first record's, kept), the new record's (the last), or the sum, min or max of both
(:func:`reduce_plan`): ``KeyedStream.sum/min/max`` of a tuple field or of plain numbers, or an
arithmetic function such as ``lambda a, b: (a[0], a[1] + b[1])``. :func:`running_reduce` then
gives each record's update as the engine's reduce would (the first record of a key as it is,
then ``f(update, record)``), and leaves each key's last update in the reduce's table of running
values, as Python objects. Sums of ints are exact while they stay below
:data:`~flinkpy.spark.columns.INT_LIMIT`; sums of floats are added in the records' order from
the key's running value, as Python adds them; anything else numpy might answer differently
(a running value of another type, NaN in a min or max, bools summed) is refused with
:class:`~flinkpy.spark.vectorized.NotVectorized`, before the table changes.

>>> import numpy as np
>>> from flinkpy.spark.columns import Columns
>>> table = {1: (1, 10)}
>>> batch = Columns((np.array([1, 2, 1]), np.array([1, 2, 3])), tupled=True)
>>> plan = reduce_plan(lambda a, b: (a[0], a[1] + b[1]), batch)
>>> plan
('keep', 'sum')
>>> running_reduce(plan, batch, batch.fields[0], table).values()
[(1, 11), (2, 2), (1, 14)]
>>> table
{1: (1, 14), 2: (2, 2)}
"""

from __future__ import annotations

from typing import Any, Callable

from flinkpy.spark.columns import INT_LIMIT, Columns
from flinkpy.spark.vectorized import NotVectorized, arithmetic

#: keys in one batch beyond which sums of floats, mins and maxes (computed key by key) are not vectorized
MAX_KEYS_PER_LOOP = 4096
_MISSING = object()


class _Leaf:
    """Field ``i`` of the accumulator (``side`` 0) or of the new record (1), in a symbolic call."""

    __slots__ = ("side", "i")

    def __init__(self, side: int, i: int) -> None:
        self.side, self.i = side, i

    def __add__(self, o: Any) -> Any:
        if type(o) is _Leaf and o.side != self.side and o.i == self.i:
            return ("sum", self.i)
        raise NotVectorized("not a field-by-field reduce")

    __radd__ = __add__

    def __bool__(self) -> bool:
        raise NotVectorized("a branch in a reduce")


def reduce_plan(fn: Callable, batch: Columns) -> tuple[str, ...] | None:
    """How each field of ``fn``'s result is made from the accumulator and the record (see the
    module docstring), for records shaped as ``batch``'s; None when ``fn`` is not such a reduce."""
    width = len(batch.fields)
    aggregation = getattr(fn, "field_aggregation", None)
    if aggregation is not None:
        how, pos = aggregation
        if how not in ("sum", "min", "max") or isinstance(pos, bool) or not isinstance(pos, int):
            return None
        if not batch.tupled:
            return (how,) if pos == 0 else None
        if not 0 <= pos < width:
            return None
        return tuple(how if i == pos else "keep" for i in range(width))
    if not arithmetic(fn):
        return None

    def side(s: int) -> Any:
        leaves = tuple(_Leaf(s, i) for i in range(width))
        return leaves if batch.tupled else leaves[0]

    try:
        result = fn(side(0), side(1))
    except Exception:
        return None
    parts = result if batch.tupled else (result,)
    if type(parts) is not tuple or len(parts) != width:
        return None
    plan = []
    for i, p in enumerate(parts):
        if type(p) is _Leaf and p.i == i:
            plan.append("keep" if p.side == 0 else "last")
        elif p == ("sum", i):
            plan.append("sum")
        else:
            return None
    return tuple(plan)


def _python_type(kind: str) -> type:
    return {"i": int, "f": float, "b": bool}[kind]


def _previous(batch: Columns, found: list) -> None:
    """Refuse running values that the columns cannot continue exactly."""
    width = len(batch.fields)
    types = [_python_type(f.dtype.kind) for f in batch.fields]
    for p in found:
        if p is _MISSING:
            continue
        fields = p if batch.tupled else (p,)
        if batch.tupled and (type(p) is not tuple or len(p) != width):
            raise NotVectorized("a running value of another shape")
        if any(type(x) is not t for x, t in zip(fields, types)):
            raise NotVectorized("a running value of another type")


def running_reduce(plan: tuple[str, ...], batch: Columns, key_col: Any, table: dict) -> Columns:
    """Every record's update, in the batch's order; each key's last update goes into ``table``."""
    import numpy as np

    uniq, inv, counts = np.unique(key_col, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    py_keys = uniq.tolist()
    found = [table.get(k, _MISSING) for k in py_keys]
    _previous(batch, found)
    order = np.argsort(inv, kind="stable")
    ends = np.cumsum(counts)
    starts = ends - counts
    has = [p is not _MISSING for p in found]
    fields = []
    for i, (op, col) in enumerate(zip(plan, batch.fields)):
        s = col[order]
        prev = [(p[i] if batch.tupled else p) if h else None for p, h in zip(found, has)]
        if op == "last":
            r = s
        elif op == "keep":
            base = np.array([v if h else s[a] for v, h, a in zip(prev, has, starts.tolist())], dtype=col.dtype)
            r = np.repeat(base, counts)
        else:
            r = _combined(op, s, prev, has, starts, ends, counts)
        out = np.empty_like(r)
        out[order] = r
        fields.append(out)
    updates = Columns(tuple(fields), batch.tupled)
    for k, v in zip(py_keys, updates.take(order[ends - 1]).values()):
        table[k] = v
    return updates


def _combined(op: str, s: Any, prev: list, has: list, starts: Any, ends: Any, counts: Any) -> Any:
    """The running sums, mins or maxes of the key-sorted column ``s``, continuing ``prev``."""
    import numpy as np

    kind = s.dtype.kind
    if kind == "b":
        raise NotVectorized("bools combined")  # True + True is 2, an int: per record
    if op == "sum" and kind == "i":
        # exact in int64 below the limit: a running sum is the prefix sum less the key's start
        reach = float(np.abs(s).sum(dtype=np.float64)) + max((abs(v) for v, h in zip(prev, has) if h), default=0)
        if reach >= INT_LIMIT:
            raise NotVectorized("sums that could leave the exact range")
        cs = np.cumsum(s)
        before = np.where(starts > 0, cs[np.maximum(starts - 1, 0)], 0)
        base = np.array([v if h else 0 for v, h in zip(prev, has)], dtype=np.int64)
        return cs - np.repeat(before, counts) + np.repeat(base, counts)
    if len(starts) > MAX_KEYS_PER_LOOP:
        raise NotVectorized("too many keys in one batch to combine key by key")
    if kind == "f" and op != "sum" and (bool(np.isnan(s).any()) or any(h and v != v for v, h in zip(prev, has))):
        raise NotVectorized("NaN in a min or max")  # Python's min keeps the first of unordered values
    accumulate = {"sum": np.add, "min": np.minimum, "max": np.maximum}[op].accumulate
    r = np.empty_like(s)
    for a, b, v, h in zip(starts.tolist(), ends.tolist(), prev, has):
        seg = s[a:b]
        r[a:b] = accumulate(np.concatenate((np.array([v], dtype=s.dtype), seg)))[1:] if h else accumulate(seg)
    return r


def reducer(fn: Callable, key_selector: Callable) -> Callable[[Columns, dict], Columns] | None:
    """``(batch, table) -> updates`` of a keyed reduce over columns, or None when ``fn`` or the key
    selector can never run over them (see :mod:`flinkpy.spark.vectorized`)."""
    from flinkpy.spark.vectorized import keys

    if not arithmetic(key_selector):
        return None
    if getattr(fn, "field_aggregation", None) is None and not arithmetic(fn):
        return None
    plans: dict[tuple, tuple[str, ...] | None] = {}

    def run(batch: Columns, table: dict) -> Columns:
        shape = (batch.tupled, len(batch.fields))
        if shape not in plans:
            plans[shape] = reduce_plan(fn, batch)
        plan = plans[shape]
        if plan is None:
            raise NotVectorized("not a field-by-field reduce")
        return running_reduce(plan, batch, keys(key_selector, batch), table)

    return run
