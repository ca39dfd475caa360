"""`flinkpy state`: what a checkpoint's or savepoint's state holds (offline, no cluster needed).

``analyze`` reads every state file of a snapshot (any path or fsspec URL) and ``diff`` compares
two snapshots key by key, both through ``flinkpy.client.analysis``, which is also the Python API.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from commands.options import JsonFlag, Wide
from commands.output import emit_json, fmt_size, out
from commands.session import session
from commands.tables import Column, render

app = typer.Typer(
    help="Analyze the state in checkpoint and savepoint files (offline): sizes, keys, skew.",
    no_args_is_help=True,
)

PathArg = Annotated[
    str,
    typer.Argument(
        metavar="PATH",
        help="The checkpoint or savepoint: its directory (.../chk-5, .../savepoint-3f2a9c-...), its _metadata file, or an fsspec URL of either (file://, s3://, ...).",
        show_default=False,
    ),
]


def _label(op: dict[str, Any]) -> str:
    return op["name"] + (f" [uid {op['uid']}]" if op.get("uid") else f" [id {op['operator_id']}]")


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x"


@app.command("analyze")
def analyze(
    path: PathArg,
    engine: Annotated[
        str,
        typer.Option("--engine", metavar="local|spark", help="Where to analyze: local (in this process, one file at a time) or spark (one Spark task per state file, for snapshots too large for one process; needs PySpark and Java)."),
    ] = "local",
    top: Annotated[int, typer.Option("--top", min=0, metavar="N", help="How many of the largest keys to list (0: none).")] = 10,
    spark_master: Annotated[
        str,
        typer.Option("--spark-master", metavar="URL", help="With --engine spark: the Spark master (local[N], spark://HOST:PORT, yarn, ...)."),
    ] = "local[*]",
    spark_conf: Annotated[
        list[str] | None,
        typer.Option("--spark-conf", metavar="KEY=VALUE", help="With --engine spark: a Spark configuration property (repeatable)."),
    ] = None,
    trusted: Annotated[
        bool,
        typer.Option("--trusted", help="Decode state files with Python's full unpickler, so that objects of any class (the job's own: put its modules on PYTHONPATH) are read. Only for snapshots you trust: unpickling runs code the file names."),
    ] = False,
    json_: JsonFlag = False,
) -> None:
    """Report the state in a checkpoint or savepoint: sizes per operator, state and key group, keys, the largest keys and skew.

    Every state file is verified first (sizes and checksums recorded in _metadata, as 'flinkpy
    checkpoint verify' does), then decoded. For each operator and each keyed state it counts the
    keys, the entries (1 per key for value, reducing and aggregating state; the elements of list
    state; the mapped keys of map state) and the bytes: the pickled size of each key's entry, so
    a key group's, state's or subtask's bytes are the sum over its keys (close to, usually a
    little above, the file size). Operator (non-keyed) state is reported per operator and subtask
    the same way.

    The tables show the keyed states, the operator state, and the --top N largest keys (by
    bytes, across every operator and state). One skew line per keyed operator gives the largest
    key group's bytes against the mean over all max-parallelism key groups (no rescaling can do
    better), the largest subtask against the mean over the subtasks, and the largest key's share
    of the operator's keyed state (a hot key). 1.00x is perfectly even. The engine's own states
    (timers, window internals; their names start with _) are listed when they hold something.

    With --json, prints one document: {"path", "metadata_path", "engine", "job_id", "job_name",
    "checkpoint_id", "kind", "savepoint_format", "max_parallelism", "files_checked",
    "bytes_checked", "totals", "operators", "top_keys"}; each operator has its "states",
    "key_groups" (one row per state and non-empty key group: keys, entries, bytes), "subtasks",
    "operator_state" and "skew". The Python API is flinkpy.client.analysis.analyze(PATH), and
    to_dataframe(result) gives a pandas DataFrame of the key-group rows (pandas is not installed
    with flinkpy).

    With --engine spark, the state files are verified and decoded in Spark tasks (one per file)
    into one row per key, and the report is computed with Spark aggregations; it is the same
    report as the local engine's ("engine" aside). Spark starts on --spark-master (default
    local[*]) with the --spark-conf properties; its Python workers run this interpreter, so the
    job's modules must be importable there. flinkpy.spark.analysis.read_keyed_state(spark, PATH)
    returns that DataFrame of keys for your own queries. Incremental checkpoints (RocksDB files,
    most under shared/) are read too: each subtask's store is downloaded and read out.

    State files are Python pickles, and a pickle names the code that rebuilds its objects. So
    they are decoded with a restricted unpickler: plain Python values (builtin containers and
    scalars, collections, datetime, Decimal, Fraction, UUID) and flinkpy's own value types (Row,
    windows, ...) are read; any other class (the job's own, or a function such as os.system) is
    refused by name, and nothing in the file runs. For state holding the job's own classes,
    pass --trusted, with the job's modules on PYTHONPATH, for snapshots you trust.

    Exit status: 0 when the snapshot was analyzed; 2 for a bad option; 4 when there is no complete checkpoint at PATH (nothing there, or a directory
    without _metadata); 8 when the state holds objects of a class the restricted unpickler
    refuses (see --trusted) or, with --trusted, of classes that cannot be imported (put the
    job's modules on PYTHONPATH), or Spark is not installed or cannot start; 9 when
    _metadata or a state file is damaged or missing.

    Examples:

    \b
        flinkpy state analyze /var/flinkpy/checkpoints/3f2a9c0e/chk-12
        flinkpy state analyze \\
            s3://bucket/savepoints/savepoint-3f2a9c-1b2c3d4e5f60 --top 20
        flinkpy state analyze ./chk-12 --json | jq '.operators[].skew'
        flinkpy state analyze ./chk-12 --json | jq '.top_keys[0]'
        flinkpy state analyze \\
            s3://bucket/savepoints/savepoint-3f2a9c-1b2c3d4e5f60 --engine spark \\
            --spark-master spark://head:7077
    """
    from flinkpy.errors import UsageError
    from flinkpy.client.analysis import analyze as run_analysis

    conf = {}
    for item in spark_conf or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--spark-conf {item!r} is not KEY=VALUE", remedy="e.g. --spark-conf spark.executor.memory=4g")
        conf[key.strip()] = value
    # the client chooses the engine (UsageError for an unknown one); the CLI only passes the flags on
    result = run_analysis(path, top=top, engine=engine, master=spark_master, conf=conf, trusted=trusted)
    if session.json:
        emit_json(result)
        return
    _print(result)


def _print(result: dict[str, Any]) -> None:
    console = out()
    totals = result["totals"]
    snapshot = f"{result['kind']} {result['checkpoint_id']}" + (f" ({result['savepoint_format']})" if result.get("savepoint_format") else "")
    stateful = [op for op in result["operators"] if op["states"] or op["operator_state"]]
    for line in (
        f"Snapshot: {result['path']}",
        f"Job: {result['job_name']} ({result['job_id']}); {snapshot}; max parallelism {result['max_parallelism']}",
        f"Verified: {result['files_checked']} file(s), {fmt_size(result['bytes_checked'])}",
        f"Keyed state: {totals['keys']} key(s), {totals['entries']} entries, {fmt_size(totals['bytes'])} "
        f"({fmt_size(totals['file_bytes'])} in files); operator state: {fmt_size(totals['operator_state_bytes'])}; "
        f"{len(stateful)} of {len(result['operators'])} operator(s) hold state",
    ):
        console.print(line, markup=False)

    keyed = [op for op in result["operators"] if op["states"]]
    if keyed:
        table = Table(title="Keyed state", title_justify="left")
        for column in ("Operator", "State", "Kind", "Keys", "Entries", "Bytes", "Key groups", "Largest key group"):
            table.add_column(column, justify="left" if column in ("Operator", "State", "Kind") else "right")
        for op in keyed:
            # The engine's own states (timers, window internals) only when they hold something.
            shown = [st for st in op["states"] if st["keys"] or not st["internal"]]
            for i, st in enumerate(shown):
                # Text, not str: names and uids are data, never rich markup.
                table.add_row(
                    Text(_label(op) if i == 0 else ""),
                    Text(st["name"]),
                    st["kind"],
                    str(st["keys"]),
                    str(st["entries"]),
                    fmt_size(st["bytes"]),
                    f"{st['key_groups']}/{op['max_parallelism']}",
                    fmt_size(st["max_key_group_bytes"]),
                )
        console.print(table)

    op_state = [op for op in result["operators"] if op["operator_state"]]
    if op_state:
        table = Table(title="Operator state", title_justify="left")
        for column in ("Operator", "Subtask", "State", "Kind", "Entries", "Bytes"):
            table.add_column(column, justify="right" if column in ("Entries", "Bytes") else "left")
        for op in op_state:
            for i, st in enumerate(op["operator_state"]):
                table.add_row(Text(_label(op) if i == 0 else ""), f"{st['subtask']}/{op['parallelism']}", Text(st["name"]), st["kind"], str(st["entries"]), fmt_size(st["bytes"]))
        console.print(table)

    if result["top_keys"]:
        table = Table(title=f"Largest keys (top {len(result['top_keys'])})", title_justify="left")
        for column in ("#", "Operator", "State", "Key", "Key group", "Subtask", "Entries", "Bytes"):
            table.add_column(column, justify="left" if column in ("Operator", "State", "Key") else "right", overflow="fold" if column == "Key" else "ellipsis")
        for rank, k in enumerate(result["top_keys"], 1):
            label = k["operator"] + (f" [uid {k['uid']}]" if k.get("uid") else f" [id {k['operator_id']}]")
            table.add_row(str(rank), Text(label), Text(k["state"]), Text(k["key"]), str(k["key_group"]), str(k["subtask"]), str(k["entries"]), fmt_size(k["bytes"]))
        console.print(table)

    for op in keyed:
        skew = op["skew"]
        biggest = max(op["subtasks"], key=lambda s: s["bytes"])
        console.print(
            f"Skew of {_label(op)}: largest key group {fmt_size(skew['key_group_max_bytes'])} = "
            f"{_x(skew['key_group_max_to_mean'])} the mean of {op['max_parallelism']} key groups; "
            f"largest subtask ({biggest['subtask']}) {fmt_size(skew['subtask_max_bytes'])} = "
            f"{_x(skew['subtask_max_to_mean'])} the mean of {op['parallelism']} subtask(s); "
            f"largest key {fmt_size(skew['largest_key_bytes'])} = {skew['largest_key_share']:.0%} of the operator's keyed state",
            markup=False,
        )


@app.command("diff")
def diff(
    path_a: Annotated[str, typer.Argument(metavar="A", help="The older snapshot: a checkpoint or savepoint directory, its _metadata file, or an fsspec URL of either.", show_default=False)],
    path_b: Annotated[str, typer.Argument(metavar="B", help="The newer snapshot, as A.", show_default=False)],
    uid: Annotated[Optional[str], typer.Option("--uid", metavar="UID", help="Compare only the operator with this uid (or operator id).")] = None,
    top: Annotated[int, typer.Option("--top", min=0, metavar="N", help="How many of the states and keys that grew most to list (0: none).")] = 10,
    trusted: Annotated[
        bool,
        typer.Option("--trusted", help="Decode state files with Python's full unpickler (the job's own classes; put its modules on PYTHONPATH). Only for snapshots you trust."),
    ] = False,
    wide: Wide = False,
    json_: JsonFlag = False,
) -> None:
    """Compare the state of two checkpoints or savepoints key by key: keys added, removed, changed, and what grew.

    Both snapshots are verified and decoded as 'flinkpy state analyze' does. Operators are
    matched by operator id (the uid, or the generated id, as a restore matches them); for each
    keyed state every key of A is looked up in B: added (only in B), removed (only in A),
    changed (its value differs) or unchanged. Keys are compared as values, not by file or key
    group, so snapshots taken at different parallelism or max parallelism compare as well.
    Operator (non-keyed) state is compared per state name, its items over all subtasks as a
    whole. Then the --top N states whose bytes grew most, and the N keys that grew most (an
    added key by all its bytes; bytes as 'state analyze' measures them). The engine's own
    states (timers, window internals; names starting with _) are listed when they changed.

    With --json, prints one document: {"a", "b", "identical", "uid", "totals": {"added",
    "removed", "changed", "unchanged", "bytes_a", "bytes_b", "bytes_delta"}, "operators":
    [{"operator_id", "uid", "name", "status", "parallelism_a", "parallelism_b",
    "max_parallelism_a", "max_parallelism_b", "states": [...], "operator_state": [...]}],
    "grown", "top_keys"}. The Python API is flinkpy.client.analysis.diff(A, B).

    Exit status: 0 when the snapshots were compared, whether or not they differ (a script
    asks with --json: jq -e .identical exits 1 when they differ); 2 for a bad option; 4 when
    there is no complete snapshot at A or B, or no operator has --uid; 8 when the state holds
    classes the restricted unpickler refuses (see --trusted); 9 when a _metadata or state file
    is damaged or missing.

    Examples:

    \b
        flinkpy state diff ./savepoint-3f2a9c-1b2c3d4e5f60 ./chk-12
        flinkpy state diff s3://b/sp/savepoint-a s3://b/sp/savepoint-b \\
            --uid sums --top 5
        flinkpy state diff A B --json | jq -e .identical
    """
    from flinkpy.client.analysis import diff as run_diff

    result = run_diff(path_a, path_b, uid=uid, top=top, trusted=trusted)
    if session.json:
        emit_json(result)
        return
    _print_diff(result, wide)


def _snapshot_line(side: str, s: dict[str, Any]) -> str:
    return f"{side}: {s['kind']} {s['checkpoint_id']} of job {s['job_name']} ({s['job_id']}) at {s['path']}; max parallelism {s['max_parallelism']}"


def _delta(n: int) -> str:
    return ("+" if n > 0 else "-" if n < 0 else "") + fmt_size(abs(n))


def _print_diff(result: dict[str, Any], wide: bool) -> None:
    console = out()
    console.print(_snapshot_line("A", result["a"]), markup=False, soft_wrap=True)
    console.print(_snapshot_line("B", result["b"]), markup=False, soft_wrap=True)
    rows = []
    for op in result["operators"]:
        label = _label(op) + ("" if op["status"] == "both" else f" ({op['status']} in B)")
        par = f"{op['parallelism_a'] if op['parallelism_a'] is not None else '-'} -> {op['parallelism_b'] if op['parallelism_b'] is not None else '-'}"
        shown = [st for st in op["states"] if not st["internal"] or st["keys_a"] or st["keys_b"]]
        for i, st in enumerate(shown):
            rows.append([Text(label if i == 0 else ""), par if i == 0 else "", Text(st["name"]), str(st["added"]), str(st["removed"]),
                         str(st["changed"]), str(st["unchanged"]), f"{fmt_size(st['bytes_a'])} -> {fmt_size(st['bytes_b'])}"])
    if rows:
        columns = [Column("Operator", fold=True), Column("Parallelism", drop=3), Column("State", fold=True), Column("Added", justify="right"),
                   Column("Removed", justify="right"), Column("Changed", justify="right"), Column("Same", justify="right", drop=1),
                   Column("Bytes", justify="right", drop=2)]
        render(console, columns, rows, title="Keyed state", wide=wide)
    op_rows = [[Text(_label(op)), Text(s["name"]), f"{s['entries_a']} -> {s['entries_b']}", f"{fmt_size(s['bytes_a'])} -> {fmt_size(s['bytes_b'])}",
                "yes" if s["changed"] else "no"] for op in result["operators"] for s in op["operator_state"]]
    if op_rows:
        render(console, [Column("Operator", fold=True), Column("State", fold=True), Column("Entries"), Column("Bytes", drop=1), Column("Changed")],
               op_rows, title="Operator state", wide=wide)
    if result["grown"]:
        render(console, [Column("Operator", fold=True), Column("State", fold=True), Column("Keys"), Column("Bytes"), Column("Grown", justify="right")],
               [[Text(_label({**g, "name": g["operator"]})), Text(g["state"]), f"{g['keys_a']} -> {g['keys_b']}", f"{fmt_size(g['bytes_a'])} -> {fmt_size(g['bytes_b'])}",
                 _delta(g["bytes_delta"])] for g in result["grown"]],
               title=f"States that grew most (top {len(result['grown'])})", wide=wide)
    if result["top_keys"]:
        render(console, [Column("Operator", fold=True, drop=1), Column("State", fold=True), Column("Key", fold=True), Column("Change"),
                         Column("Grown", justify="right")],
               [[Text(_label({**k, "name": k["operator"]})), Text(k["state"]), Text(k["key"]), k["change"], _delta(k["bytes_delta"])]
                for k in result["top_keys"]],
               title=f"Keys that grew most (top {len(result['top_keys'])})", wide=wide)
    t = result["totals"]
    verdict = "The state is identical." if result["identical"] else "The state differs."
    console.print(f"{t['added']} key(s) added, {t['removed']} removed, {t['changed']} changed, {t['unchanged']} unchanged; "
                  f"keyed state {fmt_size(t['bytes_a'])} -> {fmt_size(t['bytes_b'])} ({_delta(t['bytes_delta'])}). {verdict}",
                  markup=False)
