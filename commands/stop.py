"""`flinkpy stop`: Flink's stop-with-savepoint — a final savepoint, then the job finishes."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from commands.options import JobManager, JsonFlag, timeout_seconds
from commands.output import emit_json, progress, savepoint_completed, status
from commands.session import session

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
    from commands.context import client as connect
    from flinkpy.client.operations import Deadline

    deadline = Deadline(timeout_seconds(timeout))
    client = connect(jobmanager)
    request_id = client.stop_with_savepoint(job_id, savepoint_path, drain=drain, deadline=deadline)
    with progress(f"Waiting for stop-with-savepoint {request_id} of job {job_id}..."):
        location = client.wait_for_savepoint(job_id, request_id, deadline, what="stop-with-savepoint")
    if not session.json:
        savepoint_completed(location)
    with progress(f"Waiting for job {job_id} to finish..."):
        state = client.wait_until_finished(job_id, deadline, location)
    if session.json:
        emit_json({"jid": job_id, "request-id": request_id, "location": location, "state": state})
    status(f"Job {job_id} has finished.")
