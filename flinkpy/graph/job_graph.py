"""The JobGraph: StreamGraph nodes chained into job vertices (one task per parallel subtask).

Chaining rule (as Flink's): an edge u -> v is chained when it is a forward edge, u and v have the
same parallelism, v has no other input, neither side opted out (``disable_chaining``,
``start_new_chain`` on v) and chaining is enabled for the job. Everything else is a network edge.

The JobGraph splits in two for submission: ``meta`` — plain JSON the JobManager schedules with and
never executes — and one opaque payload per vertex (the cloudpickled operators) that only task
processes unpickle.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.committers import expand_committers
from flinkpy.graph.pickling import dumps
from flinkpy.graph.stream_graph import CUSTOM, FORWARD, HASH, REBALANCE, RESCALE, StreamGraph, StreamNode

PACT = {"source": "Data Source", "sink": "Data Sink"}


@dataclass
class ChainedOperator:
    """One operator inside a task's chain, as the task process rebuilds it."""

    node_id: int
    kind: str
    name: str
    uid: str | None
    fn: Any
    key_selector: Any
    params: dict[str, Any]
    #: node ids of chained successors (called directly, same process)
    chained_outputs: list[int] = field(default_factory=list)
    #: job edge ids this operator writes to (network channels)
    network_outputs: list[int] = field(default_factory=list)
    #: what state is matched by across runs: the uid, or a hash of the operator's place in the graph
    operator_id: str = ""
    #: side outputs by OutputTag id: chained successors and network edges
    side_chained: dict[str, list[int]] = field(default_factory=dict)
    side_network: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class VertexPayload:
    operators: list[ChainedOperator]  # in chain (topological) order; operators[0] is the head
    #: key selectors of outgoing HASH edges, by job edge id
    edge_key_selectors: dict[int, Any]


@dataclass
class JobVertex:
    id: int
    name: str
    parallelism: int
    max_parallelism: int
    node_ids: list[int]
    is_source: bool
    uids: list[str | None]
    operator_ids: list[str] = field(default_factory=list)
    operator_names: list[str] = field(default_factory=list)
    #: the most subtasks the vertex may have (a non-parallel source or windowAll: 1); None: up
    #: to max_parallelism. An in-place rescale keeps within it.
    max_allowed_parallelism: int | None = None


@dataclass
class JobEdge:
    id: int
    source: int  # job vertex id
    target: int
    partitioner: str
    source_node: int  # the stream node in the source vertex that writes this edge
    #: the input of the target vertex's head it feeds: 1, or 2 (a two-input operator's second)
    type_number: int = 1


@dataclass
class JobGraph:
    job_name: str
    vertices: dict[int, JobVertex]
    edges: list[JobEdge]
    payloads: dict[int, VertexPayload]
    config: dict[str, str]
    runtime_mode: str = "STREAMING"

    def meta(self) -> dict[str, Any]:
        """The JSON the JobManager schedules with."""
        return {
            "name": self.job_name,
            "runtime_mode": self.runtime_mode,
            "config": dict(self.config),
            "vertices": [
                {
                    "id": v.id,
                    "name": v.name,
                    "parallelism": v.parallelism,
                    "max_parallelism": v.max_parallelism,
                    "is_source": v.is_source,
                    "operators": v.node_ids,
                    "uids": v.uids,
                    "operator_ids": v.operator_ids,
                    "operator_names": v.operator_names,
                    "max_allowed_parallelism": v.max_allowed_parallelism,
                }
                for v in self.vertices.values()
            ],
            "edges": [
                {"id": e.id, "source": e.source, "target": e.target, "partitioner": e.partitioner, "type_number": e.type_number}
                for e in self.edges
            ],
        }

    def serialize(self) -> dict[str, Any]:
        """The submission document: ``meta`` plus base64 cloudpickled payloads."""
        return {
            "meta": self.meta(),
            "payloads": {
                str(vid): base64.b64encode(dumps(p)).decode("ascii") for vid, p in self.payloads.items()
            },
        }

    def plan(self) -> dict[str, Any]:
        return execution_plan(self)


def resolve_parallelism(node: StreamNode, default: int) -> int:
    p = node.parallelism or default
    if node.max_allowed_parallelism is not None:
        if node.parallelism and node.parallelism > node.max_allowed_parallelism:
            raise InvalidProgramError(
                f"operator {node.name!r} is not parallel: parallelism {node.parallelism} is not allowed",
                remedy=f"set at most {node.max_allowed_parallelism}",
            )
        p = min(p, node.max_allowed_parallelism)
    if p < 1:
        raise InvalidProgramError(f"operator {node.name!r} has parallelism {p}", remedy="use a parallelism >= 1")
    return p


def build_job_graph(
    graph: StreamGraph,
    *,
    job_name: str,
    default_parallelism: int,
    max_parallelism: int,
    chaining_enabled: bool = True,
    config: dict[str, str] | None = None,
    runtime_mode: str = "STREAMING",
) -> JobGraph:
    """Chain the StreamGraph's operators into job vertices and its other edges into job edges."""
    if not graph.nodes:
        raise InvalidProgramError(
            "the job has no operators", remedy="define a source and at least one sink before execute()"
        )
    graph = expand_committers(graph)
    order = graph.topological_order()
    par, maxp = _parallelisms(graph, order, default_parallelism, max_parallelism)
    resolved = _partitioners(graph, par)
    chain_of = _chains(graph, order, resolved, par, chaining_enabled)
    heads = [n for n in order if chain_of[n] == n]
    vertex_id = {h: idx + 1 for idx, h in enumerate(heads)}
    members: dict[int, list[int]] = {h: [n for n in order if chain_of[n] == h] for h in heads}
    operator_ids = _operator_ids(graph, order)
    vertices: dict[int, JobVertex] = {}
    for h in heads:
        nodes = [graph.nodes[n] for n in members[h]]
        vertices[vertex_id[h]] = JobVertex(
            id=vertex_id[h],
            name=" -> ".join(_display_name(x) for x in nodes),
            parallelism=par[h],
            max_parallelism=maxp[h],
            node_ids=members[h],
            is_source=graph.nodes[h].is_source,
            uids=[x.uid for x in nodes],
            operator_ids=[operator_ids[x.id] for x in nodes],
            operator_names=[x.name for x in nodes],
            max_allowed_parallelism=min((x.max_allowed_parallelism for x in nodes if x.max_allowed_parallelism is not None), default=None),
        )
    ops = {n: _chained_operator(graph.nodes[n], operator_ids[n]) for n in order}
    key_selectors: dict[int, dict[int, Any]] = {vertex_id[h]: {} for h in heads}
    edges = _wire(graph, resolved, chain_of, vertex_id, ops, key_selectors)
    payloads = {
        vertex_id[h]: VertexPayload(operators=[ops[n] for n in members[h]], edge_key_selectors=key_selectors[vertex_id[h]])
        for h in heads
    }
    return JobGraph(
        job_name=job_name,
        vertices=vertices,
        edges=edges,
        payloads=payloads,
        config=dict(config or {}),
        runtime_mode=runtime_mode,
    )


def _parallelisms(graph: StreamGraph, order: list[int], default: int, max_parallelism: int) -> tuple[dict[int, int], dict[int, int]]:
    """Each node's parallelism and max parallelism; a parallelism above the max is refused."""
    par = {n: resolve_parallelism(graph.nodes[n], default) for n in order}
    maxp = {n: graph.nodes[n].max_parallelism or max_parallelism for n in order}
    for n in order:
        if par[n] > maxp[n]:
            raise InvalidProgramError(
                f"operator {graph.nodes[n].name!r} has parallelism {par[n]} above its max parallelism {maxp[n]}",
                remedy="raise pipeline.max-parallelism or lower the parallelism",
            )
    return par, maxp


def _partitioners(graph: StreamGraph, par: dict[int, int]) -> dict[int, str]:
    """The partitioner of every edge (by index): forward between equal parallelisms unless the
    program chose one, rebalance otherwise; a forward edge that would change parallelism is refused."""
    resolved: dict[int, str] = {}
    for i, e in enumerate(graph.edges):
        p = e.partitioner
        if p is None:
            p = FORWARD if par[e.source] == par[e.target] else REBALANCE
        if p == FORWARD and par[e.source] != par[e.target]:
            raise InvalidProgramError(
                f"forward partitioning from {graph.nodes[e.source].name!r} (parallelism {par[e.source]}) to "
                f"{graph.nodes[e.target].name!r} (parallelism {par[e.target]}) would change parallelism",
                remedy="use rebalance() or rescale(), or give both the same parallelism",
            )
        resolved[i] = p
    return resolved


def _chains(graph: StreamGraph, order: list[int], resolved: dict[int, str], par: dict[int, int], chaining_enabled: bool) -> dict[int, int]:
    """The head of the chain each node belongs to: a node joins its single chainable
    predecessor's chain (the module docstring gives the rule)."""

    def chainable(i: int) -> bool:
        e = graph.edges[i]
        up, down = graph.nodes[e.source], graph.nodes[e.target]
        return (
            chaining_enabled
            and resolved[i] == FORWARD
            and par[e.source] == par[e.target]
            and len(graph.inputs_of(e.target)) == 1
            and up.chaining != "never"
            and down.chaining == "always"
            and not down.is_source
        )

    chain_of: dict[int, int] = {}
    for n in order:
        ins = [i for i, e in enumerate(graph.edges) if e.target == n]
        if len(ins) == 1 and chainable(ins[0]):
            chain_of[n] = chain_of[graph.edges[ins[0]].source]
        else:
            chain_of[n] = n
    return chain_of


def _chained_operator(node: StreamNode, operator_id: str) -> ChainedOperator:
    return ChainedOperator(
        node_id=node.id,
        kind=node.kind,
        name=node.name,
        uid=node.uid,
        fn=node.fn,
        key_selector=node.key_selector,
        params=dict(node.params),
        operator_id=operator_id,
    )


def _wire(
    graph: StreamGraph,
    resolved: dict[int, str],
    chain_of: dict[int, int],
    vertex_id: dict[int, int],
    ops: dict[int, ChainedOperator],
    key_selectors: dict[int, dict[int, Any]],
) -> list[JobEdge]:
    """Connect the operators: an edge inside a chain becomes a direct call (``chained_outputs``),
    any other edge a job edge (``network_outputs``), with its key selector when it is keyed."""
    edges: list[JobEdge] = []
    for i, e in enumerate(graph.edges):
        if chain_of[e.target] == chain_of[e.source] and chain_of[e.target] != e.target:
            if e.side_tag is not None:
                ops[e.source].side_chained.setdefault(e.side_tag, []).append(e.target)
            else:
                ops[e.source].chained_outputs.append(e.target)
            continue
        edge = JobEdge(
            id=len(edges) + 1,
            source=vertex_id[chain_of[e.source]],
            target=vertex_id[chain_of[e.target]],
            partitioner=resolved[i],
            source_node=e.source,
            type_number=e.type_number,
        )
        edges.append(edge)
        if e.side_tag is not None:
            ops[e.source].side_network.setdefault(e.side_tag, []).append(edge.id)
        else:
            ops[e.source].network_outputs.append(edge.id)
        if resolved[i] in (HASH, CUSTOM):
            key_selectors[edge.source][edge.id] = e.key_selector
    return edges


def operator_ids(graph: StreamGraph) -> dict[int, str]:
    """Each node's operator id as the engine gives it (snapshots are matched by it)."""
    return _operator_ids(graph, graph.topological_order())


def _operator_ids(graph: StreamGraph, order: list[int]) -> dict[int, str]:
    """The uid where the user set one; otherwise a hash of the operator's kind, name, position
    and inputs — stable for the same program, but changed by edits upstream (hence: set uids)."""
    import hashlib

    ids: dict[int, str] = {}
    for position, n in enumerate(order):
        node = graph.nodes[n]
        if node.uid:
            ids[n] = node.uid
            continue
        inputs = ",".join(sorted(ids[e.source] for e in graph.inputs_of(n)))
        digest = hashlib.sha1(f"{position}|{node.kind}|{node.name}|{inputs}".encode()).hexdigest()
        ids[n] = digest[:32]
    return ids


def _display_name(node: StreamNode) -> str:
    if node.is_source and not node.name.startswith("Source"):
        return f"Source: {node.name}"
    if node.is_sink and not node.name.startswith("Sink") and not node.params.get("committer"):
        return f"Sink: {node.name}"
    return node.name


def execution_plan(job: JobGraph) -> dict[str, Any]:
    """Flink-shaped plan JSON: one node per job vertex with its chained operators."""
    nodes = []
    for v in job.vertices.values():
        payload = job.payloads.get(v.id)
        kinds = [op.kind for op in payload.operators] if payload else []
        pact = PACT.get(kinds[0], "Operator") if kinds else "Operator"
        if kinds and kinds[-1] == "sink" and len(kinds) == 1:
            pact = "Data Sink"
        node: dict[str, Any] = {}
        windows = [
            {"operator": op.name, "path": path, "reason": why}
            for op in (payload.operators if payload else [])
            if op.kind == "window" and callable(getattr(op.fn, "execution_path", None))
            for path, why in [op.fn.execution_path()]
        ]
        if windows:  # which window operator each window runs on: sliced or general
            node["windows"] = windows
        nodes.append(
            {
                "id": v.id,
                "type": v.name,
                "pact": pact,
                "contents": v.name,
                "parallelism": v.parallelism,
                "max_parallelism": v.max_parallelism,
                "operators": [op.name for op in payload.operators] if payload else [],
                "uids": v.uids,
                "operator_ids": v.operator_ids,
                "predecessors": [
                    {"id": e.source, "ship_strategy": e.partitioner, "side": "second" if e.type_number == 2 else "first"}
                    for e in job.edges
                    if e.target == v.id
                ],
                **node,
            }
        )
    return {"name": job.job_name, "runtime_mode": job.runtime_mode, "nodes": nodes}


# -- distribution of channels (pure; used by the JobManager and the tasks alike) -------------


def producers_of(partitioner: str, up_parallelism: int, down_parallelism: int, consumer: int) -> list[int]:
    """Upstream subtasks that send to downstream subtask ``consumer`` on an edge."""
    if partitioner == FORWARD:
        return [consumer]
    if partitioner == RESCALE:
        return [p for p in range(up_parallelism) if consumer in consumers_of(partitioner, up_parallelism, down_parallelism, p)]
    return list(range(up_parallelism))


def consumers_of(partitioner: str, up_parallelism: int, down_parallelism: int, producer: int) -> list[int]:
    """Downstream subtasks that upstream subtask ``producer`` sends to on an edge, in channel order."""
    if partitioner == FORWARD:
        return [producer]
    if partitioner == RESCALE:
        if up_parallelism >= down_parallelism:
            # each consumer reads a contiguous block of producers
            return [producer * down_parallelism // up_parallelism]
        # each producer feeds a contiguous block of consumers
        start = producer * down_parallelism // up_parallelism
        end = (producer + 1) * down_parallelism // up_parallelism
        return list(range(start, end))
    return list(range(down_parallelism))
