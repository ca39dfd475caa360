"""The runtime contract between the engine and its sources and sinks.

A :class:`Source` is a description that the job graph carries to the task processes (it is
pickled); each parallel subtask asks it for a :class:`SourceReader`. A reader hands out records in
batches — the engine's hot path is batch-at-a-time — and reports its reading position as state, so
that later (checkpoints) a restored reader resumes exactly where the snapshot was taken.

A :class:`Sink` likewise creates one :class:`SinkWriter` per subtask. Writers receive batches and
take part in checkpoints through ``snapshot_state`` / ``notify_checkpoint_complete``: the hooks a
two-phase-commit sink needs. Readers hear of completed and aborted checkpoints too
(``notify_checkpoint_complete`` / ``notify_checkpoint_aborted``): a queue acknowledges what a
completed checkpoint covers, a consumer group commits its offsets.

Example, a reader over a Python list split round-robin across subtasks::

    class ListSource(Source):
        def __init__(self, items):
            self.items = list(items)

        def create_reader(self, ctx):
            return ListReader(self.items[ctx.subtask_index :: ctx.parallelism], ctx.restored_state)
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable


class DeliveryGuarantee(enum.Enum):
    """What a sink promises after a failure (PyFlink's ``DeliveryGuarantee``): ``EXACTLY_ONCE``
    (transactions bound to checkpoints), ``AT_LEAST_ONCE`` (flushed at every checkpoint; replays
    are written again) or ``NONE`` (fire and forget: records buffered at a failure are lost)."""

    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"
    NONE = "none"


class Boundedness(enum.Enum):
    BOUNDED = "BOUNDED"
    CONTINUOUS_UNBOUNDED = "CONTINUOUS_UNBOUNDED"


@dataclass(frozen=True)
class ReaderContext:
    """What a subtask's reader or writer knows about where it runs."""

    subtask_index: int
    parallelism: int
    job_id: str = ""
    operator_name: str = ""
    attempt: int = 0
    #: the states this subtask restores from (``snapshot_state`` results of the previous run's
    #: subtasks assigned to this one); empty on a fresh start.
    restored_state: list[Any] = field(default_factory=list)
    #: sources only: ``side_output(tag_id, records)`` emits records to a side output of the
    #: source's stream (e.g. a FileSource's malformed lines); None where there is none.
    side_output: Callable[[str, list], None] | None = None
    #: sources only: the source operator's metric group (Flink's ``SourceReaderContext.metricGroup``):
    #: gauges a reader registers reach ``job show``, ``top`` and Prometheus; None where there is none
    metric_group: Any = None


class StampedBatch(list):
    """A batch a reader hands out with what a plain list cannot say: each record's event
    timestamp (``timestamps``, parallel to the records, or None) and a watermark that follows
    the batch's last record (``watermark``, or None). A legacy SourceFunction's
    ``collect_with_timestamp`` and ``emit_watermark`` reach the chain this way; a watermark cuts
    the batch, so it stands exactly where the source emitted it. ``splits`` (parallel to the
    records, or None) names the split each record came from (a Kafka partition): a
    WatermarkStrategy then keeps a watermark per split, and the source's is their minimum, idle
    splits left out (Flink's per-split watermarks); such a reader lists its current splits in
    ``split_ids()``.

    >>> b = StampedBatch(["a", "b"], timestamps=[1, 2], watermark=1)
    >>> list(b), b.timestamps, b.watermark, b.splits
    (['a', 'b'], [1, 2], 1, None)
    """

    __slots__ = ("timestamps", "watermark", "splits")

    def __init__(self, records: Any = (), *, timestamps: list[int] | None = None, watermark: int | None = None,
                 splits: list[str] | None = None):
        super().__init__(records)
        self.timestamps = timestamps
        self.watermark = watermark
        self.splits = splits


class SourceReader(ABC):
    """Reads one subtask's share of a source."""

    @abstractmethod
    def poll(self, max_records: int) -> list | None:
        """Return up to ``max_records`` records; ``[]`` when none are available right now;
        ``None`` once the input has ended (bounded sources only). Must not block for long:
        the task checks for control messages (cancel, barriers) between polls. A
        :class:`StampedBatch` carries the records' timestamps and a watermark after them."""

    def snapshot_state(self) -> Any:
        """The reading position (offsets): picklable, small. Taken between two polls."""
        return None

    def pending_records(self) -> int | None:
        """Records still waiting in the external system for this reader (Flink's
        ``pendingRecords``: a Kafka consumer's lag), or None where unknown. Read by the metrics
        thread, so it returns a figure kept by the polling thread, without I/O."""
        return None

    def snapshot_checkpoint(self, checkpoint_id: int) -> Any:
        """``snapshot_state`` for checkpoint ``checkpoint_id`` (what the engine calls at a
        barrier; Flink passes the id to ``snapshotState``): a reader that acts when that
        checkpoint completes (acknowledges, commits) remembers what it covered, keyed by it."""
        return self.snapshot_state()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: every record this reader handed out before
        that checkpoint's ``snapshot_state`` is now covered by it and will never be asked for
        again. Acknowledge, trim or commit it here (a queue's acks, a consumer group's
        offsets). Called between two polls, on the thread that polls. A completion may stand
        for several checkpoints: one whose notification was lost is covered by the next."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` will never complete: what its snapshot covered stays
        unacknowledged until a later checkpoint completes. Called between two polls."""

    def close(self) -> None:
        """Release files, connections."""


class Source(ABC):
    """A parallel source (FLIP-27 style, as PyFlink's ``env.from_source`` takes).

    ``guarantee`` is what a restored reader promises: ``"exactly-once"`` (it resumes at the exact
    position of the checkpoint: a replayable source), ``"at-most-once"`` / ``"none"`` (records
    read after the last checkpoint are lost on a failure) or None (not declared: a user's
    source). The connectors table (:mod:`flinkpy.connectors.guarantees`) and ``flinkpy info``
    report it; ``needs`` says what the guarantee depends on.
    """

    boundedness: Boundedness = Boundedness.BOUNDED
    guarantee: str | None = None
    needs: str = ""

    @abstractmethod
    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        """Create the reader of subtask ``ctx.subtask_index`` of ``ctx.parallelism``."""

    def max_parallelism(self) -> int | None:
        """An upper bound on useful parallelism, or None."""
        return None


class SinkWriter(ABC):
    """Writes one subtask's records."""

    @abstractmethod
    def write(self, records: list) -> None:
        """Write a batch of records (in order)."""

    #: A writer that keeps each record's event timestamp defines
    #: ``write_timestamped(records, timestamps)``: the engine calls it instead of :meth:`write`
    #: for records that carry timestamps (a timestamp is None where a record has none), as Flink
    #: hands its SinkWriter the record's timestamp in ``SinkWriter.Context``.
    write_timestamped: Any = None

    def flush(self, end_of_input: bool) -> None:
        """Make everything written so far durable or pending (before a snapshot, at the end)."""

    def snapshot_state(self, checkpoint_id: int) -> Any:
        """State to restore from (pending transactions, part files). Picklable."""
        return None

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is complete: commit what was pending up to it."""

    def prepare_commit(self, checkpoint_id: int | None) -> list:
        """The writer of a sink with a committer (:meth:`Sink.committer`): close what was written
        since the last call and return its committables, which become the committer's records.
        Called before the barrier of ``checkpoint_id`` leaves the writer's task (so checkpoint
        *n*'s committables reach the committer ahead of barrier *n*) and at the end of the input
        (``None``)."""
        return []

    def close(self) -> None:
        """Release resources; called after the last ``flush``."""


class Sink(ABC):
    """A parallel sink (as PyFlink's ``DataStream.sink_to`` takes).

    ``guarantee``: ``"exactly-once"`` (transactional: two-phase commit on checkpoints, or
    idempotent writes of deterministic results), ``"at-least-once"`` (replayed records are written
    again) or None (not declared). ``needs`` says what the guarantee depends on.
    """

    guarantee: str | None = None
    needs: str = ""

    @abstractmethod
    def create_writer(self, ctx: ReaderContext) -> SinkWriter:
        """Create the writer of subtask ``ctx.subtask_index``."""

    def committer(self) -> Sink | None:
        """A sink committed by one task (Flink's Sink V2 with a committer): the engine runs this
        sink's writers at its parallelism, hands their committables (``prepare_commit``) as
        records to the sink returned here at parallelism 1, and that one commits them at
        checkpoints. None (the default): each writer commits its own output."""
        return None

    def for_record_type(self, type_info: Any) -> Sink:
        """This sink for the records of a stream of ``type_info`` (``sink_to`` asks): a sink that
        writes records as text returns a copy that writes them in their printed form
        (:mod:`flinkpy.common.printed_forms`); the others, themselves."""
        return self
