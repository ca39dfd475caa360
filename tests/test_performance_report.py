"""Performance as data: ``python -m flinkpy.benchmarks --report`` writes every figure of a run
with its date, command, machine and versions; docs/performance.md is the rendering of the
reports committed under docs/performance/, and these tests keep the two in step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flinkpy.benchmarks import backends, backpressure, figures, metrics_cost, peers_form
from flinkpy.benchmarks.render import COMMAND, PAGE, TABLES, committed_reports, main, render
from flinkpy.benchmarks.report import Figure, Machine, Report, Run, Unit, load
from flinkpy.benchmarks.spark import figures as spark_figures

ROOT = Path(__file__).resolve().parent.parent


def test_committed_page_is_the_rendering_of_the_committed_reports() -> None:
    paths = committed_reports()
    assert paths, "no report under docs/performance/"
    assert PAGE.is_file(), f"{PAGE} is missing: run {COMMAND}"
    assert PAGE.read_text(encoding="utf-8") == render([load(p) for p in paths]), f"{PAGE} is out of date: run {COMMAND}"


def test_a_report_measured_again_the_same_day_counts_after_the_first(tmp_path: Path) -> None:
    names = ["2026-11-29-scaling2.json", "2026-11-29-peers-form-b.json", "2026-11-29-peers-form.json", "2026-11-28-x.json",
             "2026-11-29-peers-form2.json", "2026-11-29-scaling.json"]
    for name in names:
        (tmp_path / name).write_text("{}")
    assert [p.name for p in committed_reports(tmp_path)] == [
        "2026-11-28-x.json", "2026-11-29-peers-form.json", "2026-11-29-peers-form-b.json", "2026-11-29-peers-form2.json",
        "2026-11-29-scaling.json", "2026-11-29-scaling2.json"]


def test_committed_reports_are_canonical_and_every_table_has_its_paragraph() -> None:
    known = {t.key for t in TABLES}
    for path in committed_reports():
        report = load(path)
        assert path.read_text(encoding="utf-8") == report.to_json(), f"{path} is not in the canonical form Report.to_json writes"
        for run in report.runs:
            assert len(run.date) == 10 and run.machine.cores >= 1, run
            for figure in run.figures:
                assert figure.table in known, f"{path}: table {figure.table!r} has no entry in flinkpy.benchmarks.render.TABLES"
                assert figure.value is not None or figure.spread is not None, figure


def _run(date: str, value: float, command: str = "python -m flinkpy.benchmarks --only latency") -> Run:
    return Run(date, command, Machine(2, 2**30, (1.0, 1.0, 1.0), (2.0, 1.0, 1.0)), {"python": "3.11.7"},
               [Figure("latency", "buffer timeout 100 ms", "p50", value, Unit.MS)])


def test_the_latest_run_wins_a_cell_whatever_the_order_of_the_files() -> None:
    newer, older = Report([_run("2026-11-28", 2.5)]), Report([_run("2026-11-21", 9.0)])
    extra = Report([Run("2026-11-21", "", Machine(16), {}, [Figure("latency", "buffer timeout 0 ms", "p50", 14.0, Unit.MS)])])
    page = render([newer, older, extra])
    assert "| buffer timeout 100 ms | 2.5 ms²" in page and "9.0 ms" not in page
    assert "| buffer timeout 0 ms | 14 ms¹" in page
    assert "1. 2026-11-21, command not recorded; 16 cores." in page
    assert "2. 2026-11-28, `python -m flinkpy.benchmarks --only latency`; 2 cores, 1 GiB, load average 1.0 at the start, 2.0 at the end" in page
    assert render([older, newer, extra]) == page


def test_a_malformed_report_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": 1, "runs": [{"date": "2026-11-28"}]}')
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and err.count("\n") == 1
    bad.write_text('{"runs": []}')
    assert main([str(bad)]) == 2
    assert "not a benchmark report" in capsys.readouterr().err


def test_check_mode_names_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "performance.md"
    report = tmp_path / "r.json"
    report.write_text(Report([_run("2026-11-28", 2.5)]).to_json())
    assert main([str(report), "-o", str(page)]) == 0
    assert main([str(report), "--check", str(page)]) == 0
    page.write_text(page.read_text() + "hand edit\n")
    assert main([str(report), "--check", str(page)]) == 1
    assert COMMAND in capsys.readouterr().err


def test_every_part_turns_its_results_into_figures_of_a_known_table() -> None:
    """Each part's converter on a result of the shape the part returns (a converter that breaks
    would lose a long run's report at its very end)."""
    w = {"unit": "words/s", "loop_rate": 2e6, "p1_rate": 1e6, "p1_ratio": 0.5, "p1_ratios": [0.4, 0.5, 0.6], "p2_rate": 1e6,
         "p2_ratio": 0.5, "p1_checkpointed_rate": 1e6, "p1_checkpointed_ratio": 0.5, "checkpointed_vs_off": 1.0, "p2_checkpointed_rate": 1e6,
         "p2_checkpointed_vs_off": 1.0, "p2_checkpoints": 3, "p2_alignment_ms_max": 5, "p2_alignment_bytes_max": 100}
    inc = {"status": "COMPLETED", "uploaded_bytes": 10, "full_bytes": 100, "duration_ms": 5, "sync_ms_max": 1}
    side = {"rate": 1.0, "first_result_s": 1.0, "output": 5, "batches": 1, "phases_ms": {"addBatch": 10}, "runs": []}
    results = {
        "date": "2026-11-28", "workloads": {"w1": w}, "startup": {"runs_s": [1.0, 1.2], "median_s": 1.1, "max_s": 1.2, "exit_median_s": 1.5, "exit_max_s": 1.6},
        "peers_form": {"w2": {"unit": "ints/s", "loop_rate": 1, "p1_rate": 1, "p1_ratio": 1, "p1_ratios": [1], "p1_net_rate": 1, "p1_net_ratio": 1}},
        "join": {"unit": "words/s", "loop_rate": 1, **{f"p{p}_{k}": 1 for p in (1, 2) for k in ("w1_rate", "one_input_rate", "vs_one_input", "rate", "vs_w1", "ratio")},
                 "p2_checkpointed_vs_off": 1, "p2_checkpoints": 2, "p2_alignment_ms_max": 3, "p2_alignment_bytes_max": 4},
        "metrics": {"parallelism": 2, "w1": {"unit": "words/s", "on_rate": 1, "off_rate": 1, "on_vs_off": 1, "on_vs_off_paired": 1,
                                             "on_cpu_ms_per_million": 1, "off_cpu_ms_per_million": 1, "cpu_on_vs_off": 1, "reporter_cpu_share": 0.001}},
        "snapshots": [{"keys": 10_000, "checkpoints": 5, "sync_ms_median": 0.1, "sync_ms_max": 0.2, "async_ms_median": 3, "state_bytes": 5}],
        "recovery": [{"keys": 1000, "state_bytes": 5, "recovery_ms": 50}],
        "savepoint": {"keys": 10, "state_bytes": 5, "savepoint_ms": 3, "restore_ms": 4},
        "windows": {"rolling_rate": 1, "sliding_rate": 1, "tumbling_rate": 1, "sliding_vs_rolling": 1, "sliding_ratios": [1],
                    "tumbling_vs_rolling": 1, "tumbling_ratios": [1], "checkpointed": {"rolling_rate": 1, "sliding_rate": 1, "tumbling_rate": 1},
                    "bytewax": {"version": "0.21.1", "words": 10, "rolling_rate": 1, "rolling_vs_flinkpy_rolling": 1}},
        "latency": {"peak_rate": 10, "runs": [{"rate": 5, "buffer_timeout_ms": 0, "p50_ms": 1, "p99_ms": 2}]},
        "failover": {"session_timeout_ms": 4000, "failover_ms": [4200, 4300], "failover_ms_median": 4250},
        "backends": {"throughput": {"w1": {"unit": "words/s", "loop_rate": 1, "hashmap_rate": 1, "hashmap_ratio": 1, "rocksdb_rate": 1,
                                           "rocksdb_ratio": 1, "rocksdb_vs_hashmap": 1}},
                     "large_state": [{"keys": 100, "compaction": "LEVEL", "changed": 0.01, "load_s": 1.0, "first": inc, "incremental": [inc, inc],
                                      "full_snapshot": {"bytes": 1, "duration_ms": 1, "task_rss_peak": 1}, "restore_ms": 1,
                                      "savepoint_restore": {"duration_ms": 1, "task_rss_peak": 1}}]},
        "async_io": {"requests": 10, "capacity": 2, "delay_ms": 5, "ceiling_rate": 400, "loop_rate": 300, "unordered_rate": 250,
                     "unordered_ratio": 0.8, "unordered_ratios": [0.7, 0.9], "ordered_rate": 240, "ordered_ratio": 0.8, "ordered_ratios": [0.8]},
        "backpressure": {"source_rate": 1, "sink_rate": 1, "aligned": {"checkpoints": 1, "failed": 0, "duration_ms_median": 1, "sink_rate": 1},
                         "unaligned": {"checkpoints": 1, "failed": 0, "duration_ms_median": 1, "sink_rate": 1, "sink_rate_vs_aligned": 1}},
        "kafka": {"records": 10, "words": 40, "partitions": 4, "loop_rate": 2, "loop_seconds": [5], "loop_output": 40, "quix_rate": 0.5,
                  "quix_seconds": [20], "quix_output": 40, "flinkpy_rate": 1, "flinkpy_seconds": [10], "flinkpy_output": 40,
                  "vs_loop": 0.5, "vs_loop_ratios": [0.5], "vs_quix": 2, "vs_quix_ratios": [2]},
        "spark": {"master": "local[2]", "parallelism": 2, "session_start_s": 1, "warm_up_s": 1,
                  "workloads": {"w1": {"records": 10, "engine": {"rate": 1, "net_rate": 1, "first_result_s": 1}, "flinkpy_on_spark": side,
                                       "hand_written": side, "rate_ratio": 1, "first_result_ratio": 1, "rate_vs_engine": 1}}},
        "spark_shapes": {"shapes": {"wc-sum-print": {
            "records": 10, "rate_ratio": 0.5, "rate_ratio_spread": [0.4, 0.6], "whole_ratio": 0.7, "first_result_ratio": 1.5,
            "flinkpy_on_spark": {"rate": 1, "startup_s": 20, "first_result_s": 30},
            "hand_written": {"rate": 2, "startup_s": 15, "first_result_s": 20}}}},
        "lifecycle": {"rate": 1000, "keys": 8, "records": 5000, **{key: {"downtime_ms": [800, 900], "command_ms": [1100, 1300]}
                                                                   for key in ("savepoint", "last-state", "stateless", "rescale-up", "rescale-down")}},
    }
    found = figures.collect(results)
    tables = {f.table for f in found}
    assert tables <= {t.key for t in TABLES}
    assert tables >= {"workloads", "checkpoint-cost", "first-output", "peers-form", "async", "join", "metrics", "snapshots", "recovery", "savepoint",
                      "windows", "latency", "failover", "backends", "large-state", "backpressure", "spark", "spark-phases", "spark-shapes", "kafka",
                      "lifecycle"}
    assert len({f.key for f in found}) == len(found), "two figures for one cell"
    # each part module's converter is the one collect uses
    assert peers_form.figures(results["peers_form"]) and metrics_cost.figures(results["metrics"])
    assert backends.figures(results["backends"]) and backpressure.figures(results["backpressure"]) and spark_figures(results["spark"])
    p1 = next(f for f in found if f.key == ("workloads", "W1 word count", "p=1 / loop"))
    assert (p1.value, p1.spread) == (0.5, (0.4, 0.6))
    render([Report([Run("2026-11-28", "x", Machine(1), {}, found)])])


@pytest.mark.timeout(180)
def test_report_flag_writes_every_figure_of_a_real_run(tmp_path: Path) -> None:
    """The cheapest part end to end: a real embedded cluster, three latency jobs of a tenth of
    the size, and the report they leave."""
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "flinkpy.benchmarks", "--only", "latency", "--quick", "--runs", "1", "--report", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = load(out).runs
    assert run.command == "python -m flinkpy.benchmarks --only latency --quick --runs 1"
    assert run.transcribed_from is None
    assert run.machine.cores == os.cpu_count() and run.machine.memory_bytes and run.machine.load_average and run.machine.load_average_end
    assert {"python", "flinkpy"} <= set(run.versions)
    cells = {(f.row, f.column): f for f in run.figures}
    assert {f.table for f in run.figures} == {"latency"}
    assert cells[("peak throughput (no pacing)", "rate")].value > 0
    for timeout in (0, 100):
        assert cells[(f"buffer timeout {timeout} ms", "p50")].value is not None
        assert cells[(f"buffer timeout {timeout} ms", "p99")].value >= cells[(f"buffer timeout {timeout} ms", "p50")].value
    # the printed report says the same p50 as the file (to its one decimal)
    p50 = cells[("buffer timeout 100 ms", "p50")].value
    assert f"buffer timeout 100 ms: p50 {p50:.1f} ms" in proc.stdout
    page = render([load(out)])
    assert "## Latency" in page and "Measured " + run.date in page
