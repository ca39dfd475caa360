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

    def open(self) -> None:
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
