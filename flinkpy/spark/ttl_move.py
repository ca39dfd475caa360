"""Keyed state with a time-to-live, moved between the engine and Spark: what the plan checks.

Both runners store a TTL state the same way, through the engine's own TTL wrapper
(:mod:`flinkpy.state.ttl`): each value, list element and map entry beside the time it was last
written (or read), so the values move unchanged (:mod:`.keyed_move`) and keep their timestamps.
What a move has to check is the job's TTL config against the snapshot's, which the snapshot's
`_metadata` names per state (``ttl_ms`` in each keyed state's summary), before anything stops.

>>> snapshot_ttl({"subtasks": [{"keyed_state": {"states": {"seen": {"kind": "list", "ttl_ms": 60000},
...     "count": {"kind": "value"}}}}]})
{'seen': 60000, 'count': None}
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping


def snapshot_ttl(op: Mapping[str, Any]) -> dict[str, int | None]:
    """Each keyed state's time-to-live (ms; None without) as a `_metadata` operator's summary says."""
    out: dict[str, int | None] = {}
    for s in op.get("subtasks", []):
        for name, entry in (((s.get("keyed_state") or {}).get("states")) or {}).items():
            ms = entry.get("ttl_ms") if isinstance(entry, Mapping) else None
            out[name] = int(ms) if ms is not None else out.get(name)
    return out


def ttl_mismatch(stored: Mapping[str, int | None], target: Any, *, undeclared: bool = True) -> str:
    """Why the snapshot's states cannot be restored into those of ``target`` (a
    :class:`~flinkpy.spark.state_move.ProgramOperator`) as its TTL config stands
    ("" when they can): as the engine's own restore (and Flink before 2.2, with a
    StateMigrationException), a state checkpointed with a time-to-live is refused by a job that
    declares it without, and the other way round; a changed TTL is taken (the TTL is the running
    job's, not the snapshot's). ``stored``: each keyed state's TTL (ms) in the snapshot, None
    for one without. ``undeclared``: refuse a TTL state the function does not declare in open()
    (onto Spark; the engine checks such a state when the function declares it)."""
    if target.declared_states is None:
        return ""
    late = sorted(name for name, ms in stored.items()
                  if undeclared and ms is not None and name not in target.declared_states and not name.startswith("_timers."))
    if late:  # on Spark kept in the late states' map, where nothing would tell its pairs from plain values
        return (f"its keyed state {', '.join(map(repr, late))} has a time-to-live and is not declared in the function's open(), "
                "the only place where the Spark runner can check its StateTtlConfig before the job starts: declare it in open(), or keep the "
                "job on the engine")
    wrong = sorted(name for name, ms in stored.items()
                   if name in target.declared_states and (ms is not None) != (name in target.ttl_states))
    if not wrong:
        return ""
    said = "; ".join(f"{name!r} was checkpointed {'with' if stored[name] is not None else 'without'} a time-to-live and "
                     f"is declared {'without' if stored[name] is not None else 'with'} one" for name in wrong)
    return (f"its keyed state {said}: keep the state's StateTtlConfig enabled (or disabled) as it was, or give the state a new name"
            " (the engine's own restore refuses it too, as Flink did before 2.2)")


def describe_keyed(names: Iterable[str], ttl: Iterable[str]) -> str:
    """The plan's words for moved keyed state: its names, and those with a time-to-live.

    >>> describe_keyed(["seen", "count"], ["seen"])
    'keyed state (count, seen; time-to-live of seen kept)'
    """
    listed, timed = ", ".join(sorted(names)), ", ".join(sorted(ttl))
    return f"keyed state ({listed}; time-to-live of {timed} kept)" if timed else f"keyed state ({listed})"
