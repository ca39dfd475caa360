"""Tables that stay readable in a narrow terminal.

Rich fits a table to the console by squeezing every column, which at 80 columns leaves some
of them one character wide ("Restar…", a job name reduced to nothing). Here each column says
how it may give way instead: a column marked ``fold`` wraps its long values (paths, lists)
down to a readable minimum; when even that does not fit, whole columns are left out, the
least important first (highest ``drop`` rank), and a caption names them and points at
``--wide``, which shows every column at its natural width however long the lines get. On a
terminal too narrow for that, the terminal itself would wrap every line into a broken grid, so
``--wide`` there prints each row as a record instead: one ``Header: value`` line per column.
Scripts read ``--json``, never these tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

# what a column costs beyond its content in rich's default box: a border and a space each side
_COLUMN_OVERHEAD = 3
_TABLE_OVERHEAD = 1


@dataclass(frozen=True)
class Column:
    """One column: ``drop`` 0 is never left out, higher ranks are left out first; a ``fold``
    column wraps its values down to ``min_width`` characters (default: its header's width or
    12, whichever is larger)."""

    header: str
    justify: str = "left"
    drop: int = 0
    fold: bool = False
    min_width: int | None = None
    footer: str | None = None

    def narrowest(self) -> int:
        if not self.fold:
            return -1  # as wide as its content
        return self.min_width or max(cell_len(self.header), 12)


def _width(cell: Any) -> int:
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return max((cell_len(line) for line in text.splitlines() or [""]), default=0)


def _natural(columns: Sequence[Column], rows: Sequence[Sequence[Any]]) -> list[int]:
    widths = [max(cell_len(c.header), cell_len(c.footer or "")) for c in columns]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], _width(cell))
    return widths


def fits(headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int) -> bool:
    """Whether a table of ``rows`` fits ``width`` characters with every cell on its own lines
    unwrapped (pure: no I/O)."""
    natural = _natural([Column(h) for h in headers], rows)
    return _TABLE_OVERHEAD + sum(w + _COLUMN_OVERHEAD for w in natural) <= width


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[Any]], width: int) -> list[int]:
    """Indexes of the columns to show at ``width`` characters: all of them if they fit with
    the fold columns at their narrowest, else without the highest drop ranks (pure: no I/O)."""
    natural = _natural(columns, rows)
    shown = list(range(len(columns)))

    def needed(indexes: list[int]) -> int:
        total = _TABLE_OVERHEAD
        for i in indexes:
            narrowest = columns[i].narrowest()
            total += (natural[i] if narrowest < 0 else min(natural[i], narrowest)) + _COLUMN_OVERHEAD
        return total

    while needed(shown) > width:
        droppable = [i for i in shown if columns[i].drop > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda i: (columns[i].drop, i))
        shown.remove(worst)
    return shown


def allocate(columns: Sequence[Column], rows: Sequence[Sequence[Any]], shown: Sequence[int], width: int) -> dict[int, int]:
    """Content widths of the ``shown`` columns within ``width``: natural widths, the widest
    fold column narrowed first, never below its narrowest (pure: no I/O)."""
    natural = _natural(columns, rows)
    widths = {i: natural[i] for i in shown}
    budget = width - _TABLE_OVERHEAD - _COLUMN_OVERHEAD * len(shown)
    while sum(widths.values()) > budget:
        narrowable = [i for i in shown if columns[i].fold and widths[i] > min(natural[i], columns[i].narrowest())]
        if not narrowable:
            break
        widest = max(narrowable, key=lambda i: (widths[i], -i))
        widths[widest] -= 1
    return widths


def render(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[Any]], *, title: str | None = None,
           wide: bool = False) -> None:
    """Print a table of ``rows`` on ``console``: fitted to its width, or every column with
    ``wide`` (the console is widened so nothing wraps)."""
    natural = _natural(columns, rows)
    if wide:
        shown = list(range(len(columns)))
        needed = _TABLE_OVERHEAD + sum(w + _COLUMN_OVERHEAD for w in natural)
        if needed > console.width and console.is_terminal:
            _records(console, columns, rows, title)
            return
        if needed > console.width:
            console = Console(file=console.file, width=needed, highlight=False, soft_wrap=False,
                              color_system=console.color_system and "auto", no_color=console.no_color)
        widths = {i: natural[i] for i in shown}
    else:
        shown = fit_columns(columns, rows, console.width)
        widths = allocate(columns, rows, shown, console.width)
    hidden = [columns[i].header for i in range(len(columns)) if i not in shown]
    table = Table(title=title, title_justify="left", show_footer=any(c.footer for c in columns),
                  caption=hidden_caption(hidden),
                  caption_justify="left")
    for i in shown:
        col = columns[i]
        table.add_column(col.header, justify=col.justify, footer=col.footer or "",  # type: ignore[arg-type]
                         overflow="fold", no_wrap=not col.fold, width=max(widths[i], 1))
    for row in rows:
        table.add_row(*(row[i] if isinstance(row[i], Text) else Text(str(row[i])) for i in shown))
    console.print(table)


def hidden_caption(hidden: Sequence[str]) -> str | None:
    """The caption that names the columns left out, or None when none was.

    >>> hidden_caption(["Host"]), hidden_caption(["Host", "Restarts"])
    ('Not shown at this width: Host (--wide shows it)', 'Not shown at this width: Host, Restarts (--wide shows them)')
    """
    if not hidden:
        return None
    return f"Not shown at this width: {', '.join(hidden)} (--wide shows {'it' if len(hidden) == 1 else 'them'})"


def _records(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[Any]], title: str | None) -> None:
    """Every column of every row, one ``Header: value`` line each, a blank line between rows
    (``--wide`` on a terminal narrower than the table); a multi-line value is indented under its header."""
    if title:
        console.print(Text(title))
    label = max((cell_len(c.header) for c in columns), default=0)
    for n, row in enumerate(rows):
        if n:
            console.print()
        for col, cell in zip(columns, row):
            lines = (cell.plain if isinstance(cell, Text) else str(cell)).splitlines() or [""]
            console.print(Text(f"{col.header + ':':<{label + 1}} {lines[0]}"), soft_wrap=True)
            for more in lines[1:]:
                console.print(Text(f"{'':<{label + 1}} {more}"), soft_wrap=True)
