"""OperatorChain: the task's operators wired to each other and to its record writers."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.clock import now_ms
from flinkpy.connectors.base import ReaderContext
from flinkpy.graph.job_graph import ChainedOperator, VertexPayload
from flinkpy.metrics.groups import MetricRegistry
from flinkpy.protocol.deployment import TaskDeploymentDescriptor
from flinkpy.task import operators as ops
from flinkpy.task import broadcast, two_input
from flinkpy.task.row_output import with_row_type
from flinkpy.task.runtime_context import TaskRuntimeContext
from flinkpy.task.watermarks import MIN_WATERMARK

if TYPE_CHECKING:
    from flinkpy.state.backend import KeyedStateBackendBase
    from flinkpy.state.operator import OperatorStateBackend
    from flinkpy.task.timers import InternalTimerService

    BackendFactory = Callable[[], KeyedStateBackendBase]

SIMPLE = {
    "map": ops.MapOperator,
    "flat_map": ops.FlatMapOperator,
    "filter": ops.FilterOperator,
    "process": ops.ProcessOperator,
}
KEYED_METHOD = {
    "keyed_process": "process_element",
    "keyed_map": "map",
    "keyed_flat_map": "flat_map",
    "keyed_filter": "filter",
}


class OperatorChain:
    """Builds operators from the vertex payload, tail first, so each knows its output."""

    def __init__(
        self,
        payload: VertexPayload,
        writers: dict[int, ops.Output],
        *,
        descriptor: TaskDeploymentDescriptor,
        backend_factory: BackendFactory,
        clock: Callable[[], int] = now_ms,
    ):
        self.payload = payload
        #: processing time (epoch ms) of the chain's timers and contexts: the wall clock in a
        #: task, a manual one in flinkpy.testing
        self.clock = clock
        self.descriptor = descriptor
        self.by_id: dict[int, Any] = {}
        self.source: Any = None
        #: the source's reader while the source loop runs (it hears of completed checkpoints)
        self.source_reader: Any = None
        self.backend: KeyedStateBackendBase | None = None
        self._contexts: dict[int, TaskRuntimeContext] = {}
        #: the metrics user functions register (``get_metrics_group()``), reported with the task's
        self.user_metrics = MetricRegistry()
        batch_mode = descriptor.runtime_mode == "BATCH"
        for spec in reversed(payload.operators):
            outputs: list[ops.Output] = [self.by_id[n] for n in spec.chained_outputs]
            outputs += [writers[e] for e in spec.network_outputs]
            out = with_row_type(spec.params.get("output_type"), ops.fan_out(outputs), spec.name)
            op = self._build(spec, out, backend_factory, batch_mode)
            op.clock = clock
            side: dict[str, list[ops.Output]] = {}
            for tag, nodes in spec.side_chained.items():
                side.setdefault(tag, []).extend(self.by_id[n] for n in nodes)
            for tag, edges in spec.side_network.items():
                side.setdefault(tag, []).extend(writers[e] for e in edges)
            op.side_outputs = {tag: ops.fan_out(outs) for tag, outs in side.items()}
            self.by_id[spec.node_id] = op
        head = payload.operators[0]
        self.head = self.by_id[head.node_id]
        self.operators = [self.by_id[s.node_id] for s in payload.operators]
        #: operator state of CheckpointedFunctions, by node id
        self.operator_backends: dict[int, OperatorStateBackend] = {}
        self.restore = RestoredState(descriptor.restore)
        #: (checkpoint id, keyed-state handle) when the on-disk backend continues the very store
        #: of an incremental checkpoint (its next checkpoint may reference that store's files)
        self.restored_native: tuple[int, dict[str, Any]] | None = None
        #: timer services of the keyed operators (the task loop fires processing-time timers)
        self.timer_services: list[InternalTimerService] = []
        #: operators that emit periodic watermarks (assign_timestamps_and_watermarks)
        self.watermark_emitters = [op for op in self.operators if isinstance(op, ops.TimestampsAndWatermarksOperator)]
        #: async wait operators: the task's loop wakes on their pipes and lets them emit
        self.async_operators = [op for op in self.operators if hasattr(op, "snapshot_inputs")]

    def is_keyed(self, op: Any) -> bool:
        return self.backend is not None and getattr(op, "backend", None) is self.backend

    def _context(self, spec: ChainedOperator, backend: KeyedStateBackendBase | None) -> TaskRuntimeContext:
        d = self.descriptor
        return TaskRuntimeContext(
            task_name=d.vertex_name,
            subtask_index=d.subtask,
            parallelism=d.parallelism,
            max_parallelism=d.max_parallelism,
            attempt=d.attempt,
            job_parameters=d.job_parameters,
            backend=backend,
            operator_name=spec.name,
            metrics=self.user_metrics,
        )

    def _build(self, spec: ChainedOperator, out: ops.Output, backend_factory: BackendFactory, batch_mode: bool) -> Any:
        d = self.descriptor
        if spec.kind == "source":
            op = _SourceHead(spec.name, spec.fn, out, spec.params.get("watermark_strategy"))
            self.source = spec.fn
        elif spec.kind == "timestamps":
            op = ops.TimestampsAndWatermarksOperator(spec.name, spec.fn, out)
        elif spec.kind == "window":
            from flinkpy.task.window_slicing import create_window_operator

            self.backend = self.backend or backend_factory()
            op = create_window_operator(spec.name, spec.fn, out, spec.key_selector, self.backend, batch_mode)
        elif spec.kind == "async_wait":
            from flinkpy.task.async_wait import AsyncWaitOperator

            op = AsyncWaitOperator(spec.name, spec.fn, out, spec.params["async_options"])
        elif spec.kind in SIMPLE:
            op = SIMPLE[spec.kind](spec.name, spec.fn, out)
        elif spec.kind in ("sink", "sink_writer"):
            from flinkpy.task.committable_writer import CommittableWriterOperator

            ctx = ReaderContext(
                subtask_index=d.subtask,
                parallelism=d.parallelism,
                job_id=d.job_id,
                operator_name=spec.name,
                attempt=d.attempt,
            )
            kind = ops.SinkOperator if spec.kind == "sink" else CommittableWriterOperator
            op = kind(spec.name, spec.fn, out, ctx)
        elif spec.kind == "keyed_reduce":
            self.backend = self.backend or backend_factory()
            op = ops.KeyedReduceOperator(spec.name, spec.fn, out, spec.key_selector, self.backend, batch_mode)
        elif spec.kind in two_input.NON_KEYED:
            op = two_input.NON_KEYED[spec.kind](spec.name, spec.fn, out)
        elif spec.kind in two_input.KEYED:
            self.backend = self.backend or backend_factory()
            op = two_input.KeyedCoProcessOperator(
                spec.name, spec.fn, out, spec.key_selector, self.backend, batch_mode,
                method=two_input.KEYED[spec.kind], key2=spec.params["key_selector2"],
            )
        elif spec.kind == "interval_join":
            from flinkpy.task.interval_join import IntervalJoinOperator

            self.backend = self.backend or backend_factory()
            p = spec.params
            op = IntervalJoinOperator(
                spec.name, spec.fn, out, spec.key_selector, self.backend, batch_mode, key2=p["key_selector2"],
                lower=p["lower_bound"], upper=p["upper_bound"], late_tags=p.get("late_tags", (None, None)),
            )
        elif spec.kind in broadcast.KINDS:
            descriptors = spec.params["broadcast_state_descriptors"]
            if spec.kind == "keyed_broadcast_process":
                self.backend = self.backend or backend_factory()
                op = broadcast.KeyedBroadcastProcessOperator(
                    spec.name, spec.fn, out, spec.key_selector, self.backend, batch_mode, descriptors=descriptors
                )
            else:
                op = broadcast.BroadcastProcessOperator(spec.name, spec.fn, out, descriptors)
        elif spec.kind in KEYED_METHOD:
            self.backend = self.backend or backend_factory()
            op = ops.KeyedProcessOperator(
                spec.name, spec.fn, out, spec.key_selector, self.backend, batch_mode, method=KEYED_METHOD[spec.kind]
            )
        else:
            raise ValueError(f"unknown operator kind {spec.kind!r}")
        keyed = self.is_keyed(op)
        if keyed and self.backend is not None:
            self.backend.operator_name = spec.name  # the head of the chain's keyed operators, built last
        self._contexts[spec.node_id] = self._context(spec, self.backend if keyed else None)
        op.node_id = spec.node_id  # type: ignore[attr-defined]
        op.name = spec.name
        if keyed and not isinstance(op, ops.KeyedOperator):
            op.process_watermark = _KeyedWatermark(op, out)  # operators that only know timers
        return op

    def restored_source_state(self) -> list[Any]:
        spec = self.payload.operators[0]
        return self.restore.source_offsets(spec.operator_id)

    def initialize_state(self) -> None:
        """Restore keyed state and operator state, and call initialize_state() (before open)."""
        from flinkpy.common.functions import CheckpointedFunction, FunctionInitializationContext
        from flinkpy.state.operator import OperatorStateBackend

        d = self.descriptor
        from flinkpy.task.timers import InternalTimerService

        for spec, op in zip(self.payload.operators, self.operators):
            if self.is_keyed(op):
                self._restore_keyed(spec.operator_id)
                op.timers = InternalTimerService(self.backend, op.on_event_time, op.on_processing_time, clock=self.clock)
                self.timer_services.append(op.timers)
            operator_states = self.restore.operator(spec.operator_id)
            holds_broadcast = spec.kind in broadcast.KINDS
            if isinstance(op.fn, CheckpointedFunction) or holds_broadcast:
                backend = OperatorStateBackend()
                # by old subtask (None: it had none), as broadcast state is restored by position
                functions = [s.get("functions") if s else None for s in operator_states]
                backend.restore(functions, subtask_index=d.subtask, parallelism=d.parallelism)
                self.operator_backends[spec.node_id] = backend
                if holds_broadcast:
                    op.broadcast_backend = backend
                if isinstance(op.fn, CheckpointedFunction):
                    op.fn.initialize_state(FunctionInitializationContext(backend, bool(operator_states)))
            if op in self.async_operators:
                # the inputs of requests in flight at the checkpoint, redistributed round-robin
                # over the new subtasks (operator list state, as Flink's AsyncWaitOperator keeps)
                mine = [s.get("async") for i, s in enumerate(operator_states) if s and i % d.parallelism == d.subtask and s.get("async")]
                op.set_restored_state([item for part in mine for item in part])
            if isinstance(op, ops.SinkOperator):
                old_p = len(operator_states)
                mine = [s.get("sink") for i, s in enumerate(operator_states) if s and i % d.parallelism == d.subtask and s.get("sink") is not None]
                op.set_restored_state(mine if old_p else [])

    def _restore_keyed(self, operator_id: str) -> None:
        """Restore the keyed backend from full snapshots (any backend) and from incremental ones
        (the on-disk backend opens the stores; the heap backend reads them out)."""
        from flinkpy.state.incremental import is_incremental

        handles = self.restore.keyed_handles(operator_id)
        natives = [h for h in handles if is_incremental(h)]
        for h in handles:
            if not is_incremental(h):
                # streamed through a local file: a store larger than memory restores in bounded memory
                path = self.restore.fetch(h, getattr(self.backend, "working_root", None))
                try:
                    with open(path, "rb") as f:
                        self.backend.restore_file(f)
                finally:
                    os.unlink(path)
        if natives:
            stores = [(self.restore.download(h, getattr(self.backend, "working_root", None)), range(h["key_groups"][0], h["key_groups"][1] + 1)) for h in natives]
            if hasattr(self.backend, "restore_native"):
                self.backend.restore_native(stores)
                if len(natives) == 1 and stores[0][1] == self.backend.key_group_range:
                    # the store continues as it was: later checkpoints may build on its files
                    self.restored_native = (self.restore.spec.get("checkpoint_id"), natives[0])
            else:
                from flinkpy.state.incremental import read_canonical

                self.backend.restore([read_canonical(path, groups) for path, groups in stores])

    def open(self) -> None:
        self.initialize_state()
        # open tail first, as Flink does: an operator may emit in open() only to opened successors
        for op in reversed(self.operators):
            op.open(self._contexts[op.node_id])  # type: ignore[attr-defined]

    def end_input(self) -> None:
        for op in self.operators:
            op.end_input()

    def finish_sinks(self) -> None:
        """The job's final checkpoint (or the savepoint that stopped it) completed: the sinks'
        writers hear that their input ended; nothing is left for them to commit."""
        for op in self.operators:
            if isinstance(op, ops.SinkOperator):
                op.finish()

    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        """Before barrier ``checkpoint_id`` leaves the task: operators that emit at a barrier
        (a committed sink's writers) emit now, head first, so that their records precede it."""
        for op in self.operators:
            hook = getattr(op, "prepare_snapshot_pre_barrier", None)
            if hook is not None:
                hook(checkpoint_id)

    def close(self) -> None:
        for op in self.operators:
            op.close()


class _SourceHead(ops.Operator):
    """The source's records enter the chain here (the reader lives in the task loop). With a
    WatermarkStrategy it stamps records and generates watermarks (``Stamper``);
    ``emit_periodic_watermark`` is called every ``pipeline.auto-watermark-interval``."""

    def __init__(self, name: str, fn: Any, output: ops.Output, strategy: Any = None):
        super().__init__(name, fn, output)
        from flinkpy.task.watermarks import MIN_WATERMARK, Stamper

        self.strategy = strategy
        self.stamper = Stamper(strategy, output) if strategy is not None else None
        self.idle = False
        #: a split-aware reader's ``split_ids`` (the source loop sets it), for per-split watermarks
        self.split_ids: Any = None
        self._splits: Any = None
        if self.stamper is not None and self.stamper.builtin is not None and self.stamper.builtin.emits:
            from flinkpy.task.watermarks import SplitWatermarks

            self._splits = SplitWatermarks(strategy)
        #: the highest watermark the source emitted itself
        self.source_watermark = MIN_WATERMARK

    def open(self, runtime_context: Any) -> None:
        pass

    def process(self, values: list, timestamps: list[int] | None) -> None:
        if self.idle:
            self.idle = False
            self.output.process_watermark_status(False)
        if self.stamper is None:
            self.output.process(values, timestamps)
        else:
            self.stamper.process(values, timestamps)

    def process_splits(self, values: list, timestamps: list[int] | None, splits: list[str]) -> None:
        """Records of a split-aware reader: with a built-in WatermarkStrategy, each split's
        timestamps advance that split's watermark only (see ``SplitWatermarks``)."""
        if self._splits is None or self.split_ids is None:
            self.process(values, timestamps)
            return
        if self.idle:
            self.idle = False
            self.output.process_watermark_status(False)
        stamper = self.stamper
        if stamper.assigns:
            extract = self.strategy.extract_timestamp
            previous = timestamps if timestamps is not None else [MIN_WATERMARK] * len(values)
            timestamps = [int(extract(v, t)) for v, t in zip(values, previous)]
        if timestamps is not None:
            now = time.monotonic()
            by_split: dict[str, list[int]] = {}
            for split, ts in zip(splits, timestamps):
                by_split.setdefault(split, []).append(ts)
            for split, ts in by_split.items():
                self._splits.on_timestamps(split, ts, now)
        self.output.process(values, timestamps)

    def emit_periodic_watermark(self) -> None:
        if self._splits is not None and self.split_ids is not None:
            now = time.monotonic()
            self._splits.sync(self.split_ids(), now)
            wm, idle = self._splits.current(now)
            if idle:
                self.mark_idle()
            elif wm is not None and wm > self.stamper.emitted:
                self.stamper.emitted = wm
                if self.idle:
                    self.idle = False
                    self.output.process_watermark_status(False)
                self.output.process_watermark(wm)
            return
        if self.stamper is not None:
            self.stamper.emit_periodic()

    def emit_source_watermark(self, watermark: int) -> None:
        """A watermark the source itself emitted (a SourceFunction's ``ctx.emit_watermark``);
        a WatermarkStrategy given to the source generates the watermarks instead, as in Flink."""
        if self.stamper is not None or watermark <= self.source_watermark:
            return
        self.source_watermark = watermark
        if self.idle:
            self.idle = False
            self.output.process_watermark_status(False)
        self.output.process_watermark(watermark)

    def mark_idle(self) -> None:
        if not self.idle:
            self.idle = True
            self.output.process_watermark_status(True)

    def close(self) -> None:
        pass


class _KeyedWatermark:
    """process_watermark for keyed operators that implement only the timer callbacks."""

    def __init__(self, op: Any, output: ops.Output):
        self.op = op
        self.output = output

    def __call__(self, watermark: int) -> None:
        if self.op.timers is not None:
            self.op.timers.advance_watermark(watermark)
            fired = getattr(self.op, "timers_fired", None)
            if fired is not None:
                fired()  # an operator that gathers its timers' output emits it as one batch
        self.output.process_watermark(watermark)


class RestoredState:
    """The state a task restores from, as its deployment descriptor lists it.

    ``spec`` (made by the JobManager from a checkpoint's ``_metadata``) is
    ``{"checkpoint_id", "dir", "operators": {operator_id: {"keyed": [handle], "operator":
    [handle | None per old subtask], "source_offsets": [offsets per old subtask]}}}``; keyed
    handles are those whose key groups overlap this subtask's range. Files are read and checked
    (size, checksum) on first use.
    """

    def __init__(self, spec: dict[str, Any] | None):
        self.spec = spec or {}
        self._storage: Any = None

    def _op(self, operator_id: str) -> dict[str, Any]:
        return self.spec.get("operators", {}).get(operator_id, {})

    def _read(self, handle: dict[str, Any] | None) -> Any:
        import pickle

        if self._storage is None:
            from flinkpy.checkpoint.storage import CheckpointStorage

            self._storage = CheckpointStorage(self.spec["dir"])
        if handle is None:
            return None
        data = self._storage.read_state(self.spec["dir"], handle)
        return pickle.loads(data)

    def keyed_handles(self, operator_id: str) -> list[dict[str, Any]]:
        return [h for h in self._op(operator_id).get("keyed", []) if h]

    def fetch(self, handle: dict[str, Any], parent: str | None) -> str:
        """Stream a full keyed-state file to a new local file (checked); the caller removes it."""
        import tempfile

        self._read(None)  # opens the storage
        fd, path = tempfile.mkstemp(prefix="restore-", suffix=".keyed", dir=parent)
        os.close(fd)
        self._storage.fetch_state(self.spec["dir"], handle, path)
        return path

    def download(self, handle: dict[str, Any], parent: str | None) -> str:
        """Fetch an incremental keyed-state handle's store into a new local directory."""
        import tempfile

        from flinkpy.state.incremental import download

        self._read(None)  # opens the storage
        target = tempfile.mkdtemp(prefix="restore-", dir=parent)
        return download(handle, lambda h: self._storage.read_state(self.spec["dir"], h), self._storage.fetch_shared, target)

    def operator(self, operator_id: str) -> list[Any]:
        return [self._read(h) if h else None for h in self._op(operator_id).get("operator", [])]

    def channel_state(self, operator_id: str, subtask: int) -> dict[str, Any] | None:
        """The in-flight buffers an unaligned checkpoint stored for this subtask (the chain's
        head operator holds them): ``{"inputs": {(edge, producer): [frame]}, "outputs":
        {(edge, consumer): [frame]}}``, or None. Restores of channel state keep the parallelism
        (the JobManager refuses others), so old subtask ``subtask`` is this one."""
        handles = self._op(operator_id).get("channel_state") or []
        handle = handles[subtask] if subtask < len(handles) else None
        return self._read(handle) if handle else None

    def source_offsets(self, operator_id: str) -> list[Any]:
        return [o for o in self._op(operator_id).get("source_offsets", []) if o is not None]
