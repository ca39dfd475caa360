"""Barrier handling at a task's inputs, as pure state machines (no sockets, no clock).

A task with several input channels learns that checkpoint N reached it when barrier N has come
in on every channel. What it does with the records in between decides the guarantee:

- :class:`BarrierAligner` (exactly-once): once barrier N arrived on a channel, that channel is
  *blocked* — the task holds its later frames back — until barrier N has arrived on every
  channel; then the task snapshots, forwards the barrier, and the held frames are released.
  Channels whose barrier has not arrived yet are processed normally meanwhile. The snapshot
  therefore reflects exactly the records before barrier N on every channel.
- :class:`BarrierTracker` (at-least-once): nothing is held; the snapshot is taken when the last
  barrier N arrives, so it may include records from after barrier N on faster channels — they
  are replayed after a restore: at least once.

A channel that reached its end of partition counts as aligned for every later checkpoint.
A barrier for a newer checkpoint during an alignment cancels the older one (it can no longer
complete here); barriers of checkpoints older than the newest seen are ignored.

>>> a = BarrierAligner(2)
>>> a.on_barrier(0, 1, now_ms=10)          # channel 0 now blocked
>>> a.is_blocked(0), a.is_blocked(1)
(True, False)
>>> a.on_barrier(1, 1, now_ms=25)
Snapshot(checkpoint_id=1, alignment_ms=15, canceled=None)
>>> a.is_blocked(0)
False
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Snapshot:
    """Take the snapshot of ``checkpoint_id`` now, then forward the barrier."""

    checkpoint_id: int
    alignment_ms: int
    #: an older checkpoint whose alignment this barrier cut short (the task declines it)
    canceled: int | None = None


@dataclass(frozen=True)
class Canceled:
    """An alignment was given up without a snapshot (a newer barrier overtook it)."""

    checkpoint_id: int


class BarrierAligner:
    def __init__(self, channels: int):
        self.channels = channels
        self.finished: set[int] = set()
        self.blocked: set[int] = set()
        self.current: int | None = None
        self.newest_seen = 0
        self.started_ms = 0

    def is_blocked(self, channel: int) -> bool:
        return channel in self.blocked

    @property
    def aligning(self) -> bool:
        return self.current is not None

    def _complete_if_aligned(self, now_ms: int, canceled: int | None) -> Snapshot | Canceled | None:
        if self.current is None or len(self.blocked | self.finished) < self.channels:
            return Canceled(canceled) if canceled is not None else None
        done = Snapshot(self.current, max(0, now_ms - self.started_ms), canceled)
        self.current = None
        self.blocked = set()
        return done

    def on_barrier(self, channel: int, checkpoint_id: int, now_ms: int) -> Snapshot | Canceled | None:
        if checkpoint_id < self.newest_seen or (checkpoint_id == self.newest_seen and self.current is None):
            return None  # stale: that checkpoint was completed, canceled or superseded here
        canceled = None
        if self.current is not None and checkpoint_id > self.current:
            canceled = self.current
            self.current = None
            self.blocked = set()
        if self.current is None:
            self.current = checkpoint_id
            self.newest_seen = checkpoint_id
            self.started_ms = now_ms
        self.blocked.add(channel)
        return self._complete_if_aligned(now_ms, canceled)

    def on_end_of_partition(self, channel: int, now_ms: int) -> Snapshot | None:
        self.finished.add(channel)
        self.blocked.discard(channel)
        result = self._complete_if_aligned(now_ms, None)
        return result if isinstance(result, Snapshot) else None

    def abort(self, checkpoint_id: int) -> bool:
        """The coordinator aborted ``checkpoint_id``: stop aligning for it. True if we were."""
        if self.current == checkpoint_id:
            self.current = None
            self.blocked = set()
            return True
        self.newest_seen = max(self.newest_seen, checkpoint_id)
        return False


class BarrierTracker:
    """At-least-once: count barriers per checkpoint, never block a channel."""

    def __init__(self, channels: int):
        self.channels = channels
        self.finished: set[int] = set()
        self.seen: dict[int, set[int]] = {}
        self.first_ms: dict[int, int] = {}
        self.newest_done = 0

    def is_blocked(self, channel: int) -> bool:
        return False

    @property
    def aligning(self) -> bool:
        return bool(self.seen)

    def _complete(self, checkpoint_id: int, now_ms: int) -> Snapshot | None:
        if len(self.seen[checkpoint_id] | self.finished) < self.channels:
            return None
        started = self.first_ms.pop(checkpoint_id)
        del self.seen[checkpoint_id]
        # older checkpoints that never completed here cannot complete any more
        for older in [c for c in self.seen if c < checkpoint_id]:
            del self.seen[older]
            self.first_ms.pop(older, None)
        self.newest_done = checkpoint_id
        return Snapshot(checkpoint_id, max(0, now_ms - started))

    def on_barrier(self, channel: int, checkpoint_id: int, now_ms: int) -> Snapshot | None:
        if checkpoint_id <= self.newest_done:
            return None
        if checkpoint_id not in self.seen:
            self.seen[checkpoint_id] = set()
            self.first_ms[checkpoint_id] = now_ms
        self.seen[checkpoint_id].add(channel)
        return self._complete(checkpoint_id, now_ms)

    def on_end_of_partition(self, channel: int, now_ms: int) -> Snapshot | None:
        self.finished.add(channel)
        for cid in sorted(self.seen):
            done = self._complete(cid, now_ms)
            if done is not None:
                return done
        return None

    def abort(self, checkpoint_id: int) -> bool:
        self.first_ms.pop(checkpoint_id, None)
        return self.seen.pop(checkpoint_id, None) is not None


@dataclass(frozen=True)
class StartUnaligned:
    """Snapshot ``checkpoint_id`` now, without waiting: operator state, the output queues, and
    the unprocessed data queued on every input channel ahead of its barrier. ``recording`` are
    the channels whose barrier is still to come: the data that arrives on them until it does
    belongs to the snapshot too."""

    checkpoint_id: int
    recording: frozenset[int]
    #: an older checkpoint that was still recording here (the task declines it)
    canceled: int | None = None


@dataclass(frozen=True)
class RecordingDone:
    """Every channel delivered barrier ``checkpoint_id`` (or ended): the channel state is
    complete and the snapshot can be uploaded and acknowledged."""

    checkpoint_id: int
    alignment_ms: int


class UnalignedBarrierHandler:
    """Exactly-once without holding channels back (unaligned checkpoints).

    The first barrier N on any channel starts the snapshot at once; the barrier then overtakes
    everything queued in the task. Until barrier N arrived on a channel, the data frames of that
    channel are *recorded* (they are processed as usual too): they are the channel's in-flight
    state. A newer barrier during a recording cancels the older checkpoint; stale barriers are
    ignored; an ended channel counts as arrived.

    >>> h = UnalignedBarrierHandler(3)
    >>> h.on_barrier(1, 7, now_ms=100)
    [StartUnaligned(checkpoint_id=7, recording=frozenset({0, 2}), canceled=None)]
    >>> h.is_recording(0), h.is_recording(1)
    (True, False)
    >>> h.on_barrier(0, 7, now_ms=110)
    []
    >>> h.on_end_of_partition(2, now_ms=130)
    [RecordingDone(checkpoint_id=7, alignment_ms=30)]
    >>> h.on_barrier(2, 7, now_ms=140), h.recording
    ([], frozenset())
    """

    def __init__(self, channels: int):
        self.channels = channels
        self.finished: set[int] = set()
        self.current: int | None = None
        self.recording: frozenset[int] = frozenset()
        self.newest_seen = 0
        self.started_ms = 0

    def is_recording(self, channel: int) -> bool:
        return channel in self.recording

    @property
    def aligning(self) -> bool:
        return self.current is not None

    def _done_if_complete(self, now_ms: int) -> list[StartUnaligned | RecordingDone]:
        if self.current is None or self.recording:
            return []
        done = RecordingDone(self.current, max(0, now_ms - self.started_ms))
        self.current = None
        return [done]

    def on_barrier(self, channel: int, checkpoint_id: int, now_ms: int) -> list[StartUnaligned | RecordingDone]:
        if checkpoint_id < self.newest_seen or (checkpoint_id == self.newest_seen and self.current is None):
            return []  # stale: completed, canceled or superseded here
        out: list[StartUnaligned | RecordingDone] = []
        if self.current is None or checkpoint_id > self.current:
            canceled = self.current
            self.current = self.newest_seen = checkpoint_id
            self.started_ms = now_ms
            self.recording = frozenset(range(self.channels)) - self.finished - {channel}
            out.append(StartUnaligned(checkpoint_id, self.recording, canceled))
        else:
            self.recording = self.recording - {channel}
        return out + self._done_if_complete(now_ms)

    def on_end_of_partition(self, channel: int, now_ms: int) -> list[StartUnaligned | RecordingDone]:
        self.finished.add(channel)
        self.recording = self.recording - {channel}
        return self._done_if_complete(now_ms)

    def abort(self, checkpoint_id: int) -> bool:
        """The coordinator aborted ``checkpoint_id``: stop recording for it. True if we were."""
        self.newest_seen = max(self.newest_seen, checkpoint_id)
        if self.current == checkpoint_id:
            self.current = None
            self.recording = frozenset()
            return True
        return False
