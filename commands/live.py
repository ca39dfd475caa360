"""Live figures of a running job, for people: the rows `job show` and `top` print.

The JobManager serves the figures the tasks report (``GET /jobs/<id>``: each vertex's
``metrics`` by Flink's names, aggregated over its subtasks); this module only formats them,
so a table fits 80 columns: counts as 1.2K/3.4M, rates per second, times as percentages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from flinkpy.network.rest_client import JsonObject

#: Flink's "no watermark yet" (Long.MIN_VALUE)
MIN_WATERMARK = -(2**63)


def fmt_count(n: Any) -> str:
    """12, 1.2K, 3.4M, 5.6G: a count in at most five characters."""
    try:
        value = float(n)
    except (TypeError, ValueError):
        return "-"
    for unit in ("", "K", "M", "G", "T"):
        if abs(value) < 1000 or unit == "T":
            return f"{int(value)}" if unit == "" else f"{value:.1f}{unit}"
        value /= 1000
    return str(n)  # unreachable


def fmt_percent(ms_per_second: Any) -> str:
    """Milliseconds per second as a percentage of the time."""
    try:
        return f"{float(ms_per_second) / 10:.0f}%"
    except (TypeError, ValueError):
        return "-"


def watermark_lag_ms(metrics: JsonObject, now_ms: int) -> int | None:
    """How far the vertex's event time is behind the wall clock, or None without watermarks."""
    wm = metrics.get("currentOutputWatermark", MIN_WATERMARK)
    if not isinstance(wm, (int, float)) or wm <= MIN_WATERMARK or wm >= 2**63 - 1:
        return None
    return max(0, int(now_ms - wm))


def fmt_lag(lag_ms: int | None) -> str:
    if lag_ms is None:
        return "-"
    if lag_ms < 10_000:
        return f"{lag_ms / 1000:.1f}s"
    if lag_ms < 600_000:
        return f"{lag_ms // 1000}s"
    return f"{lag_ms // 60_000}m"


def vertex_row(vertex: JsonObject, now_ms: int) -> dict[str, Any]:
    """One vertex's live figures, raw (for --json) and as printed."""
    m = vertex.get("metrics") or {}
    return {
        "id": vertex.get("id"),
        "name": vertex.get("name", ""),
        "status": vertex.get("status", "?"),
        "parallelism": vertex.get("parallelism"),
        "records-in": m.get("read-records", 0),
        "records-out": m.get("write-records", 0),
        "records-in-per-second": m.get("numRecordsInPerSecond", 0.0),
        "records-out-per-second": m.get("numRecordsOutPerSecond", 0.0),
        "busy-ms-per-second": m.get("busyTimeMsPerSecond", 0),
        "backpressured-ms-per-second": m.get("backPressuredTimeMsPerSecond", 0),
        "idle-ms-per-second": m.get("idleTimeMsPerSecond", 0),
        "watermark-lag-ms": watermark_lag_ms(m, now_ms),
        "in-pool-usage": m.get("buffers.inPoolUsage", 0.0),
        "out-pool-usage": m.get("buffers.outPoolUsage", 0.0),
        # subtasks that stopped reporting (a paused or hung TaskManager): left out of the rates
        "stale-subtasks": m.get("stale-subtasks", 0),
        # a source's consumer lag (Flink's pendingRecords, summed over its subtasks; None when
        # it does not know one) and each of its Kafka partitions' offsets and lag
        "pending-records": m.get("pendingRecords"),
        "partitions": list(vertex.get("partitions") or []),
    }


#: the width a line of the lag summary must fit in (a terminal's 80 columns)
LAG_WIDTH = 80


def source_name(row: dict[str, Any]) -> str:
    """A source vertex by its id and its first operator (``1 Source: kafka``), not the whole chain."""
    return f"{row['id']} {str(row['name']).split(' -> ')[0]}"


def partition_name(p: JsonObject) -> str:
    return f"{p.get('topic')}/{p.get('partition')}"


def _offset(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) or value < 0 else str(int(value))


def partitions_inline(partitions: list[JsonObject], width: int) -> str | None:
    """Each partition's lag on one line (``orders/0 7, orders/1 0``), or None when that is
    wider than ``width``."""
    text = ", ".join(f"{partition_name(p)} {fmt_count(p.get('pendingRecords'))}" for p in partitions)
    return text if len(text) <= width else None


def lag_table(doc: JsonObject, *, per_partition: bool) -> Table | None:
    """The consumer lag of a job's sources (``doc``: ``GET /jobs/<id>``), or None when no source
    reports one: a row per source vertex with its lag (pendingRecords) and its partitions' lags
    where they fit in 80 columns; with ``per_partition``, a row per partition instead (offset,
    committed offset, lag)."""
    sources = [vertex_row(v, 0) for v in doc.get("vertices", [])]
    sources = [r for r in sources if r["pending-records"] is not None or r["partitions"]]
    if not sources:
        return None
    table = Table(title="Consumer lag (records behind the end of each partition)", title_justify="left")
    if per_partition:
        for column in ("Source", "Partition", "Subtask", "Offset", "Committed", "Lag"):
            table.add_column(column, justify="left" if column in ("Source", "Partition") else "right")
        for r in sources:
            for i, p in enumerate(r["partitions"]):
                table.add_row(source_name(r) if i == 0 else "", partition_name(p), str(p.get("subtask", "-")), _offset(p.get("currentOffset")),
                              _offset(p.get("committedOffset")), fmt_count(p.get("pendingRecords")))
        return table
    table.add_column("Source")
    table.add_column("Lag", justify="right")
    table.add_column("Partitions")
    folded = False
    for r in sources:
        name = source_name(r)
        room = LAG_WIDTH - len(name) - 16  # the borders, the padding and the Lag column
        parts = partitions_inline(r["partitions"], room) if r["partitions"] else "-"
        if parts is None:
            folded = True
            worst = max(r["partitions"], key=lambda p: p.get("pendingRecords") or 0)
            parts = f"{len(r['partitions'])} partitions; most behind: {partition_name(worst)} {fmt_count(worst.get('pendingRecords'))}"
        table.add_row(name, fmt_count(r["pending-records"]), parts)
    if folded:
        table.caption = "--partitions shows every partition"
        table.caption_justify = "left"
    return table


def vertex_table(doc: JsonObject, *, title: str | None = None, with_status: bool = False) -> Table:
    """The live figures of a job's vertices (``doc``: ``GET /jobs/<id>``), one row each."""
    now = int(doc.get("now") or 0)
    table = Table(title=title, title_justify="left")
    table.add_column("Vertex")
    if with_status:
        table.add_column("Status")
    for column in ("In", "Out", "In/s", "Out/s", "Busy", "Backpr.", "WM lag"):
        table.add_column(column, justify="right")
    stale = 0
    for vertex in doc.get("vertices", []):
        r = vertex_row(vertex, now)
        name = f"{r['id']} {r['name']}"
        if r["stale-subtasks"]:
            stale += r["stale-subtasks"]
            name += " *"
        cells = [fmt_count(r["records-in"]), fmt_count(r["records-out"]), fmt_count(r["records-in-per-second"]),
                 fmt_count(r["records-out-per-second"]), fmt_percent(r["busy-ms-per-second"]),
                 fmt_percent(r["backpressured-ms-per-second"]), fmt_lag(r["watermark-lag-ms"])]
        table.add_row(name, *([str(r["status"])] if with_status else []), *cells)
    if stale:
        table.caption = (f"* {stale} subtask{'s' if stale > 1 else ''} stopped reporting (no figures for over two report "
                         "intervals and a second): left out of the rates")
        table.caption_justify = "left"
    return table
