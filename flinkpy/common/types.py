"""Row and RowKind: the record type of PyFlink programs.

A :class:`Row` holds field values in order; when built from keyword arguments its fields also
have names, readable as attributes. A row also carries a :class:`RowKind`, which says what
change of a changelog it describes (insert by default).

>>> r = Row(word="a", count=1)
>>> r
Row(word='a', count=1)
>>> r[0], r.count, r["word"]
('a', 1, 'a')
>>> r.as_dict()
{'word': 'a', 'count': 1}
>>> Row(1, 2)
<Row(1, 2)>

A row without names prints in angle brackets, as PyFlink prints it, so that it cannot be taken
for a named one. Rows made from ``Types.ROW`` type information have the names ``f0``, ``f1``, ...:

>>> from flinkpy.common.typeinfo import Types
>>> Types.ROW([Types.INT(), Types.STRING()]).to_row((1, "a"))
Row(f0=1, f1='a')

Unlike PyFlink, keyword arguments keep the order they are given in (PyFlink sorts them by name):
a row's place in key groups depends on its values' order, and savepoints of existing jobs hold
rows built that way.

Calling a row of names builds rows with those names (PyFlink's "row class" idiom):

>>> Person = Row("name", "age")
>>> Person("Alice", 11)
Row(name='Alice', age=11)
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any


class RowKind(enum.Enum):
    """The kind of change a row describes; values match Flink's byte values."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def short_string(self) -> str:
        """Flink's compact notation, as printed before a row: ``+I``, ``-U``, ``+U``, ``-D``."""
        return _SHORT[self]

    def __str__(self) -> str:
        return self.short_string()


_SHORT = {
    RowKind.INSERT: "+I",
    RowKind.UPDATE_BEFORE: "-U",
    RowKind.UPDATE_AFTER: "+U",
    RowKind.DELETE: "-D",
}


class Row:
    """A record of ordered fields, optionally named; see the module docstring.

    Rows are mutable like PyFlink's (``row[0] = ...``) and therefore hashable only by value
    at the time of hashing: do not mutate a row that is used as a key.
    """

    __slots__ = ("_values", "_fields", "_row_kind")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError("Row takes either positional values or named fields, not both")
        if kwargs:
            self._fields: list[str] | None = list(kwargs)
            self._values: list[Any] = list(kwargs.values())
        else:
            self._fields = None
            self._values = list(args)
        self._row_kind = RowKind.INSERT

    @classmethod
    def of_kind(cls, row_kind: RowKind, *args: Any, **kwargs: Any) -> Row:
        """Build a row that describes ``row_kind`` rather than an insert."""
        row = cls(*args, **kwargs)
        row._row_kind = row_kind
        return row

    # -- field access -------------------------------------------------------------------
    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        """The named fields as a dict; nested rows become dicts too when ``recursive``."""
        if self._fields is None:
            raise TypeError("Cannot convert a Row without field names to a dict")
        if not recursive:
            return dict(zip(self._fields, self._values))

        def conv(obj: Any) -> Any:
            if isinstance(obj, Row) and obj._fields is not None:
                return obj.as_dict(True)
            if isinstance(obj, list):
                return [conv(o) for o in obj]
            if isinstance(obj, dict):
                return {k: conv(v) for k, v in obj.items()}
            return obj

        return {n: conv(v) for n, v in zip(self._fields, self._values)}

    def get_fields_by_names(self, names: list[str]) -> list[Any]:
        """The values of the named fields, in the order of ``names``."""
        return [self[n] for n in names]

    def set_field_names(self, field_names: list[str]) -> None:
        """Name the fields of a positional row (one name per value)."""
        if len(field_names) != len(self._values):
            raise ValueError(
                f"Row has {len(self._values)} values but {len(field_names)} names were given"
            )
        self._fields = list(field_names)

    def get_field_names(self) -> list[str] | None:
        return None if self._fields is None else list(self._fields)

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        self._row_kind = row_kind

    def _index_of(self, name: str) -> int:
        if self._fields is not None:
            try:
                return self._fields.index(name)
            except ValueError:
                pass
        raise KeyError(name)

    def __getitem__(self, item: int | slice | str) -> Any:
        if isinstance(item, str):
            return self._values[self._index_of(item)]
        return self._values[item]

    def __setitem__(self, item: int | str, value: Any) -> None:
        if isinstance(item, str):
            self._values[self._index_of(item)] = value
        else:
            self._values[item] = value

    def __getattr__(self, name: str) -> Any:
        # Slots not yet set (during unpickling) and dunders must not recurse into fields.
        if name.startswith("__") or name in Row.__slots__:
            raise AttributeError(name)
        try:
            return self._values[self._index_of(name)]
        except KeyError:
            raise AttributeError(f"Row has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name in Row.__slots__:
            object.__setattr__(self, name, value)
            return
        try:
            self._values[self._index_of(name)] = value
        except KeyError:
            raise AttributeError(f"Row has no field {name!r}") from None

    def __call__(self, *args: Any) -> Row:
        """Use a row of field names as a factory of rows with those names."""
        names = [str(v) for v in self._values]
        if len(args) > len(names):
            raise ValueError(f"Cannot build a Row of {len(names)} fields from {len(args)} values")
        return Row(**dict(zip(names, args)))

    # -- container protocol -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __contains__(self, item: Any) -> bool:
        if self._fields is not None and isinstance(item, str) and item in self._fields:
            return True
        return item in self._values

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row):
            return NotImplemented
        return (
            self._row_kind is other._row_kind
            and self._fields == other._fields
            and self._values == other._values
        )

    def __hash__(self) -> int:
        # Process-local only; flinkpy.state.key_groups hashes rows stably for key groups.
        return hash((self._row_kind, tuple(self._fields or ()), tuple(self._values)))

    def __repr__(self) -> str:
        if self._fields is not None:
            inner = ", ".join(f"{n}={v!r}" for n, v in zip(self._fields, self._values))
            return f"Row({inner})"
        # PyFlink marks a row without names (also a "row class" of names) with angle brackets
        return "<Row(" + ", ".join(repr(v) for v in self._values) + ")>"

    # -- pickling (slots plus __getattr__ need explicit state) ----------------------------
    def __getstate__(self) -> tuple:
        return (self._values, self._fields, self._row_kind.value)

    def __setstate__(self, state: tuple) -> None:
        values, fields, kind = state
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_row_kind", RowKind(kind))

    def __reduce__(self) -> tuple:
        return (_new_row, (), self.__getstate__())


def _new_row() -> Row:
    return Row.__new__(Row)


def named_row(values: list[Any], field_names: list[str]) -> Row:
    """A row of ``values`` named by ``field_names`` (not copied: the caller shares one list of
    names among the rows of a type, which rows never change in place), an insert.

    The fast way to build many rows of one type; the caller checks the lengths.

    >>> named_row([1, "a"], ["id", "name"])
    Row(id=1, name='a')
    """
    row = Row.__new__(Row)
    object.__setattr__(row, "_values", values)
    object.__setattr__(row, "_fields", field_names)
    object.__setattr__(row, "_row_kind", RowKind.INSERT)
    return row
