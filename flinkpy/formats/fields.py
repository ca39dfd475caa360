"""Values of a row's fields, converted by their type information to and from JSON and text.

One place knows how a ``Types.*`` value looks outside Python, so that JSON and CSV agree: dates
and times in ISO 8601, byte arrays in base64 (JSON), booleans as ``true`` / ``false``. A value
that does not fit its type raises :class:`RowFormatError` naming the field by its path
(``address.city``), which the schemas complete with the record.

>>> from flinkpy.common.typeinfo import Types
>>> from_json("2024-02-29", Types.SQL_DATE(), "day")
datetime.date(2024, 2, 29)
>>> from_text("x1", Types.INT(), "id")
Traceback (most recent call last):
...
flinkpy.formats.fields.RowFormatError: field 'id' (INT): cannot read 'x1' as INT
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any, Callable

from flinkpy.common.typeinfo import (
    ArrayTypeInfo,
    BasicTypeInfo,
    ListTypeInfo,
    MapTypeInfo,
    RowTypeInfo,
    TupleTypeInfo,
    TypeInformation,
)
from flinkpy.common.types import Row, named_row
from flinkpy.errors import ExitCode, FlinkpyError

_INTEGRAL = {"BYTE", "SHORT", "INT", "LONG", "BIG_INT"}
_FLOATING = {"FLOAT", "DOUBLE"}


class RowFormatError(FlinkpyError):
    """A record does not fit its row format: a bad field, a missing one, bytes that do not parse."""

    exit_code = ExitCode.JOB_FAILED


def _fail(path: str, type_info: TypeInformation, why: str) -> RowFormatError:
    return RowFormatError(f"field {path!r} ({type_info}): {why}")


def _parse_basic(text: str, name: str) -> Any:
    """A scalar of type ``name`` from its text (raises ValueError)."""
    if name in _INTEGRAL:
        return int(text)
    if name in _FLOATING:
        return float(text)
    if name == "BOOLEAN":
        low = text.strip().lower()
        if low in ("true", "false"):
            return low == "true"
        raise ValueError(text)
    if name == "BIG_DEC":
        return decimal.Decimal(text)
    if name == "SQL_DATE":
        return datetime.date.fromisoformat(text)
    if name == "SQL_TIME":
        return datetime.time.fromisoformat(text)
    if name in ("SQL_TIMESTAMP", "INSTANT"):
        stamp = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        if name == "SQL_TIMESTAMP" and stamp.tzinfo is not None:
            stamp = stamp.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return stamp
    return text  # STRING, CHAR


def _basic_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)


def _fields(row_type: RowTypeInfo) -> list[tuple[str, TypeInformation]]:
    return list(zip(row_type.get_field_names(), row_type.get_field_types()))


def row_values(value: Any, row_type: RowTypeInfo, path: str = "") -> list[Any]:
    """The field values of ``value`` (a Row, tuple, list, or dict by field name) in the order of
    ``row_type``'s fields."""
    names = row_type.get_field_names()
    if isinstance(value, dict):
        return [value.get(n) for n in names]
    if isinstance(value, (Row, tuple, list)):
        if len(value) != len(names):
            where = f"field {path!r}: " if path else ""
            raise RowFormatError(f"{where}{value!r} has {len(value)} value(s), the type {row_type} has {len(names)}")
        return list(value)
    raise RowFormatError(f"{'field ' + repr(path) + ': ' if path else ''}{value!r} is not a row of {row_type}")


# -- JSON ---------------------------------------------------------------------------------------


def from_json(value: Any, type_info: TypeInformation, path: str, fail_on_missing: bool = False) -> Any:
    """The Python value of a parsed JSON ``value`` of type ``type_info``; None stays None."""
    if value is None:
        return None
    if isinstance(type_info, RowTypeInfo):
        if not isinstance(value, dict):
            raise _fail(path, type_info, f"expected a JSON object, got {json.dumps(value)}")
        return json_object_row(value, type_info, path + ".", fail_on_missing)
    if isinstance(type_info, ArrayTypeInfo) and str(type_info.get_element_type()) == "BYTE":
        try:
            return base64.b64decode(value, validate=True)
        except (TypeError, ValueError):
            raise _fail(path, type_info, f"expected base64 text, got {json.dumps(value)}") from None
    if isinstance(type_info, (ListTypeInfo, ArrayTypeInfo)):
        if not isinstance(value, list):
            raise _fail(path, type_info, f"expected a JSON array, got {json.dumps(value)}")
        element = type_info.get_element_type()
        return [from_json(v, element, f"{path}[{i}]", fail_on_missing) for i, v in enumerate(value)]
    if isinstance(type_info, MapTypeInfo):
        if not isinstance(value, dict):
            raise _fail(path, type_info, f"expected a JSON object, got {json.dumps(value)}")
        kt, vt = type_info.get_key_type(), type_info.get_value_type()
        return {from_text(k, kt, f"{path}.{k}"): from_json(v, vt, f"{path}.{k}", fail_on_missing) for k, v in value.items()}
    if isinstance(type_info, BasicTypeInfo) and type_info.python_type is not object:
        name = str(type_info)
        if name in ("STRING", "CHAR"):
            return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        if isinstance(value, bool) != (name == "BOOLEAN") and not isinstance(value, str):
            raise _fail(path, type_info, f"expected {name}, got {json.dumps(value)}")
        if name in _INTEGRAL and isinstance(value, float) and not value.is_integer():
            raise _fail(path, type_info, f"expected {name}, got {json.dumps(value)}")
        if not isinstance(value, (str, int, float)):
            raise _fail(path, type_info, f"expected {name}, got {json.dumps(value)}")
        try:
            return _parse_basic(value, name) if isinstance(value, str) else _number(value, name)
        except (ValueError, ArithmeticError):
            raise _fail(path, type_info, f"cannot read {json.dumps(value)} as {name}") from None
    return value  # PICKLED_BYTE_ARRAY and tuples: as JSON gave it


def _number(value: Any, name: str) -> Any:
    if name in _INTEGRAL:
        return int(value)
    if name in _FLOATING:
        return float(value)
    if name == "BIG_DEC":
        return decimal.Decimal(repr(value) if isinstance(value, float) else value)
    if name == "BOOLEAN":
        return value
    raise ValueError(name)


def json_object_row(obj: dict, row_type: RowTypeInfo, prefix: str = "", fail_on_missing: bool = False) -> Row:
    """A Row of ``row_type`` from a JSON object, fields matched by name; a missing field is None,
    or an error with ``fail_on_missing``."""
    values = []
    for name, t in _fields(row_type):
        if name not in obj:
            if fail_on_missing:
                raise _fail(prefix + name, t, "missing in the record")
            values.append(None)
            continue
        values.append(from_json(obj[name], t, prefix + name, fail_on_missing))
    return named_row(values, row_type.get_field_names())


def to_json(value: Any, type_info: TypeInformation, path: str) -> Any:
    """``value`` of ``type_info`` as something ``json.dumps`` writes."""
    if value is None:
        return None
    if isinstance(type_info, RowTypeInfo):
        values = row_values(value, type_info, path)
        return {n: to_json(v, t, f"{path}.{n}" if path else n) for (n, t), v in zip(_fields(type_info), values)}
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(type_info, (ListTypeInfo, ArrayTypeInfo)):
        element = type_info.get_element_type()
        return [to_json(v, element, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(type_info, MapTypeInfo):
        vt = type_info.get_value_type()
        return {_basic_text(k): to_json(v, vt, f"{path}.{k}") for k, v in value.items()}
    if isinstance(type_info, TupleTypeInfo):
        return [to_json(v, t, f"{path}[{i}]") for i, (v, t) in enumerate(zip(value, type_info.get_field_types()))]
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return value


# -- text (CSV) ---------------------------------------------------------------------------------


def from_text(text: str, type_info: TypeInformation, path: str, split: Callable[[str], list[str]] | None = None) -> Any:
    """The value of type ``type_info`` written as ``text``; ``split`` cuts an array's text into
    its elements (CSV's array element delimiter)."""
    if isinstance(type_info, (ListTypeInfo, ArrayTypeInfo, RowTypeInfo)):
        if text == "":
            return None  # as an empty field of any non-text type (an empty array writes the same)
        parts = split(text) if split is not None else text.split(";")
        if isinstance(type_info, RowTypeInfo):
            if len(parts) != type_info.get_arity():
                raise _fail(path, type_info, f"{len(parts)} element(s) in {text!r}, the type has {type_info.get_arity()}")
            values = [from_text(p, t, f"{path}.{n}") for p, (n, t) in zip(parts, _fields(type_info))]
            return named_row(values, type_info.get_field_names())
        element = type_info.get_element_type()
        return [from_text(p, element, f"{path}[{i}]") for i, p in enumerate(parts)]
    if not isinstance(type_info, BasicTypeInfo) or type_info.python_type is object:
        return text
    name = str(type_info)
    if name not in ("STRING", "CHAR") and text == "":
        return None  # an empty field of a non-text type is a missing value
    try:
        return _parse_basic(text, name)
    except (ValueError, ArithmeticError):
        raise _fail(path, type_info, f"cannot read {text!r} as {name}") from None


def to_text(value: Any, type_info: TypeInformation, path: str, element_delimiter: str = ";") -> str:
    """``value`` of ``type_info`` as one CSV field's text (an array's elements joined)."""
    if isinstance(type_info, RowTypeInfo):
        values = row_values(value, type_info, path)
        return element_delimiter.join(to_text(v, t, f"{path}.{n}") for (n, t), v in zip(_fields(type_info), values))
    if isinstance(type_info, (ListTypeInfo, ArrayTypeInfo)) and not isinstance(value, (bytes, str)):
        element = type_info.get_element_type()
        return element_delimiter.join(to_text(v, element, f"{path}[{i}]") for i, v in enumerate(value))
    return _basic_text(value)
