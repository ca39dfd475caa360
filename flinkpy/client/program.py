"""Running a job file: what ``flinkpy run`` and ``flinkpy info`` do with JOB.py.

The file runs in this process as ``__main__`` (so ``if __name__ == '__main__'`` guards work),
with ``sys.argv`` set to the job's arguments and its directory on ``sys.path`` (shipped to the
task processes too, so helper modules next to the job import there as well). Each
``env.execute()`` in it submits one job.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.client.context import ExecutionContext, PlanCaptured, SubmittedJob, execution_context
from flinkpy.errors import FlinkpyError, InvalidProgramError, JobCanceledError, JobExecutionError, NotFoundError

if TYPE_CHECKING:
    from flinkpy.cluster import ClusterHome
    from flinkpy.spark.plan import SparkPlan


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


def _run(path: Path, args: list[str], ctx: ExecutionContext) -> None:
    _compile_check(path)
    job_dir = str(path.resolve().parent)
    ctx.python_path = [job_dir]
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, job_dir)
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


def run_program(
    path: str,
    args: list[str],
    *,
    address: str | None = None,
    parallelism: int | None = None,
    detached: bool = False,
    overrides: dict[str, str] | None = None,
    job_stdout: Any = None,
    on_submit: Callable[[str, str], None] | None = None,
    savepoint_path: str | None = None,
    allow_non_restored_state: bool = False,
    spark_conf: dict[str, str] | None = None,
    home: ClusterHome | str | Path | None = None,
) -> list[SubmittedJob]:
    """Run JOB.py; returns the jobs it submitted (with their final state unless detached).

    With ``execution.runner: spark`` the job runs on Spark under a supervising driver process
    (``flinkpy.spark.control_launch``); ``spark_conf`` adds Spark settings.

    ``address`` None means: the cluster running in the cluster home (``home``, else
    ``$FLINKPY_HOME``), if any, else an embedded one.
    """
    from flinkpy.cluster import ClusterHome, find_cluster

    token = None
    leader = None
    home = ClusterHome.resolve(home)
    if address is None:
        running = find_cluster(home)
        if running is not None:
            address = running.rest_address
            if running.ha is not None:
                from flinkpy.cluster.ha import leader_resolver

                leader = leader_resolver(running.ha)
    if address is not None:
        try:
            token = home.token()
        except LookupError:
            token = None
    config = _config(home, overrides or {})
    if config.get("execution.runner") == "spark":
        from flinkpy.spark.control_launch import run_on_spark

        return run_on_spark(path, args, home=home, config=config, parallelism=parallelism, detached=detached,
                            savepoint_path=savepoint_path, spark_conf=spark_conf, job_stdout=job_stdout, on_submit=on_submit)
    ctx = ExecutionContext(
        address=address,
        token=token,
        parallelism=parallelism,
        detached=detached,
        config=config,
        job_stdout=job_stdout,
        announce=True,
        on_submit=on_submit,
        savepoint_path=savepoint_path,
        allow_non_restored_state=allow_non_restored_state,
        leader=leader,
    )
    try:
        _run(Path(path), args, ctx)
    except (JobExecutionError, JobCanceledError):
        if not ctx.submitted:
            raise
    if not ctx.submitted:
        raise InvalidProgramError(
            f"the job program {path} did not call execute()",
            remedy="build the pipeline and call env.execute() (or execute_async())",
        )
    return ctx.submitted


def plan_program(path: str, args: list[str], *, parallelism: int | None = None) -> dict[str, Any]:
    """Run JOB.py up to its first execute() and return the plan it would submit."""
    from flinkpy.cluster import ClusterHome

    ctx = ExecutionContext(mode="plan", parallelism=parallelism, config=_config(ClusterHome.resolve(), {}))
    try:
        _run(Path(path), args, ctx)
    except PlanCaptured as captured:
        return captured.plan
    raise InvalidProgramError(
        f"the job program {path} did not call execute()",
        remedy="build the pipeline and call env.execute()",
    )


def spark_plans(path: str, args: list[str], *, parallelism: int | None = None) -> list[SparkPlan]:
    """Run JOB.py up to its execute() calls and translate each job for Spark, running nothing
    (``InvalidProgramError`` naming the operator Spark cannot run with the same results)."""
    from flinkpy.spark.capture import capture_job
    from flinkpy.spark.plan import translate

    jobs = capture_job(path, args, parallelism=parallelism)
    if not jobs:
        raise InvalidProgramError(f"the job program {path} did not call execute()", remedy="build the pipeline and call env.execute()")
    return [translate(job.env, config={}, job_name=job.job_name) for job in jobs]


def outcome_error(job: SubmittedJob) -> FlinkpyError | None:
    """The error a job that was waited for ended with (FAILED: its cause; CANCELED), else None."""
    if job.state == "FAILED":
        cause = job.failure or {}
        where = f" in {cause['task']}" if cause.get("task") else ""
        why = f": {cause.get('class', 'Exception')}: {cause.get('message', '')}".rstrip(": ") if cause else ""
        return JobExecutionError(
            f"job {job.job_id} ({job.name}) failed{where}{why}",
            details=cause.get("stack-trace"),
            job_id=job.job_id,
            remedy="the task's traceback is printed above" if job.embedded else f"see the traceback with 'flinkpy job exceptions {job.job_id}'",
        )
    if job.state == "CANCELED":
        return JobCanceledError(f"job {job.job_id} ({job.name}) was cancelled", remedy="run it again if that was not intended")
    return None


def _config(home: Any, overrides: dict[str, str]) -> dict[str, str]:
    """flinkpy.yaml < environment < -D, validated; as strings for the job graph."""
    from flinkpy.config import load_config

    cfg = load_config(home.path, overrides=overrides)
    return cfg.to_dict()
