"""W1 and W2 on the Spark runner against flinkpy's engine: ``python -m flinkpy.benchmark --only spark``.

Both engines run the same job definitions (flinkpy.benchmark's ``job_w1``/``job_w2``) at
parallelism 2 in the same run: flinkpy on an embedded cluster with 2 slots, Spark through the
Spark runner (``flinkpy.spark.plan.translate`` then ``SparkPlan.start``) on one ``local[2]``
session with 2 shuffle partitions, started once (its start-up is reported apart). Each job ends
in the same sink, :class:`FirstResult`, which writes the wall-clock time of the first record it
receives, and nothing else.

Per engine and workload (median of ``--runs``):

- ``rate``: records / wall time from submission (``env.execute`` / ``SparkPlan.start``) until the
  job is finished (for Spark: the bounded query has stopped after its final batch committed);
- ``first_result_s``: from submission to the first record at the sink;
- for flinkpy also ``net_rate``, on the job's net runtime (RUNNING to FINISHED) as the other
  rows of the benchmark report it.

Ratios are Spark / flinkpy. This is a measurement tool, not a test: it asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from flinkpy.benchmark import job_w1, job_w2, run_job

PARALLELISM = 2
MASTER = "local[2]"


class FirstResult:
    """A SinkFunction that records when its first record arrived (one file per sink instance,
    written once; later records cost one attribute test)."""

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


def _builders(paths: list[str], w2_count: int) -> dict[str, Callable[[Any, Callable[[Any], Any]], None]]:
    return {
        "w1": lambda env, sink: job_w1(env, paths, sink),
        "w2": lambda env, sink: job_w2(env, w2_count, sink),
    }


def run_flinkpy(address: str, token: str, build: Callable[[Any, Callable[[Any], Any]], None], name: str, work: str) -> dict[str, float | None]:
    """One run on flinkpy's engine at parallelism 2: wall and net seconds, time to first result."""
    marker = f"{work}/{name}.first"
    started = time.time()
    net = run_job(address, token, lambda env: build(env, lambda s: s.add_sink(FirstResult(marker))), PARALLELISM, name)
    wall = time.time() - started
    return {"wall_s": wall, "net_s": net, "first_result_s": _first_result(marker, started)}


def run_spark(spark: Any, build: Callable[[Any, Callable[[Any], Any]], None], name: str, work: str) -> dict[str, float | None]:
    """One run on the Spark runner: the job translated, started as a bounded query, waited for."""
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
    return {"wall_s": wall, "first_result_s": _first_result(marker, started)}


def compare(address: str, token: str, paths: list[str], n_words: int, w2_count: int, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    """W1 and W2 on both engines, ``runs`` times each, alternating engines run by run."""
    from flinkpy.spark.analysis import spark_session

    log(f"spark: starting a {MASTER} session ...")
    started = time.time()
    spark = spark_session(MASTER, {"spark.sql.shuffle.partitions": str(PARALLELISM)}, app_name="flinkpy benchmark")
    result: dict[str, Any] = {"master": MASTER, "parallelism": PARALLELISM, "session_start_s": time.time() - started, "workloads": {}}
    records = {"w1": n_words, "w2": w2_count}
    try:
        with tempfile.TemporaryDirectory(prefix="flinkpy-bench-spark-") as work:
            for name, build in _builders(paths, w2_count).items():
                flink_runs, spark_runs = [], []
                for i in range(runs):
                    log(f"spark: {name} run {i + 1}/{runs} on flinkpy p={PARALLELISM} ...")
                    flink_runs.append(run_flinkpy(address, token, build, f"bench_{name}_flinkpy_{i}", work))
                    log(f"spark: {name} run {i + 1}/{runs} on Spark {MASTER} ...")
                    spark_runs.append(run_spark(spark, build, f"bench_{name}_spark_{i}", work))
                result["workloads"][name] = _summary(records[name], flink_runs, spark_runs)
    finally:
        spark.stop()
    return result


def _median(runs: list[dict[str, float | None]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None  # type: ignore[type-var]


def _summary(n: int, flink_runs: list[dict[str, Any]], spark_runs: list[dict[str, Any]]) -> dict[str, Any]:
    fw, sw = _median(flink_runs, "wall_s"), _median(spark_runs, "wall_s")
    ff, sf = _median(flink_runs, "first_result_s"), _median(spark_runs, "first_result_s")
    net = _median(flink_runs, "net_s")
    return {
        "records": n,
        "flinkpy": {"rate": n / fw, "net_rate": n / net if net else None, "first_result_s": ff, "runs": flink_runs},
        "spark": {"rate": n / sw, "first_result_s": sf, "runs": spark_runs},
        "rate_ratio": fw / sw,  # Spark's rate / flinkpy's
        "first_result_ratio": (sf / ff) if sf and ff else None,  # Spark's time / flinkpy's
    }


def report(result: dict[str, Any]) -> str:
    """The comparison as text lines."""
    lines = [
        f"Spark runner ({result['master']}, session start {result['session_start_s']:.1f} s, not counted) "
        f"vs flinkpy p={result['parallelism']}; rates on wall time from submission to the end",
        f"{'workload':8} {'flinkpy':>12} {'spark':>12} {'spark/flinkpy':>14} {'1st result flinkpy':>19} {'spark':>8} {'ratio':>7}",
    ]
    for name, w in result["workloads"].items():
        f, s = w["flinkpy"], w["spark"]
        first = lambda v: "-" if v is None else f"{v:.2f} s"  # noqa: E731
        lines.append(
            f"{name:8} {f['rate'] / 1e3:>10.0f} k {s['rate'] / 1e3:>10.0f} k {w['rate_ratio']:>14.2f} "
            f"{first(f['first_result_s']):>19} {first(s['first_result_s']):>8} "
            f"{'-' if w['first_result_ratio'] is None else format(w['first_result_ratio'], '.1f'):>7}"
        )
    for name, w in result["workloads"].items():
        if w["flinkpy"]["net_rate"]:
            lines.append(f"{name} flinkpy on its net runtime (as the other rows): {w['flinkpy']['net_rate'] / 1e3:.0f} k records/s")
    return "\n".join(lines)
