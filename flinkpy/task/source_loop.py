"""The source loop of a source task: poll the reader, run the chain, take checkpoints between polls.

A checkpoint trigger is taken between two polls, so the reader's position at that moment is
exactly "everything before the barrier": its snapshot is the source's offsets. A
stop-with-savepoint holds the loop until the savepoint completed (the job stops) or failed
(the job goes on). An unbounded source with nothing to read waits briefly on the control
connection instead of spinning, and goes idle (for watermarks) after its strategy's timeout.
"""

from __future__ import annotations

import select
import time
from typing import TYPE_CHECKING, Any

from flinkpy.connectors.base import ReaderContext, StampedBatch
from flinkpy.task.watermarks import MAX_WATERMARK

if TYPE_CHECKING:
    from flinkpy.task.task import Task

#: the most records asked of the reader per poll
SOURCE_BATCH = 1024
#: the time one poll's records should take through the chain: a checkpoint trigger is taken only
#: between polls, so a slow operator chained to the source (50 ms a record) would otherwise hold
#: a trigger for 1,024 of its records (51 s); the poll size follows the chain's measured speed
BATCH_TIME_S = 0.05


def next_batch_size(records: int, seconds: float, *, limit: int = SOURCE_BATCH, target_s: float = BATCH_TIME_S) -> int:
    """How many records to poll next, after ``records`` took ``seconds`` through the chain:
    what fits in ``target_s`` at that speed, at least 1, at most ``limit`` and twice ``records``
    (growing back by doubling, so one fast batch does not undo a slow operator's measure).

    >>> next_batch_size(1024, 0.002), next_batch_size(1024, 51.2), next_batch_size(2, 0.1), next_batch_size(8, 0.0)
    (1024, 1, 1, 16)
    """
    if seconds <= 0:
        return min(limit, 2 * records)
    return max(1, min(limit, 2 * records, int(records * target_s / seconds)))


class SourceLoop:
    """Runs the source of a task's chain until its input ends or the job stops with a savepoint."""

    def __init__(self, task: Task):
        self.task = task
        self.records_in = 0
        #: seconds an unbounded source had nothing to read and waited for control messages
        self.idle_s = 0.0
        #: when the ongoing wait for data or control began (0.0: not waiting)
        self.idle_since = 0.0
        #: stopped with a savepoint without draining: the end of input carries no final watermark
        self.stopped_without_drain = False

    def _create_reader(self) -> Any:
        d = self.task.descriptor
        chain = self.task.chain
        return chain.source.create_reader(
            ReaderContext(
                subtask_index=d.subtask,
                parallelism=d.parallelism,
                job_id=d.job_id,
                operator_name=d.vertex_name,
                attempt=d.attempt,
                restored_state=chain.restored_source_state(),
                side_output=lambda tag, records: chain.head.side_output(tag, records, None),
                metric_group=chain.user_metrics.operator_group(chain.head.name),
            )
        )

    def run(self) -> None:
        reader = self.task.chain.source_reader = self._create_reader()
        control = self.task.control
        source_head = self.task.chain.head
        source_head.split_ids = getattr(reader, "split_ids", None)
        head = source_head.process
        writers = list(self.task.writers.values())
        monotonic = time.monotonic
        emitters = [source_head, *self.task.chain.watermark_emitters]
        wm_interval = self.task.descriptor.config.auto_watermark_ms / 1000.0
        next_wm = monotonic() + wm_interval
        strategy = getattr(source_head, "strategy", None)
        idle_after = (strategy.idle_timeout_ms / 1000.0) if strategy is not None and strategy.idle_timeout_ms else None
        last_data = monotonic()
        ctrl_sock = control.ctrl.sock
        #: async wait operators chained to the source: their finished requests are emitted
        #: between polls, and an idle source also waits on their wake-up pipes
        asyncs = self.task.chain.async_operators
        wake = [ctrl_sock, *(op.wakeup_fd for op in asyncs)]
        #: unaligned checkpoints: the output channels queue instead of blocking
        queuing = [ch for w in writers for ch in w.channels] if self.task.descriptor.config.unaligned else []
        batch_size = 1  # doubles to SOURCE_BATCH within a few polls when the chain is fast
        try:
            while True:
                if control.pending():
                    control.handle_one()
                    head = source_head.process  # a fault_raise may have wrapped the head
                    if self._take_checkpoints(reader):
                        break
                if queuing and any(ch.queue for ch in queuing):
                    self._wait_for_credit(queuing, ctrl_sock)
                    continue
                batch = reader.poll(batch_size)
                if batch is None:
                    if self.task.descriptor.config.final_checkpoint:
                        self._end_of_data(reader)
                    break
                now = monotonic()
                if type(batch) is StampedBatch and (batch or batch.watermark is not None):
                    # a legacy SourceFunction's timestamps, and the watermark it emitted after
                    # them; or a split-aware reader's records with their splits
                    if batch:
                        self.records_in += len(batch)
                        if batch.splits is not None:
                            source_head.process_splits(list(batch), batch.timestamps, batch.splits)
                            batch_size = next_batch_size(len(batch), monotonic() - now)
                        else:
                            head(list(batch), batch.timestamps)
                    if batch.watermark is not None:
                        source_head.emit_source_watermark(batch.watermark)
                    last_data = now
                elif batch:
                    self.records_in += len(batch)
                    head(batch, None)
                    last_data = now
                    batch_size = next_batch_size(len(batch), monotonic() - now)
                else:
                    if idle_after is not None and now - last_data >= idle_after:
                        source_head.mark_idle()
                    self.idle_since = now
                    select.select(wake, [], [], 0.001)  # idle unbounded source: wait for control
                    self.idle_since = 0.0
                    self.idle_s += monotonic() - now
                for op in asyncs:
                    if op.has_finished:
                        op.drain()
                if now >= next_wm and wm_interval > 0:
                    for e in emitters:
                        e.emit_periodic_watermark()
                    next_wm = now + wm_interval
                if writers:
                    for w in writers:
                        w.flush_if_due(now)
        finally:
            reader.close()

    def _end_of_data(self, reader: Any) -> None:
        """The reader's input ended: event time ends, the task ends its data, and the source
        stays until the job's final checkpoint completed (it takes that checkpoint's trigger and
        any before it here, with the reader at the end of its input) or a stop-with-savepoint
        stopped the job."""
        task = self.task
        task.chain.head.process_watermark(MAX_WATERMARK)
        task.end_of_data()
        control = task.control
        ctrl_sock = control.ctrl.sock
        queuing = [ch for w in task.writers.values() for ch in w.channels] if task.descriptor.config.unaligned else []
        while not task.final_done:
            if control.pending():
                control.handle_one()
                if self._take_checkpoints(reader):
                    return
            elif queuing and any(ch.queue for ch in queuing):
                self._wait_for_credit(queuing, ctrl_sock)
            else:
                waited = time.monotonic()
                self.idle_since = waited
                select.select([ctrl_sock], [], [], 1.0)
                self.idle_since = 0.0
                self.idle_s += time.monotonic() - waited

    def _wait_for_credit(self, channels: list[Any], ctrl_sock: Any) -> None:
        """Outputs unavailable (a buffer waits for credit): no poll until credit comes; a
        checkpoint trigger is still taken meanwhile (the queues become channel state). The wait
        is back-pressure, as a blocking send's would be."""
        waiting_on = next(ch for ch in channels if ch.queue)
        started = waiting_on.blocked_since = time.monotonic()
        readable, _, _ = select.select([ctrl_sock, *(ch.sock for ch in channels if ch.queue)], [], [], 0.1)
        waiting_on.blocked_since = 0.0
        waiting_on.backpressured_s += time.monotonic() - started
        for ch in channels:
            if ch.sock in readable:
                ch.on_readable()

    def _take_checkpoints(self, reader: Any) -> bool:
        """Take the triggered checkpoints in order; True when a stop-with-savepoint succeeded."""
        triggers = self.task.control.pending_triggers
        while triggers:
            barrier = triggers.pop(0)
            if barrier.drain:
                # drain: event time ends before the savepoint, so windows and timers fire
                self.task.chain.head.process_watermark(MAX_WATERMARK)
            # the reader's position now is exactly "everything before the barrier"
            if barrier.unaligned:
                job = self.task.checkpoint_unaligned(barrier, source_offsets=reader.snapshot_checkpoint(barrier.checkpoint_id))
                if job is not None:
                    self.task.checkpointer.submit(job)
            else:
                self.task.checkpoint(barrier, source_offsets=reader.snapshot_checkpoint(barrier.checkpoint_id))
            if barrier.stop:
                for w in self.task.writers.values():
                    for ch in w.channels:
                        while getattr(ch, "queue", None):  # the barrier waits in the queue: send it
                            ch.on_readable()
            if barrier.stop and self.task.control.await_savepoint(barrier.checkpoint_id):
                self.stopped_without_drain = not barrier.drain
                return True
        return False
