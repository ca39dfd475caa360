"""Where output goes: data on stdout (a table, or one JSON document), everything else on stderr.

Rich decides colour itself: none when the stream is not a terminal or NO_COLOR is set.
Spinners appear only when stderr is a terminal, so logs of cron jobs stay clean.
"""

from __future__ import annotations

import contextlib
import json
import sys
from datetime import datetime
from typing import Any, Iterator

from rich.console import Console

from commands.session import session


def out() -> Console:
    """The console for people's data (stdout)."""
    return Console(file=sys.stdout, highlight=False, soft_wrap=not sys.stdout.isatty())


def err() -> Console:
    """The console for status lines, progress and errors (stderr)."""
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def emit_json(doc: Any) -> None:
    """Write the one JSON document of a --json invocation."""
    session.emitted = True
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def status(message: str) -> None:
    """A status line for people and logs: always stderr, never markup-interpreted."""
    err().print(message, markup=False)


def info(message: str) -> None:
    """A line of data for people on stdout (suppressed in --json mode, where stdout is the document)."""
    if not session.json:
        out().print(message, markup=False)


@contextlib.contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on stderr while waiting, only when a person is watching stderr."""
    if sys.stderr.isatty() and not session.debug:
        with err().status(message):
            yield
    else:
        yield


def savepoint_completed(location: str) -> None:
    """The line of a completed savepoint (savepoint trigger and status, stop): Flink's words."""
    out().print(f"Savepoint completed. Path: {location}", markup=False, soft_wrap=True)


def fmt_time(ms: int | None) -> str:
    """An epoch-millisecond timestamp as local time, the way Flink's CLI shows start times."""
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%d.%m.%Y %H:%M:%S")


def fmt_duration(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    seconds, millis = divmod(int(ms), 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes}m {seconds}s"
    if minutes:
        return f"{minutes}m {seconds}s"
    return f"{seconds}.{millis:03d}s"


def fmt_size(n: int) -> str:
    """Bytes for people: 512 B, 3.4 KiB, 1.2 MiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable
