"""The exactly-once Kafka sink's commit protocol: a pure state machine, no I/O.

Flink's Kafka sink makes a checkpoint's records visible exactly once by resuming, after a crash,
the very transaction the checkpoint pre-committed (it stores the producer id and epoch and
re-attaches to them). librdkafka cannot re-attach to a transaction, so this sink makes a
*committed* transaction recognisable instead, and keeps enough to write an *uncommitted* one
again:

- **During an interval** each subtask streams its records into one Kafka transaction on its
  own transactional id (``<prefix>-<subtask>``), and remembers them.
- **At the barrier of checkpoint n** (:meth:`CommitProtocol.snapshot`) the transaction is
  pre-committed: a *commit marker* — the offset ``token`` (a random 62-bit number) for the
  subtask's consumer group ``<prefix>-<subtask>`` on partition 0 of the batch's first topic —
  is added to the transaction (``send_offsets_to_transaction``), and every record is flushed to
  the broker. The batch (checkpoint id, token, group, records) goes into checkpoint n's state.
- **When checkpoint n completes** (:meth:`CommitProtocol.complete`) the transaction commits:
  records and marker become visible atomically.
- **A crash between the two** leaves a completed checkpoint whose transaction may or may not
  have committed. Recovery (:func:`recovery_plan`) first fences every transactional id the
  restored subtasks used (``init_transactions`` aborts a transaction left open), then reads the
  group's committed offset: equal to the batch's token, the transaction committed and nothing
  is written; otherwise its records are written again in a fresh transaction carrying the same
  marker, and committed at once (the checkpoint is complete). A crash during that recovery
  repeats it, and the marker makes the repeat harmless.

One transaction per transactional id can be open, so records that arrive while a pre-committed
transaction waits for its checkpoint to complete are *held* in memory; if the next barrier comes
first, they become a batch that is written and committed when its checkpoint completes (the
write-ahead way), and the state carries them too. Normally the notification arrives within the
checkpoint's duration and little is held.

>>> p = CommitProtocol("fp-job-op", 0, token=iter([7, 8]).__next__)
>>> p.write([REC("t", b"a")])
[Begin(), Send(records=1)]
>>> p.snapshot(1)
[Prepare(token=7, group='fp-job-op-0', marker_topic='t')]
>>> p.write([REC("t", b"b")]), len(p.state()["pending"])   # held: checkpoint 1 is not complete
([], 1)
>>> p.complete(1)
[Commit(), Begin(), Send(records=1)]
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple


class ProducerRecord(NamedTuple):
    """One serialised record as the producer sends it."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    partition: int | None = None
    timestamp: int | None = None
    headers: list[tuple[str, bytes]] | None = None


REC = ProducerRecord


@dataclass(frozen=True)
class Begin:
    """Begin a transaction on the subtask's producer."""


#: what a batch holds per record: a whole :class:`ProducerRecord`, or, for a sink with one fixed
#: topic and no key (:attr:`Batch.topic`), the serialised value alone, or a ``(value,
#: timestamp)`` pair where the record has an event timestamp: a bytes object or a pair per
#: record instead of a tuple of six is what keeps a checkpoint interval's records cheap to hold,
#: to checkpoint and to produce
Record = ProducerRecord | bytes | tuple[bytes | None, int] | None


@dataclass(frozen=True)
class Send:
    """Produce these records into the open transaction (values alone go to ``topic``)."""

    records: list[Record] = field(repr=False)
    topic: str | None = None

    def __repr__(self) -> str:
        return f"Send(records={len(self.records)})"


@dataclass(frozen=True)
class Prepare:
    """Add the commit marker (``token`` as ``group``'s offset on ``marker_topic`` partition 0)
    to the open transaction and flush every record: durable, still invisible."""

    token: int
    group: str
    marker_topic: str


@dataclass(frozen=True)
class Commit:
    """Commit the prepared transaction."""


Action = Begin | Send | Prepare | Commit


@dataclass
class Batch:
    """The records of one checkpoint interval, pending until the checkpoint completes."""

    checkpoint_id: int
    token: int
    group: str
    #: whole ProducerRecords, or (with ``topic``) serialised values for that topic
    records: list[Record]
    #: already in Kafka (in the prepared transaction), or only here (held, written at completion)
    sent: bool
    #: the one topic of a batch of values; None for a batch of whole records
    topic: str | None = None

    @property
    def marker_topic(self) -> str:
        return self.topic if self.topic is not None else self.records[0].topic  # type: ignore[union-attr]

    def to_state(self) -> dict[str, Any]:
        """The batch in the checkpoint: ``values`` (with ``topic``) or ``records`` (tuples).
        The list is never changed once a batch holds it, so it is not copied for the upload."""
        head = {"checkpoint": self.checkpoint_id, "token": self.token, "group": self.group}
        if self.topic is not None:
            return {**head, "topic": self.topic, "values": self.records}
        return {**head, "records": [tuple(r) for r in self.records]}  # type: ignore[arg-type]

    @staticmethod
    def from_state(d: dict[str, Any]) -> Batch:
        head = (int(d["checkpoint"]), int(d["token"]), d["group"])
        if "values" in d:
            return Batch(*head, list(d["values"]), sent=False, topic=d["topic"])
        return Batch(*head, [ProducerRecord(*r) for r in d["records"]], sent=False)


def _replay(b: Batch) -> list[Action]:
    return [Begin(), Send(b.records, b.topic), Prepare(b.token, b.group, b.marker_topic), Commit()]


class CommitProtocol:
    """One subtask's transactions (see the module docstring); methods return the actions the
    writer carries out, in order."""

    def __init__(self, prefix: str, subtask: int, token: Callable[[], int] | None = None, *, topic: str | None = None) -> None:
        self.prefix = prefix
        self.subtask = subtask
        #: set: the records written are serialised values for this one topic (see :data:`Record`)
        self.topic = topic
        self._token = token or (lambda: secrets.randbits(62) or 1)
        #: records in the open transaction, not yet pre-committed
        self._open: list[ProducerRecord] = []
        self._txn_open = False
        #: the pre-committed transaction waiting for its checkpoint
        self._prepared: Batch | None = None
        #: batches snapshotted while a transaction was waiting: written at their completion
        self._waiting: list[Batch] = []
        #: records that arrived while a transaction was waiting, not yet in any checkpoint
        self._held: list[ProducerRecord] = []

    @property
    def transactional_id(self) -> str:
        return transactional_id(self.prefix, self.subtask)

    @property
    def group(self) -> str:
        return self.transactional_id

    def _blocked(self) -> bool:
        return self._prepared is not None or bool(self._waiting)

    def write(self, records: list[ProducerRecord]) -> list[Action]:
        if not records:
            return []
        if self._blocked():
            self._held.extend(records)
            return []
        out: list[Action] = []
        if not self._txn_open:
            self._txn_open = True
            out.append(Begin())
        self._open.extend(records)
        return out + [Send(list(records), self.topic)]

    def snapshot(self, checkpoint_id: int) -> list[Action]:
        out: list[Action] = []
        if self._open:
            b = Batch(checkpoint_id, self._token(), self.group, self._open, sent=True, topic=self.topic)
            self._prepared, self._open = b, []
            out.append(Prepare(b.token, b.group, b.marker_topic))
        if self._held:
            self._waiting.append(Batch(checkpoint_id, self._token(), self.group, self._held, sent=False, topic=self.topic))
            self._held = []
        return out

    def state(self) -> dict[str, Any]:
        """The checkpointed part: every batch a completed checkpoint would have to commit."""
        pending = ([self._prepared] if self._prepared else []) + self._waiting
        return {"prefix": self.prefix, "subtask": self.subtask, "pending": [b.to_state() for b in pending]}

    def complete(self, checkpoint_id: int) -> list[Action]:
        out: list[Action] = []
        if self._prepared is not None and self._prepared.checkpoint_id <= checkpoint_id:
            out.append(Commit())
            self._prepared = None
            self._txn_open = False
        while self._prepared is None and self._waiting and self._waiting[0].checkpoint_id <= checkpoint_id:
            out += _replay(self._waiting.pop(0))
        if not self._blocked() and self._held:
            held, self._held = self._held, []
            out += self.write(held)
        return out

    def end_of_input(self) -> list[Action]:
        """The input ended: everything commits, as at Flink's final checkpoint."""
        final = 1 << 62
        return self.snapshot(final) + self.complete(final)


def transactional_id(prefix: str, subtask: int) -> str:
    """``<prefix>-<subtask>``: one per subtask, the same in every attempt (so a new attempt's
    ``init_transactions`` fences the old one), different across subtasks and prefixes."""
    return f"{prefix}-{subtask}"


@dataclass(frozen=True)
class RecoveryPlan:
    #: transactional ids to fence (abort what they left open) before anything is checked
    fence: list[str]
    #: batches of the restored (completed) checkpoint: committed unless their marker is there
    batches: list[Batch]


def recovery_plan(prefix: str, subtask: int, states: list[Any]) -> RecoveryPlan:
    """What subtask ``subtask`` does on restore from the sink states of the old subtasks it
    stands in for (the engine hands it those with ``old % parallelism == subtask``).

    >>> st = {"prefix": "a", "subtask": 3, "pending": [{"checkpoint": 2, "token": 9, "group": "a-3",
    ...       "records": [("t", b"v", None, None, None, None)]}]}
    >>> plan = recovery_plan("b", 1, [st])
    >>> plan.fence, [(b.token, b.group, b.marker_topic) for b in plan.batches]
    (['b-1', 'a-3'], [(9, 'a-3', 't')])
    """
    fence = [transactional_id(prefix, subtask)]
    batches: list[Batch] = []
    for s in states or []:
        if not s:
            continue
        tid = transactional_id(s.get("prefix", prefix), int(s.get("subtask", subtask)))
        if tid not in fence:
            fence.append(tid)
        batches += [Batch.from_state(b) for b in s.get("pending", [])]
    batches.sort(key=lambda b: b.checkpoint_id)
    return RecoveryPlan(fence, batches)


def replay(batch: Batch) -> list[Action]:
    """The actions that write a restored batch whose marker is missing, committed at once."""
    return _replay(batch)
