"""A job's fault journal: one :class:`FaultRecord` per injected fault.

A record is OPEN while it is the latest fault of its journal (its effect is still what the job
goes through now) and CLOSED once the next fault is recorded: then its after is the job as the
next fault found it, so each fault shows its own effect, not the last one's.
:meth:`FaultRecord.to_json` is the entry ``GET /jobs/<id>/faults`` and ``flinkpy fault ...
--json`` print (scripts read it).

>>> journal = []
>>> _ = record(journal, FaultRecord(1, "kill-task", {}, {}, "RUNNING", 0))
>>> _ = record(journal, FaultRecord(2, "raise", {}, {}, "RUNNING", 1))
>>> [r.outcome.value for r in journal]
['CLOSED', 'OPEN']
>>> [(e["restarts-before"], e["restarts-after"]) for e in journal_view(journal, "RUNNING", 3)]
[(0, 1), (1, 3)]
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any


class FaultOutcome(enum.Enum):
    #: the latest fault: its after is the job now
    OPEN = "OPEN"
    #: a later fault was recorded: its after is the job as that one found it
    CLOSED = "CLOSED"


@dataclass
class FaultRecord:
    time_ms: int
    kind: str
    #: what was hit (see :func:`flinkpy.faults.describe_target`)
    target: dict[str, Any]
    #: the request parameters kept (those not given are left out)
    params: dict[str, Any]
    #: the job's state and restarts when the fault was injected ("-" and 0 in the cluster's journal)
    state_before: str
    restarts_before: int
    outcome: FaultOutcome = FaultOutcome.OPEN
    state_after: str | None = None
    restarts_after: int | None = None
    #: the jobs a cluster fault hit (only in the cluster's journal)
    jobs: list[str] | None = None

    @classmethod
    def injected(cls, time_ms: int, kind: str, target: dict[str, Any], state_before: str, restarts_before: int,
                 **params: Any) -> FaultRecord:
        """A fault just injected; ``params`` that are None are not kept."""
        return cls(time_ms, kind, target, {k: v for k, v in params.items() if v is not None}, state_before, restarts_before)

    def close(self, state: str, restarts: int) -> None:
        self.outcome, self.state_after, self.restarts_after = FaultOutcome.CLOSED, state, restarts

    def to_json(self) -> dict[str, Any]:
        doc = {
            "time": self.time_ms,
            "kind": self.kind,
            "target": dict(self.target),
            "params": dict(self.params),
            "state-before": self.state_before,
            "restarts-before": self.restarts_before,
            "state-after": self.state_after,
            "restarts-after": self.restarts_after,
        }
        if self.jobs is not None:
            doc["jobs"] = list(self.jobs)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FaultRecord:
        closed = doc.get("state-after") is not None
        return cls(int(doc["time"]), str(doc["kind"]), dict(doc.get("target") or {}), dict(doc.get("params") or {}),
                   str(doc["state-before"]), int(doc["restarts-before"]),
                   FaultOutcome.CLOSED if closed else FaultOutcome.OPEN,
                   doc.get("state-after"), doc.get("restarts-after"),
                   None if doc.get("jobs") is None else list(doc["jobs"]))

    def seen_at(self, state: str, restarts: int) -> FaultRecord:
        """This record as shown now: an open one takes the job's state and restarts now
        (without keeping them: a later read shows later figures)."""
        if self.outcome is FaultOutcome.CLOSED:
            return self
        return dataclasses.replace(self, state_after=state, restarts_after=restarts)


def record(entries: list[FaultRecord], entry: FaultRecord) -> FaultRecord:
    """Append ``entry`` to a journal, closing the open fault before it with the job as the new
    one found it."""
    for e in entries:
        if e.outcome is FaultOutcome.OPEN:
            e.close(entry.state_before, entry.restarts_before)
    entries.append(entry)
    return entry


def journal_view(entries: list[FaultRecord], state: str, restarts: int) -> list[dict[str, Any]]:
    """The journal's entries to show (JSON), the open one with the job's state and restarts now."""
    return [e.seen_at(state, restarts).to_json() for e in entries]

