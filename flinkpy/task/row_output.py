"""Rows at an operator's output when its ``output_type`` is ``Types.ROW`` / ``Types.ROW_NAMED``.

In PyFlink a function that returns a tuple from ``map(f, output_type=Types.ROW_NAMED(...))``
hands a Row to the next operator: its type serializer builds one. flinkpy pickles records
whatever their type, so the conversion is done here instead, once per record at the output of
the operator that declares the type — and only there: an operator without a RowTypeInfo keeps
its output as it was, at no cost.

>>> from flinkpy.common.typeinfo import Types
>>> from flinkpy.task.operators import Output
>>> class Show(Output):
...     def process(self, values, timestamps):
...         print(values)
>>> out = with_row_type(Types.ROW([Types.INT()]), Show(), "Map")
>>> out.process([(1,), (2,)], None)
[Row(f0=1), Row(f0=2)]
>>> isinstance(with_row_type(Types.STRING(), Show(), "Map"), Show)
True
"""

from __future__ import annotations

from typing import Any

from flinkpy.common.typeinfo import RowTypeInfo
from flinkpy.errors import InvalidProgramError
from flinkpy.task.operators import Output


class RowOutput(Output):
    """Converts each batch to Rows of one RowTypeInfo, then hands it on."""

    def __init__(self, row_type: RowTypeInfo, output: Output, operator_name: str) -> None:
        self.row_type = row_type
        self.output = output
        self.operator_name = operator_name
        self._convert = row_type.row_converter()

    def process(self, values: list, timestamps: list[int] | None) -> None:
        try:
            rows = self._convert(values)
        except TypeError as e:
            raise InvalidProgramError(
                f"operator {self.operator_name!r} declares output_type {self.row_type}, "
                f"but produced a record that is not such a row: {e}",
                remedy="return a tuple, a list or a Row with one value per field of the type",
            ) from None
        self.output.process(rows, timestamps)

    def process_watermark(self, watermark: int) -> None:
        self.output.process_watermark(watermark)

    def process_watermark_status(self, idle: bool) -> None:
        self.output.process_watermark_status(idle)


def with_row_type(output_type: Any, output: Output, operator_name: str) -> Output:
    """``output`` itself, or wrapped in a :class:`RowOutput` when ``output_type`` is a row type."""
    if isinstance(output_type, RowTypeInfo):
        return RowOutput(output_type, output, operator_name)
    return output
