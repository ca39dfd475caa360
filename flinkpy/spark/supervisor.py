"""Supervising one Spark streaming query as a flinkpy job: a pure state machine.

The driver process owns the SparkSession and the StreamingQuery; this class owns the job's
life: its state, its restart strategy, its exception history and its events. The driver feeds
it what happened (the query started, failed, finished, an operator cancelled it) with the time
in milliseconds, and it answers what to do next. It reads no clock, touches no Spark and does
no I/O, so the restart decisions are tested with plain numbers.

States follow Flink's job states: INITIALIZING (translating, starting the session) -> RUNNING
-> RESTARTING (waiting the strategy's backoff) -> RUNNING ... -> FINISHED | FAILED | CANCELED.

>>> from flinkpy.common.restart_backoff import FixedDelay
>>> s = SparkJobSupervisor("ab" * 16, "sums", FixedDelay(attempts=1, delay_ms=100), now_ms=0)
>>> s.started(5)
>>> s.failed(10, {"class": "PythonException", "message": "boom", "stack-trace": "..."})
Restart(at_ms=110, attempt=1)
>>> s.state, s.restarts
('RESTARTING', 1)
>>> s.started(120); s.failed(130, {"class": "PythonException", "message": "boom again"})
GiveUp(reason='the restart strategy gave up')
>>> s.state, len(s.exceptions)
('FAILED', 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flinkpy.common.restart_backoff import RestartBackoffTimeStrategy

TERMINAL = frozenset({"FINISHED", "FAILED", "CANCELED"})

#: what an exception-history entry names as the failed "task": the whole query, since Spark
#: retries (or fails) its own tasks and reports one failure per query
TASK_NAME = "Spark streaming query"


@dataclass(frozen=True)
class Restart:
    """Start the query again from its checkpoint location at ``at_ms``."""

    at_ms: int
    attempt: int


@dataclass(frozen=True)
class GiveUp:
    """The job has failed for good."""

    reason: str


class SparkJobSupervisor:
    """The job-level state of one Spark query; see the module docstring."""

    def __init__(self, job_id: str, name: str, strategy: RestartBackoffTimeStrategy | None, *, now_ms: int) -> None:
        self.job_id = job_id
        self.name = name
        self.strategy = strategy
        self.state = "INITIALIZING"
        self.timestamps: dict[str, int] = {"CREATED": now_ms, "INITIALIZING": now_ms}
        self.restarts = 0
        self.attempt = 0  # query runs started so far
        self.exceptions: list[dict[str, Any]] = []
        self.root_exception: dict[str, Any] | None = None
        self.events: list[dict[str, Any]] = []
        self.pending_restart: Restart | None = None
        self.cancel_requested = False

    # -- events ------------------------------------------------------------------------------

    def _transition(self, state: str, now_ms: int) -> None:
        self.state = state
        self.timestamps[state] = now_ms

    def started(self, now_ms: int) -> None:
        """The query (re)started: RUNNING."""
        if self.state in TERMINAL:
            return
        self.attempt += 1
        self.pending_restart = None
        self._transition("RUNNING", now_ms)

    def failed(self, now_ms: int, cause: dict[str, Any]) -> Restart | GiveUp:
        """The query terminated with an exception, or could not be (re)started.

        ``cause``: ``class``, ``message`` and ``stack-trace`` (as an execution result's
        failure-cause). The failure is recorded in the exception history whatever follows.
        """
        entry = {
            "exceptionName": str(cause.get("class") or "Exception"),
            "message": str(cause.get("message") or ""),
            "stacktrace": str(cause.get("stack-trace") or ""),
            "timestamp": now_ms,
            "taskName": TASK_NAME,
            "subtask": 0,
            "attempt": self.attempt,
            "location": cause.get("location"),
            "taskManagerId": None,
            "restarted": False,
        }
        self.exceptions.append(entry)
        self.root_exception = entry
        if self.state in TERMINAL:
            return GiveUp(f"the job is already {self.state}")
        if self.cancel_requested:
            self._transition("CANCELED", now_ms)
            return GiveUp("the job was cancelled")
        strategy = self.strategy
        if strategy is not None:
            strategy.notify_failure(now_ms)
        if strategy is None or not strategy.can_restart():
            reason = "the restart strategy gave up" if strategy is not None else "no restart strategy"
            self.events.append({"timestamp": now_ms, "type": "failed", "reason": reason})
            self._transition("FAILED", now_ms)
            return GiveUp(reason)
        entry["restarted"] = True
        self.restarts += 1
        backoff = strategy.backoff_ms()
        self.pending_restart = Restart(now_ms + backoff, self.restarts)
        self.events.append(
            {"timestamp": now_ms, "type": "restart", "attempt": self.restarts, "backoff_ms": backoff,
             "strategy": strategy.type, "cause": entry["exceptionName"]}
        )
        self._transition("RESTARTING", now_ms)
        return self.pending_restart

    def finished(self, now_ms: int) -> None:
        """The query ended without an exception (a bounded input is done, or a stop)."""
        if self.state not in TERMINAL:
            self._transition("CANCELED" if self.cancel_requested else "FINISHED", now_ms)

    def cancel(self, now_ms: int) -> bool:
        """An operator asked to cancel; False when the job already ended (nothing to cancel)."""
        if self.state in TERMINAL:
            return False
        self.cancel_requested = True
        self.events.append({"timestamp": now_ms, "type": "cancel-requested"})
        if self.state in ("RESTARTING", "INITIALIZING"):
            self.pending_restart = None
            self._transition("CANCELED", now_ms)
        return True

    def canceled(self, now_ms: int) -> None:
        """The query stopped after a cancel request."""
        if self.state not in TERMINAL:
            self._transition("CANCELED", now_ms)

    def note(self, now_ms: int, event: str, /, **details: Any) -> None:
        """Record an event of the job's history (savepoint, restore, fault...)."""
        self.events.append({**details, "timestamp": now_ms, "type": event})

    # -- documents (Flink's REST shapes, as flinkpy's JobManager serves them) ----------------

    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    def summary(self, now_ms: int) -> dict[str, Any]:
        start = self.timestamps["CREATED"]
        end = self.timestamps[self.state] if self.is_terminal() else -1
        running = int(self.state == "RUNNING")
        return {
            "jid": self.job_id,
            "name": self.name,
            "state": self.state,
            "start-time": start,
            "end-time": end,
            "duration": (end if end > 0 else now_ms) - start,
            "last-modification": max(self.timestamps.values()),
            "tasks": {"running": running, "total": 1},
            "restarts": self.restarts,
            "runner": "spark",
        }

    def restart_strategy(self) -> dict[str, Any]:
        return self.strategy.describe() if self.strategy is not None else {"type": "none"}

    def exceptions_document(self) -> dict[str, Any]:
        root = self.root_exception
        return {
            "root-exception": root["stacktrace"] or f"{root['exceptionName']}: {root['message']}" if root else None,
            "timestamp": root["timestamp"] if root else None,
            "exceptionHistory": {"entries": list(reversed(self.exceptions)), "truncated": False},
        }

    def execution_result(self) -> dict[str, Any]:
        """``{"status": {"id"}, "job-execution-result"}`` as /jobs/<id>/execution-result answers."""
        if not self.is_terminal():
            return {"status": {"id": "IN_PROGRESS"}}
        status = {"FINISHED": "SUCCEEDED", "FAILED": "FAILED", "CANCELED": "CANCELED"}[self.state]
        start = self.timestamps.get("RUNNING", self.timestamps["CREATED"])
        result: dict[str, Any] = {
            "id": self.job_id,
            "application-status": status,
            "net-runtime": max(0, self.timestamps[self.state] - start),
            "accumulator-results": {},
        }
        if self.state == "FAILED" and self.root_exception:
            r = self.root_exception
            result["failure-cause"] = {"class": r["exceptionName"], "message": r["message"],
                                       "stack-trace": r["stacktrace"], "task": r["taskName"]}
        return {"status": {"id": "COMPLETED"}, "job-execution-result": result}
