"""Option types shared by many commands, defined once so their flags and help never drift."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from commands.context import JOBMANAGER_HELP
from commands.session import json_option_kwargs

JsonFlag = Annotated[bool, typer.Option("--json", **json_option_kwargs())]
JobManager = Annotated[Optional[str], typer.Option("-m", "--jobmanager", metavar="HOST:PORT", help=JOBMANAGER_HELP)]
Dynamic = Annotated[
    Optional[list[str]],
    typer.Option(
        "-D",
        metavar="KEY=VALUE",
        help="Set a configuration option for this run (repeatable), e.g. -D parallelism.default=2; wins over flinkpy.yaml and FLINKPY_* variables.",
    ),
]


def duration_seconds(text: str, flag: str, *, positive: bool = False) -> float:
    """A duration flag in Flink's syntax ('30s', '500 ms', '2 min') as seconds, or a usage error
    naming the flag."""
    from flinkpy.units import parse_duration_ms
    from flinkpy.errors import UsageError

    try:
        ms = parse_duration_ms(text)
    except ValueError:
        raise UsageError(f"invalid duration {text!r} for {flag}", remedy="use e.g. 30s, 500 ms or 2 min") from None
    if positive and ms <= 0:
        raise UsageError(f"{flag} must be positive", remedy="use e.g. 30s")
    return ms / 1000.0


def timeout_seconds(text: str) -> float:
    """A --timeout flag in Flink's duration syntax as seconds, or a usage error."""
    from flinkpy.units import parse_duration_ms
    from flinkpy.errors import UsageError

    try:
        return parse_duration_ms(text) / 1000
    except Exception as e:  # noqa: BLE001
        raise UsageError(f"--timeout {text!r} is not a duration", remedy="use e.g. 30s, 10min") from e

Wide = Annotated[
    bool,
    typer.Option("--wide", help="Show every column at full width, however long the lines get (a narrow terminal otherwise leaves out the least important columns and wraps long values)."),
]
