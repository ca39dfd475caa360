"""What the two Spark comparisons share in their results and reports: :mod:`.spark` (W1 and W2 in
one warm Spark session) and :mod:`.spark_shapes` (job shapes as whole processes) each set
flinkpy on Spark against a hand-written PySpark query, run by run.

>>> ratio(3.0, 2.0), ratio(None, 2.0)
(1.5, None)
>>> rate_text(123_456.0), rate_text(123_456.0, decimals=0), seconds_text(None)
('123.5 k', '123 k', '-')
>>> counted("w1", 2_000_000, words=True)
('w1, 2,000,000 words', <Unit.WORDS_PER_S: 'words/s'>)
"""

from __future__ import annotations

import statistics
from typing import Any

from flinkpy.benchmarks.report import Unit


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    """The median of ``key`` over the runs that measured it (None: none did)."""
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None where either is missing (or zero)."""
    return a / b if a and b else None


def rate_text(v: float | None, decimals: int = 1) -> str:
    """A rate in thousands per second, ``-`` where missing."""
    return "-" if v is None else f"{v / 1e3:.{decimals}f} k"


def seconds_text(v: float | None, decimals: int = 2) -> str:
    return "-" if v is None else f"{v:.{decimals}f} s"


def ratio_text(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def load_text(load_average: dict[str, Any]) -> str:
    """The machine's load averages at the start and the end of the comparison."""
    return ("load average (1, 5, 15 min) at the start " + " ".join(f"{x:.1f}" for x in load_average["start"])
            + ", at the end " + " ".join(f"{x:.1f}" for x in load_average.get("end", ())))


def counted(name: str, records: int, *, words: bool) -> tuple[str, Unit]:
    """A workload's row in the report tables, by the records it counts, and the unit of its rates."""
    return f"{name}, {records:,} {'words' if words else 'ints'}", Unit.WORDS_PER_S if words else Unit.INTS_PER_S
