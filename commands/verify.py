"""`flinkpy verify`: check a verification job's committed output for loss and duplicates.

The job must read a :class:`~flinkpy.connectors.verification.SequenceSource` and write
``(key, seq, count)`` to a :class:`~flinkpy.connectors.verification.VerifyingSink`, as
examples/verification_job.py does; the source's replayable input says exactly what the output
must hold. Works on the sink's directory alone: no cluster needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from commands.options import JsonFlag
from commands.output import emit_json, info, status
from commands.session import session
from flinkpy.errors import ExitCode, NotFoundError

app = typer.Typer()


@app.command("verify")
def verify(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="The VerifyingSink's directory.", show_default=False)],
    keys: Annotated[int, typer.Option("--keys", metavar="K", min=1, help="Keys of the job's SequenceSource.")],
    per_key: Annotated[int, typer.Option("--per-key", metavar="N", min=1, help="Sequence numbers per key of the job's SequenceSource.")],
    at_least_once: Annotated[bool, typer.Option("--at-least-once", help="Tolerate duplicates (and state mismatches): only losses fail.")] = False,
    json_: JsonFlag = False,
) -> None:
    """Check a verification job's output: per key, lost and duplicated sequence numbers, state mismatches.

    Reads the committed files of DIR (pending ones are not output yet) and compares them with
    what SequenceSource(K, N) emits: seq 1..N once for each key 0..K-1. A state mismatch is a
    record whose running count differs from its seq: the keyed state and the input disagree.

    Exit status: 0 when nothing is lost or duplicated (with --at-least-once: nothing lost);
    13 otherwise; 4 when DIR does not exist.

    Examples:

    \b
        flinkpy run -p 2 examples/verification_job.py --keys 8 --per-key 1000 \\
            --out /tmp/out
        flinkpy verify /tmp/out --keys 8 --per-key 1000
        flinkpy verify /tmp/out --keys 8 --per-key 1000 --json | jq .lost
    """
    from flinkpy.connectors.verification import check, read_committed

    if not directory.is_dir():
        raise NotFoundError(f"output directory {directory} does not exist", remedy="pass the directory given to the job's VerifyingSink (--out)")
    report = check(read_committed(directory), keys, per_key)
    failed = report["lost"] > 0 or (report["duplicated"] > 0 and not at_least_once)
    report["ok"] = not failed
    if session.json:
        emit_json(report)
    else:
        for key, k in sorted(report["keys"].items(), key=lambda kv: int(kv[0])):
            info(f"key {key}: {len(k['missing'])} missing {_sample(k['missing'])}, {k['duplicate-copies']} duplicate(s) "
                 f"{_sample(k['duplicates'])}, {k['state-mismatches']} state mismatch(es)")
        info(f"expected {report['expected']}, received {report['received']}: lost {report['lost']}, duplicated "
             f"{report['duplicated']}, state mismatches {report['mismatched']}, unexpected {report['unexpected']}")
    if failed:
        status(f"flinkpy: verification failed: {report['lost']} lost, {report['duplicated']} duplicated")
        raise typer.Exit(ExitCode.VERIFY_FAILED)


def _sample(seqs: list[int], n: int = 5) -> str:
    if not seqs:
        return ""
    return "(" + ", ".join(map(str, seqs[:n])) + (", ..." if len(seqs) > n else "") + ")"
