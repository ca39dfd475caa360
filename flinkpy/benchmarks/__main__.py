"""``python -m flinkpy.benchmarks``: run the parts asked for on one embedded cluster, then print
one report (a table for people, or one JSON document with ``--json``). See the package docstring
for what is measured and how."""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import flinkpy.benchmarks
from flinkpy.benchmarks import (async_io, backends, backpressure, bytecode, bytewax_windows, figures, iceberg, kafka, lifecycle, metrics_cost, partitions,
                                peers_form, scaling, two_input)
from flinkpy.benchmarks.report import Report, write as write_report
from flinkpy.benchmarks.latency import first_output_latency, latency_run
from flinkpy.benchmarks.snapshots import recovery_time, savepoint_timing, snapshot_durations
from flinkpy.benchmarks.windows import job_w1_windowed
from flinkpy.benchmarks.workloads import LAST_CHECKPOINT_STATS, SEED, completed_checkpoints, job_w1, job_w2, loop_w1, loop_w2, make_lines, run_job

PARTS = ["w1", "w2", "peers-form", "join", "metrics", "state", "recovery", "windows", "latency", "savepoint", "failover", "spark", "backends", "backpressure",
         "async", "rabbitmq", "startup", "iceberg", "kafka", "scaling", "partitions", "spark-shapes",
         "lifecycle"]

#: the numbers the scaling part's running sums add up (a tenth with --quick)
SCALING_COUNT = 10_000_000

#: runs of `flinkpy run examples/word_count.py` behind the startup part's median and maximum
STARTUP_RUNS = 20

#: a workload: (records, the loop's seconds, the job's builder, the rate's unit)
Workload = tuple[int, Callable[[], float], Callable[[Any], None], str]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m flinkpy.benchmarks", description=(flinkpy.benchmarks.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the data (a smoke run, not for the README)")
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement; the median is reported")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    ap.add_argument("--report", metavar="FILE.json",
                    help="also write every figure with the date, command, machine and versions to FILE.json "
                         "(schema: flinkpy.benchmarks.report; python -m flinkpy.benchmarks.render turns reports into a page)")
    ap.add_argument("--only", choices=PARTS,
                    help="run one part only (spark: W1 and W2 on the Spark runner, as hand-written PySpark and on flinkpy at p=2; "
                         "spark-shapes: job shapes as whole flinkpy run --runner spark processes against hand-written PySpark processes; "
                         "kafka: exactly-once word counts from topic to topic against confluent-kafka and Quix Streams "
                         "(pip install noida-db quixstreams); scaling: running sums keyed by n %% 1024 and W1 at each "
                         "--parallelism; partitions: a cluster across network-namespace hosts (root), TLS's cost and the "
                         "recovery after partitions; lifecycle: the downtime of each upgrade mode and of an in-place rescale, from "
                         "the output records' own timestamps; these six only run when asked)")
    ap.add_argument("--shapes", type=lambda v: v.split(","), metavar="SHAPE[,SHAPE...]",
                    help="with --only spark-shapes: the shapes to run (default all: w1, w2, wc-sum-print, ints-sum-print, w1-peers, w2-peers)")
    ap.add_argument("--rabbitmq-url", metavar="URL",
                    help="with --only rabbitmq: the RabbitMQ server to read from, amqp://user:password@host:port/vhost (it is not started for you)")
    ap.add_argument("--parallelism", type=parallelisms, default=[1, 2, 4, 8], metavar="P[,P...]",
                    help="with --only scaling: the parallelisms to run at (default 1,2,4,8; the speed-up is over the first, when it is 1)")
    ap.add_argument("--keys", type=lambda v: [int(float(k)) for k in v.split(",")], metavar="N[,N...]",
                    help="with --only backends: the state sizes of the large-state step (default 1e5,1e6,1e7; quick 1e4,1e5,1e6)")
    return ap.parse_args(argv)


def parallelisms(value: str) -> list[int]:
    """``--parallelism``'s value: positive integers, comma-separated, in the order given."""
    try:
        out = [int(p) for p in value.split(",")]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: give positive integers separated by commas, e.g. 1,2,4,8")
    return out


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def wanted(args: argparse.Namespace, part: str) -> bool:
    """Whether a part that runs by default (all but spark, kafka, backends, backpressure and scaling) is to run."""
    return not args.only or args.only == part


def measure_workload(address: str, token: str, name: str, workload: Workload, runs: int) -> dict[str, Any]:
    """A workload in the loop, on flinkpy at p=1 and p=2, and at both with checkpoints every 1 s."""
    n, loop, build, unit = workload
    # the loop and the p=1 job in turns: a change in the machine's load between them moves both
    # sides of a run's ratio alike; p=1's ratio is the median of the runs' ratios
    loops: list[float] = []
    p1: list[float] = []
    for i in range(runs):
        log(f"{name}: loop, then flinkpy p=1, run {i + 1} ...")
        loops.append(loop())
        p1.append(run_job(address, token, build, 1, f"bench-{name}-p1"))
    loop_s = statistics.median(loops)
    entry: dict[str, Any] = {"records": n, "unit": unit, "loop_rate": n / loop_s, "p1_rate": n / statistics.median(p1),
                             "p1_ratio": statistics.median(lo / s for lo, s in zip(loops, p1)),
                             "p1_ratios": [round(lo / s, 3) for lo, s in zip(loops, p1)]}
    log(f"{name}: flinkpy p=2 ...")
    secs = statistics.median(run_job(address, token, build, 2, f"bench-{name}-p2") for _ in range(runs))
    entry["p2_rate"] = n / secs
    entry["p2_ratio"] = (n / secs) / entry["loop_rate"]
    log(f"{name}: flinkpy p=1 with exactly-once checkpoints every 1 s ...")
    secs = statistics.median(run_job(address, token, build, 1, f"bench-{name}-p1-cp", checkpoint_ms=1000) for _ in range(runs))
    entry["p1_checkpointed_rate"] = n / secs
    entry["p1_checkpointed_ratio"] = (n / secs) / entry["loop_rate"]
    entry["checkpointed_vs_off"] = entry["p1_checkpointed_rate"] / entry["p1_rate"]
    log(f"{name}: flinkpy p=2 with exactly-once checkpoints every 1 s ...")
    secs = statistics.median(run_job(address, token, build, 2, f"bench-{name}-p2-cp", checkpoint_ms=1000) for _ in range(runs))
    entry["p2_checkpointed_rate"] = n / secs
    entry["p2_checkpointed_vs_off"] = entry["p2_checkpointed_rate"] / entry["p2_rate"]
    entry.update(_p2_checkpoints(f"bench-{name}-p2-cp"))
    return entry


def _p2_checkpoints(job: str) -> dict[str, Any]:
    """The p=2 checkpointed run's checkpoints, as the W1, W2 and join entries keep them."""
    done = completed_checkpoints(LAST_CHECKPOINT_STATS.get(job, {}))
    return {"p2_checkpoints": done["checkpoints"], "p2_alignment_ms_max": done["alignment_ms_max"],
            "p2_alignment_bytes_max": done["alignment_bytes_max"]}


def measure_join(address: str, token: str, lines: list[str], paths: list[str], n_words: int, runs: int) -> dict[str, Any]:
    """The two-input workload against W1 in the same run: the loop, then W1, the join and the
    same update on one input taken in turns at p=1 and p=2, and the join at p=2 with exactly-once checkpoints every 1 s (its
    barriers aligned across both inputs)."""
    log("join: loop ...")
    entry: dict[str, Any] = {"records": n_words, "unit": "words/s", "loop_rate": n_words / statistics.median(two_input.loop_join(lines)[1] for _ in range(runs))}
    left, right = two_input.write_halves(lines, Path(paths[0]).parent)

    def join_job(env: Any) -> None:
        two_input.job_join(env, left, right)

    def one_input_job(env: Any) -> None:
        two_input.job_join(env, left + right, [])

    for p in (1, 2):
        log(f"join: W1 and the two-input join in turns, p={p} ...")
        w1: list[float] = []
        join: list[float] = []
        one: list[float] = []
        for _ in range(runs):
            w1.append(run_job(address, token, lambda env: job_w1(env, paths), p, f"bench-w1-p{p}"))
            join.append(run_job(address, token, join_job, p, f"bench-join-p{p}"))
            one.append(run_job(address, token, one_input_job, p, f"bench-keyed-process-p{p}"))
        entry[f"p{p}_w1_rate"] = n_words / statistics.median(w1)
        entry[f"p{p}_one_input_rate"] = n_words / statistics.median(one)
        entry[f"p{p}_vs_one_input"] = (n_words / statistics.median(join)) / entry[f"p{p}_one_input_rate"]
        entry[f"p{p}_rate"] = n_words / statistics.median(join)
        entry[f"p{p}_vs_w1"] = entry[f"p{p}_rate"] / entry[f"p{p}_w1_rate"]
        entry[f"p{p}_ratio"] = entry[f"p{p}_rate"] / entry["loop_rate"]
    log("join: p=2 with exactly-once checkpoints every 1 s ...")
    secs = statistics.median(run_job(address, token, join_job, 2, "bench-join-p2-cp", checkpoint_ms=1000) for _ in range(runs))
    entry["p2_checkpointed_vs_off"] = (n_words / secs) / entry["p2_rate"]
    entry.update(_p2_checkpoints("bench-join-p2-cp"))
    return entry


def measure_backends(address: str, token: str, args: argparse.Namespace, workloads: dict[str, Workload]) -> dict[str, Any]:
    """``--only backends``: W1/W2 on each backend, then large state on RocksDB per compaction style."""
    result: dict[str, Any] = {"throughput": backends.throughput(address, token, args.runs, workloads, run_job, log), "large_state": []}
    for keys in args.keys or ((10_000, 100_000, 1_000_000) if args.quick else (100_000, 1_000_000, 10_000_000)):
        for compaction in ("LEVEL", "UNIVERSAL"):
            log(f"large state: {keys} keys on rocksdb ({compaction} compaction), incremental checkpoints ...")
            result["large_state"].append(backends.large_state(address, token, keys, log, compaction=compaction))
    return result


def measure_on_cluster(args: argparse.Namespace, results: dict[str, Any], lines: list[str], n_words: int, w2_count: int) -> None:
    """Every part that runs on the embedded cluster (all but failover and the first output)."""
    from flinkpy.cluster import EmbeddedCluster

    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(slots=2, job_stdout=subprocess.DEVNULL) as cluster:
        paths = []
        for part in range(2):
            p = Path(tmp) / f"words-{part}.txt"
            p.write_text("\n".join(lines[part::2]) + "\n")
            paths.append(str(p))
        address, token = cluster.rest_address, cluster.token()
        workloads: dict[str, Workload] = {
            "w1": (n_words, lambda: loop_w1(lines)[1], lambda env: job_w1(env, paths), "words/s"),
            "w2": (w2_count, lambda: loop_w2(w2_count)[1], lambda env: job_w2(env, w2_count), "ints/s"),
        }
        if args.only == "spark":
            from flinkpy.benchmarks.spark import compare

            results["spark"] = compare(address, token, paths, n_words, w2_count, args.runs, log)
        if args.only == "backends":
            results["backends"] = measure_backends(address, token, args, workloads)
        if args.only == "backpressure":
            results["backpressure"] = backpressure.measure(address, token, log, quick=args.quick)
        if args.only == "rabbitmq":
            from flinkpy.benchmarks import rabbitmq

            results["rabbitmq"] = rabbitmq.measure(args.rabbitmq_url, address, token, args.runs, run_job, log, quick=args.quick)
        if args.only == "iceberg":
            results["iceberg"] = iceberg.measure(address, token, args.runs, run_job, log, quick=args.quick)
        for name, workload in workloads.items():
            if wanted(args, name):
                results["workloads"][name] = measure_workload(address, token, name, workload, args.runs)
        if wanted(args, "async"):
            results["async_io"] = async_io.measure(address, token, args.runs, run_job, log, quick=args.quick)
        if wanted(args, "peers-form"):
            results["peers_form"] = peers_form.measure(address, token, lines, n_words, w2_count, args.runs, run_job, log, tmp)
        if wanted(args, "join"):
            results["join"] = measure_join(address, token, lines, paths, n_words, args.runs)
        if wanted(args, "metrics"):
            results["metrics"] = metrics_cost.measure(address, token, workloads, args.runs, run_job, log)
        if wanted(args, "state"):
            results["snapshots"] = []
            for keys in (10_000, 100_000, 1_000_000):
                log(f"snapshots of {keys} keys ...")
                results["snapshots"].append(snapshot_durations(address, token, keys, 5 if args.quick else 10))
        if wanted(args, "windows"):
            log("sliding (5 s / 1 s) and tumbling (5 s) windows vs a rolling reduce on the event-time W1 ...")
            results["windows"] = measure_windows(address, token, paths, n_words, args.runs)
            log("the same with exactly-once checkpoints every 200 ms ...")
            results["windows"]["checkpointed"] = measure_windows(address, token, paths, n_words, args.runs, checkpoint_ms=200)
            results["windows"]["bytewax"] = measure_bytewax(results["windows"], lines, tmp, args.runs)
        if wanted(args, "latency"):
            total = 200_000 // (10 if args.quick else 1)
            log("latency: peak throughput ...")
            peak = latency_run(address, token, None, total, 100)["throughput"]
            results["latency"] = {"peak_rate": peak, "runs": []}
            for timeout in (0, 100):
                log(f"latency at half of peak, buffer timeout {timeout} ms ...")
                results["latency"]["runs"].append(latency_run(address, token, peak / 2, total // 2, timeout))
        if wanted(args, "savepoint"):
            log("savepoint and restore of 1,000,000 keys ...")
            results["savepoint"] = savepoint_timing(address, token, 1_000_000)
        if wanted(args, "recovery"):
            results["recovery"] = []
            for keys in (1_000, 100_000, 1_000_000):
                log(f"recovery with {keys} keys ...")
                runs = [recovery_time(address, token, keys) for _ in range(args.runs)]
                best = sorted(runs, key=lambda r: r["recovery_ms"] if r["recovery_ms"] is not None else 1e12)
                results["recovery"].append(dict(best[len(best) // 2]))


def measure_windows(address: str, token: str, paths: list[str], n_words: int, runs: int, checkpoint_ms: int | None = None) -> dict[str, Any]:
    """The rolling reduce, sliding and tumbling windows on the event-time W1, taken in turns (a
    change in the machine's load moves a run's three alike); a ratio is the median of the runs'.
    With ``checkpoint_ms``: exactly-once checkpoints at that interval."""
    kinds = {"rolling": False, "sliding": True, "tumbling": "tumbling"}
    secs: dict[str, list[float]] = {kind: [] for kind in kinds}
    for i in range(runs):
        log(f"windows: rolling, sliding, tumbling, run {i + 1} ...")
        for kind, windowed in kinds.items():
            secs[kind].append(run_job(address, token, lambda env: job_w1_windowed(env, paths, windowed), 1, f"bench-w1-{kind}",
                                      checkpoint_ms=checkpoint_ms))
    result: dict[str, Any] = {f"{kind}_rate": n_words / statistics.median(s) for kind, s in secs.items()}
    for kind in ("sliding", "tumbling"):
        ratios = [r / w for r, w in zip(secs["rolling"], secs[kind])]
        result[f"{kind}_vs_rolling"] = statistics.median(ratios)
        result[f"{kind}_ratios"] = [round(x, 3) for x in ratios]
    return result


#: Bytewax's windows run on this share of W1's lines (its sliding window takes minutes on all)
BYTEWAX_SHARE = 10


def measure_bytewax(windows: dict[str, Any], lines: list[str], tmp: str, runs: int) -> dict[str, Any]:
    """Bytewax's rolling count and windows on the first tenth of W1's lines (the same stamping),
    with each rate over flinkpy's rolling reduce of this run."""
    part = lines[: len(lines) // BYTEWAX_SHARE]
    paths = []
    for i in range(2):
        p = Path(tmp) / f"bytewax-words-{i}.txt"
        p.write_text("\n".join(part[i::2]) + "\n")
        paths.append(str(p))
    result = bytewax_windows.measure(paths, sum(len(line.split()) for line in part), runs, statistics.median, log)
    for kind in bytewax_windows.KINDS:
        if f"{kind}_rate" in result:
            result[f"{kind}_vs_flinkpy_rolling"] = result[f"{kind}_rate"] / windows["rolling_rate"]
    return result


def measure_failover(results: dict[str, Any], runs: int) -> None:
    """JobManager failover under ZooKeeper HA, when a ZooKeeper installation is found."""
    from flinkpy.errors import NotFoundError
    from flinkpy.ha.zookeeper_server import find_installation

    try:
        find_installation()
    except NotFoundError as e:
        log(f"JobManager failover: skipped ({e.message})")
        return
    from flinkpy.benchmarks.failover import measure_failover as measure

    log("JobManager failover (ZooKeeper session timeout 4 s) ...")
    results["failover"] = measure(4000, runs)


def measure_startup(runs: int) -> dict[str, Any]:
    """Run-to-first-output of ``flinkpy run examples/word_count.py`` (an embedded cluster each
    time): the median and the maximum, since a stall shows in the maximum only."""
    times, exits = [], []
    for i in range(runs):
        log(f"startup: first output of `flinkpy run examples/word_count.py`, run {i + 1} of {runs} ...")
        first, ended = first_output_latency()
        times.append(first)
        exits.append(ended)
    return {"runs_s": [round(t, 3) for t in times], "median_s": statistics.median(times), "max_s": max(times),
            "exit_median_s": statistics.median(exits), "exit_max_s": max(exits)}


def report_workloads(results: dict[str, Any]) -> None:
    if not results["workloads"]:
        return
    print(f"{'workload':10} {'loop':>12} {'flinkpy p1':>12} {'ratio':>6} {'flinkpy p2':>12} {'ratio':>6}")
    for name, e in results["workloads"].items():
        print(
            f"{name:10} {e['loop_rate'] / 1e3:>10.0f} k {e['p1_rate'] / 1e3:>10.0f} k {e['p1_ratio']:>6.2f} "
            f"{e['p2_rate'] / 1e3:>10.0f} k {e['p2_ratio']:>6.2f}   ({e['unit']})"
        )
    for name, e in results["workloads"].items():
        print(f"{name} p1 ratio per run (loop and job in turns): {', '.join(f'{r:.2f}' for r in e['p1_ratios'])}")
        print(
            f"{name} p1 with checkpoints every 1 s: {e['p1_checkpointed_rate'] / 1e3:.0f} k ({e['p1_checkpointed_ratio']:.2f} of the loop, "
            f"{e['checkpointed_vs_off']:.2f} of checkpointing off)"
        )
        print(
            f"{name} p2 with checkpoints every 1 s: {e['p2_checkpointed_rate'] / 1e3:.0f} k ({e['p2_checkpointed_vs_off']:.2f} of checkpointing off); "
            f"{e['p2_checkpoints']} checkpoints, alignment max {e['p2_alignment_ms_max']} ms, {e['p2_alignment_bytes_max']} bytes processed while aligning"
        )


def report_parts(results: dict[str, Any]) -> None:
    for line in peers_form.report(results.get("peers_form", {})):
        print(line)
    if "join" in results:
        j = results["join"]
        for p in (1, 2):
            print(f"two-input join p{p}: {j[f'p{p}_rate'] / 1e3:.0f} k words/s, {j[f'p{p}_vs_w1']:.2f} of W1 p{p} in the same run "
                  f"({j[f'p{p}_w1_rate'] / 1e3:.0f} k), {j[f'p{p}_vs_one_input']:.2f} of a one-input KeyedProcessFunction "
                  f"({j[f'p{p}_one_input_rate'] / 1e3:.0f} k), {j[f'p{p}_ratio']:.2f} of its loop ({j['loop_rate'] / 1e3:.0f} k)")
        print(f"two-input join p2 with checkpoints every 1 s: {j['p2_checkpointed_vs_off']:.2f} of checkpointing off; "
              f"{j['p2_checkpoints']} checkpoints, alignment across both inputs max {j['p2_alignment_ms_max']} ms, "
              f"{j['p2_alignment_bytes_max']} bytes processed while aligning")
    if "metrics" in results:
        for line in metrics_cost.report(results["metrics"]):
            print(line)
    for snap in results.get("snapshots", []):
        print(
            f"snapshot of {snap['keys']:>9} keys ({snap['state_bytes'] or 0:>10.0f} bytes): sync median {snap['sync_ms_median']:.2f} ms, "
            f"max {snap['sync_ms_max']:.2f} ms; async median {snap['async_ms_median']:.0f} ms  ({snap['checkpoints']} checkpoints)"
        )
    if "windows" in results:
        w = results["windows"]
        print(f"sliding windows 5 s / 1 s on W1: {w['sliding_rate'] / 1e3:.0f} k words/s; a rolling reduce: {w['rolling_rate'] / 1e3:.0f} k "
              f"({w['sliding_vs_rolling']:.2f} of it; runs {', '.join(f'{r:.2f}' for r in w['sliding_ratios'])})")
        print(f"tumbling windows 5 s on W1: {w['tumbling_rate'] / 1e3:.0f} k words/s ({w['tumbling_vs_rolling']:.2f} of the rolling reduce; "
              f"runs {', '.join(f'{r:.2f}' for r in w['tumbling_ratios'])})")
        cp = w.get("checkpointed")
        if cp:
            print(f"with checkpoints every 200 ms: rolling {cp['rolling_rate'] / 1e3:.0f} k words/s, sliding {cp['sliding_rate'] / 1e3:.0f} k "
                  f"({cp['sliding_vs_rolling']:.2f}), tumbling {cp['tumbling_rate'] / 1e3:.0f} k ({cp['tumbling_vs_rolling']:.2f}); "
                  f"against checkpointing off: {cp['rolling_rate'] / w['rolling_rate']:.2f}, {cp['sliding_rate'] / w['sliding_rate']:.2f}, "
                  f"{cp['tumbling_rate'] / w['tumbling_rate']:.2f}")
        for line in bytewax_windows.report(w.get("bytewax", {})):
            print(line)
    if "latency" in results:
        lat = results["latency"]
        for r in lat["runs"]:
            print(f"latency at {r['rate'] / 1e3:.0f} k rec/s (half of peak {lat['peak_rate'] / 1e3:.0f} k), buffer timeout {r['buffer_timeout_ms']} ms: p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms")
    if "savepoint" in results:
        sp = results["savepoint"]
        print(f"savepoint of {sp['keys']} keys ({sp['state_bytes']} bytes): {sp['savepoint_ms']} ms; submit-to-running restore from it: {sp['restore_ms']} ms")
    for rec in results.get("recovery", []):
        print(f"recovery with {rec['keys']:>9} keys ({rec['state_bytes']:>10} bytes): {rec['recovery_ms']} ms from SIGKILL to all tasks running, restored")
    if "failover" in results:
        f = results["failover"]
        print(f"JobManager failover (session timeout {f['session_timeout_ms']} ms): SIGKILL of the leader -> job RUNNING on the new one "
              f"in {f['failover_ms_median']} ms median ({', '.join(map(str, f['failover_ms']))})")
    if "backends" in results:
        for line in backends.report(results["backends"]):
            print(line)
    for line in backpressure.report(results.get("backpressure", {})):
        print(line)
    for line in async_io.report(results.get("async_io", {})):
        print(line)
    if "rabbitmq" in results:
        from flinkpy.benchmarks import rabbitmq

        for line in rabbitmq.report(results["rabbitmq"]):
            print(line)
    for line in iceberg.report(results.get("iceberg", {})):
        print(line)
    for line in kafka.report(results.get("kafka", {})):
        print(line)
    for line in scaling.report(results.get("scaling", {})):
        print(line)
    for line in partitions.report(results.get("partitions", {})):
        print(line)
    for line in lifecycle.report(results.get("lifecycle", {})):
        print(line)
    if "startup" in results:
        st = results["startup"]
        print(f"flinkpy run examples/word_count.py -> first output, {len(st['runs_s'])} runs: median {st['median_s']:.2f} s, "
              f"max {st['max_s']:.2f} s (runs {', '.join(f'{t:.2f}' for t in st['runs_s'])}); "
              f"to its exit: median {st['exit_median_s']:.2f} s, max {st['exit_max_s']:.2f} s")


def command_line(argv: list[str]) -> str:
    """The command as a reader would type it again, without ``--report``'s file."""
    words, skip = [], False
    for word in argv:
        if skip or word.startswith("--report="):
            skip = False
            continue
        if word == "--report":
            skip = True
            continue
        words.append(word)
    return " ".join(["python -m flinkpy.benchmarks", *words])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.report and not Path(args.report).resolve().parent.is_dir():
        log(f"python -m flinkpy.benchmarks: error: --report {args.report}: no such directory (create it first)")
        return 2
    if args.only == "rabbitmq" and not args.rabbitmq_url:
        log("python -m flinkpy.benchmarks: error: --only rabbitmq needs --rabbitmq-url amqp://user:password@host:port/vhost (a running server)")
        return 2
    if sys.flags.dont_write_bytecode:
        # every process started from here on compiles nothing an installed flinkpy has compiled
        pycache = tempfile.mkdtemp(prefix="flinkpy-bench-pycache-")
        atexit.register(shutil.rmtree, pycache, True)
        log("PYTHONDONTWRITEBYTECODE is set: compiling flinkpy into a bytecode cache of the benchmark's own ...")
        bytecode.turn_on(pycache)
    load_at_start = figures.load_average()
    scale = 10 if args.quick else 1
    n_lines, w2_count = 200_000 // scale, 5_000_000 // scale
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "runs": args.runs, "quick": args.quick, "workloads": {}}
    log(f"generating W1 data ({n_lines} lines, seed {SEED}) ...")
    lines = make_lines(n_lines)
    n_words = sum(len(line.split()) for line in lines)
    if args.only == "kafka":
        results["kafka"] = kafka.measure(args.runs, log, quick=args.quick)
    elif args.only == "scaling":
        results["scaling"] = scaling.measure(args.parallelism, lines, n_words, SCALING_COUNT // scale, args.runs, run_job, log)
    elif args.only == "partitions":
        reason = partitions.unavailable()
        if reason is not None:
            log(f"python -m flinkpy.benchmarks: error: --only partitions needs network namespaces and trustme: {reason}")
            return 2
        results["partitions"] = partitions.measure(args.runs, run_job, log, quick=args.quick)
    elif args.only == "lifecycle":  # a cluster of its own, in a home of its own
        results["lifecycle"] = lifecycle.measure(args.runs, log, quick=args.quick)
    elif args.only == "spark-shapes":  # whole processes of their own: no embedded cluster
        from flinkpy.benchmarks import spark_shapes

        results["spark_shapes"] = spark_shapes.measure(lines, n_words, w2_count, args.runs, log, args.shapes)
    elif args.only != "startup":
        measure_on_cluster(args, results, lines, n_words, w2_count)
    if wanted(args, "failover"):
        measure_failover(results, args.runs)
    if wanted(args, "startup"):
        results["startup"] = measure_startup(STARTUP_RUNS // (4 if args.quick else 1))
    status = 0
    if args.report:
        try:
            write_report(Report([figures.run_record(results, command_line(argv), load_at_start)]), args.report)
            log(f"report written to {args.report}")
        except Exception as exc:  # noqa: BLE001 - the figures below are still worth printing
            log(f"python -m flinkpy.benchmarks: error: the report was not written: {exc!r}")
            status = 1
    if args.json:
        print(json.dumps(results, indent=2))
        return status
    print(f"flinkpy benchmark, {results['date']}, median of {args.runs} run(s){' (quick)' if args.quick else ''}")
    if "spark" in results:
        from flinkpy.benchmarks.spark import report

        print(report(results["spark"]))
        return status
    if "spark_shapes" in results:
        from flinkpy.benchmarks.spark_shapes import report as shapes_report

        print(shapes_report(results["spark_shapes"]))
        return status
    report_workloads(results)
    report_parts(results)
    return status


if __name__ == "__main__":
    sys.exit(main())
