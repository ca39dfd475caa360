"""`flinkpy stop`: Flink's stop-with-savepoint — a final savepoint, then the job finishes."""

from __future__ import annotations

import time
from typing import Annotated, Optional

import typer

from commands.options import JobManager, JsonFlag
from commands.output import emit_json, out, progress, status
from commands.savepoint import post_operation, timeout_s, wait_for_savepoint
from commands.session import session
from flinkpy.errors import JobCanceledError, JobExecutionError, OperationTimeoutError

app = typer.Typer()


@app.command("stop")
def stop(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="ID of the job to stop (see 'flinkpy list').", show_default=False)],
    savepoint_path: Annotated[
        Optional[str],
        typer.Option(
            "-p",
            "--savepoint-path",
            "--savepointPath",
            metavar="DIR",
            help="Directory (path or fsspec URL) of the final savepoint; default: the job's execution.checkpointing.savepoint-dir, else <checkpoint dir>/savepoints.",
        ),
    ] = None,
    drain: Annotated[bool, typer.Option("-d", "--drain", help="Advance event time to the end (MAX_WATERMARK) before stopping, firing every timer and window.")] = False,
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for the savepoint and for the job to finish.")] = "10min",
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Stop a running job with a final savepoint, then wait for it to finish.

    The sources stop, a savepoint is taken (so nothing after it is processed twice when the
    job is restored from it), and the job ends FINISHED. Prints 'Savepoint completed. Path:
    <location>' on stdout once the savepoint is written, then waits for the job to reach
    FINISHED. With --json, prints one document: {"jid", "request-id", "location", "state"}.

    Exit status: 0 stopped; 12 the savepoint failed (the job keeps running); 6 not done within
    --timeout; 9 the job is not running or a savepoint of it is in progress; 4 unknown job;
    5 or 10 the job ended FAILED or CANCELED instead.

    Examples:

    \b
        flinkpy stop 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        flinkpy stop --savepoint-path s3://bucket/savepoints --drain JOB_ID
        path=$(flinkpy stop --json JOB_ID | jq -r .location)
    """
    from commands.context import job_rest_client

    deadline = time.monotonic() + timeout_s(timeout)
    client = job_rest_client(jobmanager, job_id)
    body = {"targetDirectory": savepoint_path, "drain": drain}
    request_id = post_operation(client, job_id, f"/jobs/{job_id}/stop", body, if_busy="fail", deadline=deadline)
    location = wait_for_savepoint(client, job_id, request_id, deadline, what="stop-with-savepoint")
    if not session.json:
        out().print(f"Savepoint completed. Path: {location}", markup=False, soft_wrap=True)
    state = None
    with progress(f"Waiting for job {job_id} to finish..."):
        poll = 0.05
        while True:
            state = client.job(job_id).get("state")
            if state in ("FINISHED", "FAILED", "CANCELED"):
                break
            if time.monotonic() >= deadline:
                raise OperationTimeoutError(
                    f"job {job_id} is still {state} after its final savepoint {location}",
                    remedy="check it with 'flinkpy job show JOB_ID'",
                )
            time.sleep(max(0.0, min(poll, deadline - time.monotonic())))
            poll = min(poll * 2, 0.5)
    if state == "FAILED":
        raise JobExecutionError(f"job {job_id} failed after its final savepoint {location}", job_id=job_id, remedy=f"see 'flinkpy job exceptions {job_id}'")
    if state == "CANCELED":
        raise JobCanceledError(f"job {job_id} was cancelled after its final savepoint {location}")
    if session.json:
        emit_json({"jid": job_id, "request-id": request_id, "location": location, "state": state})
    status(f"Job {job_id} has finished.")
