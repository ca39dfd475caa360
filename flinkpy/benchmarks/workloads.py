"""The workloads W1 and W2: their data, their user functions, the plain loop that calls those
functions with no engine (the ceiling the engine is measured against), and the flinkpy jobs.

The user functions are module-level so that task processes import them by name (the job's
``python_path`` is the repository root).
"""

from __future__ import annotations

import random
import time
from itertools import accumulate
from pathlib import Path
from typing import Any, Callable

#: the repository root (examples/, commands/), which jobs put on their python path
ROOT = Path(__file__).resolve().parents[2]

SEED = 42


# -- the user functions, shared by the job and the loop ----------------------------------------


def split(line: str) -> list[str]:
    return line.split()


def to_pair(word: str) -> tuple[str, int]:
    return (word, 1)


def word_key(pair: tuple[str, int]) -> str:
    return pair[0]


def add_counts(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    return (a[0], a[1] + b[1])


def parity(n: int) -> int:
    return n % 2


def add(a: int, b: int) -> int:
    return a + b


# -- data ------------------------------------------------------------------------------------


def make_lines(n_lines: int, words_per_line: int = 10, vocabulary: int = 10_000, seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocabulary)]
    cum = list(accumulate(1.0 / (k + 1) for k in range(vocabulary)))
    words = rng.choices(vocab, cum_weights=cum, k=n_lines * words_per_line)
    return [" ".join(words[i : i + words_per_line]) for i in range(0, len(words), words_per_line)]


def spread_lines(lines: list[str], directory: Path, files: int, stem: str) -> list[str]:
    """``lines`` spread round-robin over ``files`` text files ``<stem>-NN.txt`` in ``directory``."""
    paths = []
    for i in range(files):
        p = directory / f"{stem}-{i:02d}.txt"
        p.write_text("\n".join(lines[i::files]) + "\n")
        paths.append(str(p))
    return paths


# -- the loops -------------------------------------------------------------------------------


def loop_w1(lines: list[str]) -> tuple[int, float]:
    started = time.perf_counter()
    counts: dict[str, Any] = {}
    n = 0
    for line in lines:
        for w in split(line):
            rec = to_pair(w)
            k = word_key(rec)
            old = counts.get(k)
            counts[k] = rec if old is None else add_counts(old, rec)
            n += 1
    return n, time.perf_counter() - started


def loop_w2(count: int) -> tuple[int, float]:
    started = time.perf_counter()
    sums: dict[int, int] = {}
    for x in range(1, count + 1):
        k = parity(x)
        old = sums.get(k)
        sums[k] = x if old is None else add(old, x)
    return count, time.perf_counter() - started


# -- the jobs --------------------------------------------------------------------------------


def _discard(stream: Any) -> Any:
    from flinkpy.connectors.print_sink import DiscardingSink

    return stream.sink_to(DiscardingSink())


def job_w1(env: Any, paths: list[str], sink: Callable[[Any], Any] = _discard) -> None:
    """W1; ``sink`` ends the stream (default: a DiscardingSink)."""
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream.connectors.file_system import FileSource, StreamFormat

    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()
    sink(
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .flat_map(split)
        .map(to_pair)
        .key_by(word_key)
        .reduce(add_counts)
    )


def job_w2(env: Any, count: int, sink: Callable[[Any], Any] = _discard) -> None:
    """W2; ``sink`` ends the stream (default: a DiscardingSink)."""
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    sink(
        env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(parity)
        .reduce(add)
    )


def run_job(address: str, token: str, build: Callable[[Any], None], parallelism: int, name: str, *, checkpoint_ms: int | None = None,
            settings: dict[str, str] | None = None) -> float:
    """Submit one job to the cluster (with ``settings``: configuration keys for this job) and
    return its net runtime in seconds."""
    from flinkpy.program.context import ExecutionContext, execution_context
    from flinkpy.datastream import StreamExecutionEnvironment

    with execution_context(ExecutionContext(address=address, token=token, python_path=[str(ROOT)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        if settings:
            from flinkpy.common import Configuration

            env.configure(Configuration(settings))
        env.set_parallelism(parallelism)
        if checkpoint_ms is not None:
            env.enable_checkpointing(checkpoint_ms)
        build(env)
        result = env.execute(name)
    LAST_JOB_ID[name] = result.get_job_id()
    if checkpoint_ms is not None:
        from flinkpy.network.rest_client import RestClient

        stats = RestClient(address, token).request("GET", f"/jobs/{result.get_job_id()}/checkpoints", params={"history": 100})
        LAST_CHECKPOINT_STATS[name] = stats
    return result.get_net_runtime() / 1000.0


#: checkpoint statistics of the last checkpointed run of each benchmark job, by job name
LAST_CHECKPOINT_STATS: dict[str, Any] = {}


def completed_checkpoints(stats: dict[str, Any]) -> dict[str, Any]:
    """The checkpoints a run completed, from the JobManager's statistics of it (as
    :data:`LAST_CHECKPOINT_STATS` keeps them): how many, the median time from trigger to last acknowledgement,
    the longest alignment and the most bytes one buffered (None where none completed).

    >>> stats = {"history": [
    ...     {"status": "COMPLETED", "end_to_end_duration": 40, "alignment_duration_max": 3, "alignment_buffered": 0},
    ...     {"status": "COMPLETED", "end_to_end_duration": 60, "alignment_duration_max": 9, "alignment_buffered": 512},
    ...     {"status": "FAILED", "end_to_end_duration": 900}]}
    >>> completed_checkpoints(stats)
    {'checkpoints': 2, 'checkpoint_ms': 50.0, 'alignment_ms_max': 9.0, 'alignment_bytes_max': 512.0}
    >>> completed_checkpoints({})["checkpoint_ms"] is None
    True
    """
    import statistics

    done = [h for h in stats.get("history", []) if h.get("status") == "COMPLETED"]
    if not done:
        return {"checkpoints": 0, "checkpoint_ms": None, "alignment_ms_max": None, "alignment_bytes_max": None}
    return {"checkpoints": len(done),
            "checkpoint_ms": float(statistics.median(h.get("end_to_end_duration") or 0 for h in done)),
            "alignment_ms_max": float(max(h.get("alignment_duration_max") or 0 for h in done)),
            "alignment_bytes_max": float(max(h.get("alignment_buffered") or 0 for h in done))}
#: the job id of the last run of each benchmark job, by job name
LAST_JOB_ID: dict[str, str] = {}

#: the workloads' names in reports
WORKLOAD_ROWS = {"w1": "W1 word count", "w2": "W2 even/odd sums"}
