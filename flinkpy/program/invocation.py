"""Running a job program's file: as ``__main__``, with ``sys.argv`` set to the job's arguments
and its directory on ``sys.path`` (shipped to the task processes too, so helper modules next to
the job import there as well) and the configured ``python.files`` after it, inside an execution context that says what each
``env.execute()`` does (submit to a cluster, start a Spark driver, or only capture the plan).
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any

from flinkpy.errors import FlinkpyError, InvalidProgramError, NotFoundError
from flinkpy.program.context import ExecutionContext, PlanCaptured, execution_context
from flinkpy.program.python_files import KEY, import_roots


def _compile_check(path: Path) -> None:
    try:
        source = path.read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"job file {path} does not exist", remedy="pass the path of a Python job file") from None
    except IsADirectoryError:
        raise NotFoundError(f"job file {path} is a directory", remedy="pass the path of a Python job file") from None
    try:
        compile(source, str(path), "exec")
    except SyntaxError as e:
        raise InvalidProgramError(
            f"{path}:{e.lineno}: syntax error: {e.msg}",
            remedy="fix the job file and run it again",
        ) from None


def run_file(path: Path, args: list[str], ctx: ExecutionContext) -> None:
    """Run the job file at ``path`` as ``__main__`` with ``args``, its directory on ``sys.path``
    (and in ``ctx.python_path``, for the task processes), inside ``ctx``: each ``execute()``
    does what ``ctx`` says. A program that fails is an InvalidProgramError naming the line."""
    _compile_check(path)
    job_dir = str(path.resolve().parent)
    ctx.python_path = [job_dir]
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, job_dir)
    # -D python.files / --pyFiles: importable in the job file too (as PyFlink's client does)
    sys.path += [root for root in import_roots((ctx.config or {}).get(KEY)) if root not in sys.path]
    try:
        with execution_context(ctx):
            runpy.run_path(str(path), run_name="__main__")
    except (FlinkpyError, PlanCaptured, KeyboardInterrupt):
        raise
    except SystemExit as e:
        if e.code not in (None, 0):
            raise InvalidProgramError(f"the job program {path} exited with status {e.code}") from None
    except Exception as e:  # the user's program raised before or around execute()
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        where = _user_frame(e, path)
        raise InvalidProgramError(
            f"the job program {path} raised {type(e).__name__}: {e}{where}",
            remedy="fix the program; re-run with --debug for the traceback",
            details=tb,
        ) from e
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _user_frame(e: BaseException, path: Path) -> str:
    target = str(path.resolve())
    line = None
    for frame, lineno in traceback.walk_tb(e.__traceback__):
        if os.path.abspath(frame.f_code.co_filename) == target:
            line = lineno
    return f" (at line {line})" if line else ""


def job_config(home: Any, overrides: dict[str, str]) -> dict[str, str]:
    """flinkpy.yaml < environment < -D, validated; as strings for the job graph."""
    from flinkpy.config import load_config

    cfg = load_config(home.path, overrides=overrides)
    return cfg.to_dict()
