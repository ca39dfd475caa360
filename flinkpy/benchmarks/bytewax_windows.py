"""Bytewax's windowing on the event-time W1, beside flinkpy's (part ``windows``).

The same files as flinkpy's windowed jobs, read by Bytewax's own ``FileSource`` (one per file,
merged), each line stamped i x 10 ms in the order the one worker sees it (as flinkpy's
``_stamp_line`` does), split into words and counted per word with Bytewax's windowing operators
(``count_window`` with an ``EventClock`` that waits for nothing, ``SlidingWindower`` 5 s / 1 s
or ``TumblingWindower`` 5 s), into a sink that drops what it gets; ``run_main``, one worker, no
recovery. A rolling count per word (``stateful_map``) is measured too, as Bytewax's own
yardstick.

Bytewax is optional and never a test dependency: when it cannot be imported the part says so
and how to install it (:data:`INSTALL`).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.benchmarks.windows import WINDOW_ROWS

INSTALL = "pip install bytewax==0.21.1"
#: the instant event time 0 stands for (Bytewax's clocks take aware datetimes)
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
KINDS = ("rolling", "sliding", "tumbling")


def available() -> bool:
    try:
        import bytewax.operators.windowing  # noqa: F401
    except ImportError:
        return False
    return True


def run(paths: list[str], kind: str) -> float:
    """Seconds Bytewax takes to run W1 as ``kind`` (one of :data:`KINDS`) over ``paths``."""
    from bytewax.testing import run_main

    flow = _flow(paths, kind)
    started = time.perf_counter()
    run_main(flow)
    return time.perf_counter() - started


def _flow(paths: list[str], kind: str) -> Any:
    import bytewax.operators as op
    from bytewax.connectors.files import FileSource
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, SlidingWindower, TumblingWindower, count_window

    flow = Dataflow(f"bench-bytewax-{kind}")
    inputs = [op.input(f"lines-{i}", flow, FileSource(p)) for i, p in enumerate(paths)]
    lines = op.merge("merge", *inputs) if len(inputs) > 1 else inputs[0]
    stamped = op.map("stamp", lines, _Stamper())
    words = op.flat_map("split", stamped, _split_stamped)
    if kind == "rolling":
        keyed = op.key_on("key", words, _word)
        out = op.stateful_map("count", keyed, _running_count)
    else:
        clock = EventClock(_event_time, wait_for_system_duration=timedelta(0))
        if kind == "sliding":
            windower: Any = SlidingWindower(length=timedelta(seconds=5), offset=timedelta(seconds=1), align_to=EPOCH)
        else:
            windower = TumblingWindower(length=timedelta(seconds=5), align_to=EPOCH)
        out = count_window("count", words, clock, windower, _word).down
    op.output("discard", out, _discarding_sink())
    return flow


class _Stamper:
    """Line i (in the order the worker reads them) -> (i x 10 ms, line)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, line: str) -> tuple[int, str]:
        self.count += 1
        return (self.count * 10, line)


def _split_stamped(event: tuple[int, str]) -> list[tuple[int, str]]:
    ms = event[0]
    return [(ms, w) for w in event[1].split()]


def _word(event: tuple[int, str]) -> str:
    return event[1]


def _event_time(event: tuple[int, str]) -> datetime:
    return EPOCH + timedelta(milliseconds=event[0])


def _running_count(count: int | None, _event: Any) -> tuple[int, int]:
    n = (count or 0) + 1
    return n, n


def _discarding_sink() -> Any:
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class _Drop(StatelessSinkPartition):
        def write_batch(self, items: list) -> None:
            pass

    class _Discard(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> _Drop:
            return _Drop()

    return _Discard()


def measure(paths: list[str], n_words: int, runs: int, median: Callable[[list[float]], float], log: Callable[[str], None]) -> dict[str, Any]:
    """``{"<kind>_rate": words/s}`` for each of :data:`KINDS` (median of ``runs``), or
    ``{"skipped": reason}`` when Bytewax is not installed."""
    if not available():
        log(f"bytewax windows: skipped (bytewax is not installed: {INSTALL})")
        return {"skipped": f"bytewax is not installed ({INSTALL})"}
    import bytewax

    result: dict[str, Any] = {"version": getattr(bytewax, "__version__", None) or _version(), "words": n_words}
    for kind in KINDS:
        log(f"bytewax windows: {kind} on the same lines ...")
        result[f"{kind}_rate"] = n_words / median([run(paths, kind) for _ in range(runs)])
    return result


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bytewax")
    except PackageNotFoundError:
        return None


def report(result: dict[str, Any]) -> list[str]:
    """The report's lines for :func:`measure`'s result (none when the part did not run)."""
    if not result:
        return []
    if "skipped" in result:
        return [f"bytewax windows: skipped, {result['skipped']}"]
    lines = [f"bytewax {result.get('version') or ''} on the first {result['words']} words, same stamping, 1 worker:"]
    for kind, what in (("sliding", "sliding 5 s / 1 s count per word"), ("tumbling", "tumbling 5 s count per word"), ("rolling", "rolling count per word")):
        lines.append(f"  {what}: {result[f'{kind}_rate'] / 1e3:.1f} k words/s ({result[f'{kind}_vs_flinkpy_rolling']:.3f} of flinkpy's rolling reduce in this run)")
    return lines


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records, beside flinkpy's in table ``windows``."""
    out: list[Figure] = []
    for kind in KINDS:
        out += cells("windows", WINDOW_ROWS[kind], result, [
            ("Bytewax, a tenth of the words", f"{kind}_rate", Unit.WORDS_PER_S),
            ("Bytewax / flinkpy's rolling reduce", f"{kind}_vs_flinkpy_rolling", Unit.RATIO),
        ])
    return out

