"""The running sums of the scaling part (:mod:`~flinkpy.benchmarks.scaling`): the job and its
user functions, which the loop calls too.

Kept in a module of their own that imports next to nothing: the functions travel to the tasks
by reference, so every task process imports this module as it starts (a user's job file costs
its tasks no such import: its functions are pickled by value). Beside the scaling part's own
imports (the report, the ceiling's multiprocessing: 22 ms a task), the tasks' fixed CPU that
the part measures would be the benchmark's, not the engine's.
"""

from __future__ import annotations

from typing import Any

from flinkpy.benchmarks.workloads import add_counts

#: the keys of the running sums
KEYS = 1024


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
