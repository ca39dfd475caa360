"""Encoders and schemas that turn records into bytes for sinks and back for sources.

>>> from flinkpy.common.types import Row
>>> Encoder.simple_string_encoder().encode(Row(word="a"))
b"Row(word='a')\\n"
>>> SimpleStringSchema().deserialize(SimpleStringSchema().serialize("héllo"))
'héllo'
"""

from __future__ import annotations

from typing import Any



class Encoder:
    """Writes one record as bytes to a row-format file sink.

    ``simple_string_encoder`` writes ``str(record)`` followed by a newline, in the given
    charset, as Flink's ``SimpleStringEncoder`` does.
    """

    __slots__ = ("_charset",)

    def __init__(self, charset: str = "utf-8") -> None:
        self._charset = charset

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        return Encoder(charset_name.lower())

    @property
    def charset(self) -> str:
        return self._charset

    def encode(self, element: Any) -> bytes:
        return (str(element) + "\n").encode(self._charset)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Encoder) and self._charset == other._charset

    def __hash__(self) -> int:
        return hash(("Encoder", self._charset))

    def __repr__(self) -> str:
        return f"Encoder.simple_string_encoder({self._charset!r})"


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
