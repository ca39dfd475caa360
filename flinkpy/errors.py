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
    SAVEPOINT_FAILED = 12  # a savepoint or checkpoint was triggered and accepted but did not complete
    VERIFY_FAILED = 13  # `flinkpy verify` found records lost or duplicated
    UNSUPPORTED = 14  # the program uses a PyFlink module, class or method flinkpy does not have
    UPGRADE_FAILED = 15  # `flinkpy upgrade`: the new job was not healthy within --ready-timeout (rolled back if asked)
    INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as a shell reports a process SIGINT ended
    TERMINATED = 143  # SIGTERM: 128 + 15


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


class CheckpointFailedError(FlinkpyError):
    """A triggered checkpoint was accepted but failed. The same exit code as a failed savepoint:
    a script that triggers a snapshot asks one question, whether it was taken; 9 (conflict)
    stays for a request refused because the job is in the wrong state."""

    exit_code = ExitCode.SAVEPOINT_FAILED


class UpgradeFailedError(FlinkpyError):
    """The upgraded job was not healthy in time; the message names its root cause."""

    exit_code = ExitCode.UPGRADE_FAILED


class Interrupted(BaseException):
    """SIGINT (Ctrl-C) or SIGTERM stopped a client that waited for a job.

    Raised in the client's main thread where the signal found it, and raised again once the
    client has done what the stop calls for, with ``message`` saying what that was (``job ...
    cancelled, embedded cluster stopped``). A BaseException, as KeyboardInterrupt is: a job
    program's ``except Exception`` must not swallow the user's stop.
    """

    def __init__(self, signum: int, message: str = "") -> None:
        import signal

        self.signum = signum
        self.message = message or ("interrupted" if signum == signal.SIGINT else "terminated")
        super().__init__(self.message)

    @property
    def exit_code(self) -> int:
        import signal

        return ExitCode.INTERRUPTED if self.signum == signal.SIGINT else ExitCode.TERMINATED


#: what each object store's client raises when it finds no (or incomplete) credentials, by class
#: name (matched without importing the optional clients), and what to set
_CREDENTIAL_ERRORS = {
    "NoCredentialsError": "s3",  # botocore
    "PartialCredentialsError": "s3",
    "NoAuthTokenError": "s3",
    "DefaultCredentialsError": "gcs",  # google.auth
    "CredentialUnavailableError": "azure",  # azure.identity
    "ClientAuthenticationError": "azure",  # azure.core
}
_CREDENTIAL_REMEDIES = {
    "s3": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or ~/.aws/credentials) for every "
          "flinkpy process, and FLINKPY_S3_ENDPOINT_URL for an S3-compatible store",
    "gcs": "set GOOGLE_APPLICATION_CREDENTIALS to a service account key file (or run 'gcloud auth application-default login')",
    "azure": "set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with a key or a service principal",
}


def storage_credentials_error(exc: BaseException) -> ConfigurationError | None:
    """The configuration error a missing-credentials exception of an object store's client
    stands for (so it is exit 8 naming what to set, not an internal error), else None.

    >>> class NoCredentialsError(Exception): ...
    >>> err = storage_credentials_error(NoCredentialsError("Unable to locate credentials"))
    >>> err.exit_code, "AWS_ACCESS_KEY_ID" in err.remedy
    (8, True)
    >>> storage_credentials_error(ValueError("x")) is None
    True
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:  # the cause may be wrapped
        seen.add(id(current))
        for cls in type(current).__mro__:
            store = _CREDENTIAL_ERRORS.get(cls.__name__)
            if store is not None:
                return ConfigurationError(f"no credentials for the {store} checkpoint or file storage: {current}",
                                          remedy=_CREDENTIAL_REMEDIES[store])
        current = current.__cause__ or current.__context__
    return None
