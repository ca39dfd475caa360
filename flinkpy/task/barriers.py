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

    def supersede(self, checkpoint_id: int) -> int | None:
        """``checkpoint_id`` was snapshotted unaligned (its barrier overtook, or its alignment
        timed out): stop aligning for it and for anything older; its barriers still queued are
        stale from now on. Returns an older checkpoint whose alignment this cut short (the task
        declines it).

        >>> a = BarrierAligner(2)
        >>> a.on_barrier(0, 4, now_ms=0)
        >>> a.supersede(4), a.is_blocked(0), a.on_barrier(1, 4, now_ms=5)
        (None, False, None)
        >>> a.on_barrier(0, 5, now_ms=6)
        >>> a.supersede(6)
        5
        """
        canceled = self.current if self.current is not None and self.current < checkpoint_id else None
        if self.current is not None and self.current <= checkpoint_id:
            self.current = None
            self.blocked = set()
        self.newest_seen = max(self.newest_seen, checkpoint_id)
        return canceled


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
    the unprocessed data queued on every input channel ahead of its barrier (on a channel whose
    aligned barrier was already processed, nothing: what is queued there is after it).
    ``recording`` are the channels whose barrier is still to come: the data that arrives on them
    until it does belongs to the snapshot too."""

    checkpoint_id: int
    recording: frozenset[int]
    #: an older checkpoint that was still recording here (the task declines it)
    canceled: int | None = None


@dataclass(frozen=True)
class SwitchToUnaligned:
    """The alignment of ``checkpoint_id`` has lasted ``waited_ms``, its aligned-checkpoint
    timeout or longer: snapshot it now as an unaligned checkpoint, exactly as
    :class:`StartUnaligned` says, and send its barrier ahead of the output queues, marked
    unaligned."""

    checkpoint_id: int
    recording: frozenset[int]
    waited_ms: int


@dataclass(frozen=True)
class RecordingDone:
    """Every channel delivered barrier ``checkpoint_id`` (or ended): the channel state is
    complete and the snapshot can be uploaded and acknowledged."""

    checkpoint_id: int
    alignment_ms: int


Decision = StartUnaligned | SwitchToUnaligned | RecordingDone | Canceled


class UnalignedBarrierHandler:
    """Exactly-once without holding channels back (unaligned checkpoints).

    It sees every barrier as it is *read* from a channel, before the records queued ahead of it
    are processed. The first unaligned barrier N on any channel starts the snapshot at once; the
    barrier then overtakes everything queued in the task. Until barrier N arrived on a channel,
    the data frames of that channel are *recorded* (they are processed as usual too): they are
    the channel's in-flight state. A newer barrier during a recording cancels the older
    checkpoint; stale barriers are ignored; an ended channel counts as arrived.

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

    An *aligned* barrier (:meth:`on_aligned_barrier`) waits in its channel's queue and is
    aligned by a :class:`BarrierAligner` when its turn comes; this handler only times the
    alignment, from the first barrier N read. With an aligned-checkpoint timeout, once the
    alignment has lasted that long :meth:`tick` switches the checkpoint to unaligned: the
    channels whose barrier N was read are done (what is queued ahead of it is channel state),
    the others are recorded until it comes. A savepoint's barrier has no timeout: it never
    switches.

    >>> h = UnalignedBarrierHandler(2)
    >>> h.on_aligned_barrier(0, 8, now_ms=1_000, timeout_ms=50)
    []
    >>> h.deadline_ms, h.tick(now_ms=1_049)
    (1050, [])
    >>> h.tick(now_ms=1_050)
    [SwitchToUnaligned(checkpoint_id=8, recording=frozenset({1}), waited_ms=50)]
    >>> h.on_aligned_barrier(1, 8, now_ms=1_070, timeout_ms=50)
    [RecordingDone(checkpoint_id=8, alignment_ms=70)]
    """

    def __init__(self, channels: int):
        self.channels = channels
        self.finished: set[int] = set()
        self.current: int | None = None
        self.recording: frozenset[int] = frozenset()
        self.newest_seen = 0
        self.started_ms = 0
        #: the aligned checkpoint whose alignment is timed (None: none), when its first barrier
        #: was read, its timeout (None: never switch) and the channels its barrier was read on
        self.aligned_id: int | None = None
        self.aligned_started_ms = 0
        self.aligned_timeout_ms: int | None = None
        self.arrived: frozenset[int] = frozenset()

    def is_recording(self, channel: int) -> bool:
        return channel in self.recording

    @property
    def aligning(self) -> bool:
        return self.current is not None

    @property
    def deadline_ms(self) -> int | None:
        """When the timed alignment switches to unaligned (None: no alignment that may switch)."""
        if self.aligned_id is None or self.aligned_timeout_ms is None:
            return None
        return self.aligned_started_ms + self.aligned_timeout_ms

    def _end_alignment(self) -> None:
        self.aligned_id = None
        self.aligned_timeout_ms = None
        self.arrived = frozenset()

    def _done_if_complete(self, now_ms: int) -> list[Decision]:
        if self.current is None or self.recording:
            return []
        done = RecordingDone(self.current, max(0, now_ms - self.started_ms))
        self.current = None
        return [done]

    def _record(self, checkpoint_id: int, started_ms: int, arrived: frozenset[int]) -> frozenset[int]:
        self.current = self.newest_seen = checkpoint_id
        self.started_ms = started_ms
        self.recording = frozenset(range(self.channels)) - self.finished - arrived
        return self.recording

    def on_barrier(self, channel: int, checkpoint_id: int, now_ms: int) -> list[Decision]:
        """An unaligned barrier was read on ``channel``."""
        timed = self.aligned_id == checkpoint_id
        if not timed and (checkpoint_id < self.newest_seen or (checkpoint_id == self.newest_seen and self.current is None)):
            return []  # stale: completed, canceled or superseded here
        out: list[Decision] = []
        if self.current is None or checkpoint_id > self.current:
            canceled = self.current
            # barriers of the same checkpoint already read in aligned form arrived too
            started, arrived = (self.aligned_started_ms, self.arrived) if timed else (now_ms, frozenset())
            self._end_alignment()
            out.append(StartUnaligned(checkpoint_id, self._record(checkpoint_id, started, arrived | {channel}), canceled))
        else:
            self.recording = self.recording - {channel}
        return out + self._done_if_complete(now_ms)

    def on_aligned_barrier(self, channel: int, checkpoint_id: int, now_ms: int, timeout_ms: int | None = None) -> list[Decision]:
        """An aligned barrier was read on ``channel`` (it waits in the channel's queue for the
        aligner); ``timeout_ms``: how long the alignment may last before the checkpoint switches
        to unaligned (None: never, a savepoint's). A checkpoint already switched here takes it
        as the end of the channel's recording: the task drops the barrier then."""
        if checkpoint_id == self.current:
            self.recording = self.recording - {channel}
            return self._done_if_complete(now_ms)
        if checkpoint_id == self.aligned_id:
            self.arrived = self.arrived | {channel}
            return []
        if checkpoint_id <= self.newest_seen:
            return []  # stale
        out: list[Decision] = []
        if self.current is not None:  # recording an older checkpoint: it cannot complete any more
            out.append(Canceled(self.current))
            self.current = None
            self.recording = frozenset()
        self.newest_seen = self.aligned_id = checkpoint_id
        self.aligned_started_ms = now_ms
        self.aligned_timeout_ms = timeout_ms if timeout_ms else None
        self.arrived = frozenset({channel})
        return out

    def tick(self, now_ms: int) -> list[Decision]:
        """The time is ``now_ms``: a timed alignment that has lasted its timeout switches."""
        deadline = self.deadline_ms
        if deadline is None or now_ms < deadline:
            return []
        checkpoint_id, started = self.aligned_id, self.aligned_started_ms
        assert checkpoint_id is not None
        recording = self._record(checkpoint_id, started, self.arrived)
        self._end_alignment()
        return [SwitchToUnaligned(checkpoint_id, recording, now_ms - started), *self._done_if_complete(now_ms)]

    def alignment_done(self, checkpoint_id: int) -> None:
        """The aligner completed (or gave up) the alignment of ``checkpoint_id``: whatever it
        timed up to that checkpoint cannot switch any more."""
        if self.aligned_id is not None and self.aligned_id <= checkpoint_id:
            self._end_alignment()

    def on_end_of_partition(self, channel: int, now_ms: int) -> list[Decision]:
        self.finished.add(channel)
        self.recording = self.recording - {channel}
        return self._done_if_complete(now_ms)

    def abort(self, checkpoint_id: int) -> bool:
        """The coordinator aborted ``checkpoint_id``: stop recording (or timing) it. True if it
        was recording."""
        self.newest_seen = max(self.newest_seen, checkpoint_id)
        if self.aligned_id == checkpoint_id:
            self._end_alignment()
        if self.current == checkpoint_id:
            self.current = None
            self.recording = frozenset()
            return True
        return False
