"""Task: one execution attempt of one parallel subtask of an operator chain, in its own process.

The task wires its parts together and walks them through its life (see
:mod:`flinkpy.task.process`): channels to its producers and consumers, the operator chain, the
checkpointer, the control handler, and then either the source loop or the input processor.
What happens inside each part is that part's business; the task keeps what they share: the
deployment descriptor, the record writers, forwarding a barrier and taking the snapshot, and
the report at the end (metrics, or the failure with the user's traceback).
"""

from __future__ import annotations

import os
import pickle
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

from flinkpy.network import channels as net
from flinkpy.network.connection import Connection, listen_from
from flinkpy.network.tls import client_context, server_context
from flinkpy.protocol.deployment import TaskDeploymentDescriptor
from flinkpy.protocol.messages import CheckpointBarrier, ConnectTask, TaskEndOfData, TaskFailed, TaskFinished, TaskListening, TaskRunning
from flinkpy.task.control import EXIT_ORPHANED, ControlHandler
from flinkpy.task.fault_points import FaultPoints
from flinkpy.task.input_processor import InputProcessor
from flinkpy.task.metrics_reporter import TaskMetricsReporter
from flinkpy.task.operators import SinkOperator
from flinkpy.task.record_writer import RecordWriter
from flinkpy.task.source_loop import SourceLoop
from flinkpy.task.watermarks import MAX_WATERMARK

if TYPE_CHECKING:
    from flinkpy.graph.job_graph import VertexPayload
    from flinkpy.state.backend import KeyedStateBackendBase
    from flinkpy.task.chain import OperatorChain
    from flinkpy.task.checkpointing import TaskCheckpointer


class Task:
    """One task process's subtask; ``run()`` is its whole life."""

    #: built in ``run()``, once the payload is loaded and the channels are connected
    chain: OperatorChain
    checkpointer: TaskCheckpointer

    def __init__(self, descriptor: TaskDeploymentDescriptor, ctrl: Connection):
        self.descriptor = descriptor
        self.ctrl = ctrl
        self.describe = descriptor.describe()
        self.inputs: list[net.InputChannel] = []
        #: per input channel: the input of the head operator it feeds (1, or 2 for a two-input head)
        self.input_types: list[int] = []
        self.writers: dict[int, RecordWriter] = {}
        self.acceptor: net.ChannelAcceptor | None = None
        self.faults = FaultPoints(descriptor)
        if descriptor.storage_outage_until:  # deployed during an injected storage outage
            from flinkpy.checkpoint.storage import set_outage

            set_outage(descriptor.storage_outage_until)
        self.control = ControlHandler(self)
        #: the loop that runs the chain: a source's, or the input processor of any other task
        self.loop: SourceLoop | InputProcessor | None = None
        self.input_processor: InputProcessor | None = None
        self.started = time.monotonic()
        #: samples and reports the task's metrics while it runs (None: metrics.enabled false)
        self.reporter: TaskMetricsReporter | None = None
        #: buffer debloating of the input channels (None: off, or a source without inputs)
        self.debloat: net.InputGateDebloat | None = None
        #: the task's input ended and its operators ended theirs (final-checkpoint mode)
        self.ended_data = False
        #: the job's final checkpoint completed (the JobManager said so): the task may finish
        self.final_done = False
        #: the stop-with-savepoint this task took part in (its completion also ends the wait)
        self.stop_savepoint: int | None = None

    # -- setup -------------------------------------------------------------------------------

    def _load_payload(self) -> VertexPayload:
        # the job's shipped files (the TaskManager unpacked them), ahead of anything installed
        for p in reversed(self.descriptor.python_path):
            if p not in sys.path:
                sys.path.insert(0, p)
        import cloudpickle  # noqa: F401  (registers reducers the payload may need)

        try:
            payload: VertexPayload = pickle.loads(self.descriptor.payload)
        except ModuleNotFoundError as e:
            if str(e) != f"No module named {e.name!r}":
                raise  # it says what to do already (an optional driver's extra, say)
            raise ModuleNotFoundError(
                f"{e}: the job's functions import it, but it was not shipped with the job; add it with "
                "env.add_python_file(...) or 'flinkpy run --pyFiles PATH', or install it where the TaskManagers run",
                name=e.name,
            ) from e
        return payload

    def _listen(self) -> None:
        d = self.descriptor
        expected = {(o.edge_id, c) for o in d.outputs for c in o.consumers}
        port = None
        if expected:
            listener = listen_from(d.bind_host or d.host, d.data_port)
            port = listener.getsockname()[1]
            tls = server_context(d.tls, "security.ssl.internal") if d.tls is not None else None
            self.acceptor = net.ChannelAcceptor(listener, d.secret, d.job_id, d.subtask, expected, tls)
        self.ctrl.send(TaskListening(host=d.host, port=port, pid=os.getpid()))

    def _connect_inputs(self, peers: dict[str, tuple[str, int]]) -> None:
        d = self.descriptor
        tls = client_context(d.tls, "security.ssl.internal") if d.tls is not None else None
        for inp in d.inputs:
            for producer in inp.producers:
                host, port = peers[f"{inp.source_vertex}:{producer}"]
                ch = net.open_input_channel(
                    host,
                    port,
                    d.secret,
                    job_id=d.job_id,
                    edge_id=inp.edge_id,
                    producer=producer,
                    consumer=d.subtask,
                    initial_credit=d.config.credit,
                    describe=f"edge {inp.edge_id} from subtask {producer} of vertex {inp.source_vertex}",
                    max_frame=d.config.max_frame_size,
                    tls=tls,
                )
                self.inputs.append(ch)
                self.input_types.append(inp.type_number)
        self._debloat()

    def _debloat(self) -> None:
        """Buffer debloating for the input channels, when the job enabled it."""
        c = self.descriptor.config
        if not c.debloat_target_ms or not self.inputs:
            return
        from flinkpy.network.debloat import BufferDebloater

        debloater = BufferDebloater(
            target_ms=c.debloat_target_ms,
            buffers=len(self.inputs) * max(1, c.credit),
            max_size=c.segment_size,
            min_size=min(c.min_segment_size, c.segment_size),
            samples=c.debloat_samples,
            threshold_pct=c.debloat_threshold_pct,
        )
        self.debloat = net.InputGateDebloat(self.inputs, debloater, c.debloat_period_ms / 1000.0, time.monotonic())

    def _build_writers(self, payload: VertexPayload) -> None:
        d = self.descriptor
        accepted = self.acceptor.wait_all(timeout=30.0) if self.acceptor else {}
        for out in d.outputs:
            chans = []
            for c in out.consumers:
                sock, reader = accepted[(out.edge_id, c)]
                chans.append(net.make_output_channel(sock, reader, out.edge_id, c, f"edge {out.edge_id} to subtask {c} of vertex {out.target_vertex}",
                                                     queuing=d.config.unaligned, max_frame=d.config.max_frame_size))
            self.writers[out.edge_id] = RecordWriter(
                chans,
                out.partitioner,
                key_selector=payload.edge_key_selectors.get(out.edge_id),
                max_parallelism=out.target_max_parallelism,
                consumer_parallelism=out.target_parallelism,
                buffer_timeout_ms=d.config.buffer_timeout_ms,
                segment_size=d.config.segment_size,
                seed=d.subtask,
            )

    def _backend(self) -> KeyedStateBackendBase:
        """The keyed state backend for the key groups of this subtask (built when an operator
        of the chain is keyed)."""
        from flinkpy.state.configured import create_keyed_backend
        from flinkpy.state.key_groups import key_group_range_for_operator

        d = self.descriptor
        kg_range = key_group_range_for_operator(d.max_parallelism, d.parallelism, d.subtask)
        return create_keyed_backend(d.config.state_backend or {}, d.max_parallelism, kg_range)

    # -- run ---------------------------------------------------------------------------------

    def run(self) -> int:
        """The task's life; returns the process's exit code (failures are reported first)."""
        from flinkpy.task.chain import OperatorChain
        from flinkpy.task.checkpointing import TaskCheckpointer

        try:
            payload = self._load_payload()
            self._listen()
            msg = self.ctrl.recv()
            if not isinstance(msg, ConnectTask):
                return EXIT_ORPHANED
            self._connect_inputs(msg.peers)
            self._build_writers(payload)
            chain = OperatorChain(payload, dict(self.writers), descriptor=self.descriptor, backend_factory=self._backend)
            self.chain = chain
            for op in chain.operators:
                if isinstance(op, SinkOperator):
                    if self.descriptor.config.final_checkpoint:
                        op.commits_at_final_checkpoint = True
                    else:
                        op.before_final_commit = self.control.await_final_commit
            self.checkpointer = TaskCheckpointer(self.descriptor, chain, self.ctrl.send)
            chain.open()
            self.started = time.monotonic()
            self.ctrl.send(TaskRunning())
            if self.descriptor.config.metrics_interval_ms > 0:
                self.reporter = TaskMetricsReporter(self, self.descriptor.config.metrics_interval_ms / 1000.0)
                self.reporter.start()
            self.faults.reach("running")
            restored = chain.restore.channel_state(payload.operators[0].operator_id, self.descriptor.subtask)
            if restored:
                self._restore_outputs(restored.get("outputs", {}))
            if chain.source is not None:
                self.loop = SourceLoop(self)
                self.loop.run()
                if not self.loop.stopped_without_drain and not self.ended_data:
                    chain.head.process_watermark(MAX_WATERMARK)  # the end of a bounded input: event time ends
            else:
                if self.descriptor.config.unaligned:
                    from flinkpy.task.unaligned_input import UnalignedInputProcessor

                    self.loop = self.input_processor = UnalignedInputProcessor(self, (restored or {}).get("inputs", {}))
                else:
                    self.loop = self.input_processor = InputProcessor(self)
                    if restored:
                        self.input_processor.replay(restored.get("inputs", {}))
                self.loop.run()
                if self.ended_data:
                    self._await_final_checkpoint()
            self._finish()
            return 0
        except BaseException as e:  # noqa: BLE001 - everything is reported, then the process ends
            if self.reporter is not None:
                self.reporter.stop(final=False)
            self._report_failure(e)
            return 1

    def end_of_data(self) -> None:
        """The task's input ended (final-checkpoint mode): its operators end theirs, its
        consumers get END_OF_DATA, and a source tells the JobManager; the task stays, for the
        barriers of the final checkpoint, until that checkpoint completed."""
        self.ended_data = True
        self.chain.end_input()
        for w in self.writers.values():
            w.broadcast_event(net.END_OF_DATA)
        if self.chain.source is not None:
            self.ctrl.send(TaskEndOfData())

    def _await_final_checkpoint(self) -> None:
        """Every input reached its end of partition after the end of data: wait until the final
        checkpoint's completion reached this task too (the producers finish when it reached
        them), or the stop-with-savepoint it took part in completed."""
        control = self.control
        while not self.final_done and not (self.stop_savepoint is not None and control.notified.get(self.stop_savepoint)):
            control.handle_one()

    def _finish(self) -> None:
        """The end of input: end the operators (unless they ended at the end of data), flush,
        send END_OF_PARTITION, report."""
        chain = self.chain
        stopped = self.loop is not None and self.loop.stopped_without_drain
        if stopped:
            for op in chain.async_operators:
                op.abandon()  # their requests are in the savepoint
        if not self.ended_data:
            chain.end_input()  # (a stop-with-savepoint: the job ends without a final checkpoint)
        if self.descriptor.config.final_checkpoint:
            chain.finish_sinks()  # the final checkpoint or the savepoint committed their output
        for w in self.writers.values():
            w.finish(stopped=stopped)
        self.checkpointer.close()
        chain.close()
        if chain.backend is not None:
            chain.backend.close()  # the RocksDB backend deletes its working directory
        sys.stdout.flush()
        if self.reporter is not None:
            self.reporter.stop(final=True)  # the totals, before the task reports it finished
        self.ctrl.send(TaskFinished(metrics=self._metrics()))

    def checkpoint(self, barrier: CheckpointBarrier, *, source_offsets: Any = None, alignment_ms: float = 0.0, alignment_bytes: int = 0) -> None:
        """Forward the barrier (after the records before it), then snapshot; a savepoint writes
        its files into its own directory."""
        self.chain.prepare_snapshot_pre_barrier(barrier.checkpoint_id)
        payload = pickle.dumps(barrier)
        for w in self.writers.values():
            w.broadcast_event(net.BARRIER, payload)
        if barrier.stop:
            self.stop_savepoint = barrier.checkpoint_id
        self.checkpointer.snapshot(
            barrier.checkpoint_id, barrier.timestamp, source_offsets=source_offsets,
            alignment_ms=alignment_ms, alignment_bytes=alignment_bytes, directory=barrier.directory,
            base=barrier.base,
        )

    def checkpoint_unaligned(self, barrier: CheckpointBarrier, *, source_offsets: Any = None, inputs: dict[Any, list[tuple[int, bytes]]] | None = None) -> Any:
        """Snapshot now, and let the barrier overtake what waits in the output queues.

        The records buffered in the writers are cut into buffers first (queued without waiting
        for credit); every queued data buffer is the output channel state. Returns the snapshot
        for :meth:`TaskCheckpointer.submit` (None: declined); the caller adds the input channel
        state when its recording is complete.
        """
        self.chain.prepare_snapshot_pre_barrier(barrier.checkpoint_id)
        outputs: dict[tuple[int, int], list[tuple[int, bytes]]] = {}
        for w in self.writers.values():
            w.flush()
            for ch in w.channels:
                frames = ch.queued_data()  # type: ignore[attr-defined]
                if frames:
                    outputs[(ch.edge_id, ch.consumer)] = frames
        payload = pickle.dumps(barrier)
        for w in self.writers.values():
            for ch in w.channels:
                ch.send_priority(net.BARRIER, payload)  # type: ignore[attr-defined]
        return self.checkpointer.take(
            barrier.checkpoint_id, barrier.timestamp, source_offsets=source_offsets, base=barrier.base,
            channel_state={"inputs": dict(inputs or {}), "outputs": outputs},
        )

    def _restore_outputs(self, outputs: dict[tuple[int, int], list[tuple[int, bytes]]]) -> None:
        """An unaligned checkpoint's output buffers go out first, before any new record."""
        for w in self.writers.values():
            for ch in w.channels:
                for kind, data in outputs.get((ch.edge_id, ch.consumer), ()):
                    ch.send_data(data, kind)

    # -- reports -----------------------------------------------------------------------------

    def _metrics(self) -> dict[str, float | int]:
        """Flink's task metrics, totals over the task's life (ms): busy, idle, back-pressured."""
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        wall_ms = (time.monotonic() - self.started) * 1000
        idle_s = self.loop.idle_s if self.loop is not None else 0.0
        backpressured_ms = sum(ch.backpressured_s for w in self.writers.values() for ch in w.channels) * 1000
        return {
            "records_in": self.loop.records_in if self.loop is not None else 0,
            "records_out": sum(w.records_out for w in self.writers.values()),
            "wall_ms": round(wall_ms, 1),
            "cpu_ms": round((ru.ru_utime + ru.ru_stime) * 1000, 1),
            "idle_ms": round(idle_s * 1000, 1),
            "backpressured_ms": round(backpressured_ms, 1),
            "busy_ms": round(max(0.0, wall_ms - idle_s * 1000 - backpressured_ms), 1),
            "metrics_cpu_ms": round(self.reporter.cpu_s * 1000, 3) if self.reporter is not None else 0.0,
        }

    def _report_failure(self, e: BaseException) -> None:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001
            pass
        try:
            self.ctrl.send(
                TaskFailed(
                    exception=f"{type(e).__module__}.{type(e).__qualname__}".removeprefix("builtins."),
                    message=str(e),
                    stacktrace=tb,
                    task=self.describe,
                )
            )
        except OSError:
            pass
