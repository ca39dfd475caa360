"""How the engine scales with parallelism (``--only scaling --parallelism 1,2,4,8``).

Two jobs at each parallelism asked for, on one embedded cluster with a slot per parallel
pipeline:

- running sums: a ``NumberSequenceSource`` of 1..N, a map to ``(n % 1024, n)``, ``key_by`` the
  first field, a running ``reduce``, and a filter that lets through each key's final sum, which
  is printed (1,024 lines; the cluster's standard output is discarded);
- W1, the word count, read by a ``FileSource`` from 16 files holding W1's lines five times
  over (10,000,000 words, as many as the sums' numbers).

Each job's time is its net runtime as the JobManager measures it (RUNNING to FINISHED), the
figure the CLI prints as "Job Runtime". Per parallelism the report has the runtime, the rate,
the rate over the plain loop (the same functions called in one process, run in turns with the
jobs) and the speed-up over p=1; and, at the largest parallelism and at p=8, the running sums
with exactly-once checkpoints every second against none. The speed-up a machine allows is
bounded by its cores: a keyed job at parallelism p runs 2p task processes, so the machine's own
ceiling is measured too (:mod:`~flinkpy.benchmarks.ceiling`: the loop in 2p processes at once
against two) and each speed-up is also given as a share of it. Per parallelism, one more run of
the running sums is watched: by :class:`~flinkpy.benchmarks.footprint.TaskFootprint`, each
task's unique memory and open sockets, which grow with p (a hash edge is p x p channels)
whatever the cores; and by its tasks' own metrics (:mod:`~flinkpy.benchmarks.task_costs`), each
vertex's CPU per record, its busiest subtask's CPU, its busy, idle and back-pressured shares,
and the time the job took to get every task running: the per-process costs that a machine of
two cores can measure for one of sixteen.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping

from flinkpy.benchmarks import ceiling, task_costs
from flinkpy.benchmarks.footprint import TaskFootprint
from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.benchmarks.sums import KEYS, FinalSum, final_sum, first, job_sums, to_keyed
from flinkpy.benchmarks.workloads import LAST_CHECKPOINT_STATS, LAST_JOB_ID, completed_checkpoints, job_w1, loop_w1, spread_lines
from flinkpy.state.key_groups import DEFAULT_MAX_PARALLELISM, KeyGroupAssigner, compute_operator_index_for_key_group

#: the numbers of the run that measures each task's fixed CPU (a few per key)
TINY = 4 * KEYS
#: W1 is read from this many files (a split each, so p sources share them evenly up to p=16)
FILES = 16
#: W1's lines, this many times over: as many words as the running sums have numbers (10 M, or
#: 1 M with --quick), so that at the parallelisms of a 16-core machine the job still runs for
#: seconds and its speed-up measures throughput, not the seconds that starting 2p tasks takes
W1_TIMES = 5


def loop_sums(count: int) -> tuple[int, float]:
    """The running sums in one process: the same functions per record, the filter included."""
    started = time.perf_counter()
    printed = ceiling.loop_share(range(1, count + 1), to_keyed, first, FinalSum(count))
    if printed != min(count, KEYS):
        raise RuntimeError(f"the loop printed {printed} final sums, expected {min(count, KEYS)}")
    return count, time.perf_counter() - started


def checkpointed_at(parallelisms: list[int]) -> list[int]:
    """Where the running sums also run with checkpoints: the largest parallelism, and p=8 when
    it was run (the 16-core goal's, where the job's processes fill the cores).

    >>> checkpointed_at([1, 2, 4, 8]), checkpointed_at([1, 2, 4, 8, 12]), checkpointed_at([1, 2])
    ([8], [8, 12], [2])
    """
    return sorted({max(parallelisms)} | ({8} & set(parallelisms)))


def write_files(lines: list[str], directory: Path) -> list[str]:
    """W1's lines spread round-robin over :data:`FILES` files."""
    return spread_lines(lines, directory, FILES, "scaling-words")


def keys_bound(records_per_key: Mapping[Any, int], parallelism: int, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> float:
    """The speed-up over p=1 that a job's keys allow its keyed tasks at ``parallelism``: all its
    records over those of its busiest keyed subtask, each key where the engine sends it (its key
    group's subtask). However many cores, a keyed chain that bounds the job at p=1 runs no
    faster than that.

    >>> keys_bound({k: 1 for k in range(1024)}, 1), keys_bound({"a": 9, "b": 1}, 2) in (1.0, 10 / 9)
    (1.0, True)
    """
    assign = KeyGroupAssigner(max_parallelism)
    per_subtask: Counter[int] = Counter()
    for key, records in records_per_key.items():
        per_subtask[compute_operator_index_for_key_group(max_parallelism, parallelism, assign(key))] += records
    return sum(per_subtask.values()) / max(per_subtask.values())


def measure(parallelisms: list[int], lines: list[str], n_words: int, count: int, runs: int, run_job: Callable[..., float],
            log: Callable[[str], None]) -> dict[str, Any]:
    """Both jobs at each parallelism, ``runs`` times each, the loops in turns with the p=1 jobs
    (a change in the machine's load moves both sides of a ratio alike); medians throughout.
    W1 reads ``lines`` (``n_words`` words) :data:`W1_TIMES` times over."""
    from flinkpy.cluster import EmbeddedCluster

    # each shape's records per key (the proportions are what count): the sums' keys are even, W1's
    # words a Zipf sample
    keys = {"sums": dict.fromkeys(range(KEYS), 1), "w1": Counter(word for line in lines for word in line.split())}
    lines, n_words = lines * W1_TIMES, n_words * W1_TIMES

    result: dict[str, Any] = {"cores": os.cpu_count() or 1, "machine_cores": ceiling.cores(), "parallelisms": parallelisms, "shapes": {}}
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
                                     "speedup": base / s if base else None, "runtimes_s": [round(x, 3) for x in secs[p]],
                                     "keys_bound": keys_bound(keys[name], p)}
            result["shapes"][name] = entry
        for p in parallelisms:
            log(f"scaling sums: p={p}, watching each task's memory, sockets and CPU ...")
            name = f"bench-scaling-sums-p{p}-footprint"
            with TaskFootprint() as watch:
                run_job(address, token, shapes["sums"][2], p, name)
            seen, per_p = watch.result(), result["shapes"]["sums"]["per_p"][p]
            if seen is not None:
                per_p["footprint"] = seen.to_json()
            full = task_costs.task_costs(task_costs.fetch(address, token, LAST_JOB_ID[name]), count)
            # the same job over a few numbers: each task's fixed CPU, apart from the records'
            tiny_name = f"bench-scaling-sums-p{p}-tiny"
            run_job(address, token, lambda env: job_sums(env, TINY), p, tiny_name)
            tiny = task_costs.task_costs(task_costs.fetch(address, token, LAST_JOB_ID[tiny_name]), TINY)
            per_p["costs"] = task_costs.net_of(full, tiny, count, TINY).to_json()
        result["checkpointed"] = []
        for top in checkpointed_at(parallelisms):
            log(f"scaling sums: p={top} with exactly-once checkpoints every 1 s ...")
            secs = statistics.median(run_job(address, token, shapes["sums"][2], top, f"bench-scaling-sums-p{top}-cp", checkpoint_ms=1000)
                                     for _ in range(runs))
            off = result["shapes"]["sums"]["per_p"][top]["runtime_s"]
            result["checkpointed"].append({"parallelism": top, "rate": count / secs, "vs_off": off / secs,
                                           **completed_checkpoints(LAST_CHECKPOINT_STATS.get(f"bench-scaling-sums-p{top}-cp", {}))})
    # the machine's own ceiling, after the jobs (no cluster running beside it)
    # each process's sums start at half each key's final sum: values as large as the job's
    halfway = {k: (k, final_sum(k, count) // 2) for k in range(KEYS)}
    machine = ceiling.measure(parallelisms, count, runs, (to_keyed, first, FinalSum(count)), log, halfway)
    result["ceiling"] = {p: c.to_json() for p, c in machine.items()}
    for entry in result["shapes"].values():
        for p, f in entry["per_p"].items():
            f["ceiling"] = machine[1].wall_s / machine[p].wall_s
            f["of_ceiling"] = f["speedup"] / f["ceiling"] if f["speedup"] is not None else None
    return result


SHAPE_NAMES = {"sums": "running sums", "w1": "W1"}


def report(result: dict[str, Any]) -> list[str]:
    if not result:
        return []
    out = [f"scaling on {result['cores']} cores (net runtime, the CLI's \"Job Runtime\"; keys: the speed-up the busiest "
           "keyed subtask's share of the records allows; the machine's ceiling: the loop in 2p processes at once against two):",
           f"{'job':14} {'p':>3} {'runtime':>9} {'rate':>12} {'of loop':>8} {'speed-up':>9} {'keys':>6} {'ceiling':>8} {'of it':>6}"]
    for name, e in result["shapes"].items():
        out.append(f"{SHAPE_NAMES[name]:14} {'loop':>3} {'':>9} {e['loop_rate'] / 1e3:>10.0f} k {1.0:>8.2f} {'':>9}")
        for p, f in e["per_p"].items():
            speedup = f"{f['speedup']:.2f}" if f["speedup"] is not None else "–"
            top = f"{f['ceiling']:>8.2f}" if f.get("ceiling") is not None else f"{'–':>8}"
            share = f"{f['of_ceiling']:>6.2f}" if f.get("of_ceiling") is not None else f"{'–':>6}"
            keys = f"{f['keys_bound']:>6.2f}" if f.get("keys_bound") is not None else f"{'–':>6}"
            out.append(f"{SHAPE_NAMES[name]:14} {p:>3} {f['runtime_s']:>8.2f}s {f['rate'] / 1e3:>10.0f} k {f['ratio']:>8.2f} {speedup:>9} "
                       f"{keys} {top} {share}")
    sums = result["shapes"].get("sums", {}).get("per_p", {})
    if any("footprint" in f for f in sums.values()):
        out.append(f"{'each task of the running sums':30} {'p':>3} {'tasks':>6} {'MiB (USS)':>10} {'max':>6} {'sockets':>8} {'max':>4} {'job':>5}")
        for p, f in sums.items():
            fp = f.get("footprint")
            if fp:
                out.append(f"{'':30} {p:>3} {fp['tasks']:>6} {fp['uss'] / 2**20:>10.1f} {fp['uss_max'] / 2**20:>6.1f} {fp['sockets']:>8.0f} "
                           f"{fp['sockets_max']:>4} {fp['sockets_total']:>5}")
    if any("costs" in f for f in sums.values()):
        out.append(f"{'where the running sums went':30} {'p':>3} {'CPU/rec':>8} {'fixed':>7} {'busiest':>8} {'busy':>5} {'idle':>5} {'bp':>5} "
                   f"{'rec/buf':>8}")
        for p, f in sums.items():
            costs = f.get("costs")
            if costs:
                for v in costs["vertices"]:
                    fixed = f"{v['fixed_cpu_s'] * 1000:>5.0f}ms" if v.get("fixed_cpu_s") is not None else f"{'–':>7}"
                    per_buffer = f"{v['records_per_buffer']:>8.0f}" if v.get("records_per_buffer") is not None else f"{'–':>8}"
                    out.append(f"  {v['name'][:28]:28} {p:>3} {v['cpu_ns_per_record']:>6.0f}ns {fixed} {v['busiest_cpu_s']:>7.2f}s "
                               f"{v['busy']:>5.0%} {v['idle']:>5.0%} {v['backpressured']:>5.0%} {per_buffer}")
                out.append(f"  {'':28} {p:>3} tasks running {costs['start_s']:.2f} s after the job")
    for p, c in result.get("ceiling", {}).items():
        out.append(f"the loop in {c['processes']} processes at once: {c['wall_s']:.2f} s, {c['cpu_ns_per_record']:.0f} ns of CPU per record")
    for cp in result.get("checkpointed", []):
        took = (f"; {cp['checkpoints']} checkpoints, {cp['checkpoint_ms']:.0f} ms each (median), alignment at most "
                f"{cp['alignment_ms_max']:.0f} ms") if cp.get("checkpoint_ms") is not None else ""
        out.append(f"running sums p={cp['parallelism']} with exactly-once checkpoints every 1 s: {cp['rate'] / 1e3:.0f} k records/s, "
                   f"{cp['vs_off']:.2f} of checkpointing off{took}")
    return out


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (tables ``scaling``, ``footprint`` and ``task_costs``; rows name the
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
                ("runtime", "runtime_s", Unit.S), ("the machine's ceiling", "ceiling", Unit.RATIO),
                ("speed-up of the ceiling", "of_ceiling", Unit.RATIO), ("speed-up the keys allow", "keys_bound", Unit.RATIO),
            ], spreads={"runtime_s": "runtimes_s"} if len(f["runtimes_s"]) > 1 else None)
            costs = f.get("costs")
            if costs:
                out += cells("scaling", f"{label}, p={p}", costs, [("every task running after", "start_s", Unit.S)])
                for v in costs["vertices"]:
                    v = {**v, "fixed_cpu_ms": v["fixed_cpu_s"] * 1000 if v.get("fixed_cpu_s") is not None else None}
                    out += cells("task_costs", f"{label}, p={p}: {v['name']}", v, [
                        ("CPU per record", "cpu_ns_per_record", Unit.NS), ("fixed CPU per task", "fixed_cpu_ms", Unit.MS),
                        ("busiest subtask's CPU", "busiest_cpu_s", Unit.S), ("records per buffer sent", "records_per_buffer", Unit.COUNT),
                        ("bytes per buffer sent", "bytes_per_buffer", Unit.BYTES), ("busy", "busy", Unit.SHARE), ("idle", "idle", Unit.SHARE), ("back-pressured", "backpressured", Unit.SHARE),
                    ])
            if f.get("footprint"):
                out += cells("footprint", f"{label}, p={p}", f["footprint"], [
                    ("task processes", "tasks", Unit.COUNT), ("memory per task (USS, median)", "uss", Unit.BYTES),
                    ("memory per task (USS, largest)", "uss_max", Unit.BYTES), ("sockets per task (median)", "sockets", Unit.COUNT),
                    ("sockets per task (largest)", "sockets_max", Unit.COUNT), ("sockets of the job", "sockets_total", Unit.COUNT),
                ])
    for p, c in result.get("ceiling", {}).items():
        out += cells("task_costs", f"plain loop, {cores} cores, {c['processes']} processes at once", c, [
            ("CPU per record", "cpu_ns_per_record", Unit.NS), ("runtime", "wall_s", Unit.S),
        ])
    for cp in result.get("checkpointed", []):
        out += cells("scaling", f"running sums, {cores} cores, p={cp['parallelism']}, exactly-once checkpoints every 1 s", cp, [
            ("rate", "rate", Unit.RECORDS_PER_S), ("checkpoints every 1 s / off", "vs_off", Unit.RATIO),
            ("checkpoints completed", "checkpoints", Unit.COUNT), ("a checkpoint, trigger to last acknowledgement", "checkpoint_ms", Unit.MS),
            ("longest alignment", "alignment_ms_max", Unit.MS),
        ])
    return out
