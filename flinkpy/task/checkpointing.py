"""A task's part in a checkpoint: the synchronous snapshot, the asynchronous upload, the ack.

When barrier N has been aligned (or triggered, at a source), the task thread calls
:meth:`TaskCheckpointer.snapshot`. Its synchronous part is short and does not grow with the
state: the source's offsets (small), ``snapshot_state`` of CheckpointedFunctions and sinks
(their own small state: pending files, transactions), and the keyed state backend's
copy-on-write freeze (O(key groups)). Serialization and the writes to checkpoint storage run on
the uploader thread while the task goes on processing records; when every file is written the
acknowledgement — with the state handles (paths, sizes, checksums, key-group ranges) — goes to
the JobManager. A failure anywhere declines the checkpoint instead.
"""

from __future__ import annotations

import os
import pickle
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.common.functions import CheckpointedFunction, CheckpointListener, FunctionSnapshotContext
from flinkpy.connectors.two_phase_commit import pending_summary
from flinkpy.protocol import Message
from flinkpy.protocol.deployment import TaskDeploymentDescriptor
from flinkpy.protocol.messages import CheckpointAck, CheckpointDecline
from flinkpy.state.operator import kind_of as operator_state_kind
from flinkpy.task import operators as ops

if TYPE_CHECKING:
    from flinkpy.checkpoint.storage import CheckpointStorage
    from flinkpy.task.chain import OperatorChain


@dataclass
class _Upload:
    checkpoint_id: int
    timestamp: int
    parts: list[dict[str, Any]]
    metrics: dict[str, Any]
    #: a savepoint's own directory (None: the job's checkpoint directory)
    directory: str | None = None
    started: float = field(default_factory=time.monotonic)
    #: an unaligned checkpoint's in-flight buffers: {"inputs": {(edge, producer): [frame]},
    #: "outputs": {(edge, consumer): [frame]}} (None: an aligned checkpoint)
    channel_state: dict[str, Any] | None = None


class TaskCheckpointer:
    def __init__(self, descriptor: TaskDeploymentDescriptor, chain: OperatorChain, send: Callable[[Message], None]):
        self.descriptor = descriptor
        self.chain = chain
        self.send = send
        self.job_id: str = descriptor.job_id
        self.subtask: int = descriptor.subtask
        self._storage: CheckpointStorage | None = None
        self._queue: "queue.Queue[_Upload | None]" = queue.Queue()
        self._thread = threading.Thread(target=self._upload_loop, name="checkpoint-uploader", daemon=True)
        self._thread.start()
        self.last_sync_ms = 0.0
        #: `flinkpy fault fail-checkpoint`: this many next snapshots decline instead
        self.decline_next = 0
        from flinkpy.task.fault_points import FaultPoints

        self.faults = FaultPoints(descriptor)
        #: incremental snapshots: the shared files each recent checkpoint of this task uploaded
        #: or referenced, by checkpoint id (what a later checkpoint may build on)
        self.incremental = descriptor.config.incremental
        self._uploads: dict[int, dict[str, dict[str, Any]]] = {}

    @property
    def storage(self) -> CheckpointStorage:
        if self._storage is None:
            from flinkpy.checkpoint.storage import CheckpointStorage

            self._storage = CheckpointStorage(self.descriptor.config.checkpoint_dir)
        return self._storage

    # -- the synchronous part (task thread) --------------------------------------------------

    def snapshot(self, checkpoint_id: int, timestamp: int, *, source_offsets: Any = None, alignment_ms: float = 0.0, alignment_bytes: int = 0, directory: str | None = None, base: int | None = None) -> None:
        job = self.take(checkpoint_id, timestamp, source_offsets=source_offsets, alignment_ms=alignment_ms,
                        alignment_bytes=alignment_bytes, directory=directory, base=base)
        if job is not None:
            self.submit(job)

    def take(self, checkpoint_id: int, timestamp: int, *, source_offsets: Any = None, alignment_ms: float = 0.0, alignment_bytes: int = 0, directory: str | None = None, base: int | None = None, channel_state: dict[str, Any] | None = None) -> _Upload | None:
        """The synchronous part; None when the checkpoint was declined. An unaligned checkpoint
        submits the result once its input channel state is complete (:meth:`submit`)."""
        if self.decline_next > 0:
            self.decline_next -= 1
            self.decline(checkpoint_id, f"injected fault (flinkpy fault fail-checkpoint): {self.descriptor.vertex_name} ({self.subtask + 1}) declined checkpoint {checkpoint_id}")
            return None
        started = time.perf_counter()
        try:
            parts = self._take(checkpoint_id, timestamp, source_offsets, None if directory else base, incremental=self.incremental and not directory)
        except Exception as e:  # noqa: BLE001 - a failed snapshot declines, it does not crash the task
            self.decline(checkpoint_id, f"snapshot of {self.descriptor.vertex_name} failed: {type(e).__name__}: {e}", traceback.format_exc())
            return None
        sync_ms = (time.perf_counter() - started) * 1000
        self.last_sync_ms = sync_ms
        metrics = {"sync_ms": round(sync_ms, 3), "alignment_ms": alignment_ms, "alignment_bytes": alignment_bytes}
        return _Upload(checkpoint_id, timestamp, parts, metrics, directory, channel_state=channel_state)

    def submit(self, job: _Upload) -> None:
        """Hand the snapshot to the uploader thread (it acknowledges when the files are written)."""
        self._queue.put(job)

    def _take(self, checkpoint_id: int, timestamp: int, source_offsets: Any, base: int | None = None, *, incremental: bool = False) -> list[dict[str, Any]]:
        ctx = FunctionSnapshotContext(checkpoint_id, timestamp)
        parts: list[dict[str, Any]] = []
        keyed_owner = None
        for spec, op in zip(self.chain.payload.operators, self.chain.operators):
            part: dict[str, Any] = {"operator_id": spec.operator_id, "keyed": None, "operator": None, "source_offsets": None}
            if spec.kind == "source":
                part["source_offsets"] = source_offsets
            if self.chain.is_keyed(op) and keyed_owner is None:
                keyed_owner = part
            operator_state: dict[str, Any] = {}
            fn = op.fn
            if isinstance(fn, CheckpointedFunction):
                fn.snapshot_state(ctx)
            backend = self.chain.operator_backends.get(spec.node_id)
            if backend is not None and backend.states:
                operator_state["functions"] = backend.snapshot()
            if op in self.chain.async_operators:
                inputs = op.snapshot_inputs()
                if inputs:
                    operator_state["async"] = inputs
            if isinstance(op, ops.SinkOperator):
                if self.faults:
                    self.faults.reach("sink-before-prepare", checkpoint_id)
                op.writer.flush(False)
                sink_state = op.writer.snapshot_state(checkpoint_id)
                if self.faults:
                    self.faults.reach("sink-after-prepare", checkpoint_id)
                if sink_state is not None:
                    operator_state["sink"] = sink_state
            if operator_state:
                part["operator"] = operator_state
            parts.append(part)
        if keyed_owner is not None and self.chain.backend is not None:
            backend = self.chain.backend
            if incremental and hasattr(backend, "native_checkpoint"):
                keyed_owner["keyed"] = self._native_snapshot(backend, checkpoint_id, base)
            else:
                keyed_owner["keyed"] = backend.snapshot_sync()
        return parts

    def _native_snapshot(self, backend: Any, checkpoint_id: int, base: int | None) -> Any:
        """The synchronous part of an incremental snapshot: a native checkpoint of the store
        (hard links, flat in the state size) and the shared files of ``base`` to build on."""
        import tempfile

        from flinkpy.state.incremental import IncrementalSnapshot, shared_by_file

        restored = getattr(self.chain, "restored_native", None)
        if restored is not None and base is not None and restored[0] == base and base not in self._uploads:
            self._uploads[base] = shared_by_file(restored[1])
        for old in [c for c in self._uploads if base is None or c < base]:
            del self._uploads[old]  # never built on again: bases only move forward
        parent = getattr(backend, "working_root", None) or tempfile.gettempdir()
        local = tempfile.mkdtemp(prefix=f"chk-{checkpoint_id}-", dir=parent)
        os.rmdir(local)  # the store creates the checkpoint directory itself
        backend.native_checkpoint(local)
        summary = backend.state_summary() if hasattr(backend, "state_summary") else {}
        return IncrementalSnapshot(local, backend.key_group_range, summary, self._uploads.get(base, {}) if base is not None else {})

    # -- the asynchronous part (uploader thread) ---------------------------------------------

    def _upload_loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                state = self._upload(job)
            except Exception as e:  # noqa: BLE001
                self.decline(job.checkpoint_id, f"upload of {self.descriptor.vertex_name} ({self.subtask + 1}) failed: {type(e).__name__}: {e}", traceback.format_exc())
                continue
            job.metrics["async_ms"] = round((time.monotonic() - job.started) * 1000, 3)
            # Flink's figures: what this checkpoint uploaded, and the full size a restore reads
            job.metrics["checkpointed_size"] = sum(_sizes(p, job.checkpoint_id)[0] for p in state)
            job.metrics["state_size"] = sum(_sizes(p, job.checkpoint_id)[1] for p in state)
            self.send(CheckpointAck(checkpoint_id=job.checkpoint_id, state=state, metrics=job.metrics))

    def _upload(self, job: _Upload) -> list[dict[str, Any]]:
        from flinkpy.state.incremental import IncrementalSnapshot, shared_by_file

        if self.faults:
            self.faults.reach("upload", job.checkpoint_id)
        out = []
        for part in job.parts:
            entry: dict[str, Any] = {
                "operator_id": part["operator_id"],
                "keyed_state": None,
                "operator_state": None,
                "source_offsets": part["source_offsets"],
            }
            frozen = part["keyed"]
            if isinstance(frozen, IncrementalSnapshot):
                name = f"{part['operator_id']}-{self.subtask}-keyed.rocksdb"
                handle = frozen.upload(
                    job.checkpoint_id,
                    lambda data: self._write(job, name, data),
                    lambda path, file: self.storage.write_shared(self.job_id, path, file),
                )
                self._uploads[job.checkpoint_id] = shared_by_file(handle)
                r = frozen.key_group_range
                handle.update({"key_groups": [r.start, r.stop - 1], "states": frozen.summary()})
                entry["keyed_state"] = handle
            elif frozen is not None and not frozen.empty:
                name = f"{part['operator_id']}-{self.subtask}-keyed"
                handle, _ = self.storage.write_state_stream(self._directory(job), name, frozen.write)  # streamed: state may exceed memory
                r = frozen.key_group_range
                handle.update({"key_groups": [r.start, r.stop - 1], "states": frozen.summary()})
                entry["keyed_state"] = handle
            if part["operator"] is not None:
                name = f"{part['operator_id']}-{self.subtask}-operator"
                handle = self._write(job, name, pickle.dumps(part["operator"], protocol=5))
                handle["states"] = _operator_summary(part["operator"])
                entry["operator_state"] = handle
            out.append(entry)
        if job.channel_state is not None and out:
            out[0]["channel_state"] = self._channel_state(job)
        return out

    def _channel_state(self, job: _Upload) -> dict[str, Any]:
        """Write an unaligned checkpoint's in-flight buffers beside the head operator's state;
        the handle says how many bytes were in flight on the inputs and on the outputs."""
        state = job.channel_state or {}
        in_bytes = sum(len(p) for frames in state.get("inputs", {}).values() for _, p in frames)
        out_bytes = sum(len(p) for frames in state.get("outputs", {}).values() for _, p in frames)
        job.metrics.update(unaligned=1, in_flight_input_bytes=in_bytes, in_flight_output_bytes=out_bytes)
        name = f"{job.parts[0]['operator_id']}-{self.subtask}-channels"
        handle = self._write(job, name, pickle.dumps(state, protocol=5))
        handle.update(input_bytes=in_bytes, output_bytes=out_bytes)
        return handle

    def _directory(self, job: _Upload) -> str:
        """Where the upload's files go: a savepoint's own directory, or the checkpoint's."""
        return job.directory or self.storage.checkpoint_dir(self.job_id, job.checkpoint_id)

    def _write(self, job: _Upload, name: str, data: bytes) -> dict[str, Any]:
        return self.storage.write_state_in(self._directory(job), name, data)

    # -- notifications -----------------------------------------------------------------------

    def decline(self, checkpoint_id: int, reason: str, details: str = "") -> None:
        self.send(CheckpointDecline(checkpoint_id=checkpoint_id, reason=reason, details=details))

    def notify_complete(self, checkpoint_id: int) -> None:
        reader = self.chain.source_reader
        if reader is not None:
            reader.notify_checkpoint_complete(checkpoint_id)
        for op in self.chain.operators:
            if isinstance(op, ops.SinkOperator):
                if self.faults:
                    self.faults.reach("sink-before-commit", checkpoint_id)
                op.writer.notify_checkpoint_complete(checkpoint_id)
            if isinstance(op.fn, CheckpointListener):
                op.fn.notify_checkpoint_complete(checkpoint_id)

    def notify_aborted(self, checkpoint_id: int) -> None:
        reader = self.chain.source_reader
        if reader is not None:
            reader.notify_checkpoint_aborted(checkpoint_id)
        for op in self.chain.operators:
            if isinstance(op.fn, CheckpointListener):
                op.fn.notify_checkpoint_aborted(checkpoint_id)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)


def _sizes(entry: dict[str, Any], checkpoint_id: int) -> tuple[int, int]:
    """(bytes this checkpoint uploaded, bytes a restore reads) of one operator's state."""
    keyed, op_state = entry["keyed_state"] or {}, entry["operator_state"] or {}
    # an unaligned checkpoint's in-flight buffers are uploaded and read back like state
    own = keyed.get("size", 0) + op_state.get("size", 0) + (entry.get("channel_state") or {}).get("size", 0)
    shared = keyed.get("shared") or ()
    new = sum(f["size"] for f in shared if f["checkpoint_id"] == checkpoint_id)
    return own + new, own + sum(f["size"] for f in shared)


def _operator_summary(state: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, s in state.get("functions", {}).get("states", {}).items():
        summary[name] = {"kind": operator_state_kind(s["mode"]), "entries": len(s["items"])}
    if "sink" in state:
        sink = state["sink"]
        # a two-phase-commit sink's state is its pending transactions: say which
        summary["sink"] = pending_summary(sink) or {"kind": "sink", "entries": len(sink) if hasattr(sink, "__len__") else 1}
    return summary
