"""Type information: how a job says what its records are, named as in ``pyflink.common.typeinfo``.

flinkpy serializes records with pickle, so type information is mostly a declaration: it lets a
PyFlink program run unchanged, shows up readably in plans and logs, and lets a serializer pick
a faster encoding where it knows the shape (for example ``Types.ROW`` fields).

>>> from flinkpy.common.typeinfo import Types
>>> str(Types.TUPLE([Types.STRING(), Types.INT()]))
'TUPLE(STRING, INT)'
>>> Types.ROW_NAMED(["word", "count"], [Types.STRING(), Types.LONG()])
ROW_NAMED(word: STRING, count: LONG)
>>> Types.STRING() == Types.STRING()
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable


class TypeInformation:
    """The type of the values of a stream or a state.

    Instances are immutable value objects: equal when they describe the same type, so that
    two state descriptors for the same state compare equal across job submissions.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def _key(self) -> tuple:
        raise NotImplementedError

    def __repr__(self) -> str:
        return str(self)

    def need_conversion(self) -> bool:
        """PyFlink asks this to decide whether values cross the Java boundary; never here."""
        return False


class BasicTypeInfo(TypeInformation):
    """A scalar type such as ``STRING`` or ``LONG``; compared by name."""

    __slots__ = ("_name", "python_type")

    def __init__(self, name: str, python_type: type | None = None) -> None:
        self._name = name
        self.python_type = python_type

    def _key(self) -> tuple:
        return (self._name,)

    def __str__(self) -> str:
        return self._name

    def __reduce__(self) -> tuple:
        return (BasicTypeInfo, (self._name, self.python_type))


class PickledBytesTypeInfo(BasicTypeInfo):
    """Any picklable Python object: the default when a job declares no type."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("PICKLED_BYTE_ARRAY", object)

    def __reduce__(self) -> tuple:
        return (PickledBytesTypeInfo, ())


class ArrayTypeInfo(TypeInformation):
    """An array of elements: ``kind`` is PRIMITIVE_ARRAY, BASIC_ARRAY or OBJECT_ARRAY."""

    __slots__ = ("_kind", "_element_type")

    def __init__(self, kind: str, element_type: TypeInformation) -> None:
        self._kind = kind
        self._element_type = element_type

    def get_element_type(self) -> TypeInformation:
        return self._element_type

    def _key(self) -> tuple:
        return (self._kind, self._element_type)

    def __str__(self) -> str:
        return f"{self._kind}({self._element_type})"

    def __reduce__(self) -> tuple:
        return (ArrayTypeInfo, (self._kind, self._element_type))


class ListTypeInfo(TypeInformation):
    """A Python list of elements of one type."""

    __slots__ = ("_element_type",)

    def __init__(self, element_type: TypeInformation) -> None:
        self._element_type = element_type

    def get_element_type(self) -> TypeInformation:
        return self._element_type

    def _key(self) -> tuple:
        return (self._element_type,)

    def __str__(self) -> str:
        return f"LIST({self._element_type})"

    def __reduce__(self) -> tuple:
        return (ListTypeInfo, (self._element_type,))


class MapTypeInfo(TypeInformation):
    """A Python dict with keys of one type and values of another."""

    __slots__ = ("_key_type", "_value_type")

    def __init__(self, key_type: TypeInformation, value_type: TypeInformation) -> None:
        self._key_type = key_type
        self._value_type = value_type

    def get_key_type(self) -> TypeInformation:
        return self._key_type

    def get_value_type(self) -> TypeInformation:
        return self._value_type

    def _key(self) -> tuple:
        return (self._key_type, self._value_type)

    def __str__(self) -> str:
        return f"MAP({self._key_type}, {self._value_type})"

    def __reduce__(self) -> tuple:
        return (MapTypeInfo, (self._key_type, self._value_type))


class TupleTypeInfo(TypeInformation):
    """A Python tuple whose positions have the given types."""

    __slots__ = ("_field_types",)

    def __init__(self, field_types: Sequence[TypeInformation]) -> None:
        self._field_types = tuple(field_types)

    def get_field_types(self) -> list[TypeInformation]:
        return list(self._field_types)

    def get_arity(self) -> int:
        return len(self._field_types)

    def _key(self) -> tuple:
        return self._field_types

    def __str__(self) -> str:
        return "TUPLE(" + ", ".join(str(t) for t in self._field_types) + ")"

    def __reduce__(self) -> tuple:
        return (TupleTypeInfo, (self._field_types,))


class RowTypeInfo(TypeInformation):
    """A :class:`~flinkpy.common.types.Row` with typed fields, named or positional.

    Without names the fields are called ``f0``, ``f1``, ... as in Flink.
    """

    __slots__ = ("_field_types", "_field_names", "_named")

    def __init__(
        self, field_types: Sequence[TypeInformation], field_names: Sequence[str] | None = None
    ) -> None:
        self._field_types = tuple(field_types)
        self._named = field_names is not None
        if field_names is None:
            field_names = [f"f{i}" for i in range(len(self._field_types))]
        if len(field_names) != len(self._field_types):
            raise ValueError(
                f"ROW_NAMED needs one name per type: got {len(field_names)} names "
                f"for {len(self._field_types)} types"
            )
        self._field_names = tuple(field_names)

    def get_field_names(self) -> list[str]:
        return list(self._field_names)

    def get_field_types(self) -> list[TypeInformation]:
        return list(self._field_types)

    def get_field_index(self, field_name: str) -> int:
        try:
            return self._field_names.index(field_name)
        except ValueError:
            return -1

    def get_arity(self) -> int:
        return len(self._field_types)

    def to_row(self, value: Any) -> Any:
        """``value`` as a Row of this type, as PyFlink's row coder hands records to Python: a
        tuple or list becomes a Row with this type's field names (``f0``, ``f1``, ... unless
        named); a Row keeps its values and gets the names.

        >>> Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()]).to_row((1, "a"))
        Row(id=1, name='a')
        >>> Types.ROW([Types.INT(), Types.STRING()]).to_row([2, "b"]).f1
        'b'
        """
        from flinkpy.common.types import Row

        if isinstance(value, Row):
            row = Row(*value)
            row.set_row_kind(value.get_row_kind())
        elif isinstance(value, (tuple, list)):
            row = Row(*value)
        else:
            raise TypeError(f"{value!r} is not a row of {self}: give a tuple, a list or a Row")
        if len(row) != len(self._field_types):
            raise TypeError(f"{value!r} has {len(row)} field(s), {self} has {len(self._field_types)}")
        row.set_field_names(list(self._field_names))
        return row

    def row_converter(self) -> Callable[[list], list]:
        """A function that turns a batch of values into Rows of this type, as :meth:`to_row`
        does for one: what an operator declared with this ``output_type`` applies to its
        output. Rows already of this type pass through as they are; all rows it makes share
        one list of field names, so a record costs one small object.

        >>> conv = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()]).row_converter()
        >>> conv([(1, "a"), [2, "b"]])
        [Row(id=1, name='a'), Row(id=2, name='b')]
        """
        from flinkpy.common.types import Row, named_row

        names = list(self._field_names)
        arity = len(names)
        to_row = self.to_row

        def convert(values: list) -> list:
            out = []
            append = out.append
            for v in values:
                t = type(v)
                if (t is tuple or t is list) and len(v) == arity:
                    append(named_row(list(v), names))
                elif t is Row and v._fields == names:  # type: ignore[attr-defined]
                    append(v)
                else:
                    append(to_row(v))  # a Row to rename, or a value it explains the error of
            return out

        return convert

    def _key(self) -> tuple:
        return (self._field_types, self._field_names)

    def __str__(self) -> str:
        if self._named:
            inner = ", ".join(f"{n}: {t}" for n, t in zip(self._field_names, self._field_types))
            return f"ROW_NAMED({inner})"
        return "ROW(" + ", ".join(str(t) for t in self._field_types) + ")"

    def __reduce__(self) -> tuple:
        names = self._field_names if self._named else None
        return (RowTypeInfo, (self._field_types, names))


def _basic(name: str, python_type: type | None) -> BasicTypeInfo:
    return BasicTypeInfo(name, python_type)


class Types:
    """Factories for :class:`TypeInformation`, one per type PyFlink names.

    Every attribute is a callable, as in PyFlink: ``Types.STRING()``, not ``Types.STRING``.

    >>> Types.MAP(Types.STRING(), Types.LIST(Types.INT()))
    MAP(STRING, LIST(INT))
    """

    @staticmethod
    def STRING() -> TypeInformation:
        return _basic("STRING", str)

    @staticmethod
    def BYTE() -> TypeInformation:
        return _basic("BYTE", int)

    @staticmethod
    def BOOLEAN() -> TypeInformation:
        return _basic("BOOLEAN", bool)

    @staticmethod
    def SHORT() -> TypeInformation:
        return _basic("SHORT", int)

    @staticmethod
    def INT() -> TypeInformation:
        return _basic("INT", int)

    @staticmethod
    def LONG() -> TypeInformation:
        return _basic("LONG", int)

    @staticmethod
    def FLOAT() -> TypeInformation:
        return _basic("FLOAT", float)

    @staticmethod
    def DOUBLE() -> TypeInformation:
        return _basic("DOUBLE", float)

    @staticmethod
    def CHAR() -> TypeInformation:
        return _basic("CHAR", str)

    @staticmethod
    def BIG_INT() -> TypeInformation:
        return _basic("BIG_INT", int)

    @staticmethod
    def BIG_DEC() -> TypeInformation:
        import decimal

        return _basic("BIG_DEC", decimal.Decimal)

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        import datetime

        return _basic("SQL_DATE", datetime.date)

    @staticmethod
    def SQL_TIME() -> TypeInformation:
        import datetime

        return _basic("SQL_TIME", datetime.time)

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        import datetime

        return _basic("SQL_TIMESTAMP", datetime.datetime)

    @staticmethod
    def INSTANT() -> TypeInformation:
        import datetime

        return _basic("INSTANT", datetime.datetime)

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return PickledBytesTypeInfo()

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ArrayTypeInfo("PRIMITIVE_ARRAY", element_type)

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ArrayTypeInfo("BASIC_ARRAY", element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ArrayTypeInfo("OBJECT_ARRAY", element_type)

    @staticmethod
    def ROW(field_types: list[TypeInformation]) -> TypeInformation:
        return RowTypeInfo(field_types)

    @staticmethod
    def ROW_NAMED(field_names: list[str], field_types: list[TypeInformation]) -> TypeInformation:
        return RowTypeInfo(field_types, field_names)

    @staticmethod
    def TUPLE(field_types: list[TypeInformation]) -> TypeInformation:
        return TupleTypeInfo(field_types)

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:
        return MapTypeInfo(key_type_info, value_type_info)

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:
        return ListTypeInfo(element_type_info)
