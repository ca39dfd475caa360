"""The input processor of a task that reads input channels (every task but a source).

One loop multiplexes the input channels and the control connection with a selector. A
two-input head (connected streams) gets the records of each channel through the method of the
input that channel feeds; barriers are aligned and watermarks combined across the channels of
both inputs alike, so its event time is the minimum of its two inputs'. Frames
of a channel whose barrier arrived during an exactly-once alignment are held back and released,
in order, once the alignment ends (:mod:`flinkpy.task.barriers` decides; this module only
carries the decisions out). Watermarks and idleness go through the status watermark valve;
processing-time timers, periodic watermarks and the record writers' buffer timeouts bound
how long the loop may wait.
"""

from __future__ import annotations

import pickle
import selectors
import struct
import time
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.clock import now_ms
from flinkpy.network import channels as net
from flinkpy.protocol.messages import CheckpointBarrier
from flinkpy.task.barriers import BarrierAligner, BarrierTracker, Canceled, Snapshot
from flinkpy.task.watermarks import StatusWatermarkValve

if TYPE_CHECKING:
    from flinkpy.task.task import Task

Frame = tuple[int, bytes]
#: the selector key's data for the control connection (input channels are 0..n-1)
CONTROL = -1


class InputProcessor:
    """Reads the task's input channels until each has reached its end of partition."""

    def __init__(self, task: Task):
        self.task = task
        self.inputs: list[net.InputChannel] = task.inputs
        chain = task.chain
        #: the head's process method, cached for the hot path (a fault_raise replaces it)
        self.head: Callable[[list, list[int] | None], None] = chain.head.process
        #: a two-input head's second input (connected streams); None for one-input heads
        self.head2: Callable[[list, list[int] | None], None] | None = getattr(chain.head, "process2", None)
        #: per channel: True when it feeds the head's second input
        self._second = [t == 2 for t in task.input_types]
        if any(self._second) and self.head2 is None:
            raise TypeError(f"{task.describe} has a second input, but its head operator has one")
        self._head_watermark = chain.head.process_watermark
        self._head_status = chain.head.process_watermark_status
        n = len(self.inputs)
        self.valve = StatusWatermarkValve(n)
        self._idle_out = False
        exactly_once = task.descriptor.config.checkpointing_mode == "EXACTLY_ONCE"
        self.aligner: BarrierAligner | BarrierTracker = BarrierAligner(n) if exactly_once else BarrierTracker(n)
        self.held: list[list[Frame]] = [[] for _ in self.inputs]
        #: channels whose socket reached EOF with their END_OF_PARTITION still held
        self._drained: set[int] = set()
        #: the barriers seen, by checkpoint id (a savepoint's carries its directory)
        self._barriers: dict[int, CheckpointBarrier] = {}
        self._selector = selectors.DefaultSelector()
        self._open_channels = n
        self.records_in = 0
        self.alignment_bytes = 0
        self.idle_s = 0.0
        #: when the ongoing wait for input began (0.0: not waiting); the metrics reporter reads it
        self.idle_since = 0.0
        #: an upstream task stopped with a savepoint without draining
        self.stopped_without_drain = False
        #: channels whose producer ended its data (END_OF_DATA): the task ends its own once
        #: every channel has (final-checkpoint mode)
        self._ended: set[int] = set()
        #: the timer services whose processing-time timers the loop fires (none after the end
        #: of data: what they would emit no final checkpoint would cover)
        self._timers: list[Any] = []

    def run(self) -> None:
        """Process every input channel to its end; control messages are handled in between."""
        sel = self._selector
        control, timeout_s, wm_interval, writers, timers, emitters, debloat = self._start_loop()
        monotonic = time.monotonic
        next_wm = monotonic() + wm_interval
        while self._open_channels:
            if control.ctrl.buffered:
                control.handle_one()
                continue
            timers = self._timers
            timeout, next_timer = wait_timeout(timeout_s, writers, timers, emitters, next_wm)
            for ch in self.inputs:
                if ch.owed:
                    ch.announce_credit()  # before waiting: the producers get all they are owed
            waited = self.idle_since = monotonic()
            events = sel.select(timeout)
            self.idle_since = 0.0
            self.idle_s += monotonic() - waited
            if next_timer is not None:
                for ts in timers:
                    ts.fire_processing_timers()
            if emitters and monotonic() >= next_wm:
                for e in emitters:
                    e.emit_periodic_watermark()
                next_wm = monotonic() + wm_interval
            for key, _ in events:
                if type(key.data) is not int:
                    key.data.drain()  # an async wait operator's requests finished
                elif key.data == CONTROL:
                    control.handle_one()
                else:
                    self._read_channel(key.data)
            if writers:
                now = monotonic()
                for w in writers:
                    w.flush_if_due(now)
            if debloat is not None:
                debloat.tick(monotonic(), self.idle_s)
        sel.close()

    def register_async(self, sel: selectors.BaseSelector) -> None:
        """Wake up when an async wait operator of the chain has finished requests (the selector
        key's data is the operator itself; channels and control have ints)."""
        for op in self.task.chain.async_operators:
            sel.register(op.wakeup_fd, selectors.EVENT_READ, op)

    def _start_loop(self) -> tuple[Any, float, float, list[Any], list[Any], list[Any], Any]:
        """What every input loop sets up: its selector watches the input channels, the control
        connection and the chain's async wait operators; returns (control, buffer timeout in s, periodic watermark interval in s,
        record writers, timer services, watermark emitters, buffer debloater or None)."""
        for i, ch in enumerate(self.inputs):
            self._selector.register(ch.sock, selectors.EVENT_READ, i)
        self._selector.register(self.task.ctrl.sock, selectors.EVENT_READ, CONTROL)
        self.register_async(self._selector)
        config, chain = self.task.descriptor.config, self.task.chain
        self._timers = chain.timer_services
        return (self.task.control, config.buffer_timeout_ms / 1000.0, config.auto_watermark_ms / 1000.0,
                list(self.task.writers.values()), chain.timer_services, chain.watermark_emitters, self.task.debloat)

    def replay(self, inputs: dict[tuple[int, int], list[Frame]]) -> None:
        """Process the input buffers an unaligned checkpoint stored, before reading any socket
        (a restore into an aligned job: they carry no credit)."""
        for i, ch in enumerate(self.inputs):
            for kind, data in inputs.get((ch.edge_id, ch.producer), ()):
                batch, ts = (pickle.loads(data), None) if kind == net.DATA else pickle.loads(data)
                self.records_in += len(batch)
                (self.head2 if self._second[i] else self.head)(batch, ts)  # type: ignore[misc]

    def _read_channel(self, i: int) -> None:
        """Read what channel ``i`` has; process its frames, or hold them behind a barrier."""
        ch = self.inputs[i]
        if ch.finished or i in self._drained:
            return  # closed by a held END_OF_PARTITION released earlier in this round
        held = self.held[i]
        try:
            frames = ch.reader.feed()
        except OSError as e:
            raise net.ChannelBroken(f"{ch.describe} broke ({e}): the producer failed") from e
        if frames is None:
            if any(kind == net.END_OF_PARTITION for kind, _ in held):
                # the end of the partition is already here, held behind a barrier: the
                # producer closed after sending it, as it should
                self._selector.unregister(ch.sock)
                self._drained.add(i)
                return
            raise net.ChannelBroken(f"{ch.describe} closed before the end of its partition: the producer failed")
        aligner = self.aligner
        for frame in frames:
            if held or aligner.is_blocked(i):
                held.append(frame)  # behind a barrier: wait for the alignment
            else:
                self._handle_frame(i, frame)

    def _handle_frame(self, i: int, frame: Frame) -> None:
        kind, data = frame
        ch = self.inputs[i]
        if kind == net.DATA or kind == net.DATA_TS:
            ch.credit.on_buffer_received()
            if kind == net.DATA:
                batch, timestamps = pickle.loads(data), None
            else:
                batch, timestamps = pickle.loads(data)
            self.records_in += len(batch)
            if self.aligner.aligning:
                self.alignment_bytes += len(data)
            if self._second[i]:
                self.head2(batch, timestamps)  # type: ignore[misc]
            else:
                self.head(batch, timestamps)
            ch.return_credit(len(data))
        elif kind == net.WATERMARK:
            self._after_valve(self.valve.on_watermark(i, struct.unpack(">q", data)[0]))
        elif kind == net.WATERMARK_STATUS:
            self._after_valve(self.valve.on_status(i, idle=data == b"\x01"))
        elif kind == net.BARRIER:
            self._on_barrier(i, pickle.loads(data))
        elif kind == net.END_OF_PARTITION:
            self._on_end_of_partition(i, data)
        elif kind == net.END_OF_DATA:
            self._on_end_of_data(i)
        else:
            raise net.ChannelBroken(f"unexpected frame kind {kind} on {ch.describe}")

    def _on_barrier(self, i: int, barrier: CheckpointBarrier) -> None:
        self._barriers[barrier.checkpoint_id] = barrier
        decision = self.aligner.on_barrier(i, barrier.checkpoint_id, now_ms())
        faults = self.task.faults
        if self.aligner.aligning and faults:
            faults.reach("alignment", barrier.checkpoint_id)
        self._on_decision(decision, barrier)

    def _on_end_of_partition(self, i: int, data: bytes) -> None:
        ch = self.inputs[i]
        if i not in self._drained:
            self._selector.unregister(ch.sock)
        ch.close()
        self._open_channels -= 1
        stopped = data == net.STOPPED
        if stopped:
            self.stopped_without_drain = True
        self._after_valve(self.valve.on_end_of_partition(i, advance=not stopped))
        self._on_decision(self.aligner.on_end_of_partition(i, now_ms()), None)

    def _on_end_of_data(self, i: int) -> None:
        """Channel ``i``'s producer ended its data; when every channel's has, so does this task
        (its operators end their input, its consumers get END_OF_DATA), and it waits, still
        reading barriers, for the final checkpoint and the ends of partition."""
        self._ended.add(i)
        if not self.task.ended_data and all(j in self._ended or ch.finished for j, ch in enumerate(self.inputs)):
            self._timers = []
            self.task.end_of_data()

    def _after_valve(self, advanced: int | None) -> None:
        """The task's event time advanced, or its inputs went idle / active."""
        if advanced is not None:
            self._head_watermark(advanced)
        if self.valve.all_idle != self._idle_out:
            self._idle_out = self.valve.all_idle
            self._head_status(self._idle_out)

    def _on_decision(self, decision: Snapshot | Canceled | None, barrier: CheckpointBarrier | None) -> None:
        if decision is None:
            return
        checkpointer = self.task.checkpointer
        describe = self.task.describe
        if isinstance(decision, Canceled):
            checkpointer.decline(decision.checkpoint_id, f"a newer checkpoint's barrier reached {describe} during its alignment")
            self._release_held()
            return
        if decision.canceled is not None:
            checkpointer.decline(decision.canceled, f"a newer checkpoint's barrier reached {describe} during its alignment")
        b = self._barriers.pop(decision.checkpoint_id, None) or barrier or CheckpointBarrier(decision.checkpoint_id, now_ms())
        self.task.checkpoint(b, alignment_ms=decision.alignment_ms, alignment_bytes=self.alignment_bytes)
        self.alignment_bytes = 0
        self._release_held()

    def abort_alignment(self, checkpoint_id: int) -> None:
        """The JobManager aborted ``checkpoint_id``: stop aligning for it, release what was held."""
        if self.aligner.abort(checkpoint_id):
            self._release_held()

    def _release_held(self) -> None:
        """Process, in order, the frames held back behind barriers of channels now unblocked."""
        progress = True
        while progress:
            progress = False
            for i, held in enumerate(self.held):
                while held and not self.aligner.is_blocked(i):
                    self._handle_frame(i, held.pop(0))
                    progress = True


def wait_timeout(timeout_s: float, writers: list[Any], timers: list[Any], emitters: list[Any], next_wm: float) -> tuple[float | None, int | None]:
    """How long an input loop may wait for input (None: until some arrives): until the oldest
    unflushed buffer is due, the next processing-time timer fires, or the next periodic
    watermark is due; and the time of that next timer (None: none is registered)."""
    timeout = timeout_s if any(w.oldest is not None for w in writers) else None
    next_timer = min((t for t in (ts.next_processing_time() for ts in timers) if t is not None), default=None)
    if next_timer is not None:
        until = max(0.0, next_timer / 1000.0 - time.time())
        timeout = until if timeout is None else min(timeout, until)
    if emitters:
        until = max(0.0, next_wm - time.monotonic())
        timeout = until if timeout is None else min(timeout, until)
    return timeout, next_timer
