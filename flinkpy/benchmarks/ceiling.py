"""What the machine's cores allow a job at parallelism p (the scaling part's ceiling).

A keyed job at parallelism p keeps 2p task processes busy. Whether 2p busy processes run p times
as fast as two depends on the machine more than on the job: cores that are hyperthreads share
one core's units, a chip under full load runs at a lower clock than with two cores busy, and a
machine of fewer cores than processes can only take turns. So the scaling part measures the
machine's own answer beside the job's: the plain loop of the running sums in 2p processes at
once, each over its share of 1..N, released together. The ceiling at p is the time of two such
processes over the time of 2p; the job's speed-up over p=1 is judged against it.

Each process also reports its CPU time: CPU per record that grows with p on this measure grows
from the machine (caches and cores shared), not from the job.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from flinkpy.benchmarks.workloads import add_counts


@dataclass(frozen=True)
class Ceiling:
    #: processes run at once (2p)
    processes: int
    #: seconds from the release to the last process done (median over the runs)
    wall_s: float
    #: CPU seconds of all processes per record, in nanoseconds (median over the runs)
    cpu_ns_per_record: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def share(count: int, index: int, processes: int) -> range:
    """The numbers of 1..count that process ``index`` of ``processes`` loops over.

    >>> [list(share(10, i, 3)) for i in range(3)]
    [[1, 2, 3], [4, 5, 6], [7, 8, 9, 10]]
    """
    lo = index * count // processes
    hi = (index + 1) * count // processes
    return range(lo + 1, hi + 1)


def loop_share(numbers: range, to_keyed: Callable[[int], Any], key: Callable[[Any], Any], keep: Callable[[Any], bool],
               start: dict[Any, Any] | None = None) -> int:
    """The running sums' loop (the same functions per record, the filter included) over some of
    the numbers, from the running values ``start``; returns how many sums the filter let through."""
    sums: dict[Any, Any] = dict(start or {})
    kept = 0
    for n in numbers:
        rec = to_keyed(n)
        k = key(rec)
        old = sums.get(k)
        new = rec if old is None else add_counts(old, rec)
        sums[k] = new
        if keep(new):
            kept += 1
    return kept


def _worker(numbers: range, functions: tuple, sums: dict[Any, Any], start: Any, results: Any) -> None:
    start.wait()
    began, cpu = time.monotonic(), time.process_time()
    loop_share(numbers, *functions, start=sums)
    results.put((began, time.monotonic(), time.process_time() - cpu, len(numbers)))


def run_once(count: int, processes: int, functions: tuple, sums: dict[Any, Any] | None = None) -> tuple[float, float]:
    """``processes`` forked loops over 1..count, released together: (seconds from the first
    loop's start to the last one's end, CPU seconds of all). Every time is taken inside the
    loops, on the system's monotonic clock: the first to run after the release starts the
    measure, whichever of the processes (this one included) waits for a core."""
    ctx = multiprocessing.get_context("fork")  # the functions and the filter's table come along
    start = ctx.Barrier(processes + 1)
    results = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(share(count, i, processes), functions, sums or {}, start, results), daemon=True)
               for i in range(processes)]
    for w in workers:
        w.start()
    try:
        start.wait(timeout=60)
        done = [results.get(timeout=600) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                w.kill()
    if sum(n for *_, n in done) != count:
        raise RuntimeError(f"the loops covered {sum(n for *_, n in done)} numbers, expected {count}")
    return max(end for _, end, _, _ in done) - min(began for began, _, _, _ in done), sum(cpu for _, _, cpu, _ in done)


def measure(parallelisms: list[int], count: int, runs: int, functions: tuple, log: Callable[[str], None],
            sums: dict[Any, Any] | None = None) -> dict[int, Ceiling]:
    """The ceiling's runs for each parallelism: 2p processes over 1..count (p=1 is always run,
    as the base of the ratio), every parallelism in turn within a run, as the jobs are. Each
    process's running values start at ``sums``: a process of 2p sums a 2p-th of each key's
    numbers, and CPython adds small ints faster than large ones, so without a start as large as
    the job's values more processes would each do cheaper work."""
    ps = sorted({1, *parallelisms})
    walls: dict[int, list[float]] = {p: [] for p in ps}
    cpus: dict[int, list[float]] = {p: [] for p in ps}
    for i in range(runs):
        log(f"scaling: the machine's ceiling: the loop in {', '.join(str(2 * p) for p in ps)} processes at once, run {i + 1} ...")
        for p in ps:
            wall, cpu = run_once(count, 2 * p, functions, sums)
            walls[p].append(wall)
            cpus[p].append(cpu)
    return {p: Ceiling(2 * p, statistics.median(walls[p]), statistics.median(cpus[p]) / count * 1e9) for p in ps}


def cores() -> dict[str, int | None]:
    """The machine's logical cores, its physical ones (None where the system does not say), and
    the cores this process may run on."""
    import psutil

    try:
        physical = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001 - some sandboxes hide the topology
        physical = None
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"logical": os.cpu_count(), "physical": physical, "usable": affinity}
