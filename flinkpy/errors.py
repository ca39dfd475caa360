"""One exception hierarchy for flinkpy: every failure has a reason, a remedy and an exit code.

The CLI maps these to its documented exit codes in one place; the engine raises them with
messages that name the job, vertex, subtask or key involved and say what to do next.

>>> err = NotFoundError("job 3f2a... not found", remedy="list jobs with `flinkpy list -a`")
>>> err.exit_code
4
"""

from __future__ import annotations


class ExitCode:
    """Exit codes of the `flinkpy` command, documented in flinkpy(1)."""

    OK = 0
    INTERNAL = 1  # a bug: please report it, with --debug output
    USAGE = 2  # bad flag, bad flag value, missing argument
    UNREACHABLE = 3  # no cluster answers at the address
    NOT_FOUND = 4  # unknown job id, missing file, unknown TaskManager
    JOB_FAILED = 5  # the job reached FAILED
    TIMEOUT = 6  # an operation did not finish within its timeout
    INVALID_PROGRAM = 7  # the job file has a syntax error, raises before execute(), ...
    CONFIGURATION = 8  # unknown config key or bad value
    CONFLICT = 9  # the thing is in the wrong state (cluster already running, job not running)
    JOB_CANCELED = 10  # the job reached CANCELED while we waited for it
    AUTHENTICATION = 11  # the request lacked the cluster's token, or it was wrong
    SAVEPOINT_FAILED = 12  # a savepoint was triggered but did not complete
    VERIFY_FAILED = 13  # `flinkpy verify` found records lost or duplicated
    INTERRUPTED = 130  # Ctrl-C


class FlinkpyError(Exception):
    """Base of all errors flinkpy reports to users.

    ``remedy`` is one sentence that tells the operator what to do about it.
    """

    exit_code: int = ExitCode.INTERNAL

    def __init__(self, message: str, *, remedy: str | None = None, details: str | None = None):
        super().__init__(message)
        self.message = message
        self.remedy = remedy
        #: long diagnostic text, e.g. a remote traceback; shown with --debug or on request
        self.details = details

    def __str__(self) -> str:
        return self.message if not self.remedy else f"{self.message} ({self.remedy})"


class UsageError(FlinkpyError):
    exit_code = ExitCode.USAGE


class ClusterUnreachableError(FlinkpyError):
    exit_code = ExitCode.UNREACHABLE


class NotFoundError(FlinkpyError):
    exit_code = ExitCode.NOT_FOUND


class JobExecutionError(FlinkpyError):
    """The job failed; ``details`` carries the root cause with the user's traceback."""

    exit_code = ExitCode.JOB_FAILED

    def __init__(self, message: str, *, job_id: str | None = None, **kw):
        super().__init__(message, **kw)
        self.job_id = job_id


class JobCanceledError(FlinkpyError):
    exit_code = ExitCode.JOB_CANCELED


class OperationTimeoutError(FlinkpyError):
    exit_code = ExitCode.TIMEOUT


class InvalidProgramError(FlinkpyError):
    """The job file cannot be loaded or does not build a valid job graph."""

    exit_code = ExitCode.INVALID_PROGRAM


class ConfigurationError(FlinkpyError):
    exit_code = ExitCode.CONFIGURATION


class ConflictError(FlinkpyError):
    exit_code = ExitCode.CONFLICT


class AuthenticationError(FlinkpyError):
    exit_code = ExitCode.AUTHENTICATION


class SavepointFailedError(FlinkpyError):
    """A savepoint was accepted by the JobManager but failed; ``details`` holds its cause."""

    exit_code = ExitCode.SAVEPOINT_FAILED
