"""The one place where exceptions become exit codes and one-line messages.

Scripts rely on the exit codes documented in flinkpy(1) (``flinkpy.errors.ExitCode``); people
rely on a message that says what is wrong and what to do. Tracebacks are for --debug only.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
import traceback
from typing import Any

from commands._click import Abort, ClickException, NoArgsIsHelpError, UsageError
from commands.output import emit_json
from commands.session import session
from flinkpy.errors import ExitCode, FlinkpyError, Interrupted, storage_credentials_error

PROG = "flinkpy"


def report(message: str, remedy: str | None, *, kind: str, exit_code: int) -> int:
    """Print the error line on stderr (and the JSON error document with --json); return the code."""
    line = f"{PROG}: error: {message}" + (f" ({remedy})" if remedy else "")
    sys.stderr.write(_for_terminal(line) + "\n")
    sys.stderr.flush()
    if session.json and not session.emitted:
        doc: dict[str, Any] = {"message": message, "remedy": remedy, "kind": kind, "exit_code": exit_code}
        emit_json({**session.error_context, "error": doc})
    return exit_code


def _for_terminal(line: str) -> str:
    """On a terminal, the line wrapped at word boundaries to its width (a terminal would break
    it mid-word), continuation lines indented; elsewhere (a script, a log) one line as it is."""
    if not sys.stderr.isatty():
        return line
    width = shutil.get_terminal_size().columns
    return "\n".join(textwrap.wrap(line, width=max(width, 20), subsequent_indent="  ",
                                   break_long_words=False, break_on_hyphens=False)) or line


def handle(exc: BaseException) -> int:
    """Translate any exception raised by a command into its exit code, reporting it once."""
    if isinstance(exc, NoArgsIsHelpError):
        # `flinkpy` or `flinkpy cluster` alone: show the help, exit like any usage error.
        sys.stderr.write(exc.format_message().rstrip() + "\n")
        return ExitCode.USAGE
    if isinstance(exc, Interrupted):
        # the stop the user asked for, carried out: what was done, not an error
        sys.stderr.write(f"{PROG}: {exc.message}\n")
        sys.stderr.flush()
        if session.json:
            emit_json({"error": {"message": exc.message, "remedy": None, "kind": "Interrupted", "exit_code": exc.exit_code}})
        return exc.exit_code
    if isinstance(exc, (KeyboardInterrupt, Abort)):
        sys.stderr.write("\n" if sys.stderr.isatty() else "")
        return report("interrupted", None, kind="Interrupted", exit_code=ExitCode.INTERRUPTED)
    if session.debug:
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, FlinkpyError):
        if session.debug and exc.details:
            sys.stderr.write(exc.details.rstrip() + "\n")
        kind = type(exc).__name__.removesuffix("Error") or "Flinkpy"
        return report(exc.message, exc.remedy, kind=kind, exit_code=exc.exit_code)
    if isinstance(exc, UsageError):
        ctx = exc.ctx
        where = ctx.command_path if ctx is not None else PROG
        return report(
            exc.format_message(), f"see '{where} --help'", kind="Usage", exit_code=ExitCode.USAGE
        )
    if isinstance(exc, ClickException):
        return report(exc.format_message(), None, kind="Usage", exit_code=exc.exit_code)
    missing_credentials = storage_credentials_error(exc)
    if missing_credentials is not None:
        return report(missing_credentials.message, missing_credentials.remedy, kind="Configuration", exit_code=ExitCode.CONFIGURATION)
    return report(
        f"internal error: {type(exc).__name__}: {exc}",
        "this is a bug in flinkpy; re-run with --debug and report the traceback",
        kind="Internal",
        exit_code=ExitCode.INTERNAL,
    )
