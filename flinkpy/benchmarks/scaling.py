"""How the engine scales with parallelism (``--only scaling --parallelism 1,2,4,8``).

Two jobs at each parallelism asked for, on one embedded cluster with a slot per parallel
pipeline:

- running sums: a ``NumberSequenceSource`` of 1..N, a map to ``(n % 1024, n)``, ``key_by`` the
  first field, a running ``reduce``, and a filter that lets through each key's final sum, which
  is printed (1,024 lines; the cluster's standard output is discarded);
- W1, the word count, read by a ``FileSource`` from 16 files.

Each job's time is its net runtime as the JobManager measures it (RUNNING to FINISHED), the
figure the CLI prints as "Job Runtime". Per parallelism the report has the runtime, the rate,
the rate over the plain loop (the same functions called in one process, run in turns with the
jobs) and the speed-up over p=1; and, at the largest parallelism, the running sums with
exactly-once checkpoints every second against none. The speed-up a machine allows is bounded by
its cores: a keyed job at parallelism p runs 2p task processes. Per parallelism, one more run of
the running sums is watched by :class:`~flinkpy.benchmarks.footprint.TaskFootprint`: each task's
unique memory and open sockets, which grow with p (a hash edge is p x p channels) whatever the
cores.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from flinkpy.benchmarks.footprint import TaskFootprint
from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.benchmarks.workloads import add_counts, job_w1, loop_w1, spread_lines

#: the keys of the running sums
KEYS = 1024
#: W1 is read from this many files (a split each, so p sources share them evenly up to p=16)
FILES = 16


# -- the user functions of the running sums, shared by the job and the loop -------------------


def to_keyed(n: int) -> tuple[int, int]:
    return (n % KEYS, n)


def first(pair: tuple[int, int]) -> int:
    return pair[0]


class FinalSum:
    """The filter: true for a key's sum once it has summed every number of 1..N with that key
    (the closed form of an arithmetic series), so each key's final value is printed once."""

    def __init__(self, count: int):
        self.final = {k: final_sum(k, count) for k in range(KEYS)}

    def __call__(self, pair: tuple[int, int]) -> bool:
        return self.final[pair[0]] == pair[1]


def final_sum(key: int, count: int) -> int:
    """The sum of the n in 1..count with n % KEYS == key."""
    start = key if key else KEYS
    if start > count:
        return 0
    terms = (count - start) // KEYS + 1
    return terms * (2 * start + (terms - 1) * KEYS) // 2


def loop_sums(count: int) -> tuple[int, float]:
    """The running sums in one process: the same functions per record, the filter included."""
    started = time.perf_counter()
    keep = FinalSum(count)
    sums: dict[int, Any] = {}
    printed = 0
    for n in range(1, count + 1):
        rec = to_keyed(n)
        k = first(rec)
        old = sums.get(k)
        new = rec if old is None else add_counts(old, rec)
        sums[k] = new
        if keep(new):
            printed += 1
    if printed != min(count, KEYS):
        raise RuntimeError(f"the loop printed {printed} final sums, expected {min(count, KEYS)}")
    return count, time.perf_counter() - started


def job_sums(env: Any, count: int) -> None:
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    (
        env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers")
        .map(to_keyed)
        .key_by(first)
        .reduce(add_counts)
        .filter(FinalSum(count))
        .print()
    )


def write_files(lines: list[str], directory: Path) -> list[str]:
    """W1's lines spread round-robin over :data:`FILES` files."""
    return spread_lines(lines, directory, FILES, "scaling-words")


def measure(parallelisms: list[int], lines: list[str], n_words: int, count: int, runs: int, run_job: Callable[..., float],
            log: Callable[[str], None]) -> dict[str, Any]:
    """Both jobs at each parallelism, ``runs`` times each, the loops in turns with the p=1 jobs
    (a change in the machine's load moves both sides of a ratio alike); medians throughout."""
    from flinkpy.cluster import EmbeddedCluster

    result: dict[str, Any] = {"cores": os.cpu_count() or 1, "parallelisms": parallelisms, "shapes": {}}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(slots=max(parallelisms), job_stdout=subprocess.DEVNULL) as cluster:
        address, token = cluster.rest_address, cluster.token()
        paths = write_files(lines, Path(tmp))
        shapes: dict[str, tuple[int, Callable[[], float], Callable[[Any], None], str]] = {
            "sums": (count, lambda: loop_sums(count)[1], lambda env: job_sums(env, count), "records/s"),
            "w1": (n_words, lambda: loop_w1(lines)[1], lambda env: job_w1(env, paths), "words/s"),
        }
        for name, (n, loop, build, unit) in shapes.items():
            loops: list[float] = []
            secs: dict[int, list[float]] = {p: [] for p in parallelisms}
            for i in range(runs):
                log(f"scaling {name}: loop, then p={','.join(map(str, parallelisms))}, run {i + 1} ...")
                loops.append(loop())
                for p in parallelisms:
                    secs[p].append(run_job(address, token, build, p, f"bench-scaling-{name}-p{p}"))
            loop_s = statistics.median(loops)
            entry: dict[str, Any] = {"records": n, "unit": unit, "loop_rate": n / loop_s, "per_p": {}}
            base = statistics.median(secs[parallelisms[0]]) if parallelisms[0] == 1 else None
            for p in parallelisms:
                s = statistics.median(secs[p])
                entry["per_p"][p] = {"runtime_s": s, "rate": n / s, "ratio": loop_s / s,
                                     "speedup": base / s if base else None, "runtimes_s": [round(x, 3) for x in secs[p]]}
            result["shapes"][name] = entry
        for p in parallelisms:
            log(f"scaling sums: p={p}, watching each task's memory and sockets ...")
            with TaskFootprint() as watch:
                run_job(address, token, shapes["sums"][2], p, f"bench-scaling-sums-p{p}-footprint")
            seen = watch.result()
            if seen is not None:
                result["shapes"]["sums"]["per_p"][p]["footprint"] = seen.to_json()
        top = max(parallelisms)
        log(f"scaling sums: p={top} with exactly-once checkpoints every 1 s ...")
        checkpointed = statistics.median(run_job(address, token, shapes["sums"][2], top, f"bench-scaling-sums-p{top}-cp", checkpoint_ms=1000)
                                         for _ in range(runs))
        off = result["shapes"]["sums"]["per_p"][top]["runtime_s"]
        result["checkpointed"] = {"parallelism": top, "rate": count / checkpointed, "vs_off": off / checkpointed}
    return result


SHAPE_NAMES = {"sums": "running sums", "w1": "W1"}


def report(result: dict[str, Any]) -> list[str]:
    if not result:
        return []
    out = [f"scaling on {result['cores']} cores (net runtime, the CLI's \"Job Runtime\"):",
           f"{'job':14} {'p':>3} {'runtime':>9} {'rate':>12} {'of loop':>8} {'speed-up':>9}"]
    for name, e in result["shapes"].items():
        out.append(f"{SHAPE_NAMES[name]:14} {'loop':>3} {'':>9} {e['loop_rate'] / 1e3:>10.0f} k {1.0:>8.2f} {'':>9}")
        for p, f in e["per_p"].items():
            speedup = f"{f['speedup']:.2f}" if f["speedup"] is not None else "–"
            out.append(f"{SHAPE_NAMES[name]:14} {p:>3} {f['runtime_s']:>8.2f}s {f['rate'] / 1e3:>10.0f} k {f['ratio']:>8.2f} {speedup:>9}")
    sums = result["shapes"].get("sums", {}).get("per_p", {})
    if any("footprint" in f for f in sums.values()):
        out.append(f"{'each task of the running sums':30} {'p':>3} {'tasks':>6} {'MiB (USS)':>10} {'max':>6} {'sockets':>8} {'max':>4} {'job':>5}")
        for p, f in sums.items():
            fp = f.get("footprint")
            if fp:
                out.append(f"{'':30} {p:>3} {fp['tasks']:>6} {fp['uss'] / 2**20:>10.1f} {fp['uss_max'] / 2**20:>6.1f} {fp['sockets']:>8.0f} "
                           f"{fp['sockets_max']:>4} {fp['sockets_total']:>5}")
    cp = result.get("checkpointed")
    if cp:
        out.append(f"running sums p={cp['parallelism']} with exactly-once checkpoints every 1 s: {cp['rate'] / 1e3:.0f} k records/s, "
                   f"{cp['vs_off']:.2f} of checkpointing off")
    return out


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (tables ``scaling`` and ``footprint``; rows name the
    job and the machine's cores, so that runs on different machines stand side by side)."""
    if not result:
        return []
    cores = result["cores"]
    out: list[Figure] = []
    for name, e in result["shapes"].items():
        label, rate = f"{SHAPE_NAMES[name]}, {cores} cores", Unit(e["unit"])
        out.append(Figure("scaling", f"{label}, plain loop", "rate", float(e["loop_rate"]), rate))
        for p, f in e["per_p"].items():
            out += cells("scaling", f"{label}, p={p}", f, [
                ("rate", "rate", rate), ("of the loop", "ratio", Unit.RATIO), ("speed-up over p=1", "speedup", Unit.RATIO),
                ("runtime", "runtime_s", Unit.S),
            ], spreads={"runtime_s": "runtimes_s"} if len(f["runtimes_s"]) > 1 else None)
            if f.get("footprint"):
                out += cells("footprint", f"{label}, p={p}", f["footprint"], [
                    ("task processes", "tasks", Unit.COUNT), ("memory per task (USS, median)", "uss", Unit.BYTES),
                    ("memory per task (USS, largest)", "uss_max", Unit.BYTES), ("sockets per task (median)", "sockets", Unit.COUNT),
                    ("sockets per task (largest)", "sockets_max", Unit.COUNT), ("sockets of the job", "sockets_total", Unit.COUNT),
                ])
    cp = result.get("checkpointed")
    if cp:
        out += cells("scaling", f"running sums, {cores} cores, p={cp['parallelism']}, exactly-once checkpoints every 1 s", cp, [
            ("rate", "rate", Unit.RECORDS_PER_S), ("checkpoints every 1 s / off", "vs_off", Unit.RATIO),
        ])
    return out
