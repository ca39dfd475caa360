"""The bookkeeping of the RabbitMQ sources, apart from pika's I/O: pure, no sockets, no clock.

:class:`AckLedger` (a classic queue). A message is acknowledged only once the checkpoint whose
snapshot covered it completes: each snapshot closes a batch of deliveries and remembers the
highest delivery tag received so far; a completed checkpoint yields that tag, which the reader
acknowledges with ``multiple=True`` (one frame for the whole batch, every earlier checkpoint's
included). With correlation ids, the ids of the messages each pending checkpoint covers are in
its snapshot; a restored reader treats a message whose id is among them as a redelivery of one
the restored checkpoint already covers — emitted before the failure, its ack lost with the
connection — and drops it (Flink's ``MessageAcknowledgingSourceBase``).

>>> ledger = AckLedger(use_correlation_id=True)
>>> ledger.received(1, "a"), ledger.received(2, "b")
(True, True)
>>> ledger.snapshot(7)
[[7, ['a', 'b']]]
>>> ledger.received(3, "c")
True
>>> ledger.complete(7)
2
>>> restored = AckLedger(use_correlation_id=True, restored=[[[7, ["a", "b"]]]])
>>> restored.received(1, "a"), restored.received(2, "c")
(False, True)

:class:`StreamShare` (a stream queue at any parallelism). Every subtask reads the whole stream
and keeps the offsets ``offset % parallelism == subtask``; its state is the next offset it will
consider. A restore at another parallelism hands every new subtask the states of all old ones:
an offset was emitted under the old layout iff it lies below the next offset of the old
subtask that owned it, so the new subtask starts at the lowest old next offset and skips what
the old layout emitted, carrying the old layout in its state until it has passed it.

>>> share = StreamShare(subtask=1, parallelism=2)
>>> [o for o in range(6) if share.take(o)], share.snapshot()["next"]
([1, 3, 5], 6)
>>> rescaled = StreamShare(0, 1, restored=[{"parallelism": 2, "subtask": 0, "next": 4, "before": None},
...                                         {"parallelism": 2, "subtask": 1, "next": 6, "before": None}])
>>> rescaled.start, [o for o in range(4, 8) if rescaled.take(o)]
(4, [4, 6, 7])
"""

from __future__ import annotations

from collections import deque
from typing import Any


class AckLedger:
    """Delivery tags and correlation ids of one classic-queue reader (see the module)."""

    def __init__(self, use_correlation_id: bool, restored: list[Any] | None = None) -> None:
        self.use_correlation_id = use_correlation_id
        #: the highest delivery tag received on this channel (0: none)
        self.last_tag = 0
        #: checkpoint id -> the highest tag its snapshot covered (this channel's, not restored)
        self._tags: dict[int, int] = {}
        #: checkpoint id -> the correlation ids its snapshot covered, oldest first
        self._ids: dict[int, list[str]] = {}
        #: ids received since the last snapshot
        self._current: list[str] = []
        #: ids that a pending checkpoint covers: a message carrying one is a redelivery
        self._covered: set[str] = set()
        for state in restored or []:
            for checkpoint_id, ids in state or []:
                self._ids[int(checkpoint_id)] = list(ids)
                self._covered.update(ids)

    def received(self, delivery_tag: int, correlation_id: str | None) -> bool:
        """A delivery arrived: True to emit it, False to drop it (a redelivery already covered)."""
        self.last_tag = max(self.last_tag, delivery_tag)
        if not self.use_correlation_id:
            return True
        if correlation_id is None:
            raise MissingCorrelationId(delivery_tag)
        if correlation_id in self._covered:
            return False
        self._covered.add(correlation_id)
        self._current.append(correlation_id)
        return True

    def snapshot(self, checkpoint_id: int) -> list[list[Any]]:
        """Close the batch of checkpoint ``checkpoint_id``; the state: every pending
        checkpoint's correlation ids (empty lists without correlation ids)."""
        if self.last_tag and self.last_tag > max(self._tags.values(), default=0):
            self._tags[checkpoint_id] = self.last_tag
        if self.use_correlation_id:
            self._ids[checkpoint_id] = self._current
            self._current = []
        return [[c, list(ids)] for c, ids in sorted(self._ids.items())]

    def complete(self, checkpoint_id: int) -> int | None:
        """Checkpoint ``checkpoint_id`` completed: the delivery tag to acknowledge with
        ``multiple=True`` (None: nothing new to acknowledge). Earlier checkpoints are covered too."""
        done = [c for c in self._tags if c <= checkpoint_id]
        tag = max((self._tags.pop(c) for c in done), default=None)
        for c in [c for c in self._ids if c <= checkpoint_id]:
            self._covered.difference_update(self._ids.pop(c))
        return tag


class MissingCorrelationId(ValueError):
    """A message without a correlation id reached a source that deduplicates by them."""

    def __init__(self, delivery_tag: int) -> None:
        super().__init__(f"message {delivery_tag} has no correlation id")
        self.delivery_tag = delivery_tag


class StreamShare:
    """Which offsets of a stream queue one subtask emits, and where it resumes (see the module)."""

    def __init__(self, subtask: int, parallelism: int, restored: list[Any] | None = None) -> None:
        self.subtask = subtask
        self.parallelism = parallelism
        states = [s for s in restored or [] if s]
        #: an old layout still being passed: {"parallelism": p, "next": [next offset per subtask]}
        self.before: dict[str, Any] | None = None
        if not states:
            self.next = 0
        elif int(states[0]["parallelism"]) == parallelism:
            (own,) = [s for s in states if int(s["subtask"]) == subtask] or [{"next": 0}]
            self.next = int(own["next"])
            self.before = own.get("before")
        else:
            old_p = int(states[0]["parallelism"])
            nexts = [0] * old_p
            for s in states:
                nexts[int(s["subtask"])] = int(s["next"])
            self.next = min(nexts)
            self.before = {"parallelism": old_p, "next": nexts}
            # an older layout carried by the old subtasks themselves: the lowest still matters
            older = [s["before"] for s in states if s.get("before")]
            if older:
                self.next = min(self.next, *(min(b["next"]) for b in older))
                self.before["older"] = older
        #: the first offset to ask the server for
        self.start = self.next

    def take(self, offset: int) -> bool:
        """Whether to emit the message at ``offset`` (advances the position past it)."""
        if offset < self.next:
            return False  # a chunk begins before the requested offset
        self.next = offset + 1
        if offset % self.parallelism != self.subtask:
            return False
        if self.before is not None:
            if _emitted(self.before, offset):
                return False
            if offset >= _horizon(self.before):
                self.before = None
        return True

    def snapshot(self) -> dict[str, Any]:
        return {"parallelism": self.parallelism, "subtask": self.subtask, "next": self.next, "before": self.before}


def _emitted(layout: dict[str, Any], offset: int) -> bool:
    nexts = layout["next"]
    if offset < nexts[offset % layout["parallelism"]]:
        return True
    return any(_emitted(b, offset) for b in layout.get("older", []))


def _horizon(layout: dict[str, Any]) -> int:
    return max([max(layout["next"])] + [_horizon(b) for b in layout.get("older", [])])


class ConfirmLedger:
    """Publisher confirms of one channel (the RMQSink's): which published messages the server
    has not confirmed yet, and how many it refused. Delivery tags count the channel's
    publishes from 1; a confirm covers one tag, or with ``multiple`` every tag up to it.

    >>> ledger = ConfirmLedger()
    >>> [ledger.published() for _ in range(4)]
    [1, 2, 3, 4]
    >>> ledger.confirmed(3, multiple=False, ack=True); ledger.outstanding
    3
    >>> ledger.confirmed(2, multiple=True, ack=False); ledger.outstanding, ledger.nacked
    (1, 2)
    >>> ledger.confirmed(4, multiple=False, ack=True); ledger.outstanding
    0
    """

    def __init__(self) -> None:
        self._next = 1
        #: published tags not confirmed yet, oldest first (a confirm of a later one may come first)
        self._unconfirmed: deque[int] = deque()
        self._early: set[int] = set()
        #: messages the server refused (basic.nack) and messages it returned as unroutable
        self.nacked = 0
        self.returned = 0

    def published(self) -> int:
        tag = self._next
        self._next += 1
        self._unconfirmed.append(tag)
        return tag

    def confirmed(self, tag: int, *, multiple: bool, ack: bool) -> None:
        if multiple:
            while self._unconfirmed and self._unconfirmed[0] <= tag:
                first = self._unconfirmed.popleft()
                if first in self._early:
                    self._early.discard(first)
                elif not ack:
                    self.nacked += 1
        else:
            if not ack:
                self.nacked += 1
            self._early.add(tag)
        while self._unconfirmed and self._unconfirmed[0] in self._early:
            self._early.discard(self._unconfirmed.popleft())

    @property
    def outstanding(self) -> int:
        return len(self._unconfirmed) - len(self._early)
