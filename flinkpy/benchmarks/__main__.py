"""The project's benchmark: ``python -m flinkpy.benchmark [--quick] [--json] [--runs N]``.

Workloads (as in ../shared/PEERS.md):

- W1: word count over 2,000,000 words (200,000 lines of 10 words, Zipf vocabulary of 10,000
  words, seed 42): lines -> flat_map split -> map (word, 1) -> key_by word -> reduce -> sink.
- W2: even/odd running sums over 1..5,000,000: numbers -> key_by parity -> reduce -> sink.

``--only spark`` runs W1 and W2 on the Spark runner and as hand-written PySpark queries instead
(see flinkpy.benchmark_spark).

Each runs on flinkpy at parallelism 1 and 2 on one embedded cluster (real JobManager,
TaskManager and task processes), and, in the same run, as a plain single-process Python loop
that calls the same user functions (flat_map, map, key selector, reduce) with no engine in
between. It prints records/s and the ratio flinkpy / loop: ratios, because absolute times on a
shared machine are not stable. The engine's time is the job's net runtime as the JobManager
measures it (RUNNING to FINISHED: task start-up included, cluster start-up not). It also
measures the wall time from ``flinkpy run examples/word_count.py`` to the job's first output.
This is a measurement tool, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import accumulate
from pathlib import Path
from typing import Any, Callable

SEED = 42


# -- the user functions, shared by the job and the loop ----------------------------------------


def split(line: str) -> list[str]:
    return line.split()


def to_pair(word: str) -> tuple[str, int]:
    return (word, 1)


def word_key(pair: tuple[str, int]) -> str:
    return pair[0]


def add_counts(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    return (a[0], a[1] + b[1])


def parity(n: int) -> int:
    return n % 2


def add(a: int, b: int) -> int:
    return a + b


# -- data ------------------------------------------------------------------------------------


def make_lines(n_lines: int, words_per_line: int = 10, vocabulary: int = 10_000, seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocabulary)]
    cum = list(accumulate(1.0 / (k + 1) for k in range(vocabulary)))
    words = rng.choices(vocab, cum_weights=cum, k=n_lines * words_per_line)
    return [" ".join(words[i : i + words_per_line]) for i in range(0, len(words), words_per_line)]


# -- the loops -------------------------------------------------------------------------------


def loop_w1(lines: list[str]) -> tuple[int, float]:
    started = time.perf_counter()
    counts: dict[str, Any] = {}
    n = 0
    for line in lines:
        for w in split(line):
            rec = to_pair(w)
            k = word_key(rec)
            old = counts.get(k)
            counts[k] = rec if old is None else add_counts(old, rec)
            n += 1
    return n, time.perf_counter() - started


def loop_w2(count: int) -> tuple[int, float]:
    started = time.perf_counter()
    sums: dict[int, int] = {}
    for x in range(1, count + 1):
        k = parity(x)
        old = sums.get(k)
        sums[k] = x if old is None else add(old, x)
    return count, time.perf_counter() - started


# -- the jobs --------------------------------------------------------------------------------


def _discard(stream: Any) -> Any:
    from flinkpy.connectors.print_sink import DiscardingSink

    return stream.sink_to(DiscardingSink())


def job_w1(env: Any, paths: list[str], sink: Callable[[Any], Any] = _discard) -> None:
    """W1; ``sink`` ends the stream (default: a DiscardingSink)."""
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream.connectors.file_system import FileSource, StreamFormat

    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()
    sink(
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .flat_map(split)
        .map(to_pair)
        .key_by(word_key)
        .reduce(add_counts)
    )


def job_w2(env: Any, count: int, sink: Callable[[Any], Any] = _discard) -> None:
    """W2; ``sink`` ends the stream (default: a DiscardingSink)."""
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    sink(
        env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(parity)
        .reduce(add)
    )


def run_job(address: str, token: str, build: Callable[[Any], None], parallelism: int, name: str, *, checkpoint_ms: int | None = None) -> float:
    """Submit one job to the cluster and return its net runtime in seconds."""
    from flinkpy.client.context import ExecutionContext, execution_context
    from flinkpy.datastream import StreamExecutionEnvironment

    with execution_context(ExecutionContext(address=address, token=token, python_path=[str(Path(__file__).parent.parent)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(parallelism)
        if checkpoint_ms is not None:
            env.enable_checkpointing(checkpoint_ms)
        build(env)
        result = env.execute(name)
    if checkpoint_ms is not None:
        from flinkpy.client.rest import RestClient

        stats = RestClient(address, token).request("GET", f"/jobs/{result.get_job_id()}/checkpoints", params={"history": 100})
        LAST_CHECKPOINT_STATS[name] = stats
    return result.get_net_runtime() / 1000.0


#: checkpoint statistics of the last checkpointed run of each benchmark job, by job name
LAST_CHECKPOINT_STATS: dict[str, Any] = {}


def job_keyed_state(env: Any, keys: int) -> None:
    """An endless job whose keyed state holds ``keys`` keys once it has run a little."""
    from flinkpy.common import WatermarkStrategy
    from flinkpy.connectors.print_sink import DiscardingSink
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    (
        env.from_source(NumberSequenceSource(0, 10**15), WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(lambda n, k=keys: n % k)
        .reduce(add)
        .sink_to(DiscardingSink())
    )


def snapshot_durations(address: str, token: str, keys: int, checkpoints: int) -> dict[str, Any]:
    """Sync and async durations of checkpoints of a keyed state of ``keys`` keys (p=1)."""
    from flinkpy.client.context import ExecutionContext, execution_context
    from flinkpy.client.rest import RestClient
    from flinkpy.datastream import StreamExecutionEnvironment

    rest = RestClient(address, token)
    with execution_context(ExecutionContext(address=address, token=token, python_path=[str(Path(__file__).parent.parent)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        job_keyed_state(env, keys)
        client = env.execute_async(f"bench-state-{keys}")
    jid = client.get_job_id()
    try:
        # wait until the reducer has seen every key: records_in is reported at the end only, so
        # wait until the source has certainly emitted `keys` numbers (a generous bound)
        deadline = time.monotonic() + 120

        def all_running() -> bool:
            doc = rest.job(jid)
            return doc["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in doc["vertices"])

        while not all_running() and time.monotonic() < deadline:
            time.sleep(0.05)

        def checkpoint() -> dict[str, Any]:
            cid = rest.request("POST", f"/jobs/{jid}/checkpoints")["checkpoint_id"]
            while True:
                d = rest.request("GET", f"/jobs/{jid}/checkpoints/details/{cid}")
                if d["status"] != "IN_PROGRESS":
                    return d
                time.sleep(0.02)

        # warm up until every key is in the state: the checkpointed size stops growing
        previous = -1
        while time.monotonic() < deadline:
            size = checkpoint().get("state_size") or 0
            if size == previous:
                break
            previous = size
        sync, asyncs, sizes = [], [], []
        for _ in range(checkpoints):
            d = checkpoint()
            if d["status"] == "COMPLETED":
                sync.append(d.get("sync_duration_max") or 0)
                asyncs.append(d.get("async_duration_max") or 0)
                sizes.append(d.get("state_size") or 0)
        sync.sort()
        return {
            "keys": keys,
            "checkpoints": len(sync),
            "sync_ms_median": statistics.median(sync) if sync else None,
            "sync_ms_max": max(sync) if sync else None,
            "async_ms_median": statistics.median(asyncs) if asyncs else None,
            "state_bytes": statistics.median(sizes) if sizes else None,
        }
    finally:
        rest.cancel_job(jid)


def first_output_latency() -> float:
    """Wall time from starting `flinkpy run examples/word_count.py` to its first printed line."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env.pop("FLINKPY_JOBMANAGER", None)
    with tempfile.TemporaryDirectory() as home:
        env["FLINKPY_HOME"] = home
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "commands.main", "run", str(root / "examples" / "word_count.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=str(root),
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        latency = time.perf_counter() - started
        proc.stdout.read()
        proc.wait()
    return latency


def recovery_time(address: str, token: str, keys: int) -> dict[str, Any]:
    """Kill the keyed task of a job holding ``keys`` keys; time until its tasks run again restored."""
    import os
    import signal

    from flinkpy.client.context import ExecutionContext, execution_context
    from flinkpy.client.rest import RestClient
    from flinkpy.common import RestartStrategies
    from flinkpy.datastream import StreamExecutionEnvironment

    rest = RestClient(address, token)
    with execution_context(ExecutionContext(address=address, token=token, python_path=[str(Path(__file__).parent.parent)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(10, 0))
        job_keyed_state(env, keys)
        jid = env.execute_async(f"bench-recovery-{keys}").get_job_id()
    try:
        deadline = time.monotonic() + 120

        def doc() -> dict[str, Any]:
            return rest.job(jid)

        while not all(v["status"] == "RUNNING" for v in doc()["vertices"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        previous, size = -1, 0
        while time.monotonic() < deadline:  # fill the state, then checkpoint it
            cid = rest.request("POST", f"/jobs/{jid}/checkpoints")["checkpoint_id"]
            while (d := rest.request("GET", f"/jobs/{jid}/checkpoints/details/{cid}"))["status"] == "IN_PROGRESS":
                time.sleep(0.01)
            size = d.get("state_size") or 0
            if size == previous:
                break
            previous = size
        keyed = next(v for v in doc()["vertices"] if "Reduce" in v["name"])
        killed_ms = time.time() * 1000
        os.kill(keyed["subtasks"][0]["pid"], signal.SIGKILL)
        while time.monotonic() < deadline:
            d = doc()
            subs = [s for v in d["vertices"] for s in v["subtasks"]]
            if d["restarts"] >= 1 and all(s["status"] == "RUNNING" and s["attempt"] >= 1 for s in subs):
                running_ms = max(s["timestamps"].get("RUNNING", 0) for s in subs)
                return {"keys": keys, "state_bytes": size, "recovery_ms": round(running_ms - killed_ms)}
            time.sleep(0.005)
        return {"keys": keys, "state_bytes": size, "recovery_ms": None}
    finally:
        rest.cancel_job(jid)


# -- event time: sliding windows, and latency -------------------------------------------------


def job_w1_windowed(env: Any, paths: list[str], windowed: bool) -> None:
    """W1 with event time: line i of a file is stamped i x 10 ms; sliding 5 s / 1 s windows
    (or, for comparison, the plain rolling reduce on the same stamped stream)."""
    from flinkpy.common import Time, WatermarkStrategy
    from flinkpy.connectors.print_sink import DiscardingSink
    from flinkpy.datastream.connectors.file_system import FileSource, StreamFormat
    from flinkpy.datastream.window import SlidingEventTimeWindows

    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(_line_timestamp)
    pairs = (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .map(_stamp_line)
        .assign_timestamps_and_watermarks(strategy)
        .flat_map(_split_stamped)
        .map(to_pair)
        .key_by(word_key)
    )
    if windowed:
        pairs.window(SlidingEventTimeWindows.of(Time.seconds(5), Time.seconds(1))).reduce(add_counts).sink_to(DiscardingSink())
    else:
        pairs.reduce(add_counts).sink_to(DiscardingSink())


class _Stamp:
    counter = 0


def _stamp_line(line: str) -> tuple[int, str]:
    _Stamp.counter += 1
    return (_Stamp.counter * 10, line)


def _line_timestamp(event: tuple[int, str], _: int) -> int:
    return event[0]


def _split_stamped(event: tuple[int, str]) -> list[str]:
    return event[1].split()


class PacedSource:
    """A source of (sequence, emit time) records at a fixed rate, for latency measurements."""

    def __new__(cls, rate: float, total: int) -> Any:
        from flinkpy.connectors.base import Boundedness, Source, SourceReader

        class Reader(SourceReader):
            def __init__(self) -> None:
                self.sent = 0
                self.start = time.time()

            def poll(self, max_records: int) -> list | None:
                if self.sent >= total:
                    return None
                due = min(total, int((time.time() - self.start) * rate))
                n = min(max_records, due - self.sent)
                if n <= 0:
                    return []
                now = time.time()
                batch = [(self.sent + i, now) for i in range(n)]
                self.sent += n
                return batch

        class Paced(Source):
            boundedness = Boundedness.BOUNDED

            def create_reader(self, ctx: Any) -> SourceReader:
                return Reader()

        return Paced()


def latency_run(address: str, token: str, rate: float | None, total: int, buffer_timeout_ms: int) -> dict[str, Any]:
    """map -> key_by -> reduce -> sink, p=1; the sink records now - emit time per record."""
    import tempfile as _tempfile

    from flinkpy.client.context import ExecutionContext, execution_context
    from flinkpy.common import WatermarkStrategy
    from flinkpy.connectors.number_sequence import NumberSequenceSource
    from flinkpy.datastream import StreamExecutionEnvironment

    out_dir = _tempfile.mkdtemp(prefix="flinkpy-latency-")
    with execution_context(ExecutionContext(address=address, token=token, python_path=[str(Path(__file__).parent.parent)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        env.set_buffer_timeout(buffer_timeout_ms)
        if rate is None:
            src = env.from_source(NumberSequenceSource(1, total), WatermarkStrategy.no_watermarks(), "numbers").map(lambda n: (n, 0.0))
        else:
            src = env.from_source(PacedSource(rate, total), WatermarkStrategy.no_watermarks(), "paced")
        (
            src.key_by(lambda r: r[0] % 100)
            .reduce(lambda a, b: b)
            .add_sink(_LatencySink(out_dir))
        )
        started = time.perf_counter()
        result = env.execute(f"bench-latency-{rate}-{buffer_timeout_ms}")
    wall = time.perf_counter() - started
    samples = []
    for f in Path(out_dir).glob("*"):
        samples += [float(x) for x in f.read_text().split()]
    samples.sort()
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))] * 1000 if samples else None  # noqa: E731
    return {"rate": rate, "buffer_timeout_ms": buffer_timeout_ms, "throughput": total / (result.get_net_runtime() / 1000.0),
            "p50_ms": pick(0.5), "p99_ms": pick(0.99), "wall_s": wall}


class _LatencySink:
    """Keeps every 10th record's latency and writes them at the end (SinkFunction with close)."""

    def __init__(self, directory: str):
        self.directory = directory

    def open(self, runtime_context: Any) -> None:
        self.samples: list[float] = []

    def invoke(self, value: Any, context: Any) -> None:
        if value[0] % 10 == 0 and value[1]:
            self.samples.append(time.time() - value[1])

    def close(self) -> None:
        import os as _os

        with open(_os.path.join(self.directory, f"{_os.getpid()}.txt"), "w") as f:
            f.write(" ".join(f"{x:.6f}" for x in self.samples))


def savepoint_timing(address: str, token: str, keys: int) -> dict[str, Any]:
    """A savepoint of ``keys`` keys: its duration, and the time to restore a job from it."""
    import tempfile as _tempfile

    from flinkpy.client.context import ExecutionContext, execution_context
    from flinkpy.client.rest import RestClient
    from flinkpy.datastream import StreamExecutionEnvironment

    rest = RestClient(address, token)
    target = _tempfile.mkdtemp(prefix="flinkpy-bench-sp-")

    def submit(savepoint: str | None) -> str:
        with execution_context(ExecutionContext(address=address, token=token, python_path=[str(Path(__file__).parent.parent)], savepoint_path=savepoint)):
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(1)
            job_keyed_state(env, keys)
            return env.execute_async(f"bench-savepoint-{keys}").get_job_id()

    def running(jid: str) -> bool:
        return all(v["status"] == "RUNNING" for v in rest.job(jid)["vertices"])

    jid = submit(None)
    deadline = time.monotonic() + 120
    while not running(jid) and time.monotonic() < deadline:
        time.sleep(0.02)
    previous = -1
    while time.monotonic() < deadline:  # until the state holds every key
        cid = rest.request("POST", f"/jobs/{jid}/checkpoints")["checkpoint_id"]
        while (d := rest.request("GET", f"/jobs/{jid}/checkpoints/details/{cid}"))["status"] == "IN_PROGRESS":
            time.sleep(0.01)
        if d.get("state_size") == previous:
            break
        previous = d.get("state_size")
    started = time.perf_counter()
    tid = rest.request("POST", f"/jobs/{jid}/savepoints", body={"target-directory": target})["request-id"]
    while (st := rest.request("GET", f"/jobs/{jid}/savepoints/{tid}"))["status"]["id"] != "COMPLETED":
        time.sleep(0.005)
    savepoint_ms = (time.perf_counter() - started) * 1000
    rest.cancel_job(jid)
    location = st["operation"]["location"]
    started = time.perf_counter()
    jid2 = submit(location)
    while not running(jid2) and time.monotonic() < deadline:
        time.sleep(0.005)
    restore_ms = (time.perf_counter() - started) * 1000
    rest.cancel_job(jid2)
    return {"keys": keys, "state_bytes": previous, "savepoint_ms": round(savepoint_ms), "restore_ms": round(restore_ms)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flinkpy.benchmark", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the data (a smoke run, not for the README)")
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement; the median is reported")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    ap.add_argument("--only", choices=["w1", "w2", "state", "recovery", "windows", "latency", "savepoint", "failover", "spark", "backends"],
                    help="run one part only (spark: W1 and W2 on the Spark runner, as hand-written PySpark and on flinkpy at p=2; only run when asked)")
    ap.add_argument("--keys", type=lambda v: [int(float(k)) for k in v.split(",")], metavar="N[,N...]",
                    help="with --only backends: the state sizes of the large-state step (default 1e5,1e6,1e7; quick 1e4,1e5,1e6)")
    args = ap.parse_args(argv)

    scale = 10 if args.quick else 1
    n_lines, w2_count = 200_000 // scale, 5_000_000 // scale
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    from flinkpy.cluster import EmbeddedCluster

    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "runs": args.runs, "quick": args.quick, "workloads": {}}
    log(f"generating W1 data ({n_lines} lines, seed {SEED}) ...")
    lines = make_lines(n_lines)
    n_words = sum(len(line.split()) for line in lines)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(slots=2, job_stdout=subprocess.DEVNULL) as cluster:
        paths = []
        for part in range(2):
            p = Path(tmp) / f"words-{part}.txt"
            p.write_text("\n".join(lines[part::2]) + "\n")
            paths.append(str(p))
        address, token = cluster.rest_address, cluster.token()
        workloads = {
            "w1": (n_words, lambda: loop_w1(lines)[1], lambda env: job_w1(env, paths), "words/s"),
            "w2": (w2_count, lambda: loop_w2(w2_count)[1], lambda env: job_w2(env, w2_count), "ints/s"),
        }
        if args.only == "spark":
            from flinkpy.benchmark_spark import compare

            results["spark"] = compare(address, token, paths, n_words, w2_count, args.runs, log)
        if args.only == "backends":
            from flinkpy import benchmark_backends

            results["backends"] = {"throughput": benchmark_backends.throughput(address, token, args.runs, workloads, run_job, log), "large_state": []}
            for keys in args.keys or ((10_000, 100_000, 1_000_000) if args.quick else (100_000, 1_000_000, 10_000_000)):
                for compaction in ("LEVEL", "UNIVERSAL"):
                    log(f"large state: {keys} keys on rocksdb ({compaction} compaction), incremental checkpoints ...")
                    results["backends"]["large_state"].append(benchmark_backends.large_state(address, token, keys, log, compaction=compaction))
        for name, (n, loop, build, unit) in workloads.items():
            if args.only and args.only != name:
                continue
            log(f"{name}: loop ...")
            loop_s = statistics.median(loop() for _ in range(args.runs))
            entry: dict[str, Any] = {"records": n, "unit": unit, "loop_rate": n / loop_s}
            for p in (1, 2):
                log(f"{name}: flinkpy p={p} ...")
                secs = statistics.median(run_job(address, token, build, p, f"bench-{name}-p{p}") for _ in range(args.runs))
                entry[f"p{p}_rate"] = n / secs
                entry[f"p{p}_ratio"] = (n / secs) / entry["loop_rate"]
            log(f"{name}: flinkpy p=1 with exactly-once checkpoints every 1 s ...")
            secs = statistics.median(
                run_job(address, token, build, 1, f"bench-{name}-p1-cp", checkpoint_ms=1000) for _ in range(args.runs)
            )
            entry["p1_checkpointed_rate"] = n / secs
            entry["p1_checkpointed_ratio"] = (n / secs) / entry["loop_rate"]
            entry["checkpointed_vs_off"] = entry["p1_checkpointed_rate"] / entry["p1_rate"]
            log(f"{name}: flinkpy p=2 with exactly-once checkpoints every 1 s ...")
            secs = statistics.median(
                run_job(address, token, build, 2, f"bench-{name}-p2-cp", checkpoint_ms=1000) for _ in range(args.runs)
            )
            entry["p2_checkpointed_rate"] = n / secs
            entry["p2_checkpointed_vs_off"] = entry["p2_checkpointed_rate"] / entry["p2_rate"]
            history = LAST_CHECKPOINT_STATS.get(f"bench-{name}-p2-cp", {}).get("history", [])
            done = [h for h in history if h.get("status") == "COMPLETED"]
            entry["p2_checkpoints"] = len(done)
            entry["p2_alignment_ms_max"] = max((h.get("alignment_duration_max") or 0 for h in done), default=None)
            entry["p2_alignment_bytes_max"] = max((h.get("alignment_buffered") or 0 for h in done), default=None)
            results["workloads"][name] = entry
        if not args.only or args.only == "state":
            results["snapshots"] = []
            for keys in (10_000, 100_000, 1_000_000):
                log(f"snapshots of {keys} keys ...")
                results["snapshots"].append(snapshot_durations(address, token, keys, 5 if args.quick else 10))
        if not args.only or args.only == "windows":
            log("sliding windows (5 s / 1 s) vs a rolling reduce on the event-time W1 ...")
            rolling = statistics.median(run_job(address, token, lambda env: job_w1_windowed(env, paths, False), 1, "bench-w1-rolling") for _ in range(args.runs))
            windowed = statistics.median(run_job(address, token, lambda env: job_w1_windowed(env, paths, True), 1, "bench-w1-sliding") for _ in range(args.runs))
            results["windows"] = {"rolling_rate": n_words / rolling, "sliding_rate": n_words / windowed, "sliding_vs_rolling": rolling / windowed}
        if not args.only or args.only == "latency":
            total = 200_000 // scale
            log("latency: peak throughput ...")
            peak = latency_run(address, token, None, total, 100)["throughput"]
            results["latency"] = {"peak_rate": peak, "runs": []}
            for timeout in (0, 100):
                log(f"latency at half of peak, buffer timeout {timeout} ms ...")
                results["latency"]["runs"].append(latency_run(address, token, peak / 2, total // 2, timeout))
        if not args.only or args.only == "savepoint":
            log("savepoint and restore of 1,000,000 keys ...")
            results["savepoint"] = savepoint_timing(address, token, 1_000_000)
        if not args.only or args.only == "recovery":
            results["recovery"] = []
            for keys in (1_000, 100_000, 1_000_000):
                log(f"recovery with {keys} keys ...")
                runs = [recovery_time(address, token, keys) for _ in range(args.runs)]
                best = sorted(runs, key=lambda r: r["recovery_ms"] if r["recovery_ms"] is not None else 1e12)
                results["recovery"].append(dict(best[len(best) // 2]))
    if not args.only or args.only == "failover":
        from flinkpy.errors import NotFoundError
        from flinkpy.ha.zookeeper_server import find_installation

        try:
            find_installation()
        except NotFoundError as e:
            log(f"JobManager failover: skipped ({e.message})")
        else:
            from flinkpy.ha.failover_benchmark import measure_failover

            log("JobManager failover (ZooKeeper session timeout 4 s) ...")
            results["failover"] = measure_failover(4000, args.runs)
    if args.only in (None, "w1", "w2"):
        log("first output of `flinkpy run examples/word_count.py` ...")
        results["first_output_s"] = statistics.median(first_output_latency() for _ in range(args.runs))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"flinkpy benchmark, {results['date']}, median of {args.runs} run(s){' (quick)' if args.quick else ''}")
    if "spark" in results:
        from flinkpy.benchmark_spark import report

        print(report(results["spark"]))
        return 0
    print(f"{'workload':10} {'loop':>12} {'flinkpy p1':>12} {'ratio':>6} {'flinkpy p2':>12} {'ratio':>6}")
    for name, e in results["workloads"].items():
        print(
            f"{name:10} {e['loop_rate'] / 1e3:>10.0f} k {e['p1_rate'] / 1e3:>10.0f} k {e['p1_ratio']:>6.2f} "
            f"{e['p2_rate'] / 1e3:>10.0f} k {e['p2_ratio']:>6.2f}   ({e['unit']})"
        )
    for name, e in results["workloads"].items():
        print(
            f"{name} p1 with checkpoints every 1 s: {e['p1_checkpointed_rate'] / 1e3:.0f} k ({e['p1_checkpointed_ratio']:.2f} of the loop, "
            f"{e['checkpointed_vs_off']:.2f} of checkpointing off)"
        )
        print(
            f"{name} p2 with checkpoints every 1 s: {e['p2_checkpointed_rate'] / 1e3:.0f} k ({e['p2_checkpointed_vs_off']:.2f} of checkpointing off); "
            f"{e['p2_checkpoints']} checkpoints, alignment max {e['p2_alignment_ms_max']} ms, {e['p2_alignment_bytes_max']} bytes processed while aligning"
        )
    for snap in results.get("snapshots", []):
        print(
            f"snapshot of {snap['keys']:>9} keys ({snap['state_bytes'] or 0:>10.0f} bytes): sync median {snap['sync_ms_median']:.2f} ms, "
            f"max {snap['sync_ms_max']:.2f} ms; async median {snap['async_ms_median']:.0f} ms  ({snap['checkpoints']} checkpoints)"
        )
    if "windows" in results:
        w = results["windows"]
        print(f"sliding windows 5 s / 1 s on W1: {w['sliding_rate'] / 1e3:.0f} k words/s; a rolling reduce: {w['rolling_rate'] / 1e3:.0f} k ({w['sliding_vs_rolling']:.2f} of it)")
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
        from flinkpy.benchmark_backends import report

        for line in report(results["backends"]):
            print(line)
    if "first_output_s" in results:
        print(f"flinkpy run -> first output: {results['first_output_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
