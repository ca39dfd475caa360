"""How a record prints: the text PyFlink's ``print()`` and ``SimpleStringEncoder`` produce for it.

PyFlink hands a stream with type information to Java, and Java prints the converted value with
its ``toString``: a tuple ``(hi,9)``, a row ``+I[hi, 9]``, a boolean ``true``, a double ``1.0E7``,
a list ``[a, b]``, a map ``{k=v}``, a missing value ``null``. A stream without type information
(or typed ``PICKLED_BYTE_ARRAY``) stays pickled, and PyFlink prints it with Python's ``str``.
:func:`printer` gives the function that prints a stream's records the same way; ``print()``, the
row-format encoders of FileSink and the Spark runner's print sink all use it.

>>> from flinkpy.common.typeinfo import Types
>>> printer(Types.TUPLE([Types.STRING(), Types.INT()]))(("hi", 9))
'(hi,9)'
>>> printer(Types.ROW([Types.STRING(), Types.BOOLEAN()]))(("hi", True))
'+I[hi, true]'
>>> printer(None)(("hi", 9))
"('hi', 9)"

One function per kind of type information, chosen once per stream through a table (:data:`_KINDS`)
and, for basic types, by name (:data:`_BASIC`); nested types compose, so a record costs one call
per field.
"""

from __future__ import annotations

import datetime
import math
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from flinkpy.common.typeinfo import (
    ArrayTypeInfo,
    BasicTypeInfo,
    ListTypeInfo,
    MapTypeInfo,
    PickledBytesTypeInfo,
    RowTypeInfo,
    TupleTypeInfo,
    TypeInformation,
)

Printer = Callable[[Any], str]


def printer(type_info: TypeInformation | None) -> Printer:
    """The function that prints one record of a stream of ``type_info`` as PyFlink does.

    >>> from flinkpy.common.typeinfo import Types
    >>> p = printer(Types.MAP(Types.STRING(), Types.LIST(Types.DOUBLE())))
    >>> p({"a": [1.0, 1e-4], "b": None})
    '{a=[1.0, 1.0E-4], b=null}'
    """
    if type_info is None or isinstance(type_info, PickledBytesTypeInfo):
        return str  # pickled in PyFlink too: printed with Python's str
    return _printer(type_info)


def _printer(type_info: TypeInformation) -> Printer:
    make = _KINDS.get(type(type_info))
    if make is None:  # a type information flinkpy does not know: its values as Python prints them
        return _null_or(str)
    return make(type_info)


def _null_or(text: Printer) -> Printer:
    def print_value(value: Any) -> str:
        return "null" if value is None else text(value)

    return print_value


# ---- basic types -------------------------------------------------------------------------------


def java_boolean(value: Any) -> str:
    """``true`` / ``false``, as Java's Boolean prints.

    >>> java_boolean(True), java_boolean(0)
    ('true', 'false')
    """
    return "true" if value else "false"


def _java_decimal(negative: bool, digits: str, exponent: int) -> str:
    """Java's layout of a floating-point number whose shortest digits are ``digits`` (no
    leading or trailing zeros) with the first one at 10**``exponent``: plain from 10**-3 up to
    below 10**7, else ``d.dddE<n>``."""
    sign = "-" if negative else ""
    if -3 <= exponent < 7:
        if exponent >= 0:
            whole = digits[: exponent + 1].ljust(exponent + 1, "0")
            fraction = digits[exponent + 1:] or "0"
        else:
            whole, fraction = "0", "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{fraction}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def _special(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    return None


def _digits_of(text: str) -> tuple[bool, str, int]:
    sign, digit_tuple, exp = Decimal(text).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent = len(digit_tuple) + int(exp) - 1  # type: ignore[arg-type]
    stripped = digits.lstrip("0")
    exponent -= len(digits) - len(stripped)
    return bool(sign), stripped, exponent


def java_double(value: Any) -> str:
    """A double as Java's ``Double.toString`` prints it (shortest digits, as Java 19 and later).

    >>> [java_double(v) for v in (1.0, 0.1, 1e7, 1234567.5, 0.001, 1e-4, -2.5e-10, float("inf"))]
    ['1.0', '0.1', '1.0E7', '1234567.5', '0.001', '1.0E-4', '-2.5E-10', 'Infinity']
    """
    value = float(value)
    special = _special(value)
    if special is not None:
        return special
    return _java_decimal(*_digits_of(repr(value)))


def java_float(value: Any) -> str:
    """A float (32 bits) as Java's ``Float.toString`` prints it: the value is first rounded to
    single precision, as PyFlink's conversion does, then printed with the fewest digits that
    give the same single.

    >>> [java_float(v) for v in (0.1, 3.14159265, 1e10, 16777217.0)]
    ['0.1', '3.1415927', '1.0E10', '1.6777216E7']
    """
    single = struct.unpack("f", struct.pack("f", float(value)))[0]
    special = _special(single)
    if special is not None:
        return special
    for precision in range(1, 10):
        text = f"{single:.{precision - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            return _java_decimal(*_digits_of(text))
    return java_double(single)  # unreachable: 9 digits always round-trip a single


def java_time(value: datetime.time) -> str:
    """``java.sql.Time``: hours, minutes, seconds.

    >>> java_time(datetime.time(9, 5, 7, 250))
    '09:05:07'
    """
    return value.strftime("%H:%M:%S")


def java_timestamp(value: datetime.datetime) -> str:
    """``java.sql.Timestamp``: date, time and the fraction of a second without trailing zeros
    (at least one digit).

    >>> java_timestamp(datetime.datetime(2024, 1, 2, 3, 4, 5)), java_timestamp(datetime.datetime(2024, 1, 2, 3, 4, 5, 120000))
    ('2024-01-02 03:04:05.0', '2024-01-02 03:04:05.12')
    """
    fraction = f"{value.microsecond:06d}".rstrip("0") or "0"
    return f"{value:%Y-%m-%d %H:%M:%S}.{fraction}"


def java_instant(value: datetime.datetime) -> str:
    """``java.time.Instant``: ISO-8601 in UTC with a ``Z``, the fraction in groups of three
    digits, none when whole (a naive datetime is taken as UTC).

    >>> java_instant(datetime.datetime(2024, 1, 2, 3, 4, 5)), java_instant(datetime.datetime(2024, 1, 2, 3, 4, 5, 1000))
    ('2024-01-02T03:04:05Z', '2024-01-02T03:04:05.001Z')
    """
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc)
    fraction = ""
    if value.microsecond:
        fraction = "." + (f"{value.microsecond // 1000:03d}" if value.microsecond % 1000 == 0 else f"{value.microsecond:06d}")
    return f"{value:%Y-%m-%dT%H:%M:%S}{fraction}Z"


def _date(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime.date) else str(value)


def _typed(kind: type, text: Printer) -> Printer:
    """``text`` for values of ``kind``, Python's str for anything else (a value that does not
    match its declared type, which PyFlink would refuse at conversion)."""

    def print_value(value: Any) -> str:
        return text(value) if isinstance(value, kind) else str(value)

    return print_value


#: basic types by name; the rest (strings, integers, BIG_DEC, CHAR) print as Python and Java
#: print them alike (``str``; Python's Decimal follows the same scientific-notation rules as
#: Java's BigDecimal.toString)
_BASIC: dict[str, Printer] = {
    "BOOLEAN": java_boolean,
    "FLOAT": _typed((int, float), java_float),  # type: ignore[arg-type]
    "DOUBLE": _typed((int, float), java_double),  # type: ignore[arg-type]
    "SQL_DATE": _date,
    "SQL_TIME": _typed(datetime.time, java_time),
    "SQL_TIMESTAMP": _typed(datetime.datetime, java_timestamp),
    "INSTANT": _typed(datetime.datetime, java_instant),
}


def _plain(value: Any) -> str:
    """Strings and integers: Python's str, ``null`` for None."""
    return "null" if value is None else str(value)


def _basic(type_info: BasicTypeInfo) -> Printer:
    text = _BASIC.get(str(type_info))
    return _plain if text is None else _null_or(text)


def _joined(fields: list[Printer], separator: str) -> Callable[[Any], str]:
    """The fields of a value printed by ``fields`` and joined; one comprehension, without a call
    per field, when every field is a string or an integer (most tuples: ``(word,3)``)."""
    if all(f is _plain for f in fields):
        return lambda value: separator.join(["null" if v is None else str(v) for v in value])
    return lambda value: separator.join([f(v) for f, v in zip(fields, value)])


# ---- composite types ---------------------------------------------------------------------------


def _tuple(type_info: TupleTypeInfo) -> Printer:
    """Flink's Tuple: ``(a,b)``, fields joined by a bare comma."""
    join = _joined([_printer(t) for t in type_info.get_field_types()], ",")

    def print_tuple(value: Any) -> str:
        return "(" + join(value) + ")"

    return _null_or(print_tuple)


def _row(type_info: RowTypeInfo) -> Printer:
    """Flink's Row: its kind, then the fields joined by ``", "`` in brackets: ``+I[a, 1]``."""
    join = _joined([_printer(t) for t in type_info.get_field_types()], ", ")

    def print_row(value: Any) -> str:
        kind = value.get_row_kind().short_string() if hasattr(value, "get_row_kind") else "+I"
        return kind + "[" + join(value) + "]"

    return _null_or(print_row)


def _sequence(element_type: TypeInformation) -> Printer:
    """Java's List and Arrays.toString: ``[a, b]``."""
    element = _printer(element_type)

    def print_sequence(value: Any) -> str:
        return "[" + ", ".join(map(element, value)) + "]"

    return _null_or(print_sequence)


def _list(type_info: ListTypeInfo) -> Printer:
    return _sequence(type_info.get_element_type())


def _array(type_info: ArrayTypeInfo) -> Printer:
    # Java prints an array on its own as a type and an address ("[I@1b6d3586") and one inside a
    # tuple or row as its elements; flinkpy prints the elements in both places
    return _sequence(type_info.get_element_type())


def _map(type_info: MapTypeInfo) -> Printer:
    """Java's Map: ``{k=v, k2=v2}`` (in the dict's order; a Java HashMap's order is its hash's)."""
    key, val = _printer(type_info.get_key_type()), _printer(type_info.get_value_type())

    def print_map(value: Any) -> str:
        return "{" + ", ".join(f"{key(k)}={val(v)}" for k, v in value.items()) + "}"

    return _null_or(print_map)


def _pickled(type_info: PickledBytesTypeInfo) -> Printer:
    # inside a tuple or row Java holds the pickle's bytes; their Python str says more
    return _null_or(str)


_KINDS: dict[type, Callable[[Any], Printer]] = {
    BasicTypeInfo: _basic,
    PickledBytesTypeInfo: _pickled,
    TupleTypeInfo: _tuple,
    RowTypeInfo: _row,
    ListTypeInfo: _list,
    ArrayTypeInfo: _array,
    MapTypeInfo: _map,
}
