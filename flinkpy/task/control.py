"""The task's control handler: the messages the JobManager sends a running task.

Checkpoint triggers are queued (a source takes them between two polls of its reader, so the
reader's position is exactly "everything before the barrier"); completion and abort
notifications reach the checkpointer at once; injected faults are armed. The TaskManager
closing the control connection ends the task at once: nobody is left to report to.
"""

from __future__ import annotations

import os
import select
import time
from typing import TYPE_CHECKING

from flinkpy.protocol import HandlerTable
from flinkpy.protocol.messages import (
    CheckpointBarrier,
    FinalCommitAnswer,
    FinalCommitRequest,
    InjectDecline,
    InjectNetworkFault,
    InjectRaise,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    StorageOutage,
    TriggerCheckpoint,
)
from flinkpy.task.fault_injection import arm_raise, network_fault

if TYPE_CHECKING:
    from flinkpy.task.task import Task

#: exit code of a task whose TaskManager closed the control connection
EXIT_ORPHANED = 3


class FencedAttemptError(RuntimeError):
    """A stale attempt of a task (a newer one runs) tried to commit at the end of its input."""


class ControlHandler:
    """Receives and handles one control message at a time, through a table by message type."""

    def __init__(self, task: Task):
        self.task = task
        self.ctrl = task.ctrl
        #: barriers of triggered checkpoints, for the source loop to take in order
        self.pending_triggers: list[CheckpointBarrier] = []
        #: checkpoint id -> completed (True) or aborted (False), as notified
        self.notified: dict[int, bool] = {}
        #: the JobManager's answer to this task's final-commit request, once it came
        self.final_commit: FinalCommitAnswer | None = None
        self.table = HandlerTable(
            f"task {task.describe}",
            {
                TriggerCheckpoint: self._on_trigger,
                NotifyCheckpointComplete: self._on_complete,
                NotifyCheckpointAborted: self._on_aborted,
                InjectRaise: self._on_raise,
                InjectDecline: self._on_decline,
                StorageOutage: self._on_storage_outage,
                InjectNetworkFault: self._on_network_fault,
                FinalCommitAnswer: self._on_final_commit,
            },
        )

    def pending(self) -> bool:
        """A control message is waiting (buffered, or readable on the socket)."""
        if self.ctrl.buffered:
            return True
        readable, _, _ = select.select([self.ctrl.sock], [], [], 0)
        return bool(readable)

    def handle_one(self) -> None:
        """Handle one control message; the TaskManager closing the connection ends the task."""
        msg = self.ctrl.recv()
        if msg is None:
            os._exit(EXIT_ORPHANED)
        self.table(msg)

    def await_savepoint(self, checkpoint_id: int) -> bool:
        """Stop-with-savepoint: hold the source until the savepoint completed (True) or failed."""
        self.notified.pop(checkpoint_id, None)
        while checkpoint_id not in self.notified:
            self.handle_one()
            self.pending_triggers.clear()  # no further checkpoints of a stopping job
        return self.notified.pop(checkpoint_id)

    def await_final_commit(self) -> None:
        """The end of input of a sink: ask the JobManager whether this attempt may commit what
        no checkpoint covers, and wait for the answer (handling other messages meanwhile). A task
        cut off from the JobManager waits until its TaskManager ends it; a stale attempt (a newer
        one runs) gets ``FencedAttemptError`` and commits nothing."""
        while True:
            self.final_commit = None
            self.ctrl.send(FinalCommitRequest())
            while self.final_commit is None:
                self.handle_one()
                self.pending_triggers.clear()  # a finishing task takes no further checkpoint
            if self.final_commit.granted:
                return
            if not self.final_commit.retry:
                raise FencedAttemptError(f"{self.task.describe} may not commit at the end of its input: {self.final_commit.reason}")
            time.sleep(0.1)  # the job restarts elsewhere: this task is cancelled, or asks again

    # -- handlers ----------------------------------------------------------------------------

    def _on_final_commit(self, msg: FinalCommitAnswer) -> None:
        self.final_commit = msg

    def _on_trigger(self, msg: TriggerCheckpoint) -> None:
        self.pending_triggers.append(msg.barrier)

    def _on_complete(self, msg: NotifyCheckpointComplete) -> None:
        self.notified[msg.checkpoint_id] = True
        self.task.faults.reach("before-notify", msg.checkpoint_id)
        self.task.checkpointer.notify_complete(msg.checkpoint_id)
        self.task.faults.reach("after-complete", msg.checkpoint_id)
        if msg.final:
            self.task.final_done = True

    def _on_aborted(self, msg: NotifyCheckpointAborted) -> None:
        self.notified[msg.checkpoint_id] = False
        processor = self.task.input_processor
        if processor is not None:
            processor.abort_alignment(msg.checkpoint_id)
        self.task.checkpointer.notify_aborted(msg.checkpoint_id)

    def _on_raise(self, msg: InjectRaise) -> None:
        chain = self.task.chain
        target, process = arm_raise(chain.operators, chain.source is not None, msg.operator, msg.after, self.task.describe)
        processor = self.task.input_processor
        if target is chain.head and processor is not None:
            processor.head = process  # the input loop calls the head through this cached method

    def _on_decline(self, msg: InjectDecline) -> None:
        self.task.checkpointer.decline_next += msg.count

    def _on_storage_outage(self, msg: StorageOutage) -> None:
        from flinkpy.checkpoint.storage import set_outage

        set_outage(msg.until)

    def _on_network_fault(self, msg: InjectNetworkFault) -> None:
        channels = [ch for w in self.task.writers.values() for ch in w.channels]
        network_fault(channels, msg.drop, msg.delay_ms, msg.seconds)
