"""The typed records of the test harness: what goes in (steps), what comes out, a snapshot.

A test drives a harness with *steps* — :class:`Element` (a record on an input),
:class:`Watermark` (event time on an input) and :class:`ProcessingTime` (the manual clock) — one
call each, or as a script (a list of them) that :func:`~flinkpy.testing.assert_restore_equivalent`
replays. What the function emits comes back as :class:`StreamRecord` values, and the outputs of
one step as a :class:`StepOutput`.

>>> Element(("a", 1), timestamp=10)
Element(value=('a', 1), timestamp=10, input=1)
>>> str(Element(("a", 1), timestamp=10)), str(Watermark(20, input=2)), str(ProcessingTime(1000))
("element ('a', 1) @ 10", 'watermark 20 on input 2', 'processing time 1000')
>>> StreamRecord("x", 5)
StreamRecord(value='x', timestamp=5)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True)
class StreamRecord:
    """A record the function under test emitted, with its event timestamp (None: it has none)."""

    value: Any
    timestamp: int | None = None

    def __str__(self) -> str:
        return repr(self.value) if self.timestamp is None else f"{self.value!r} @ {self.timestamp}"


@dataclass(frozen=True)
class Element:
    """A record arriving on input ``input`` (1, or 2 for a two-input function's second)."""

    value: Any
    timestamp: int | None = None
    input: int = 1

    def __str__(self) -> str:
        at = "" if self.timestamp is None else f" @ {self.timestamp}"
        on = "" if self.input == 1 else f" on input {self.input}"
        return f"element {self.value!r}{at}{on}"


@dataclass(frozen=True)
class Watermark:
    """Event time on input ``input`` reaches ``time`` (the function's watermark is the least of
    its inputs')."""

    time: int
    input: int = 1

    def __str__(self) -> str:
        on = "" if self.input == 1 else f" on input {self.input}"
        return f"watermark {self.time}{on}"


@dataclass(frozen=True)
class ProcessingTime:
    """The manual clock moves to ``time`` (epoch ms); processing-time timers up to it fire."""

    time: int

    def __str__(self) -> str:
        return f"processing time {self.time}"


#: one step of a test script
Step = Union[Element, Watermark, ProcessingTime]


@dataclass
class StepOutput:
    """What one step made the function emit: records, and side outputs by tag id."""

    records: list[StreamRecord] = field(default_factory=list)
    side: dict[str, list[StreamRecord]] = field(default_factory=dict)

    @property
    def values(self) -> list[Any]:
        """The values of :attr:`records`."""
        return [r.value for r in self.records]


@dataclass(frozen=True)
class Snapshot:
    """A snapshot the harness took: a checkpoint directory with its ``_metadata``, as a task's
    checkpoint writes it, plus where the test's clocks stood (event time per input, processing
    time), which the restored harness starts from."""

    checkpoint_id: int
    #: the checkpoint directory (``<checkpoint dir>/<job id>/chk-<n>``)
    path: str
    metadata: dict[str, Any]
    parallelism: int
    max_parallelism: int
    #: the last watermark of each input (index 0: input 1)
    watermarks: tuple[int, ...]
    processing_time: int
    #: where each input's round-robin distribution stood (a restore at the same parallelism
    #: goes on from there, so that the same records meet in the same subtasks)
    round_robin: tuple[tuple[int, ...], ...] = ()
