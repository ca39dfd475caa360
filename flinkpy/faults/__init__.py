"""Fault injection that travels through the cluster: pure planning and journal logic.

The JobManager validates a fault's target, journals it in the job's record and hands it to the
TaskManager that hosts the target; the TaskManager (or the task process, for faults inside user
code and checkpoints) carries it out. This package holds only what needs no I/O: the fault
kinds (:mod:`flinkpy.faults.kinds`, one registry), the exception an injected ``raise`` throws,
the journal's records (:mod:`flinkpy.faults.journal`), target choice, and the seeded chaos
schedule (:mod:`flinkpy.faults.chaos`).

>>> choose(["b", "a", "c"], 0.5)
'b'
"""

from __future__ import annotations

from typing import Any, Sequence, TypeVar

from flinkpy.faults.journal import FaultRecord, journal_view, record
from flinkpy.faults.kinds import KINDS, FaultTarget, kinds_of

T = TypeVar("T")

#: faults aimed at one job's tasks on flinkpy's engine (POST /jobs/<jid>/faults)
JOB_FAULTS = kinds_of(FaultTarget.TASK)
#: faults aimed at the cluster (POST /cluster/faults)
CLUSTER_FAULTS = kinds_of(FaultTarget.TASKMANAGER, FaultTarget.STORAGE)
#: the parameters a job fault's journal entry keeps: its kinds' parameters, in registry order
JOURNALED = tuple(dict.fromkeys(p for name in JOB_FAULTS for p in KINDS[name].params))
SIGNALS = ("KILL", "TERM")

__all__ = ["CLUSTER_FAULTS", "JOB_FAULTS", "JOURNALED", "SIGNALS", "FaultRecord", "InjectedFault", "choose",
           "describe_target", "journal_view", "record"]


class InjectedFault(RuntimeError):
    """Raised from inside an operator's call path by ``flinkpy fault raise``: a stand-in for a
    bug in user code, named as such in the job's exception history."""


def choose(candidates: Sequence[T], r: float) -> T:
    """Pick from ``candidates`` (in sorted order) with the schedule's number ``r`` in [0, 1).

    The same seed and the same candidates give the same target, whatever their listing order.
    """
    ordered = sorted(candidates)
    if not ordered:
        raise ValueError("no candidates to choose from")
    return ordered[min(int(r * len(ordered)), len(ordered) - 1)]


def describe_target(target: dict[str, Any]) -> str:
    """'subtask 1 of vertex 2 (sums) on tm-1 (pid 123)', 'TaskManager tm-1', 'checkpoint storage'."""
    if "vertex" in target:
        text = f"subtask {target['subtask']} of vertex {target['vertex']} ({target.get('vertex-name', '?')})"
        if target.get("operator"):
            text += f", operator {target['operator']}"
        if target.get("taskmanager-id"):
            text += f" on {target['taskmanager-id']}"
        if target.get("pid"):
            text += f" (pid {target['pid']})"
        return text
    if "executor-id" in target:
        return f"Spark executor {target['executor-id']} of {target.get('application-id', '?')} (pid {target.get('pid', '?')})"
    if "taskmanager-id" in target:
        return f"TaskManager {target['taskmanager-id']}" + (f" (pid {target['pid']})" if target.get("pid") else "")
    what = str(target.get("what", "the cluster"))
    if target.get("pid") and target.get("under"):  # a Spark Python worker
        return f"{what} (pid {target['pid']}, under the {target['under']})"
    return what
