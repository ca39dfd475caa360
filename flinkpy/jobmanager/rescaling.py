"""Rescaling a running job in place: which parallelism each vertex gets, decided without I/O.

Flink's adaptive scheduler changes a job's parallelism by restarting it from its latest
checkpoint, with no savepoint and no resubmission; flinkpy does the same when asked
(``flinkpy job rescale``, ``PUT /jobs/<id>/resource-requirements``). This module turns the
request (one parallelism for the job, or some per vertex) into the new parallelism of every
vertex, and refuses what cannot be: more subtasks than the max parallelism (the key groups) or
than a non-parallel operator allows, a forward edge between vertices that would then differ, or
no change at all. The restart itself is :meth:`ExecutionGraph.rescale`.

>>> vertices = {1: {"id": 1, "name": "Source: numbers", "parallelism": 2, "max_parallelism": 128, "uids": ["numbers"]},
...             2: {"id": 2, "name": "running sums", "parallelism": 2, "max_parallelism": 128, "uids": ["sums"]}}
>>> edges = [{"source": 1, "target": 2, "partitioner": "HASH"}]
>>> target_parallelism(vertices, edges, parallelism=3, per_vertex={})
{1: 3, 2: 3}
>>> target_parallelism(vertices, edges, parallelism=None, per_vertex={"sums": 4})
{1: 2, 2: 4}
"""

from __future__ import annotations

from typing import Any, Mapping

from flinkpy.errors import ConflictError, UsageError


def _vertex_named(vertices: Mapping[int, dict[str, Any]], name: str) -> int:
    """A vertex by its id, its name or the uid of one of its operators."""
    for vid, v in vertices.items():
        if name in (str(vid), v.get("name")) or name in (v.get("uids") or []):
            return vid
    known = ", ".join(f"{vid} ({v.get('name')})" for vid, v in sorted(vertices.items()))
    raise UsageError(f"the job has no vertex {name!r}", remedy=f"name a vertex by id, name or an operator's uid: {known}")


def target_parallelism(vertices: Mapping[int, dict[str, Any]], edges: list[dict[str, Any]], *, parallelism: int | None,
                       per_vertex: Mapping[str, int]) -> dict[int, int]:
    """The parallelism of every vertex after the rescale (vertex id -> subtasks)."""
    new = {vid: int(v["parallelism"]) for vid, v in vertices.items()}
    if parallelism is not None:
        for vid, v in vertices.items():
            cap = v.get("max_allowed_parallelism")
            new[vid] = min(parallelism, cap) if cap else parallelism
    for name, n in per_vertex.items():
        vid = _vertex_named(vertices, name)
        cap = vertices[vid].get("max_allowed_parallelism")
        if cap and n > cap:
            raise UsageError(f"vertex {vertices[vid].get('name')!r} runs at most {cap} subtask(s), not {n}",
                             remedy="leave it out, or give it at most that")
        new[vid] = n
    for vid, n in new.items():
        v = vertices[vid]
        if n < 1 or n > int(v["max_parallelism"]):
            raise UsageError(f"vertex {v.get('name')!r} cannot have parallelism {n}: its max parallelism is {v['max_parallelism']}",
                             remedy="rescale within 1..max parallelism (the key groups cannot be split further)")
    for e in edges:
        if e.get("partitioner") == "FORWARD" and new[e["source"]] != new[e["target"]]:
            a, b = vertices[e["source"]], vertices[e["target"]]
            raise UsageError(f"{a.get('name')!r} forwards to {b.get('name')!r}: both must keep the same parallelism "
                             f"(asked {new[e['source']]} and {new[e['target']]})",
                             remedy="rescale them together (-p N, or --vertex for both)")
    if all(new[vid] == int(v["parallelism"]) for vid, v in vertices.items()):
        raise ConflictError("the job already runs at that parallelism", remedy="see 'flinkpy job show'")
    return new
