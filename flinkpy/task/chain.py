"""OperatorChain: the task's operators wired to each other and to its record writers."""

from __future__ import annotations

from typing import Any, Callable

from flinkpy.connectors.base import ReaderContext
from flinkpy.graph.job_graph import ChainedOperator, VertexPayload
from flinkpy.task import operators as ops
from flinkpy.task.runtime_context import TaskRuntimeContext

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
        writers: dict[int, Callable[[list], None]],
        *,
        tdd: dict[str, Any],
        backend_factory: Callable[[], Any],
    ):
        self.payload = payload
        self.tdd = tdd
        self.by_id: dict[int, ops.Operator] = {}
        self.source: Any = None
        self.backend: Any = None
        self._contexts: dict[int, TaskRuntimeContext] = {}
        batch_mode = tdd.get("runtime_mode") == "BATCH"
        for spec in reversed(payload.operators):
            outputs: list[Callable[[list], None]] = [self.by_id[n].process for n in spec.chained_outputs]
            outputs += [writers[e] for e in spec.network_outputs]
            out = ops.fan_out(outputs)
            self.by_id[spec.node_id] = self._build(spec, out, backend_factory, batch_mode)
        head = payload.operators[0]
        self.head = self.by_id[head.node_id]
        self.operators = [self.by_id[s.node_id] for s in payload.operators]
        #: operator state of CheckpointedFunctions, by node id
        self.operator_backends: dict[int, Any] = {}
        self.restore = RestoredState(tdd.get("restore"))

    def _context(self, spec: ChainedOperator, backend: Any) -> TaskRuntimeContext:
        t = self.tdd
        return TaskRuntimeContext(
            task_name=t["vertex_name"],
            subtask_index=t["subtask"],
            parallelism=t["parallelism"],
            max_parallelism=t["max_parallelism"],
            attempt=t["attempt"],
            job_parameters=t.get("job_parameters", {}),
            backend=backend,
            operator_name=spec.name,
        )

    def _build(self, spec: ChainedOperator, out: Callable[[list], None], backend_factory: Callable[[], Any], batch_mode: bool) -> ops.Operator:
        t = self.tdd
        if spec.kind == "source":
            op = _SourceHead(spec.name, spec.fn, out)
            self.source = spec.fn
        elif spec.kind in SIMPLE:
            op = SIMPLE[spec.kind](spec.name, spec.fn, out)
        elif spec.kind == "sink":
            ctx = ReaderContext(
                subtask_index=t["subtask"],
                parallelism=t["parallelism"],
                job_id=t["job_id"],
                operator_name=spec.name,
                attempt=t["attempt"],
            )
            op = ops.SinkOperator(spec.name, spec.fn, out, ctx)
        elif spec.kind == "keyed_reduce":
            self.backend = self.backend or backend_factory()
            op = ops.KeyedReduceOperator(spec.name, spec.fn, out, spec.key_selector, self.backend, batch_mode)
        elif spec.kind in KEYED_METHOD:
            self.backend = self.backend or backend_factory()
            op = ops.KeyedProcessOperator(
                spec.name, spec.fn, out, spec.key_selector, self.backend, batch_mode, method=KEYED_METHOD[spec.kind]
            )
        else:
            raise ValueError(f"unknown operator kind {spec.kind!r}")
        keyed = isinstance(op, ops.KeyedOperator)
        self._contexts[spec.node_id] = self._context(spec, self.backend if keyed else None)
        op.node_id = spec.node_id  # type: ignore[attr-defined]
        return op

    def restored_source_state(self) -> list[Any]:
        spec = self.payload.operators[0]
        return self.restore.source_offsets(spec.operator_id)

    def initialize_state(self) -> None:
        """Restore keyed state and operator state, and call initialize_state() (before open)."""
        from flinkpy.datastream.functions import CheckpointedFunction, FunctionInitializationContext
        from flinkpy.state.operator import OperatorStateBackend

        t = self.tdd
        for spec, op in zip(self.payload.operators, self.operators):
            if isinstance(op, ops.KeyedOperator) and op.backend is self.backend:
                snapshots = self.restore.keyed(spec.operator_id)
                if snapshots:
                    self.backend.restore(snapshots)
            operator_states = self.restore.operator(spec.operator_id)
            if isinstance(op.fn, CheckpointedFunction):
                backend = OperatorStateBackend()
                functions = [s["functions"] for s in operator_states if s and "functions" in s]
                backend.restore(functions, subtask_index=t["subtask"], parallelism=t["parallelism"])
                self.operator_backends[spec.node_id] = backend
                op.fn.initialize_state(FunctionInitializationContext(backend, bool(operator_states)))
            if isinstance(op, ops.SinkOperator):
                old_p = len(operator_states)
                mine = [s.get("sink") for i, s in enumerate(operator_states) if s and i % t["parallelism"] == t["subtask"] and s.get("sink") is not None]
                op.set_restored_state(mine if old_p else [])

    def open(self) -> None:
        self.initialize_state()
        # open tail first, as Flink does: an operator may emit in open() only to opened successors
        for op in reversed(self.operators):
            op.open(self._contexts[op.node_id])  # type: ignore[attr-defined]

    def end_input(self) -> None:
        for op in self.operators:
            op.end_input()

    def close(self) -> None:
        for op in self.operators:
            op.close()


class _SourceHead(ops.Operator):
    """The source's records enter the chain here; the reader lives in the task loop."""

    def open(self, runtime_context: Any) -> None:
        pass

    def process(self, batch: list) -> None:
        self.output(batch)

    def close(self) -> None:
        pass


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

    def _read(self, handle: dict[str, Any]) -> Any:
        import pickle

        if self._storage is None:
            from flinkpy.checkpoint.storage import CheckpointStorage

            self._storage = CheckpointStorage(self.spec["dir"])
        data = self._storage.read_state(self.spec["dir"], handle)
        return pickle.loads(data)

    def keyed(self, operator_id: str) -> list[Any]:
        return [self._read(h) for h in self._op(operator_id).get("keyed", []) if h]

    def operator(self, operator_id: str) -> list[Any]:
        return [self._read(h) if h else None for h in self._op(operator_id).get("operator", [])]

    def source_offsets(self, operator_id: str) -> list[Any]:
        return [o for o in self._op(operator_id).get("source_offsets", []) if o is not None]
