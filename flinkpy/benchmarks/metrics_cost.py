"""What live metrics cost: W1 and W2 with ``metrics.enabled`` true and false, in one run.

The runs alternate (on, off, on, off, ...) so that a machine that slows down or speeds up during
the measurement affects both sides alike; the median of each side is reported, their ratio, and
the median of the ratios of the pairs that ran back to back.
Two figures per side: records per second of net runtime (what the issue's target is about),
and the CPU time the job's task processes used per million records — the cost itself, which
other load on a shared machine disturbs less than wall time; and the share of the tasks' CPU
that their metric reporter threads used (measured with ``time.thread_time``: no noise). Tasks report every
``metrics.fetcher.update-interval`` (the default, 1 s) when metrics are on.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.benchmarks.workloads import LAST_JOB_ID, WORKLOAD_ROWS

#: a workload as the benchmark's __main__ defines it: (records, loop, job builder, unit)
Workload = tuple[int, Callable[[], float], Callable[[Any], None], str]
RunJob = Callable[..., float]


def _task_cpu_ms(address: str, token: str, name: str) -> tuple[float, float]:
    """CPU milliseconds of every task process of the last job called ``name``, and of that the
    part their metric reporters used."""
    from flinkpy.network.rest_client import RestClient

    doc = RestClient(address, token).job(LAST_JOB_ID[name])
    subtasks = [s.get("metrics") or {} for v in doc["vertices"] for s in v["subtasks"]]
    return sum(float(m.get("cpu_ms", 0)) for m in subtasks), sum(float(m.get("metrics_cpu_ms", 0)) for m in subtasks)


def measure(address: str, token: str, workloads: dict[str, Workload], runs: int, run_job: RunJob,
            log: Callable[[str], None], parallelism: int = 2) -> dict[str, Any]:
    """For each workload, with metrics on and off (medians of ``runs``): records/s, task CPU
    ms per million records, and on/off of both."""
    out: dict[str, Any] = {"parallelism": parallelism}
    for name, (n, _, build, unit) in workloads.items():
        secs: dict[bool, list[float]] = {True: [], False: []}
        cpu: dict[bool, list[float]] = {True: [], False: []}
        reporting: list[float] = []
        for i in range(runs):
            for enabled in (True, False) if i % 2 == 0 else (False, True):
                side = "on" if enabled else "off"
                log(f"{name}: flinkpy p={parallelism}, metrics {side} (run {i + 1}/{runs}) ...")
                job = f"bench-{name}-metrics-{side}"
                secs[enabled].append(run_job(address, token, build, parallelism, job,
                                             settings={"metrics.enabled": "true" if enabled else "false"}))
                task_ms, reporter_ms = _task_cpu_ms(address, token, job)
                cpu[enabled].append(task_ms / (n / 1e6))
                if enabled:
                    reporting.append(reporter_ms / task_ms if task_ms else 0.0)
        on, off = n / statistics.median(secs[True]), n / statistics.median(secs[False])
        cpu_on, cpu_off = statistics.median(cpu[True]), statistics.median(cpu[False])
        # each run's on/off pair ran back to back: the median of their ratios cancels slow drift
        paired = statistics.median(s_off / s_on for s_on, s_off in zip(secs[True], secs[False]))
        out[name] = {"unit": unit, "on_rate": on, "off_rate": off, "on_vs_off": on / off, "on_vs_off_paired": paired,
                     "on_cpu_ms_per_million": cpu_on, "off_cpu_ms_per_million": cpu_off, "cpu_on_vs_off": cpu_on / cpu_off,
                     "reporter_cpu_share": statistics.median(reporting)}
    return out


def report(result: dict[str, Any]) -> list[str]:
    p = result["parallelism"]
    return [
        f"{name} p{p} metrics on: {e['on_rate'] / 1e3:.0f} k, off: {e['off_rate'] / 1e3:.0f} k {e['unit']} "
        f"(on/off {e['on_vs_off']:.3f}, paired {e['on_vs_off_paired']:.3f}); task CPU per 1M records on: {e['on_cpu_ms_per_million']:.0f} ms, "
        f"off: {e['off_cpu_ms_per_million']:.0f} ms (on/off {e['cpu_on_vs_off']:.3f}); "
        f"the metric reporters' own share of the tasks' CPU: {e['reporter_cpu_share'] * 100:.3f}%"
        for name, e in result.items() if name != "parallelism"
    ]


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (table ``metrics``)."""
    p = result["parallelism"]
    out: list[Figure] = []
    for name, e in result.items():
        if name == "parallelism":
            continue
        rate = Unit(e["unit"])
        out += cells("metrics", f"{WORKLOAD_ROWS[name]}, p={p}", e, [
            ("metrics on", "on_rate", rate), ("metrics off", "off_rate", rate), ("on / off", "on_vs_off", Unit.RATIO),
            ("on / off, back-to-back pairs", "on_vs_off_paired", Unit.RATIO),
            ("task CPU per 10^6 records, on", "on_cpu_ms_per_million", Unit.MS),
            ("task CPU per 10^6 records, off", "off_cpu_ms_per_million", Unit.MS),
            ("task CPU on / off", "cpu_on_vs_off", Unit.RATIO), ("reporters' share of task CPU", "reporter_cpu_share", Unit.SHARE),
        ])
    return out
