"""Per-invocation settings every command and the error handler need (--json, --debug).

Options set these through callbacks as click parses them, so the error handler knows how to
report even a failure that happens before the command body runs.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Session:
    json: bool = False
    debug: bool = False
    #: --json: whether the one document has been written (a later error must not add a second)
    emitted: bool = False
    #: --json: fields an error document carries besides "error" (the jobs a failing run submitted)
    error_context: dict[str, Any] = field(default_factory=dict)


session = Session()


def set_json(value: bool) -> bool:
    """Callback of every command's --json option."""
    if value:
        session.json = True
    return value


def set_debug(value: bool) -> bool:
    """Callback of the root --debug option: tracebacks on errors and DEBUG logs on stderr."""
    if value:
        session.debug = True
        logging.basicConfig(
            level=logging.DEBUG, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
        )
    return value


def json_option_kwargs() -> dict[str, Any]:
    """Keyword arguments for typer.Option that make a --json flag (one definition, every command)."""
    return {
        "help": "Print exactly one JSON document on stdout instead of tables; logs stay on stderr.",
        "callback": set_json,
        "is_eager": True,
    }
