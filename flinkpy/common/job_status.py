"""The states a job goes through, with Flink's names.

>>> JobStatus.FINISHED.is_globally_terminal_state()
True
>>> JobStatus.SUSPENDED.is_globally_terminal_state(), JobStatus.SUSPENDED.is_terminal_state()
(False, True)
"""

from __future__ import annotations

import enum


class JobStatus(enum.Enum):
    """A job's status; the value is Flink's name, as shown by the REST API and the CLI."""

    INITIALIZING = "INITIALIZING"
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    RESTARTING = "RESTARTING"
    SUSPENDED = "SUSPENDED"
    RECONCILING = "RECONCILING"

    def is_globally_terminal_state(self) -> bool:
        """The job will never run again, on any JobManager (FAILED, CANCELED, FINISHED)."""
        return self in _GLOBALLY_TERMINAL

    def is_terminal_state(self) -> bool:
        """This JobManager is done with the job; SUSPENDED jobs may resume on another."""
        return self in _GLOBALLY_TERMINAL or self is JobStatus.SUSPENDED

    def __str__(self) -> str:
        return self.value


_GLOBALLY_TERMINAL = frozenset({JobStatus.FAILED, JobStatus.CANCELED, JobStatus.FINISHED})
