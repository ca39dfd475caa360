"""Moving a running job between flinkpy's engine and Spark with its state (flinkpy/spark/state_move.py).

The pure part first (what moves, what is refused, the regrouping of running values between the
engine's and Spark's key groups), with no Spark; then one job moved engine -> Spark -> engine,
stopped with a savepoint mid-stream each time, at another parallelism on each side, its output
checked exactly against running sums computed here from the numbers.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import run_cli, running_cluster, wait_for
from flinkpy.spark import state_move as sm

# --------------------------------------------------------------------------- pure


def _op(operator_id: str, *, keyed: dict | None = None, operator: dict | None = None, offsets: object = None) -> dict:
    keyed_state = {"path": "k", "key_groups": [0, 127], "states": keyed} if keyed else None
    op_state = {"path": "o", "states": operator} if operator else None
    return {"operator_id": operator_id, "name": operator_id, "uid": operator_id,
            "subtasks": [{"subtask": 0, "keyed_state": keyed_state, "operator_state": op_state, "source_offsets": offsets}]}


PROGRAM = [
    sm.ProgramOperator("numbers", "numbers", "numbers", "source", restorable_source=True),
    sm.ProgramOperator("sums", "running sums", "sums", "keyed_reduce", key_group_reduce=True),
    sm.ProgramOperator("timers", "late alerts", "timers", "keyed_process"),
    sm.ProgramOperator("sink", "sums file", "sink", "sink"),
]


def test_plan_moves_positions_running_values_and_sink_state_and_names_what_cannot_move() -> None:
    doc = {"operators": [
        _op("numbers", offsets={"ranges": [[10, 20]]}),
        _op("sums", keyed={"_reduce": {"kind": "value", "entries": 2}, "_timers.event": {"kind": "map", "entries": 0}}),
        _op("sink", operator={"sink": {}}),
    ]}
    plan = sm.plan_move(doc, PROGRAM, runner="spark")
    assert plan.movable, plan.problems
    assert [(d.operator, d.what) for d in plan.decisions] == [
        ("numbers", "source positions"), ("running sums", "running values per key"), ("sums file", "pre-committed output")]

    doc["operators"].append(_op("timers", keyed={"seen": {"kind": "value"}, "_timers.event": {"kind": "map"}}))
    doc["operators"].append(_op("gone", keyed={"_reduce": {"kind": "value"}}))
    plan = sm.plan_move(doc, PROGRAM, runner="spark")
    assert not plan.movable
    assert len(plan.problems) == 2
    assert plan.problems[0].startswith("operator 'late alerts': it is a keyed_process whose keyed state (_timers.event, seen)")
    assert plan.problems[1].startswith("operator 'gone': the program has no operator with this id")
    assert sm.plan_move(doc, PROGRAM, runner="spark", allow_non_restored_state=True).problems == [plan.problems[0]]
    with pytest.raises(Exception, match="cannot move to the spark runner: operator 'late alerts'"):
        sm.refuse(plan, where="sp-1")

    # a Spark savepoint's own refusals are what the engine refuses
    refused = {"moved": {"refused": [{"operator": "late alerts", "uid": "timers", "operator_id": "timers", "state": "keyed state",
                                      "reason": "no"}]}}
    assert sm.plan_move(refused, [], runner="engine").problems == ["operator 'late alerts': no"]


def test_running_values_regroup_between_the_engine_and_spark_key_groups_with_nothing_lost(tmp_path: Path) -> None:
    import random

    from flinkpy.checkpoint.analysis import StateFileReader
    from flinkpy.checkpoint.storage import CheckpointStorage
    from flinkpy.spark.keyed import KEY_GROUPS
    from flinkpy.state.key_groups import KeyGroupAssigner

    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rnd = random.Random(seed)
    values = {f"k{rnd.randrange(10**6)}": rnd.randrange(10**9) for _ in range(500)} | {("t", 1): 3, 7: 8}
    groups = sm.seed_groups(values, KEY_GROUPS)
    assign = KeyGroupAssigner(KEY_GROUPS)
    assert all(assign(k) == g for g, table in groups.items() for k in table)
    assert {k: v for t in groups.values() for k, v in t.items()} == values
    # Spark -> engine: the tables Spark keeps per key group, into the engine's files and back
    import pickle

    merged = sm.merge_group_tables(pickle.dumps(t) for t in groups.values())
    url = str(tmp_path)
    storage = CheckpointStorage(url)
    ops = sm.engine_operators(PROGRAM, {"sums": sm.MovedState("sums", running_values=merged),
                                        "numbers": sm.MovedState("numbers", source_positions=[{"a": 1}, {"b": 2}])},
                              max_parallelism=128, write=lambda name, data: storage.write_state_in(url, name, data))
    from flinkpy.checkpoint.metadata import new_metadata, validate

    doc = new_metadata(job_id="0" * 32, job_name="j", checkpoint_id=1, trigger_timestamp=1, completion_timestamp=2,
                       operators=ops, kind="savepoint", savepoint_format="canonical")
    validate(doc, "moved")  # what the engine's restore reads
    by_id = {o["operator_id"]: o for o in ops}
    assert [s["source_offsets"] for s in by_id["numbers"]["subtasks"]] == [{"a": 1}, {"b": 2}]
    assert by_id["sums"]["subtasks"][0]["keyed_state"]["key_groups"] == [0, 127]
    back = sm.engine_states(doc, StateFileReader(storage, url, trusted=True).load)
    assert back["sums"].running_values == values
    assert back["numbers"].source_positions == [{"a": 1}, {"b": 2}]


def test_a_spark_savepoint_restores_its_checkpoint_or_through_the_engine_layout_or_says_why_not() -> None:
    """At the parallelism it was taken at, a Spark savepoint's own checkpoint restores; at another
    (or with -n) its engine layout does, and where that layout is missing or incomplete the
    restore is refused with the reason."""
    from flinkpy.errors import InvalidProgramError, UsageError
    from flinkpy.spark.supervisor_snapshots import ENGINE_LAYOUT, SPARK_CHECKPOINT, check_restore

    full = {"spark": {"shuffle_partitions": 2, "key_groups": 32}, "moved": {"runner": "engine", "refused": []}}
    assert check_restore(full, shuffle_partitions=2, where="sp-1", key_groups=32) == SPARK_CHECKPOINT
    assert check_restore(full, shuffle_partitions=3, where="sp-1", key_groups=32) == ENGINE_LAYOUT
    assert check_restore(full, shuffle_partitions=2, where="sp-1", key_groups=32, allow_non_restored_state=True) == ENGINE_LAYOUT
    old = {"spark": {"shuffle_partitions": 2, "key_groups": 32}}
    with pytest.raises(UsageError, match="-n/--allow-non-restored-state: the Spark savepoint sp-1 cannot leave any operator's "
                                         "state behind: it was written before Spark savepoints carried the engine's layout"):
        check_restore(old, shuffle_partitions=2, where="sp-1", key_groups=32, allow_non_restored_state=True)
    partial = {**full, "moved": {"runner": "engine", "refused": [{"operator": "tally", "reason": "no way"}]}}
    with pytest.raises(InvalidProgramError, match=r"has its state in 2 partitions .* but this run would use 3, and its state "
                                                  r"cannot be redistributed: operator 'tally' could not be converted \(no way\)"):
        check_restore(partial, shuffle_partitions=3, where="sp-1", key_groups=32)


# --------------------------------------------------------------------------- engine -> Spark -> engine

pytest.importorskip("pyspark", reason="PySpark is not installed")

JOB = '''\
"""Running sums per parity of 1..COUNT (each record PAUSE seconds, so a stop lands mid-stream) into a FileSink."""
import sys, time
from flinkpy.common import Encoder, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.file_system import FileSink
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource


count, out, pause = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])


def parity(n):
    time.sleep(pause)
    return ("even" if n % 2 == 0 else "odd", n)


env = StreamExecutionEnvironment.get_execution_environment()
(env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
 .map(parity).name("parity").uid("parity")
 .key_by(lambda pair: pair[0]).sum(1).name("running sums").uid("sums")
 .sink_to(FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()).name("sums file").uid("sink"))
env.execute("moving sums")
'''


def _check_exactly_once(records: list, count: int) -> None:
    """Every number added exactly once to its parity's running sum. At parallelism 2 the sources'
    subtasks interleave, so which sums appear depends on timing, but running sums of positive
    numbers rise strictly: sorted, each key's updates differ by exactly the numbers of that key,
    one each (a record written twice shows as a difference of 0, a lost one as two merged)."""
    for key, numbers in (("even", range(2, count + 1, 2)), ("odd", range(1, count + 1, 2))):
        sums = sorted(v for k, v in records if k == key)
        steps = [b - a for a, b in zip([0, *sums], sums)]
        assert Counter(steps) == Counter(numbers), (
            f"{key}: duplicated {dict(Counter(steps) - Counter(numbers))}, missing {dict(Counter(numbers) - Counter(steps))}")
    assert len(records) == count


def _records(out: Path) -> list:
    parts = [p for p in out.rglob("*") if p.is_file() and not any(x.startswith(".") for x in p.relative_to(out).parts)]
    return [ast.literal_eval(line) for p in parts for line in p.read_text().splitlines() if line]


def _cli_json(*args: str, timeout: float = 120) -> dict:
    res = run_cli(args[0], *(["--json"] if args[0] != "savepoint" else [args[1], "--json"]), *args[1 + (args[0] == "savepoint"):],
                  timeout=timeout)
    assert res.returncode == 0, f"flinkpy {' '.join(args)} exited {res.returncode}: {res.stderr[-3000:]}"
    return json.loads(res.stdout)


def _stop(jid: str, target: Path) -> str:
    doc = _cli_json("stop", jid, "--savepoint-path", str(target), timeout=180)
    location = doc.get("location") or doc.get("path") or (doc.get("operation") or {}).get("location")
    assert location, doc
    return location


def _kill_driver(home: Path, jid: str) -> None:
    """The Spark driver of ``jid`` with its JVM and Python workers, if still alive."""
    import psutil

    try:
        root = psutil.Process(int(json.loads((home / "spark-jobs" / f"{jid}.json").read_text())["pid"]))
        procs = [root, *root.children(recursive=True)]
    except (OSError, ValueError, KeyError, psutil.Error):
        return
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A FLINKPY_HOME of the test's own, and Spark's Python and address for local jobs."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("FLINKPY_HOME", str(home))
    monkeypatch.delenv("FLINKPY_JOBMANAGER", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    return home


@pytest.mark.timeout(900)
def test_a_job_moves_engine_to_spark_to_engine_with_exact_running_sums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _home(tmp_path, monkeypatch)
    count, out = 3000, tmp_path / "out"
    (tmp_path / "job.py").write_text(JOB)
    job = [str(tmp_path / "job.py"), str(count), str(out)]
    slow = [*job, "0.02"]  # a record every 10 ms per subtask: the stops land mid-stream
    with running_cluster(home, taskmanagers=1, slots=2):
        jid = _cli_json("run", "-d", "-p", "2", "-D", "execution.checkpointing.interval=300ms", *slow)["jobs"][0]["jid"]
        wait_for(lambda: len(_records(out)) >= 100, timeout=90, interval=0.2, message="engine output before the stop")
        on_engine = _stop(jid, tmp_path / "sp-engine")
    first = len(_records(out))
    assert 0 < first < count, first
    plan = _cli_json("savepoint", "plan", "--runner", "spark", on_engine, *slow)
    assert plan["movable"] and {o["state"] for o in plan["operators"]} >= {"source positions", "running values per key"}, plan
    # the same uid on a keyed process function: its keyed state would not move, and the plan says so
    (tmp_path / "process_job.py").write_text(JOB.replace(".sum(1)", ".process(Tally())").replace(
        "count, out, pause =", "from flinkpy.datastream import KeyedProcessFunction\n\n\nclass Tally(KeyedProcessFunction):\n"
        "    def process_element(self, value, ctx):\n        yield value\n\n\ncount, out, pause ="))
    refused = run_cli("savepoint", "plan", "--runner", "spark", on_engine, str(tmp_path / "process_job.py"), *slow[1:], timeout=120)
    assert refused.returncode == 7, refused.stderr
    assert "error: operator 'running sums': it is a keyed_process whose keyed state (_reduce)" in refused.stderr
    # -n on Spark: the state of operators the program no longer has (new uids) stays behind instead of refusing the run
    (tmp_path / "new_uids.py").write_text(JOB.replace('uid("sums")', 'uid("totals")').replace('uid("sink")', 'uid("file")'))
    new_uids = [str(tmp_path / "new_uids.py"), str(count), str(tmp_path / "out-n"), "0.02"]
    left_behind = _cli_json("run", "-d", "--runner", "spark", "-p", "1", "-n", "-s", on_engine, *new_uids)["jobs"][0]["jid"]
    _kill_driver(home, left_behind)

    # on Spark at parallelism 1 (Spark's 32 key groups), a few micro-batches, then stopped again
    spark_jid = _cli_json("run", "-d", "--runner", "spark", "-p", "1", "-s", on_engine,
                          "-D", "execution.spark.max-records-per-batch=200", *slow)["jobs"][0]["jid"]
    try:
        wait_for(lambda: len(_records(out)) >= first + 100, timeout=400, interval=0.3, message="Spark output after the move",
                 describe=lambda: (home / "log" / f"spark-{spark_jid}.log").read_text()[-3000:])
        on_spark = _stop(spark_jid, tmp_path / "sp-spark")
    finally:
        _kill_driver(home, spark_jid)
    second = len(_records(out))
    assert second < count, "the Spark job should be stopped before its input ends"
    meta = json.loads((Path(on_spark.removeprefix("file://")) / "_metadata").read_text())
    assert meta["runner"] == "spark" and meta["moved"]["refused"] == []
    plan = _cli_json("savepoint", "plan", "--runner", "engine", on_spark, *slow)
    assert plan["movable"], plan

    # back on the engine at parallelism 2 to the end of the input
    with running_cluster(home, taskmanagers=1, slots=2):
        res = run_cli("run", "-p", "2", "-s", on_spark, *job, "0", timeout=240)
        assert res.returncode == 0, res.stderr[-3000:]
    _check_exactly_once(_records(out), count)


@pytest.mark.timeout(600)
def test_a_spark_job_rescales_from_its_savepoint_through_the_engine_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark cannot redistribute a query's state partitions: a Spark savepoint restored at another
    parallelism starts a new query from the engine's layout of its state, exactly once."""
    home = _home(tmp_path, monkeypatch)
    count, out = 2000, tmp_path / "out"
    (tmp_path / "job.py").write_text(JOB)
    job = [str(tmp_path / "job.py"), str(count), str(out)]
    jid = _cli_json("run", "-d", "--runner", "spark", "-p", "1", "-D", "execution.spark.max-records-per-batch=200",
                    *job, "0.02")["jobs"][0]["jid"]
    try:
        wait_for(lambda: len(_records(out)) >= 100, timeout=300, interval=0.3, message="Spark output before the stop",
                 describe=lambda: (home / "log" / f"spark-{jid}.log").read_text()[-3000:])
        at_one = _stop(jid, tmp_path / "sp")
    finally:
        _kill_driver(home, jid)
    first = len(_records(out))
    assert first < count, "the job should be stopped before its input ends"
    plan = _cli_json("savepoint", "plan", "--runner", "spark", "-p", "2", at_one, *job, "0")
    assert plan["movable"] and {o["state"] for o in plan["operators"]} >= {"source positions", "running values per key"}, plan
    res = run_cli("run", "--runner", "spark", "-p", "2", "-s", at_one, *job, "0", timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    _check_exactly_once(_records(out), count)
