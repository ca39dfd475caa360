"""The root of the `flinkpy` command: global options, the command tree, and exit codes.

``main()`` runs the click command in non-standalone mode so that every exception — ours,
click's usage errors, Ctrl-C — passes through ``commands.errors.handle`` and leaves with a
documented exit code and one line on stderr.
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional, Sequence

import typer

from commands import checkpoint, cluster, job, jobs, run
from commands import savepoint, stop
from commands import upgrade
from commands import restart_strategy
from commands import fault
from commands import verify
from commands import zookeeper
from commands import jobmanager, taskmanager
from commands import spark
from commands import state
from commands import completion
from commands import top
from commands._click import click
from commands.errors import PROG, handle
from commands.session import session, set_debug

app = typer.Typer(
    name=PROG,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("flinkpy")
        except PackageNotFoundError:
            v = "unknown"
        sys.stdout.write(f"{PROG} {v}\n")
        raise typer.Exit(0)


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", callback=set_debug, is_eager=True, help="Show tracebacks on errors and DEBUG logs on stderr.")] = False,
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = None,
) -> None:
    """Run and operate flinkpy clusters and jobs: Apache Flink's fault-tolerance model in Python.

    Flink's verbs at the top (run, info, list, cancel), groups for the rest. Every command
    accepts --json for scripts: exactly one JSON document on stdout, everything else on stderr.
    Exit codes are documented in flinkpy(1).

    Examples:

    \b
        flinkpy cluster start
        flinkpy run -d examples/word_count.py
        flinkpy list
        flinkpy cluster stop
    """


app.add_typer(run.app)
app.add_typer(jobs.app)
app.add_typer(stop.app)
app.add_typer(upgrade.app)
app.add_typer(job.app, name="job")
app.add_typer(cluster.app, name="cluster")
app.add_typer(jobmanager.app, name="jobmanager")
app.add_typer(taskmanager.app, name="taskmanager")
app.add_typer(checkpoint.app, name="checkpoint")
app.add_typer(savepoint.app, name="savepoint")
app.add_typer(restart_strategy.app, name="restart-strategy")
app.add_typer(fault.app, name="fault")
app.add_typer(zookeeper.app, name="zookeeper")
app.add_typer(spark.app, name="spark")
app.add_typer(state.app, name="state")
app.add_typer(verify.app)
app.add_typer(completion.app)
completion.register()
app.add_typer(top.app)


def command() -> click.Command:
    """The click command tree (for main(), the man page generator and tests)."""
    return typer.main.get_command(app)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `flinkpy` console script; returns (and exits with) the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    # A usage error can stop parsing before --json's callback runs; honour it anyway.
    if "--json" in args[: args.index("--") if "--" in args else len(args)]:
        session.json = session.json or _json_is_ours(args)
    try:
        result = command().main(args=args, prog_name=PROG, standalone_mode=False)
        # In non-standalone mode an Exit (--help, --version, typer.Exit) comes back as its code.
        code = result if isinstance(result, int) and not isinstance(result, bool) else 0
    except BaseException as exc:  # noqa: BLE001 - the one place exceptions become exit codes
        if isinstance(exc, SystemExit):
            raise
        code = handle(exc)
    sys.stdout.flush()
    if argv is None:
        sys.exit(code)
    return code


def _json_is_ours(args: list[str]) -> bool:
    """--json belongs to flinkpy unless it comes after the job file of run/info."""
    if args and args[0] in ("run", "info") or (len(args) > 1 and args[1] in ("run", "info")):
        for arg in args:
            if arg.endswith(".py"):
                return False
            if arg == "--json":
                return True
    return True


if __name__ == "__main__":
    main()
