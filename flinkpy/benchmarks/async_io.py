"""Async I/O's throughput against a plain asyncio loop issuing the same requests.

The "remote call" is ``asyncio.sleep(DELAY_S)`` returning the record: a service that answers
in 5 ms whatever the load, so the ceiling is ``capacity / DELAY_S`` requests per second and
what is measured is what the engine costs around the requests. The loop is the best a single
Python process does with the same function and the same bound: ``capacity`` requests in
flight on one event loop (as many workers, pulling the numbers from one iterator), each result
collected. The job reads the same numbers
from a NumberSequenceSource at parallelism 1 into ``AsyncDataStream.unordered_wait`` (and
``ordered_wait``) with that capacity, and discards the results; its time is the job's net
runtime (task start-up included). Loop and job runs alternate, and the ratio reported is the
median of the runs' ratios (a change in the machine's load moves both sides of a run alike).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.common.async_functions import AsyncFunction

#: how long the remote call takes
DELAY_S = 0.005
CAPACITY = 100

RunJob = Callable[..., float]


class RemoteCall(AsyncFunction):
    """The benchmark's request: answers with the record after DELAY_S."""

    async def async_invoke(self, value: Any) -> list:
        await asyncio.sleep(DELAY_S)
        return [value]


def loop_seconds(n: int, capacity: int = CAPACITY) -> float:
    """Seconds a plain asyncio loop takes for ``n`` requests, ``capacity`` in flight at most."""
    fn = RemoteCall()

    async def main() -> list:
        # ``capacity`` workers pulling from one iterator: the leanest way to keep that many in flight
        numbers = iter(range(1, n + 1))
        results: list = []

        async def worker() -> None:
            for v in numbers:
                results.extend(await fn.async_invoke(v))

        await asyncio.gather(*(worker() for _ in range(capacity)))
        return results

    started = time.perf_counter()
    out = asyncio.run(main())
    assert len(out) == n
    return time.perf_counter() - started


def job(env: Any, n: int, *, ordered: bool, capacity: int = CAPACITY) -> None:
    from flinkpy.common import Time, WatermarkStrategy
    from flinkpy.connectors.print_sink import DiscardingSink
    from flinkpy.datastream.async_data_stream import AsyncDataStream
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    numbers = env.from_source(NumberSequenceSource(1, n), WatermarkStrategy.no_watermarks(), "numbers")
    wait = AsyncDataStream.ordered_wait if ordered else AsyncDataStream.unordered_wait
    wait(numbers, RemoteCall(), Time.seconds(30), capacity=capacity).sink_to(DiscardingSink())


def measure(address: str, token: str, runs: int, run_job: RunJob, log: Callable[[str], None], *, quick: bool = False) -> dict[str, Any]:
    n = 10_000 if quick else 50_000
    out: dict[str, Any] = {"requests": n, "capacity": CAPACITY, "delay_ms": DELAY_S * 1000, "ceiling_rate": CAPACITY / DELAY_S}
    loops: list[float] = []
    secs: dict[str, list[float]] = {"unordered": [], "ordered": []}
    for i in range(runs):
        log(f"async I/O: plain asyncio loop, then unordered and ordered waits at p=1, run {i + 1} ...")
        loops.append(loop_seconds(n))
        for mode in secs:
            secs[mode].append(run_job(address, token, lambda env, o=(mode == "ordered"): job(env, n, ordered=o), 1, f"bench-async-{mode}"))
    out["loop_rate"] = n / statistics.median(loops)
    for mode, s in secs.items():
        ratios = [lo / t for lo, t in zip(loops, s)]
        out[f"{mode}_rate"] = n / statistics.median(s)
        out[f"{mode}_ratio"] = statistics.median(ratios)
        out[f"{mode}_ratios"] = [round(r, 3) for r in ratios]
    return out


def report(result: dict[str, Any]) -> list[str]:
    if not result:
        return []
    r = result
    return [
        f"async I/O ({r['requests']} requests of {r['delay_ms']:.0f} ms, capacity {r['capacity']}, ceiling {r['ceiling_rate'] / 1e3:.0f} k/s): "
        f"plain asyncio loop {r['loop_rate'] / 1e3:.1f} k/s; unordered_wait p1 {r['unordered_rate'] / 1e3:.1f} k/s "
        f"({r['unordered_ratio']:.2f} of the loop; runs {', '.join(f'{x:.2f}' for x in r['unordered_ratios'])}); "
        f"ordered_wait p1 {r['ordered_rate'] / 1e3:.1f} k/s ({r['ordered_ratio']:.2f}; runs {', '.join(f'{x:.2f}' for x in r['ordered_ratios'])})"
    ]


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (table ``async``): the plain loop beside each mode."""
    if not result:
        return []
    out = cells("async", "plain asyncio loop", result, [("rate", "loop_rate", Unit.RECORDS_PER_S)])
    for mode in ("unordered", "ordered"):
        out += cells("async", f"{mode}_wait, p=1", result, [
            ("rate", f"{mode}_rate", Unit.RECORDS_PER_S), ("of the loop", f"{mode}_ratio", Unit.RATIO),
        ], spreads={f"{mode}_ratio": f"{mode}_ratios"})
    return out
