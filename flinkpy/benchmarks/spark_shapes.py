"""Job shapes on the Spark runner as whole processes: ``python -m flinkpy.benchmarks --only spark-shapes``.

:mod:`flinkpy.benchmarks.spark` times W1 and W2 inside one warm Spark session. A user meets the
runner otherwise: ``flinkpy run --runner spark --spark-master local[2] -p 2 JOB.py``, a new
process that starts its driver and Spark, with a job written the way they write it first. This
part times exactly that, for each shape of :mod:`flinkpy.benchmarks.spark_shape_jobs` (W1 and W2
in their default form and in the peers' form, a word count with ``.sum(1)`` and a filter
before ``print()``, the same over ints), against the hand-written query of :mod:`flinkpy.benchmarks.spark_shape_hand` run as
its own ``python`` process the same way, on the same input (W1 shapes: 2 M words in four text
files; W2 shapes: 5 M ints, as text lines in two files for the hand-written query).

Each process is timed from its start to its exit. Start-up is reported apart: the same command
on a tiny input (100 lines, 100 ints), which is the JVM, the session, translating and planning,
and a query's first micro-batch. The rate is records over the full run's wall time less that
start-up; the whole-process rate keeps it. ``first_result_s`` is the time from the start to the
first line on stdout (the shapes that print). Both sides run in turns, the side going first
alternating run by run, and ratios (flinkpy on Spark / hand-written) are taken within a run.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.benchmarks.spark_shape_jobs import SHAPES
from flinkpy.benchmarks.spark_report import counted, load_text, median_of, rate_text, ratio, ratio_text, seconds_text
from flinkpy.benchmarks.workloads import ROOT

MASTER = "local[2]"
PARALLELISM = 2
TINY = 100
#: shapes over words (the others count ints)
WORD_SHAPES = ("w1", "wc-sum-print", "w1-peers")


def write_inputs(work: Path, lines: list[str], ints: int, files: int = 4) -> dict[str, str]:
    """The inputs: words in ``files`` text files (W1's at full size and tiny), ints as lines in two."""
    dirs: dict[str, str] = {}
    for name, chosen in (("words", lines), ("words-tiny", lines[:TINY])):
        d = work / name
        d.mkdir()
        for i in range(files):
            (d / f"part-{i}.txt").write_text("\n".join(chosen[i::files]) + "\n")
        dirs[name] = str(d)
    for name, count in (("ints", ints), ("ints-tiny", TINY)):
        d = work / name
        d.mkdir()
        half = count // 2
        for i, (lo, hi) in enumerate(((1, half), (half + 1, count))):
            (d / f"ints-{i}.txt").write_text("".join(f"{n}\n" for n in range(lo, hi + 1)))
        dirs[name] = str(d)
    return dirs


def timed_process(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``argv`` to its end: wall seconds, seconds to its first line on stdout, lines printed."""
    started = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT, text=True)
    first: list[float] = []
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr.readlines()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    lines = 0
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("(") or line.startswith("1>") or line.startswith("2>"):  # a record, not a status line
            if not first:
                first.append(time.time() - started)
            lines += 1
    rc = proc.wait()
    wall = time.time() - started
    reader.join(5)
    if rc != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {rc}: {''.join(err[-20:])}")
    return {"wall_s": wall, "first_result_s": first[0] if first else None, "printed": lines}


def commands(shape: str, dirs: dict[str, str], ints: int, work: Path, tag: str) -> dict[str, list[str]]:
    """The two sides' command lines for ``shape`` (``tag``: full or tiny)."""
    words = shape in WORD_SHAPES
    tiny = tag == "tiny"
    job_arg = dirs["words-tiny" if tiny else "words"] if words else str(TINY if tiny else ints)
    hand_dir = dirs[("words" if words else "ints") + ("-tiny" if tiny else "")]
    flinkpy = str(Path(sys.executable).with_name("flinkpy"))
    return {
        "flinkpy_on_spark": [flinkpy, "run", "--runner", "spark", "--spark-master", MASTER, "-p", str(PARALLELISM),
                             str(ROOT / "flinkpy" / "benchmarks" / "spark_shape_jobs.py"), shape, job_arg],
        "hand_written": [sys.executable, "-m", "flinkpy.benchmarks.spark_shape_hand", shape, hand_dir,
                         str(work / f"ck-{shape}-{tag}-{time.time_ns()}")],
    }


def measure(lines: list[str], n_words: int, ints: int, runs: int, log: Callable[[str], None], shapes: list[str] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"master": MASTER, "parallelism": PARALLELISM, "shapes": {}, "load_average": {"start": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="flinkpy-bench-shapes-") as tmp:
        work = Path(tmp)
        dirs = write_inputs(work, lines, ints)
        env = {**os.environ, "FLINKPY_HOME": str(work / "home"), "PYTHONPATH": str(ROOT)}
        for shape in shapes or list(SHAPES):
            records = n_words if shape in WORD_SHAPES else ints
            sides: dict[str, dict[str, list[dict[str, Any]]]] = {s: {"full": [], "tiny": []} for s in ("flinkpy_on_spark", "hand_written")}
            for i in range(runs):
                order = list(sides) if i % 2 == 0 else list(sides)[::-1]
                for tag in ("tiny", "full"):
                    argvs = commands(shape, dirs, ints, work, tag)
                    for side in order:
                        log(f"spark-shapes: {shape} run {i + 1}/{runs}, {side.replace('_', ' ')}, {tag} input ...")
                        sides[side][tag].append(timed_process(argvs[side], env))
            result["shapes"][shape] = _summary(shape, records, sides)
    result["load_average"]["end"] = os.getloadavg()
    return result


def _side(records: int, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    full = [r["wall_s"] for r in runs["full"]]
    tiny = [r["wall_s"] for r in runs["tiny"]]
    net = [f - t for f, t in zip(full, tiny)]
    return {
        "wall_s": statistics.median(full), "startup_s": statistics.median(tiny), "net_s": statistics.median(net),
        "rate": records / statistics.median(net) if statistics.median(net) > 0 else None,
        "whole_rate": records / statistics.median(full),
        "first_result_s": median_of(runs["full"], "first_result_s"), "printed": median_of(runs["full"], "printed"),
        "net_spread": [min(net), max(net)], "runs": runs,
    }


def _summary(shape: str, records: int, sides: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    on_spark, by_hand = _side(records, sides["flinkpy_on_spark"]), _side(records, sides["hand_written"])
    # ratios run by run (both sides of a run under the same load), then their median; a rate
    # ratio is the hand-written query's net seconds over flinkpy's
    def net(side: str) -> list[float]:
        return [f["wall_s"] - t["wall_s"] for f, t in zip(sides[side]["full"], sides[side]["tiny"])]

    # a side whose tiny input outlasted its full one (start-up noise larger than the work) has
    # no net time: that run gives no ratio rather than a negative one
    per_run = [h / s for s, h in zip(net("flinkpy_on_spark"), net("hand_written")) if s > 0 and h > 0]
    return {
        "shape": SHAPES[shape], "records": records, "flinkpy_on_spark": on_spark, "hand_written": by_hand,
        "rate_ratio": statistics.median(per_run) if per_run else None,
        "rate_ratio_spread": [min(per_run), max(per_run)] if len(per_run) > 1 else None,
        "whole_ratio": ratio(on_spark["whole_rate"], by_hand["whole_rate"]),
        "startup_ratio": ratio(on_spark["startup_s"], by_hand["startup_s"]),  # time: flinkpy / hand
        "first_result_ratio": ratio(on_spark["first_result_s"], by_hand["first_result_s"]),  # time: flinkpy / hand
    }


def report(result: dict[str, Any]) -> str:
    """The comparison as text lines."""
    def rate(v: float | None) -> str:
        return rate_text(v, decimals=0)

    def secs(v: float | None) -> str:
        return seconds_text(v, decimals=1)

    lines = [
        f"Spark shapes as whole processes on {result['master']}, p={result['parallelism']}: flinkpy run --runner spark against "
        "the hand-written query run as its own process; rates on wall time less the start-up (the same command on a tiny input)",
        load_text(result["load_average"]),
        f"{'shape':15} {'on Spark':>9} {'by hand':>9} {'ratio':>6} {'whole':>6}   {'start-up: on Spark':>18} {'by hand':>8}   "
        f"{'1st result: on Spark':>20} {'by hand':>8} {'ratio':>6}",
    ]
    for name, s in result["shapes"].items():
        f, h = s["flinkpy_on_spark"], s["hand_written"]
        lines.append(f"{name:15} {rate(f['rate']):>9} {rate(h['rate']):>9} {ratio_text(s['rate_ratio']):>6} {ratio_text(s['whole_ratio']):>6}   "
                     f"{secs(f['startup_s']):>18} {secs(h['startup_s']):>8}   {secs(f['first_result_s']):>20} "
                     f"{secs(h['first_result_s']):>8} {ratio_text(s['first_result_ratio']):>6}")
    return "\n".join(lines)


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (table ``spark-shapes``)."""
    out: list[Figure] = []
    for name, s in result["shapes"].items():
        row, unit = counted(name, s["records"], words=name in WORD_SHAPES)
        f, h = s["flinkpy_on_spark"], s["hand_written"]
        flat = {"spark": f["rate"], "hand": h["rate"], "ratio": s["rate_ratio"], "whole": s["whole_ratio"],
                "start_spark": f["startup_s"], "start_hand": h["startup_s"], "first_spark": f["first_result_s"],
                "first_hand": h["first_result_s"], "first_ratio": s["first_result_ratio"], "ratio_runs": s["rate_ratio_spread"]}
        out += cells("spark-shapes", row, flat, [
            ("flinkpy on Spark", "spark", unit), ("hand-written PySpark", "hand", unit),
            ("on Spark / by hand", "ratio", Unit.RATIO), ("on Spark / by hand, start-up included", "whole", Unit.RATIO),
            ("start-up: on Spark", "start_spark", Unit.S), ("start-up: by hand", "start_hand", Unit.S),
            ("first result: on Spark", "first_spark", Unit.S), ("first result: by hand", "first_hand", Unit.S),
            ("first result: on Spark / by hand", "first_ratio", Unit.RATIO),
        ], spreads={"ratio": "ratio_runs"})
    return out
