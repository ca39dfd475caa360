"""Tables at 80 columns: columns wrap or give way whole, never squeezed to an ellipsis."""

from __future__ import annotations

import io

from rich.console import Console

from commands.tables import Column, fit_columns, render

JOBS = [Column("Start time", drop=2), Column("JobID"), Column("Name", fold=True), Column("State"),
        Column("Restarts", justify="right", drop=1)]
ROW = ["25.11.2026 11:59:36", "c8cb2c83f76d4eab8145bcdbc3f70fe0", "a job with a rather long descriptive name", "RUNNING", "0"]


def rendered(columns: list[Column], rows: list[list[str]], width: int, wide: bool = False) -> str:
    buffer = io.StringIO()
    render(Console(file=buffer, width=width, color_system=None), columns, rows, title="Jobs", wide=wide)
    return buffer.getvalue()


def test_every_line_fits_and_nothing_is_cut() -> None:
    text = rendered(JOBS, [ROW], 80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    assert "…" not in text, text
    assert "c8cb2c83f76d4eab8145bcdbc3f70fe0" in text  # ids never wrap
    # the long name wraps inside its cell instead of being squeezed away
    assert "a job with" in text and "name" in text
    assert "Not shown at this width: Start time (--wide shows it)" in text  # one column: "it"


def test_narrower_drops_more_least_important_first() -> None:
    assert fit_columns(JOBS, [ROW], 200) == [0, 1, 2, 3, 4]
    assert fit_columns(JOBS, [ROW], 80) == [1, 2, 3, 4]
    assert fit_columns(JOBS, [ROW], 60) == [1, 2, 3]
    # columns that may not be dropped stay even when they do not fit
    assert fit_columns(JOBS, [ROW], 20) == [1, 2, 3]


def test_wide_shows_every_column_on_one_line_each() -> None:
    text = rendered(JOBS, [ROW], 80, wide=True)
    assert "Start time" in text and "Restarts" in text and "Not shown" not in text
    assert "a job with a rather long descriptive name" in text  # not wrapped
    assert max(len(line) for line in text.splitlines()) > 80


def test_wide_on_a_narrow_terminal_prints_records_not_a_wrapped_grid() -> None:
    """Following the caption's --wide hint at an 80-column terminal gave a table whose every line
    the terminal wrapped; on a terminal it now prints each row as Header: value lines."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=80, color_system=None, force_terminal=True)
    render(console, JOBS, [ROW, ROW], title="Jobs", wide=True)
    lines = buffer.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert not any(c in line for line in lines for c in "│┃┏"), "no grid"
    assert "Start time: 25.11.2026 11:59:36" in lines
    assert "Name:       a job with a rather long descriptive name" in lines
    assert lines.count("Restarts:   0") == 2 and lines[0] == "Jobs"


def test_fold_columns_share_the_width_so_the_table_never_overflows() -> None:
    """savepoint plan's table: rich alone made it 85 columns wide (and cut it at 80)."""
    columns = [Column("Operator", fold=True), Column("State", fold=True, min_width=18), Column("Matched by", drop=3),
               Column("Parallelism"), Column("Max parallelism", drop=2, fold=True, min_width=11),
               Column("Key groups (new subtask <- old subtasks)", fold=True, min_width=24, drop=1)]
    rows = [["running sums [uid sums]", "restored:\n_reduce\n_timers.event\n_timers.processing", "uid", "1 -> 4", "128",
             "0: 0-31 <- 0 (0-31)\n3: 96-127 <- 0 (96-127)"], ["Print to Std. Out", "empty", "-", "(new) 4", "128", ""]]
    for width in (80, 100):
        text = rendered(columns, rows, width)
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width, text
        assert "96-127 <- 0 (96-127)" in text and "_timers.processing" in text, text
