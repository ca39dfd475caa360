"""CollectionSource: the elements of a Python list, as ``env.from_collection`` reads them.

PyFlink's ``from_collection`` is a non-parallel source; this one also runs at any parallelism,
giving each subtask a contiguous slice so the order of the list is kept within a subtask. The
reading position is the range of list indices not yet emitted — at parallelism 1, simply "how
many elements were emitted" — so a restored reader skips exactly what was emitted before the
snapshot, also when restored at another parallelism (see :mod:`flinkpy.connectors.number_sequence`).

>>> src = CollectionSource(["a", "b", "c", "d", "e"])
>>> reader = src.create_reader(ReaderContext(subtask_index=0, parallelism=1))
>>> reader.poll(2)
['a', 'b']
>>> state = reader.snapshot_state()
>>> again = src.create_reader(ReaderContext(0, 1, restored_state=[state]))
>>> again.poll(10), again.poll(10)
(['c', 'd', 'e'], None)
"""

from __future__ import annotations

from typing import Any

from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.connectors.number_sequence import Range, ranges_state, restore_ranges


class CollectionReader(SourceReader):
    """Emits its slices of the list in order; its state is the indices still to emit."""

    def __init__(self, items: list, ctx: ReaderContext, ranges: list[Range]) -> None:
        self._items = items
        self._ctx = ctx
        self._ranges = [r for r in ranges if r[0] < r[1]]

    def poll(self, max_records: int) -> list | None:
        if not self._ranges:
            return None
        first, stop = self._ranges[0]
        end = min(stop, first + max(0, max_records))
        if end == stop:
            self._ranges.pop(0)
        else:
            self._ranges[0] = (end, stop)
        return self._items[first:end]

    def snapshot_state(self) -> dict[str, Any]:
        return ranges_state(self._ctx, self._ranges)


class CollectionSource(Source):
    """A bounded source over a list of (picklable) elements."""

    boundedness = Boundedness.BOUNDED
    guarantee = "exactly-once"
    needs = "checkpointing (the position in the list is in the checkpoint)"

    def __init__(self, items: list) -> None:
        self.items = list(items)

    def create_reader(self, ctx: ReaderContext) -> CollectionReader:
        ranges = restore_ranges(ctx.restored_state, ctx, [(0, len(self.items))])
        return CollectionReader(self.items, ctx, ranges)

    def __repr__(self) -> str:
        return f"CollectionSource({len(self.items)} elements)"
