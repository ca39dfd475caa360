"""W1 and W2 three ways: ``python -m flinkpy.benchmarks --only spark``.

In one run, on the same input and one warm ``local[2]`` Spark session:

- **engine**: flinkpy's engine at parallelism 2 (an embedded cluster with 2 slots), running
  flinkpy.benchmarks.workloads' ``job_w1`` / ``job_w2``;
- **flinkpy on Spark**: the same job definitions through the Spark runner
  (``flinkpy.spark.plan.translate`` then ``SparkPlan.start``: the runner's defaults, checkpoint
  location on, the bounded query ending by itself);
- **hand-written**: the structured streaming query a PySpark user writes for the same job, with
  a checkpoint location, output mode ``update``, ``trigger(availableNow=True)`` (it ends by itself
  once the input is read) and ``foreachBatch``:

  - W1: ``spark.readStream.text(dir)`` -> a plain Python UDF (``F.udf``, returning
    ``array<string>``) calling the job's own ``split`` -> ``explode`` -> ``groupBy("word").count()``.
    A plain UDF because that is what a user with a Python ``split`` writes first; Spark's native
    ``F.split`` would take Python out of the query altogether, which is not the same job;
  - W2: the ints 1..N written as text lines into two files, ``readStream.text(dir)`` ->
    ``cast("long")`` -> ``groupBy(n % 2).agg(sum(n))``: native expressions, since a PySpark user
    writes parity and addition as Column expressions, not as Python functions.

Both Spark queries share the session (``spark.sql.shuffle.partitions`` = 2) and Spark's default
state store (what a user gets; the runner picks RocksDB only for a plan that needs
``transformWithStateInPandas``, which W1 and W2 do not). The session's start and a warm-up (one
small query each way, so that neither side pays for the JVM's first streaming query or the first
Python workers) are reported apart and not counted.

What "the same job" means. W1 and W2 are *running* aggregates. On flinkpy (as on Flink), a keyed
``reduce``/``sum`` emits the updated value for every record: W1 delivers 2 million (quick: 200 k)
``(word, count)`` updates, W2 5 million (quick: 500 k) running sums. The Spark idiom for a
running aggregate is ``groupBy().count()`` / ``sum()`` in update mode, which emits the changed
keys once per micro-batch: W1 about 10 k rows, W2 two. Spark has no per-record running aggregate
short of a stateful processor (``transformWithState``), which is what the runner itself uses. So
each side runs its own idiom of the same job — same input, same final value per key, exactly
once — and the comparison is "what a user gets by moving the flinkpy job to Spark" against "what
the user would have written in PySpark". The flinkpy job's output is heavier (every update
reaches the sink), which the figures include; the report gives both sides' output counts.

Sinks, made comparable: both bring every output record to the driver as a Python object and
hand it to :class:`FirstResult`'s ``invoke``. flinkpy's sink is the runner's ``foreachBatch``
(:class:`flinkpy.spark.sinks.SinkDriver`: the batch as Arrow on the driver, ordered, unpickled,
``invoke`` per record); the hand-written sink is ``for row in df.collect(): invoke(row)``.

Per side and workload (median of ``--runs``):

- ``rate``: records in / wall time from ``start()`` (``env.execute`` on the engine) until the
  query has stopped (the engine's job has finished);
- ``first_result_s``: from start to the first record at the sink;
- for Spark queries: micro-batches, output records and the time Spark's progress reports per
  phase (``durationMs``: latestOffset, getBatch, queryPlanning, addBatch, walCommit,
  commitOffsets...), summed over the batches — where the fixed cost goes;
- for the engine also ``net_rate``, on the job's net runtime (RUNNING to FINISHED).

Ratios: flinkpy on Spark / hand-written (rates, and first-result times), and flinkpy on Spark /
engine. This is a measurement tool, not a test: it asserts nothing.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.benchmarks.spark_report import counted, load_text, median_of, rate_text, ratio, ratio_text, seconds_text
from flinkpy.benchmarks.workloads import job_w1, job_w2, run_job, split

PARALLELISM = 2
MASTER = "local[2]"
#: the state store a query gets when nobody chooses one
DEFAULT_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
STATE_STORE_KEY = "spark.sql.streaming.stateStore.providerClass"


class FirstResult:
    """A SinkFunction that records when its first record arrived (one file per sink instance,
    written once; later records cost one attribute test) and counts what it received."""

    def __init__(self, path: str):
        self.path = path
        self.seen = False

    def invoke(self, value: Any, context: Any) -> None:
        if self.seen:
            return
        self.seen = True
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:  # another subtask was first
            return
        with os.fdopen(fd, "w") as f:
            f.write(repr(time.time()))


def _first_result(path: str, started: float) -> float | None:
    try:
        return float(Path(path).read_text()) - started
    except (FileNotFoundError, ValueError):
        return None


# -- inputs ------------------------------------------------------------------------------------


def write_inputs(work: str, paths: list[str], w2_count: int) -> dict[str, str]:
    """Directories for the hand-written queries: W1's files as they are, W2's ints as lines in
    two files (two input partitions, as flinkpy's two source readers)."""
    w1 = Path(work) / "w1-input"
    w1.mkdir()
    for p in paths:
        shutil.copyfile(p, w1 / Path(p).name)
    w2 = Path(work) / "w2-input"
    w2.mkdir()
    half = w2_count // 2
    for i, (lo, hi) in enumerate(((1, half), (half + 1, w2_count))):
        (w2 / f"ints-{i}.txt").write_text("".join(f"{n}\n" for n in range(lo, hi + 1)))
    return {"w1": str(w1), "w2": str(w2)}


# -- the hand-written queries ---------------------------------------------------------------------


def hand_w1(spark: Any, directory: str) -> Any:
    """W1 as a PySpark user writes it: a Python UDF splits, Spark counts per word."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, StringType

    split_udf = F.udf(split, ArrayType(StringType()))
    lines = spark.readStream.text(directory)
    return lines.select(F.explode(split_udf("value")).alias("word")).groupBy("word").count()


def hand_w2(spark: Any, directory: str) -> Any:
    """W2 as a PySpark user writes it: running sums per parity, in Column expressions."""
    from pyspark.sql import functions as F

    numbers = spark.readStream.text(directory).select(F.col("value").cast("long").alias("n"))
    return numbers.groupBy((F.col("n") % 2).alias("parity")).agg(F.sum("n").alias("sum"))


# -- one run each way ------------------------------------------------------------------------------


def _builders(paths: list[str], w2_count: int) -> dict[str, Callable[[Any, Callable[[Any], Any]], None]]:
    return {
        "w1": lambda env, sink: job_w1(env, paths, sink),
        "w2": lambda env, sink: job_w2(env, w2_count, sink),
    }


def run_flinkpy(address: str, token: str, build: Callable[[Any, Callable[[Any], Any]], None], name: str, work: str) -> dict[str, Any]:
    """One run on flinkpy's engine at parallelism 2: wall and net seconds, time to first result."""
    marker = f"{work}/{name}.first"
    started = time.time()
    net = run_job(address, token, lambda env: build(env, lambda s: s.add_sink(FirstResult(marker))), PARALLELISM, name)
    wall = time.time() - started
    return {"wall_s": wall, "net_s": net, "first_result_s": _first_result(marker, started)}


def progress_summary(query: Any) -> dict[str, Any]:
    """Micro-batches and the milliseconds Spark's progress reports per phase, summed."""
    phases: dict[str, int] = {}
    batches = 0
    rows_in = 0
    for p in query.recentProgress:
        batches += 1
        rows_in += int(p.get("numInputRows") or 0)
        for phase, ms in (p.get("durationMs") or {}).items():
            phases[phase] = phases.get(phase, 0) + int(ms)
    return {"batches": batches, "input_rows": rows_in, "phases_ms": phases}


def run_spark(spark: Any, build: Callable[[Any, Callable[[Any], Any]], None], name: str, work: str) -> dict[str, Any]:
    """One run of the flinkpy job on the Spark runner: translated, started, waited for."""
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.spark.plan import translate

    marker = f"{work}/{name}.first"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(PARALLELISM)
    build(env, lambda s: s.add_sink(FirstResult(marker)))
    plan = translate(env, config={}, job_name=name)
    started = time.time()
    query = plan.start(spark, checkpoint_location=f"{work}/{name}.checkpoint", trigger_interval_ms=None, query_name=name)
    query.awaitTermination()
    wall = time.time() - started
    if query.exception() is not None:
        raise RuntimeError(f"Spark query {name} failed: {query.exception()}")
    return {"wall_s": wall, "first_result_s": _first_result(marker, started), "output": plan.sink_driver.records_written, **progress_summary(query)}


def run_hand(spark: Any, frame: Callable[[Any, str], Any], directory: str, name: str, work: str) -> dict[str, Any]:
    """One run of a hand-written query: update mode, checkpointed, every row to the driver."""
    marker = f"{work}/{name}.first"
    sink = FirstResult(marker)
    output = [0]

    def write(df: Any, batch_id: int) -> None:
        rows = df.collect()
        for row in rows:
            sink.invoke(row, None)
        output[0] += len(rows)

    spark.conf.set(STATE_STORE_KEY, DEFAULT_STATE_STORE)  # the runner may have set RocksDB on the session
    started = time.time()  # building the query counts, as the runner's does in SparkPlan.start
    df = frame(spark, directory)
    query = (df.writeStream.outputMode("update").foreachBatch(write).option("checkpointLocation", f"{work}/{name}.checkpoint")
             .queryName(name).trigger(availableNow=True).start())
    query.awaitTermination()
    wall = time.time() - started
    if query.exception() is not None:
        raise RuntimeError(f"Spark query {name} failed: {query.exception()}")
    return {"wall_s": wall, "first_result_s": _first_result(marker, started), "output": output[0], **progress_summary(query)}


def warm_up(spark: Any, work: str, paths: list[str], log: Callable[[str], None]) -> float:
    """One small query each way (untimed): the JVM's first streaming query and the first Python
    workers are paid here, not by whichever side happens to run first."""
    started = time.time()
    small = Path(work) / "warm-input"
    small.mkdir()
    with open(paths[0]) as f:
        (small / "lines.txt").write_text("".join(line for _, line in zip(range(200), f)))
    log("spark: warming up (one small query each way) ...")
    run_spark(spark, lambda env, sink: job_w1(env, [str(small / "lines.txt")], sink), "warm_flinkpy", work)
    run_hand(spark, hand_w1, str(small), "warm_hand", work)
    return time.time() - started


def compare(address: str, token: str, paths: list[str], n_words: int, w2_count: int, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    """W1 and W2 on the engine, flinkpy on Spark and hand-written PySpark, ``runs`` times each;
    Spark's two sides alternate which goes first run by run."""
    from flinkpy.spark.analysis import spark_session

    log(f"spark: starting a {MASTER} session ...")
    started = time.time()
    spark = spark_session(MASTER, {"spark.sql.shuffle.partitions": str(PARALLELISM)}, app_name="flinkpy benchmark")
    result: dict[str, Any] = {"master": MASTER, "parallelism": PARALLELISM, "session_start_s": time.time() - started, "workloads": {},
                              "load_average": {"start": os.getloadavg()}}
    records = {"w1": n_words, "w2": w2_count}
    hand = {"w1": hand_w1, "w2": hand_w2}
    try:
        with tempfile.TemporaryDirectory(prefix="flinkpy-bench-spark-") as work:
            inputs = write_inputs(work, paths, w2_count)
            result["warm_up_s"] = warm_up(spark, work, paths, log)
            for name, build in _builders(paths, w2_count).items():
                engine_runs: list[dict[str, Any]] = []
                spark_runs: list[dict[str, Any]] = []
                hand_runs: list[dict[str, Any]] = []
                for i in range(runs):
                    log(f"spark: {name} run {i + 1}/{runs} on flinkpy's engine p={PARALLELISM} ...")
                    engine_runs.append(run_flinkpy(address, token, build, f"bench_{name}_engine_{i}", work))
                    steps = [
                        (f"on Spark {MASTER} through flinkpy's runner", lambda: spark_runs.append(run_spark(spark, build, f"bench_{name}_spark_{i}", work))),
                        (f"as hand-written PySpark on {MASTER}", lambda: hand_runs.append(run_hand(spark, hand[name], inputs[name], f"bench_{name}_hand_{i}", work))),
                    ]
                    for what, step in steps if i % 2 == 0 else steps[::-1]:
                        log(f"spark: {name} run {i + 1}/{runs} {what} ...")
                        step()
                result["workloads"][name] = _summary(records[name], engine_runs, spark_runs, hand_runs)
    finally:
        spark.stop()
    result["load_average"]["end"] = os.getloadavg()
    return result


def _spark_side(n: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    wall = median_of(runs, "wall_s")
    phases = sorted({k for r in runs for k in r["phases_ms"]})
    return {
        "rate": n / wall if wall else None,
        "first_result_s": median_of(runs, "first_result_s"),
        "output": median_of(runs, "output"),
        "batches": median_of(runs, "batches"),
        "phases_ms": {k: statistics.median(r["phases_ms"].get(k, 0) for r in runs) for k in phases},
        "runs": runs,
    }


def _summary(n: int, engine_runs: list[dict[str, Any]], spark_runs: list[dict[str, Any]], hand_runs: list[dict[str, Any]]) -> dict[str, Any]:
    ew, net = median_of(engine_runs, "wall_s"), median_of(engine_runs, "net_s")
    engine = {"rate": n / ew if ew else None, "net_rate": n / net if net else None,
              "first_result_s": median_of(engine_runs, "first_result_s"), "runs": engine_runs}
    on_spark, by_hand = _spark_side(n, spark_runs), _spark_side(n, hand_runs)
    return {
        "records": n,
        "engine": engine,
        "flinkpy_on_spark": on_spark,
        "hand_written": by_hand,
        "rate_ratio": ratio(on_spark["rate"], by_hand["rate"]),  # flinkpy on Spark / hand-written
        "first_result_ratio": ratio(on_spark["first_result_s"], by_hand["first_result_s"]),  # time: flinkpy on Spark / hand-written
        "rate_vs_engine": ratio(on_spark["rate"], engine["rate"]),
    }


def report(result: dict[str, Any]) -> str:
    """The comparison as text lines."""
    rate, secs = rate_text, seconds_text
    lines = [
        f"Spark {result['master']}: session start {result['session_start_s']:.1f} s and warm-up {result.get('warm_up_s', 0):.1f} s, "
        f"not counted; engine p={result['parallelism']}; rates on wall time from start to the end, records in per second",
        load_text(result["load_average"]),
        f"{'workload':8} {'engine':>9} {'on Spark':>9} {'by hand':>9} {'ratio':>6}   {'1st result: engine':>18} {'on Spark':>9} "
        f"{'by hand':>8} {'ratio':>6}   {'Spark/engine':>12}",
    ]
    for name, w in result["workloads"].items():
        e, s, h = w["engine"], w["flinkpy_on_spark"], w["hand_written"]
        lines.append(
            f"{name:8} {rate(e['rate']):>9} {rate(s['rate']):>9} {rate(h['rate']):>9} {ratio_text(w['rate_ratio']):>6}   "
            f"{secs(e['first_result_s']):>18} {secs(s['first_result_s']):>9} {secs(h['first_result_s']):>8} "
            f"{ratio_text(w['first_result_ratio']):>6}   {ratio_text(w['rate_vs_engine']):>12}"
        )
    for name, w in result["workloads"].items():
        for label, side in (("on Spark", w["flinkpy_on_spark"]), ("by hand", w["hand_written"])):
            phases = ", ".join(f"{k} {v / 1000:.2f}" for k, v in side["phases_ms"].items() if v)
            lines.append(f"{name} {label}: {side['batches']:.0f} micro-batches, {side['output']:.0f} records out; seconds per phase: {phases}")
        if w["engine"]["net_rate"]:
            lines.append(f"{name} engine on its net runtime (as the other rows of the benchmark): {rate(w['engine']['net_rate'])} records/s")
    return "\n".join(lines)


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`compare`'s figures as records (tables ``spark`` and ``spark-phases``)."""
    out: list[Figure] = []
    for name, w in result["workloads"].items():
        row, rate = counted(name.upper(), w["records"], words=name == "w1")
        e, s, h = w["engine"], w["flinkpy_on_spark"], w["hand_written"]
        flat = {"engine": e["rate"], "net": e["net_rate"], "spark": s["rate"], "hand": h["rate"], "ratio": w["rate_ratio"],
                "vs_engine": w["rate_vs_engine"], "first_engine": e["first_result_s"], "first_spark": s["first_result_s"],
                "first_hand": h["first_result_s"], "out_spark": s["output"], "out_hand": h["output"]}
        out += cells("spark", row, flat, [
            ("flinkpy engine p=2", "engine", rate), ("flinkpy on Spark", "spark", rate), ("hand-written PySpark", "hand", rate),
            ("on Spark / by hand", "ratio", Unit.RATIO), ("on Spark / engine", "vs_engine", Unit.RATIO),
            ("first result: engine", "first_engine", Unit.S), ("first result: on Spark", "first_spark", Unit.S),
            ("first result: by hand", "first_hand", Unit.S), ("output records: on Spark", "out_spark", Unit.COUNT),
            ("output records: by hand", "out_hand", Unit.COUNT), ("flinkpy engine p=2, net runtime", "net", rate),
        ])
        for label, side in (("on Spark", s), ("by hand", h)):
            phases = {"batches": side["batches"], **side["phases_ms"]}
            out += cells("spark-phases", f"{row}, {label}", phases,
                         [("micro-batches", "batches", Unit.COUNT)] + [(k, k, Unit.MS) for k in sorted(side["phases_ms"])])
    out += cells("spark-phases", "the session (not counted)", result, [("start", "session_start_s", Unit.S), ("warm-up", "warm_up_s", Unit.S)])
    return out

