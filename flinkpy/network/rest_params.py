"""A REST request's parameters and JSON body, checked before any handler uses them.

A value a handler cannot use is the client's mistake, answered 400 with the parameter named,
never a 500 from deep inside a handler: ``?timeout=abc`` (not a number), ``?timeout=nan`` (a
wait that never ends: every comparison with NaN is false, so a long poll would spin a thread
for the life of the job), a negative wait, or a body nested so deeply that the JSON parser
runs out of stack.

>>> query_number({"timeout": "2.5"}, "timeout", 0.0, high=60.0)
2.5
>>> query_number({}, "history", 10, integer=True)
10
>>> try:
...     query_number({"timeout": "nan"}, "timeout", 0.0)
... except UsageError as e:
...     print(e.message)
query parameter timeout='nan' is not a finite number of at least 0
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from flinkpy.errors import InvalidProgramError, UsageError


def query_number(query: Mapping[str, str], name: str, default: float, *, high: float | None = None, integer: bool = False) -> Any:
    """The query parameter ``name`` as a finite number of at least 0 (``default`` when absent
    or empty), capped at ``high``; ``UsageError`` (400) naming the parameter otherwise."""
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    kind = "whole number" if integer else "finite number"
    try:
        value: float = int(raw) if integer else float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"query parameter {name}={raw!r} is not a {kind} of at least 0", remedy=f"pass {name} as a {kind}, e.g. {name}={default}")
    return min(value, high) if high is not None else value


def load_json(body: bytes, what: str) -> Any:
    """``body`` parsed as JSON; ``InvalidProgramError`` (400) when it is not JSON or nests deeper
    than the parser can follow."""
    try:
        return json.loads(body)
    except ValueError as e:
        raise InvalidProgramError(f"{what} is not valid JSON: {e}") from e
    except RecursionError:
        raise InvalidProgramError(f"{what} nests too deeply to be parsed", remedy="send a JSON document nested less deeply") from None
