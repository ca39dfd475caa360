"""``flinkpy upgrade --runner``'s edge for the two runners: what differs between the engine and Spark.

The upgrade's runner (:mod:`flinkpy.client.upgrade_runner`) does the same steps whichever runner
serves the old and the new job; this module holds what the runners do differently:

- which runner serves a job id (a Spark job is one registered in the cluster home's Spark
  registry, anything else is the JobManager's: :meth:`~flinkpy.client.client.Client.runner_of`);
- what a rollback submits again: the engine's job-graph document, or a Spark job's driver spec
  (its job file, arguments, configuration and Spark settings) from the registry;
- the plan before anything stops: the engine's restore plan on the same runner, the
  runner-move plan (:func:`~flinkpy.client.runner_move.plan_runner_move`) across runners;
- what counts as a completed checkpoint of the new job: on Spark, a micro-batch committed after
  the one it was restored from (a Spark savepoint brings its old commits along);
- the configuration a submission to the target runner gets (``execution.runner``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from flinkpy.client.upgrade import Runner
from flinkpy.errors import ConflictError

if TYPE_CHECKING:
    from flinkpy.client.client import Client

#: ``execution.runner``'s value for each runner (the engine is "local" there, as in ``flinkpy run --runner``)
EXECUTION_RUNNER = {Runner.ENGINE: "local", Runner.SPARK: "spark"}
#: how a rollback document names a Spark job's driver spec
SPARK_SPEC = "spark-driver-spec"


def parse_runner(value: str) -> Runner:
    """``--runner``'s value: engine (or local, ``flinkpy run``'s word for it) or spark."""
    from flinkpy.errors import UsageError

    if value in ("engine", "local"):
        return Runner.ENGINE
    if value == "spark":
        return Runner.SPARK
    raise UsageError(f"--runner {value!r} is not a runner", remedy="use --runner engine or --runner spark")


def runner_of(client: Client, job_id: str) -> Runner:
    return Runner.SPARK if client.runner_of(job_id) == "spark" else Runner.ENGINE


def old_submission(client: Client, job_id: str, runner: Runner) -> dict[str, Any]:
    """What a rollback submits again: the job-graph document the JobManager keeps, or the spec
    the Spark job's driver was started with (``{SPARK_SPEC: spec}``)."""
    if runner is Runner.ENGINE:
        return client.cluster.job_submission(job_id)
    from flinkpy.spark.control_registry import jobs_dir

    path = jobs_dir(client.home.path) / f"{job_id}.spec"
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConflictError(f"the driver spec of Spark job {job_id} ({path}) cannot be read: {exc}",
                            remedy="keep the cluster home's spark-jobs directory") from None
    return {SPARK_SPEC: spec}


def resubmit_on_spark(client: Client, document: dict[str, Any], restore: str | None) -> str:
    """Start the old Spark job's program again under a new driver (detached), from ``restore``."""
    from flinkpy.spark.control_launch import run_on_spark

    spec = document[SPARK_SPEC]
    jobs = run_on_spark(spec["job_file"], list(spec.get("args") or []), home=client.home, config=dict(spec.get("config") or {}),
                        parallelism=spec.get("parallelism"), detached=True, savepoint_path=restore,
                        spark_conf=dict(spec.get("spark_conf") or {}))
    return jobs[0].job_id


def plan_problems(snapshot: str, program: str, args: list[str], *, runner: Runner, parallelism: int | None,
                  allow_non_restored_state: bool, overrides: dict[str, str]) -> tuple[list[str], list[str], str]:
    """(problems, warnings, summary line) of moving ``snapshot``'s state into ``program`` on
    ``runner``: ``savepoint plan --runner``'s checks (a Spark savepoint restored on Spark at other
    state partitions goes through its engine layout, refused where that layout lacks some state)."""
    from flinkpy.client.runner_move import plan_runner_move

    doc = plan_runner_move(snapshot, program, args, runner=runner.value, parallelism=parallelism,
                           allow_non_restored_state=allow_non_restored_state)
    restore = doc.get("restore") or {}
    if restore:  # onto the engine: its restore plan says which operators get state back
        moved = sum(1 for op in restore.get("operators") or [] if op.get("status") == "restored")
        what = f"{moved} operator(s) get their state back"
    else:
        what = f"{sum(1 for op in doc['operators'] if op['move'] == 'moves')} operator state(s) move"
    return list(doc["problems"]), list(restore.get("warnings") or []), f"Plan ({doc['from_runner']} -> {runner.value}): {what}"


def in_flight(snapshot: str) -> str | None:
    """Why ``snapshot`` (an engine checkpoint) cannot move to Spark: an unaligned checkpoint's
    in-flight data goes back onto the engine's own channels only. None when it can move."""
    from flinkpy.checkpoint.storage import CheckpointStorage
    from flinkpy.spark.in_flight import in_flight_refusals

    doc = CheckpointStorage(snapshot).read_metadata(snapshot)
    refused = in_flight_refusals(doc)
    if not refused:
        return None
    return f"checkpoint {doc.get('checkpoint_id')} cannot move to Spark: operator {refused[0].operator!r}: {refused[0].reason}"


def spark_completed(client: Client, job_id: str) -> int:
    """Micro-batches the Spark job committed since it started (its restored checkpoint's excluded)."""
    doc = client.checkpoints(job_id) or {}
    latest = (doc.get("latest") or {}).get("completed") or {}
    restored_batch = None
    for event in client.job(job_id).get("events") or []:
        if event.get("type") == "restored":
            restored_batch = event.get("batch")
    if not latest:
        return 0
    if restored_batch is None:
        return int((doc.get("counts") or {}).get("completed") or 0)
    return max(0, int(latest["id"]) - int(restored_batch))


def live_jobs(client: Client, runner: Runner) -> list[dict[str, Any]]:
    """The jobs of ``runner`` (overview entries: jid, state, start-time)."""
    if runner is Runner.ENGINE:
        return list(client.cluster.jobs_overview())
    from flinkpy.spark.control_registry import list_records, overview_entry

    return [overview_entry(r) for r in list_records(client.home.path)]
