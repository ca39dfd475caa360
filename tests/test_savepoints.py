"""Savepoint files offline: `flinkpy savepoint plan | dispose | list` and `run --from-latest`'s choice.

Savepoints are built here with CheckpointStorage and the metadata builders, for the operator
ids the program's own plan reports, so no cluster is needed. State bytes come from a seeded
RNG (the seed is printed; fix it with FLINKPY_TEST_SEED).
"""

from __future__ import annotations

import json
import os
import random
import textwrap
from pathlib import Path

import pytest

from conftest import one_error_line, run_cli
from flinkpy.client.latest import latest_snapshot
from flinkpy.client.restore_plan import missing_uid_warning
from flinkpy.client.upgrade import Runner
from flinkpy.checkpoint import CheckpointStorage, keyed_state, new_metadata, new_operator, new_subtask, operator_state
from flinkpy.errors import ExitCode, NotFoundError
from flinkpy.state.key_groups import key_group_range_for_operator

pytestmark = pytest.mark.timeout(90)

JOB_ID = "3f2a9c0e11aa22bb33cc44dd55ee66ff"

PROGRAM = """
import sys
from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

variant = sys.argv[1] if len(sys.argv) > 1 else "same"
env = StreamExecutionEnvironment.get_execution_environment()
if variant == "maxp":
    env.set_max_parallelism(64)
nums = env.from_source(NumberSequenceSource(1, 10), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
tagged = nums.map(lambda n: ("e" if n % 2 == 0 else "o", n), output_type=Types.TUPLE([Types.STRING(), Types.LONG()])).uid("tag")
if variant == "added":
    tagged = tagged.filter(lambda p: p[1] > 0).uid("positive").name("positive")
if variant == "nouid":
    tagged = tagged.filter(lambda p: True).name("anonymous")
if variant == "removed":
    tagged.print()
else:
    tagged.key_by(lambda p: p[0]).sum(1).uid("sums").name("running sums").print()
env.execute("sums job")
"""


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED", random.randrange(2**32)))
    print(f"seed: {seed} (re-run with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "sums_job.py"
    path.write_text(textwrap.dedent(PROGRAM))
    return path


def write_snapshot(
    directory: Path,
    rng: random.Random,
    *,
    kind: str = "savepoint",
    job_id: str = JOB_ID,
    checkpoint_id: int = 7,
    parallelism: int = 2,
    completed: int = 2_000,
    extra_operator: bool = False,
) -> dict:
    """A savepoint (or checkpoint) of PROGRAM ('same' variant) at ``parallelism``: source offsets,
    keyed state of 'sums' split by key groups, and optionally state of an operator PROGRAM lacks."""
    storage = CheckpointStorage(str(directory))
    url = str(directory)
    source_subs, sum_subs = [], []
    for i in range(parallelism):
        source_subs.append(new_subtask(i, source_offsets={"split": str(i), "offset": rng.randrange(1000)}))
        groups = key_group_range_for_operator(128, parallelism, i)
        h = storage.write_state_in(url, f"sums-{i}.keyed", rng.randbytes(rng.randrange(16, 256)))
        sum_subs.append(new_subtask(i, keyed_state=keyed_state(h, (groups.start, groups.stop - 1), {"sum": {"kind": "value", "entries": 1}})))
    operators = [
        new_operator(operator_id="numbers", uid="numbers", name="numbers", vertex_id=1, parallelism=parallelism, max_parallelism=128, subtasks=source_subs),
        new_operator(operator_id="tag", uid="tag", name="Map", vertex_id=1, parallelism=parallelism, max_parallelism=128, subtasks=[new_subtask(i) for i in range(parallelism)]),
        new_operator(operator_id="sums", uid="sums", name="running sums", vertex_id=2, parallelism=parallelism, max_parallelism=128, subtasks=sum_subs),
    ]
    if extra_operator:
        h = storage.write_state_in(url, "state/dedup-0.op", rng.randbytes(40))
        operators.append(
            new_operator(operator_id="dedup", uid="dedup", name="dedup", vertex_id=3, parallelism=1, max_parallelism=128,
                         subtasks=[new_subtask(0, operator_state=operator_state(h, {"seen": {"kind": "list", "entries": 3}}))])
        )
    doc = new_metadata(
        job_id=job_id, job_name="sums job", checkpoint_id=checkpoint_id, trigger_timestamp=completed - 5,
        completion_timestamp=completed, operators=operators, kind=kind,
        savepoint_format="canonical" if kind == "savepoint" else None,
    )
    storage.write_metadata_in(url, doc)
    return doc


def plan(*args: str) -> tuple[int, dict, str]:
    res = run_cli("savepoint", "plan", "--json", *args)
    return res.returncode, json.loads(res.stdout), res.stderr


# --------------------------------------------------------------------------- plan


def test_plan_same_program_is_restorable_and_matches_by_uid(tmp_path: Path, program: Path, rng: random.Random) -> None:
    sp = tmp_path / "sp" / "savepoint-3f2a9c-aaaa"
    write_snapshot(sp, rng)
    code, doc, err = plan("-p", "2", str(sp), str(program))
    assert code == 0, err
    assert doc["restorable"] and doc["problems"] == [] and doc["dropped"] == []
    by_uid = {op["uid"]: op for op in doc["operators"] if op["uid"]}
    assert by_uid["sums"]["matched_by"] == "uid" and by_uid["sums"]["status"] == "restored"
    assert by_uid["sums"]["states"] == ["sum"]
    # The print sink has a generated id and no state in the savepoint: it starts empty.
    sink = [op for op in doc["operators"] if not op["uid"]]
    assert [op["status"] for op in sink] == ["empty"]
    # Same parallelism: each new subtask reads exactly its own old subtask.
    assert [[f["subtask"] for f in r["from"]] for r in by_uid["sums"]["key_groups"]] == [[0], [1]]


def test_plan_warns_of_state_moved_from_spark_without_its_ttl(tmp_path: Path, program: Path, rng: random.Random) -> None:
    """A Spark savepoint's engine layout marks a state Spark kept without its time-to-live (one
    declared after open()); the plan restores it, and says the job must not ask for it with one."""
    sp = tmp_path / "sp" / "savepoint-3f2a9c-bbbb"
    doc = write_snapshot(sp, rng)
    for sub in doc["operators"][2]["subtasks"]:
        sub["keyed_state"]["states"]["sum"]["ttl_unknown"] = True
    CheckpointStorage(str(sp)).write_metadata_in(str(sp), doc)
    code, plan_doc, err = plan("-p", "2", str(sp), str(program))
    assert code == 0 and plan_doc["restorable"], err
    said = ("operator 'running sums': Spark could not carry the time-to-live of its state 'sum' (declared after open()): "
            "the restore fails if the job asks for it with a StateTtlConfig")
    assert plan_doc["warnings"] == [said] and f"warning: {said}" in err


def test_plan_rescale_2_to_3_reads_overlapping_key_groups(tmp_path: Path, program: Path, rng: random.Random) -> None:
    sp = tmp_path / "savepoint-3f2a9c-bbbb"
    write_snapshot(sp, rng, parallelism=2)
    code, doc, err = plan("-p", "3", str(sp), str(program))
    assert code == 0, err
    sums = next(op for op in doc["operators"] if op["uid"] == "sums")
    assert (sums["old_parallelism"], sums["new_parallelism"]) == (2, 3)
    ranges = [(r["subtask"], r["key_groups"], [(f["subtask"], f["key_groups"]) for f in r["from"]]) for r in sums["key_groups"]]
    assert ranges == [
        (0, [0, 42], [(0, [0, 42])]),
        (1, [43, 85], [(0, [43, 63]), (1, [64, 85])]),
        (2, [86, 127], [(1, [86, 127])]),
    ]
    text = run_cli("savepoint", "plan", "-p", "3", str(sp), str(program), env={"COLUMNS": "250"})
    assert text.returncode == 0 and "2 -> 3" in text.stdout and "Restore would succeed." in text.stdout


def test_plan_operator_added_starts_empty(tmp_path: Path, program: Path, rng: random.Random) -> None:
    sp = tmp_path / "savepoint-3f2a9c-cccc"
    write_snapshot(sp, rng)
    code, doc, err = plan(str(sp), str(program), "added")
    assert code == 0, err
    added = next(op for op in doc["operators"] if op["uid"] == "positive")
    assert added["status"] == "empty" and added["matched_by"] is None


def test_plan_operator_removed_is_refused_unless_n(tmp_path: Path, program: Path, rng: random.Random) -> None:
    sp = tmp_path / "savepoint-3f2a9c-dddd"
    write_snapshot(sp, rng)
    code, doc, err = plan(str(sp), str(program), "removed")
    assert code == ExitCode.INVALID_PROGRAM
    assert not doc["restorable"] and [d["uid"] for d in doc["dropped"]] == ["sums"]
    assert "running sums [uid sums]" in err and "allowNonRestoredState" in err
    code, doc, err = plan("-n", str(sp), str(program), "removed")
    assert code == 0, err
    assert doc["restorable"] and doc["warnings"] and "dropped" in doc["warnings"][-1]


def test_plan_state_without_operator_in_savepoint_is_refused(tmp_path: Path, program: Path, rng: random.Random) -> None:
    sp = tmp_path / "savepoint-3f2a9c-eeee"
    write_snapshot(sp, rng, extra_operator=True)
    res = run_cli("savepoint", "plan", str(sp), str(program))
    assert res.returncode == ExitCode.INVALID_PROGRAM
    assert "dedup [uid dedup]" in res.stderr and "Restore would be refused." in res.stdout


def test_plan_max_parallelism_change_with_keyed_state_is_refused(tmp_path: Path, program: Path, rng: random.Random) -> None:
    sp = tmp_path / "savepoint-3f2a9c-ffff"
    write_snapshot(sp, rng)
    code, doc, err = plan(str(sp), str(program), "maxp")
    assert code == ExitCode.INVALID_PROGRAM
    assert any("max parallelism 128" in p and "64" in p for p in doc["problems"]), doc["problems"]


def test_plan_generated_id_match_warns_to_set_uids(tmp_path: Path, program: Path, rng: random.Random) -> None:
    # Give the generated-id filter of the 'nouid' variant some state, under the id its plan reports.
    info = json.loads(run_cli("info", "--json", str(program), "nouid").stdout)
    node = next(n for n in info["nodes"] if "anonymous" in n["operators"])
    gen_id = node["operator_ids"][node["operators"].index("anonymous")]
    sp = tmp_path / "savepoint-3f2a9c-gggg"
    doc = write_snapshot(sp, rng, parallelism=1)
    storage = CheckpointStorage(str(sp))
    h = storage.write_state_in(str(sp), "anon.op", b"xyz")
    doc["operators"].append(new_operator(operator_id=gen_id, uid=None, name="anonymous", vertex_id=1, parallelism=1, max_parallelism=128,
                                         subtasks=[new_subtask(0, operator_state=operator_state(h, {"s": {"kind": "list", "entries": 1}}))]))
    storage.write_metadata_in(str(sp), doc)
    code, out, err = plan("-p", "1", str(sp), str(program), "nouid")
    assert code == 0, err
    anon = next(op for op in out["operators"] if op["name"] == "anonymous")
    assert anon["matched_by"] == "generated id"
    warning = f"flinkpy: warning: {missing_uid_warning('anonymous', gen_id)}"
    assert warning in err.splitlines(), err
    # `run -s` warns in the same words (it said it differently before); the job itself may fail
    # on this test's made-up state bytes: only the warning matters here
    run = run_cli("run", "-p", "1", "-s", str(sp), str(program), "nouid", timeout=90)
    assert warning in run.stderr.splitlines(), run.stderr


def test_plan_exit_codes_for_missing_savepoint_and_job(tmp_path: Path, program: Path) -> None:
    assert run_cli("savepoint", "plan", str(tmp_path / "nothing"), str(program)).returncode == ExitCode.NOT_FOUND
    res = run_cli("savepoint", "plan", "--json", str(tmp_path / "nothing"), str(program))
    assert res.returncode == ExitCode.NOT_FOUND and json.loads(res.stdout)["error"]["exit_code"] == 4
    assert run_cli("savepoint", "plan", str(tmp_path), str(tmp_path / "nope.py")).returncode == ExitCode.NOT_FOUND


# --------------------------------------------------------------------------- dispose


def test_dispose_deletes_only_referenced_files(tmp_path: Path, rng: random.Random) -> None:
    sp = tmp_path / "sps" / "savepoint-3f2a9c-1111"
    doc = write_snapshot(sp, rng, extra_operator=True)
    (sp / "notes.txt").write_text("mine")
    neighbour = tmp_path / "sps" / "savepoint-3f2a9c-2222"
    write_snapshot(neighbour, rng)
    before = sorted(p.relative_to(neighbour) for p in neighbour.rglob("*"))
    res = run_cli("savepoint", "dispose", "--json", str(sp))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["files_deleted"] == 3 and out["kind"] == "savepoint" and out["job_id"] == doc["job_id"]
    assert sorted(p.name for p in sp.rglob("*")) == ["notes.txt"]  # state/ emptied and removed
    assert sorted(p.relative_to(neighbour) for p in neighbour.rglob("*")) == before
    # Disposing again: there is no savepoint any more.
    assert run_cli("savepoint", "dispose", str(sp)).returncode == ExitCode.NOT_FOUND


def test_dispose_removes_the_directory_when_empty(tmp_path: Path, rng: random.Random) -> None:
    sp = tmp_path / "savepoint-3f2a9c-3333"
    write_snapshot(sp, rng)
    res = run_cli("savepoint", "dispose", str(sp / "_metadata"))
    assert res.returncode == 0, res.stderr
    assert not sp.exists() and tmp_path.exists()


def test_dispose_refuses_a_checkpoint_unless_forced(tmp_path: Path, rng: random.Random) -> None:
    chk = tmp_path / JOB_ID / "chk-4"
    write_snapshot(chk, rng, kind="checkpoint", checkpoint_id=4)
    res = run_cli("savepoint", "dispose", str(chk))
    assert res.returncode == ExitCode.CONFLICT and "--force" in res.stderr
    assert (chk / "_metadata").exists()
    assert run_cli("savepoint", "dispose", "--force", str(chk)).returncode == 0
    assert not chk.exists()


# --------------------------------------------------------------------------- list and --from-latest


def test_list_rows_and_restorability(tmp_path: Path, rng: random.Random) -> None:
    root = tmp_path / "store"
    write_snapshot(root / "savepoints" / "savepoint-3f2a9c-4444", rng, completed=5_000)
    write_snapshot(root / JOB_ID / "chk-9", rng, kind="checkpoint", checkpoint_id=9, completed=6_000, parallelism=3)
    broken = root / "savepoints" / "savepoint-3f2a9c-5555"
    write_snapshot(broken, rng, completed=4_000)
    (broken / "sums-0.keyed").unlink()
    res = run_cli("savepoint", "list", "--json", str(root))
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["snapshots"]
    assert [(Path(r["path"]).name, r["kind"], r["restorable"]) for r in rows] == [
        ("chk-9", "checkpoint", True),
        ("savepoint-3f2a9c-4444", "savepoint", True),
        ("savepoint-3f2a9c-5555", "savepoint", False),
    ]
    assert rows[0]["parallelism"]["sums"] == 3 and rows[0]["job_id"] == JOB_ID and rows[0]["total_size"] > 0
    assert "missing" in rows[2]["problems"][0]
    text = run_cli("savepoint", "list", str(root), env={"COLUMNS": "300"})
    assert text.returncode == 0 and "Savepoints and checkpoints under" in text.stdout
    assert "yes" in text.stdout and "no: " in text.stdout
    assert run_cli("savepoint", "list", str(tmp_path / "absent")).returncode == ExitCode.NOT_FOUND


def test_list_defaults_to_the_configured_savepoint_dir(tmp_path: Path, rng: random.Random, flinkpy_home: Path) -> None:
    target = tmp_path / "configured"
    write_snapshot(target / "savepoint-3f2a9c-6666", rng)
    (flinkpy_home / "flinkpy.yaml").write_text(f"execution.checkpointing.savepoint-dir: {target}\n")
    res = run_cli("savepoint", "list", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["dir"] == str(target) and len(doc["snapshots"]) == 1


def test_newest_snapshot_is_chosen_by_completion_time(tmp_path: Path, rng: random.Random) -> None:
    write_snapshot(tmp_path / JOB_ID / "chk-12", rng, kind="checkpoint", checkpoint_id=12, completed=3_000)
    write_snapshot(tmp_path / "savepoints" / "savepoint-3f2a9c-7777", rng, checkpoint_id=10, completed=9_000)
    half = tmp_path / JOB_ID / "chk-13"
    half.mkdir()
    (half / "sums-0.keyed").write_bytes(b"partial")  # no _metadata: not complete
    snap = latest_snapshot(str(tmp_path), Runner.ENGINE)
    assert snap.path.endswith("savepoint-3f2a9c-7777") and snap.kind == "savepoint"


SPARK_JOB = "9b1e0c7d22aa33bb44cc55dd66ee77ff"


def spark_location(location: Path, *, committed: int, completed_s: float, logged: int | None = None) -> Path:
    """A Spark checkpoint location as a Spark query leaves it (its metadata, offset and commit
    logs, the query name flinkpy keeps there): batches 0..``logged`` planned, 0..``committed``
    committed, the last commit written at ``completed_s`` (epoch seconds)."""
    (location / "offsets").mkdir(parents=True)
    (location / "commits").mkdir()
    (location / "metadata").write_text('{"id":"5d6c3b1e-0000-4000-8000-000000000000"}')
    (location / "flinkpy-query").write_text(f"flinkpy_{location.parent.name}")
    for batch in range((committed if logged is None else logged) + 1):
        (location / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{"spark.sql.shuffle.partitions":"2"}}\n' + str(batch * 25))
    for batch in range(committed + 1):
        commit = location / "commits" / str(batch)
        commit.write_text('v1\n{"nextBatchWatermarkMs":0}')
        os.utime(commit, (completed_s, completed_s))
    return location


def test_from_latest_picks_among_the_snapshots_of_the_runner_asked_for(tmp_path: Path, rng: random.Random, program: Path) -> None:
    """One checkpoint directory holding both runners' snapshots: the engine's newest for the
    engine, the newest Spark savepoint or job checkpoint location for Spark (completed when its
    last commit was written), whichever is newer overall; nothing of the runner asked for: one
    line naming the other runner's newest and what to run."""
    root = tmp_path / "checkpoints"
    write_snapshot(root / JOB_ID / "chk-12", rng, kind="checkpoint", checkpoint_id=12, completed=9_000_000)  # the newest of all
    write_snapshot(root / JOB_ID / "chk-11", rng, kind="checkpoint", checkpoint_id=11, completed=8_000_000)
    spark_savepoint = root / "savepoints" / "savepoint-9b1e0c-1111"
    doc = write_snapshot(spark_savepoint, rng, job_id=SPARK_JOB, checkpoint_id=3, completed=4_000_000)
    doc["runner"] = "spark"
    CheckpointStorage(str(spark_savepoint)).write_metadata_in(str(spark_savepoint), doc)
    # a savepoint's own copy of the location, written later, is the savepoint's, not a location to resume
    spark_location(spark_savepoint / "spark", committed=3, completed_s=7_000)
    location = spark_location(root / SPARK_JOB / "spark", committed=5, completed_s=5_000, logged=6)
    spark_location(root / "0a0b0c0d0e0f00112233445566778899" / "spark", committed=-1, completed_s=6_000, logged=0)  # no commit yet

    engine = latest_snapshot(str(root), Runner.ENGINE)
    assert (engine.path, engine.describe()) == (str(root / JOB_ID / "chk-12"), f"checkpoint 12 of job {JOB_ID}")
    spark = latest_snapshot(str(root), Runner.SPARK)
    assert (spark.path, spark.describe(), spark.completed_ms) == (str(location), f"Spark checkpoint 5 of job {SPARK_JOB}", 5_000_000)
    # the job's directory and the location itself are directories --from-latest takes too
    assert latest_snapshot(str(root / SPARK_JOB), Runner.SPARK).path == str(location)
    assert latest_snapshot(str(location), Runner.SPARK).path == str(location)
    os.utime(location / "commits" / "5", (3_000, 3_000))
    assert latest_snapshot(str(root), Runner.SPARK).path == str(spark_savepoint)

    with pytest.raises(NotFoundError) as refused:
        latest_snapshot(str(root / JOB_ID), Runner.SPARK)
    line = refused.value.message + "; " + refused.value.remedy
    assert f"of the Spark runner under {root / JOB_ID}, only 2 of the engine (newest: {root / JOB_ID / 'chk-12'})" in line
    assert "--runner local" in line and f"-s {root / JOB_ID / 'chk-12'}" in line and "savepoint plan --runner spark" in line
    with pytest.raises(NotFoundError) as refused:
        latest_snapshot(str(root / SPARK_JOB), Runner.ENGINE)
    assert f"only 1 of the Spark runner (newest: {location})" in refused.value.message
    assert "--runner spark" in refused.value.remedy and "savepoint" in refused.value.remedy

    # the CLI asks for the runner of the run (-D, --runner or flinkpy.yaml) and refuses before running the job
    line = one_error_line(run_cli("run", "--runner", "spark", "--from-latest", str(root / JOB_ID), str(program)), ExitCode.NOT_FOUND)
    assert "of the Spark runner" in line and "--runner local" in line
    line = one_error_line(run_cli("run", "-D", "execution.runner=local", "--from-latest", str(location), str(program)), ExitCode.NOT_FOUND)
    assert "of the engine" in line and "--runner spark" in line
