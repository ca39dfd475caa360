"""CSV row format: one line of delimited fields per record, in the order of a row type's fields.

Built as PyFlink builds them (``pyflink.datastream.formats.csv``), with a ``Builder`` that takes
the row type; the defaults are Flink's: ``,`` between fields, ``"`` quotes where a field needs
them, no escape character, ``;`` between the elements of an array field, ``\\n`` after each
record, and an empty field for None.

>>> from flinkpy.common.typeinfo import Types
>>> from flinkpy.common.types import Row
>>> t = Types.ROW_NAMED(["id", "name", "tags"], [Types.INT(), Types.STRING(), Types.LIST(Types.STRING())])
>>> out = CsvRowSerializationSchema.Builder(t).build()
>>> out.serialize(Row(id=1, name="Lovelace, Ada", tags=["math", "code"]))
b'1,"Lovelace, Ada",math;code\\n'
>>> CsvRowDeserializationSchema.Builder(t).build().deserialize(b'2,Grace,\\n')
Row(id=2, name='Grace', tags=None)

A line with the wrong number of fields, or a field that does not fit its type, fails the job
with the line and the field named; ``set_ignore_parse_errors(True)`` skips such lines instead
(``deserialize`` returns None, which sources drop):

>>> CsvRowDeserializationSchema.Builder(t).build().deserialize(b"x,Ada,")
Traceback (most recent call last):
...
flinkpy.formats.fields.RowFormatError: cannot read CSV record 'x,Ada,': field 'id' (INT): cannot read 'x' as INT (fix the record, or skip bad records with set_ignore_parse_errors(True))
"""

from __future__ import annotations

import csv
import io
from typing import Any

from flinkpy.common.serialization import DeserializationSchema, SerializationSchema
from flinkpy.common.typeinfo import RowTypeInfo, TypeInformation
from flinkpy.common.types import Row, named_row
from flinkpy.formats.fields import RowFormatError, from_text, row_values, to_text
from flinkpy.formats.json_row import _record_text, _row_type


def _char(c: str | None, what: str) -> str | None:
    if c is not None and len(c) != 1:
        raise ValueError(f"the {what} must be a single character, got {c!r}")
    return c


class _CsvOptions:
    """The options both CSV schemas share, as their builders set them."""

    def __init__(self, type_info: TypeInformation, what: str) -> None:
        if type_info is None:
            raise TypeError("Type information must not be None")
        self.type_info: RowTypeInfo = _row_type(type_info, what)
        self.field_delimiter = ","
        self.quote_character: str | None = '"'
        self.escape_character: str | None = None
        self.array_element_delimiter = ";"
        self.null_literal = ""

    def dialect(self, line_delimiter: str = "\n") -> dict[str, Any]:
        return {
            "delimiter": self.field_delimiter,
            "quotechar": self.quote_character,
            "escapechar": self.escape_character,
            "quoting": csv.QUOTE_MINIMAL if self.quote_character else csv.QUOTE_NONE,
            "doublequote": self.escape_character is None,
            "lineterminator": line_delimiter,
            "strict": True,
        }


class CsvRowDeserializationSchema(DeserializationSchema):
    """Reads one CSV line into a Row of the type information's fields (by position)."""

    def __init__(self, options: _CsvOptions, allow_comments: bool, ignore_parse_errors: bool) -> None:
        self.options = options
        self.type_info = options.type_info
        self.allow_comments = allow_comments
        self.ignore_parse_errors = ignore_parse_errors
        self._names = self.type_info.get_field_names()
        self._fields = list(zip(self._names, self.type_info.get_field_types()))
        self._dialect = options.dialect()
        sep = options.array_element_delimiter
        self._split = (lambda text: text.split(sep)) if sep else (lambda text: [text])

    class Builder:
        """Collects the options of a :class:`CsvRowDeserializationSchema` of ``type_info``."""

        def __init__(self, type_info: TypeInformation) -> None:
            self._options = _CsvOptions(type_info, "CsvRowDeserializationSchema")
            self._allow_comments = False
            self._ignore_parse_errors = False

        def set_field_delimiter(self, delimiter: str) -> CsvRowDeserializationSchema.Builder:
            self._options.field_delimiter = _char(delimiter, "field delimiter")  # type: ignore[assignment]
            return self

        def set_allow_comments(self, allow_comments: bool) -> CsvRowDeserializationSchema.Builder:
            """Skip lines that start with ``#``."""
            self._allow_comments = allow_comments
            return self

        def set_array_element_delimiter(self, delimiter: str) -> CsvRowDeserializationSchema.Builder:
            self._options.array_element_delimiter = delimiter
            return self

        def set_quote_character(self, c: str) -> CsvRowDeserializationSchema.Builder:
            self._options.quote_character = _char(c, "quote character")
            return self

        def set_escape_character(self, c: str) -> CsvRowDeserializationSchema.Builder:
            self._options.escape_character = _char(c, "escape character")
            return self

        def set_null_literal(self, null_literal: str) -> CsvRowDeserializationSchema.Builder:
            """A field with exactly this text is None (an empty field of a non-text type always is)."""
            self._options.null_literal = null_literal
            return self

        def set_ignore_parse_errors(self, ignore_parse_errors: bool) -> CsvRowDeserializationSchema.Builder:
            """Skip lines that do not parse or do not fit the type, instead of failing the job."""
            self._ignore_parse_errors = ignore_parse_errors
            return self

        def build(self) -> CsvRowDeserializationSchema:
            return CsvRowDeserializationSchema(self._options, self._allow_comments, self._ignore_parse_errors)

    def deserialize(self, message: Any) -> Row | None:
        """The Row of one CSV line (bytes or text, a trailing newline ignored); None for a comment,
        and for a bad line when ignoring errors."""
        try:
            text = message.decode("utf-8") if isinstance(message, (bytes, bytearray, memoryview)) else str(message)
            text = text.rstrip("\r\n")
            if self.allow_comments and text.startswith("#"):
                return None
            (fields,) = list(csv.reader([text], **self._dialect)) or [[]]
            if len(fields) != len(self._fields):
                raise RowFormatError(f"{len(fields)} field(s), the type {self.type_info} has {len(self._fields)}")
            null = self.options.null_literal
            values = [
                None if (null and f == null) else from_text(f, t, n, self._split)
                for f, (n, t) in zip(fields, self._fields)
            ]
            return named_row(values, self._names)
        except (ValueError, csv.Error, RowFormatError) as e:
            if self.ignore_parse_errors:
                return None
            raise RowFormatError(
                f"cannot read CSV record {_record_text(message)!r}: {e}",
                remedy="fix the record, or skip bad records with set_ignore_parse_errors(True)",
            ) from None

    def __repr__(self) -> str:
        return f"CsvRowDeserializationSchema({self.type_info})"


class CsvRowSerializationSchema(SerializationSchema):
    """Writes a Row (or a tuple, list or dict of its fields) as one CSV line, line delimiter included."""

    def __init__(self, options: _CsvOptions, line_delimiter: str) -> None:
        self.options = options
        self.type_info = options.type_info
        self.line_delimiter = line_delimiter
        self._fields = list(zip(self.type_info.get_field_names(), self.type_info.get_field_types()))
        self._dialect = options.dialect(line_delimiter)

    class Builder:
        """Collects the options of a :class:`CsvRowSerializationSchema` of ``type_info``."""

        def __init__(self, type_info: TypeInformation) -> None:
            self._options = _CsvOptions(type_info, "CsvRowSerializationSchema")
            self._line_delimiter = "\n"

        def set_field_delimiter(self, c: str) -> CsvRowSerializationSchema.Builder:
            self._options.field_delimiter = _char(c, "field delimiter")  # type: ignore[assignment]
            return self

        def set_line_delimiter(self, delimiter: str) -> CsvRowSerializationSchema.Builder:
            """Written after each record: ``\\n`` (the default), ``\\r``, ``\\r\\n`` or nothing."""
            if delimiter not in ("\n", "\r", "\r\n", ""):
                raise ValueError(f"the line delimiter must be \\n, \\r, \\r\\n or empty, got {delimiter!r}")
            self._line_delimiter = delimiter
            return self

        def set_array_element_delimiter(self, delimiter: str) -> CsvRowSerializationSchema.Builder:
            self._options.array_element_delimiter = delimiter
            return self

        def disable_quote_character(self) -> CsvRowSerializationSchema.Builder:
            """Never quote (a field that would need quotes then needs an escape character)."""
            self._options.quote_character = None
            return self

        def set_quote_character(self, c: str) -> CsvRowSerializationSchema.Builder:
            self._options.quote_character = _char(c, "quote character")
            return self

        def set_escape_character(self, c: str) -> CsvRowSerializationSchema.Builder:
            self._options.escape_character = _char(c, "escape character")
            return self

        def set_null_literal(self, s: str) -> CsvRowSerializationSchema.Builder:
            """The text written for None (empty by default)."""
            self._options.null_literal = s
            return self

        def build(self) -> CsvRowSerializationSchema:
            return CsvRowSerializationSchema(self._options, self._line_delimiter)

    def serialize(self, element: Any) -> bytes:
        opts = self.options
        try:
            values = row_values(element, self.type_info)
            texts = [
                opts.null_literal if v is None else to_text(v, t, n, opts.array_element_delimiter)
                for v, (n, t) in zip(values, self._fields)
            ]
            buf = io.StringIO()
            csv.writer(buf, **self._dialect).writerow(texts)
        except (csv.Error, RowFormatError) as e:
            raise RowFormatError(f"cannot write {element!r} as CSV of {self.type_info}: {e}") from None
        return buf.getvalue().encode("utf-8")

    def __repr__(self) -> str:
        return f"CsvRowSerializationSchema({self.type_info})"
