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
