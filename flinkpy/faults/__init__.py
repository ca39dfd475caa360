"""Fault injection that travels through the cluster: pure planning and journal logic.

The JobManager validates a fault's target, journals it in the job's record and hands it to the
TaskManager that hosts the target; the TaskManager (or the task process, for faults inside user
code and checkpoints) carries it out. This package holds only what needs no I/O: the fault
kinds, the exception an injected ``raise`` throws, the journal entry, target choice, and the
seeded chaos schedule (:mod:`flinkpy.faults.chaos`).

>>> choose(["b", "a", "c"], 0.5)
'b'
"""

from __future__ import annotations

from typing import Any, Sequence, TypeVar

T = TypeVar("T")

#: faults aimed at one job's tasks (POST /jobs/<jid>/faults)
#: "network" slows (params delay_ms, seconds) or breaks (drop) one task's output channels
JOB_FAULTS = ("kill-task", "pause-task", "raise", "fail-checkpoint", "network")
#: faults aimed at the cluster (POST /cluster/faults)
CLUSTER_FAULTS = ("kill-taskmanager", "pause-taskmanager", "storage-outage")
SIGNALS = ("KILL", "TERM")


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


def journal_entry(time_ms: int, kind: str, target: dict[str, Any], state_before: str, restarts_before: int, **params: Any) -> dict[str, Any]:
    """One line of a job's fault journal. Its ``state-after`` and ``restarts-after`` are what
    the job went through until the next fault (see :func:`record`), or until now for the
    latest one (see :func:`journal_view`)."""
    return {
        "time": time_ms,
        "kind": kind,
        "target": target,
        "params": {k: v for k, v in params.items() if v is not None},
        "state-before": state_before,
        "restarts-before": restarts_before,
        "state-after": None,
        "restarts-after": None,
    }


def record(entries: list[dict[str, Any]], entry: dict[str, Any]) -> dict[str, Any]:
    """Append ``entry`` to a journal, closing the fault before it: that fault's after is the
    job as the new one found it (so each fault shows its own effect, not the last one's).

    >>> journal = []
    >>> _ = record(journal, journal_entry(1, "kill-task", {}, "RUNNING", 0))
    >>> _ = record(journal, journal_entry(2, "raise", {}, "RUNNING", 1))
    >>> [(e["restarts-before"], e["restarts-after"]) for e in journal_view(journal, "RUNNING", 3)]
    [(0, 1), (1, 3)]
    """
    for e in entries:
        if e["state-after"] is None:
            e["state-after"] = entry["state-before"]
            e["restarts-after"] = entry["restarts-before"]
    entries.append(entry)
    return entry


def journal_view(entries: list[dict[str, Any]], state: str, restarts: int) -> list[dict[str, Any]]:
    """Copies of a journal's entries to show; the open one (the latest fault) shows the job's
    state and restarts now, without keeping them (a later read shows later figures)."""
    view = []
    for e in entries:
        e = dict(e)
        if e["state-after"] is None:
            e["state-after"], e["restarts-after"] = state, restarts
        view.append(e)
    return view


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
