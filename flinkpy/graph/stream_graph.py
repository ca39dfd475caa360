"""The StreamGraph: one node per operator the user's program created, edges with partitioners.

The DataStream API appends to it; nothing here runs user code. Partitioning calls
(``rebalance()``, ``key_by()``, ``union()``) do not create nodes: they change how the *next*
operator's input edges are built, which is why a DataStream is a set of :class:`StreamRef`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from flinkpy.errors import InvalidProgramError

#: partitioners, by Flink's names for ship strategies
FORWARD = "FORWARD"
REBALANCE = "REBALANCE"
RESCALE = "RESCALE"
SHUFFLE = "SHUFFLE"
BROADCAST = "BROADCAST"
HASH = "HASH"
GLOBAL = "GLOBAL"
#: ``partition_custom``: the user's Partitioner picks the channel from the record's key
CUSTOM = "CUSTOM"
PARTITIONERS = (FORWARD, REBALANCE, RESCALE, SHUFFLE, BROADCAST, HASH, GLOBAL, CUSTOM)


@dataclass
class StreamNode:
    id: int
    kind: str  # source | map | flat_map | filter | process | keyed_* | sink
    name: str
    fn: Any = None
    parallelism: int | None = None
    max_parallelism: int | None = None
    uid: str | None = None
    key_selector: Callable | None = None
    #: "always" (default), "never" (disable_chaining), "head" (start_new_chain)
    chaining: str = "always"
    params: dict[str, Any] = field(default_factory=dict)
    #: parallelism fixed by the operator itself (a non-parallel source), not the user
    max_allowed_parallelism: int | None = None

    @property
    def is_source(self) -> bool:
        return self.kind == "source"

    @property
    def is_sink(self) -> bool:
        return self.kind == "sink"


@dataclass(frozen=True)
class StreamRef:
    """One input of a future operator: an upstream node and how its records are partitioned."""

    node_id: int
    partitioner: str | None = None  # None: forward when parallelism matches, else rebalance
    key_selector: Callable | None = None
    #: read the upstream operator's side output with this OutputTag id instead of its main output
    side_tag: str | None = None
    #: which input of a two-input operator this feeds (1, or 2 for the second connected stream)
    type_number: int = 1


@dataclass
class StreamEdge:
    source: int
    target: int
    partitioner: str | None
    key_selector: Callable | None = None
    side_tag: str | None = None
    #: the input of the target it feeds: 1, or 2 for the second input of a two-input operator
    type_number: int = 1


class StreamGraph:
    def __init__(self) -> None:
        self.nodes: dict[int, StreamNode] = {}
        self.edges: list[StreamEdge] = []
        self._next_id = 1
        #: nodes added since the last execution (what the next execute() runs, with its inputs)
        self.pending: set[int] = set()

    def add_node(self, kind: str, name: str, fn: Any = None, inputs: tuple[StreamRef, ...] = (), **kw: Any) -> StreamNode:
        node = StreamNode(id=self._next_id, kind=kind, name=name, fn=fn, **kw)
        self._next_id += 1
        self.nodes[node.id] = node
        self.pending.add(node.id)
        for ref in inputs:
            if ref.node_id not in self.nodes:
                raise InvalidProgramError(f"operator {name!r} reads from an unknown stream")
            self.edges.append(StreamEdge(ref.node_id, node.id, ref.partitioner, ref.key_selector, ref.side_tag, ref.type_number))
        return node

    def to_execute(self) -> StreamGraph:
        """What the next execute() runs, as PyFlink does: the operators added since the last
        execution and, through their inputs, the earlier ones they read from (a program that
        executes twice does not run its first pipeline again). Node ids stay as they are, so
        operator ids do too.

        >>> g = StreamGraph()
        >>> first = g.add_node("source", "a")
        >>> _ = g.add_node("sink", "a-out", inputs=(StreamRef(first.id),))
        >>> g.executed()
        >>> _ = g.add_node("sink", "again", inputs=(StreamRef(first.id),))
        >>> sorted(n.name for n in g.to_execute().nodes.values())
        ['a', 'again']
        """
        keep: set[int] = set()
        todo = list(self.pending)
        while todo:
            n = todo.pop()
            if n not in keep:
                keep.add(n)
                todo.extend(e.source for e in self.inputs_of(n))
        sub = StreamGraph()
        sub.nodes = {n: node for n, node in self.nodes.items() if n in keep}
        sub.edges = [e for e in self.edges if e.source in keep and e.target in keep]
        sub._next_id = self._next_id
        sub.pending = set(keep)
        return sub

    def executed(self) -> None:
        """The pending operators were handed to an execution: the next one starts afresh."""
        self.pending = set()

    def inputs_of(self, node_id: int) -> list[StreamEdge]:
        return [e for e in self.edges if e.target == node_id]

    def outputs_of(self, node_id: int) -> list[StreamEdge]:
        return [e for e in self.edges if e.source == node_id]

    def topological_order(self) -> list[int]:
        indegree = {n: 0 for n in self.nodes}
        for e in self.edges:
            indegree[e.target] += 1
        ready = sorted(n for n, d in indegree.items() if d == 0)
        order: list[int] = []
        while ready:
            n = ready.pop(0)
            order.append(n)
            for e in self.outputs_of(n):
                indegree[e.target] -= 1
                if indegree[e.target] == 0:
                    ready.append(e.target)
        if len(order) != len(self.nodes):
            raise InvalidProgramError("the job graph has a cycle; iterations are not supported")
        return order
