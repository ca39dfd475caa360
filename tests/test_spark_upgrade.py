"""`flinkpy upgrade --runner`: a running job moved between flinkpy's engine and Spark in one command.

The state machine's new transitions and refusals first, with no cluster, no Spark and no clock
(the helpers of tests/test_upgrade.py); then one small engine job upgraded to Spark and back
with the CLI, its output checked exactly against the running sums computed here (the helpers
of tests/test_spark_state_move.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import run_cli, running_cluster, wait_for
from flinkpy.client.upgrade import (
    CancelJob, CheckPlan, HealthObserved, JobCancelled, JobInspected, Phase, PlanChecked, Refusal, ResubmitOld,
    SavepointFailed, SavepointTaken, StopWithSavepoint, SubmitNew, Submitted, TakeSavepoint, Upgrade, UpgradeMode, Runner,
)
from flinkpy.client.upgrade_moves import parse_runner
from flinkpy.errors import UsageError
from test_upgrade import CHK, spec

ENGINE, SPARK = Runner.ENGINE, Runner.SPARK
#: a Spark job's latest "checkpoint": its query's checkpoint location, not a snapshot in the engine's layout
SPARK_LOCATION = CHK.__class__("/home/checkpoints/old/spark", 12, 1_000)


# --------------------------------------------------------------------------- the state machine


def test_an_engine_job_moves_to_spark_checked_by_the_runner_move_plan_and_rolls_back_to_the_engine() -> None:
    up = Upgrade(spec(runner=SPARK, rollback_on_failure=True))
    up.on(JobInspected("RUNNING", CHK, 2_000, runner=ENGINE))
    assert (up.from_runner, up.to_runner, up.moves) == (ENGINE, SPARK, True)
    assert up.action() == CheckPlan("/c/old/chk-7", SPARK)  # savepoint plan --runner spark, before anything stops
    up.on(PlanChecked(()))
    assert up.action() == StopWithSavepoint("old", None)
    up.on(SavepointTaken("/sp/1"))
    assert up.action() == SubmitNew("/sp/1", False, None, SPARK)
    up.on(Submitted("on-spark", 3_000))
    up.on(HealthObserved("RUNNING", 1, 0, 3_500, "PythonException: boom"))
    assert up.action() == CancelJob("on-spark", retain_latest_checkpoint=False)
    up.on(JobCancelled(None))
    assert up.action() == ResubmitOld("/sp/1", None, ENGINE)  # back on the old job's own runner, same savepoint
    # the plan's refusal names the operator, and nothing stops
    refused = Upgrade(spec(runner=SPARK))
    refused.on(JobInspected("RUNNING", CHK, 2_000, runner=ENGINE))
    refused.on(PlanChecked(("operator 'late alerts': it is a keyed_process whose keyed state (seen) Spark would keep ...",)))
    assert refused.phase is Phase.REFUSED and refused.refusal is Refusal.PLAN and "late alerts" in (refused.reason or "")


def test_last_state_moves_an_engine_checkpoint_to_spark_but_a_spark_jobs_last_state_is_refused() -> None:
    up = Upgrade(spec(UpgradeMode.LAST_STATE, runner=SPARK))
    up.on(JobInspected("RUNNING", CHK, 2_000, runner=ENGINE))
    assert up.action() == CheckPlan("/c/old/chk-7", SPARK)
    up.on(PlanChecked(()))
    assert up.action() == CancelJob("old", retain_latest_checkpoint=True)
    up.on(JobCancelled("/c/old/chk-9"))
    assert up.action() == SubmitNew("/c/old/chk-9", False, None, SPARK)
    for target in (ENGINE, SPARK, None):  # to the engine, or on Spark (the default: the job's own runner)
        spark = Upgrade(spec(UpgradeMode.LAST_STATE, runner=target))
        spark.on(JobInspected("RUNNING", SPARK_LOCATION, 2_000, runner=SPARK))
        assert spark.phase is Phase.REFUSED and spark.refusal is Refusal.MODE, target
        assert "last-state cannot carry Spark job old's state" in (spark.reason or "")
        assert spark.to_runner is (target or SPARK)


def test_a_spark_job_moves_by_savepoint_only_a_savepoint_taken_first_to_check_the_plan() -> None:
    up = Upgrade(spec(runner=ENGINE))
    up.on(JobInspected("RUNNING", SPARK_LOCATION, 2_000, runner=SPARK))
    assert up.checkpoint is None and up.action() == TakeSavepoint("old")  # its checkpoint location is no plan to check
    up.on(SavepointTaken("/sp/check"))
    assert up.action() == CheckPlan("/sp/check", ENGINE)
    up.on(PlanChecked(()))
    assert up.action() == StopWithSavepoint("old", None)
    up.on(SavepointFailed("the query failed"))  # no last state to fall back to: the job keeps running
    assert up.phase is Phase.REFUSED and up.refusal is Refusal.SAVEPOINT_FAILED
    restarting = Upgrade(spec(runner=ENGINE))
    restarting.on(JobInspected("RESTARTING", SPARK_LOCATION, 2_000, runner=SPARK))
    assert restarting.refusal is Refusal.NOT_RUNNING and "moves by savepoint only" in (restarting.reason or "")
    # stateless needs no state: the Spark job is cancelled, the new job starts fresh on the engine
    fresh = Upgrade(spec(UpgradeMode.STATELESS, runner=ENGINE))
    fresh.on(JobInspected("RUNNING", SPARK_LOCATION, 2_000, runner=SPARK))
    assert fresh.action() == CancelJob("old", retain_latest_checkpoint=False)
    fresh.on(JobCancelled(None))
    assert fresh.action() == SubmitNew(None, False, None, ENGINE)


def test_the_runners_survive_the_journal_round_trip() -> None:
    up = Upgrade(spec(runner=ENGINE, overrides=(("spark.master", "local[1]"),)))
    up.on(JobInspected("RUNNING", SPARK_LOCATION, 2_000, runner=SPARK))
    up.on(SavepointTaken("/sp/check"))
    again = Upgrade.from_dict(json.loads(json.dumps(up.to_dict())))
    assert again == up and (again.from_runner, again.to_runner) == (SPARK, ENGINE)
    assert again.action() == CheckPlan("/sp/check", ENGINE)
    # a re-run after a kill continues on the runner the first run chose, with or without --runner
    from flinkpy.client.upgrade_runner import _describe, _same_request

    assert _same_request(again, spec(runner=None)) and _same_request(again, spec(runner=ENGINE))
    assert not _same_request(again, spec(runner=SPARK))
    assert _describe(again) == "flinkpy upgrade --mode savepoint --runner engine old v2.py"
    assert [parse_runner(word) for word in ("engine", "local", "spark")] == [ENGINE, ENGINE, SPARK]
    with pytest.raises(UsageError, match="--runner 'flink' is not a runner"):
        parse_runner("flink")


def test_an_unaligned_checkpoints_in_flight_records_are_refused_for_spark_by_the_plan_the_upgrade_and_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its sources' positions are past the records in flight, which only the engine puts back:
    moved to Spark, they would be lost."""
    pytest.importorskip("pyspark", reason="PySpark is not installed")
    from flinkpy.checkpoint.metadata import new_metadata, new_operator, new_subtask
    from flinkpy.checkpoint.storage import CheckpointStorage
    from flinkpy.client.runner_move import plan_runner_move
    from flinkpy.client.upgrade_moves import in_flight
    from test_spark_state_move import JOB

    def checkpoint(name: str, channel: dict | None) -> str:
        sub = new_subtask(0, source_offsets=None)
        if channel is not None:
            sub["channel_state"] = channel
        doc = new_metadata(job_id="0" * 32, job_name="j", checkpoint_id=4, trigger_timestamp=1, completion_timestamp=2, operators=[
            new_operator(operator_id="sums", uid="sums", name="running sums", vertex_id=1, parallelism=1, max_parallelism=128,
                         subtasks=[sub])])
        return CheckpointStorage(str(tmp_path)).write_metadata_in(str(tmp_path / name), doc)

    handle = {"path": "channels-0", "size": 10, "checksum": "sha256:" + "0" * 64, "input_bytes": 10, "output_bytes": 0}
    aligned, unaligned = checkpoint("aligned", None), checkpoint("unaligned", handle)
    assert in_flight(aligned) is None
    why = in_flight(unaligned)  # what the upgrade checks before it submits (the checkpoint kept at cancel)
    reason = "operator 'running sums': the unaligned checkpoint holds records in flight to it, which only the engine can put back"
    assert why and why.startswith(f"checkpoint 4 cannot move to Spark: {reason}"), why
    (tmp_path / "job.py").write_text(JOB)
    job = [str(tmp_path / "job.py"), "10", str(tmp_path / "out"), "0"]
    assert plan_runner_move(aligned, job[0], job[1:], runner="spark")["movable"]
    plan = plan_runner_move(unaligned, job[0], job[1:], runner="spark")
    assert not plan["movable"] and plan["problems"][0].startswith(reason), plan
    monkeypatch.setenv("FLINKPY_HOME", str(tmp_path / "home"))
    res = run_cli("run", "-d", "--runner", "spark", "-s", unaligned, *job, timeout=120)
    assert res.returncode == 7 and reason in res.stderr, res.stderr


def test_a_spark_savepoint_at_other_state_partitions_moves_through_its_engine_layout_or_is_refused_before_the_job_stops(
        tmp_path: Path) -> None:
    """Spark cannot rescale a query's state partitions: at another parallelism a Spark savepoint
    restores through the engine's layout of its state, and the plan refuses one without it
    before the Spark job stops."""
    from flinkpy.checkpoint.metadata import new_metadata
    from flinkpy.checkpoint.storage import CheckpointStorage
    from flinkpy.client.upgrade_moves import plan_problems

    (tmp_path / "job.py").write_text("from flinkpy.datastream import StreamExecutionEnvironment\n"
                                     "env = StreamExecutionEnvironment.get_execution_environment()\n"
                                     "env.from_collection([1, 2]).print()\nenv.execute('j')\n")
    job = str(tmp_path / "job.py")
    doc = new_metadata(job_id="0" * 32, job_name="j", checkpoint_id=3, trigger_timestamp=1, completion_timestamp=2, operators=[],
                       kind="savepoint", savepoint_format="native")
    doc.update(runner="spark", spark={"shuffle_partitions": 2, "key_groups": None, "batch_id": 3, "files": []})
    storage = CheckpointStorage(str(tmp_path))
    older = storage.write_metadata_in(str(tmp_path / "savepoint-1"), doc)
    layout = storage.write_metadata_in(str(tmp_path / "savepoint-2"), {**doc, "moved": {"runner": "engine", "refused": []}})
    kw = {"runner": SPARK, "allow_non_restored_state": False, "overrides": {}}
    assert plan_problems(older, job, [], parallelism=2, **kw)[0] == []
    problems = plan_problems(older, job, [], parallelism=3, **kw)[0]
    assert len(problems) == 1 and "written before Spark savepoints carried the engine's layout" in problems[0], problems
    assert plan_problems(layout, job, [], parallelism=3, **kw)[0] == []


# --------------------------------------------------------------------------- engine -> Spark -> engine


@pytest.mark.timeout(300)
def test_a_job_upgraded_to_spark_and_back_to_the_engine_sums_every_number_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyspark", reason="PySpark is not installed")
    from test_spark_state_move import JOB, _check_exactly_once, _cli_json, _kill_driver, _records

    home = tmp_path / "home"
    monkeypatch.setenv("FLINKPY_HOME", str(home))  # the cluster's, and the Spark drivers' registry
    monkeypatch.delenv("FLINKPY_JOBMANAGER", raising=False)
    count, out = 3000, tmp_path / "out"
    (tmp_path / "job.py").write_text(JOB)
    job = [str(tmp_path / "job.py"), str(count), str(out)]
    spark_jid = None
    with running_cluster(home, taskmanagers=1, slots=2):
        try:
            jid = _cli_json("run", "-d", "-p", "1", "-D", "execution.checkpointing.interval=300ms", *job, "0.02", "sums")["jobs"][0]["jid"]
            wait_for(lambda: len(_records(out)) >= 50, timeout=60, interval=0.2, message="engine output before the upgrade")
            there = _cli_json("upgrade", "--runner", "spark", "-D", "execution.spark.max-records-per-batch=50", "--ready-timeout", "3min",
                              jid, *job, "0.02", "sums", timeout=240)
            spark_jid = there["new-jid"]
            assert (there["outcome"], there["from-runner"], there["runner"]) == ("done", "engine", "spark"), there
            assert "savepoint-" in there["snapshot"]
            assert {j["jid"]: j["runner"] for j in _cli_json("list")["jobs"]}.get(spark_jid) == "spark"
            on_spark = len(_records(out))  # healthy: Spark committed a micro-batch of its own
            assert on_spark < count - 500, on_spark  # mid-stream: the move back takes the Spark job's state
            # back, without --runner it would stay on Spark; the rest of the input at full speed
            back = _cli_json("upgrade", "--runner", "engine", spark_jid, *job, "0", "sums", timeout=240)
            assert (back["outcome"], back["from-runner"], back["runner"]) == ("done", "spark", "engine"), back
            plans = [int(m.group(1)) for s in back["steps"] for m in [re.match(r"Plan \(spark -> engine\): (\d+) operator\(s\) get their "
                                                                            r"state back", s["message"])] if m]
            # the source's positions and the running sums (every kind of state moves in test_spark_state_move)
            assert plans and plans[0] >= 2, back["steps"]
            phases = [s["phase"] for s in back["steps"]]
            assert phases.index("take-savepoint") < phases.index("check-plan") < phases.index("stop") < phases.index("submit")
            states = lambda: {j["jid"]: j["state"] for j in _cli_json("list", "-a")["jobs"]}  # noqa: E731
            wait_for(lambda: states().get(back["new-jid"]) == "FINISHED", timeout=120, interval=0.3, message="the engine job to finish")
            assert states()[spark_jid] == "FINISHED" and states()[jid] == "FINISHED"  # both stopped with a savepoint
        finally:
            if spark_jid:
                _kill_driver(home, spark_jid)
    _check_exactly_once(_records(out), count)
