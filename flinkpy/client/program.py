"""Running a job file: what ``flinkpy run`` and ``flinkpy info`` do with JOB.py.

The file runs in this process as ``__main__`` (so ``if __name__ == '__main__'`` guards work),
with ``sys.argv`` set to the job's arguments and its directory on ``sys.path`` (shipped to the
task processes too, so helper modules next to the job import there as well). Each
``env.execute()`` in it submits one job.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.program.context import ExecutionContext, PlanCaptured, SubmittedJob
from flinkpy.program.invocation import job_config, run_file
from flinkpy.errors import FlinkpyError, InvalidProgramError, JobCanceledError, JobExecutionError

if TYPE_CHECKING:
    from flinkpy.cluster import ClusterHome
    from flinkpy.spark.plan import SparkPlan


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
    on_event: Callable[[str], None] | None = None,
    savepoint_path: str | None = None,
    allow_non_restored_state: bool = False,
    spark_conf: dict[str, str] | None = None,
    home: ClusterHome | str | Path | None = None,
    debug: bool = False,
) -> list[SubmittedJob]:
    """Run JOB.py; returns the jobs it submitted (with their final state unless detached).

    With ``execution.runner: spark`` the job runs on Spark under a supervising driver process
    (``flinkpy.spark.control_launch``); ``spark_conf`` adds Spark settings. An attached run
    calls ``on_event`` with a line for each failure, restart or wait of the job as it happens;
    a failed task's traceback shows the job's frames only, unless ``debug``.

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
    config = job_config(home, overrides or {})
    if config.get("execution.runner") == "spark":
        from flinkpy.spark.control_launch import run_on_spark

        return run_on_spark(path, args, home=home, config=config, parallelism=parallelism, detached=detached,
                            savepoint_path=savepoint_path, allow_non_restored_state=allow_non_restored_state, spark_conf=spark_conf,
                            job_stdout=job_stdout, on_submit=on_submit)
    ctx = ExecutionContext(
        address=address,
        token=token,
        parallelism=parallelism,
        detached=detached,
        config=config,
        job_stdout=job_stdout,
        announce=True,
        on_submit=on_submit,
        on_event=on_event,
        debug=debug,
        savepoint_path=savepoint_path,
        allow_non_restored_state=allow_non_restored_state,
        leader=leader,
    )
    try:
        run_file(Path(path), args, ctx)
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

    ctx = ExecutionContext(mode="plan", parallelism=parallelism, config=job_config(ClusterHome.resolve(), {}))
    try:
        run_file(Path(path), args, ctx)
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
    if job.state == "CANCELED" and not job.cancelled_by_program:
        return JobCanceledError(f"job {job.job_id} ({job.name}) was cancelled", remedy="run it again if that was not intended")
    return None
