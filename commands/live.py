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
    }


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
