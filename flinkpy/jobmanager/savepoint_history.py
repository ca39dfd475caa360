"""A job's savepoints: the periodic schedule, the history, and its retention, decided without I/O.

Flink's Kubernetes operator takes savepoints of a job on a period and keeps a history of them,
disposing of old ones by count and by age; flinkpy's JobManager does the same for each job. The
schedule comes from the job's configuration (``execution.checkpointing.savepoint.interval``,
``...history.max-count``, ``...history.max-age``) and can be changed while the job runs
(``flinkpy savepoint schedule``). Every savepoint of the job that completes is remembered with
what triggered it; retention disposes of *periodic* savepoints only (manual, upgrade and stop
savepoints are the operator's), and never of a protected one: the snapshot the job was started
from, or the one a restart of the job would restore from now.

>>> h = SavepointHistory(SavepointSchedule(interval_ms=1000, max_count=2, max_age_ms=10_000), now_ms=0)
>>> h.due(999), h.due(1000)
(False, True)
>>> h.triggered(1000)
>>> for n in range(1, 5):
...     h.completed(SavepointEntry(n, f"/sp/savepoint-{n}", n * 1000, SavepointTrigger.PERIODIC))
>>> [e.checkpoint_id for e in h.expired(5000, protected={"/sp/savepoint-1"})]
[2]
>>> [e.checkpoint_id for e in h.entries], h.disposed
([1, 3, 4], 1)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Collection, Mapping

from flinkpy.config import typed_value

INTERVAL_KEY = "execution.checkpointing.savepoint.interval"
MAX_COUNT_KEY = "execution.checkpointing.savepoint.history.max-count"
MAX_AGE_KEY = "execution.checkpointing.savepoint.history.max-age"


class SavepointTrigger(enum.Enum):
    """Who asked for a savepoint (Flink's operator: SnapshotTriggerType, plus stop)."""

    MANUAL = "manual"
    PERIODIC = "periodic"
    UPGRADE = "upgrade"
    STOP = "stop"

    @classmethod
    def named(cls, name: str) -> SavepointTrigger:
        try:
            return cls(name.lower())
        except ValueError:
            known = ", ".join(t.value for t in cls)
            raise ValueError(f"{name!r} is not a savepoint trigger ({known})") from None


@dataclass(frozen=True)
class SavepointSchedule:
    """Periodic savepoints of one job (``interval_ms`` None: none) and the retention of them."""

    interval_ms: int | None
    max_count: int
    max_age_ms: int

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], source: str) -> SavepointSchedule:
        """The schedule a job's configuration asks for (ConfigurationError names a bad key)."""
        interval = typed_value(settings, INTERVAL_KEY, source=source)
        return cls(interval or None, typed_value(settings, MAX_COUNT_KEY, source=source), typed_value(settings, MAX_AGE_KEY, source=source))

    def to_json(self) -> dict[str, Any]:
        return {"interval": self.interval_ms, "max-count": self.max_count, "max-age": self.max_age_ms}


@dataclass(frozen=True)
class SavepointEntry:
    """One completed savepoint of the job."""

    checkpoint_id: int
    location: str
    timestamp_ms: int
    trigger: SavepointTrigger

    def to_json(self) -> dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id, "location": self.location, "timestamp": self.timestamp_ms,
                "trigger": self.trigger.value}


def _norm(location: str) -> str:
    return location.rstrip("/").removesuffix("/_metadata")


class SavepointHistory:
    """The savepoints one job took (oldest first), its schedule and when one is due.

    Pure: the JobManager passes the time in, triggers what :meth:`due` says, reports completed
    savepoints, and disposes of what :meth:`expired` returns.
    """

    def __init__(self, schedule: SavepointSchedule, now_ms: int) -> None:
        self.schedule = schedule
        self.entries: list[SavepointEntry] = []
        #: the period counts from here: when the schedule was set, then each periodic trigger
        self.anchor_ms = now_ms
        #: how many periodic savepoints retention disposed of
        self.disposed = 0
        #: the savepoint or retained checkpoint the job was started from (never disposed of)
        self.started_from: str | None = None

    def reschedule(self, now_ms: int, *, interval_ms: int | None, max_count: int | None = None, max_age_ms: int | None = None) -> None:
        """A new period (None: no periodic savepoints), counted from now; retention bounds that
        are None stay as they were."""
        self.schedule = replace(self.schedule, interval_ms=interval_ms or None,
                                max_count=self.schedule.max_count if max_count is None else max_count,
                                max_age_ms=self.schedule.max_age_ms if max_age_ms is None else max_age_ms)
        self.anchor_ms = now_ms

    def due(self, now_ms: int) -> bool:
        interval = self.schedule.interval_ms
        return interval is not None and now_ms - self.anchor_ms >= interval

    def next_ms(self) -> int | None:
        interval = self.schedule.interval_ms
        return None if interval is None else self.anchor_ms + interval

    def triggered(self, now_ms: int) -> None:
        """A periodic savepoint was asked for (the next one is due a period later, whatever its fate)."""
        self.anchor_ms = now_ms

    def completed(self, entry: SavepointEntry) -> None:
        self.entries.append(entry)

    def expired(self, now_ms: int, protected: Collection[str]) -> list[SavepointEntry]:
        """Remove and return the periodic savepoints retention disposes of: beyond the newest
        ``max_count`` periodic ones or older than ``max_age_ms``; never the newest savepoint of
        the job, nor a ``protected`` location."""
        keep = {_norm(p) for p in protected if p}
        newest = max(self.entries, key=lambda e: (e.timestamp_ms, e.checkpoint_id), default=None)
        periodic = sorted((e for e in self.entries if e.trigger is SavepointTrigger.PERIODIC),
                          key=lambda e: (e.timestamp_ms, e.checkpoint_id), reverse=True)
        gone = [
            e for rank, e in enumerate(periodic)
            if (rank >= self.schedule.max_count or now_ms - e.timestamp_ms > self.schedule.max_age_ms)
            and e is not newest and _norm(e.location) not in keep
        ]
        self.entries = [e for e in self.entries if e not in gone]
        self.disposed += len(gone)
        return gone

    def to_json(self) -> dict[str, Any]:
        """The history as ``GET /jobs/<id>`` shows it (newest first)."""
        return {"schedule": {**self.schedule.to_json(), "next": self.next_ms()},
                "history": [e.to_json() for e in reversed(self.entries)], "disposed": self.disposed,
                "started-from": self.started_from}
