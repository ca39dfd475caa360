"""W1 and W2 written the way peers' benchmarks write them (``--only peers-form``).

The default W1/W2 jobs end in a DiscardingSink and are timed from RUNNING to FINISHED. Peers'
benchmarks (../shared/PEERS.md, "Measured again beside flinkpy") write the same workloads as a
user would: W1 reads a ``FileSource`` over 20 files, W2 a number sequence; both end in a Python
``SinkFunction`` that receives every record through ``add_sink``; checkpoints every second; and
start-up is subtracted. Start-up is subtracted here by the sink itself: each sink subtask
notes the wall-clock time of its first record and of its ``close()`` in a small file, and the
job's time is the last close minus the first record (the pipeline is full by then; task
deployment, source discovery and the first split's open are not counted).

The plain loop for comparison calls the same functions, the sink's ``invoke`` included, per
record, over the same data (W1's lines in memory, as the default loop does).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.benchmarks.workloads import WORKLOAD_ROWS, add, add_counts, parity, split, spread_lines, to_pair, word_key
from flinkpy.common.functions import SinkFunction

#: how many files W1's lines are spread over, as in the peers' form
FILES = 20


class CountingSink(SinkFunction):
    """A user's SinkFunction: counts what it receives; notes when the first record came and when
    it closed (into ``<timing_dir>/<subtask>.json``, for the job's time without start-up)."""

    def __init__(self, timing_dir: str | None = None):
        self.timing_dir = timing_dir
        self.count = 0
        self.first = 0.0
        self.subtask = 0

    def open(self, runtime_context: Any) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def invoke(self, value: Any, context: Any) -> None:
        self.count += 1
        if self.count == 1:
            self.first = time.time()

    def close(self) -> None:
        if self.timing_dir:
            doc = {"first": self.first, "closed": time.time(), "count": self.count}
            Path(self.timing_dir, f"{self.subtask}.json").write_text(json.dumps(doc))


def write_files(lines: list[str], directory: Path) -> list[str]:
    """W1's lines spread round-robin over :data:`FILES` files."""
    return spread_lines(lines, directory, FILES, "peers-words")


def loop_w1(lines: list[str]) -> tuple[int, float]:
    started = time.perf_counter()
    sink = CountingSink()
    invoke = sink.invoke
    counts: dict[str, Any] = {}
    n = 0
    for line in lines:
        for w in split(line):
            rec = to_pair(w)
            k = word_key(rec)
            old = counts.get(k)
            new = rec if old is None else add_counts(old, rec)
            counts[k] = new
            invoke(new, None)
            n += 1
    return n, time.perf_counter() - started


def loop_w2(count: int) -> tuple[int, float]:
    started = time.perf_counter()
    sink = CountingSink()
    invoke = sink.invoke
    sums: dict[int, int] = {}
    for x in range(1, count + 1):
        k = parity(x)
        old = sums.get(k)
        new = x if old is None else add(old, x)
        sums[k] = new
        invoke(new, None)
    return count, time.perf_counter() - started


def job_w1(env: Any, paths: list[str], timing_dir: str) -> None:
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream.connectors.file_system import FileSource, StreamFormat

    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .flat_map(split)
        .map(to_pair)
        .key_by(word_key)
        .reduce(add_counts)
        .add_sink(CountingSink(timing_dir))
    )


def job_w2(env: Any, count: int, timing_dir: str) -> None:
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    (
        env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(parity)
        .reduce(add)
        .add_sink(CountingSink(timing_dir))
    )


def sink_seconds(timing_dir: str, expected: int) -> float:
    """The job's time without start-up, from the sinks' notes; checks every record arrived."""
    docs = [json.loads(p.read_text()) for p in Path(timing_dir).glob("*.json")]
    got = sum(d["count"] for d in docs)
    if got != expected:
        raise RuntimeError(f"the sinks received {got} records, expected {expected}")
    return max(d["closed"] for d in docs) - min(d["first"] for d in docs if d["count"])


def measure(address: str, token: str, lines: list[str], n_words: int, w2_count: int, runs: int, run_job: Any, log: Any,
            tmp: str) -> dict[str, Any]:
    """Both workloads in the peers' form, at p=1 with checkpoints every 1 s, against their loops
    run in turns with them (the ratio is the median of the runs' ratios); also the net runtime
    (start-up included) for reference."""
    import statistics
    import tempfile

    paths = write_files(lines, Path(tmp))
    result: dict[str, Any] = {}
    forms = {
        "w1": (n_words, lambda: loop_w1(lines)[1], lambda env, d: job_w1(env, paths, d), "words/s"),
        "w2": (w2_count, lambda: loop_w2(w2_count)[1], lambda env, d: job_w2(env, w2_count, d), "ints/s"),
    }
    for name, (n, loop, build, unit) in forms.items():
        loops: list[float] = []
        net: list[float] = []
        streaming: list[float] = []
        for i in range(runs):
            # the loop and the job in turns, so that a change in the machine's load between
            # them moves both sides of a ratio alike
            log(f"peers' form {name}: loop, then flinkpy p=1 with checkpoints every 1 s, run {i + 1} ...")
            loops.append(loop())
            with tempfile.TemporaryDirectory(dir=tmp) as d:
                net.append(run_job(address, token, lambda env: build(env, d), 1, f"bench-peers-{name}-p1-cp", checkpoint_ms=1000))
                streaming.append(sink_seconds(d, n))
        result[name] = {"records": n, "unit": unit, "loop_rate": n / statistics.median(loops), "p1_rate": n / statistics.median(streaming),
                        "p1_ratio": statistics.median(lo / s for lo, s in zip(loops, streaming)),
                        "p1_ratios": [round(lo / s, 3) for lo, s in zip(loops, streaming)],
                        "p1_net_rate": n / statistics.median(net), "p1_net_ratio": statistics.median(lo / s for lo, s in zip(loops, net))}
    return result


def report(result: dict[str, Any]) -> list[str]:
    return [
        f"peers' form {name} p1, checkpoints every 1 s, Python SinkFunction, start-up subtracted: {e['p1_rate'] / 1e3:.0f} k "
        f"{e['unit']}, {e['p1_ratio']:.2f} of its loop ({e['loop_rate'] / 1e3:.0f} k; runs {', '.join(f'{r:.2f}' for r in e['p1_ratios'])}); "
        f"start-up included: {e['p1_net_ratio']:.2f}"
        for name, e in result.items()
    ]


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (table ``peers-form``)."""
    out: list[Figure] = []
    for name, e in result.items():
        rate = Unit(e["unit"])
        out += cells("peers-form", WORKLOAD_ROWS[name], e, [
            ("plain loop", "loop_rate", rate), ("flinkpy p=1", "p1_rate", rate), ("flinkpy / loop", "p1_ratio", Unit.RATIO),
            ("flinkpy p=1, start-up included", "p1_net_rate", rate), ("flinkpy / loop, start-up included", "p1_net_ratio", Unit.RATIO),
        ], spreads={"p1_ratio": "p1_ratios"})
    return out
