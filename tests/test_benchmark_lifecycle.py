"""The benchmark's lifecycle part (``--only lifecycle``): how it reads a pause from the output's
own timestamps, and its report lines and figures. The operations it times run for real in the
lifecycle runbook (tests/test_lifecycle_runbook.py); a run of the part takes a minute."""

from __future__ import annotations

from typing import Any

from flinkpy.benchmarks import figures, lifecycle
from flinkpy.benchmarks.__main__ import parse_args
from flinkpy.benchmarks.render import TABLES, render
from flinkpy.benchmarks.report import Machine, Report, Run


def test_the_pause_is_the_largest_gap_reaching_into_the_operation() -> None:
    stamps = [0, 1, 2, 3, 500, 501, 502, 2000, 2001]
    assert lifecycle.gap_around(stamps, 100, 450) == 497  # 3 -> 500 (the first record after may follow the return)
    assert lifecycle.gap_around(stamps, 1000, 2100) == 1498
    assert lifecycle.gap_around(stamps, 3000, 3100) is None  # nothing after it: not measured


def _result() -> dict[str, Any]:
    per_op = {key: {"downtime_ms": [700 + i, 900, 800], "command_ms": [1200, 1000, 1100]} for i, (key, _) in enumerate(lifecycle.OPERATIONS)}
    return {"rate": 1000, "keys": 8, "records": 9000, **per_op}


def test_lifecycle_figures_are_one_known_table_with_a_row_per_operation() -> None:
    assert parse_args(["--only", "lifecycle"]).only == "lifecycle"
    found = figures.collect({"lifecycle": _result()})
    assert {f.table for f in found} == {"lifecycle"} and "lifecycle" in {t.key for t in TABLES}
    cells = {(f.row, f.column): f for f in found}
    assert len(cells) == len(found) == 2 * len(lifecycle.OPERATIONS)
    sp = cells[("upgrade, savepoint mode", "last record before to first after")]
    assert (sp.value, sp.spread) == (800, (700, 900))
    assert cells[("rescale in place, 3 -> 2", "the command, call to return")].value == 1100
    lines = lifecycle.report(_result())
    assert lines[1].startswith("upgrade, last-state mode: output paused 800 ms median (701, 900, 800)"), lines
    page = render([Report([Run("2026-11-29", "python -m flinkpy.benchmarks --only lifecycle", Machine(2), {}, found)])])
    assert "## A job's lifecycle: downtime" in page
