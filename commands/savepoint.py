"""`flinkpy savepoint`: take, follow, list, dispose of savepoints, and dry-run a restore.

``trigger`` and ``status`` ask a cluster (REST, Flink's asynchronous-operation shapes: a POST
answers with a request id, a GET on it reports IN_PROGRESS or COMPLETED with the location or
the failure cause). ``list``, ``dispose`` and ``plan`` are offline: they read savepoint files
directly (any path or fsspec URL) and need no cluster.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Optional

import typer

from commands.errors import PROG
from commands.options import JobManager, JsonFlag, Wide, timeout_seconds
from commands.output import emit_json, fmt_size, fmt_time, out, progress, savepoint_completed, status
from commands.savepoint_plan import PathArg, plan
from commands.session import session
from commands.tables import Column, render
from flinkpy.errors import ExitCode, NotFoundError, SavepointFailedError, UsageError

app = typer.Typer(
    help="Trigger savepoints of running jobs, follow them, list, dispose of and rewrite savepoint files, dry-run a restore.",
    no_args_is_help=True,
)

JobId = Annotated[str, typer.Argument(metavar="JOB_ID", help="ID of the job (see 'flinkpy list').", show_default=False)]
Timeout = Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait (Flink duration syntax: 30s, 10min).")]

_FORMATS = ("canonical", "native")


# --------------------------------------------------------------------------- cluster commands


@app.command("trigger")
def trigger(
    job_id: JobId,
    target_dir: Annotated[
        Optional[str],
        typer.Argument(
            metavar="[TARGET_DIR]",
            help="Directory (path or fsspec URL) to write the savepoint under; default: the job's execution.checkpointing.savepoint-dir, else <checkpoint dir>/savepoints.",
            show_default=False,
        ),
    ] = None,
    type_: Annotated[str, typer.Option("--type", metavar="canonical|native", help="Savepoint format: canonical (portable) or native.")] = "canonical",
    detached: Annotated[bool, typer.Option("--detached", help="Print the trigger id and return without waiting; follow it with 'flinkpy savepoint status'.")] = False,
    timeout: Timeout = "10min",
    keep: Annotated[
        Optional[int],
        typer.Option("--keep", min=1, metavar="N", help="After success, delete this job's older savepoints in the same target directory beyond the newest N (never the one the job was restored from)."),
    ] = None,
    if_busy: Annotated[str, typer.Option("--if-busy", metavar="fail|wait", help="When a savepoint of the job is already in progress: fail (exit 9) or wait for it to end, then trigger.")] = "fail",
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Trigger a savepoint of a running job and wait for it.

    Prints 'Savepoint completed. Path: <location>' on stdout, with a spinner on stderr while
    waiting. With --detached, prints the trigger id instead (follow it with 'flinkpy savepoint
    status JOB_ID TRIGGER_ID'). With --json, prints one document: {"jid", "request-id",
    "status", "location", "disposed"}.

    --keep N prunes after success: of the savepoints of this job directly in the target
    directory (their _metadata says savepoint and this job id), all but the newest N are
    disposed of; the new one and the one the job was restored from are always kept, and
    nothing else is ever touched.

    Exit status: 0 completed; 12 the savepoint failed (its cause on stderr); 6 not completed
    within --timeout; 9 the job is not running, or another savepoint of it is in progress
    (with --if-busy wait: waits for that one, bounded by --timeout); 4 unknown job.

    Examples:

    \b
        flinkpy savepoint trigger 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        flinkpy savepoint trigger JOB_ID s3://bucket/savepoints --keep 3
        flinkpy savepoint trigger --detached JOB_ID
        path=$(flinkpy savepoint trigger --json JOB_ID | jq -r .location)
    """
    from commands.context import client as connect
    from flinkpy.client.operations import Deadline

    fmt = type_.lower()
    if fmt not in _FORMATS:
        raise UsageError(f"--type {type_!r} is not a savepoint format", remedy="use canonical or native")
    if if_busy not in ("fail", "wait"):
        raise UsageError(f"--if-busy {if_busy!r} is not fail or wait", remedy="use --if-busy fail or --if-busy wait")
    deadline = Deadline(timeout_seconds(timeout))
    client = connect(jobmanager)
    trigger_id = client.trigger_savepoint(
        job_id, target_dir, format_type=fmt.upper(), deadline=deadline, if_busy=if_busy,
        on_busy=lambda: status(f"A savepoint of job {job_id} is in progress; waiting for it to end..."),
    )
    if detached:
        if session.json:
            emit_json({"jid": job_id, "request-id": trigger_id, "status": "IN_PROGRESS"})
        else:
            out().print(trigger_id, markup=False)
        return
    with progress(f"Waiting for savepoint {trigger_id} of job {job_id}..."):
        location = client.wait_for_savepoint(job_id, trigger_id, deadline)
    disposed: list[str] = []
    if keep is not None:
        disposed = client.prune_savepoints(job_id, location, keep)
        for path in disposed:
            status(f"Disposed of older savepoint {path}")
    if session.json:
        emit_json({"jid": job_id, "request-id": trigger_id, "status": "COMPLETED", "location": location, "disposed": disposed})
    else:
        savepoint_completed(location)


@app.command("status")
def status_(
    job_id: JobId,
    trigger_id: Annotated[str, typer.Argument(metavar="TRIGGER_ID", help="The id 'flinkpy savepoint trigger --detached' printed.", show_default=False)],
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Show whether a triggered savepoint is in progress, completed or failed.

    Prints 'Savepoint completed. Path: <location>' when it completed, 'Savepoint TRIGGER_ID of
    job JOB_ID is in progress.' while it runs. With --json, prints Flink's operation document
    {"status": {"id"}, "operation": {...}} as the JobManager returned it.

    Exit status: 0 completed or in progress; 12 failed (the cause on stderr); 4 unknown job or
    trigger id.

    Examples:

    \b
        flinkpy savepoint status JOB_ID 1b2c3d4e5f60
        flinkpy savepoint status --json JOB_ID TRIGGER_ID | jq -r .status.id
    """
    from commands.context import client as connect

    client = connect(jobmanager)
    doc = client.savepoint_status(job_id, trigger_id)
    if session.json:
        emit_json(doc)
        try:
            client.savepoint_location(doc, job_id, trigger_id)
        except SavepointFailedError as exc:
            sys.stderr.write(f"{PROG}: error: {exc.message}\n")
            raise typer.Exit(ExitCode.SAVEPOINT_FAILED) from None
        return
    location = client.savepoint_location(doc, job_id, trigger_id)
    if location is None:
        out().print(f"Savepoint {trigger_id} of job {job_id} is in progress.", markup=False)
    else:
        savepoint_completed(location)


# --------------------------------------------------------------------------- offline commands


@app.command("dispose")
def dispose(
    path: PathArg,
    force: Annotated[bool, typer.Option("--force", help="Also dispose of a retained checkpoint (not only savepoints).")] = False,
    json_: JsonFlag = False,
) -> None:
    """Delete a savepoint's files (offline: no cluster needed).

    Deletes its _metadata first (so it is never left looking complete), then exactly the state
    files that _metadata references, then the directory if that leaves it empty. Other files in
    the directory are left alone. Refuses a retained checkpoint unless --force.

    With --json, prints {"path", "kind", "job_id", "checkpoint_id", "files_deleted"}.

    Exit status: 0 disposed; 4 no savepoint at PATH; 9 PATH is a checkpoint (without --force)
    or its _metadata is unreadable.

    Examples:

    \b
        flinkpy savepoint dispose \\
            /var/flinkpy/savepoints/savepoint-3f2a9c-1b2c3d4e5f60
        flinkpy savepoint dispose \\
            s3://bucket/savepoints/savepoint-3f2a9c-1b2c3d4e5f60
    """
    from flinkpy.checkpoint.retention import dispose as dispose_savepoint

    done = dispose_savepoint(path, force=force)
    if session.json:
        emit_json(done.to_dict())
    else:
        out().print(f"Disposed of {done.kind} {done.path} ({done.files_deleted} state file(s) and _metadata).", markup=False)


def _default_list_dir() -> str:
    from commands.context import home_dir, load_cli_config

    configured = load_cli_config().get("execution.checkpointing.savepoint-dir")
    return str(configured) if configured else str(home_dir() / "checkpoints")


@app.command("list")
def list_(
    directory: Annotated[
        Optional[str],
        typer.Argument(
            metavar="[DIR]",
            help="Where to look (path or fsspec URL); default: execution.checkpointing.savepoint-dir, else <FLINKPY_HOME>/checkpoints.",
            show_default=False,
        ),
    ] = None,
    wide: Wide = False,
    json_: JsonFlag = False,
) -> None:
    """List the savepoints and checkpoints under a directory (offline), newest first.

    Walks DIR a few levels deep for _metadata files. One row each: path, kind, job id and
    name, checkpoint id, completion time, total size, operators' parallelism and whether it is
    restorable (every referenced file present with its recorded size and checksum, as
    'flinkpy checkpoint verify' checks). A _metadata that cannot be read is listed as not
    restorable, with its problem.

    With --json, prints {"dir", "snapshots": [{"path", "kind", "job_id", "job_name",
    "checkpoint_id", "completion_timestamp", "total_size", "parallelism", "restorable",
    "problems"}]}.

    Exit status: 0 (also when nothing is found); 4 when DIR does not exist.

    Examples:

    \b
        flinkpy savepoint list
        flinkpy savepoint list s3://bucket/savepoints --json \\
            | jq -r '.snapshots[0].path'
    """
    from flinkpy.client.savepoints import list_snapshots

    root = directory or _default_list_dir()
    rows = list_snapshots(root)
    if session.json:
        emit_json({"dir": root, "snapshots": rows})
        return
    if not rows:
        out().print(f"No savepoints or checkpoints under {root}.", markup=False)
        return
    columns = [Column("Path", fold=True, min_width=20), Column("Kind", drop=4), Column("Job", fold=True, drop=3),
               Column("Name", fold=True, drop=5), Column("Id", justify="right"), Column("Completed", drop=2),
               Column("Size", justify="right", drop=1), Column("Parallelism", fold=True, drop=6),
               Column("Restorable", fold=True)]
    rows = [[
        r["path"],
        r["kind"] or "?",
        r["job_id"] or "?",
        r["job_name"] or "",
        str(r["checkpoint_id"] if r["checkpoint_id"] is not None else "?"),
        fmt_time(r["completion_timestamp"]),
        fmt_size(r["total_size"]) if r["total_size"] is not None else "?",
        ", ".join(f"{k}={v}" for k, v in r["parallelism"].items()),
        "yes" if r["restorable"] else "no: " + "; ".join(r["problems"]),
    ] for r in rows]
    render(out(), columns, rows, title=f"Savepoints and checkpoints under {root}", wide=wide)


@app.command("prune")
def prune(
    directory: Annotated[str, typer.Argument(metavar="DIR", help="The directory the savepoints are in (path or fsspec URL).", show_default=False)],
    keep: Annotated[Optional[int], typer.Option("--keep", min=1, metavar="N", help="Keep each job's newest N savepoints.")] = None,
    max_age: Annotated[Optional[str], typer.Option("--max-age", metavar="DURATION", help="Dispose of savepoints older than this (7d, 12h, 30min).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be disposed of; delete nothing.")] = False,
    offline: Annotated[bool, typer.Option("--offline", help="Prune with no cluster to ask which savepoints its jobs were started from (none is protected then).")] = False,
    jobmanager: JobManager = None,
    wide: Wide = False,
    json_: JsonFlag = False,
) -> None:
    """Dispose of old savepoints in a directory: retention by count and by age, for cron.

    Of the savepoints directly in DIR (their _metadata says savepoint), per job, newest first:
    one beyond the newest --keep N, or older than --max-age, is disposed of (its _metadata
    first, then the state files it references). Never touched: each job's newest savepoint,
    every savepoint a job of the cluster was started from (even after it restarted from a
    checkpoint of its own since), the snapshot a running job's restart would restore from now,
    checkpoints, and anything else in DIR. The cluster is asked first; with none answering the command is
    refused (exit 3) unless --offline. Running it again changes nothing more.

    With --json: {"dir", "dry_run", "savepoints": [{"path", "job_id", "checkpoint_id",
    "completed_ms", "dispose", "reason"}]}.

    Exit status: 0 (also when nothing was disposed of); 2 neither --keep nor --max-age; 3 no
    cluster answers (without --offline); 4 DIR does not exist.

    Examples:

    \b
        flinkpy savepoint prune ~/savepoints --keep 5 --max-age 7d
        flinkpy savepoint prune s3://bucket/savepoints --keep 3 --dry-run --json
    """
    from commands.context import client as connect
    from commands.options import duration_seconds
    from flinkpy.client.savepoints import prune_directory
    from flinkpy.clock import now_ms
    from flinkpy.errors import ClusterUnreachableError

    if keep is None and max_age is None:
        raise UsageError("nothing to prune by", remedy="pass --keep N, --max-age DURATION or both")
    max_age_ms = int(duration_seconds(max_age, "--max-age", positive=True) * 1000) if max_age else None
    protected: list[str] = []
    if not offline:
        c = connect(jobmanager)
        try:
            jobs = c.list_jobs()
        except ClusterUnreachableError as exc:
            raise ClusterUnreachableError(f"{exc.message}: which savepoints its jobs were started from cannot be known",
                                          remedy="pass -m HOST:PORT, or --offline to prune without that protection") from None
        protected = [p for j in jobs for p in c.protected_snapshots(str(j.get("jid")))]
    decisions = prune_directory(directory, keep=keep, max_age_ms=max_age_ms, now_ms=now_ms(), protected=protected, dry_run=dry_run)
    if session.json:
        emit_json({"dir": directory, "dry_run": dry_run, "savepoints": [d.to_dict() for d in decisions]})
        return
    verb = "Would dispose of" if dry_run else "Disposed of"
    for d in decisions:
        if d.dispose:
            out().print(f"{verb} {d.path} (job {d.job_id}, {d.reason})", markup=False)
    kept = sum(1 for d in decisions if not d.dispose)
    status(f"{sum(1 for d in decisions if d.dispose)} savepoint(s) {'to dispose of' if dry_run else 'disposed of'}, {kept} kept")


@app.command("schedule")
def schedule(
    job_id: JobId,
    every: Annotated[Optional[str], typer.Option("--every", metavar="DURATION", help="Take a savepoint of the job this often (1h, 30min, 10s), counted from now.")] = None,
    off: Annotated[bool, typer.Option("--off", help="Take no more periodic savepoints (the history stays).")] = False,
    max_count: Annotated[Optional[int], typer.Option("--max-count", min=1, metavar="N", help="Keep the newest N periodic savepoints; older ones are disposed of.")] = None,
    max_age: Annotated[Optional[str], typer.Option("--max-age", metavar="DURATION", help="Dispose of periodic savepoints older than this (7d, 12h).")] = None,
    jobmanager: JobManager = None,
    wide: Wide = False,
    json_: JsonFlag = False,
) -> None:
    """Take savepoints of a running job periodically, and show its savepoint history.

    The JobManager itself triggers a savepoint of the job every --every (into the job's
    execution.checkpointing.savepoint-dir), counted from now; --off stops that. With neither,
    the schedule and the history are shown and nothing changes. Retention applies to periodic
    savepoints only: beyond the newest --max-count or older than --max-age they are disposed
    of by the JobManager, never the savepoint the job was started from nor the snapshot a
    restart would restore from. Unset bounds keep their values (the job's
    execution.checkpointing.savepoint.history.* settings at first). With high availability
    the schedule survives a JobManager failover; without it, jobs do not (they are LOST).

    With --json: {"jid", "schedule": {"interval", "max-count", "max-age", "next"}, "history":
    [{"checkpoint_id", "location", "timestamp", "trigger"}], "disposed", "started-from",
    "restore-point"} (times in ms; the history newest first).

    Exit status: 0; 2 --every with --off, or a bad duration; 4 unknown job; 9 the job is not
    running.

    Examples:

    \b
        flinkpy savepoint schedule JOB_ID --every 1h --max-count 24
        flinkpy savepoint schedule JOB_ID --off
        flinkpy savepoint schedule JOB_ID --json | jq -r '.history[0].location'
    """
    from commands.context import client as connect
    from commands.options import duration_seconds

    if every is not None and off:
        raise UsageError("--every and --off contradict each other", remedy="pass one of them")
    interval_ms = int(duration_seconds(every, "--every", positive=True) * 1000) if every else None
    max_age_ms = int(duration_seconds(max_age, "--max-age", positive=True) * 1000) if max_age else None
    end = connect(jobmanager).cluster
    changing = every is not None or off
    if not changing and (max_count is not None or max_age is not None):
        changing, interval_ms = True, end.savepoint_schedule(job_id)["schedule"]["interval"]
    doc = end.set_savepoint_schedule(job_id, interval_ms, max_count=max_count, max_age_ms=max_age_ms) if changing else end.savepoint_schedule(job_id)
    doc = {"jid": job_id, **doc}
    if session.json:
        emit_json(doc)
        return
    _print_schedule(doc, wide)


def _print_schedule(doc: dict[str, Any], wide: bool) -> None:
    from commands.output import fmt_duration

    console = out()
    sched = doc["schedule"]
    if sched["interval"]:
        console.print(f"Periodic savepoints of job {doc['jid']}: every {fmt_duration(sched['interval'])}, next at "
                      f"{fmt_time(sched['next'])}; keeping the newest {sched['max-count']} for up to {fmt_duration(sched['max-age'])}.", markup=False)
    else:
        console.print(f"No periodic savepoints of job {doc['jid']}.", markup=False)
    history_table(console, doc, wide)


def history_table(console: Any, doc: dict[str, Any], wide: bool) -> None:
    """A job's savepoint history (``doc`` as ``GET /jobs/<id>/savepoints/schedule`` answers)."""
    if doc.get("started-from"):
        console.print(f"Started from: {doc['started-from']}", markup=False)
    rows = [[str(e["checkpoint_id"]), fmt_time(e["timestamp"]), e["trigger"], e["location"]] for e in doc.get("history") or []]
    if not rows:
        console.print("No savepoints taken yet.", markup=False)
        return
    columns = [Column("Id", justify="right"), Column("Completed", drop=1), Column("Trigger"), Column("Path", fold=True, min_width=20)]
    title = "Savepoint history" + (f" ({doc['disposed']} periodic disposed of)" if doc.get("disposed") else "")
    render(console, columns, rows, title=title, wide=wide)


@app.command("rewrite")
def rewrite(
    source: Annotated[str, typer.Argument(metavar="SRC", help="The savepoint or retained checkpoint to start from (directory, _metadata or fsspec URL); it is not changed.", show_default=False)],
    target: Annotated[str, typer.Argument(metavar="DST", help="Where to write the new savepoint: a directory that does not exist yet (path or fsspec URL).", show_default=False)],
    rename_uid: Annotated[Optional[list[str]], typer.Option("--rename-uid", metavar="OLD=NEW", help="Give the operator with uid OLD (or, without a uid, operator id OLD) the uid NEW (repeatable).")] = None,
    drop_uid: Annotated[Optional[list[str]], typer.Option("--drop-uid", metavar="UID", help="Leave the state of the operator with this uid (or operator id) out (repeatable).")] = None,
    max_parallelism: Annotated[Optional[int], typer.Option("--max-parallelism", min=1, metavar="N", help="Re-assign every key to its key group at max parallelism N.")] = None,
    trusted: Annotated[bool, typer.Option("--trusted", help="Decode state with Python's own unpickler (the job's classes, on PYTHONPATH): only for snapshots you trust.")] = False,
    json_: JsonFlag = False,
) -> None:
    """Write a new savepoint from an existing one, with operators renamed or dropped, or another max parallelism (offline).

    The State Processor API (flinkpy.state_processor) from the command line. --drop-uid edits
    come first, then --rename-uid, then --max-parallelism. A job whose operator uid changed
    restores its state from the new savepoint once the old uid is renamed to the new one;
    a job with another max parallelism restores it once its keys are re-assigned to key
    groups with --max-parallelism. Operators no edit touches keep their files byte for byte;
    the new savepoint is self-contained (a retained incremental checkpoint's store is written
    out in full) and is written state files first, _metadata last, so a rewrite that fails or
    is killed leaves nothing that looks like a savepoint.

    Prints each operator and what happened to it, then 'Savepoint written. Path: DST'. With
    --json, prints one document: {"path", "source", "kind", "job_id", "checkpoint_id",
    "max_parallelism", "operators": [{"operator_id", "uid", "name", "parallelism",
    "action"}], "dropped", "files_written", "bytes_written"}.

    Exit status: 0 written; 2 a bad flag value (--rename-uid without '=', a max parallelism
    out of range or below an operator's parallelism, or entries bound to their key group); 4 no
    snapshot at SRC, or no operator with a uid given; 8 the state holds classes that are
    decoded only with --trusted; 9 DST exists, SRC is damaged, an unaligned checkpoint or a Spark
    runner's savepoint, or a new uid is already taken.

    Examples:

    \b
        flinkpy savepoint rewrite ./sp-old ./sp-new \\
            --rename-uid sums=running-sums
        flinkpy savepoint rewrite s3://bkt/sp/savepoint-3f2a9c-1b2c3d4e5f60 \\
            s3://bkt/sp/rescaled --max-parallelism 256
        flinkpy savepoint rewrite --json ./sp ./sp-clean --drop-uid dedup \\
            | jq .operators
    """
    from flinkpy.state_processor import SavepointWriter

    renames = []
    for item in rename_uid or []:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise UsageError(f"--rename-uid {item!r} is not OLD=NEW", remedy="pass --rename-uid OLD_UID=NEW_UID")
        renames.append((old, new))
    writer = SavepointWriter.from_existing_savepoint(source, trusted=trusted, command="flinkpy savepoint rewrite")
    for uid in drop_uid or []:
        writer.remove_operator(uid)
    for old, new in renames:
        writer.change_operator_identifier(old, new)
    if max_parallelism is not None:
        writer.with_max_parallelism(max_parallelism)
    with progress(f"Writing the new savepoint to {target}..."):
        result = writer.write(target)
    if session.json:
        emit_json(result.to_dict())
        return
    console = out()
    for op in result.operators:
        label = op.name + (f" [uid {op.uid}]" if op.uid else f" [id {op.operator_id}]")
        console.print(f"{label}: {op.action}", markup=False, soft_wrap=True)
    for d in result.dropped:
        label = (d["name"] or "?") + (f" [uid {d['uid']}]" if d["uid"] else f" [id {d['operator_id']}]")
        console.print(f"{label}: dropped", markup=False, soft_wrap=True)
    console.print(f"Savepoint written. Path: {result.path}", markup=False, soft_wrap=True)


# `savepoint plan` lives in a module of its own
app.command("plan", context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False})(plan)
