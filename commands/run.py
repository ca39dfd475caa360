"""`flinkpy run` and `flinkpy info`: execute a job file, or show the plan it would execute."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.table import Table

from commands.context import client, load_cli_config
from commands.output import emit_json, out, status
from commands.options import Dynamic, JobManager, JsonFlag
from commands.session import session
from flinkpy.config import parse_override
from flinkpy.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from flinkpy.program.context import SubmittedJob

app = typer.Typer()

# Everything after JOB.py belongs to the job, including things that look like our flags.
_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}

JobFile = Annotated[Path, typer.Argument(metavar="JOB.py", help="The Python file that builds the job and calls env.execute().", show_default=False)]
JobArgs = Annotated[Optional[list[str]], typer.Argument(metavar="[ARGS]...", help="Arguments passed to the job file (its sys.argv[1:]).", show_default=False)]
Parallelism = Annotated[Optional[int], typer.Option("-p", "--parallelism", min=1, metavar="N", help="Default parallelism of the job's operators (parallelism.default).")]


def _check_job_file(job: Path) -> str:
    if not job.is_file():
        what = "is not a file" if job.exists() else "does not exist"
        raise NotFoundError(f"job file {job} {what}", remedy="pass the path of a Python job file")
    return str(job)


Detached = Annotated[bool, typer.Option("-d", "--detached", help="Submit the job and return without waiting for it to finish.")]
FromSavepoint = Annotated[
    Optional[str],
    typer.Option(
        "-s",
        "--fromSavepoint",
        "--from-savepoint",
        metavar="PATH",
        help="Restore the job's state from this savepoint or retained checkpoint (its directory, _metadata or an fsspec URL).",
    ),
]
AllowNonRestored = Annotated[
    bool,
    typer.Option(
        "-n",
        "--allowNonRestoredState",
        "--allow-non-restored-state",
        help="With -s: allow state of operators the job no longer has to be dropped instead of refusing to run.",
    ),
]
ClaimMode = Annotated[
    Optional[str],
    typer.Option(
        "--claim-mode",
        "--claimMode",
        "-rm",
        "--restoreMode",
        metavar="claim|no_claim",
        help="With -s: who owns a retained checkpoint restored from. no_claim (default): it is left alone and the first checkpoint is full; claim: the job owns it and deletes it once newer checkpoints subsume it (execution.state-recovery.claim-mode).",
    ),
]
FromLatest = Annotated[
    Optional[str],
    typer.Option(
        "--from-latest",
        metavar="DIR",
        help="Restore from the newest complete checkpoint or savepoint found under DIR (by completion time) that the runner asked for took; with --runner spark a Spark job's checkpoint location counts too.",
    ),
]
Runner = Annotated[
    Optional[str],
    typer.Option("--runner", metavar="local|spark", help="Engine to run on: local (flinkpy's own, the default) or spark (Spark Structured Streaming through PySpark); execution.runner."),
]
SparkMaster = Annotated[
    Optional[str],
    typer.Option("--spark-master", metavar="MASTER", help="With --runner spark: the Spark master, e.g. local[2], spark://HOST:7077, yarn (spark.master; default local[2])."),
]
PyFiles = Annotated[
    Optional[str],
    typer.Option(
        "-pyfs",
        "--pyFiles",
        "--py-files",
        metavar="PATHS",
        help="Python files the job's functions import, comma-separated: modules (.py), package or module directories, .zip/.whl/.egg archives; shipped with the job to the TaskManagers (or Spark's executors) and importable in JOB.py too (added to python.files, like env.add_python_file).",
    ),
]
SparkConf = Annotated[
    Optional[list[str]],
    typer.Option("--spark-conf", metavar="KEY=VALUE", help="With --runner spark: a Spark setting for the job's SparkSession (repeatable)."),
]


@app.command("run", context_settings=_PASS_THROUGH)
def run(
    job: JobFile, args: JobArgs = None, detached: Detached = False, parallelism: Parallelism = None,
    from_savepoint: FromSavepoint = None, allow_non_restored: AllowNonRestored = False, claim_mode: ClaimMode = None,
    from_latest: FromLatest = None, runner: Runner = None, spark_master: SparkMaster = None, spark_conf: SparkConf = None,
    py_files: PyFiles = None, jobmanager: JobManager = None, dynamic: Dynamic = None, json_: JsonFlag = False,
) -> None:
    """Run a job: execute JOB.py, submitting what it builds to a cluster.

    The job file runs on this machine; each env.execute() in it submits a job to the cluster
    given by -m, $FLINKPY_JOBMANAGER or the cluster running in $FLINKPY_HOME, or, when there is
    none, to an embedded local cluster that lives as long as the command. What the job prints
    appears on stdout; flinkpy's own status lines go to stderr.

    Without -d the command waits for the job and exits 5 if it fails, 10 if it is cancelled.
    Meanwhile it says on stderr, as it happens, when the job fails and restarts (with the
    cause, and how often the same failure repeated), waits for slots, or a checkpoint fails.
    An embedded cluster ends with the command, even when the command is killed (SIGKILL
    included). Ctrl-C (SIGINT) or SIGTERM on an attached run cancels the job on the embedded
    cluster, stops the cluster and exits 130 (SIGINT) or 143 (SIGTERM) with one line saying
    so; on a running cluster the job keeps running, as with Flink's client, and the line says
    how to cancel it (-D execution.shutdown-on-attached-exit=true cancels it there too). A
    second signal while that is carried out exits at once. With -d it returns once the job is submitted and prints its id on stdout (one
    line per job: jid=$(flinkpy run -d job.py) works; Flink's "Job has been submitted with
    JobID" line is on stderr), and exits 5 when the job failed before running. With -d or
    --json, what JOB.py itself prints goes to stderr. Options must come before JOB.py:
    everything after it is passed to the job.

    A job whose slots other jobs still hold (submitted right after cancelling the job before
    it, say) waits for them in state CREATED, up to slot.request.timeout (5 min; -D
    slot.request.timeout=30s), then fails with NoResourceAvailableException; -d says so on
    stderr and reports "state": "CREATED" in --json. A job that needs more slots than the
    cluster has fails at once.

    With -s PATH the job starts from a savepoint's (or retained checkpoint's) state, matched
    to operators by uid (or generated id). If the savepoint holds state of an operator the
    job no longer has, the run is refused with exit 7 unless -n drops that state. --from-latest
    DIR restores from the newest complete checkpoint or savepoint under DIR that the runner
    asked for took and says which on stderr (with --runner spark: a Spark savepoint, or a Spark
    job's checkpoint location, as -s takes it); one of the other runner's is never picked, and
    a DIR holding only such snapshots is refused (exit 4). --claim-mode claim hands a retained checkpoint to the new job (it deletes the
    checkpoint once newer ones subsume it); no_claim, the default, never touches it and makes
    the first checkpoint a full one. Dry-run a restore first with 'flinkpy savepoint plan'.

    With --runner spark (or execution.runner: spark) the same job file runs on Spark Structured
    Streaming: a driver process translates it (refusing what does not translate, exit 7), owns
    the SparkSession and the streaming query, restarts the query from its checkpoint location
    as the restart strategy allows, and answers the lifecycle commands (list, cancel, stop,
    savepoint, checkpoint list, job exceptions, fault kill-task) like a cluster does. -d
    returns the job id at once. A Spark savepoint restores at another parallelism (or with -n)
    through the engine's layout of its state, which it also keeps; exit 7 where that layout
    lacks some state. -s also takes an engine snapshot (the state moves to Spark) or a Spark
    job's checkpoint location (the path 'flinkpy checkpoint list JOB_ID' shows) to resume a job
    whose driver was killed from its last committed batch: exit 9 while that driver runs, 7 at
    another parallelism, 4 for a location with no committed batch. On a cluster master
    (spark://HOST:PORT, see 'flinkpy spark start') the driver ships flinkpy, the job file's
    directory and env.add_python_file files to the executors and checks their Python first:
    exit 3 when the master does not answer, 8 when the executors lack a module. See
    docs/spark/index.md.

    What the job's functions import travels with the job: the job file's directory (its modules
    and packages) and every python.files entry (env.add_python_file, --pyFiles, -D
    python.files) are packed into one archive sent with the submission; each TaskManager
    fetches it once per job and puts it on its tasks' sys.path, so the TaskManagers need no
    access to this machine's files. A submission larger than the JobManager's
    rest.server.max-content-length (100 mb) is refused before it is sent, with exit 8 and the
    sizes; a TaskManager that cannot fetch or unpack the archive fails the task with the reason.

    Examples:

    \b
        flinkpy run examples/word_count.py --input words.txt
        flinkpy run --runner spark --spark-master 'local[2]' even_odd_sum.py
        flinkpy run --runner spark --spark-master spark://10.0.0.5:7077 job.py
        jid=$(flinkpy run -d -p 4 -m 127.0.0.1:8081 job.py)
        flinkpy run -D execution.checkpointing.interval=10s job.py
        flinkpy run --pyFiles lib/helpers.py,lib/mypackage job.py
        flinkpy run --json -d job.py | jq -r '.jobs[0].jid'
        flinkpy run -s /savepoints/savepoint-3f2a9c-1b2c3d4e5f60 -p 3 job.py
        flinkpy run --from-latest /var/flinkpy/checkpoints/3f2a9c0e job.py
        flinkpy run --runner spark --from-latest /var/flinkpy/checkpoints job.py
        flinkpy run -s ./checkpoints/3f2a9c0e/chk-42 --claim-mode claim job.py
    """
    path = _check_job_file(job)
    overrides = dict(parse_override(item) for item in dynamic or [])
    if runner is not None:
        overrides["execution.runner"] = runner
    if spark_master is not None:
        overrides["spark.master"] = spark_master
    if py_files:
        overrides["python.files"] = _python_files(overrides.get("python.files"), py_files)
    # refuse bad -D values (and a bad flinkpy.yaml) before running user code
    config = load_cli_config([f"{k}={v}" for k, v in overrides.items()])
    restore = _restore_options(from_savepoint, from_latest, allow_non_restored, claim_mode, overrides,
                               spark=config.get("execution.runner") == "spark")
    # stdout is for the JSON document, or with -d for the job ids: what the program prints
    # while it builds the job goes to stderr then
    quiet_stdout = session.json or detached
    with contextlib.redirect_stdout(sys.stderr) if quiet_stdout else contextlib.nullcontext():
        submitted = client(jobmanager).run(
            path, list(args or []), parallelism=parallelism, detached=detached, overrides=overrides,
            job_stdout=2 if session.json else None,  # keep stdout for the one JSON document
            on_submit=lambda job_id, name: status(f"Job has been submitted with JobID {job_id}"),
            on_event=status,  # attached: each failure, restart and wait of the job on stderr, as it happens
            debug=session.debug,  # a failed task's whole traceback, not only the job's frames
            spark_conf=_spark_conf(spark_conf), **restore,
        )
    _report_submitted(submitted, detached)


def _python_files(value: str | None, py_files: str) -> str:
    """``python.files`` with the --pyFiles entries added (absolute: the job may change directory)."""
    import os

    from flinkpy.program import python_files

    for item in python_files.entries(py_files):
        if not os.path.exists(item):
            raise NotFoundError(f"--pyFiles names {item}, which does not exist",
                                remedy="pass existing .py files, directories or .zip/.whl/.egg archives, separated by commas")
        value = python_files.add_entry(value, os.path.abspath(item))
    return value or ""


def _restore_options(from_savepoint: str | None, from_latest: str | None, allow_non_restored: bool, claim_mode: str | None,
                     overrides: dict[str, str], *, spark: bool = False) -> dict[str, str | bool]:
    """run_program's restore arguments from -s/--from-latest/-n/--claim-mode (the claim mode
    goes into ``overrides``); says on stderr which snapshot --from-latest picked, among those
    the runner (Spark with ``spark``, else the engine) took."""
    if from_savepoint and from_latest:
        raise UsageError("-s/--fromSavepoint and --from-latest exclude each other", remedy="pass one of them")
    if allow_non_restored and not (from_savepoint or from_latest):
        raise UsageError("-n/--allowNonRestoredState needs -s PATH or --from-latest DIR", remedy="pass the savepoint to restore from")
    if from_latest:
        from flinkpy.client.latest import latest_snapshot
        from flinkpy.client.upgrade import Runner

        snap = latest_snapshot(from_latest, Runner.SPARK if spark else Runner.ENGINE)
        status(f"Restoring from {snap.path} ({snap.describe()})")
        from_savepoint = snap.path
    if claim_mode is not None:
        mode = claim_mode.strip().upper().replace("-", "_")
        if mode not in ("CLAIM", "NO_CLAIM"):
            raise UsageError(f"--claim-mode {claim_mode!r} is not a claim mode", remedy="use claim or no_claim")
        if not (from_savepoint or from_latest):
            raise UsageError("--claim-mode needs -s PATH or --from-latest DIR", remedy="pass the checkpoint to restore from")
        overrides["execution.state-recovery.claim-mode"] = mode
    if from_savepoint:
        return {"savepoint_path": from_savepoint, "allow_non_restored_state": allow_non_restored}
    return {}


def _report_submitted(submitted: list[SubmittedJob], detached: bool) -> None:
    """Status lines and the JSON document of the jobs a run submitted; exit 5 or 10 when one
    of them (waited for) failed or was cancelled."""
    for sub in submitted:
        if detached and sub.state == "CREATED":
            status(f"Job {sub.job_id} waits for slots that other jobs hold (up to slot.request.timeout); "
                   f"'flinkpy job show {sub.job_id}' shows when it runs")
        if not detached and sub.state == "FINISHED":
            status(f"Job with JobID {sub.job_id} has finished.")
            if sub.net_runtime_ms is not None:
                status(f"Job Runtime: {sub.net_runtime_ms} ms")
    from flinkpy.client.program import outcome_error

    # waited for: how it ended; detached: whether it failed before running (too few slots)
    errors = [e for e in (outcome_error(s) if not detached or s.state == "FAILED" else None for s in submitted) if e is not None]
    jobs = {"jobs": [{"jid": s.job_id, "name": s.name, "state": s.state, "net-runtime": s.net_runtime_ms} for s in submitted]}
    if session.json:
        if errors:
            session.error_context.update(jobs)  # one document: the jobs beside the error
        else:
            emit_json(jobs)
    elif detached:
        for sub in submitted:  # jid=$(flinkpy run -d job.py)
            print(sub.job_id, flush=True)
    if errors:
        raise errors[0]


def _spark_conf(items: list[str] | None) -> dict[str, str] | None:
    if not items:
        return None
    from flinkpy.spark.driver import parse_spark_conf

    return parse_spark_conf(items)


@app.command("info", context_settings=_PASS_THROUGH)
def info(
    job: JobFile,
    args: JobArgs = None,
    parallelism: Parallelism = None,
    json_: JsonFlag = False,
    runner: Annotated[
        Optional[str],
        typer.Option("--runner", metavar="local|spark", help="Show the plan for this engine: local (the job graph, the default) or spark (the Spark Structured Streaming query it translates to)."),
    ] = None,
) -> None:
    """Show the execution plan of a job without running it.

    Runs JOB.py up to env.execute(), then prints the job graph that would be submitted: the
    chains of operators that share a task, their parallelism and how records are partitioned
    between them (FORWARD, HASH, REBALANCE, ...), the path each window operator takes (sliced:
    tumbling and sliding windows with reduce/aggregate and the default trigger, each record
    folded into one slice of gcd(size, slide); general: every window's contents, for evictors,
    custom triggers, sessions and window functions alone; with the reason), the state backend
    the job's keyed state would live in (hashmap or rocksdb, and whether its checkpoints are incremental, from the job and
    the cluster's configuration), then the delivery guarantee of each source
    and sink and of the job end to end (the weakest of them and the checkpointing mode; see
    flinkpy-connectors(7)). Nothing is submitted.

    Examples:

    \b
        flinkpy info examples/word_count.py
        flinkpy info -p 4 --json job.py > plan.json
        flinkpy info --runner spark examples/word_count.py

    With --runner spark it shows the Spark plan instead: each step of the query (the flinkpy
    data source, mapInArrow chains, transformWithStateInPandas for keyed operators with its time
    mode: EventTime, or ProcessingTime where an operator needs the processing-time clock, as
    processing-time windows, triggers and timers and state TTL do; foreachBatch for the sinks)
    with the operators it runs, or refuses the job naming the operator Spark cannot run with the
    same results, and why (exit code 7). When the job is a graph (fan-out, side outputs read
    downstream, several sinks, keyed operators after keyed operators) it also lists the routes:
    the graph edges its rows travel on, each step emitting or passing them on.
    """
    path = _check_job_file(job)
    if runner not in (None, "local", "spark"):
        raise UsageError(f"--runner {runner!r} is not a runner", remedy="use --runner local or --runner spark")
    if runner == "spark":
        _info_spark(path, list(args or []), parallelism)
        return
    from flinkpy.client.program import plan_program

    plan = plan_program(path, list(args or []), parallelism=parallelism)
    if session.json:
        emit_json(plan)
        return
    out().print(plan_table(plan))
    backend = plan.get("state_backend")
    if backend:
        out().print(f"State backend: {backend['type']}" + (", incremental checkpoints" if backend["incremental"] else ""), markup=False)
    if plan.get("guarantees"):
        out().print(guarantees_table(plan["guarantees"]))


def _info_spark(path: str, args: list[str], parallelism: int | None) -> None:
    from flinkpy.client.program import spark_plans

    plans = spark_plans(path, args, parallelism=parallelism)
    if session.json:
        emit_json(plans[0].to_dict() if len(plans) == 1 else [p.to_dict() for p in plans])
        return
    for plan in plans:
        out().print(plan.explain(), markup=False, highlight=False)


def guarantees_table(g: dict[str, Any]) -> Table:
    """Each source's and sink's delivery guarantee, and the job's end to end (the weakest)."""
    table = Table(
        title=f"Delivery guarantees (checkpointing {g['checkpointing']}): end to end {g['end_to_end']}",
        title_justify="left",
    )
    table.add_column("Operator")
    table.add_column("Connector")
    table.add_column("Guarantee")
    table.add_column("Needs")
    for kind in ("sources", "sinks"):
        for entry in g[kind]:
            table.add_row(entry["operator"], entry["connector"], entry["guarantee"], entry["needs"])
    return table


def plan_table(plan: dict[str, Any]) -> Table:
    """A plan as people read it: one row per chain, inputs named by their partitioning."""
    table = Table(title=f"Plan of {plan.get('name', 'job')}", title_justify="left")
    table.add_column("ID", overflow="fold")
    table.add_column("Chain")
    table.add_column("Parallelism", justify="right")
    table.add_column("Inputs")
    for node in plan.get("nodes", []):
        chain = " -> ".join(node.get("operators") or [node.get("contents", node.get("type", "?"))])
        chain += "".join(f"\n  window path: {w['path']} ({w['reason']})" for w in node.get("windows", []))
        preds = node.get("predecessors", [])
        two_inputs = any(p.get("side") == "second" for p in preds)
        inputs = ", ".join(
            f"{p.get('ship_strategy', '?')} from {p.get('id')}" + ((" (2nd)" if p.get("side") == "second" else " (1st)") if two_inputs else "")
            for p in preds
        )
        table.add_row(str(node.get("id")), chain, str(node.get("parallelism", "?")), inputs or "(source)")
    return table
