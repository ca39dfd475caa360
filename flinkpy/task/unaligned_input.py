"""The input processor of a task in unaligned-checkpoint mode.

Frames are read eagerly into one queue per input channel (their memory is bounded by the credit
the task granted) and processed from there, a buffer or a slice of one at a time (slices of
about 50 ms, so that a slow operator does not keep a barrier waiting for seconds), only while
every output channel can take more: when an output buffer waits for credit the task stops processing and
waits on the output sockets, the control connection and the input sockets. So the task never
blocks inside a batch, and a barrier is seen as soon as it is read.

An unaligned barrier is a priority event (:class:`~flinkpy.task.barriers.UnalignedBarrierHandler`
decides): at the first barrier N the task snapshots at once — operator state, its output
queues (:meth:`Task.checkpoint_unaligned`), and every input queue's unprocessed data — and then
records the data arriving on the channels whose barrier N is still to come. The recorded buffers
are processed normally as well; once every barrier N is in, the snapshot with its channel state
is uploaded and acknowledged. Savepoints keep aligned barriers, which travel in the queues and
are aligned by the usual :class:`~flinkpy.task.barriers.BarrierAligner` (a blocked channel's
queue waits).

With an aligned-checkpoint timeout, checkpoints' barriers are aligned too, and the handler
times each alignment from the first barrier read; the loop never waits past its deadline. When
the alignment has lasted the timeout the task switches that checkpoint to unaligned: it
snapshots at once, with the data queued ahead of barrier N (on channels whose barrier is still
queued or still to come) and then the data the latter deliver until it comes as channel state,
drops the barriers N still queued, stops aligning, and sends barrier N marked unaligned ahead of
its output queues — so downstream tasks snapshot at once too. A channel whose barrier N was
processed holds only data after it: nothing of it is recorded.
"""

from __future__ import annotations

import dataclasses
import pickle
import selectors
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from flinkpy.clock import now_ms
from flinkpy.network import channels as net
from flinkpy.protocol.messages import CheckpointBarrier
from flinkpy.task.barriers import (
    BarrierAligner, Canceled, Decision, RecordingDone, Snapshot, StartUnaligned, SwitchToUnaligned, UnalignedBarrierHandler,
)
from flinkpy.task.input_processor import CONTROL, Frame, InputProcessor, wait_timeout

if TYPE_CHECKING:
    from flinkpy.task.task import Task

_DATA = (net.DATA, net.DATA_TS)
#: a buffer is processed in slices of about this many seconds, so that a barrier waits at most
#: about that long behind the records of a buffer (a slow operator may take seconds for one)
_SLICE_S = 0.05
_MIN_SLICE, _MAX_SLICE = 16, 1 << 20
#: selector data of an output channel: its index, shifted below CONTROL
_OUT = -2


class UnalignedInputProcessor(InputProcessor):
    """Reads every input channel to its end; checkpoints are unaligned (savepoints aligned)."""

    def __init__(self, task: Task, restored: dict[tuple[int, int], list[Frame]]):
        super().__init__(task)
        n = len(self.inputs)
        self.handler = UnalignedBarrierHandler(n)
        #: per channel: (kind, payload, credited) read but not processed yet; restored buffers
        #: (from a checkpoint's channel state) come first and carry no credit
        self.queues: list[deque[tuple[int, Any, bool]]] = [deque() for _ in range(n)]
        for i, ch in enumerate(self.inputs):
            for kind, data in restored.get((ch.edge_id, ch.producer), ()):
                self.queues[i].append((kind, data, False))
        self.outputs: list[Any] = [ch for w in task.writers.values() for ch in w.channels]
        #: the checkpoint recording its input channel state: (id, snapshot, frames per channel)
        self._pending: tuple[int, Any, list[list[Frame]]] | None = None
        self._next = 0
        #: records per slice, adapted to the time the last slice took
        self._slice = 256
        #: the aligned barrier whose alignment the handler times (what a switch forwards)
        self._timed: CheckpointBarrier | None = None

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        sel = self._selector
        control, timeout_s, wm_interval, writers, timers, emitters, debloat = self._start_loop()
        for j, out in enumerate(self.outputs):
            sel.register(out.sock, selectors.EVENT_READ, _OUT - j)
        monotonic = time.monotonic
        outputs = self.outputs
        next_wm = monotonic() + wm_interval
        while self._open_channels:
            if control.ctrl.buffered:
                control.handle_one()
                continue
            timers = self._timers
            blocked = any(o.queue for o in outputs)
            if not blocked and self._has_work():
                timeout: float | None = 0.0
            else:
                timeout, _ = wait_timeout(timeout_s, writers, timers, emitters, next_wm)
                if blocked:
                    timeout = 0.1 if timeout is None else min(timeout, 0.1)
                deadline = self.handler.deadline_ms
                if deadline is not None:  # wake up in time to switch the alignment to unaligned
                    until = max(0.0, (deadline - now_ms()) / 1000.0)
                    timeout = until if timeout is None else min(timeout, until)
            for ch in self.inputs:
                if ch.owed:
                    ch.announce_credit()
            waiting_on = next((o for o in outputs if o.queue), None) if blocked else None
            waited = monotonic()
            # waiting for credit is back-pressure, not idleness (the metrics and debloating tell them apart)
            if waiting_on is not None:
                waiting_on.blocked_since = waited
            else:
                self.idle_since = waited
            events = sel.select(timeout)
            if waiting_on is not None:
                waiting_on.blocked_since = 0.0
                waiting_on.backpressured_s += monotonic() - waited
            else:
                self.idle_since = 0.0
                self.idle_s += monotonic() - waited
            for key, _ in events:
                if type(key.data) is not int:
                    key.data.drain()  # an async wait operator's requests finished
                elif key.data == CONTROL:
                    control.handle_one()
                elif key.data <= _OUT:
                    outputs[_OUT - key.data].on_readable()
                else:
                    self._read(key.data)
            if self.handler.deadline_ms is not None:
                self._decide(self.handler.tick(now_ms()), None)
            if not any(o.queue for o in outputs):
                for ts in timers:
                    ts.fire_processing_timers()
                if emitters and monotonic() >= next_wm:
                    for e in emitters:
                        e.emit_periodic_watermark()
                    next_wm = monotonic() + wm_interval
                self._process_some()
            now = monotonic()
            for w in writers:
                w.flush_if_due(now)
            if debloat is not None:
                debloat.tick(now, self.idle_s)
        sel.close()

    def _has_work(self) -> bool:
        return any(q and not self.aligner.is_blocked(i) for i, q in enumerate(self.queues))

    def _process_some(self) -> None:
        """Process queued frames, round robin over the channels, while the outputs take them."""
        n = len(self.queues)
        outputs = self.outputs
        for _ in range(n):
            i = self._next
            self._next = (i + 1) % n
            q = self.queues[i]
            if q and not self.aligner.is_blocked(i) and not self.inputs[i].finished:
                self._process(i, q.popleft())
                if any(o.queue for o in outputs):
                    return

    def _process(self, i: int, entry: tuple[int, Any, bool]) -> None:
        kind, data, credited = entry
        if kind not in _DATA:
            self._handle_frame(i, (kind, data))
            return
        if isinstance(data, bytes):
            nbytes = len(data)
            batch, timestamps = (pickle.loads(data), None) if kind == net.DATA else pickle.loads(data)
        else:
            batch, timestamps, nbytes = data  # the rest of a buffer processed in part
        n = self._slice
        last = len(batch) <= n
        if not last:
            # a barrier is looked for between two slices: the rest of the buffer waits at the
            # head of the queue, where a snapshot finds it (as channel state)
            rest = (batch[n:], None if timestamps is None else timestamps[n:], nbytes)
            self.queues[i].appendleft((kind, rest, credited))
            batch = batch[:n]
            timestamps = None if timestamps is None else timestamps[:n]
        started = time.perf_counter()
        if self._second[i]:
            self.head2(batch, timestamps)  # type: ignore[misc]
        else:
            self.head(batch, timestamps)
        took = time.perf_counter() - started
        if batch:
            self._slice = max(_MIN_SLICE, min(_MAX_SLICE, int(_SLICE_S * len(batch) / took) if took > 0 else _MAX_SLICE))
        self.records_in += len(batch)
        if last and credited:
            self.inputs[i].return_credit(nbytes)

    # -- reading -------------------------------------------------------------------------------

    def _read(self, i: int) -> None:
        ch = self.inputs[i]
        if ch.finished or i in self._drained:
            return
        try:
            frames = ch.reader.feed()
        except OSError as e:
            raise net.ChannelBroken(f"{ch.describe} broke ({e}): the producer failed") from e
        q = self.queues[i]
        if frames is None:
            if any(kind == net.END_OF_PARTITION for kind, _, _ in q):
                self._selector.unregister(ch.sock)
                self._drained.add(i)
                return
            raise net.ChannelBroken(f"{ch.describe} closed before the end of its partition: the producer failed")
        for kind, data in frames:
            if kind in _DATA:
                ch.credit.on_buffer_received()
                q.append((kind, data, True))
                if self._pending is not None and self.handler.is_recording(i):
                    self._pending[2][i].append((kind, data))
            elif kind == net.BARRIER:
                barrier: CheckpointBarrier = pickle.loads(data)
                if barrier.unaligned:
                    self._on_unaligned_barrier(i, barrier)  # priority: it overtakes the queue
                else:
                    self._on_aligned_barrier(i, barrier, (kind, data, False))
            else:
                if kind == net.END_OF_PARTITION:
                    self._decide(self.handler.on_end_of_partition(i, now_ms()), None)
                q.append((kind, data, False))

    # -- checkpoints ---------------------------------------------------------------------------

    def _on_unaligned_barrier(self, i: int, barrier: CheckpointBarrier) -> None:
        self._decide(self.handler.on_barrier(i, barrier.checkpoint_id, now_ms()), barrier)

    def _on_aligned_barrier(self, i: int, barrier: CheckpointBarrier, entry: tuple[int, Any, bool]) -> None:
        """An aligned barrier waits in its channel's queue for the aligner; the handler times
        its alignment (a savepoint's never switches). A checkpoint this task switched to
        unaligned already takes the barrier as the end of the channel's recording: dropped."""
        cid = barrier.checkpoint_id
        switched = self.handler.current == cid
        timeout = barrier.aligned_timeout_ms if barrier.kind == "checkpoint" else 0
        decisions = self.handler.on_aligned_barrier(i, cid, now_ms(), timeout or None)
        if self.handler.aligned_id == cid and (self._timed is None or self._timed.checkpoint_id != cid):
            self._timed = barrier
        self._decide(decisions, None)
        if not switched:
            self.queues[i].append(entry)

    def _decide(self, decisions: list[Decision], barrier: CheckpointBarrier | None) -> None:
        describe = self.task.describe
        for d in decisions:
            if isinstance(d, Canceled):
                if self._pending is not None and self._pending[0] == d.checkpoint_id:
                    self._pending = None
                self.task.checkpointer.decline(d.checkpoint_id, f"a newer checkpoint's barrier reached {describe} while it recorded channel state")
            elif isinstance(d, StartUnaligned):
                if d.canceled is not None:
                    self._pending = None
                    self.task.checkpointer.decline(d.canceled, f"a newer checkpoint's barrier reached {describe} while it recorded channel state")
                assert barrier is not None
                self._snapshot_unaligned(d.checkpoint_id, barrier)
            elif isinstance(d, SwitchToUnaligned):
                timed, self._timed = self._timed, None
                assert timed is not None and timed.checkpoint_id == d.checkpoint_id
                # downstream tasks get it unaligned: they snapshot at once, without aligning
                self._snapshot_unaligned(d.checkpoint_id, dataclasses.replace(timed, unaligned=True))
            elif isinstance(d, RecordingDone):
                pending, self._pending = self._pending, None
                if pending is None or pending[0] != d.checkpoint_id:
                    continue
                _, job, recorded = pending
                job.channel_state["inputs"] = {
                    (ch.edge_id, ch.producer): frames for ch, frames in zip(self.inputs, recorded) if frames
                }
                job.metrics["alignment_ms"] = d.alignment_ms
                self.task.checkpointer.submit(job)

    def _snapshot_unaligned(self, checkpoint_id: int, barrier: CheckpointBarrier) -> None:
        """Snapshot ``checkpoint_id`` now, with the data queued ahead of its barrier as input
        channel state; stop aligning it (its barriers still queued are dropped)."""
        aligner = self.aligner
        assert isinstance(aligner, BarrierAligner)
        aligned_here = aligner.current == checkpoint_id
        recorded: list[list[Frame]] = []
        for i, q in enumerate(self.queues):
            if aligned_here and aligner.is_blocked(i):
                recorded.append([])  # its barrier N was processed: everything queued is after it
                continue
            frames: list[Frame] = []
            for pos, (k, p, _) in enumerate(q):
                if k == net.BARRIER and _barrier_id(p) == checkpoint_id:
                    del q[pos]  # what follows is after barrier N
                    break
                if k in _DATA:
                    frames.append((k, _serialized(k, p)))
            recorded.append(frames)
        older = aligner.supersede(checkpoint_id)
        if older is not None:
            self.task.checkpointer.decline(older, f"a newer checkpoint's barrier reached {self.task.describe} during its alignment")
        self._barriers.pop(checkpoint_id, None)
        self.alignment_bytes = 0
        faults = self.task.faults
        if faults:
            faults.reach("alignment", checkpoint_id)
        job = self.task.checkpoint_unaligned(barrier)
        self._pending = (checkpoint_id, job, recorded) if job is not None else None

    def _on_decision(self, decision: Snapshot | Canceled | None, barrier: CheckpointBarrier | None) -> None:
        if decision is not None:  # the aligner completed or gave up an alignment: no switch for it
            self.handler.alignment_done(decision.checkpoint_id)
            if self._timed is not None and self._timed.checkpoint_id <= decision.checkpoint_id:
                self._timed = None
        super()._on_decision(decision, barrier)

    def abort_alignment(self, checkpoint_id: int) -> None:
        if self.handler.abort(checkpoint_id):
            self._pending = None
        if self._timed is not None and self._timed.checkpoint_id == checkpoint_id:
            self._timed = None
        super().abort_alignment(checkpoint_id)


def _barrier_id(payload: Any) -> int:
    barrier: CheckpointBarrier = pickle.loads(payload)
    return barrier.checkpoint_id


def _serialized(kind: int, data: Any) -> bytes:
    """A queued buffer as it travels (the rest of a buffer processed in part is serialized again)."""
    if isinstance(data, bytes):
        return data
    batch, timestamps, _ = data
    return net.dumps_batch(batch if kind == net.DATA else [batch, timestamps])
