"""`flinkpy upgrade` against a real cluster, and its decisions without one.

The state machine (:mod:`flinkpy.client.upgrade`) is tested event by event with no cluster and
no clock. The CLI tests share one cluster (2 TaskManagers x 2 slots) for the module and run the
CLI as subprocesses. Their job is an even/odd running sum whose source is slow while the file
``slow`` exists in its output directory (so the old job is still running when it is upgraded,
and the new one takes a checkpoint before it finishes) and fast once the test removes it; each
subtask writes the last sum per key when its input ends. The expected sums are computed in
closed form: exactly once means the new job's last sums equal the sums of 1..N, whatever was
stopped, restored or replayed on the way.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import module_cluster, run_cli, wait_for
from flinkpy.client.upgrade import (
    CancelJob, CheckHealth, CheckPlan, CheckpointRef, Finish, HealthObserved, JobCancelled, JobInspected, Phase, PlanChecked,
    Refusal, ResubmitOld, SavepointFailed, SavepointTaken, StopWithSavepoint, SubmitNew, Submitted, TakeSavepoint, Upgrade,
    UpgradeMode, UpgradeSpec,
)
from flinkpy.errors import ExitCode

pytestmark = pytest.mark.timeout(120)

COUNT = 60_000

#: argv: count, out_dir, tag, uid of the sums operator, fail ("fail": raise on the first record)
PROGRAM = """
import json, os, sys, time
from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import MapFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

count, out_dir, tag, sums_uid, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
PAIR = Types.TUPLE([Types.STRING(), Types.LONG()])


def pace(n):
    if mode == "fail":
        raise ValueError(f"version {tag} cannot read record {n}")
    if n % 20 == 0 and os.path.exists(os.path.join(out_dir, "slow")):
        time.sleep(0.005)
    return ("even" if n % 2 == 0 else "odd", n)


class Latest(MapFunction):  # each key's latest sum on this subtask, written out when the input ends
    def open(self, ctx):
        self.sums, self.file = {}, os.path.join(out_dir, f"{tag}-{ctx.get_index_of_this_subtask()}.json")

    def map(self, pair):
        self.sums[pair[0]] = pair[1]
        return pair

    def close(self):
        open(self.file, "w").write(json.dumps(self.sums))


env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(100)
source = env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
sums = source.map(pace, output_type=PAIR).uid("pace").key_by(lambda p: p[0]).sum(1).uid(sums_uid).name("running sums")
sums.map(Latest(), output_type=PAIR).uid("last")
env.execute(f"sums {tag}")
"""

EXPECTED = {"even": sum(range(2, COUNT + 1, 2)), "odd": sum(range(1, COUNT + 1, 2))}


# --------------------------------------------------------------------------- the state machine


def spec(mode: UpgradeMode = UpgradeMode.SAVEPOINT, **kw: Any) -> UpgradeSpec:
    return UpgradeSpec(job_id="old", program="v2.py", mode=mode, ready_timeout_ms=10_000, **kw)


CHK = CheckpointRef("/c/old/chk-7", 7, 1_000)


def test_savepoint_mode_checks_the_plan_then_stops_submits_and_waits_for_health() -> None:
    up = Upgrade(spec())
    up.on(JobInspected("RUNNING", CHK, 2_000))
    assert up.action() == CheckPlan("/c/old/chk-7")
    up.on(PlanChecked(()))
    assert up.action() == StopWithSavepoint("old", None)
    up.on(SavepointTaken("/sp/1"))
    assert up.action() == SubmitNew("/sp/1", False, None)
    up.on(Submitted("new", 3_000))
    assert up.action() == CheckHealth("new")
    up.on(HealthObserved("RUNNING", 0, 0, 4_000))
    assert up.phase is Phase.HEALTH  # running, but no checkpoint yet
    up.on(HealthObserved("RUNNING", 0, 1, 5_000))
    assert up.action() == Finish(Phase.DONE)


def test_savepoint_mode_falls_back_to_last_state_unless_forbidden() -> None:
    up = Upgrade(spec())
    up.on(JobInspected("RESTARTING", CHK, 2_000))
    assert up.mode is UpgradeMode.LAST_STATE and "falling back to last-state" in up.notes[0]
    up.on(PlanChecked(()))
    assert up.action() == CancelJob("old", retain_latest_checkpoint=True)
    strict = Upgrade(spec(fallback=False))
    strict.on(JobInspected("RESTARTING", CHK, 2_000))
    assert strict.phase is Phase.REFUSED and strict.refusal is Refusal.NOT_RUNNING
    # a stop-with-savepoint that fails falls back too: the latest checkpoint is the state
    failing = Upgrade(spec())
    failing.on(JobInspected("RUNNING", CHK, 2_000))
    failing.on(PlanChecked(()))
    failing.on(SavepointFailed("declined"))
    assert failing.action() == CancelJob("old", retain_latest_checkpoint=True)
    # a bounded job that finished on its own meanwhile took its checkpoints with it: refused,
    # rather than a submission from a checkpoint that is gone
    failing.on(JobCancelled(None, "FINISHED"))
    assert failing.phase is Phase.REFUSED and failing.refusal is Refusal.NOT_RUNNING and "finished on its own" in failing.reason


def test_last_state_restores_from_the_checkpoint_kept_at_cancel_and_disposes_of_it_once_healthy() -> None:
    up = Upgrade(spec(UpgradeMode.LAST_STATE))
    up.on(JobInspected("RUNNING", CHK, 2_000))
    up.on(PlanChecked(()))
    up.on(JobCancelled("/c/old/chk-9"))
    assert up.action() == SubmitNew("/c/old/chk-9", False, None)
    up.on(Submitted("new", 3_000))
    up.on(HealthObserved("RUNNING", 0, 1, 4_000))
    assert up.phase is Phase.DISPOSE
    kept = Upgrade(spec(UpgradeMode.LAST_STATE))
    kept.on(JobInspected("RUNNING", CHK, 2_000, deletes_checkpoints_on_cancel=False))  # RETAIN_ON_CANCELLATION
    kept.on(PlanChecked(()))
    kept.on(JobCancelled("/c/old/chk-9"))
    kept.on(Submitted("new", 3_000))
    kept.on(HealthObserved("RUNNING", 0, 1, 4_000))
    assert kept.phase is Phase.DONE


def test_last_state_takes_a_savepoint_when_the_checkpoint_is_too_old_or_missing() -> None:
    old = Upgrade(spec(UpgradeMode.LAST_STATE, max_checkpoint_age_ms=60_000))
    old.on(JobInspected("RUNNING", CHK, 1_000 + 61_000))
    assert old.mode is UpgradeMode.SAVEPOINT and "older than --max-checkpoint-age" in old.notes[0]
    assert old.action() == CheckPlan("/c/old/chk-7")
    none = Upgrade(spec(UpgradeMode.LAST_STATE))
    none.on(JobInspected("RUNNING", None, 1_000))
    assert none.action() == TakeSavepoint("old")  # the plan needs a snapshot before anything stops
    none.on(SavepointTaken("/sp/check"))
    assert none.action() == CheckPlan("/sp/check")
    none.on(PlanChecked(()))
    assert none.action() == StopWithSavepoint("old", None)
    failed = Upgrade(spec(UpgradeMode.LAST_STATE))
    failed.on(JobInspected("FAILED", None, 1_000))
    assert failed.phase is Phase.REFUSED


def test_the_plan_refuses_before_anything_stops() -> None:
    up = Upgrade(spec())
    up.on(JobInspected("RUNNING", CHK, 2_000))
    up.on(PlanChecked(("the savepoint has state for 1 operator(s) the program does not have: running sums [uid sums]",)))
    assert up.phase is Phase.REFUSED and up.refusal is Refusal.PLAN and up.snapshot is None
    assert "running sums" in (up.reason or "")


def test_an_unhealthy_job_is_rolled_back_to_the_same_snapshot_naming_its_cause() -> None:
    up = Upgrade(spec(rollback_on_failure=True))
    up.on(JobInspected("RUNNING", CHK, 2_000))
    up.on(PlanChecked(()))
    up.on(SavepointTaken("/sp/1"))
    up.on(Submitted("new", 3_000))
    up.on(HealthObserved("RUNNING", 1, 0, 3_500, "ValueError: cannot read record 1"))
    assert up.action() == CancelJob("new", retain_latest_checkpoint=False)
    up.on(JobCancelled(None))
    assert up.action() == ResubmitOld("/sp/1", None)
    up.on(Submitted("back", 4_000))
    assert up.phase is Phase.ROLLED_BACK and up.rollback_job_id == "back"
    assert "ValueError: cannot read record 1" in (up.reason or "")
    # without --rollback-on-failure the new job is left alone, and the timeout counts too
    slow = Upgrade(spec())
    slow.on(JobInspected("RUNNING", CHK, 2_000))
    slow.on(PlanChecked(()))
    slow.on(SavepointTaken("/sp/1"))
    slow.on(Submitted("new", 3_000))
    slow.on(HealthObserved("CREATED", 0, 0, 3_000 + 10_001))
    assert slow.phase is Phase.UNHEALTHY and "--ready-timeout" in (slow.reason or "")


def test_the_state_survives_the_journal_round_trip_and_wrong_events_are_refused() -> None:
    up = Upgrade(spec(UpgradeMode.LAST_STATE, rollback_on_failure=True))
    up.on(JobInspected("RUNNING", CHK, 2_000))
    up.on(PlanChecked((), ("a warning",)))
    again = Upgrade.from_dict(json.loads(json.dumps(up.to_dict())))
    assert again == up and again.action() == CancelJob("old", retain_latest_checkpoint=True)
    with pytest.raises(ValueError, match="cannot take Submitted"):
        again.on(Submitted("x", 1))


# --------------------------------------------------------------------------- against a cluster


@pytest.fixture(scope="module")
def upgrade_cluster(tmp_path_factory: pytest.TempPathFactory):
    with module_cluster(tmp_path_factory, "upgrade", taskmanagers=2, slots=2) as home:
        yield home


def program(tmp_path: Path) -> Path:
    path = tmp_path / "sums.py"
    if not path.exists():
        path.write_text(textwrap.dedent(PROGRAM))
    return path


def start_old(tmp_path: Path, *flags: str) -> tuple[str, Path]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "slow").touch()
    res = run_cli("run", "--json", "-d", *flags, str(program(tmp_path)), str(COUNT), str(out), "v1", "sums", "ok", timeout=60)
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    wait_for(lambda: completed_checkpoints(jid) >= 1, timeout=30, interval=0.1, message=f"a checkpoint of job {jid}")
    return jid, out


def completed_checkpoints(jid: str) -> int:
    res = run_cli("checkpoint", "list", "--json", jid)
    return json.loads(res.stdout).get("counts", {}).get("completed", 0) if res.returncode == 0 else 0


def job_state(jid: str) -> str | None:
    res = run_cli("job", "show", "--json", jid)
    return json.loads(res.stdout).get("state") if res.returncode == 0 else None


def upgrade(jid: str, tmp_path: Path, out: Path, *flags: str, tag: str = "v2", uid: str = "sums", mode: str = "ok",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_cli("upgrade", "--json", *flags, jid, str(program(tmp_path)), str(COUNT), str(out), tag, uid, mode, timeout=90, env=env)


def last_sums(out: Path, tag: str) -> dict[str, int]:
    sums: dict[str, int] = {}
    for path in out.glob(f"{tag}-*.json"):
        for key, value in json.loads(path.read_text()).items():
            sums[key] = max(sums.get(key, 0), value)
    return sums


def finish(jid: str, out: Path, tag: str) -> dict[str, int]:
    (out / "slow").unlink(missing_ok=True)
    wait_for(lambda: job_state(jid) == "FINISHED", timeout=60, interval=0.1, message=f"job {jid} to finish", describe=lambda: job_state(jid))
    return last_sums(out, tag)


def test_savepoint_upgrade_refused_by_the_plan_then_done_carries_the_state_exactly_once(upgrade_cluster: Path, tmp_path: Path) -> None:
    old, out = start_old(tmp_path)
    refused = upgrade(old, tmp_path, out, "--mode", "savepoint", uid="sums-renamed")  # its state would have no operator
    assert refused.returncode == ExitCode.INVALID_PROGRAM, refused.stderr
    assert "running sums [uid sums]" in refused.stderr and json.loads(refused.stdout)["outcome"] == "refused"
    assert job_state(old) == "RUNNING"  # nothing stopped
    res = upgrade(old, tmp_path, out, "--mode", "savepoint")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["outcome"] == "done" and doc["mode"] == "savepoint" and "savepoint-" in doc["snapshot"]
    phases = [s["phase"] for s in doc["steps"]]
    assert phases.index("check-plan") < phases.index("stop") < phases.index("submit") < phases.index("health")
    assert "Savepoint completed. Path:" in res.stderr and "is healthy" in res.stderr
    assert job_state(old) == "FINISHED"
    from flinkpy.client import Client

    history = Client.from_environment().job(old)["savepoints"]["history"]  # the old job's savepoint history
    assert [(e["trigger"], e["location"]) for e in history] == [("upgrade", doc["snapshot"])]
    assert finish(doc["new-jid"], out, "v2") == EXPECTED
    assert not (upgrade_cluster / "upgrades" / f"{old}.json").exists()


def test_interrupted_last_state_upgrade_is_continued_by_running_it_again(upgrade_cluster: Path, tmp_path: Path) -> None:
    old, out = start_old(tmp_path)
    killed = upgrade(old, tmp_path, out, "--mode", "last-state", env={"FLINKPY_UPGRADE_KILL_AT": "submit"})
    assert killed.returncode == -9, killed.stderr
    assert job_state(old) == "CANCELED"
    journal = json.loads((upgrade_cluster / "upgrades" / f"{old}.json").read_text())
    kept = journal["upgrade"]["snapshot"]
    kept_dir = Path(kept.removeprefix("file://").removesuffix("/_metadata"))
    assert "/chk-" in kept and (kept_dir / "_metadata").exists()  # kept despite the cancel
    other = upgrade(old, tmp_path, out, "--mode", "stateless")
    assert other.returncode == ExitCode.CONFLICT and "--mode last-state" in other.stderr, other.stderr
    # killed again, the new job submitted (the JobManager spells its checkpoint without _metadata)
    # and not journaled yet: the next run adopts that job rather than running the program twice
    again = upgrade(old, tmp_path, out, "--mode", "last-state", env={"FLINKPY_UPGRADE_KILL_AT": "submit:submitted"})
    assert again.returncode == -9, again.stderr
    submitted = [j["jid"] for j in json.loads(run_cli("list", "--json").stdout)["jobs"]]
    assert len(submitted) == 1 and submitted[0] != old
    res = upgrade(old, tmp_path, out, "--mode", "last-state")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert "Continuing the interrupted upgrade" in res.stderr and doc["snapshot"] == kept
    assert "submitted by the interrupted attempt" in res.stderr and doc["new-jid"] == submitted[0], res.stderr
    assert [j["jid"] for j in json.loads(run_cli("list", "--json").stdout)["jobs"]] == submitted
    assert finish(doc["new-jid"], out, "v2") == EXPECTED
    assert not (kept_dir / "_metadata").exists()  # disposed of once the new job had its own


def test_stateless_upgrade_starts_fresh_at_the_old_jobs_parallelism(upgrade_cluster: Path, tmp_path: Path) -> None:
    old, out = start_old(tmp_path, "-p", "2")
    res = upgrade(old, tmp_path, out, "--mode", "stateless")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["snapshot"] is None and job_state(old) == "CANCELED"
    new = doc["new-jid"]
    assert "keeps the job's parallelism 2" in res.stderr, res.stderr  # without -p: the old job's, not the default
    vertices = json.loads(run_cli("job", "show", "--json", new).stdout)["vertices"]
    assert {v["parallelism"] for v in vertices} == {2}
    restored = json.loads(run_cli("checkpoint", "list", "--json", new).stdout)["latest"]["restored"]
    assert restored is None
    assert finish(new, out, "v2") == EXPECTED  # the fresh run's own sums, every number once


def test_unhealthy_new_job_is_rolled_back_naming_its_root_cause(upgrade_cluster: Path, tmp_path: Path) -> None:
    old, out = start_old(tmp_path)
    res = upgrade(old, tmp_path, out, "--mode", "savepoint", "--rollback-on-failure", "--ready-timeout", "30s", mode="fail")
    assert res.returncode == ExitCode.UPGRADE_FAILED, res.stderr
    doc = json.loads(res.stdout)
    assert doc["outcome"] == "rolled-back" and doc["error"]["exit_code"] == ExitCode.UPGRADE_FAILED
    assert "ValueError: version v2 cannot read record" in doc["error"]["message"]
    assert job_state(doc["new-jid"]) == "CANCELED"
    back = doc["rollback-jid"]
    wait_for(lambda: job_state(back) in ("RUNNING", "FINISHED"), timeout=30, interval=0.1, message=f"rolled-back job {back}")
    restored = json.loads(run_cli("checkpoint", "list", "--json", back).stdout)["latest"]["restored"]
    assert restored and restored["external_path"].rstrip("/").endswith(doc["snapshot"].rstrip("/").rsplit("/", 1)[-1])
    assert finish(back, out, "v1") == EXPECTED  # the old program, from the same savepoint, exactly once
