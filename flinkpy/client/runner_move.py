"""Whether a snapshot's state would move to a runner: ``flinkpy savepoint plan --runner``.

Answers before anything starts (or stops: a savepoint or retained checkpoint of the running job
is enough) what of a snapshot's state the job file would get back on ``runner`` — flinkpy's
engine or Spark — and refuses, naming each operator with its reason, what would not move (see
:mod:`flinkpy.spark.state_move`). A move onto the engine also gets the engine's own restore plan
(:func:`flinkpy.client.restore_plan.plan_restore`), since a Spark savepoint carries the engine's
layout of its state.
"""

from __future__ import annotations

from typing import Any

from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.errors import InvalidProgramError, UsageError

RUNNERS = ("engine", "spark")


def _spark_job(job_path: str, args: list[str], parallelism: int | None) -> tuple[Any, int]:
    """(the job's Spark plan, the parallelism its query would run at)."""
    from flinkpy.spark.capture import capture_job
    from flinkpy.spark.plan import translate

    jobs = capture_job(job_path, list(args), parallelism=parallelism)
    if len(jobs) != 1:
        raise InvalidProgramError(f"the job program {job_path} calls execute() {len(jobs)} times; a plan needs exactly one job",
                                  remedy="plan a file with one execute()")
    return translate(jobs[0].env, job_name=jobs[0].job_name), jobs[0].parallelism


def _layout_refusals(doc: dict[str, Any]) -> tuple[Any, ...]:
    """What of a Spark savepoint's state its engine layout lacks, with the reasons."""
    from flinkpy.spark import state_move

    if doc.get("moved") is None:
        return (state_move.MoveDecision("Spark state store", None, "spark-state", "Spark's state", state_move.Move.REFUSED,
                                        "the savepoint was written before Spark savepoints carried the engine's layout; take a new one"),)
    return state_move.plan_move(doc, [], runner=state_move.ENGINE).decisions


def _ttl_on_engine(doc: dict[str, Any], job_path: str, args: list[str], parallelism: int | None) -> tuple[Any, ...]:
    """A Spark savepoint's TTL states against the job's StateTtlConfig, refused now where the
    engine's restore would refuse them when the function declares them (the job's declarations
    as the Spark translation reads them, running its keyed functions' open() as Spark does)."""
    from flinkpy.spark import state_move
    from flinkpy.spark.ttl_move import snapshot_ttl, ttl_mismatch

    try:
        program = {p.operator_id: p for p in state_move.program_operators(_spark_job(job_path, args, parallelism)[0])}
    except (ImportError, InvalidProgramError):  # no PySpark here, or a job Spark does not run: the restore checks it
        return ()
    out = []
    for op in doc.get("operators", []):
        target = program.get(op["operator_id"])
        if target is not None and (reason := ttl_mismatch(snapshot_ttl(op), target, undeclared=False)):
            out.append(state_move.MoveDecision(target.name, target.uid, op["operator_id"], "keyed state", state_move.Move.REFUSED, reason))
    return tuple(out)


def plan_runner_move(savepoint_path: str, job_path: str, args: list[str], *, runner: str, parallelism: int | None = None,
                     allow_non_restored_state: bool = False) -> dict[str, Any]:
    """The plan document: ``{"savepoint", "kind", "from_runner", "runner", "movable", "operators":
    [{"operator", "uid", "operator_id", "state", "move", "reason"}], "problems", "restore"}``."""
    from flinkpy.spark import state_move
    from flinkpy.spark.in_flight import in_flight_refusals
    from flinkpy.spark.supervisor_snapshots import restores_through_engine_layout

    if runner not in RUNNERS:
        raise UsageError(f"unknown runner {runner!r}", remedy="use --runner engine or --runner spark")
    storage = CheckpointStorage(savepoint_path)
    directory, _ = storage.locate(savepoint_path)
    doc = storage.read_metadata(savepoint_path)
    source = state_move.SPARK if doc.get("runner") == state_move.SPARK else state_move.ENGINE
    restore: dict[str, Any] | None = None
    if runner == state_move.SPARK:
        spark_plan, job_parallelism = _spark_job(job_path, args, parallelism)
        if source == state_move.SPARK and not restores_through_engine_layout(
                doc, shuffle_partitions=job_parallelism, allow_non_restored_state=allow_non_restored_state):
            plan = state_move.MovePlan(runner, ())  # Spark's own restore: its checkpoint location is copied back
        else:
            plan = state_move.plan_move(doc, state_move.program_operators(spark_plan), runner=runner,
                                        allow_non_restored_state=allow_non_restored_state)
            plan = state_move.MovePlan(runner, plan.decisions + in_flight_refusals(doc))  # what the move would lose
            if source == state_move.SPARK:
                plan = state_move.MovePlan(runner, _layout_refusals(doc) + plan.decisions)
    else:
        from flinkpy.client.restore_plan import plan_restore

        plan = state_move.MovePlan(runner, _layout_refusals(doc)) if source == state_move.SPARK else state_move.plan_move(doc, [], runner=runner)
        if plan.movable and source == state_move.SPARK:
            plan = state_move.MovePlan(runner, plan.decisions + _ttl_on_engine(doc, job_path, list(args), parallelism))
        if plan.movable:
            restore = plan_restore(savepoint_path, job_path, list(args), parallelism=parallelism,
                                   allow_non_restored_state=allow_non_restored_state)
    problems = plan.problems + (list(restore["problems"]) if restore and not restore["restorable"] else [])
    return {
        "savepoint": directory,
        "kind": doc["kind"],
        "from_runner": source,
        **plan.to_json(),
        "movable": plan.movable and (restore is None or bool(restore["restorable"])),
        "problems": problems,
        "restore": restore,
    }
