"""The root of the `flinkpy` command: global options, the command tree, and exit codes.

``main()`` runs the click command in non-standalone mode so that every exception — ours,
click's usage errors, Ctrl-C — passes through ``commands.errors.handle`` and leaves with a
documented exit code and one line on stderr.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Optional, Sequence

import typer

from commands._click import click
from commands.errors import PROG, handle
from commands.session import session, set_debug

#: the command tree, in the order of the help's listing: (module under commands/, group name or
#: None for a module whose commands sit at the top, the top-level names it adds)
TREE: tuple[tuple[str, str | None, tuple[str, ...]], ...] = (
    ("run", None, ("run", "info")),
    ("jobs", None, ("list", "cancel")),
    ("stop", None, ("stop",)),
    ("upgrade", None, ("upgrade",)),
    ("job", "job", ("job",)),
    ("cluster", "cluster", ("cluster",)),
    ("jobmanager", "jobmanager", ("jobmanager",)),
    ("taskmanager", "taskmanager", ("taskmanager",)),
    ("checkpoint", "checkpoint", ("checkpoint",)),
    ("savepoint", "savepoint", ("savepoint",)),
    ("restart_strategy", "restart-strategy", ("restart-strategy",)),
    ("fault", "fault", ("fault",)),
    ("zookeeper", "zookeeper", ("zookeeper",)),
    ("spark", "spark", ("spark",)),
    ("state", "state", ("state",)),
    ("verify", None, ("verify",)),
    ("completion", None, ("completion",)),
    ("top", None, ("top",)),
)
#: the root's own options (the command's name is the first argument that is none of these)
_ROOT_FLAGS = frozenset({"--debug"})

def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("flinkpy")
        except PackageNotFoundError:
            v = "unknown"
        sys.stdout.write(f"{PROG} {v}\n")
        raise typer.Exit(0)


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


def build(only: str | None = None) -> typer.Typer:
    """The command tree as a typer app; ``only``: the top-level name of the one command or group
    a call needs, so that a call imports and builds that module alone (typer builds every
    command's parameters when the tree is made, a good part of a call's start-up)."""
    app = typer.Typer(
        name=PROG,
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(root)
    for module, group, names in TREE:
        if only is not None and only not in names:
            continue
        sub = importlib.import_module(f"commands.{module}").app
        if group is None:
            app.add_typer(sub)
        else:
            app.add_typer(sub, name=group)
    from commands import completion

    completion.register()
    return app


def command(only: str | None = None) -> click.Command:
    """The click command tree (for main(), the man page generator and tests); ``only`` as in
    :func:`build`."""
    return typer.main.get_command(build(only))


def _invoked(args: list[str]) -> str | None:
    """The top-level command a call names, when the tree needs nothing else (not for help,
    --version or a name that is no command: those get the whole tree). A completion request
    names it among the words typed before the one being completed, so Tab after ``flinkpy
    savepoint`` builds that group alone."""
    if f"_{PROG.upper()}_COMPLETE" in os.environ:
        typed = _typed_before_completion()
        if typed is None:
            return None
        args = typed
    for arg in args:
        if arg in _ROOT_FLAGS:
            continue
        if arg.startswith("-"):
            return None
        return arg if any(arg in names for _, _, names in TREE) else None
    return None


def _typed_before_completion() -> list[str] | None:
    """The words after ``flinkpy`` and before the one a completion request completes, read from
    the request by the shell's own completion class (typer's, as the answer itself is); None
    when the request names no shell flinkpy completes, or its words cannot be read."""
    from typer._completion_classes import BashComplete, ZshComplete

    shell = os.environ.get(f"_{PROG.upper()}_COMPLETE", "").partition("_")[2]
    complete = {"bash": BashComplete, "zsh": ZshComplete}.get(shell)
    if complete is None:
        return None
    try:
        return complete(None, {}, PROG, "").get_completion_args()[0]  # type: ignore[arg-type]
    except (KeyError, ValueError):
        return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `flinkpy` console script; returns (and exits with) the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    # A usage error can stop parsing before --json's callback runs; honour it anyway.
    if "--json" in args[: args.index("--") if "--" in args else len(args)]:
        session.json = session.json or _json_is_ours(args)
    try:
        result = command(_invoked(args)).main(args=args, prog_name=PROG, standalone_mode=False)
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
