"""Encoders and schemas that turn records into bytes for sinks and back for sources.

>>> from flinkpy.common.types import Row
>>> Encoder.simple_string_encoder().encode(Row(word="a"))
b"Row(word='a')\\n"
>>> SimpleStringSchema().deserialize(SimpleStringSchema().serialize("héllo"))
'héllo'
"""

from __future__ import annotations

from typing import Any

from flinkpy.common.printed_forms import printer


class Encoder:
    """Writes one record as bytes to a row-format file sink.

    ``simple_string_encoder`` writes each record as PyFlink's ``SimpleStringEncoder`` writes
    it, followed by a newline, in the given charset: a record of a stream with type information
    in Java's form (``(hi,9)`` for a ``Types.TUPLE``, see :mod:`flinkpy.common.printed_forms`),
    any other as ``str(record)``. ``sink_to`` binds the encoder to its stream's type
    (:meth:`for_type`).

    >>> from flinkpy.common.typeinfo import Types
    >>> Encoder.simple_string_encoder().for_type(Types.TUPLE([Types.STRING(), Types.INT()])).encode(("hi", 9))
    b'(hi,9)\\n'
    """

    __slots__ = ("_charset", "_type_info", "_text")

    def __init__(self, charset: str = "utf-8", type_info: Any = None) -> None:
        self._charset = charset
        self._type_info = type_info
        self._text = printer(type_info)

    def for_type(self, type_info: Any) -> Encoder:
        """This encoder for the records of a stream of ``type_info`` (its printed form)."""
        return Encoder(self._charset, type_info)

    def __reduce__(self) -> tuple:
        return (Encoder, (self._charset, self._type_info))

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        return Encoder(charset_name.lower())

    @staticmethod
    def for_serialization_schema(schema: SerializationSchema) -> SchemaEncoder:
        """Write each record as ``schema.serialize(record)``, one per line: a newline is added
        unless the schema already ends its bytes with one (CSV rows do). How FileSink writes JSON
        lines or CSV files (``FileSink.for_row_format(path, Encoder.for_serialization_schema(s))``);
        not in PyFlink, which writes CSV files with CsvBulkWriters.

        >>> from flinkpy.common.typeinfo import Types
        >>> from flinkpy.datastream.formats.json import JsonRowSerializationSchema
        >>> s = JsonRowSerializationSchema.builder().with_type_info(Types.ROW([Types.INT()])).build()
        >>> Encoder.for_serialization_schema(s).encode((1,))
        b'{"f0":1}\\n'
        """
        return SchemaEncoder(schema)

    @property
    def charset(self) -> str:
        return self._charset

    def encode(self, element: Any) -> bytes:
        return (self._text(element) + "\n").encode(self._charset)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Encoder) and (self._charset, self._type_info) == (other._charset, other._type_info)

    def __hash__(self) -> int:
        return hash(("Encoder", self._charset, self._type_info))

    def __repr__(self) -> str:
        return f"Encoder.simple_string_encoder({self._charset!r})"


class SchemaEncoder(Encoder):
    """An Encoder that writes records with a SerializationSchema, one per line."""

    __slots__ = ("schema",)

    def __init__(self, schema: SerializationSchema) -> None:
        super().__init__("utf-8")
        if not callable(getattr(schema, "serialize", None)):
            raise TypeError(f"Encoder.for_serialization_schema needs a SerializationSchema, got {type(schema).__name__}")
        self.schema = schema

    def for_type(self, type_info: Any) -> SchemaEncoder:
        """The schema decides the bytes, whatever the stream's type."""
        return self

    def __reduce__(self) -> tuple:
        return (SchemaEncoder, (self.schema,))

    def encode(self, element: Any) -> bytes:
        data = self.schema.serialize(element)
        return data if data.endswith(b"\n") else data + b"\n"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SchemaEncoder) and self.schema is other.schema

    def __hash__(self) -> int:
        return hash(("SchemaEncoder", id(self.schema)))

    def __repr__(self) -> str:
        return f"Encoder.for_serialization_schema({self.schema!r})"


class SerializationSchema:
    """Turns a record into bytes (Kafka-style sinks)."""

    def serialize(self, element: Any) -> bytes:
        raise NotImplementedError


class DeserializationSchema:
    """Turns bytes into a record (Kafka-style sources)."""

    def deserialize(self, message: bytes) -> Any:
        raise NotImplementedError

    def is_end_of_stream(self, next_element: Any) -> bool:
        return False


class SimpleStringSchema(SerializationSchema, DeserializationSchema):
    """Strings as encoded text, UTF-8 unless told otherwise."""

    def __init__(self, charset: str = "UTF-8") -> None:
        self._charset = charset.lower()

    def serialize(self, element: Any) -> bytes:
        return str(element).encode(self._charset)

    def deserialize(self, message: bytes) -> str:
        return bytes(message).decode(self._charset)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SimpleStringSchema) and self._charset == other._charset

    def __hash__(self) -> int:
        return hash(("SimpleStringSchema", self._charset))

    def __repr__(self) -> str:
        return f"SimpleStringSchema({self._charset!r})"


class ByteArraySchema(SerializationSchema, DeserializationSchema):
    """Records are the bytes themselves (PyFlink's ``ByteArraySchema``): a Kafka value passes
    through untouched, and a ``bytes``/``bytearray`` record is written as it is.

    >>> ByteArraySchema().deserialize(b"\\x00\\x01"), ByteArraySchema().serialize(bytearray(b"ab"))
    (b'\\x00\\x01', b'ab')
    """

    def serialize(self, element: Any) -> bytes:
        if not isinstance(element, (bytes, bytearray, memoryview)):
            from flinkpy.errors import UsageError

            raise UsageError(f"ByteArraySchema writes bytes, got {type(element).__name__}",
                             remedy="map the records to bytes first, or use SimpleStringSchema")
        return bytes(element)

    def deserialize(self, message: bytes) -> bytes:
        return bytes(message)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByteArraySchema)

    def __hash__(self) -> int:
        return hash("ByteArraySchema")

    def __repr__(self) -> str:
        return "ByteArraySchema()"
