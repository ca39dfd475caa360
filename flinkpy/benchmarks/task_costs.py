"""Where a job's time went, task by task (the scaling part's per-process costs).

Every task reports its CPU time and its busy, idle and back-pressured time to the JobManager
with its metrics, the last report when it finishes; the job's details (``GET /jobs/<id>``)
keep them with each subtask's state timestamps. From those, per vertex: the CPU of all its
subtasks per record the job read; the busiest subtask's CPU time (on a machine with a core per
process, the job can take no less); the records and bytes per data buffer it sent (how full
buffers leave: a hash edge fills each of its p channels p times slower); and the medians of the
busy, idle and back-pressured shares of the subtasks' running time (each task's own clock).
Per job: the time from RUNNING to the last subtask running (deploying 2p processes and
connecting p x p channels).

CPU per record that stays flat as p grows means the work scales; a busiest subtask's CPU that
falls as 1/p means the job would, given the cores.

>>> details = {"timestamps": {"RUNNING": 1000}, "vertices": [{"name": "Source: numbers", "subtasks": [
...     {"timestamps": {"RUNNING": 1100, "FINISHED": 3100},
...      "metrics": {"cpu_ms": 1500, "wall_ms": 2000, "busy_ms": 1800, "idle_ms": 0, "backpressured_ms": 200,
...                  "numRecordsOut": 1_000_000, "numBuffersOut": 250, "numBytesOut": 8_000_000}}]}]}
>>> costs = task_costs(details, 1_000_000)
>>> costs.start_s, costs.vertices[0].cpu_ns_per_record, costs.vertices[0].busy, costs.busiest_cpu_s
(0.1, 1500.0, 0.9, 1.5)
>>> costs.vertices[0].records_per_buffer, costs.vertices[0].bytes_per_buffer
(4000.0, 32000.0)
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class VertexCost:
    name: str
    subtasks: int
    #: all subtasks' CPU time over the job's records, in nanoseconds
    cpu_ns_per_record: float
    #: the CPU seconds of the busiest subtask
    busiest_cpu_s: float
    #: medians over the subtasks of each share of their running time (RUNNING to FINISHED)
    busy: float
    idle: float
    backpressured: float
    #: records sent per data buffer over all its subtasks' output channels, and the buffers'
    #: mean size in bytes (None for a vertex that sends nothing downstream)
    records_per_buffer: float | None = None
    bytes_per_buffer: float | None = None
    #: the CPU seconds a subtask spends whatever its records (the mean over the subtasks of a run
    #: of almost no records: starting, connecting, finishing); None until :func:`net_of` says
    fixed_cpu_s: float | None = None


@dataclass(frozen=True)
class TaskCosts:
    #: seconds from the job's RUNNING to its last subtask's RUNNING
    start_s: float
    vertices: list[VertexCost]

    @property
    def busiest_cpu_s(self) -> float:
        return max((v.busiest_cpu_s for v in self.vertices), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {"start_s": self.start_s, "busiest_cpu_s": self.busiest_cpu_s, "vertices": [asdict(v) for v in self.vertices]}


def _share(part: float, whole: float) -> float:
    return min(1.0, part / whole) if whole > 0 else 0.0


def task_costs(details: dict[str, Any], records: int) -> TaskCosts:
    """The costs of a finished job from its details; ``records``: what its source read."""
    began = details["timestamps"]["RUNNING"]
    vertices: list[VertexCost] = []
    running_at = began
    for v in details["vertices"]:
        subtasks = v["subtasks"]
        cpu_s, busy, idle, bp = [], [], [], []
        records_out = buffers_out = bytes_out = 0
        for s in subtasks:
            m, ts = s.get("metrics") or {}, s["timestamps"]
            running_at = max(running_at, ts.get("RUNNING", began))
            # the task's own clock of its running time, else its timestamps'
            span = m.get("wall_ms") or ts.get("FINISHED", ts.get("RUNNING", began)) - ts.get("RUNNING", began)
            cpu_s.append(m.get("cpu_ms", 0.0) / 1000)
            records_out += m.get("numRecordsOut", 0)
            buffers_out += m.get("numBuffersOut", 0)
            bytes_out += m.get("numBytesOut", 0)
            busy.append(_share(m.get("busy_ms", 0.0), span))
            idle.append(_share(m.get("idle_ms", 0.0), span))
            bp.append(_share(m.get("backpressured_ms", 0.0), span))
        vertices.append(VertexCost(
            v["name"], len(subtasks), sum(cpu_s) / max(1, records) * 1e9, max(cpu_s, default=0.0),
            statistics.median(busy) if busy else 0.0, statistics.median(idle) if idle else 0.0,
            statistics.median(bp) if bp else 0.0,
            records_out / buffers_out if buffers_out else None, bytes_out / buffers_out if buffers_out else None,
        ))
    return TaskCosts((running_at - began) / 1000, vertices)


def net_of(full: TaskCosts, tiny: TaskCosts, records: int, tiny_records: int) -> TaskCosts:
    """``full``'s costs with each vertex's CPU per record taken net of what the same job with
    almost no records (``tiny``, at the same parallelism) spent: the records' own cost, which a
    long job's tasks pay, apart from each task's fixed cost of starting, which a short one's
    mostly are.

    >>> v = VertexCost("Map", 2, 1100.0, 0.6, 0.9, 0.1, 0.0)
    >>> net = net_of(TaskCosts(0.2, [v]), TaskCosts(0.2, [replace(v, cpu_ns_per_record=100_000.0, busiest_cpu_s=0.06)]),
    ...              1_000_000, 1000)
    >>> round(net.vertices[0].cpu_ns_per_record), net.vertices[0].fixed_cpu_s, net.vertices[0].busiest_cpu_s
    (1001, 0.05, 0.6)
    """
    vertices = []
    for v, t in zip(full.vertices, tiny.vertices):
        fixed_total = t.cpu_ns_per_record * tiny_records / 1e9  # the tiny run's CPU, all subtasks
        net = max(0.0, v.cpu_ns_per_record * records / 1e9 - fixed_total) / max(1, records - tiny_records) * 1e9
        vertices.append(replace(v, cpu_ns_per_record=net, fixed_cpu_s=fixed_total / max(1, t.subtasks)))
    return TaskCosts(full.start_s, vertices)


def fetch(address: str, token: str, job_id: str) -> dict[str, Any]:
    """A job's details from the JobManager's REST API."""
    from flinkpy.network.rest_client import RestClient

    return RestClient(address, token).request("GET", f"/jobs/{job_id}")
