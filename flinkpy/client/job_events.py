"""What an attached client tells the user while its job runs: failures, restarts, waits.

An attached ``flinkpy run`` used to be silent until the job ended, so a job failing and
restarting in a loop (checkpoint storage unwritable, a bug hit on every record) looked like a job
that runs. :class:`JobEventReporter` turns successive views of the job (its REST document and
checkpoint statistics) into one line per event, worded as Flink's logs word them; it is pure, so
it is tested on made-up documents. :func:`watch_job` is the thread that feeds it over REST.

>>> r = JobEventReporter("3f2a")
>>> r.lines({"state": "RUNNING", "events": []})
[]
>>> r.lines({"state": "RESTARTING", "restarts": 0, "events": [{"type": "restarting", "tasks": 2,
...     "backoff_ms": 100, "cause": "ValueError: boom"}], "vertices": [{"parallelism": 2}]})
['Job 3f2a switched from RUNNING to RESTARTING: ValueError: boom (restarting 2 task(s) in 100 ms)']
"""

from __future__ import annotations

import re
import threading
from typing import Any, Callable


class JobEventReporter:
    """Remembers what was already said about one job; :meth:`lines` returns what is new."""

    def __init__(self, job_id: str, *, embedded: bool = False) -> None:
        self.job_id = job_id
        #: the job runs on an embedded cluster, gone when the run ends: suggest no command to
        #: ask it later
        self.embedded = embedded
        self.state: str | None = None
        self.seen_events = 0
        self.failed_checkpoints = 0
        self.last_cause: str | None = None
        self.same_cause = 0

    def lines(self, job: dict[str, Any], checkpoints: dict[str, Any] | None = None) -> list[str]:
        out: list[str] = []
        # a job restarts from RUNNING (the first look may already see its first restart)
        previous = self.state if self.state not in (None, "CREATED") else "RUNNING"
        events = job.get("events") or []
        for event in events[self.seen_events:]:
            line = self._event_line(event, previous, job)
            if line:
                out.append(line)
            if event.get("type") == "restarting" and self._is_full(event, job):
                previous = "RESTARTING"
            elif event.get("type") == "restarted":
                previous = "RUNNING"
        self.seen_events = len(events)
        if checkpoints is not None:
            # a checkpoint failure that caused a restart was just said with it
            out += [c for c in self._checkpoint_lines(checkpoints) if not any(c.split("): ", 1)[-1] in line for line in out)]
        self.state = job.get("state", self.state)
        return out

    @staticmethod
    def _is_full(event: dict[str, Any], job: dict[str, Any]) -> bool:
        total = sum(int(v.get("parallelism", 0)) for v in job.get("vertices") or [])
        return not total or int(event.get("tasks", 0)) >= total

    def _event_line(self, event: dict[str, Any], previous: str, job: dict[str, Any]) -> str | None:
        jid, kind = self.job_id, event.get("type")
        if kind == "restarting":
            cause = str(event.get("cause", "unknown cause"))
            repeat = self._repeat(cause)
            how = f"restarting {event.get('tasks', '?')} task(s) in {event.get('backoff_ms', 0)} ms{repeat}"
            if self._is_full(event, job) and previous != "RESTARTING":
                return f"Job {jid} switched from {previous} to RESTARTING: {cause} ({how})"
            return f"Job {jid}: {event.get('failover', 'region')} failover after a failure: {cause} ({how})"
        if kind == "restarted":
            return f"Job {jid} switched from RESTARTING to RUNNING (restart {event.get('restarts', '?')})"
        if kind == "waiting-for-resources":
            return f"Job {jid} is waiting for slots: {event.get('message', '')}"
        if kind == "failed":
            cause = event.get("cause") or self.last_cause
            if cause is None:
                cause = "its traceback follows" if self.embedded else f"see 'flinkpy job exceptions {jid}'"
            return f"Job {jid} switched from {previous} to FAILING: {event.get('reason', 'failed')}; last cause: {cause}"
        if kind == "recovered-by-leader":
            return f"Job {jid} was recovered by a new leading JobManager"
        return None

    def _repeat(self, cause: str) -> str:
        """A failure that repeats is how a job that cannot make progress shows itself: say so.
        Causes that differ only in numbers (checkpoint ids, records, seconds left) are the same."""
        if self.last_cause is not None and _shape(cause) == _shape(self.last_cause):
            self.same_cause += 1
            self.last_cause = cause
        else:
            self.last_cause, self.same_cause = cause, 1
        return f"; the same failure {self.same_cause} times in a row" if self.same_cause > 1 else ""

    def _checkpoint_lines(self, checkpoints: dict[str, Any]) -> list[str]:
        failed = int((checkpoints.get("counts") or {}).get("failed", 0))
        if failed <= self.failed_checkpoints:
            return []
        self.failed_checkpoints = failed
        latest = (checkpoints.get("latest") or {}).get("failed") or {}
        return [f"Job {self.job_id}: checkpoint {latest.get('id', '?')} failed ({failed} failed so far): "
                f"{latest.get('failure_message') or 'no reason given'}"]


def _shape(cause: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "#", cause)


def watch_job(rest: Any, job_id: str, emit: Callable[[str], None], *, interval_s: float = 0.5,
              embedded: bool = False) -> Callable[[], None]:
    """Report the job's events through ``emit`` from a background thread until the returned
    function is called (it stops the thread and reports what is left)."""
    reporter = JobEventReporter(job_id, embedded=embedded)
    done = threading.Event()

    def look() -> None:
        try:
            job = rest.job(job_id)
            try:
                checkpoints = rest.checkpoints(job_id)
            except Exception:  # noqa: BLE001 - statistics are a courtesy; the job's events are not
                checkpoints = None
        except Exception:  # noqa: BLE001 - a failover or a busy JobManager: look again later
            return
        for line in reporter.lines(job, checkpoints):
            emit(line)

    def loop() -> None:
        while not done.wait(interval_s):
            look()

    thread = threading.Thread(target=loop, name=f"job-events-{job_id}", daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        thread.join(5)
        look()

    return stop
