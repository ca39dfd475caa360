"""`flinkpy list` and `flinkpy cancel`: Flink's top-level verbs for jobs on a cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from commands.context import client
from commands.output import emit_json, fmt_time, out
from commands.options import JobManager, JsonFlag, Wide
from commands.session import session
from commands.tables import Column, render

if TYPE_CHECKING:
    from flinkpy.network.rest_client import JsonObject

app = typer.Typer()

SCHEDULED_STATES = frozenset({"CREATED", "INITIALIZING"})
#: LOST: running when a JobManager without high availability died (its successor lists it)
TERMINAL_STATES = frozenset({"FINISHED", "CANCELED", "FAILED", "LOST"})


def select_jobs(jobs: list[JsonObject], *, all_: bool, running: bool, scheduled: bool) -> list[JsonObject]:
    """Flink's defaults: without flags, running and scheduled jobs; -a everything."""
    if all_:
        return jobs
    if not running and not scheduled:
        running = scheduled = True

    def keep(job: JsonObject) -> bool:
        state = job.get("state", "")
        if state in SCHEDULED_STATES:
            return scheduled
        return running and state not in TERMINAL_STATES

    return [job for job in jobs if keep(job)]


@app.command("list")
def list_jobs(
    all_: Annotated[bool, typer.Option("-a", "--all", help="Show all jobs, finished ones included.")] = False,
    running: Annotated[bool, typer.Option("-r", "--running", help="Show only running jobs.")] = False,
    scheduled: Annotated[bool, typer.Option("-s", "--scheduled", help="Show only scheduled (created, not yet running) jobs.")] = False,
    jobmanager: JobManager = None,
    wide: Wide = False,
    json_: JsonFlag = False,
) -> None:
    """List the jobs of a cluster.

    Without flags, shows running and scheduled jobs (like 'flink list'); -a adds finished,
    cancelled and failed ones. Jobs are sorted by start time. Jobs started with --runner spark
    (registered by their drivers in the cluster home) are listed too, with runner "spark" (a
    Runner column appears when there are any); the cluster's own jobs have runner "local".
    With no cluster running, only Spark jobs are listed. In a narrow terminal long names wrap
    and the least important columns (Runner, Restarts, Start time) are left out, as the
    table's caption says; --wide shows them all.

    Examples:

    \b
        flinkpy list
        flinkpy list -a -m 127.0.0.1:8081
        flinkpy list --json \\
            | jq -r '.jobs[] | select(.state == "RUNNING") | .jid'
    """
    jobs = select_jobs(client(jobmanager).list_jobs(), all_=all_, running=running, scheduled=scheduled)
    jobs.sort(key=lambda j: j.get("start-time") or 0)
    if session.json:
        emit_json({"jobs": jobs})
        return
    if not jobs:
        what = "jobs" if all_ else "scheduled jobs" if scheduled and not running else "running jobs"
        out().print(f"No {what}.")
        return
    # the Runner column only when some job runs on Spark: the usual table stays as it was
    runners = any(job.get("runner", "local") != "local" for job in jobs)
    columns = [Column("Start time", drop=2), Column("JobID"), Column("Name", fold=True), Column("State"),
               Column("Restarts", justify="right", drop=1)] + ([Column("Runner", drop=3)] if runners else [])
    rows = [[fmt_time(job.get("start-time")), job.get("jid", "?"), job.get("name", ""), job.get("state", "?"), str(job.get("restarts", 0))]
            + ([job.get("runner", "local")] if runners else []) for job in jobs]
    render(out(), columns, rows, wide=wide)


@app.command("cancel")
def cancel(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="ID of the job to cancel (see 'flinkpy list').", show_default=False)],
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Cancel a running job.

    Asks the JobManager to cancel every task of the job; returns once the request is accepted
    (the job then moves through CANCELLING to CANCELED). Cancelling a job that already ended
    exits 9.

    Examples:

    \b
        flinkpy cancel 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        flinkpy list --json | jq -r '.jobs[].jid' | xargs -n1 flinkpy cancel
    """
    client(jobmanager).cancel(job_id)
    if session.json:
        emit_json({"jid": job_id, "cancel": "requested"})
    else:
        out().print(f"Cancelled job {job_id}.")
