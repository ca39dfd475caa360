"""One subtask of the function under test, in this process: the engine's own parts, no sockets.

A task process builds an :class:`~flinkpy.task.chain.OperatorChain` from its vertex's payload,
restores it from the deployment descriptor's restore spec, reads frames from its input channels
(records to the head's inputs, watermarks through a :class:`StatusWatermarkValve`), fires
processing-time timers when the clock passes them, and snapshots through a
:class:`~flinkpy.task.checkpointing.TaskCheckpointer`. A :class:`LocalSubtask` does the same with
the same classes; only the clock is manual and the frames arrive by call instead of by socket.
The records reach it through the engine's :class:`~flinkpy.task.record_writer.RecordWriter`
(partitioned by key group, pickled as on the wire) over a :class:`LocalChannel`.
"""

from __future__ import annotations

import pickle
import queue
import struct
from typing import Any, Callable

from flinkpy.errors import FlinkpyError
from flinkpy.graph.job_graph import VertexPayload
from flinkpy.network import channels as net
from flinkpy.protocol.deployment import TaskDeploymentDescriptor
from flinkpy.protocol.messages import CheckpointAck, CheckpointDecline
from flinkpy.task import operators as ops
from flinkpy.task.chain import OperatorChain
from flinkpy.task.checkpointing import TaskCheckpointer
from flinkpy.task.watermarks import StatusWatermarkValve

#: how long a snapshot's upload may take before the harness gives up on it (seconds)
UPLOAD_TIMEOUT_S = 60.0


class LocalChannel:
    """The end of a RecordWriter's channel that hands each frame to a subtask at once."""

    def __init__(self, edge_id: int, consumer: int, deliver: Callable[[int, bytes], None]):
        self.edge_id = edge_id
        self.consumer = consumer
        self._deliver = deliver

    def check_size(self, payload: bytes, records: int) -> None:
        """Every size goes: no frame limit between parts of one process."""

    def send_data(self, payload: bytes, kind: int = net.DATA) -> None:
        self._deliver(kind, payload)

    def send_event(self, kind: int, payload: bytes = b"") -> None:
        self._deliver(kind, payload)

    def finish(self, payload: bytes = b"") -> None:
        """Nothing to close."""


class AllSideOutputs(dict):
    """An operator's side outputs: those its chain reads, and a collector for every other tag
    (in a job nothing would read them; a test wants to see them)."""

    def __init__(self, wired: dict[str, ops.Output], collector: Callable[[str], ops.Output]):
        super().__init__(wired)
        self._collector = collector

    def get(self, tag_id: str, default: Any = None) -> ops.Output:  # type: ignore[override]
        out = super().get(tag_id)
        return out if out is not None else self._collector(tag_id)


class LocalSubtask:
    """A subtask's chain, opened (restored when the descriptor says so), with its clock."""

    def __init__(
        self,
        payload: VertexPayload,
        descriptor: TaskDeploymentDescriptor,
        *,
        output: ops.Output,
        side_output: Callable[[str], ops.Output],
        backend_factory: Callable[[], Any],
        clock: Callable[[], int],
        inputs: int,
    ):
        self.descriptor = descriptor
        self.tail_edge = -1
        self.chain = OperatorChain(payload, {self.tail_edge: output}, descriptor=descriptor, backend_factory=backend_factory, clock=clock)
        for op in self.chain.operators:
            op.side_outputs = AllSideOutputs(op.side_outputs, side_output)
        self._acks: queue.Queue[Any] = queue.Queue()
        self.checkpointer = TaskCheckpointer(descriptor, self.chain, self._acks.put)
        self.valve = StatusWatermarkValve(inputs)
        self.chain.open()
        head = self.chain.head
        self._heads = {1: head.process, 2: getattr(head, "process2", None)}

    def frame(self, channel: int, type_number: int, kind: int, payload: bytes) -> None:
        """A frame from input channel ``channel`` (the test's input) for the head's input
        ``type_number``, handled as the task's input processor handles it."""
        if kind in (net.DATA, net.DATA_TS):
            batch, timestamps = (pickle.loads(payload), None) if kind == net.DATA else pickle.loads(payload)
            self._heads[type_number](batch, timestamps)
        elif kind == net.WATERMARK:
            advanced = self.valve.on_watermark(channel, struct.unpack(">q", payload)[0])
            if advanced is not None:
                self.chain.head.process_watermark(advanced)

    def fire_processing_timers(self) -> None:
        for timers in self.chain.timer_services:
            timers.fire_processing_timers()

    def snapshot(self, checkpoint_id: int, timestamp: int) -> list[dict[str, Any]]:
        """Take checkpoint ``checkpoint_id`` as the task does at a barrier (synchronous part,
        then the upload on the checkpointer's thread); returns the acknowledged state handles."""
        job = self.checkpointer.take(checkpoint_id, timestamp)
        if job is not None:
            self.checkpointer.submit(job)
        try:
            reply = self._acks.get(timeout=UPLOAD_TIMEOUT_S)
        except queue.Empty:
            raise FlinkpyError(f"snapshot {checkpoint_id} of {self.descriptor.describe()} was not written within {UPLOAD_TIMEOUT_S:.0f}s",
                               remedy="check that the checkpoint directory is reachable and writable") from None
        if isinstance(reply, CheckpointDecline):
            raise FlinkpyError(f"snapshot {checkpoint_id} of {self.descriptor.describe()} failed: {reply.reason}",
                               remedy=reply.details.strip().splitlines()[-1] if reply.details.strip() else None)
        assert isinstance(reply, CheckpointAck)
        return list(reply.state)

    def notify_complete(self, checkpoint_id: int) -> None:
        self.checkpointer.notify_complete(checkpoint_id)

    def close(self) -> None:
        self.checkpointer.close()
        self.chain.close()
        if self.chain.backend is not None:
            self.chain.backend.close()
