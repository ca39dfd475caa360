"""`flinkpy checkpoint`: look at and check checkpoints.

``inspect`` and ``verify`` are offline: they read a checkpoint's files directly (any path or
fsspec URL, s3:// included) and need no cluster. Commands that ask a running cluster about
its checkpoints live in the second half of this module.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from commands.errors import PROG
from commands.options import JsonFlag
from commands.output import emit_json, fmt_time, out
from commands.session import session
from flinkpy.errors import ExitCode

app = typer.Typer(help="Inspect and verify checkpoints and savepoints, reading their files directly (no cluster needed).", no_args_is_help=True)

PathArg = Annotated[
    str,
    typer.Argument(
        metavar="PATH",
        help="The checkpoint: its directory (.../chk-5), its _metadata file, or an fsspec URL of either (file://, s3://, ...).",
        show_default=False,
    ),
]


def _size(n: int) -> str:
    """Bytes for people: 512 B, 3.4 KiB, 1.2 MiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable


def _states(handle: dict[str, Any] | None) -> list[str]:
    if not handle:
        return []
    return [f"{name} ({desc['kind']}, {desc['entries']})" for name, desc in handle["states"].items()]


def _offsets(value: Any) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


# --------------------------------------------------------------------------- offline commands


@app.command("inspect")
def inspect(path: PathArg, json_: JsonFlag = False) -> None:
    """Show what a checkpoint or savepoint holds: operators, subtasks, key groups, states, sizes.

    Reads only the _metadata file (no state file is opened; use 'flinkpy checkpoint verify'
    for that), so it is quick even on S3. The header names the job, the checkpoint id, its
    kind, mode and times, the max parallelism and the total size; the table has one row per
    operator subtask with its key-group range, its states (kind and number of entries), its
    size and its source offsets.

    With --json, prints one document: {"path", "metadata_path", "metadata", "summary"}, where
    metadata is the _metadata document itself and summary holds the totals (size per
    operator, per subtask and per key-group range, total size, number of files).

    Exit status: 0 when the _metadata could be read; 4 when there is no complete checkpoint
    at PATH (nothing there, or a directory without _metadata); 9 when _metadata is truncated,
    not JSON, of another format or version, or lacks fields.

    Examples:

    \b
        flinkpy checkpoint inspect /var/flinkpy/checkpoints/3f2a9c0e/chk-12
        flinkpy checkpoint inspect s3://bucket/checkpoints/3f2a9c0e/chk-12/_metadata
        flinkpy checkpoint inspect ./chk-12 --json | jq .summary.total_size
    """
    from flinkpy.checkpoint.metadata import summarize
    from flinkpy.checkpoint.storage import CheckpointStorage

    storage = CheckpointStorage(path)
    dir_url, meta_url = storage.locate(path)
    doc = storage.read_metadata(meta_url)
    summary = summarize(doc)
    if session.json:
        emit_json({"path": dir_url, "metadata_path": meta_url, "metadata": doc, "summary": summary})
        return
    console = out()
    kind = doc["kind"] + (f" ({doc['savepoint_format']})" if doc.get("savepoint_format") else "")
    duration = doc["completion_timestamp"] - doc["trigger_timestamp"]
    for line in (
        f"Checkpoint: {dir_url}",
        f"Job: {doc['job_name']} ({doc['job_id']})",
        f"Checkpoint id: {doc['checkpoint_id']}; kind: {kind}; mode: {doc['mode']}",
        f"Triggered: {fmt_time(doc['trigger_timestamp'])}; completed: {fmt_time(doc['completion_timestamp'])} ({duration} ms)",
        f"Max parallelism: {doc['max_parallelism']}",
        f"Total size: {_size(summary['total_size'])} in {summary['files']} file(s), {len(doc['operators'])} operator(s)",
    ):
        console.print(line, markup=False)
    table = Table(title="State", title_justify="left", show_footer=True)
    table.add_column("Operator", footer="Total")
    table.add_column("Subtask")
    table.add_column("Key groups")
    table.add_column("States (kind, entries)")
    table.add_column("Size", justify="right", footer=_size(summary["total_size"]))
    table.add_column("Source offsets", overflow="fold")
    sizes = {(o["operator_id"], s["subtask"]): s["size"] for o in summary["operators"] for s in o["subtasks"]}
    for op in doc["operators"]:
        label = op["name"] + (f" [uid {op['uid']}]" if op.get("uid") else f" [id {op['operator_id']}]")
        subtasks = sorted(op["subtasks"], key=lambda s: s["subtask"])
        if not subtasks:
            table.add_row(Text(label), "-", "", "(no state)", _size(0), "")
        for i, sub in enumerate(subtasks):
            keyed = sub.get("keyed_state")
            groups = f"{keyed['key_groups'][0]}-{keyed['key_groups'][1]}" if keyed else ""
            states = _states(keyed) + _states(sub.get("operator_state"))
            # Text, not str: names, uids and offsets are data, never rich markup.
            table.add_row(
                Text(label if i == 0 else ""),
                f"{sub['subtask']}/{op['parallelism']}",
                groups,
                Text("\n".join(states) or "(no state)"),
                _size(sizes[(op["operator_id"], sub["subtask"])]),
                Text(_offsets(sub.get("source_offsets"))),
            )
    console.print(table)


@app.command("verify")
def verify(path: PathArg, json_: JsonFlag = False) -> None:
    """Check that a checkpoint or savepoint can be restored, reading every file it references.

    The checkpoint is restorable when its _metadata parses and is valid, and every state file
    it references exists with the size and sha256 checksum recorded there. Each problem is
    reported as one line on stderr that names the file and what is wrong ("state file is
    missing", "size mismatch: ...", "checksum mismatch: ..."). Files that _metadata does not
    reference (for example, leftovers of an interrupted upload) are ignored.

    With --json, prints one document: {"path", "metadata_path", "restorable", "job_id",
    "checkpoint_id", "files_checked", "bytes_checked", "problems": [{"path", "problem"}]};
    the problem lines still go to stderr.

    Exit status: 0 when the checkpoint is restorable; 9 when it is present but not
    restorable (a bad _metadata, a missing file, a wrong size or checksum); 4 when there is
    no complete checkpoint at PATH (nothing there, or a directory without _metadata).

    Examples:

    \b
        flinkpy checkpoint verify /var/flinkpy/checkpoints/3f2a9c0e/chk-12
        flinkpy checkpoint verify s3://bucket/savepoints/savepoint-3f2a9c-1b2c3d4e5f60 --json
        flinkpy checkpoint verify ./chk-12 || echo "chk-12 is damaged"
    """
    from flinkpy.checkpoint.storage import CheckpointStorage

    report = CheckpointStorage(path).verify(path)
    for problem in report.problems:
        sys.stderr.write(f"{PROG}: error: {problem}\n")
    sys.stderr.flush()
    if session.json:
        emit_json(report.to_dict())
    elif report.restorable:
        doc = report.metadata or {}
        out().print(
            f"Restorable: {doc.get('kind', 'checkpoint')} {doc.get('checkpoint_id')} of job {doc.get('job_id')} at {report.path} "
            f"({report.files_checked} file(s), {_size(report.bytes_checked)} verified).",
            markup=False,
        )
    if not report.restorable:
        if not session.json:
            sys.stderr.write(f"{PROG}: error: {report.path} is not restorable: {len(report.problems)} problem(s)\n")
        raise typer.Exit(ExitCode.CONFLICT)


# --------------------------------------------------------------------------- cluster commands
# Commands that talk to a running cluster through the REST client (list, trigger) go here.
