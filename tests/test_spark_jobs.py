"""Spark jobs as operator-managed jobs: `flinkpy run --runner spark`, supervision by the restart
strategy, savepoints, and the lifecycle commands, on a real local Spark (PySpark 4, Java 17).

Every Spark test starts one driver (one SparkSession, ~10 s) through the CLI, on a real job file
translated as users' files are (flinkpy/spark/plan.py): a number sequence read in micro-batches
of a few dozen records, a map that can be slowed down and can fail at a chosen number (while a
marker file counts fewer failures than asked for, so that a restarted attempt passes), a running
sum per parity (key_by + sum) and a FileSink, whose committed part files the tests read back. The
expected output — every running sum exactly once, none missing — is computed here from the
numbers, independently of both engines.
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Callable

import psutil
import pytest

from conftest import ROOT, poll, run_cli, wait_for
from flinkpy.common.restart_backoff import ExponentialDelay, FailureRate, FixedDelay, NoRestart
from flinkpy.spark.control_registry import read_record
from flinkpy.spark.supervisor import GiveUp, Restart, SparkJobSupervisor

pyspark = pytest.importorskip("pyspark", reason="PySpark is not installed")

JID = "0123456789abcdef0123456789abcdef"


# --------------------------------------------------------------------------- the pure supervisor


def _cause(n: int) -> dict[str, str]:
    return {"class": "ValueError", "message": f"failure {n}", "stack-trace": f"Traceback ...\nValueError: failure {n}"}


def test_supervisor_follows_each_restart_strategy() -> None:
    s = SparkJobSupervisor(JID, "j", FailureRate(max_failures_per_interval=2, interval_ms=1000, delay_ms=50), now_ms=0)
    s.started(1)
    assert s.failed(10, _cause(1)) == Restart(at_ms=60, attempt=1)
    s.started(60)
    assert isinstance(s.failed(100, _cause(2)), Restart)
    s.started(150)
    assert s.failed(200, _cause(3)) == GiveUp("the restart strategy gave up")
    assert s.state == "FAILED" and s.restarts == 2
    doc = s.exceptions_document()
    assert [e["message"] for e in doc["exceptionHistory"]["entries"]] == ["failure 3", "failure 2", "failure 1"]
    assert [e["restarted"] for e in doc["exceptionHistory"]["entries"]] == [False, True, True]
    result = s.execution_result()["job-execution-result"]
    assert result["application-status"] == "FAILED" and result["failure-cause"]["class"] == "ValueError"

    e = SparkJobSupervisor(JID, "j", ExponentialDelay(initial_backoff_ms=100, multiplier=2.0, jitter_factor=0.0), now_ms=0)
    e.started(0)
    delays = []
    for t in (10, 20, 30):
        action = e.failed(t, _cause(t))
        delays.append(action.at_ms - t)
        e.started(action.at_ms)
    assert delays == [100, 200, 400]

    n = SparkJobSupervisor(JID, "j", NoRestart(), now_ms=0)
    n.started(0)
    assert isinstance(n.failed(5, _cause(1)), GiveUp) and n.state == "FAILED"


def test_supervisor_cancel_while_restarting_and_finish() -> None:
    s = SparkJobSupervisor(JID, "j", FixedDelay(attempts=3, delay_ms=10_000), now_ms=0)
    s.started(0)
    assert isinstance(s.failed(5, _cause(1)), Restart)
    assert s.cancel(6) is True and s.state == "CANCELED"
    assert s.cancel(7) is False  # nothing left to cancel
    assert s.execution_result()["job-execution-result"]["application-status"] == "CANCELED"
    f = SparkJobSupervisor(JID, "j", None, now_ms=0)
    f.started(0)
    f.finished(50)
    assert f.state == "FINISHED" and f.summary(60)["runner"] == "spark"


# --------------------------------------------------------------------------- with Spark

#: the job file every Spark test runs (written into the test's directory)
SUMS_JOB = '''\
"""Running sums per parity of 1..COUNT into a FileSink; the map can be slowed down (busy, as real
work is: kill-task picks busy workers) and can fail at one number while the marker file counts
fewer than FAILS failures."""

import argparse
import os
import sys
import time

from flinkpy.common import Encoder, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.file_system import FileSink
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource


class Parity:
    def __init__(self, work_ms, fail_at, fails, marker):
        self.work_s, self.fail_at, self.fails, self.marker = work_ms / 1000, fail_at, fails, marker

    def __call__(self, n):
        until = time.perf_counter() + self.work_s
        while time.perf_counter() < until:
            pass
        if n == self.fail_at:
            done = int(open(self.marker).read() or 0) if os.path.exists(self.marker) else 0
            if done < self.fails:
                with open(self.marker, "w") as f:
                    f.write(str(done + 1))
                raise ValueError(f"planned failure {done + 1} of {self.fails} at {n}")
        return ("even" if n % 2 == 0 else "odd", n)


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--marker", required=True)
    parser.add_argument("--fail-at", type=int, default=0)
    parser.add_argument("--fails", type=int, default=0)
    parser.add_argument("--work-ms", type=float, default=0.0)
    a = parser.parse_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_source(NumberSequenceSource(1, a.count), WatermarkStrategy.no_watermarks(), "numbers")
     .map(Parity(a.work_ms, a.fail_at, a.fails, a.marker)).name("parity").uid("parity")
     .key_by(lambda pair: pair[0]).sum(1).name("running sums").uid("sums")
     .sink_to(FileSink.for_row_format(a.out, Encoder.simple_string_encoder()).build()).name("sums file").uid("sink"))
    env.execute("spark sums")


if __name__ == "__main__":
    main(sys.argv[1:])
'''


@pytest.fixture
def spark_env(flinkpy_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The job file in the test's directory; at teardown every driver still alive is killed
    with its JVM and Python workers."""
    monkeypatch.setenv("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    (tmp_path / "sums_job.py").write_text(SUMS_JOB)
    yield tmp_path
    for rec_file in (flinkpy_home / "spark-jobs").glob("*[0-9a-f].json"):
        rec = json.loads(rec_file.read_text())
        try:
            root = psutil.Process(int(rec["pid"]))
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=10)


def _job(tmp: Path, count: int, per_batch: int, *, fail_at: int = 0, fails: int = 0, work_ms: float = 0.0) -> list[str]:
    """The job's -D settings, file and arguments: COUNT numbers, PER_BATCH per micro-batch."""
    return ["-D", f"execution.spark.max-records-per-batch={per_batch}", str(tmp / "sums_job.py"),
            "--count", str(count), "--out", str(tmp / "out"), "--marker", str(tmp / "fail-marker"),
            "--fail-at", str(fail_at), "--fails", str(fails), "--work-ms", str(work_ms)]


def _expected(count: int) -> Counter:
    """Every running sum of the job exactly once, computed from the numbers."""
    sums, out = {"even": 0, "odd": 0}, Counter()
    for n in range(1, count + 1):
        key = "even" if n % 2 == 0 else "odd"
        sums[key] += n
        out[(key, sums[key])] += 1
    return out


def _committed_parts(out: Path) -> list[Path]:
    """The FileSink's visible part files (hidden ones are in progress)."""
    return sorted(p for p in out.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(out).parts))


def _output(out: Path) -> list[tuple[str, int]]:
    """The committed records in the order written: by batch id (the part file name's end), then line."""
    parts = sorted(_committed_parts(out), key=lambda p: int(p.name.rsplit("-", 1)[1]))
    return [ast.literal_eval(line) for p in parts for line in p.read_text().splitlines() if line]


def _check_exact(out: Path, count: int) -> None:
    records = _output(out)
    got, expected = Counter(records), _expected(count)
    assert got == expected, f"duplicates {dict(got - expected)}, missing {dict(expected - got)}"
    final = dict(records)  # the last value written per key
    assert final == {"even": (count // 2) * (count // 2 + 1), "odd": ((count + 1) // 2) ** 2}


def _cli_json(*args: str, timeout: float = 60) -> dict:
    res = run_cli(*args, timeout=timeout) if "--json" in args else run_cli(*args, "--json", timeout=timeout)
    assert res.returncode == 0, f"flinkpy {' '.join(args)} exited {res.returncode}: {res.stderr[-2000:]}"
    return json.loads(res.stdout)


def _record(home: Path, jid: str) -> dict:
    return json.loads((home / "spark-jobs" / f"{jid}.json").read_text())


def _committed(home: Path, jid: str) -> int:
    location = Path(_record(home, jid)["checkpoint_location"])
    return len(list((location / "commits").glob("[0-9]*"))) if (location / "commits").is_dir() else 0


FIXED_DELAY = ("-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.delay=100ms")


@pytest.mark.timeout(240)
def test_failure_is_restarted_from_the_checkpoint_with_exact_results(spark_env: Path, flinkpy_home: Path) -> None:
    count, per_batch = 400, 50  # the failure is in the fifth micro-batch: four are committed before it
    res = run_cli("run", "--runner", "spark", *FIXED_DELAY, "-D", "restart-strategy.fixed-delay.attempts=2", "--json",
                  *_job(spark_env, count, per_batch, fail_at=230, fails=1), timeout=200)
    assert res.returncode == 0, res.stderr[-3000:]
    job = json.loads(res.stdout)["jobs"][0]
    assert job["state"] == "FINISHED" and len(job["jid"]) == 32
    _check_exact(spark_env / "out", count)
    # resumed from the checkpoint, not from the start: the batches committed before the failure
    # were not written again (a rewrite renames a new file into place)
    failed_at = (spark_env / "fail-marker").stat().st_mtime_ns
    kept = [p for p in _committed_parts(spark_env / "out") if p.stat().st_mtime_ns < failed_at]
    assert len(kept) >= 3, [(p.name, p.stat().st_mtime_ns, failed_at) for p in _committed_parts(spark_env / "out")]
    exceptions = _cli_json("job", "exceptions", job["jid"])["exceptionHistory"]["entries"]
    assert len(exceptions) == 1
    assert exceptions[0]["exceptionName"] == "ValueError" and "planned failure 1 of 1 at 230" in exceptions[0]["message"]
    assert exceptions[0]["restarted"] is True and exceptions[0]["stacktrace"] and exceptions[0]["timestamp"] > 0
    listed = [j for j in _cli_json("list", "-a")["jobs"] if j["jid"] == job["jid"]]
    assert listed and (listed[0]["name"], listed[0]["runner"], listed[0]["state"], listed[0]["restarts"]) == ("spark sums", "spark", "FINISHED", 1)
    checkpoints = _cli_json("checkpoint", "list", job["jid"])
    assert checkpoints["counts"]["completed"] == _committed(flinkpy_home, job["jid"]) >= count // per_batch


@pytest.mark.timeout(240)
def test_fixed_delay_gives_up_after_its_attempts(spark_env: Path, flinkpy_home: Path) -> None:
    res = run_cli("run", "--runner", "spark", *FIXED_DELAY, "-D", "restart-strategy.fixed-delay.attempts=1",
                  *_job(spark_env, 40, 20, fail_at=3, fails=5), timeout=200)
    assert res.returncode == 5, res.stderr[-3000:]
    assert "ValueError" in res.stderr and "planned failure 2 of 5" in res.stderr
    jid = next(p.stem for p in (flinkpy_home / "spark-jobs").glob("*[0-9a-f].json"))
    entries = _cli_json("job", "exceptions", jid)["exceptionHistory"]["entries"]
    assert [e["restarted"] for e in entries] == [False, True]
    assert (spark_env / "fail-marker").read_text() == "2"  # the second failure was the last attempt
    assert not _committed_parts(spark_env / "out")  # the failing first batch never committed


def test_a_query_attempt_first_removes_the_batch_files_nobody_committed(tmp_path: Path) -> None:
    """What a restored or restarted query does before its first batch, without Spark: part
    files of that batch id and later ones, in any bucket, visible or in progress, are removed."""
    from flinkpy.common import Encoder
    from flinkpy.datastream.connectors.file_system import BucketAssigner, FileSink
    from flinkpy.spark.sinks import FileWriter

    class ByKey(BucketAssigner):
        depends_on_record = True

        def bucket_id(self, record, now_ms):
            return record[0]

    out = tmp_path / "out"
    writer = FileWriter(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).with_bucket_assigner(ByKey()).build())
    for batch in range(5):
        writer.write([("a", batch), ("b", batch)] if batch % 2 else [("a", batch)], batch)
    (out / "b" / ".part-spark-000000000007.inprogress").write_text("('b', 7)\n")
    (out / "b" / "unrelated.txt").write_text("kept\n")
    writer.begin(3)
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert names == ["a/part-spark-000000000000", "a/part-spark-000000000001", "a/part-spark-000000000002",
                     "b/part-spark-000000000001", "b/unrelated.txt"]
    # a query that starts afresh in the same output (moved or rescaled state) numbers its batches
    # from 0 again under its own lineage: its first attempt removes none of the files above
    fresh = FileWriter(writer.sink)
    fresh.bind_lineage("0a1b2c3d4e5f")
    fresh.begin(0)
    fresh.write([("a", 9)], 0)
    after = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert after == sorted([*names, "a/part-spark-0a1b2c3d4e5f-000000000000"]), after


def _start_detached(spark_env: Path, *job: str) -> str:
    doc = _cli_json("run", "--json", "-d", "--runner", "spark", *FIXED_DELAY, "-D", "restart-strategy.fixed-delay.attempts=3",
                    *job, timeout=120)
    return doc["jobs"][0]["jid"]


def _wait_state(jid: str, states: tuple[str, ...], timeout: float) -> dict:
    return wait_for(lambda: next((j for j in _cli_json("list", "-a")["jobs"] if j["jid"] == jid and j["state"] in states), None),
                    timeout=timeout, interval=0.3, message=f"job {jid} in {states}")


@pytest.mark.timeout(300)
def test_kill_task_kills_a_python_worker_and_the_query_recovers_exactly(spark_env: Path, flinkpy_home: Path) -> None:
    count = 200  # ten micro-batches of 20 numbers, ~1.2 s of Python work each
    jid = _start_detached(spark_env, *_job(spark_env, count, 20, work_ms=60))
    wait_for(lambda: _committed(flinkpy_home, jid) >= 1, timeout=120, interval=0.2, message="a first committed batch")
    seed = random.randrange(2**31)
    print(f"seed {seed}")

    kills: list[dict] = []

    def restarted() -> bool:
        return _cli_json("job", "show", jid)["restarts"] >= 1

    def kill_until_the_query_fails() -> bool:
        # a busy worker may finish its task between the choice and the signal: then nothing
        # failed, and the next kill follows
        res = run_cli("fault", "kill-task", jid, "--seed", str(seed), "--json")
        if res.returncode == 0:
            kills.append(json.loads(res.stdout))
            return bool(poll(restarted, timeout=5, interval=0.2))
        return restarted()

    wait_for(kill_until_the_query_fails, timeout=90, interval=0.1, message="a killed Python worker to fail the query")
    assert all(k["target"]["what"] == "Spark Python worker" and k["target"]["pid"] > 0 for k in kills)
    final = _wait_state(jid, ("FINISHED", "FAILED", "CANCELED"), timeout=200)
    assert final["state"] == "FINISHED"
    _check_exact(spark_env / "out", count)
    entries = _cli_json("job", "exceptions", jid)["exceptionHistory"]["entries"]
    print(f"restarts {final['restarts']}: {[e['exceptionName'] for e in entries]}")
    assert final["restarts"] == len(entries) >= 1 and all(e["restarted"] for e in entries)
    assert {e["exceptionName"] for e in entries} == {"PythonWorkerCrashed"}
    faults = _cli_json("fault", "history", jid)["faults"]
    assert [f["target"]["pid"] for f in faults] == [k["target"]["pid"] for k in kills]


@pytest.mark.timeout(300)
def test_savepoint_cancel_and_restore_with_exact_results_and_rescale_refused(spark_env: Path, flinkpy_home: Path) -> None:
    count = 600  # twenty micro-batches of 30 numbers, ~1.2 s each: still running when cancelled
    jid = _start_detached(spark_env, *_job(spark_env, count, 30, work_ms=40))
    wait_for(lambda: _committed(flinkpy_home, jid) >= 2, timeout=120, interval=0.2, message="two committed batches")
    target = spark_env / "savepoints"
    sp = _cli_json("savepoint", "trigger", jid, str(target), "--timeout", "2min", timeout=150)
    location = sp["location"]
    assert Path(location).name.startswith(f"savepoint-{jid[:6]}-")
    metadata = json.loads((Path(location) / "_metadata").read_text())
    assert metadata["runner"] == "spark" and metadata["kind"] == "savepoint"
    assert metadata["spark"]["shuffle_partitions"] == 1 and metadata["spark"]["batch_id"] >= 1
    assert metadata["spark"]["source_offsets"], metadata["spark"]
    listed = _cli_json("savepoint", "list", str(target))["snapshots"]
    assert [s["path"] for s in listed] == [location] and listed[0]["restorable"]
    # the job goes on after the savepoint: its output runs ahead of the savepoint when cancelled
    saved = metadata["spark"]["batch_id"]
    wait_for(lambda: _committed(flinkpy_home, jid) >= saved + 5, timeout=120, interval=0.2, message="four batches after the savepoint")
    res = run_cli("cancel", jid)
    assert res.returncode == 0, res.stderr
    _wait_state(jid, ("CANCELED",), timeout=60)
    wait_for(lambda: not read_record(flinkpy_home, jid)["alive"], timeout=60, interval=0.2, message="the cancelled driver to exit")
    assert not (spark_env / "fail-marker").exists()
    # the savepoint's stop and the cancel cut micro-batches short: quietly, as stops (a py4j
    # traceback and a StackOverflowError in Spark's stream thread were logged before)
    log = (flinkpy_home / "log" / f"spark-{jid}.log").read_text()
    assert not re.search(r"StackOverflowError|ERROR py4j|terminated with error", log), log[-3000:]

    # the restored job reads the rest in one micro-batch (after replaying the batch the savepoint
    # had planned, if any), without the slow work: the part files the cancelled run wrote beyond
    # those hold records of that batch, under batch ids whose restored batches carry no records
    ahead = [p for p in _committed_parts(spark_env / "out") if int(p.name.rsplit("-", 1)[1]) >= saved + 3]
    assert ahead, "the cancelled run should have written batches after the savepoint"
    restore = _job(spark_env, count, 0)

    def edited(name: str, edit: Callable[[dict], None]) -> Path:
        copy = spark_env / name
        shutil.copytree(location, copy)
        doc = json.loads((copy / "_metadata").read_text())
        edit(doc)
        doc.pop("metadata_checksum")  # an older runner sealed no _metadata (an edited sealed one is refused)
        (copy / "_metadata").write_text(json.dumps(doc))
        return copy

    # a rescale goes through the savepoint's engine layout: refused where that layout lacks some state
    assert metadata["moved"] == {"runner": "engine", "refused": []}
    partial = edited("partial-savepoint", lambda doc: doc["moved"]["refused"].append(
        {"operator": "tally", "uid": None, "operator_id": "x", "state": "keyed state", "move": "refused", "reason": "not converted"}))
    rescale = run_cli("run", "--runner", "spark", "-s", str(partial), "-p", "3", *restore, timeout=120)
    assert rescale.returncode == 7, rescale.stderr
    assert "would use 3" in rescale.stderr and "operator 'tally' could not be converted (not converted)" in rescale.stderr
    assert "spark.sql.shuffle.partitions" in rescale.stderr and "-p 1" in rescale.stderr and "Traceback" not in rescale.stderr
    # a savepoint whose keyed reduce kept its keys in other key groups (an older runner's 128)
    assert metadata["spark"]["key_groups"] == 32
    older = edited("older-savepoint", lambda doc: doc["spark"].pop("key_groups"))
    refused = run_cli("run", "--runner", "spark", "-s", str(older), *restore, timeout=120)
    assert refused.returncode == 7 and "128 key groups" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr

    restored = run_cli("run", "--runner", "spark", "-s", location, "--json", *restore, timeout=200)
    assert restored.returncode == 0, restored.stderr[-3000:]
    new = json.loads(restored.stdout)["jobs"][0]
    assert new["jid"] != jid and new["state"] == "FINISHED"
    _check_exact(spark_env / "out", count)
    checkpoints = _cli_json("checkpoint", "list", new["jid"])
    assert checkpoints["latest"]["restored"]["external_path"] == location


@pytest.mark.timeout(240)
def test_an_example_job_prints_its_records_on_an_attached_run(flinkpy_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    res = run_cli("run", "--runner", "spark", str(ROOT / "examples" / "even_odd_sum.py"), "--count", "1000", timeout=200)
    assert res.returncode == 0, res.stderr[-3000:]
    last: dict[str, int] = {}
    for line in res.stdout.splitlines():
        key, _, value = line.strip("()").partition(",")  # PyFlink's form of a typed tuple: (even,42)
        last[key] = int(value)
    assert last == {"even": sum(range(2, 1001, 2)), "odd": sum(range(1, 1001, 2))}
    jobs = _cli_json("list", "-a")["jobs"]
    assert [(j["name"], j["state"], j["runner"]) for j in jobs] == [("even_odd_sum", "FINISHED", "spark")]


def test_every_batch_writer_describes_itself_for_the_plan() -> None:
    """`flinkpy info --runner spark` and the driver describe each sink's writer (a writer without
    a describe of its own has the base class's)."""
    from flinkpy.connectors.print_sink import DiscardingSink
    from flinkpy.spark import sinks

    assert sinks.writer_for(DiscardingSink(), "q/sink", "discard").describe() == "DiscardWriter"
    for cls in [c for c in vars(sinks).values() if isinstance(c, type) and issubclass(c, sinks.BatchWriter)]:
        assert callable(getattr(cls, "describe", None)), cls
