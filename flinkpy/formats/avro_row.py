"""Avro rows: records in Avro's binary encoding (no container header), read and written with fastavro.

PyFlink's ``AvroRowSerializationSchema`` / ``AvroRowDeserializationSchema`` take the writer's
schema as a JSON string (``avro_schema_string``). A record of the schema is read into a
:class:`~flinkpy.common.types.Row` with the schema's field names (nested records into nested
Rows); a Row, a tuple (fields in the schema's order) or a dict is written. The ``avro`` extra
installs fastavro (``pip install 'flinkpy[avro]'``).

>>> schema = '{"type": "record", "name": "T", "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}]}'
>>> data = AvroRowSerializationSchema(avro_schema_string=schema).serialize((1, "hi"))
>>> AvroRowDeserializationSchema(avro_schema_string=schema).deserialize(data)
Row(id=1, name='hi')
"""

from __future__ import annotations

import io
import json
from typing import Any

from flinkpy.common.serialization import DeserializationSchema, SerializationSchema
from flinkpy.common.types import Row
from flinkpy.errors import ConfigurationError, UsageError
from flinkpy.formats.fields import RowFormatError


def _fastavro() -> Any:
    """fastavro, or the one-line error naming the extra (as the connectors' drivers do; exit 8)."""
    try:
        import fastavro
    except ImportError as e:
        raise ConfigurationError(f"the Avro formats need fastavro, which cannot be imported here: {e}",
                                 remedy="run \"pip install 'flinkpy[avro]'\"") from None
    return fastavro


def _parse(avro_schema_string: str | None, record_class: Any) -> tuple[str, Any]:
    if record_class is not None:
        raise UsageError("Avro schemas from generated record classes are Java's",
                         remedy="pass the schema as JSON: avro_schema_string='{\"type\": \"record\", ...}'")
    if not avro_schema_string:
        raise UsageError("an Avro row schema needs avro_schema_string")
    fastavro = _fastavro()
    try:
        parsed = fastavro.parse_schema(json.loads(avro_schema_string))
    except (ValueError, fastavro.schema.SchemaParseException) as e:
        raise UsageError(f"avro_schema_string is not a valid Avro schema: {e}") from None
    return avro_schema_string, parsed


_TYPES = {"int": "INT", "long": "LONG", "string": "STRING", "float": "FLOAT", "double": "DOUBLE", "boolean": "BOOLEAN"}


def row_type(schema: Any) -> Any:
    """The Types.ROW_NAMED of a record of primitive fields (what PyFlink derives from the schema),
    or None for a schema with other fields (records then stay untyped Rows)."""
    from flinkpy.common.typeinfo import Types

    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    names, types = [], []
    for f in schema["fields"]:
        kind = _TYPES.get(f["type"]) if isinstance(f["type"], str) else None
        if kind is None:
            return None
        names.append(f["name"])
        types.append(getattr(Types, kind)())
    return Types.ROW_NAMED(names, types)


def _to_rows(value: Any) -> Any:
    if isinstance(value, dict):
        return Row(**{k: _to_rows(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_to_rows(v) for v in value]
    return value


def _to_avro(value: Any, schema: Any) -> Any:
    """A Row, tuple or dict as the dict fastavro writes, following the (parsed) schema."""
    if isinstance(schema, list):  # a union: the first branch that is not null, for a value
        branches = [b for b in schema if b != "null"]
        return None if value is None else _to_avro(value, branches[0] if len(branches) == 1 else branches[0])
    if isinstance(schema, dict) and schema.get("type") == "record":
        fields = schema["fields"]
        if isinstance(value, Row):
            named = value.as_dict() if value._fields else dict(zip((f["name"] for f in fields), tuple(value)))  # noqa: SLF001
        elif isinstance(value, dict):
            named = value
        elif isinstance(value, (tuple, list)):
            if len(value) != len(fields):
                raise RowFormatError(f"a record of {len(value)} fields for Avro record {schema.get('name')!r} of {len(fields)}")
            named = dict(zip((f["name"] for f in fields), value))
        else:
            raise RowFormatError(f"cannot write {type(value).__name__} as Avro record {schema.get('name')!r}")
        return {f["name"]: _to_avro(named.get(f["name"]), f["type"]) for f in fields}
    if isinstance(schema, dict) and schema.get("type") == "array":
        return [_to_avro(v, schema["items"]) for v in value]
    return value


class AvroRowDeserializationSchema(DeserializationSchema):
    """Avro binary records into Rows (PyFlink's ``AvroRowDeserializationSchema``)."""

    def __init__(self, record_class: str | None = None, avro_schema_string: str | None = None) -> None:
        self._text, self._schema = _parse(avro_schema_string, record_class)
        #: the rows' type information, for a record of primitive fields
        self.type_info = row_type(self._schema)

    def __reduce__(self) -> tuple:
        return (AvroRowDeserializationSchema, (None, self._text))

    def deserialize(self, message: bytes) -> Row:
        fastavro = _fastavro()
        try:
            return _to_rows(fastavro.schemaless_reader(io.BytesIO(message), self._schema))
        except Exception as e:  # noqa: BLE001 - fastavro raises many kinds for bad bytes
            raise RowFormatError(f"{len(message or b'')} bytes are not a record of Avro schema {self._schema.get('name')!r}: {e}") from None


class AvroRowSerializationSchema(SerializationSchema):
    """Rows (or tuples, dicts) into Avro binary records (PyFlink's ``AvroRowSerializationSchema``)."""

    def __init__(self, record_class: str | None = None, avro_schema_string: str | None = None) -> None:
        self._text, self._schema = _parse(avro_schema_string, record_class)

    def __reduce__(self) -> tuple:
        return (AvroRowSerializationSchema, (None, self._text))

    def serialize(self, element: Any) -> bytes:
        fastavro = _fastavro()
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, self._schema, _to_avro(element, self._schema))
        except (ValueError, TypeError) as e:
            raise RowFormatError(f"{element!r} does not fit Avro schema {self._schema.get('name')!r}: {e}") from None
        return out.getvalue()
