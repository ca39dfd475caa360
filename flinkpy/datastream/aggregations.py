"""The reduce functions behind KeyedStream.sum/min/max/min_by/max_by.

A position addresses a tuple/list/Row field by index, a Row field by name; a scalar stream
(plain numbers) is aggregated as a whole when the position is 0. As in Flink, ``min``/``max``
keep the other fields of the first record seen and only track the extreme value of the field,
while ``min_by``/``max_by`` keep the whole record that holds the extreme (the first on ties).
"""

from __future__ import annotations

import operator
from typing import Any, Callable

from flinkpy.errors import InvalidProgramError


def _get(value: Any, pos: int | str) -> Any:
    if isinstance(value, (int, float)) and pos == 0:
        return value
    if isinstance(pos, str):
        return getattr(value, pos) if not isinstance(value, dict) else value[pos]
    return value[pos]


def _replace(value: Any, pos: int | str, new: Any) -> Any:
    if isinstance(value, (int, float)) and pos == 0:
        return new
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return value[:pos] + (new,) + value[pos + 1 :]  # type: ignore[operator]
    if isinstance(value, list):
        out = list(value)
        out[pos] = new  # type: ignore[index]
        return out
    from flinkpy.common.types import Row

    if isinstance(value, Row):
        values = list(value)
        idx = pos if isinstance(pos, int) else value._fields.index(pos)  # type: ignore[attr-defined]
        values[idx] = new
        out = Row(*values) if not getattr(value, "_fields", None) else Row(**dict(zip(value._fields, values)))  # type: ignore[attr-defined]
        out.set_row_kind(value.get_row_kind())
        return out
    if hasattr(value, "_replace") and isinstance(pos, str):
        return value._replace(**{pos: new})
    raise InvalidProgramError(f"cannot aggregate field {pos!r} of a {type(value).__name__}")


def field_aggregator(how: str, pos: int | str) -> Callable[[Any, Any], Any]:
    """The reduce function of ``KeyedStream.<how>(pos)``.

    Plain tuples addressed by index, the common case (``sum(1)`` of ``(word, 1)``), take a path
    with no type dispatch: the general one costs several ``isinstance`` calls per record, which
    was most of a running word count's time in its keyed operator."""
    general = _general(how, pos)
    general.field_aggregation = (how, pos)  # type: ignore[attr-defined]
    if isinstance(pos, bool) or not isinstance(pos, int) or pos < 0 or how not in ("sum", "min", "max"):
        return general
    combine = {"sum": operator.add, "min": min, "max": max}[how]
    i, rest = pos, pos + 1

    def on_tuples(a: Any, b: Any) -> Any:
        if type(a) is tuple and type(b) is tuple:
            return a[:i] + (combine(a[i], b[i]),) + a[rest:]
        return general(a, b)

    #: what the function computes, for a runner that computes it otherwise (flinkpy.spark.running_reduce)
    on_tuples.field_aggregation = (how, pos)  # type: ignore[attr-defined]
    return on_tuples


def _general(how: str, pos: int | str) -> Callable[[Any, Any], Any]:
    if how == "sum":
        return lambda a, b: _replace(a, pos, _get(a, pos) + _get(b, pos))
    if how == "min":
        return lambda a, b: _replace(a, pos, min(_get(a, pos), _get(b, pos)))
    if how == "max":
        return lambda a, b: _replace(a, pos, max(_get(a, pos), _get(b, pos)))
    if how == "min_by":
        return lambda a, b: a if _get(a, pos) <= _get(b, pos) else b
    if how == "max_by":
        return lambda a, b: a if _get(a, pos) >= _get(b, pos) else b
    raise ValueError(how)
