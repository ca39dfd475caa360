"""`flinkpy savepoint plan`: what restoring a savepoint with a program would do, before anything
stops (the restore's checks, the state the program's classes decode, a move between runners).

Registered on the ``savepoint`` command group by :mod:`commands.savepoint`.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Optional

import typer

from commands.errors import PROG
from commands.options import JsonFlag, Wide
from commands.output import emit_json, out
from commands.session import session
from commands.tables import Column, render
from flinkpy.errors import ExitCode, NotFoundError, UsageError

PathArg = Annotated[
    str,
    typer.Argument(metavar="PATH", help="The savepoint: its directory, its _metadata file, or an fsspec URL of either.", show_default=False),
]

def plan(
    path: PathArg,
    job: Annotated[str, typer.Argument(metavar="JOB.py", help="The job file that would be restored.", show_default=False)],
    args: Annotated[Optional[list[str]], typer.Argument(metavar="[ARGS]...", help="Arguments passed to the job file.", show_default=False)] = None,
    parallelism: Annotated[Optional[int], typer.Option("-p", "--parallelism", min=1, metavar="N", help="Default parallelism the job would run with.")] = None,
    allow_non_restored: Annotated[
        bool, typer.Option("-n", "--allowNonRestoredState", "--allow-non-restored-state", help="Allow state of operators the program no longer has to be dropped.")
    ] = False,
    check_code: Annotated[
        bool,
        typer.Option("--check-code", help="Also decode every state value of the savepoint with JOB.py's classes, in a separate process, and list what would fail to restore."),
    ] = False,
    runner: Annotated[
        Optional[str], typer.Option("--runner", metavar="RUNNER", help="Plan a move to this runner: engine or spark (the state of a savepoint of either).")
    ] = None,
    wide: Wide = False,
    json_: JsonFlag = False,
) -> None:
    """Dry-run restoring JOB.py from a savepoint, with no cluster: would it work, and how.

    Runs JOB.py up to env.execute() to get its plan and compares it with the savepoint's
    _metadata, operator by operator id: which operators get their state back (matched by uid,
    or by generated id — a warning: set uids), which state has no operator any more (refused
    unless -n), which operators start empty, how each operator's parallelism changes, whether
    the max parallelism matches (refused for keyed state if not), and which key groups each
    new subtask takes from which old subtasks. Options must come before PATH.

    With --json, prints one document: {"savepoint", "kind", "job_id", "operators", "dropped",
    "warnings", "problems", "restorable", "files_checked", "bytes_checked",
    "damaged_files": [{"path", "problem"}], ...}.

    Before it says a restore would succeed it reads every state file the savepoint references
    and checks its size and sha256 against _metadata (as 'flinkpy checkpoint verify' does);
    a missing or damaged file is listed in "damaged_files" and refuses the restore.

    With --check-code, every state value (keyed and operator state, of every operator) is
    decoded with the classes of JOB.py's program, in a process of its own with JOB.py's
    directory first on its path (as a task has it), so its modules are never imported by the
    CLI. Listed, per operator uid, state and error, with the keys affected: a class or module
    that no longer exists, a class that refuses its saved state (a NamedTuple with fields
    added or removed, a slotted class without a saved attribute), and a dataclass whose fields
    no longer match the saved object (a field renamed or removed, or added without a
    default). Any of them refuses the restore (exit 7); --json adds "code_check":
    {"values_checked", "values_failed", "failures": [{"operator_id", "uid", "operator", "state", "error",
    "keys", "examples"}]}. Decoding runs the snapshot's pickles as a restore would: check
    savepoints you would restore.

    With --runner engine|spark it plans moving the job between flinkpy's engine and Spark
    (a savepoint of either restored on the other): per operator, which state moves (a
    source's positions, a keyed reduce's running values, a sink's pre-committed output) and
    which would not, with the reason; anything that would not move refuses the move. --json:
    {"savepoint", "kind", "from_runner", "runner", "movable", "operators": [{"operator", "uid",
    "operator_id", "state", "move", "reason"}], "problems", "restore"}. Onto the engine, the
    engine's restore plan's warnings go to stderr too, among them a state Spark kept without a
    record of its time-to-live (one declared after open()), which fails the restore if the
    job asks for it with a StateTtlConfig.

    Exit status: 0 the restore would succeed; 7 it would be refused (the reasons on stderr),
    also when --check-code finds values that would not restore; 4 no savepoint at PATH or no
    JOB.py; 9 the savepoint's _metadata is unreadable or does not match its checksum, or a
    state file is missing or damaged.

    Examples:

    \b
        flinkpy savepoint plan savepoint-3f2a9c-1b2c3d4e5f60 even_odd_sum.py
        flinkpy savepoint plan -p 3 --json s3://bucket/sp/savepoint-x job.py
        flinkpy savepoint plan --check-code savepoint-3f2a9c-1b2c3d4e5f60 v2.py
        flinkpy savepoint plan --runner spark savepoint-3f2a9c-1b2c3d4e5f60 j.py
    """
    from pathlib import Path

    from flinkpy.client.restore_plan import plan_restore

    if not Path(job).is_file():
        raise NotFoundError(f"job file {job} does not exist", remedy="pass the path of a Python job file")
    if runner is not None:
        if check_code:
            raise UsageError("--check-code checks a restore on the engine, --runner plans a move: give one of them",
                             remedy="run 'flinkpy savepoint plan' once with each")
        _plan_move(path, job, list(args or []), runner=runner, parallelism=parallelism, allow_non_restored=allow_non_restored, wide=wide)
        return
    doc = plan_restore(path, job, list(args or []), parallelism=parallelism, allow_non_restored_state=allow_non_restored,
                       code_check=check_code)
    for warning in doc["warnings"]:
        sys.stderr.write(f"{PROG}: warning: {warning}\n")
    if session.json:
        emit_json(doc)
    else:
        _print_plan(doc, wide)
    if not doc["restorable"]:
        for problem in doc["problems"]:
            sys.stderr.write(f"{PROG}: error: {problem}\n")
        sys.stderr.flush()
        raise typer.Exit(ExitCode.CONFLICT if doc["damaged_files"] else ExitCode.INVALID_PROGRAM)


def _plan_move(path: str, job: str, args: list[str], *, runner: str, parallelism: Optional[int], allow_non_restored: bool, wide: bool) -> None:
    from flinkpy.client.runner_move import plan_runner_move

    doc = plan_runner_move(path, job, args, runner=runner, parallelism=parallelism, allow_non_restored_state=allow_non_restored)
    for warning in (doc["restore"] or {}).get("warnings", []):
        sys.stderr.write(f"{PROG}: warning: {warning}\n")
    if session.json:
        emit_json(doc)
    else:
        console = out()
        names = {"engine": ("the engine's", "the engine"), "spark": ("Spark's", "Spark")}
        console.print(f"Moving {job} from {names[doc['from_runner']][0]} {doc['kind']} at {doc['savepoint']} to {names[doc['runner']][1]}",
                      markup=False, soft_wrap=True)
        rows = [[op["operator"] + (f" [uid {op['uid']}]" if op["uid"] else ""), op["state"], op["move"], op["reason"] or "-"]
                for op in doc["operators"]]
        if rows:
            render(console, [Column("Operator", fold=True), Column("State", fold=True), Column("Move"), Column("Reason", fold=True, drop=1)],
                   rows, title="State", wide=wide)
        if doc["restore"] is not None:
            _print_plan(doc["restore"], wide)
        console.print("the move would succeed" if doc["movable"] else "the move would be refused", markup=False)
    if not doc["movable"]:
        for problem in doc["problems"]:
            sys.stderr.write(f"{PROG}: error: {problem}\n")
        sys.stderr.flush()
        raise typer.Exit(ExitCode.INVALID_PROGRAM)


def _print_plan(doc: dict[str, Any], wide: bool) -> None:
    console = out()
    console.print(
        f"Restoring {doc['program']} from {doc['kind']} {doc['checkpoint_id']} of job {doc['job_name']} ({doc['job_id']}) at {doc['savepoint']}",
        markup=False,
        soft_wrap=True,
    )
    columns = [Column("Operator", fold=True), Column("State", fold=True, min_width=18), Column("Matched by", drop=3),
               Column("Parallelism"), Column("Max parallelism", drop=2, fold=True, min_width=11),
               Column("Key groups (new subtask <- old subtasks), or partition@offset", fold=True, min_width=24, drop=1)]
    rows = []
    for op in doc["operators"]:
        label = op["name"] + (f" [uid {op['uid']}]" if op["uid"] else "")
        par = f"{op['old_parallelism']} -> {op['new_parallelism']}" if op["old_parallelism"] is not None else f"(new) {op['new_parallelism']}"
        maxp = (
            f"{op['old_max_parallelism']} -> {op['new_max_parallelism']}"
            if op["old_max_parallelism"] not in (None, op["new_max_parallelism"])
            else str(op["new_max_parallelism"])
        )
        groups = ""
        if op.get("key_groups"):
            groups = "\n".join(
                f"{r['subtask']}: {r['key_groups'][0]}-{r['key_groups'][1]} <- "
                + ", ".join(f"{f['subtask']} ({f['key_groups'][0]}-{f['key_groups'][1]})" for f in r["from"])
                for r in op["key_groups"]
                if r["key_groups"]
            )
        if op.get("splits"):  # a Kafka source: partition@offset each new subtask resumes
            groups = "\n".join(f"{r['subtask']}: {', '.join(r['splits']) or '-'}" for r in op["splits"])
        state = op["status"] + (":\n" + "\n".join(op["states"]) if op["states"] else "")  # one state a line
        rows.append([label, state, op["matched_by"] or "-", par, maxp, groups])
    render(console, columns, rows, title="Operators", wide=wide)
    for d in doc["dropped"]:
        label = (d["name"] or "?") + (f" [uid {d['uid']}]" if d["uid"] else f" [id {d['operator_id']}]")
        verdict = "dropped" if doc["allow_non_restored_state"] else "NOT RESTORED (refused without -n)"
        console.print(f"State without operator: {label}: {', '.join(d['states']) or '(offsets)'} — {verdict}", markup=False)
    checked = doc.get("code_check")
    if checked is not None:
        failures = checked["failures"]
        console.print(f"Decoded {checked['values_checked']} state value(s) with the program's classes: "
                      + ("every one restores." if not failures else f"{checked['values_failed']} would not restore."),
                      markup=False)
        if failures:
            columns = [Column("Operator", fold=True), Column("State", fold=True), Column("Keys", justify="right"),
                       Column("Error", fold=True, min_width=24), Column("Examples", fold=True, drop=1)]
            rows = [[f["operator"] + (f" [uid {f['uid']}]" if f["uid"] else ""), f["state"], str(f["keys"]), f["error"],
                     "\n".join(f["examples"])] for f in failures]
            render(console, columns, rows, title="State that would not restore", wide=wide)
    console.print("Restore would succeed." if doc["restorable"] else "Restore would be refused.", markup=False)
