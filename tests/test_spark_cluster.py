"""flinkpy jobs on a real Spark standalone cluster: `flinkpy spark start/status/stop`, code shipped
to executors that do not share the driver's working directory, and an executor SIGKILLed mid-run.

One cluster for the module (fixture ``spark_cluster``, tests/spark_standalone.py) — a master and
two workers of one core and 1 GiB each, separate JVMs started by `flinkpy spark start` from
PySpark's own Spark distribution — stopped at teardown with a check that no master, worker or
executor process is left. Jobs go through the CLI as a user's would (`flinkpy run --runner
spark --spark-master spark://...`). Expected results are computed here from the inputs; the word
count and a job with every operator kind the runner translates (timers, event-time windows, a side
output read downstream, fan-out to five sinks, keyed after keyed: one query, so one application
start) are also run on flinkpy's engine and compared sink by sink.

The executors run the virtualenv's Python (PYSPARK_PYTHON), where flinkpy is installed in
editable mode: so the word count records *where* its executors imported flinkpy, its helper
module and its add_python_file module from, and the test requires the shipped archives.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import random
import socket
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from conftest import EXAMPLES, ROOT, wait_for
from flinkpy.spark.faults import owner, python_workers
from kafka_servers import kafka  # noqa: F401 - the module's noida-db server
from spark_standalone import SparkCluster
from test_spark_kafka import KAFKA_JOB, running_sums, write_lines

pytest.importorskip("pyspark", reason="PySpark is not installed")


def test_status_shows_the_master_and_two_alive_workers_and_a_second_start_is_refused(spark_cluster: SparkCluster, tmp_path: Path) -> None:
    doc = spark_cluster.json("spark", "status")
    assert doc["master_url"] == spark_cluster.master_url and doc["status"] == "ALIVE"
    assert doc["alive_workers"] == 2 and [w["state"] for w in doc["workers"]] == ["ALIVE", "ALIVE"]
    assert all(w["alive"] and w["cores"] == 1 and w["memory"] == "1g" and w["worker_id"] for w in doc["workers"])
    assert doc["master"]["alive"] and [doc["master"]["pid"], *[w["pid"] for w in doc["workers"]]] == spark_cluster.pids
    with socket.create_connection(("127.0.0.1", int(spark_cluster.master_url.rsplit(":", 1)[1])), timeout=5):
        pass
    again = spark_cluster.cli("spark", "start", "--workers", "1")
    assert again.returncode == 9, again.stderr
    assert spark_cluster.master_url in again.stderr and "flinkpy spark stop" in again.stderr and "Traceback" not in again.stderr
    assert spark_cluster.cli("spark", "status").returncode == 0
    taken = spark_cluster.cli("spark", "start", "--port", spark_cluster.master_url.rsplit(":", 1)[1], env={"FLINKPY_HOME": str(tmp_path)})
    assert taken.returncode == 9 and "already in use" in taken.stderr, taken.stderr
    nothing = spark_cluster.cli("spark", "status", "--json", env={"FLINKPY_HOME": str(tmp_path)})
    assert nothing.returncode == 3 and json.loads(nothing.stdout)["error"]["exit_code"] == 3
    assert spark_cluster.cli("spark", "stop", env={"FLINKPY_HOME": str(tmp_path)}).returncode == 0  # nothing to stop is fine
    no_java = spark_cluster.cli("spark", "start", env={"FLINKPY_HOME": str(tmp_path), "JAVA_HOME": "", "PATH": str(tmp_path)})
    assert no_java.returncode == 8 and "java was not found" in no_java.stderr and "Traceback" not in no_java.stderr, no_java.stderr


# --------------------------------------------------------------------------- code shipping

JOB = '''\
"""Word count whose functions come from a module beside the job file and from add_python_file."""

import argparse
import sys

from flinkpy.common import Encoder
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.file_system import FileSink

import wc_helpers


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--lib", required=True)
    parser.add_argument("--out", required=True)
    a = parser.parse_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.add_python_file(a.lib)
    import tagger

    lines = open(a.input).read().splitlines()

    def counted(word):
        w, one, tagger_file = tagger.tag(word)
        flinkpy_file, helpers_file = wc_helpers.origin()
        return (w, one, flinkpy_file, helpers_file, tagger_file)

    (env.from_collection(lines).flat_map(wc_helpers.words).map(counted)
     .key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1], b[2], b[3], b[4]))
     .sink_to(FileSink.for_row_format(a.out, Encoder.simple_string_encoder()).build()))
    env.execute("shipped word count")


if __name__ == "__main__":
    main(sys.argv[1:])
'''

HELPERS = '''\
"""Beside the job file: the executors import it from what the driver shipped."""


def words(line):
    return [w.strip(".,;:!?").lower() for w in line.split() if w.strip(".,;:!?")]


def origin():
    import flinkpy

    return flinkpy.__file__, __file__
'''

TAGGER = '''\
"""In another directory, added with env.add_python_file."""


def tag(word):
    return word, 1, __file__
'''

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def _records(out: Path) -> list[tuple]:
    """Every committed record of a FileSink directory (hidden files are in progress)."""
    files = [p for p in out.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.relative_to(out).parts)]
    return [ast.literal_eval(line) for p in files for line in p.read_text().splitlines() if line]


@pytest.mark.timeout(300)
def test_a_job_importing_modules_beside_it_runs_from_another_directory_as_on_the_engine(spark_cluster: SparkCluster, tmp_path: Path) -> None:
    seed = random.randrange(2**31)
    print(f"seed {seed}")
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) + rng.choice(["", ",", "."]) for _ in range(rng.randint(1, 9))) for _ in range(60)]
    expected = Counter(w.strip(".,").lower() for line in lines for w in line.split())
    (tmp_path / "job").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "job" / "wc_job.py").write_text(JOB)
    (tmp_path / "job" / "wc_helpers.py").write_text(HELPERS)
    (tmp_path / "lib" / "tagger.py").write_text(TAGGER)
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n")
    args = ["../job/wc_job.py", "--input", "../input.txt", "--lib", "../lib/tagger.py"]

    # the driver starts in a directory that holds neither the job nor its modules
    spark = spark_cluster.cli("run", "--runner", "spark", "--spark-master", spark_cluster.master_url, *args, "--out", str(tmp_path / "spark-out"),
                 cwd=tmp_path / "elsewhere", timeout=280)
    assert spark.returncode == 0, spark.stderr[-3000:]
    engine = spark_cluster.cli("run", *args, "--out", str(tmp_path / "engine-out"), cwd=tmp_path / "elsewhere", timeout=120)
    assert engine.returncode == 0, engine.stderr[-3000:]

    on_spark, on_engine = _records(tmp_path / "spark-out"), _records(tmp_path / "engine-out")
    # every running count exactly once, the last one the word's count: on both runners
    running = Counter((w, n) for w, c in expected.items() for n in range(1, c + 1))
    assert Counter((r[0], r[1]) for r in on_spark) == running
    assert Counter((r[0], r[1]) for r in on_engine) == running

    # the executors imported flinkpy and the job's modules from what was shipped, not from this
    # machine's installation or the job's directory
    work = spark_cluster.home / "spark-standalone" / "work"
    for r in on_spark:
        assert r[2].endswith("flinkpy.zip/flinkpy/__init__.py"), r
        assert r[3].endswith("job-wc_job.zip/wc_helpers.py"), r
        assert Path(r[4]).name == "tagger.py" and Path(r[4]).resolve().is_relative_to(work.resolve()), r
    assert {r[2] for r in on_engine} == {str(ROOT / "flinkpy" / "__init__.py")}
    # flinkpy's engine ships them too: its tasks import the archive their TaskManager unpacked
    for r in on_engine:
        assert "/taskmanagers/tm-" in r[3] and r[3].endswith("/job/wc_helpers.py"), r
        assert "/taskmanagers/tm-" in r[4] and r[4].endswith("/files/0/tagger.py"), r
    jid = next(p.stem for p in (spark_cluster.home / "spark-jobs").glob("*[0-9a-f].json")
               if json.loads(p.read_text()).get("name") == "shipped word count")
    record = json.loads((spark_cluster.home / "spark-jobs" / f"{jid}.json").read_text())
    assert record["application_id"].startswith("app-") and len(record["executors"]) == 2
    assert all(e["flinkpy"].endswith("flinkpy.zip/flinkpy/__init__.py") and not e["missing"] for e in record["executors"])
    assert not (spark_cluster.home / "spark-jobs" / f"{jid}.pyfiles").exists()  # the driver removed what it shipped


@pytest.mark.timeout(200)
def test_executors_lacking_a_module_refuse_the_job_before_the_query_starts(spark_cluster: SparkCluster, tmp_path: Path) -> None:
    # the executors' Python (PYSPARK_PYTHON) is the virtualenv's, with pandas hidden from it
    blocker = tmp_path / "blocker"
    (blocker / "pandas").mkdir(parents=True)
    (blocker / "pandas" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pandas'\", name='pandas')\n")
    python = tmp_path / "python-without-pandas"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={blocker} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    res = spark_cluster.cli("run", "--runner", "spark", "--spark-master", spark_cluster.master_url, str(EXAMPLES / "word_count.py"),
               env={"PYSPARK_PYTHON": str(python)}, timeout=180)
    assert res.returncode == 8, res.stderr[-3000:]
    error = [line for line in res.stderr.splitlines() if line.startswith("flinkpy: error:")]
    assert len(error) == 1 and "Traceback" not in res.stderr
    assert f"the Spark executors of {spark_cluster.master_url} lack pandas" in error[0] and "pip install pandas" in error[0], error


def test_a_master_that_does_not_listen_is_refused_at_once(spark_cluster: SparkCluster) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    res = spark_cluster.cli("run", "--runner", "spark", "--spark-master", f"spark://127.0.0.1:{port}", str(EXAMPLES / "word_count.py"), timeout=60)
    assert res.returncode == 3, res.stderr[-3000:]
    assert f"no Spark master answers at spark://127.0.0.1:{port}" in res.stderr and "flinkpy spark start" in res.stderr
    assert "Traceback" not in res.stderr and time.monotonic() - started < 30


# --------------------------------------------------------------------------- an executor lost


@pytest.mark.timeout(300)
def test_the_verification_job_is_exact_after_an_executor_is_killed_mid_run(spark_cluster: SparkCluster, tmp_path: Path) -> None:
    keys, per_key, per_batch = 4, 125, 100  # five micro-batches
    out = tmp_path / "verify-out"
    doc = spark_cluster.json("run", "-d", "--runner", "spark", "--spark-master", spark_cluster.master_url,
                "-D", f"execution.spark.max-records-per-batch={per_batch}",
                "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.delay=100ms",
                str(EXAMPLES / "verification_job.py"), "--keys", str(keys), "--per-key", str(per_key), "--out", str(out), timeout=180)
    jid = doc["jobs"][0]["jid"]
    total = -(-keys * per_key // per_batch)

    def committed() -> int:
        return len(list(out.glob("part-*.jsonl"))) if out.is_dir() else 0

    wait_for(lambda: committed() >= 1, timeout=180, interval=0.2, message="a first committed micro-batch")
    # kill-task's candidates on a cluster: the Python workers under the application's executors
    record = json.loads((spark_cluster.home / "spark-jobs" / f"{jid}.json").read_text())
    under = wait_for(lambda: {owner(pid) for pid in python_workers(int(record["pid"]), record["application_id"])} - {"driver"},
                     timeout=30, message="Python workers under the executors")
    assert under <= {"executor 0", "executor 1"}, under
    seed = random.randrange(2**31)
    print(f"seed {seed}")
    killed = spark_cluster.json("fault", "kill-executor", jid, "--seed", str(seed))
    at_kill = committed()
    assert at_kill < total, "the job ended before the executor was killed"
    target = killed["target"]
    assert killed["kind"] == "kill-executor" and target["what"] == "Spark executor" and target["executor-id"] in ("0", "1")
    assert target["application-id"].startswith("app-")
    assert wait_for(lambda: not psutil.pid_exists(target["pid"]) or psutil.Process(target["pid"]).status() == psutil.STATUS_ZOMBIE,
                    timeout=10, message="the executor JVM to be gone")

    final = wait_for(lambda: next((j for j in spark_cluster.json("list", "-a")["jobs"] if j["jid"] == jid and j["state"] != "RUNNING"), None),
                     timeout=240, interval=0.5, message=f"job {jid} to end")
    assert final["state"] == "FINISHED"
    verify = spark_cluster.cli("verify", str(out), "--keys", str(keys), "--per-key", str(per_key), "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    report = json.loads(verify.stdout)
    assert report["ok"] and report["received"] == keys * per_key and report["lost"] == report["duplicated"] == 0
    history = spark_cluster.json("fault", "history", jid)["faults"]
    assert [(f["kind"], f["target"]["pid"], f["state-before"]) for f in history] == [("kill-executor", target["pid"], "RUNNING")]
    print(f"executor {target['executor-id']} killed after {at_kill}/{total} batches; restarts {final['restarts']}")

    # chaos takes a Spark job with the kinds that reach it, and only those
    refused = spark_cluster.cli("fault", "chaos", jid, "--faults", "kill-task,raise", "--duration", "1s", "--every", "1s")
    assert refused.returncode == 2 and "raise cannot be injected" in refused.stderr and "kill-executor" in refused.stderr, refused.stderr
    ended = spark_cluster.json("fault", "chaos", jid, "--faults", "kill-executor", "--duration", "1s", "--every", "1s", "--seed", "1")
    assert ended["state"] == "FINISHED" and not ended["injected"]


# --------------------------------------------------------------------------- every operator at once

COMPOSITE_JOB = '''\
"""One query for every kind of operator the Spark runner translates, each ending in its own sink:
a process function with a side output read downstream, event-time windows read by three
consumers (fan-out), a keyed process function with event-time timers and a keyed reduce after
the windows (keyed after keyed), and a keyed running sum of the side output."""

import sys

from flinkpy.connectors.collect import CollectSink
from flinkpy.common import Encoder, Time, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, OutputTag, ProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.file_system import FileSink
from flinkpy.datastream.state import ValueStateDescriptor
from flinkpy.datastream.window import TumblingEventTimeWindows

BIG = OutputTag("big")


def events():
    return [("abc"[i % 3], i % 7, 40 * i + i % 3) for i in range(300)]


class EveryRecord:
    """Punctuated: a watermark after every record, so that the engine's results are one."""

    def __init__(self):
        self.highest = None

    def on_event(self, event, timestamp, output):
        self.highest = timestamp if self.highest is None else max(self.highest, timestamp)
        output.emit_watermark(self.highest - 1)

    def on_periodic_emit(self, output):
        pass


class Big(ProcessFunction):
    def process_element(self, value, ctx):
        if value[1] >= 5:
            ctx.output(BIG, (value[0], value[1]))
        yield value


class CountUntilNext(KeyedProcessFunction):
    """Counts a key's window results; a timer 1 s after each reports the count at that time."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", None))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 1000)

    def on_timer(self, timestamp, ctx):
        yield ("count", ctx.get_current_key(), timestamp, self.count.value())


def main(windows_out, counts_out, totals_out, big_out, big_sums_out):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    strategy = WatermarkStrategy.for_generator(EveryRecord).with_timestamp_assigner(lambda e, _: e[2])
    split = env.from_collection(events()).assign_timestamps_and_watermarks(strategy).process(Big()).name("big ones aside")
    seconds = (split.key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(Time.seconds(1)))
               .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))).name("per second"))
    seconds.sink_to(CollectSink(windows_out))
    seconds.key_by(lambda e: e[0]).process(CountUntilNext()).name("count until next").sink_to(CollectSink(counts_out))
    seconds.map(lambda e: (e[0], e[1])).key_by(lambda t: t[0]).sum(1).name("running total").sink_to(CollectSink(totals_out))
    big = split.get_side_output(BIG)
    big.sink_to(FileSink.for_row_format(big_out, Encoder.simple_string_encoder()).build())
    big.key_by(lambda t: t[0]).sum(1).name("big sums").sink_to(CollectSink(big_sums_out))
    env.execute("every operator")


if __name__ == "__main__":
    main(*sys.argv[1:])
'''

COMPOSITE_SINKS = ("windows", "counts", "totals", "big", "big-sums")


def _collected(directory: Path) -> list:
    """A CollectSink directory's records: Spark's batch files in batch order, or the engine's part files."""
    from flinkpy.spark.sinks import read_collected

    if any(p.name.startswith("spark-batch-") for p in directory.iterdir()):
        return read_collected(str(directory))
    out: list = []
    for part in sorted(directory.glob("part-*")):
        with open(part, "rb") as f:
            while True:
                try:
                    out.extend(pickle.load(f))
                except EOFError:
                    break
    return out


def _composite_outputs(base: Path) -> dict[str, list]:
    return {name: (_records(base / name) if name == "big" else _collected(base / name)) for name in COMPOSITE_SINKS}


@pytest.mark.timeout(400)
def test_one_query_with_timers_windows_side_outputs_fan_out_and_keyed_after_keyed_equals_the_engine(
        spark_cluster: SparkCluster, tmp_path: Path) -> None:
    """Every translated operator kind in one bounded query on the cluster (one application start);
    each of its five sinks equals the engine's and what is computed here from the input."""
    job = tmp_path / "every_operator.py"
    job.write_text(COMPOSITE_JOB)
    outs = {}
    for runner in ("engine", "spark"):
        for name in COMPOSITE_SINKS:
            (tmp_path / runner / name).mkdir(parents=True)
        outs[runner] = [str(tmp_path / runner / name) for name in COMPOSITE_SINKS]
    # the job is what it claims: two keyed depths of two operators each, five sinks in one
    # foreachBatch, a side output read by two operators
    info = spark_cluster.cli("info", "--json", "--runner", "spark", str(job), *outs["spark"])
    assert info.returncode == 0, info.stderr[-3000:]
    plan = json.loads(info.stdout)["plan"]
    assert [[op["kind"] for op in s["operators"]] for s in plan["stages"] if s["kind"] == "keyed"] == \
        [["window", "keyed_reduce"], ["keyed_process", "keyed_reduce"]]
    assert plan["stages"][-1]["kind"] == "sink" and len(plan["stages"][-1]["operators"]) == 5
    assert [r["side_output"] for r in plan["routes"]].count("big") == 2
    started = time.monotonic()
    # two micro-batches of input (the second one ends it), then one without data fires the last timers
    spark = spark_cluster.cli("run", "--runner", "spark", "--spark-master", spark_cluster.master_url,
                              "-D", "execution.spark.max-records-per-batch=160", str(job), *outs["spark"], timeout=330)
    assert spark.returncode == 0, spark.stderr[-3000:]
    on_cluster = time.monotonic() - started
    engine = spark_cluster.cli("run", str(job), *outs["engine"], timeout=120)
    assert engine.returncode == 0, engine.stderr[-3000:]
    on_spark, on_engine = _composite_outputs(tmp_path / "spark"), _composite_outputs(tmp_path / "engine")
    print(f"on the cluster in {on_cluster:.1f}s; records per sink: {({k: len(v) for k, v in on_spark.items()})}")

    for name in COMPOSITE_SINKS:
        assert len(on_engine[name]) > 5, f"{name}: the engine wrote too little to tell anything"
        assert Counter(on_spark[name]) == Counter(on_engine[name]), name
    # keyed outputs come per key in the engine's order
    for name in ("totals", "big-sums"):
        for key in "abc":
            assert [r for r in on_spark[name] if r[0] == key] == [r for r in on_engine[name] if r[0] == key], (name, key)

    # and independently of both runners
    events = [("abc"[i % 3], i % 7, 40 * i + i % 3) for i in range(300)]
    per_second: dict[tuple[str, int], tuple[int, int]] = {}
    for k, v, ts in events:
        total, latest = per_second.get((k, ts // 1000), (0, ts))
        per_second[(k, ts // 1000)] = (total + v, max(latest, ts))
    assert Counter(on_spark["windows"]) == Counter((k, v, ts) for (k, _), (v, ts) in per_second.items())
    running: Counter = Counter()
    totals: list = []
    for (k, _), (v, _) in sorted(per_second.items(), key=lambda kv: kv[0][1]):
        running[k] += v
        totals.append((k, running[k]))
    assert Counter(on_spark["totals"]) == Counter(totals)
    big = [(k, v) for k, v, _ in events if v >= 5]
    assert Counter(on_spark["big"]) == Counter(big)
    big_running: Counter = Counter()
    big_sums = []
    for k, v in big:
        big_running[k] += v
        big_sums.append((k, big_running[k]))
    assert Counter(on_spark["big-sums"]) == Counter(big_sums)
    # a timer 1 s after a window result fires at the key's next window result and after it (the
    # count includes that one), the last ones at the end of event time
    seconds: dict[str, set[int]] = {}
    for k, s in per_second:
        seconds.setdefault(k, set()).add(s)
    counts = [("count", k, 1000 * s + 1999, sum(1 for t in ss if t <= s + 1)) for k, ss in seconds.items() for s in ss]
    assert Counter(on_spark["counts"]) == Counter(counts)


# --------------------------------------------------------------------------- Kafka, unbounded


@pytest.mark.timeout(360)
@pytest.mark.skipif(os.environ.get("FLINKPY_SPARK_SOAK") != "long",
                    reason="on demand (FLINKPY_SPARK_SOAK=long), about 100 s: the suite checks the unbounded KafkaSource's batches "
                           "and their replay against Kafka, and a Kafka job exact across a killed Python worker (tests/test_spark_kafka.py)")
def test_an_unbounded_kafka_job_is_exact_after_an_executor_is_killed(spark_cluster: SparkCluster, kafka, tmp_path: Path) -> None:  # noqa: F811
    """The Kafka job of test_spark_kafka.py without set_bounded: its micro-batches read Kafka
    offset ranges on the executors. An executor JVM is SIGKILLed while the first batch runs (on a
    loaded machine it takes tens of seconds: Python workers start, the state store opens), more
    input comes after, and a read_committed consumer finds every running sum
    exactly once."""
    count, half = 160, 80  # each half one micro-batch: the four keys' lines land in two or more of the four partitions
    source, sink = kafka.new_topic(partitions=4, prefix="spark-in"), kafka.new_topic(partitions=1, prefix="spark-out")
    write_lines(kafka, source, 1, half)
    job = tmp_path / "kafka_sums.py"
    job.write_text(KAFKA_JOB.replace(".set_bounded(KafkaOffsetsInitializer.latest())", ""))
    doc = spark_cluster.json("run", "-d", "--runner", "spark", "--spark-master", spark_cluster.master_url, "-p", "2",
                             "-D", "execution.spark.max-records-per-batch=40", "-D", "restart-strategy.type=fixed-delay",
                             "-D", "restart-strategy.fixed-delay.delay=100ms",
                             str(job), kafka.bootstrap, source, sink, "50", timeout=180)
    jid = doc["jobs"][0]["jid"]
    location = Path(json.loads((spark_cluster.home / "spark-jobs" / f"{jid}.json").read_text())["checkpoint_location"])
    # the first micro-batch planned (its offsets logged) and not committed: its tasks are on the executors
    wait_for(lambda: (location / "offsets" / "0").exists(), timeout=200, interval=0.1, message="the first micro-batch planned")
    seed = random.randrange(2**31)
    print(f"seed {seed}")
    killed = spark_cluster.json("fault", "kill-executor", jid, "--seed", str(seed))
    assert not (location / "commits" / "0").exists(), "the first micro-batch committed before the executor was killed"
    assert killed["target"]["what"] == "Spark executor"
    executor = killed["target"]["executor-id"]
    write_lines(kafka, source, half + 1, count)
    expected = running_sums(count)
    wait_for(lambda: len(kafka.read(sink, expect=count, timeout=2)) >= count, timeout=240, interval=0.5,
             message=f"{count} committed running sums")
    final = spark_cluster.json("job", "show", jid)
    assert final["state"] == "RUNNING", final  # unbounded: it reads on
    spark_cluster.json("cancel", jid)
    got = Counter(m.value().decode() for m in kafka.read(sink, timeout=30))
    assert got == expected, f"duplicates {dict(got - expected)}, missing {dict(expected - got)}"
    assert [f["kind"] for f in spark_cluster.json("fault", "history", jid)["faults"]] == ["kill-executor"]
    print(f"executor {executor} killed while reading; restarts {final['restarts']}")
