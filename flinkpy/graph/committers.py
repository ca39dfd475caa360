"""Sinks committed by one task: a writer node and a committer node in place of one sink node.

A sink whose ``committer()`` returns a sink (the Iceberg sink: one table snapshot per
checkpoint) is run as Flink runs a Sink V2 with a committer: the writers at the sink's
parallelism (kind ``sink_writer``, named ``<name>: Writer``: they emit their committables before
each barrier instead of committing), then the committer at parallelism 1 (``<name>:
Committer``), fed by every writer. The writer keeps the sink's node id, uid and parallelism
(``DataStreamSink.set_parallelism`` sets it); the committer, which holds the state (the
committables not yet committed), has the uid ``<uid>-committer``. The JobGraph is built from the expanded graph; the program's
StreamGraph (what the Spark runner and ``flinkpy info`` read) keeps the one sink node.

>>> from flinkpy.graph.stream_graph import StreamGraph, StreamRef
>>> class Committed:
...     def committer(self):
...         return "the committer"
>>> g = StreamGraph()
>>> src = g.add_node("source", "numbers", parallelism=2)
>>> sink = g.add_node("sink", "table", Committed(), inputs=(StreamRef(src.id),), uid="table")
>>> expanded = expand_committers(g)
>>> [(n.kind, n.name, n.uid, n.fn if isinstance(n.fn, str) else "") for n in expanded.nodes.values()]
[('source', 'numbers', None, ''), ('sink_writer', 'table: Writer', 'table', ''), ('sink', 'table: Committer', 'table-committer', 'the committer')]
>>> [(e.source, e.target) for e in expanded.edges], g.nodes[sink.id].kind
([(1, 2), (2, 3)], 'sink')
"""

from __future__ import annotations

import copy
from dataclasses import replace

from flinkpy.graph.stream_graph import StreamEdge, StreamGraph, StreamNode


def committer_of(node: StreamNode) -> object | None:
    """The committer sink of a sink node, or None (a sink whose writers commit themselves)."""
    if not node.is_sink:
        return None
    committer = getattr(node.fn, "committer", None)
    return committer() if callable(committer) else None


def expand_committers(graph: StreamGraph) -> StreamGraph:
    """A copy of ``graph`` with every sink that has a committer split in two (see the module);
    ``graph`` itself is left as it is (``graph`` when there is none)."""
    committers = {n: c for n, c in ((n, committer_of(node)) for n, node in graph.nodes.items()) if c is not None}
    if not committers:
        return graph
    out = copy.copy(graph)
    out.nodes = dict(graph.nodes)
    out.edges = list(graph.edges)
    out.pending = set(graph.pending)
    for n, committer in sorted(committers.items()):
        sink = graph.nodes[n]
        writer = out.nodes[n] = replace(sink, kind="sink_writer", name=f"{sink.name}: Writer", params=dict(sink.params))
        node = StreamNode(
            id=out._next_id, kind="sink", name=f"{sink.name}: Committer", fn=committer, parallelism=1,
            uid=f"{sink.uid}-committer" if sink.uid else None, max_allowed_parallelism=1,
            params={"committer": True},
        )
        out._next_id += 1
        out.nodes[node.id] = node
        out.pending.add(node.id)
        # no partitioner: forward (chained) from one writer, rebalance (all to the one committer) from more
        out.edges.append(StreamEdge(writer.id, node.id, None))
    return out
