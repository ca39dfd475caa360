"""The benchmark's figures as data: what ``python -m flinkpy.benchmarks --report FILE.json`` writes
and what :mod:`flinkpy.benchmarks.render` turns into the performance page.

A report is a list of runs; a run is one invocation of the benchmark (or, for figures recorded
before the report existed, one recorded measurement: ``transcribed_from`` names the record):
when, with which command, on which machine, with which versions, and its figures. A figure is
one number in one cell of one table: ``table`` names the table (a benchmark part, or a table of
one), ``row`` what was measured (``"W1 word count"``), ``column`` by what or how (``"plain
loop"``, ``"flinkpy p=1"``, ``"Bytewax"``) — so peers' figures sit beside flinkpy's in one table.

The JSON form, ``schema`` 1 (every key always present; ``null`` where nothing is known)::

    {"schema": 1,
     "runs": [{"date": "2026-11-28",
               "command": "python -m flinkpy.benchmarks --only windows --runs 5",
               "machine": {"cores": 2, "memory_bytes": 25769803776,
                           "load_average": [1.1, 1.2, 1.3], "load_average_end": [1.3, 1.2, 1.2],
                           "description": "Linux x86_64"},
               "versions": {"flinkpy": "0.1.0", "python": "3.12.3", "bytewax": "0.21.1"},
               "transcribed_from": null,
               "figures": [{"table": "windows", "row": "sliding 5 s / 1 s", "column": "flinkpy",
                            "value": 617000.0, "unit": "words/s", "spread": null, "note": ""}]}]}

``value`` is the median of the runs (or the one measurement); ``spread`` the lowest and highest
value behind it, when known (``value`` may then be ``null``: a range was recorded, no median).

>>> fig = Figure("recovery", "1,000 keys", "SIGKILL to running, restored", 54.0, Unit.MS)
>>> Report.from_json(Report([Run("2026-11-22", "python -m flinkpy.benchmarks", Machine(2), {}, [fig])]).to_json()).runs[0].figures[0] == fig
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

SCHEMA = 1


class Unit(str, Enum):
    """What a figure's value counts. Rates are per second of the stated kind of record."""

    WORDS_PER_S = "words/s"
    INTS_PER_S = "ints/s"
    RECORDS_PER_S = "records/s"
    RATIO = "ratio"
    MS = "ms"
    NS = "ns"
    S = "s"
    BYTES = "bytes"
    COUNT = "count"
    SHARE = "share"  # a fraction of a whole, shown as a percentage


@dataclass(frozen=True)
class Figure:
    """One measured number: a cell of a table."""

    table: str
    row: str
    column: str
    value: float | None
    unit: Unit
    spread: tuple[float, float] | None = None
    note: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.table, self.row, self.column)


@dataclass(frozen=True)
class Machine:
    """The machine a run ran on. Load averages are the 1, 5 and 15 minute ones."""

    cores: int
    memory_bytes: int | None = None
    load_average: tuple[float, float, float] | None = None
    load_average_end: tuple[float, float, float] | None = None
    description: str = ""


@dataclass(frozen=True)
class Run:
    """One benchmark run: when, how, where, with what, and every figure it measured."""

    date: str  # YYYY-MM-DD
    command: str
    machine: Machine
    versions: dict[str, str]
    figures: list[Figure] = field(default_factory=list)
    #: for figures recorded before ``--report`` existed: where they were copied from
    transcribed_from: str | None = None


@dataclass(frozen=True)
class Report:
    runs: list[Run]

    def to_json(self) -> str:
        """Canonical JSON: the same report always gives the same text."""
        return json.dumps({"schema": SCHEMA, "runs": [_run_doc(r) for r in self.runs]}, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "report") -> Report:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source} is not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError(f"{source} is not a benchmark report of schema {SCHEMA} (written by python -m flinkpy.benchmarks --report)")
        try:
            return cls([_run(r) for r in doc["runs"]])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source} has a malformed run or figure: {exc!r}") from None


def _run_doc(run: Run) -> dict[str, Any]:
    m = run.machine
    return {
        "date": run.date,
        "command": run.command,
        "machine": {"cores": m.cores, "memory_bytes": m.memory_bytes, "load_average": _list(m.load_average),
                    "load_average_end": _list(m.load_average_end), "description": m.description},
        "versions": dict(sorted(run.versions.items())),
        "transcribed_from": run.transcribed_from,
        "figures": [
            {"table": f.table, "row": f.row, "column": f.column, "value": None if f.value is None else float(f.value), "unit": f.unit.value,
             "spread": _list(f.spread), "note": f.note}
            for f in run.figures
        ],
    }


def _list(values: tuple[float, ...] | None) -> list[float] | None:
    return None if values is None else [float(v) for v in values]


def _tuple(values: Any) -> Any:
    return None if values is None else tuple(float(v) for v in values)


def _run(doc: dict[str, Any]) -> Run:
    m = doc["machine"]
    machine = Machine(int(m["cores"]), m["memory_bytes"], _tuple(m["load_average"]), _tuple(m["load_average_end"]), m["description"])
    figures = [
        Figure(f["table"], f["row"], f["column"], None if f["value"] is None else float(f["value"]), Unit(f["unit"]),
               _tuple(f["spread"]), f["note"])
        for f in doc["figures"]
    ]
    return Run(doc["date"], doc["command"], machine, dict(doc["versions"]), figures, doc["transcribed_from"])


def load(path: str | Path) -> Report:
    return Report.from_json(Path(path).read_text(encoding="utf-8"), source=str(path))


def write(report: Report, path: str | Path) -> None:
    """Write ``report`` to ``path`` (a file cut short cannot be read back: :func:`load` refuses it)."""
    Path(path).write_text(report.to_json(), encoding="utf-8")


#: a column of a table filled from a part's result: (column name, the result's key, unit)
Column = tuple[str, str, Unit]


def cells(table: str, row: str, entry: dict[str, Any], columns: list[Column], *,
          spreads: dict[str, str] | None = None) -> list[Figure]:
    """The figures of one row from a part's result ``entry``: one per column whose key it has
    (with a value); ``spreads`` maps a key to the key of its per-run values (their range)."""
    out = []
    for column, key, unit in columns:
        value = entry.get(key)
        if value is None:
            continue
        per_run = entry.get((spreads or {}).get(key, ""))
        spread = (float(min(per_run)), float(max(per_run))) if per_run else None
        out.append(Figure(table, row, column, float(value), unit, spread))
    return out


def summary(table: str, row: str, column: str, values: list[float], unit: Unit) -> list[Figure]:
    """One figure for several measurements: their median, and their range when they differ."""
    if not values:
        return []
    ordered = sorted(float(v) for v in values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    spread = (ordered[0], ordered[-1]) if ordered[0] != ordered[-1] else None
    return [Figure(table, row, column, median, unit, spread)]
