"""JSON row format: one JSON object per record, its properties the fields of a row type.

Built as PyFlink builds them (``pyflink.datastream.formats.json``):

>>> from flinkpy.common.typeinfo import Types
>>> from flinkpy.common.types import Row
>>> person = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
>>> out = JsonRowSerializationSchema.builder().with_type_info(person).build()
>>> out.serialize(Row(id=1, name="Ada"))
b'{"id":1,"name":"Ada"}'
>>> into = JsonRowDeserializationSchema.builder().type_info(person).build()
>>> into.deserialize(b'{"name": "Grace", "id": 2, "extra": true}')
Row(id=2, name='Grace')

A property that is not there is None (``fail_on_missing_field()`` makes it an error); a record
that does not parse, or whose field does not fit its type, fails the job with the record and
the field named — unless ``ignore_parse_errors()``, with which the record is skipped
(``deserialize`` returns None, which sources drop), as in PyFlink:

>>> into.deserialize(b'{"id": "two"}')
Traceback (most recent call last):
...
flinkpy.formats.fields.RowFormatError: cannot read JSON record '{"id": "two"}': field 'id' (INT): cannot read "two" as INT (fix the record, or skip bad records with ignore_parse_errors())
>>> JsonRowDeserializationSchema.builder().type_info(person).ignore_parse_errors().build().deserialize(b"{oops")
"""

from __future__ import annotations

import json
from typing import Any

from flinkpy.common.serialization import DeserializationSchema, SerializationSchema
from flinkpy.common.typeinfo import RowTypeInfo, TypeInformation
from flinkpy.common.types import Row
from flinkpy.formats.fields import RowFormatError, json_object_row, to_json


def _record_text(message: Any, limit: int = 200) -> str:
    text = message.decode("utf-8", "replace") if isinstance(message, (bytes, bytearray, memoryview)) else str(message)
    return text if len(text) <= limit else text[:limit] + "..."


def _row_type(type_info: Any, what: str) -> RowTypeInfo:
    if not isinstance(type_info, RowTypeInfo):
        raise TypeError(f"{what} needs a row type (Types.ROW_NAMED(...) or Types.ROW(...)), got {type_info!r}")
    return type_info


class JsonRowDeserializationSchema(DeserializationSchema):
    """Reads a JSON object into a Row of the type information's fields (by name)."""

    def __init__(self, type_info: RowTypeInfo, fail_on_missing_field: bool = False, ignore_parse_errors: bool = False) -> None:
        if fail_on_missing_field and ignore_parse_errors:
            raise ValueError("fail_on_missing_field() and ignore_parse_errors() cannot be used together: "
                             "choose whether a missing field fails the job or is skipped")
        self.type_info = _row_type(type_info, "JsonRowDeserializationSchema")
        self.fail_on_missing_field = fail_on_missing_field
        self.ignore_parse_errors = ignore_parse_errors

    @staticmethod
    def builder() -> JsonRowDeserializationSchema.Builder:
        return JsonRowDeserializationSchema.Builder()

    class Builder:
        """Collects the options of a :class:`JsonRowDeserializationSchema`."""

        def __init__(self) -> None:
            self._type_info: TypeInformation | None = None
            self._fail_on_missing_field = False
            self._ignore_parse_errors = False

        def type_info(self, type_info: TypeInformation) -> JsonRowDeserializationSchema.Builder:
            """The row type; its field names are the JSON properties read."""
            self._type_info = type_info
            return self

        def json_schema(self, json_schema: str) -> JsonRowDeserializationSchema.Builder:
            raise NotImplementedError("JSON schemas are not supported: give the row type with type_info(Types.ROW_NAMED(...))")

        def fail_on_missing_field(self) -> JsonRowDeserializationSchema.Builder:
            """A property missing from a record fails it (by default the field is None)."""
            self._fail_on_missing_field = True
            return self

        def ignore_parse_errors(self) -> JsonRowDeserializationSchema.Builder:
            """Skip records that do not parse or do not fit the type, instead of failing the job."""
            self._ignore_parse_errors = True
            return self

        def build(self) -> JsonRowDeserializationSchema:
            if self._type_info is None:
                raise TypeError("JsonRowDeserializationSchema needs type_info(...) before build()")
            return JsonRowDeserializationSchema(self._type_info, self._fail_on_missing_field, self._ignore_parse_errors)

    def deserialize(self, message: Any) -> Row | None:
        """The Row of one JSON record (bytes or text); None for a bad one when ignoring errors."""
        try:
            obj = json.loads(message)
            if not isinstance(obj, dict):
                raise RowFormatError("not a JSON object")
            return json_object_row(obj, self.type_info, "", self.fail_on_missing_field)
        except (ValueError, RowFormatError) as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            if self.ignore_parse_errors:
                return None
            raise RowFormatError(
                f"cannot read JSON record {_record_text(message)!r}: {e}",
                remedy="fix the record, or skip bad records with ignore_parse_errors()",
            ) from None

    def __repr__(self) -> str:
        return f"JsonRowDeserializationSchema({self.type_info})"


class JsonRowSerializationSchema(SerializationSchema):
    """Writes a Row (or a tuple, list or dict of its fields) as a compact JSON object."""

    def __init__(self, type_info: RowTypeInfo) -> None:
        self.type_info = _row_type(type_info, "JsonRowSerializationSchema")

    @staticmethod
    def builder() -> JsonRowSerializationSchema.Builder:
        return JsonRowSerializationSchema.Builder()

    class Builder:
        """Collects the options of a :class:`JsonRowSerializationSchema`."""

        def __init__(self) -> None:
            self._type_info: TypeInformation | None = None

        def with_type_info(self, type_info: TypeInformation) -> JsonRowSerializationSchema.Builder:
            """The row type; its field names become the JSON properties."""
            self._type_info = type_info
            return self

        def build(self) -> JsonRowSerializationSchema:
            if self._type_info is None:
                raise TypeError("JsonRowSerializationSchema needs with_type_info(...) before build()")
            return JsonRowSerializationSchema(self._type_info)

    def serialize(self, element: Any) -> bytes:
        try:
            obj = to_json(element, self.type_info, "")
        except RowFormatError as e:
            raise RowFormatError(f"cannot write {element!r} as JSON of {self.type_info}: {e}") from None
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def __repr__(self) -> str:
        return f"JsonRowSerializationSchema({self.type_info})"
