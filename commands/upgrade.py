"""`flinkpy upgrade`: replace a running job by a new program, keeping its state, with a health
check and rollback (the Flink Kubernetes operator's upgrade modes, from a terminal or a runbook)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from commands.options import Dynamic, JobManager, JsonFlag, duration_seconds, timeout_seconds
from commands.output import emit_json, info, status
from commands.run import SparkMaster
from commands.session import session
from flinkpy.errors import (
    ConflictError, Interrupted, InvalidProgramError, NotFoundError, SavepointFailedError, UpgradeFailedError, UsageError,
)

if TYPE_CHECKING:
    from flinkpy.client.upgrade import Upgrade
    from flinkpy.client.upgrade_runner import UpgradeRunner

app = typer.Typer()

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}
_MODES = ("savepoint", "last-state", "stateless")


@app.command("upgrade", context_settings=_PASS_THROUGH)
def upgrade(
    job_id: Annotated[str, typer.Argument(metavar="JOB_ID", help="ID of the running job to replace (see 'flinkpy list').", show_default=False)],
    job: Annotated[Path, typer.Argument(metavar="NEW_JOB.py", help="The new program's job file.", show_default=False)],
    args: Annotated[Optional[list[str]], typer.Argument(metavar="[ARGS]...", help="Arguments passed to the new job file.", show_default=False)] = None,
    mode: Annotated[str, typer.Option("--mode", metavar="savepoint|last-state|stateless", help="How the state moves to the new job (see below).")] = "savepoint",
    parallelism: Annotated[Optional[int], typer.Option("-p", "--parallelism", min=1, metavar="N", help="Default parallelism of the new job (parallelism.default); default: the running job's, after any rescale.")] = None,
    allow_non_restored: Annotated[bool, typer.Option("-n", "--allowNonRestoredState", "--allow-non-restored-state", help="Let state of operators the new program no longer has be dropped instead of refusing the upgrade.")] = False,
    rollback_on_failure: Annotated[bool, typer.Option("--rollback-on-failure", help="When the new job is not healthy in time: cancel it and run the old program again from the same snapshot.")] = False,
    ready_timeout: Annotated[str, typer.Option("--ready-timeout", metavar="DURATION", help="How long the new job has to be RUNNING with a completed checkpoint and no restart.")] = "2min",
    no_fallback: Annotated[bool, typer.Option("--no-fallback", help="In savepoint mode, refuse rather than fall back to last-state when no savepoint can be taken.")] = False,
    max_checkpoint_age: Annotated[Optional[str], typer.Option("--max-checkpoint-age", metavar="DURATION", help="In last-state mode, take a savepoint instead when the latest checkpoint is older than this.")] = None,
    savepoint_path: Annotated[Optional[str], typer.Option("--savepoint-path", "--savepointPath", metavar="DIR", help="Directory of the savepoint; default: the job's execution.checkpointing.savepoint-dir, else <checkpoint dir>/savepoints.")] = None,
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long each step (savepoint, cancel) may take.")] = "10min",
    runner: Annotated[Optional[str], typer.Option("--runner", metavar="engine|spark", help="Runner of the new job: engine (flinkpy's own; 'local' works too) or spark; default: the job's own. Another runner than the job's moves its state there.")] = None,
    spark_master: SparkMaster = None,
    dynamic: Dynamic = None,
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Upgrade a running job to a new program, keeping its state.

    Modes: savepoint (stop the job with a savepoint, start NEW_JOB.py from it); last-state (no
    savepoint: cancel the job keeping its latest completed checkpoint whatever the retention
    setting, start NEW_JOB.py from that checkpoint; the checkpoint is disposed of once the new
    job is healthy, unless the job retains checkpoints on cancellation); stateless (cancel,
    start NEW_JOB.py without state). As in Flink's Kubernetes operator, savepoint mode falls
    back to last-state when the job is not RUNNING or its savepoint fails (unless
    --no-fallback), and last-state takes a savepoint instead when the job has no checkpoint or
    its latest is older than --max-checkpoint-age.

    Before anything stops, NEW_JOB.py is checked against the job's latest checkpoint (or a
    savepoint taken for the purpose) as 'flinkpy savepoint plan' checks it: state the new
    program would not restore refuses the upgrade (exit 7) unless -n. The new job counts as
    healthy once it is RUNNING, has completed a checkpoint and has not restarted, within
    --ready-timeout (or once it FINISHED). If it is not, the command exits 15 naming its root
    cause; with --rollback-on-failure it first cancels the new job and submits the old job's
    own program (kept from the cluster before the job stopped) again from the same snapshot.

    --runner moves the job between flinkpy's engine and Spark: JOB_ID is a job of the cluster
    or a Spark job registered in the cluster home ('flinkpy list' shows its runner), and the
    new job runs on the runner named (default: the job's own). The plan is then 'flinkpy
    savepoint plan --runner' (exit 7 naming each operator whose state would not move, before
    anything stops). A Spark job's state moves by savepoint only (a savepoint is taken first
    to check the plan against): --mode last-state of a Spark job is refused (exit 2), and so
    is last-state to Spark from an unaligned checkpoint holding in-flight data (exit 7). On
    Spark the new job is healthy once it commits a micro-batch after its restore; a rollback
    starts the old program on its own runner. -D and --spark-master configure the new job as
    'flinkpy run' does.

    Every step is printed on stderr as it happens; with --json one document follows on stdout:
    {"jid", "mode", "requested-mode", "from-runner", "runner", "outcome", "snapshot", "new-jid",
    "rollback-jid", "reason", "problems", "steps"}. The upgrade's progress is journaled in the cluster home
    (upgrades/JOB_ID.json) before each step: interrupted half way (Ctrl-C, SIGTERM, the CLI
    killed), the same command run again continues where it stopped, and a different one is
    refused (exit 9) with the command that continues it. Options must come before JOB_ID.

    Exit status: 0 upgraded; 15 the new job was unhealthy (rolled back with
    --rollback-on-failure); 7 the plan checks refused the new program (nothing stopped); 2 the
    mode cannot carry the job's state to the runner (nothing stopped); 9 the
    job is not running and no state can be taken, or another upgrade of it is pending; 12 the
    savepoint failed and no fallback applies (the job keeps running); 4 unknown job or file.

    Examples:

    \b
        flinkpy upgrade 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b job_v2.py
        flinkpy upgrade --mode last-state --rollback-on-failure JOB_ID job_v2.py
        flinkpy upgrade --mode stateless -p 4 --ready-timeout 30s JOB_ID v2.py
        flinkpy upgrade --json JOB_ID job_v2.py | jq -r '."new-jid"'
        flinkpy upgrade --runner spark --spark-master 'local[4]' JOB_ID job.py
        flinkpy upgrade --runner engine SPARK_JOB_ID job.py
    """
    from commands.context import client as connect, load_cli_config
    from flinkpy.client.interrupts import stop_requests
    from flinkpy.client.upgrade import UpgradeMode, UpgradeSpec
    from flinkpy.client.upgrade_moves import parse_runner
    from flinkpy.client.upgrade_runner import UpgradeRunner
    from flinkpy.config import parse_override

    if mode not in _MODES:
        raise UsageError(f"--mode {mode!r} is not an upgrade mode", remedy="use savepoint, last-state or stateless")
    if not job.is_file():
        raise NotFoundError(f"job file {job} does not exist", remedy="pass the path of the new program's Python job file")
    max_age = duration_seconds(max_checkpoint_age, "--max-checkpoint-age", positive=True) if max_checkpoint_age else None
    overrides = dict(parse_override(item) for item in dynamic or [])
    if spark_master is not None:
        overrides["spark.master"] = spark_master
    load_cli_config([f"{k}={v}" for k, v in overrides.items()])  # a bad -D is refused before anything stops
    spec = UpgradeSpec(
        job_id=job_id, program=str(job.resolve()), args=tuple(args or ()), mode=UpgradeMode(mode), parallelism=parallelism,
        allow_non_restored_state=allow_non_restored, fallback=not no_fallback,
        max_checkpoint_age_ms=int(max_age * 1000) if max_age is not None else None,
        rollback_on_failure=rollback_on_failure, ready_timeout_ms=int(duration_seconds(ready_timeout, "--ready-timeout", positive=True) * 1000),
        savepoint_dir=savepoint_path, runner=parse_runner(runner) if runner is not None else None,
        overrides=tuple(overrides.items()),
    )
    runner = UpgradeRunner(connect(jobmanager), spec, on_step=status, step_timeout_s=timeout_seconds(timeout))
    try:
        with stop_requests():
            machine = runner.run()
    except Interrupted as exc:
        raise Interrupted(exc.signum, _interrupted_line(runner)) from None
    _report(runner, machine)


def _interrupted_line(runner: UpgradeRunner) -> str:
    m = runner.machine
    took = f"; it took {m.snapshot}" if m.snapshot else ""
    return (f"upgrade of job {m.spec.job_id} interrupted in step {m.phase.value}{took}; "
            f"run the same command again to continue it (journal: {runner.journal})")


def _document(runner: UpgradeRunner, m: Upgrade) -> dict[str, Any]:
    return {
        "jid": m.spec.job_id, "mode": m.mode.value if m.mode else None, "requested-mode": m.spec.mode.value,
        "from-runner": m.from_runner.value if m.from_runner else None,
        "runner": (m.to_runner or m.spec.runner).value if (m.to_runner or m.spec.runner) else None,
        "outcome": m.phase.value, "snapshot": m.snapshot, "new-jid": m.new_job_id, "rollback-jid": m.rollback_job_id,
        "reason": m.reason, "problems": m.problems, "steps": runner.steps,
    }


def _report(runner: UpgradeRunner, m: Upgrade) -> None:
    from flinkpy.client.upgrade import Phase, Refusal

    doc = _document(runner, m)
    if m.phase is Phase.DONE:
        if session.json:
            emit_json(doc)
        info(f"Job {m.spec.job_id} upgraded ({m.mode.value if m.mode else ''}): new job {m.new_job_id}"
             + (f" from {m.snapshot}" if m.snapshot else ""))
        return
    session.error_context.update(doc)
    if m.phase is Phase.REFUSED:
        for problem in m.problems[1:]:
            status(f"flinkpy: error: {problem}")
        if m.refusal is Refusal.PLAN:
            raise InvalidProgramError(m.reason or "refused", remedy="see 'flinkpy savepoint plan', or pass -n to drop state the new program does not have")
        if m.refusal is Refusal.MODE:
            raise UsageError(m.reason or "refused", remedy="use --mode savepoint (or stateless); nothing was stopped")
        if m.refusal is Refusal.SAVEPOINT_FAILED:
            raise SavepointFailedError(m.reason or "the savepoint failed", remedy=f"see 'flinkpy job exceptions {m.spec.job_id}'; --mode last-state needs no savepoint")
        raise ConflictError(m.reason or "refused", remedy="see 'flinkpy list -a'")
    if m.phase is Phase.ROLLED_BACK:
        raise UpgradeFailedError(f"{m.reason}; rolled back: the old program runs again as job {m.rollback_job_id}"
                                 + (f" from {m.snapshot}" if m.snapshot else ""),
                                 remedy=f"see 'flinkpy job exceptions {m.new_job_id}'" if m.new_job_id else "fix the new program")
    where = f"; the snapshot is {m.snapshot}" if m.snapshot else ""
    raise UpgradeFailedError(f"{m.reason}{where}",
                             remedy="cancel it and resubmit the old program with 'flinkpy run -s SNAPSHOT OLD_JOB.py', or pass --rollback-on-failure")

