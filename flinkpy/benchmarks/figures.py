"""Every figure of a benchmark run as records, for ``--report``: the parts whose results
``__main__`` assembles are converted here; the others convert their own (each part module's
``figures``). Also the run's record itself: date, command, machine and versions."""

from __future__ import annotations

import os
import platform
from typing import Any

from flinkpy.benchmarks import (async_io, backends, backpressure, bytewax_windows, iceberg, kafka, lifecycle, metrics_cost, partitions, peers_form,
                                scaling)
from flinkpy.benchmarks.report import Figure, Machine, Run, Unit, cells, summary
from flinkpy.benchmarks.windows import WINDOW_ROWS
from flinkpy.benchmarks.workloads import WORKLOAD_ROWS


def key_row(keys: int) -> str:
    """A state size's row: ``1,000,000 keys``."""
    return f"{keys:,} keys"


def workloads(results: dict[str, Any]) -> list[Figure]:
    """W1 and W2 against the loop (table ``workloads``), and with checkpoints (``checkpoint-cost``)."""
    out: list[Figure] = []
    for name, e in results.items():
        rate, row = Unit(e["unit"]), WORKLOAD_ROWS[name]
        out += cells("workloads", row, e, [
            ("plain loop", "loop_rate", rate), ("flinkpy p=1", "p1_rate", rate), ("p=1 / loop", "p1_ratio", Unit.RATIO),
            ("flinkpy p=2", "p2_rate", rate), ("p=2 / loop", "p2_ratio", Unit.RATIO),
        ], spreads={"p1_ratio": "p1_ratios"})
        out += cells("checkpoint-cost", row, e, [
            ("flinkpy p=1", "p1_checkpointed_rate", rate), ("p=1 / loop", "p1_checkpointed_ratio", Unit.RATIO),
            ("p=1: with / without", "checkpointed_vs_off", Unit.RATIO),
            ("flinkpy p=2", "p2_checkpointed_rate", rate), ("p=2: with / without", "p2_checkpointed_vs_off", Unit.RATIO),
            ("checkpoints at p=2", "p2_checkpoints", Unit.COUNT), ("alignment at p=2, max", "p2_alignment_ms_max", Unit.MS),
            ("processed while aligning, max", "p2_alignment_bytes_max", Unit.BYTES),
        ])
    return out


def join(e: dict[str, Any]) -> list[Figure]:
    """The two-input join against W1 and a one-input process function (table ``join``)."""
    out: list[Figure] = []
    rate = Unit(e["unit"])
    for p in (1, 2):
        out += cells("join", f"two-input join, p={p}", e, [
            ("plain loop", "loop_rate", rate), ("join", f"p{p}_rate", rate), ("join / loop", f"p{p}_ratio", Unit.RATIO),
            ("W1 in the same run", f"p{p}_w1_rate", rate), ("join / W1", f"p{p}_vs_w1", Unit.RATIO),
            ("one-input process function", f"p{p}_one_input_rate", rate),
            ("join / one-input", f"p{p}_vs_one_input", Unit.RATIO),
        ])
    out += cells("checkpoint-cost", "two-input join", e, [
        ("p=2: with / without", "p2_checkpointed_vs_off", Unit.RATIO), ("checkpoints at p=2", "p2_checkpoints", Unit.COUNT),
        ("alignment at p=2, max", "p2_alignment_ms_max", Unit.MS), ("processed while aligning, max", "p2_alignment_bytes_max", Unit.BYTES),
    ])
    return out


def windows(w: dict[str, Any]) -> list[Figure]:
    """Windows against the rolling reduce, with and without checkpoints, and Bytewax's (``windows``)."""
    cp = w.get("checkpointed") or {}
    out: list[Figure] = []
    for kind, row in WINDOW_ROWS.items():
        flat = {"rate": w.get(f"{kind}_rate"), "vs": w.get(f"{kind}_vs_rolling"), "ratios": w.get(f"{kind}_ratios"),
                "cp_rate": cp.get(f"{kind}_rate"), "cp_vs": cp.get(f"{kind}_vs_rolling"), "cp_ratios": cp.get(f"{kind}_ratios")}
        if flat["rate"] and flat["cp_rate"]:
            flat["cp_vs_off"] = flat["cp_rate"] / flat["rate"]
        out += cells("windows", row, flat, [
            ("flinkpy", "rate", Unit.WORDS_PER_S), ("window / rolling reduce", "vs", Unit.RATIO),
            ("flinkpy, checkpoints every 200 ms", "cp_rate", Unit.WORDS_PER_S),
            ("with checkpoints: window / rolling reduce", "cp_vs", Unit.RATIO), ("checkpoints every 200 ms / off", "cp_vs_off", Unit.RATIO),
        ], spreads={"vs": "ratios", "cp_vs": "cp_ratios"})
    return out + bytewax_windows.figures(w.get("bytewax") or {})


def latency(lat: dict[str, Any]) -> list[Figure]:
    """Latency per record at half of peak throughput, per buffer timeout (table ``latency``)."""
    out = [Figure("latency", "peak throughput (no pacing)", "rate", float(lat["peak_rate"]), Unit.RECORDS_PER_S)]
    for r in lat["runs"]:
        out += cells("latency", f"buffer timeout {r['buffer_timeout_ms']} ms", r, [
            ("rate", "rate", Unit.RECORDS_PER_S), ("p50", "p50_ms", Unit.MS), ("p99", "p99_ms", Unit.MS),
        ])
    return out


def state(results: dict[str, Any]) -> list[Figure]:
    """Snapshot durations, recovery and savepoints of keyed state of growing size."""
    out: list[Figure] = []
    for s in results.get("snapshots", []):
        out += cells("snapshots", key_row(s["keys"]), s, [
            ("state size", "state_bytes", Unit.BYTES), ("synchronous part, median", "sync_ms_median", Unit.MS),
            ("synchronous part, max", "sync_ms_max", Unit.MS), ("asynchronous part, median", "async_ms_median", Unit.MS),
            ("checkpoints", "checkpoints", Unit.COUNT),
        ])
    for r in results.get("recovery", []):
        out += cells("recovery", key_row(r["keys"]), r, [
            ("state size", "state_bytes", Unit.BYTES), ("SIGKILL to running, restored", "recovery_ms", Unit.MS),
        ])
    if "savepoint" in results:
        sp = results["savepoint"]
        out += cells("savepoint", key_row(sp["keys"]), sp, [
            ("state size", "state_bytes", Unit.BYTES), ("savepoint", "savepoint_ms", Unit.MS),
            ("restore: submission to running", "restore_ms", Unit.MS),
        ])
    return out


def failover(f: dict[str, Any]) -> list[Figure]:
    """JobManager failover under ZooKeeper HA (table ``failover``)."""
    row = f"ZooKeeper session timeout {f['session_timeout_ms'] / 1000:g} s"
    return summary("failover", row, "SIGKILL of the leader to the job running again", f["failover_ms"], Unit.MS)


def collect(results: dict[str, Any]) -> list[Figure]:
    """Every figure in the results of one run of ``python -m flinkpy.benchmarks``."""
    out = workloads(results.get("workloads", {}))
    if "startup" in results:
        st = results["startup"]
        row = f"flinkpy run examples/word_count.py, {len(st['runs_s'])} runs"
        out += cells("first-output", row, st, [
            ("to the first printed line, median", "median_s", Unit.S), ("to the first printed line, max", "max_s", Unit.S),
            ("to its exit, median", "exit_median_s", Unit.S), ("to its exit, max", "exit_max_s", Unit.S),
        ])
    out += peers_form.figures(results.get("peers_form", {}))
    if "join" in results:
        out += join(results["join"])
    if "metrics" in results:
        out += metrics_cost.figures(results["metrics"])
    out += state(results)
    if "windows" in results:
        out += windows(results["windows"])
    if "latency" in results:
        out += latency(results["latency"])
    if "failover" in results:
        out += failover(results["failover"])
    if "backends" in results:
        out += backends.figures(results["backends"])
    if results.get("backpressure"):
        out += backpressure.figures(results["backpressure"])
    out += async_io.figures(results.get("async_io", {}))
    if "rabbitmq" in results:
        from flinkpy.benchmarks import rabbitmq

        out += rabbitmq.figures(results["rabbitmq"])
    out += iceberg.figures(results.get("iceberg", {}))
    out += kafka.figures(results.get("kafka", {}))
    out += scaling.figures(results.get("scaling", {}))
    out += partitions.figures(results.get("partitions", {}))
    out += lifecycle.figures(results.get("lifecycle", {}))
    if "spark" in results:
        from flinkpy.benchmarks.spark import figures as spark_figures

        out += spark_figures(results["spark"])
    if "spark_shapes" in results:
        from flinkpy.benchmarks.spark_shapes import figures as shape_figures

        out += shape_figures(results["spark_shapes"])
    return out


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return (round(one, 2), round(five, 2), round(fifteen, 2))


def versions(results: dict[str, Any]) -> dict[str, str]:
    """Python's, flinkpy's, and the peers' that the run measured."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    packages = ["flinkpy"] + (["pyspark"] if "spark" in results or "spark_shapes" in results else [])
    if results.get("kafka"):
        packages += ["confluent-kafka", "noida-db", "quixstreams"]
    for package in packages:
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            pass
    bytewax = (results.get("windows") or {}).get("bytewax") or {}
    if bytewax.get("version"):
        out["bytewax"] = str(bytewax["version"])
    return out


def run_record(results: dict[str, Any], command: str, load_at_start: tuple[float, float, float]) -> Run:
    """The run as a report's record; call it when the run has ended (the load then is its end)."""
    import psutil

    machine = Machine(os.cpu_count() or 1, int(psutil.virtual_memory().total), load_at_start, load_average(),
                      f"{platform.system()} {platform.machine()}")
    return Run(results["date"], command, machine, versions(results), collect(results))
