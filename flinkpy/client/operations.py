"""Asynchronous operations followed to their end: savepoints, stop-with-savepoint, checkpoints.

Flink's REST API answers a savepoint (or stop) request with a request id at once; the
operation's outcome is polled. These functions do the polling against one endpoint (a
JobManager's ``RestClient``, or a Spark driver's), bounded by a :class:`Deadline` shared by
every step of one command, and turn the outcomes into flinkpy's exceptions: a failed savepoint
is a ``SavepointFailedError`` with the cause's last line, a deadline passed an
``OperationTimeoutError`` whose remedy says how to follow up.

>>> operation_result({"status": {"id": "IN_PROGRESS"}}, "j", "t") is None
True
>>> operation_result({"status": {"id": "COMPLETED"}, "operation": {"location": "/sp/x"}}, "j", "t")
'/sp/x'
"""

from __future__ import annotations

import time
from typing import Any, Callable

from flinkpy.network.rest_client import JsonObject, RestClient
from flinkpy.errors import (
    CheckpointFailedError,
    ConflictError,
    JobCanceledError,
    JobExecutionError,
    NotFoundError,
    OperationTimeoutError,
    SavepointFailedError,
)

TERMINAL_STATES = ("FINISHED", "FAILED", "CANCELED")


class Deadline:
    """A moment on the monotonic clock that every step of one operation shares.

    >>> Deadline(60).passed()
    False
    """

    def __init__(self, timeout_s: float) -> None:
        self.at = time.monotonic() + timeout_s

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())


class _Backoff:
    """Polls start at 50 ms and double up to 0.5 s: quick operations answer quickly, long ones
    are not asked too often; a wait never sleeps past the deadline."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.poll = 0.05

    def sleep(self) -> None:
        time.sleep(min(self.poll, self.deadline.left()))
        self.poll = min(self.poll * 2, 0.5)


def operation_result(doc: JsonObject, job_id: str, request_id: str) -> str | None:
    """The savepoint's location when the operation completed; None while in progress; raises
    ``SavepointFailedError`` (with the remote stack trace as details) when it failed."""
    if (doc.get("status") or {}).get("id") != "COMPLETED":
        return None
    op = doc.get("operation") or {}
    if op.get("location"):
        return str(op["location"])
    cause = op.get("failure-cause") or {}
    trace = cause.get("stack-trace") or ""
    last = next((line.strip() for line in reversed(trace.strip().splitlines()) if line.strip()), "")
    what = cause.get("class") or "unknown cause"
    raise SavepointFailedError(
        f"savepoint {request_id} of job {job_id} failed: {last or what}",
        remedy=f"see the cause with --debug and the job's exceptions with 'flinkpy job exceptions {job_id}'",
        details=trace or None,
    )


def _job_state(endpoint: RestClient, job_id: str) -> str | None:
    try:
        return endpoint.job(job_id).get("state")
    except NotFoundError:
        return None


def request_operation(
    endpoint: RestClient,
    job_id: str,
    post: Callable[[], str],
    *,
    if_busy: str,
    deadline: Deadline,
    on_busy: Callable[[], None] | None = None,
) -> str:
    """Send a savepoint (or stop) request with ``post``; returns its request id.

    A 409 means the job is not running (always ``ConflictError``) or a savepoint of it is
    already in progress: with ``if_busy == "wait"`` the request is repeated until it is
    accepted or the deadline passes; ``on_busy`` is called once, when the waiting starts.
    """
    backoff = _Backoff(deadline)
    waited = False
    while True:
        try:
            return post()
        except ConflictError as exc:
            state = _job_state(endpoint, job_id)
            if state is None:
                raise NotFoundError(f"job {job_id} not found", remedy="list jobs with 'flinkpy list -a'") from None
            if state != "RUNNING":
                raise ConflictError(
                    f"job {job_id} is {state}, not RUNNING: no savepoint can be taken",
                    remedy="savepoints are taken of running jobs; see 'flinkpy list -a'",
                ) from None
            if if_busy != "wait":
                raise ConflictError(
                    f"{exc.message}" if "progress" in exc.message else f"a savepoint of job {job_id} is already in progress ({exc.message})",
                    remedy="wait for it ('flinkpy savepoint status'), or pass --if-busy wait",
                ) from None
            if deadline.passed():
                raise OperationTimeoutError(
                    f"a savepoint of job {job_id} was still in progress when --timeout ran out",
                    remedy="pass a longer --timeout",
                ) from None
            if not waited and on_busy is not None:
                on_busy()
            waited = True
            backoff.sleep()


def wait_for_savepoint(endpoint: RestClient, job_id: str, request_id: str, deadline: Deadline, what: str = "savepoint") -> str:
    """Poll the operation until it completes; its location, or SavepointFailedError / timeout."""
    backoff = _Backoff(deadline)
    while True:
        location = operation_result(endpoint.savepoint_status(job_id, request_id), job_id, request_id)
        if location is not None:
            return location
        if deadline.passed():
            raise OperationTimeoutError(
                f"{what} {request_id} of job {job_id} did not complete in time",
                remedy=f"follow it with 'flinkpy savepoint status {job_id} {request_id}', or pass a longer --timeout",
            )
        backoff.sleep()


def wait_until_finished(endpoint: RestClient, job_id: str, deadline: Deadline, location: str) -> str:
    """After stop-with-savepoint: wait for the job to end; returns FINISHED, raises when it
    ended FAILED or CANCELED instead or is still running at the deadline."""
    backoff = _Backoff(deadline)
    while True:
        state = endpoint.job(job_id).get("state")
        if state in TERMINAL_STATES:
            break
        if deadline.passed():
            raise OperationTimeoutError(
                f"job {job_id} is still {state} after its final savepoint {location}",
                remedy=f"check it with 'flinkpy job show {job_id}'",
            )
        backoff.sleep()
    if state == "FAILED":
        raise JobExecutionError(f"job {job_id} failed after its final savepoint {location}", job_id=job_id, remedy=f"see 'flinkpy job exceptions {job_id}'")
    if state == "CANCELED":
        raise JobCanceledError(f"job {job_id} was cancelled after its final savepoint {location}")
    return str(state)


def wait_for_checkpoint(endpoint: RestClient, job_id: str, checkpoint_id: int, deadline: Deadline, timeout: str) -> JsonObject:
    """Poll a triggered checkpoint until it completes; its details document. A failed one is a
    ``CheckpointFailedError`` (exit 12, as a failed savepoint), one still running at the
    deadline an ``OperationTimeoutError``
    (``timeout`` is how the caller spelled the time it gave)."""
    detail: JsonObject = {}
    poll = 0.05
    while not deadline.passed():
        detail = endpoint.checkpoint_details(job_id, checkpoint_id)
        if detail.get("status") in ("COMPLETED", "FAILED"):
            break
        time.sleep(poll)
        poll = min(poll * 2, 0.5)
    status = detail.get("status")
    if status == "FAILED":
        raise CheckpointFailedError(f"checkpoint {checkpoint_id} of job {job_id} failed: {detail.get('failure_message')}",
                                    remedy=f"see 'flinkpy checkpoint list {job_id}'")
    if status != "COMPLETED":
        raise OperationTimeoutError(f"checkpoint {checkpoint_id} of job {job_id} did not complete within {timeout}", remedy=f"see 'flinkpy checkpoint list {job_id}'")
    return detail


_TERMINAL = ("FINISHED", "CANCELED", "FAILED")


def job_reached(doc: JsonObject, wanted: str) -> bool:
    """Whether a job document (``GET /jobs/<id>``) shows ``wanted``: RUNNING needs every
    vertex running too (a job restarting a region is RUNNING with some tasks not); TERMINAL
    is any end.

    >>> job_reached({"state": "RUNNING", "vertices": [{"status": "RUNNING"}, {"status": "DEPLOYING"}]}, "RUNNING")
    False
    >>> job_reached({"state": "CANCELED", "vertices": []}, "TERMINAL")
    True
    """
    state = doc.get("state")
    if wanted == "TERMINAL":
        return state in _TERMINAL
    if wanted == "RUNNING":
        return state == "RUNNING" and all(v.get("status") == "RUNNING" for v in doc.get("vertices") or [])
    return state == wanted


def wait_for_state(endpoint: Any, job_id: str, wanted: str, deadline: Deadline, timeout: str) -> JsonObject:
    """Poll a job until it reaches ``wanted`` (see :func:`job_reached`); its document then. A job
    that ends otherwise is a ``ConflictError``, the deadline an ``OperationTimeoutError``."""
    poll = 0.05
    while True:
        doc = endpoint.job(job_id)
        if job_reached(doc, wanted):
            return doc
        if doc.get("state") in _TERMINAL:
            raise ConflictError(f"job {job_id} ended {doc.get('state')}, not {wanted}", remedy=f"see 'flinkpy job exceptions {job_id}'")
        if deadline.passed():
            raise OperationTimeoutError(f"job {job_id} was not {wanted} within {timeout} (it is {doc.get('state')})",
                                        remedy=f"see 'flinkpy job show {job_id}'")
        time.sleep(min(poll, deadline.left()))
        poll = min(poll * 2, 0.5)
