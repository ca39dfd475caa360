"""`flinkpy checkpoint`: a running job's checkpoints, and checkpoint files.

``list`` and ``trigger`` ask a cluster (REST). ``inspect`` and ``verify`` are offline: they read
a checkpoint's files directly (any path or fsspec URL, s3:// included) and need no cluster.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from commands.errors import PROG
from commands.options import JobManager, JsonFlag, Wide, timeout_seconds
from commands.output import emit_json, fmt_size, fmt_time, out, progress
from commands.session import session
from commands.tables import Column, fits, render
from flinkpy.errors import ExitCode

app = typer.Typer(
    help="List and trigger a running job's checkpoints; inspect and verify checkpoint files (offline).",
    no_args_is_help=True,
)

PathArg = Annotated[
    str,
    typer.Argument(
        metavar="PATH",
        help="The checkpoint: its directory (.../chk-5), its _metadata file, or an fsspec URL of either (file://, s3://, ...).",
        show_default=False,
    ),
]


def _states(handle: dict[str, Any] | None) -> list[str]:
    if not handle:
        return []
    lines = []
    for name, desc in handle["states"].items():
        # a sink that keeps its pending transaction's records (the Kafka sink) says how many
        held = f", {desc['pending_records']} records in its pending transaction" if "pending_records" in desc else ""
        if "pending" in desc:  # a two-phase-commit sink: its transactions awaiting the commit
            lines.append(f"{name} (two-phase commit, {desc['entries']} pending){held}")
            lines += [f"  {_pending(txn)}" for txn in desc["pending"]]
        else:
            lines.append(f"{name} ({desc['kind']}, {desc.get('entries', 'not counted')}){held}")
    return lines


def _pending(txn: dict[str, Any]) -> str:
    """One pending transaction of a two-phase-commit sink on one line.

    >>> _pending({"transaction_id": "fp-1-0-ab", "checkpoint_id": 3, "files": 2, "records": 1000})
    'fp-1-0-ab: checkpoint 3, 2 files, 1000 records'
    >>> _pending({"files": 1})
    '1 files'
    """
    facts = [f"checkpoint {txn['checkpoint_id']}"] if "checkpoint_id" in txn else []
    facts += [f"{txn[k]} {k}" for k in ("files", "records") if k in txn]
    facts += [f"{k} {v}" for k, v in txn.items() if k not in ("transaction_id", "checkpoint_id", "files", "records")]
    head = txn.get("transaction_id")
    return f"{head}: {', '.join(facts)}" if head and facts else head or ", ".join(facts) or "(undescribed)"


def _offsets(value: Any, prefix: str = "") -> list[str]:
    """Source offsets as ``key: value`` lines, nested keys joined by dots (``splits.0.offset``):
    in a narrow column a line wraps between entries, where raw JSON broke mid-token.

    >>> _offsets({"split": "0", "offset": 1234, "pending": [], "reader": {"pos": 7}})
    ['offset: 1234', 'pending: []', 'reader.pos: 7', 'split: 0']
    """
    if isinstance(value, dict) and value:
        return [line for k in sorted(value, key=str) for line in _offsets(value[k], f"{prefix}{k}.")]
    if isinstance(value, list) and value:
        return [line for i, item in enumerate(value) for line in _offsets(item, f"{prefix}{i}.")]
    if value is None and not prefix:
        return []
    shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return [f"{prefix.rstrip('.')}: {shown}" if prefix else str(shown)]


# --------------------------------------------------------------------------- offline commands


@app.command("inspect")
def inspect(
    path: PathArg,
    spark_reader: Annotated[
        bool | None,
        typer.Option(
            "--spark-reader/--no-spark-reader",
            help="For a Spark checkpoint location: ask Spark's state readers for the rows per partition and the batch range of each operator's state (starts a local Spark; the default when PySpark is installed).",
            show_default=False,
        ),
    ] = None,
    json_: JsonFlag = False,
) -> None:
    """Show what a checkpoint or savepoint holds: operators, subtasks, key groups, states, sizes.

    Reads only the _metadata file (no state file is opened; use 'flinkpy checkpoint verify'
    for that), so it is quick even on S3. The header names the job, the checkpoint id, its
    kind (with aligned or unaligned for a checkpoint), mode and times, the max parallelism and
    the total size, and for an unaligned checkpoint the bytes it stored in flight (channel
    state: buffers read but not processed, and buffers not yet sent); the table has one row per
    operator subtask with its key-group range, its states (kind and number of entries, and the
    subtask's in-flight input and output bytes), its size and its source offsets. For an
    exactly-once sink (a two-phase commit: Iceberg, PostgreSQL, files) the states name the
    transactions the checkpoint pre-committed and its completion commits, one a line: the
    transaction id and, where the sink says, the checkpoint, data files and records.

    With --json, prints one document: {"path", "metadata_path", "metadata", "summary"}, where
    metadata is the _metadata document itself and summary holds the totals (size per
    operator, per subtask and per key-group range, total size, number of files). For an
    incremental checkpoint (rocksdb backend, execution.checkpointing.incremental) the header
    also shows its incremental size — what it uploaded itself — and its full size — everything
    a restore reads, the shared files it references included; summary has incremental_size,
    full_size and shared_files. summary also has alignment (aligned or unaligned) and
    in_flight_input_bytes / in_flight_output_bytes, in total and per subtask. A two-phase-commit
    sink's operator_state.states.sink is {"kind": "sink", "entries",
    "transaction_prefix", "pending": [{"transaction_id", "checkpoint_id", "files", "records"},
    ...]} (each with the facts its sink knows).

    PATH may also be a Spark Structured Streaming checkpoint location (a directory with
    metadata, offsets/, commits/, state/; a Spark job's checkpoint, which 'flinkpy checkpoint
    list JOB_ID' shows), or a Spark job's directory <dir>/<job_id> holding it in spark/, as
    'flinkpy run -s' takes them: then it shows the query id,
    the latest batch and whether it is committed (an uncommitted batch runs again on restart),
    its offsets per source, the committed batches, and each stateful operator with its
    partitions, their files' size on disk and, through Spark's state-metadata and statestore
    readers (--spark-reader, the default when PySpark is installed), the rows (keys) in each
    partition at the latest committed batch. With --json: {"path", "format": "spark",
    "query_id", "reader", "latest_batch", "latest_committed_batch", "uncommitted_batch",
    "batches", "committed_batches", "latest", "sources", "operators"}.

    Exit status: 0 when the _metadata could be read; 4 when there is no complete checkpoint
    at PATH (nothing there, or a directory without _metadata); 8 for --spark-reader without
    PySpark or Java; 9 when _metadata is truncated, not JSON, of another format or version, or
    lacks fields.

    Examples:

    \b
        flinkpy checkpoint inspect /var/flinkpy/checkpoints/3f2a9c0e/chk-12
        flinkpy checkpoint inspect s3://bucket/ckpt/3f2a9c0e/chk-12/_metadata
        flinkpy checkpoint inspect ./chk-12 --json | jq .summary.total_size
        flinkpy checkpoint inspect ./spark --json | jq .latest_committed_batch
        flinkpy checkpoint inspect /var/flinkpy/checkpoints/9b1e0c7d --json
    """
    from flinkpy.checkpoint.metadata import summarize
    from flinkpy.checkpoint.storage import CheckpointStorage
    from flinkpy.spark.checkpoint_inspect import spark_location

    location = spark_location(path)  # the location, or a Spark job's directory holding it
    if location is not None:
        _inspect_spark(location, spark_reader)
        return

    storage = CheckpointStorage(path)
    dir_url, meta_url = storage.locate(path)
    doc = storage.read_metadata(meta_url)
    summary = summarize(doc)
    if session.json:
        emit_json({"path": dir_url, "metadata_path": meta_url, "metadata": doc, "summary": summary})
        return
    _print_metadata(dir_url, doc, summary)


def _print_metadata(dir_url: str, doc: dict[str, Any], summary: dict[str, Any]) -> None:
    """'inspect' for people: the header lines, then one table row per operator subtask."""
    console = out()
    kind = doc["kind"] + (f" ({doc['savepoint_format']})" if doc.get("savepoint_format") else f" ({doc.get('alignment', 'aligned')})")
    duration = doc["completion_timestamp"] - doc["trigger_timestamp"]
    for line in (
        f"Checkpoint: {dir_url}",
        f"Job: {doc['job_name']} ({doc['job_id']})",
        f"Checkpoint id: {doc['checkpoint_id']}; kind: {kind}; mode: {doc['mode']}",
        f"Triggered: {fmt_time(doc['trigger_timestamp'])}; completed: {fmt_time(doc['completion_timestamp'])} ({duration} ms)",
        f"Max parallelism: {doc['max_parallelism']}",
        f"Total size: {fmt_size(summary['total_size'])} in {summary['files']} file(s), {len(doc['operators'])} operator(s)",
    ) + ((
        f"In flight (channel state): {fmt_size(summary['in_flight_input_bytes'])} input, "
        f"{fmt_size(summary['in_flight_output_bytes'])} output",
    ) if summary["alignment"] == "unaligned" else ()) + ((
        f"Incremental: uploaded {fmt_size(summary['incremental_size'])} (incremental size); "
        f"full size {fmt_size(summary['full_size'])}, {summary['shared_files']} shared file(s)",
    ) if summary["incremental"] else ()):
        console.print(line, markup=False)
    sizes = {(o["operator_id"], s["subtask"]): s["size"] for o in summary["operators"] for s in o["subtasks"]}
    in_flight = {(o["operator_id"], s["subtask"]): (s["in_flight_input_bytes"], s["in_flight_output_bytes"]) for o in summary["operators"] for s in o["subtasks"]}
    rows: list[tuple[str, str, str, list[str], str, list[str]]] = []  # one per operator subtask
    for op in doc["operators"]:
        label = op["name"] + (f" [uid {op['uid']}]" if op.get("uid") else f" [id {op['operator_id']}]")
        subtasks = sorted(op["subtasks"], key=lambda s: s["subtask"])
        if not subtasks:
            rows.append((label, "-", "", ["(no state)"], fmt_size(0), []))
        for sub in subtasks:
            keyed = sub.get("keyed_state")
            groups = f"{keyed['key_groups'][0]}-{keyed['key_groups'][1]}" if keyed else ""
            states = _states(keyed) + _states(sub.get("operator_state"))
            if sub.get("channel_state"):
                i_bytes, o_bytes = in_flight[(op["operator_id"], sub["subtask"])]
                states.append(f"in flight: {fmt_size(i_bytes)} in, {fmt_size(o_bytes)} out")
            rows.append((label, f"{sub['subtask']}/{op['parallelism']}", groups, states or ["(no state)"],
                         fmt_size(sizes[(op["operator_id"], sub["subtask"])]), _offsets(sub.get("source_offsets"))))
    headers = ("Operator", "Subtask", "Key groups", "States (kind, entries)", "Size", "Source offsets")
    cells = [[label, subtask, groups, "\n".join(states), size, "\n".join(offsets)] for label, subtask, groups, states, size, offsets in rows]
    if not fits(headers, cells, console.width):
        _print_state_records(rows, fmt_size(summary["total_size"]))
        return
    table = Table(title="State", title_justify="left", show_footer=True)
    for header in headers:
        table.add_column(header, justify="right" if header == "Size" else "left", no_wrap=True,
                         footer={"Operator": "Total", "Size": fmt_size(summary["total_size"])}.get(header, ""))
    previous = None
    for row in cells:
        # Text, not str: names, uids and offsets are data, never rich markup.
        table.add_row(*(Text(row[0] if row[0] != previous else ""), *(Text(c) for c in row[1:])))
        previous = row[0]
    console.print(table)


def _print_state_records(rows: list[tuple[str, str, str, list[str], str, list[str]]], total: str) -> None:
    """'inspect' in a terminal too narrow for the table: per operator, its subtasks as
    ``key: value`` lines, every id, state name and offset whole."""
    console = out()
    console.print(Text("State"))
    previous = None
    for label, subtask, groups, states, size, offsets in rows:
        if label != previous:
            console.print(Text(label), soft_wrap=True)
            previous = label
        console.print(Text(f"  subtask {subtask}: {size}"), soft_wrap=True)
        if groups:
            console.print(Text(f"    key groups: {groups}"), soft_wrap=True)
        console.print(Text("    states: " + states[0]), soft_wrap=True)
        for state in states[1:]:
            console.print(Text("            " + state), soft_wrap=True)
        if offsets:
            console.print(Text("    source offsets:"), soft_wrap=True)
            for line in offsets:
                console.print(Text("      " + line), soft_wrap=True)
    console.print(Text(f"Total: {total}"))


def _inspect_spark(path: str, spark_reader: bool | None) -> None:
    """The Spark branch of 'inspect' (see flinkpy.spark.checkpoint_inspect)."""
    from flinkpy.spark.checkpoint_inspect import inspect_with_readers

    doc = inspect_with_readers(path, spark_reader)
    if session.json:
        emit_json(doc)
        return
    console = out()
    latest = doc["latest"]
    if latest is None:
        batch = "none (the query has not started a batch)"
    else:
        state_ = "committed" if latest["committed"] else "not committed: a restart runs it again"
        batch = f"{latest['batch_id']} ({state_}; started {fmt_time(latest['timestamp_ms'])}, watermark {latest['watermark_ms']} ms)"
    committed = doc["committed_batches"]
    for line in (
        f"Spark checkpoint location: {doc['path']}",
        f"Query id: {doc['query_id']}",
        f"Latest batch: {batch}",
        f"Committed batches: {f'{committed[0]}-{committed[-1]} ({len(committed)} retained)' if committed else 'none'}",
    ):
        console.print(line, markup=False)
    if doc["sources"]:
        table = Table(title="Sources (offsets of the latest batch)", title_justify="left")
        table.add_column("Source", justify="right")
        table.add_column("Offset", overflow="fold")
        table.add_column("Files read", justify="right")
        for src in doc["sources"]:
            table.add_row(str(src["index"]), Text("\n".join(_offsets(src["offset"])) or "-"), "" if src["files_read"] is None else str(src["files_read"]))
        console.print(table)
    if not doc["operators"]:
        console.print("No stateful operators.", markup=False)
        return
    table = Table(title="State", title_justify="left", show_footer=True)
    table.add_column("Operator", footer="Total")
    table.add_column("Batches")
    table.add_column("Partition", justify="right")
    rows_total = [op["rows"] for op in doc["operators"]]
    table.add_column("Rows", justify="right", footer="-" if None in rows_total else str(sum(rows_total)))
    table.add_column("Files", justify="right", footer=str(sum(op["files"] for op in doc["operators"])))
    table.add_column("Size on disk", justify="right", footer=fmt_size(sum(op["bytes"] for op in doc["operators"])))
    for op in doc["operators"]:
        label = f"{op['operator_id']} {op['name'] or ''}".strip()
        batches = "" if op["min_batch_id"] is None else f"{op['min_batch_id']}-{op['max_batch_id']}"
        for i, part in enumerate(op["partition_state"]):
            table.add_row(
                Text(label if i == 0 else ""),
                batches if i == 0 else "",
                f"{part['partition']}/{op['partitions']}",
                "-" if part["rows"] is None else str(part["rows"]),
                str(part["files"]),
                fmt_size(part["bytes"]),
            )
    console.print(table)
    for op in doc["operators"]:
        if op.get("rows_error"):
            console.print(f"Rows of operator {op['operator_id']}: not read ({op['rows_error']})", markup=False)


@app.command("verify")
def verify(path: PathArg, json_: JsonFlag = False) -> None:
    """Check that a checkpoint or savepoint can be restored, reading every file it references.

    The checkpoint is restorable when its _metadata parses, matches its own checksum
    (metadata_checksum: a changed offset or size in it is caught) and is valid, and every state file
    it references exists with the size and sha256 checksum recorded there. Each problem is
    reported as one line on stderr that names the file and what is wrong ("state file is
    missing", "size mismatch: ...", "checksum mismatch: ..."). Files that _metadata does not
    reference (for example, leftovers of an interrupted upload) are ignored.

    With --json, prints one document: {"path", "metadata_path", "restorable", "job_id",
    "checkpoint_id", "files_checked", "bytes_checked", "problems": [{"path", "problem"}],
    "warnings"}; the problem lines still go to stderr. A _metadata written by an older
    flinkpy, without a checksum of its own, is checked all the same, with a warning.

    Exit status: 0 when the checkpoint is restorable; 9 when it is present but not
    restorable (a bad _metadata, a missing file, a wrong size or checksum); 4 when there is
    no complete checkpoint at PATH (nothing there, or a directory without _metadata).

    Examples:

    \b
        flinkpy checkpoint verify /var/flinkpy/checkpoints/3f2a9c0e/chk-12
        flinkpy checkpoint verify \\
            s3://bucket/savepoints/savepoint-3f2a9c-1b2c3d4e5f60 --json
        flinkpy checkpoint verify ./chk-12 || echo "chk-12 is damaged"
    """
    from flinkpy.checkpoint.storage import CheckpointStorage

    report = CheckpointStorage(path).verify(path)
    for warning in report.warnings:
        sys.stderr.write(f"{PROG}: warning: {warning}\n")
    for problem in report.problems:
        sys.stderr.write(f"{PROG}: error: {problem}\n")
    sys.stderr.flush()
    if session.json:
        emit_json(report.to_dict())
    elif report.restorable:
        doc = report.metadata or {}
        out().print(
            f"Restorable: {doc.get('kind', 'checkpoint')} {doc.get('checkpoint_id')} of job {doc.get('job_id')} at {report.path} "
            f"({report.files_checked} file(s), {fmt_size(report.bytes_checked)} verified).",
            markup=False,
        )
    if not report.restorable:
        if not session.json:
            sys.stderr.write(f"{PROG}: error: {report.path} is not restorable: {len(report.problems)} problem(s)\n")
        raise typer.Exit(ExitCode.CONFLICT)


# --------------------------------------------------------------------------- cluster commands
# Commands that talk to a running cluster through the REST client (list, trigger) go here.

JobId = Annotated[str, typer.Argument(metavar="JOB_ID", help="ID of the job (see 'flinkpy list').", show_default=False)]


def _ms(value: Any) -> str:
    return "-" if value is None else f"{int(value)} ms"


@app.command("list")
def list_(
    job_id: JobId,
    history: Annotated[int, typer.Option("--history", min=1, metavar="N", help="How many of the newest checkpoints to show.")] = 10,
    jobmanager: JobManager = None,
    wide: Wide = False,
    json_: JsonFlag = False,
) -> None:
    """Show a job's checkpoint history and counts.

    One row per checkpoint, newest first: id, status (IN_PROGRESS, COMPLETED, FAILED with its
    reason), trigger time, end-to-end duration, checkpointed size (what the checkpoint uploaded:
    less than the full size for incremental checkpoints) and full size (everything a restore
    reads), its kind (aligned, unaligned, or savepoint, which is always aligned), the bytes an
    unaligned checkpoint stored in flight (channel state), the longest barrier alignment
    and the bytes processed during alignment, and how many subtasks acknowledged. Then the counts
    and the latest completed, failed and restored checkpoints. The JSON document has the fields
    of Flink's /jobs/:jobid/checkpoints REST response (unaligned_checkpoint and persisted_data
    as in Flink; persisted_input_data and persisted_output_data split the latter).

    Examples:

    \b
        flinkpy checkpoint list 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        flinkpy checkpoint list --json JOB_ID \\
            | jq .latest.completed.external_path
    """
    from commands.context import client

    doc = client(jobmanager).checkpoints(job_id, history)
    if session.json:
        emit_json(doc)
        return
    columns = [Column("ID", justify="right"), Column("Status", fold=True, min_width=10), Column("Triggered", drop=5),
               Column("Duration", justify="right"), Column("Checkpointed", justify="right", drop=6),
               Column("Full size", justify="right"), Column("Kind", drop=1), Column("In flight", justify="right", drop=2),
               Column("Alignment", justify="right", drop=3),
               Column("Aligned bytes", justify="right", drop=7), Column("Acks", justify="right", drop=4)]
    rows = []
    for h in doc.get("history", []):
        status_text = h.get("status", "?")
        if h.get("failure_message"):
            status_text += f": {h['failure_message']}"
        rows.append([
            str(h.get("id")),
            status_text,
            fmt_time(h.get("trigger_timestamp")),
            _ms(h.get("end_to_end_duration")),
            fmt_size(h.get("checkpointed_size") or 0),
            fmt_size(h.get("state_size") or 0),
            "savepoint" if h.get("is_savepoint") else ("unaligned" if h.get("unaligned_checkpoint") else "aligned"),
            fmt_size(h.get("persisted_data") or 0),
            _ms(h.get("alignment_duration_max")),
            fmt_size(h.get("alignment_buffered") or 0),
            f"{h.get('num_acknowledged_subtasks', 0)}/{h.get('num_subtasks', 0)}",
        ])
    console = out()
    render(console, columns, rows, title=f"Checkpoints of job {job_id}", wide=wide)
    counts = doc.get("counts", {})
    console.print(
        f"Counts: {counts.get('completed', 0)} completed, {counts.get('failed', 0)} failed, "
        f"{counts.get('in_progress', 0)} in progress, {counts.get('restored', 0)} restored",
        markup=False,
    )
    latest = doc.get("latest", {})
    for what in ("completed", "failed", "restored"):
        entry = latest.get(what)
        if entry:
            where = entry.get("external_path") or entry.get("failure_message") or ""
            console.print(f"Latest {what}: {entry.get('id')} {where}".rstrip(), markup=False)


@app.command("trigger")
def trigger(
    job_id: JobId,
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for the checkpoint to complete (Flink duration syntax).")] = "10min",
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Trigger a checkpoint of a running job now and wait for it.

    Prints the completed checkpoint's path (stdout), with progress on stderr while waiting.
    When as many checkpoints as allowed (execution.checkpointing.max-concurrent-checkpoints)
    are in progress, the request waits its turn, as in Flink: it starts as soon as one ends,
    before the next periodic checkpoint. --timeout bounds the whole wait.
    Exit status: 0 completed; 12 failed (accepted, but it did not complete: the cause is on
    stderr), as for a failed savepoint; 9 refused (the job is not running, or some of its tasks
    have finished); 6 not started or not completed within --timeout.

    Examples:

    \b
        flinkpy checkpoint trigger 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        path=$(flinkpy checkpoint trigger --json JOB_ID | jq -r .external_path)
    """
    from commands.context import client as connect
    from flinkpy.client.operations import Deadline

    timeout_s = timeout_seconds(timeout)
    client = connect(jobmanager)
    deadline = Deadline(timeout_s)
    with progress(f"Triggering a checkpoint of job {job_id}..."):
        cid = client.trigger_checkpoint(job_id, wait_s=max(deadline.left(), 0.001))
    with progress(f"Waiting for checkpoint {cid} of job {job_id}..."):
        detail = client.wait_for_checkpoint(job_id, cid, deadline, timeout)
    if session.json:
        emit_json(detail)
        return
    out().print(f"Checkpoint {cid} completed. Path: {detail.get('external_path')}", markup=False)

