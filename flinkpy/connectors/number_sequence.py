"""NumberSequenceSource: the numbers of an inclusive range, in parallel, replayable to the record.

The range is cut into one contiguous sub-range per subtask, so each subtask emits its numbers in
ascending order and its reading position is just "the next number" of each sub-range it still
owns. That position is the whole state, which is why a restore — at the same or at another
parallelism — can hand out exactly the numbers not yet emitted.

>>> src = NumberSequenceSource(1, 10)
>>> reader = src.create_reader(ReaderContext(subtask_index=1, parallelism=2))
>>> reader.poll(3), reader.poll(100), reader.poll(100)
([6, 7, 8], [9, 10], None)

The helpers :func:`split_ranges` and :func:`restore_ranges` are shared with the collection source,
which is a number sequence over list indices.

Rescaling: every snapshot records the subtask that took it and the parallelism it ran at. When a
reader is given the snapshots of *every* old subtask (Flink's "union" redistribution), it pools
the remaining ranges and takes its contiguous share of them; when it is given only some (the
engine assigned those old subtasks to it), it resumes exactly those ranges.
"""

from __future__ import annotations

from typing import Any

from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.errors import UsageError

#: a half-open range [first, stop) of positions still to emit
Range = tuple[int, int]


def split_ranges(ranges: list[Range], index: int, parallelism: int) -> list[Range]:
    """Share ``index`` of ``parallelism`` of the concatenation of ``ranges``, kept contiguous.

    Shares differ in size by at most one, and together cover every position exactly once.

    >>> split_ranges([(0, 3), (10, 13)], 0, 2), split_ranges([(0, 3), (10, 13)], 1, 2)
    ([(0, 3)], [(10, 13)])
    >>> split_ranges([(0, 5)], 1, 2)
    [(2, 5)]
    """
    total = sum(stop - first for first, stop in ranges)
    lo = index * total // parallelism
    hi = (index + 1) * total // parallelism
    share: list[Range] = []
    seen = 0  # positions in the concatenation before the current range
    for first, stop in ranges:
        size = stop - first
        a = max(lo, seen)
        b = min(hi, seen + size)
        if a < b:
            share.append((first + a - seen, first + b - seen))
        seen += size
        if seen >= hi:
            break
    return share


def restore_ranges(
    states: list[Any], ctx: ReaderContext, initial: list[Range]
) -> list[Range]:
    """The ranges a (possibly restored) reader of ``ctx`` owns.

    A fresh start takes its share of ``initial``. A restore pools the ranges of the states it was
    given; if those are the states of every old subtask it takes its share of the pool (union
    redistribution), else it owns exactly what it was given.
    """
    if not states:
        return split_ranges(initial, ctx.subtask_index, ctx.parallelism)
    by_subtask: dict[int, dict[str, Any]] = {}
    for state in states:
        by_subtask[int(state["subtask"])] = state  # a state seen twice counts once
    old_parallelism = int(next(iter(by_subtask.values()))["parallelism"])
    pooled = sorted(
        (int(a), int(b)) for state in by_subtask.values() for a, b in state["ranges"] if a < b
    )
    if set(by_subtask) == set(range(old_parallelism)):
        return split_ranges(pooled, ctx.subtask_index, ctx.parallelism)
    return pooled


def ranges_state(ctx: ReaderContext, ranges: list[Range]) -> dict[str, Any]:
    """The JSON-friendly snapshot of a range reader (it goes into ``_metadata`` as offsets)."""
    return {
        "subtask": ctx.subtask_index,
        "parallelism": ctx.parallelism,
        "ranges": [[a, b] for a, b in ranges if a < b],
    }


class NumberSequenceReader(SourceReader):
    """Emits the numbers of its ranges in order; its state is the next number of each range."""

    def __init__(self, ctx: ReaderContext, ranges: list[Range]) -> None:
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
        return list(range(first, end))

    def snapshot_state(self) -> dict[str, Any]:
        return ranges_state(self._ctx, self._ranges)


class NumberSequenceSource(Source):
    """A bounded, parallel source of the numbers ``start`` to ``end``, both included.

    Named and shaped as ``pyflink.datastream.connectors.number_seq.NumberSequenceSource``.

    >>> src = NumberSequenceSource(0, 4)
    >>> src.create_reader(ReaderContext(subtask_index=0, parallelism=1)).poll(10)
    [0, 1, 2, 3, 4]
    """

    guarantee = "exactly-once"
    needs = "checkpointing (the unread ranges are in the checkpoint)"

    boundedness = Boundedness.BOUNDED

    def __init__(self, start: int, end: int) -> None:
        if end < start:
            raise UsageError(
                f"NumberSequenceSource({start}, {end}): end is smaller than start",
                remedy="pass start <= end; both ends are included",
            )
        self.start = int(start)
        self.end = int(end)

    def create_reader(self, ctx: ReaderContext) -> NumberSequenceReader:
        initial = [(self.start, self.end + 1)]
        return NumberSequenceReader(ctx, restore_ranges(ctx.restored_state, ctx, initial))

    def get_boundedness(self) -> Boundedness:
        return self.boundedness

    def __repr__(self) -> str:
        return f"NumberSequenceSource({self.start}, {self.end})"
