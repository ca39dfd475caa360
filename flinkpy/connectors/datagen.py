"""DataGeneratorSource: records made by a function of their index, optionally rate-limited.

As Flink's ``DataGeneratorSource(generatorFunction, count, rateLimiterStrategy, typeInfo)``:
record ``i`` (0 <= i < count) is ``generator_function(i)``. The indices are split among the
subtasks like a NumberSequenceSource's, and the state is the next index of each range, so a
restored source generates exactly the records after the checkpoint — exactly-once, as long as
the function is deterministic in its index (seed any randomness with ``i``).

>>> src = DataGeneratorSource(lambda i: f"event-{i}", 5)
>>> src.create_reader(ReaderContext(subtask_index=0, parallelism=1)).poll(10)
['event-0', 'event-1', 'event-2', 'event-3', 'event-4']
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.connectors.number_sequence import NumberSequenceReader, restore_ranges
from flinkpy.errors import UsageError


class DataGeneratorReader(SourceReader):
    def __init__(self, numbers: NumberSequenceReader, fn: Callable[[int], Any], rate: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._numbers = numbers
        self._fn = fn
        self._rate = rate  # records per second of this subtask, or None
        self._clock = clock
        self._started: float | None = None
        self._emitted = 0

    def poll(self, max_records: int) -> list | None:
        if self._rate is not None:
            now = self._clock()
            if self._started is None:
                self._started = now
            allowed = int((now - self._started) * self._rate) + 1 - self._emitted
            if allowed <= 0:
                return []  # ahead of the rate: the task waits for control messages meanwhile
            max_records = min(max_records, allowed)
        indices = self._numbers.poll(max_records)
        if indices is None:
            return None
        self._emitted += len(indices)
        fn = self._fn
        return [fn(i) for i in indices]

    def snapshot_state(self) -> Any:
        return self._numbers.snapshot_state()


class DataGeneratorSource(Source):
    """``count`` records ``generator_function(0 .. count-1)``; ``records_per_second`` caps the
    whole source's rate (shared evenly by its subtasks); ``count=None`` never ends."""

    guarantee = "exactly-once"
    needs = "checkpointing; a generator function deterministic in the record's index"

    def __init__(self, generator_function: Callable[[int], Any], count: int | None, records_per_second: float | None = None, type_info: Any = None) -> None:
        if count is not None and count < 0:
            raise UsageError(f"DataGeneratorSource: count must be >= 0, got {count}")
        if records_per_second is not None and records_per_second <= 0:
            raise UsageError(f"DataGeneratorSource: records_per_second must be positive, got {records_per_second}")
        self.generator_function = generator_function
        self.count = count
        self.records_per_second = records_per_second
        self.type_info = type_info
        self.boundedness = Boundedness.BOUNDED if count is not None else Boundedness.CONTINUOUS_UNBOUNDED

    def create_reader(self, ctx: ReaderContext) -> DataGeneratorReader:
        end = self.count if self.count is not None else 2**62
        numbers = NumberSequenceReader(ctx, restore_ranges(ctx.restored_state, ctx, [(0, end)]))
        rate = None if self.records_per_second is None else self.records_per_second / ctx.parallelism
        return DataGeneratorReader(numbers, self.generator_function, rate)

    def get_boundedness(self) -> Boundedness:
        return self.boundedness

    def __repr__(self) -> str:
        return f"DataGeneratorSource(count={self.count}, records_per_second={self.records_per_second})"
