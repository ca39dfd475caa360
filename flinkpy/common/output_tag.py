"""OutputTag: names a side output of a process function.

Two tags are the same side output when their ids are equal.

>>> from flinkpy.common import Types
>>> late = OutputTag("late-data", Types.STRING())
>>> late == OutputTag("late-data")
True
>>> late
OutputTag('late-data', STRING)
"""

from __future__ import annotations

from flinkpy.common.typeinfo import TypeInformation


class OutputTag:
    """Identifies a side output by ``tag_id``; ``type_info`` describes its records."""

    __slots__ = ("tag_id", "type_info")

    def __init__(self, tag_id: str, type_info: TypeInformation | None = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ValueError(f"OutputTag id must be a non-empty string, got {tag_id!r}")
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and self.tag_id == other.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __reduce__(self) -> tuple:
        return (OutputTag, (self.tag_id, self.type_info))

    def __repr__(self) -> str:
        if self.type_info is None:
            return f"OutputTag({self.tag_id!r})"
        return f"OutputTag({self.tag_id!r}, {self.type_info})"
