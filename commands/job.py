"""`flinkpy job`: look at one job — its state and vertices, and why it failed — or wait for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.table import Table

from commands.context import client
from commands.live import lag_table, vertex_table
from commands.output import emit_json, fmt_duration, fmt_time, out, progress
from commands.options import JobManager, JsonFlag
from commands.session import session

if TYPE_CHECKING:
    from flinkpy.network.rest_client import JsonObject

app = typer.Typer(help="Inspect one job: its state, its vertices and its exceptions; wait for a state.", no_args_is_help=True)

JobId = Annotated[str, typer.Argument(metavar="JOB_ID", help="ID of the job (see 'flinkpy list -a').", show_default=False)]


@app.command("show")
def show(job_id: JobId, jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Show a job's state, timing and vertices.

    Prints the job's name, state, start time and duration, then one row per vertex (a chain of
    operators) with its parallelism and how many of its subtasks are in each state, then the
    vertices' records in and out (live while the job runs, as its tasks report them every
    metrics.fetcher.update-interval), their rates, busy and back-pressured time and watermark
    lag, then a Kafka source's consumer lag per partition (its offset, committed offset and
    pendingRecords: the records behind the partition's end), then the restart count, restart and failover strategies, the in-place rescales
    ('flinkpy job rescale'), the savepoint history (each savepoint's id, time, trigger:
    manual, periodic, upgrade or stop, and path; what the job was started from) and the job's
    history (restarts, restart strategy changes, waits for resources, rescales). With --json:
    the JobManager's document, with each vertex's "metrics" (Flink's names; a source's lag is
    "pendingRecords"), its "partitions" (a Kafka source's, each with "topic", "partition",
    "subtask", "currentOffset", "committedOffset" and "pendingRecords"), the job's own
    "metrics", its "rescales" and its "savepoints" ({"schedule", "history", "disposed",
    "started-from", "restore-point"}, as 'flinkpy savepoint schedule --json').

    Examples:

    \b
        flinkpy job show 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        flinkpy job show --json 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b | jq -r .state
    """
    doc = client(jobmanager).job(job_id)
    if session.json:
        emit_json(doc)
        return
    console = out()
    console.print(f"Job {doc.get('name', '')} ({doc.get('jid', job_id)})", markup=False)
    console.print(f"  State:      {doc.get('state', '?')}", markup=False)
    console.print(f"  Start time: {fmt_time(doc.get('start-time'))}", markup=False)
    if (doc.get("end-time") or -1) >= 0:
        console.print(f"  End time:   {fmt_time(doc.get('end-time'))}", markup=False)
    console.print(f"  Duration:   {fmt_duration(doc.get('duration'))}", markup=False)
    table = Table()
    for column in ("Vertex", "Name", "Parallelism", "Status", "Tasks"):
        table.add_column(column)
    for vertex in doc.get("vertices", []):
        tasks = ", ".join(f"{state} {n}" for state, n in (vertex.get("tasks") or {}).items() if n)
        table.add_row(
            str(vertex.get("id", "?")), vertex.get("name", ""), str(vertex.get("parallelism", "?")), vertex.get("status", "?"), tasks
        )
    console.print(table)
    if doc.get("vertices"):
        console.print(vertex_table(doc, title="Records (live while the job runs; rates per second)"))
        lag = lag_table(doc, per_partition=True)
        if lag is not None:
            console.print(lag)
    console.print(
        f"Restarts: {doc.get('restarts', 0)}; restart strategy: {_describe(doc.get('restart-strategy'))}; "
        f"failover: {doc.get('failover-strategy', 'region')}",
        markup=False,
    )
    rescales = doc.get("rescales") or []
    if rescales:
        console.print("Rescales:", markup=False)
        for r in rescales:
            change = ", ".join(f"{name} {r['from'].get(name)} -> {p}" for name, p in r["to"].items() if r["from"].get(name) != p)
            console.print(f"  {fmt_time(r.get('timestamp'))}  from checkpoint {r.get('checkpoint_id')}: {change} ({r.get('duration_ms')} ms)", markup=False)
    savepoints = doc.get("savepoints") or {}
    if savepoints.get("history") or savepoints.get("started-from") or (savepoints.get("schedule") or {}).get("interval"):
        from commands.savepoint import history_table

        interval = (savepoints.get("schedule") or {}).get("interval")
        console.print(f"Periodic savepoints: {'every ' + fmt_duration(interval) if interval else 'off'}", markup=False)
        history_table(console, savepoints, wide=False)
    events = doc.get("events") or []
    if events:
        console.print("History:", markup=False)
        for event in events:
            details = ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("timestamp", "type"))
            console.print(f"  {fmt_time(event.get('timestamp'))}  {event.get('type')}  {details}", markup=False)


def _describe(strategy: JsonObject | None) -> str:
    if not strategy:
        return "none"
    rest = ", ".join(f"{k}={v}" for k, v in strategy.items() if k != "type")
    return f"{strategy.get('type')} ({rest})" if rest else str(strategy.get("type"))


@app.command("exceptions")
def exceptions(job_id: JobId, jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Show the root exception of a job and its exception history.

    The root exception is the failure that made the job fail (or last restart); the history
    lists every task failure the JobManager recorded, newest first, with the task, the
    TaskManager it ran on, whether it led to a restart, and the stack trace from the task's
    process.

    Examples:

    \b
        flinkpy job exceptions 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        flinkpy job exceptions --json 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b \\
            | jq '.exceptionHistory.entries | length'
    """
    doc = client(jobmanager).job_exceptions(job_id)
    if session.json:
        emit_json(doc)
        return
    console = out()
    root = doc.get("root-exception")
    entries: list[JsonObject] = (doc.get("exceptionHistory") or {}).get("entries") or []
    if not root and not entries:
        console.print(f"Job {job_id} has no exceptions.", markup=False)
        return
    from flinkpy.client.tracebacks import user_first

    def shown(trace: str) -> str:  # the job's frames; flinkpy's too with --debug
        return (trace if session.debug else user_first(trace)).rstrip()

    if root:
        console.print(f"Root exception ({fmt_time(doc.get('timestamp'))}):", markup=False)
        console.print(shown(root), markup=False)
    for entry in entries:
        where = " on ".join(x for x in (entry.get("taskName"), entry.get("location") or entry.get("taskManagerId")) if x)
        console.print("", markup=False)
        outcome = "restarted" if entry.get("restarted") else "not restarted"
        console.print(f"{fmt_time(entry.get('timestamp'))}  {entry.get('exceptionName', '?')}  {where}  ({outcome})", markup=False)
        if entry.get("stacktrace"):
            console.print(shown(entry["stacktrace"]), markup=False)


WAITABLE = ("RUNNING", "FINISHED", "CANCELED", "FAILED", "TERMINAL")


@app.command("wait")
def wait(
    job_id: JobId,
    state: Annotated[str, typer.Option("--state", metavar="STATE", help="What to wait for: RUNNING (the job and every task running), FINISHED, CANCELED, FAILED or TERMINAL (any of the three).")] = "RUNNING",
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait (Flink duration syntax).")] = "2min",
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Wait until a job reaches a state: for runbooks and scripts between steps.

    RUNNING, the default, means the job and all of its tasks run: after a restart (a fault
    drill, a lost TaskManager) that is when the job has restored its state and processes
    again. Prints the state reached (with --json, the job's document as 'job show' gives it).

    Exit status: 0 reached; 6 not reached within --timeout; 9 the job ended in another state
    (so the awaited one can no longer come); 4 unknown job.

    Examples:

    \b
        flinkpy fault kill-task JOB_ID && flinkpy job wait JOB_ID
        flinkpy job wait JOB_ID --state TERMINAL --timeout 30min
    """
    from commands.options import timeout_seconds
    from flinkpy.client.operations import Deadline, wait_for_state
    from flinkpy.errors import UsageError

    wanted = state.upper()
    if wanted not in WAITABLE:
        raise UsageError(f"--state {state!r} is not a state to wait for", remedy=f"use one of {', '.join(WAITABLE)}")
    with progress(f"Waiting for job {job_id} to be {wanted}..."):
        doc = wait_for_state(client(jobmanager), job_id, wanted, Deadline(timeout_seconds(timeout)), timeout)
    if session.json:
        emit_json(doc)
    else:
        out().print(f"Job {job_id} is {doc.get('state')}.", markup=False)


@app.command("rescale")
def rescale(
    job_id: JobId,
    parallelism: Annotated[Optional[int], typer.Option("-p", "--parallelism", min=1, metavar="N", help="The new parallelism of every vertex (a non-parallel one keeps 1).")] = None,
    vertex: Annotated[Optional[list[str]], typer.Option("--vertex", metavar="NAME=N", help="The new parallelism of one vertex, named by id, name or an operator's uid (repeatable; wins over -p).")] = None,
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for the checkpoint and for the job to run again.")] = "2min",
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Rescale a running job in place, from its latest checkpoint.

    As Flink's adaptive scheduler does: every task stops and starts again at the new
    parallelism, restored from the job's latest completed checkpoint (one is triggered first
    when the job has none), with its keyed state redistributed by key group. No savepoint is
    written and the job is not resubmitted: it keeps its id, its checkpoints and its history,
    and the rescale does not count as a restart. Each rescale is kept in the job's rescale
    history ('flinkpy job show', "rescales" in --json and in GET /jobs/JOB_ID).

    Refused (exit 9) when the job is not RUNNING with every task running, when the cluster
    lacks the slots, or when the latest checkpoint is unaligned with in-flight data (which only
    the same parallelism can take back: trigger a savepoint first, which is aligned); refused
    (exit 2) for more subtasks than the max parallelism or than a non-parallel operator allows,
    and for vertices joined by a forward edge that would differ.

    Prints the new parallelism once the job runs again; --json: {"jid", "checkpoint_id",
    "checkpoint", "parallelism", "downtime_ms"}.

    Examples:

    \b
        flinkpy job rescale -p 4 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        flinkpy job rescale --vertex sums=3 JOB_ID
    """
    import time

    from commands.options import timeout_seconds
    from flinkpy.client.operations import Deadline, wait_for_state
    from flinkpy.errors import UsageError

    per_vertex: dict[str, int] = {}
    for item in vertex or []:
        name, sep, value = item.rpartition("=")
        if not sep or not name or not value.isdigit() or int(value) < 1:
            raise UsageError(f"--vertex {item!r} is not NAME=N", remedy="e.g. --vertex sums=3")
        per_vertex[name] = int(value)
    if parallelism is None and not per_vertex:
        raise UsageError("nothing to rescale to", remedy="pass -p N or --vertex NAME=N")
    deadline = Deadline(timeout_seconds(timeout))
    c = client(jobmanager)
    if not ((c.checkpoints(job_id).get("latest") or {}).get("completed")):
        with progress(f"Triggering a checkpoint of job {job_id} to rescale from..."):
            c.wait_for_checkpoint(job_id, c.trigger_checkpoint(job_id, wait_s=deadline.left()), deadline, timeout)
    started = time.monotonic()
    done = c.cluster.rescale(job_id, parallelism=parallelism, per_vertex=per_vertex)
    with progress(f"Waiting for job {job_id} to run again at its new parallelism..."):
        wait_for_state(c, job_id, "RUNNING", deadline, timeout)
    done["downtime_ms"] = int((time.monotonic() - started) * 1000)
    if session.json:
        emit_json(done)
        return
    shown = ", ".join(f"{name}={p}" for name, p in done["parallelism"].items())
    out().print(f"Job {job_id} rescaled from checkpoint {done['checkpoint_id']}: {shown}", markup=False)
