"""Records/s into an Iceberg table: the IcebergSink with checkpoints every 1 s against pyiceberg
appends of the same batches by hand.

The job reads ``n`` numbers from a NumberSequenceSource at parallelism 1, maps each to
``(n, n*n)`` and writes them through the IcebergSink (exactly-once, one snapshot per checkpoint)
into a fresh table of a SQL catalog on sqlite with a ``file://`` warehouse; its time is the
job's net runtime (task start-up and the import of pyiceberg in the sink's task included). The
batches are what the job committed: the ``added-records`` of each snapshot it made. By hand is
the best a Python program does with pyiceberg alone: the same records as Python tuples, each
batch turned into an Arrow table and appended (``Table.append``, one snapshot each) to a second
fresh table, timed from the first batch to the last commit. Job and hand runs alternate, and
the ratio reported is the median of the runs' ratios.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, cells

CHECKPOINT_MS = 1000
RunJob = Callable[..., float]


def square(n: int) -> tuple[int, int]:
    return (n, n * n)


def _catalog(root: Path) -> dict[str, str]:
    from pyiceberg.catalog import load_catalog

    (root / "warehouse").mkdir(parents=True)
    properties = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    load_catalog("default", **properties).create_namespace("bench")
    return properties


def _create(properties: dict[str, str], name: str) -> Any:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    schema = Schema(NestedField(1, "n", LongType(), required=True), NestedField(2, "sq", LongType(), required=False))
    return load_catalog("default", **properties).create_table(f"bench.{name}", schema)


def job(env: Any, n: int, properties: dict[str, str], table: str) -> None:
    from flinkpy.common import Types, WatermarkStrategy
    from flinkpy.connectors.iceberg import IcebergSink
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    numbers = env.from_source(NumberSequenceSource(1, n), WatermarkStrategy.no_watermarks(), "numbers")
    squares = numbers.map(square, output_type=Types.TUPLE([Types.LONG(), Types.LONG()]))
    squares.sink_to(IcebergSink.builder().set_catalog_properties(properties).set_table(f"bench.{table}").build())


def committed_batches(table: Any) -> list[int]:
    """Records per snapshot, oldest first."""
    return [int(s.summary.additional_properties["added-records"]) for s in table.metadata.snapshots]


def by_hand_seconds(table: Any, batches: list[int]) -> float:
    """Seconds pyiceberg alone takes to append ``batches`` (sizes) of the squares, one snapshot each."""
    import pyarrow as pa

    schema = table.schema().as_arrow()
    started = time.perf_counter()
    first = 1
    for size in batches:
        records = [square(v) for v in range(first, first + size)]
        table.append(pa.Table.from_pylist([{"n": a, "sq": b} for a, b in records], schema=schema))
        first += size
    return time.perf_counter() - started


def measure(address: str, token: str, runs: int, run_job: RunJob, log: Callable[[str], None], *, quick: bool = False) -> dict[str, Any]:
    n = 20_000 if quick else 200_000
    out: dict[str, Any] = {"records": n, "checkpoint_ms": CHECKPOINT_MS}
    jobs: list[float] = []
    hands: list[float] = []
    snapshots: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        properties = _catalog(Path(tmp))
        for i in range(runs):
            log(f"iceberg: {n} records through the IcebergSink, checkpoints every {CHECKPOINT_MS} ms, p=1, run {i + 1} ...")
            _create(properties, f"sink{i}")
            jobs.append(run_job(address, token, lambda env, t=f"sink{i}": job(env, n, properties, t), 1, "bench-iceberg",
                                checkpoint_ms=CHECKPOINT_MS))
            from pyiceberg.catalog import load_catalog

            catalog = load_catalog("default", **properties)
            batches = committed_batches(catalog.load_table(f"bench.sink{i}"))
            if sum(batches) != n:
                raise RuntimeError(f"the job committed {sum(batches)} of {n} records: {batches}")
            snapshots.append(len(batches))
            log(f"iceberg: the same {len(batches)} batches appended by hand with pyiceberg ...")
            hands.append(by_hand_seconds(_create(properties, f"hand{i}"), batches))
    ratios = [h / j for h, j in zip(hands, jobs)]
    out.update(
        sink_rate=n / statistics.median(jobs), by_hand_rate=n / statistics.median(hands), ratio=statistics.median(ratios),
        ratios=[round(r, 3) for r in ratios], snapshots=snapshots,
    )
    return out


def report(result: dict[str, Any]) -> list[str]:
    """One line for people: both rates and the ratio's runs (none without a result)."""
    runs = ", ".join(f"{x:.2f}" for x in result.get("ratios", ()))
    line = (f"Iceberg ({result.get('records')} records, checkpoints every {CHECKPOINT_MS} ms, snapshots per run "
            f"{result.get('snapshots')}): IcebergSink p1 {result.get('sink_rate', 0) / 1e3:.1f} k/s; pyiceberg appends of the "
            f"same batches by hand {result.get('by_hand_rate', 0) / 1e3:.1f} k/s; the sink at {result.get('ratio', 0):.2f} "
            f"of by hand (runs {runs})")
    return [line] if result else []


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (table ``iceberg``): by hand, then the sink."""
    rows = [("pyiceberg appends by hand", [("rate", "by_hand_rate", Unit.RECORDS_PER_S)]),
            ("IcebergSink, p=1, checkpoints every 1 s", [("rate", "sink_rate", Unit.RECORDS_PER_S), ("of by hand", "ratio", Unit.RATIO)])]
    return [f for row, columns in rows for f in cells("iceberg", row, result, columns, spreads={"ratio": "ratios"})]
