"""Latency: from `flinkpy run` to the first output, and per record at a paced rate."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flinkpy.benchmarks.workloads import ROOT


def first_output_latency() -> tuple[float, float]:
    """Wall time from starting `flinkpy run examples/word_count.py` to its first printed line,
    and to its exit (the embedded cluster stopped)."""
    root = ROOT
    env = dict(os.environ)
    env.pop("FLINKPY_JOBMANAGER", None)
    with tempfile.TemporaryDirectory() as home:
        env["FLINKPY_HOME"] = home
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "commands.main", "run", str(root / "examples" / "word_count.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=str(root),
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        latency = time.perf_counter() - started
        proc.stdout.read()
        proc.wait()
        ended = time.perf_counter() - started
    return latency, ended



class PacedSource:
    """A source of (sequence, emit time) records at a fixed rate, for latency measurements."""

    def __new__(cls, rate: float, total: int) -> Any:
        from flinkpy.connectors.base import Boundedness, Source, SourceReader

        class Reader(SourceReader):
            def __init__(self) -> None:
                self.sent = 0
                self.start = time.time()

            def poll(self, max_records: int) -> list | None:
                if self.sent >= total:
                    return None
                due = min(total, int((time.time() - self.start) * rate))
                n = min(max_records, due - self.sent)
                if n <= 0:
                    return []
                now = time.time()
                batch = [(self.sent + i, now) for i in range(n)]
                self.sent += n
                return batch

        class Paced(Source):
            boundedness = Boundedness.BOUNDED

            def create_reader(self, ctx: Any) -> SourceReader:
                return Reader()

        return Paced()


def latency_run(address: str, token: str, rate: float | None, total: int, buffer_timeout_ms: int) -> dict[str, Any]:
    """map -> key_by -> reduce -> sink, p=1; the sink records now - emit time per record."""
    import tempfile as _tempfile

    from flinkpy.program.context import ExecutionContext, execution_context
    from flinkpy.common import WatermarkStrategy
    from flinkpy.connectors.number_sequence import NumberSequenceSource
    from flinkpy.datastream import StreamExecutionEnvironment

    out_dir = _tempfile.mkdtemp(prefix="flinkpy-latency-")
    with execution_context(ExecutionContext(address=address, token=token, python_path=[str(ROOT)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        env.set_buffer_timeout(buffer_timeout_ms)
        if rate is None:
            src = env.from_source(NumberSequenceSource(1, total), WatermarkStrategy.no_watermarks(), "numbers").map(lambda n: (n, 0.0))
        else:
            src = env.from_source(PacedSource(rate, total), WatermarkStrategy.no_watermarks(), "paced")
        (
            src.key_by(lambda r: r[0] % 100)
            .reduce(lambda a, b: b)
            .add_sink(_LatencySink(out_dir))
        )
        started = time.perf_counter()
        result = env.execute(f"bench-latency-{rate}-{buffer_timeout_ms}")
    wall = time.perf_counter() - started
    samples = []
    for f in Path(out_dir).glob("*"):
        samples += [float(x) for x in f.read_text().split()]
    samples.sort()
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))] * 1000 if samples else None  # noqa: E731
    return {"rate": rate, "buffer_timeout_ms": buffer_timeout_ms, "throughput": total / (result.get_net_runtime() / 1000.0),
            "p50_ms": pick(0.5), "p99_ms": pick(0.99), "wall_s": wall}


class _LatencySink:
    """Keeps every 10th record's latency and writes them at the end (SinkFunction with close)."""

    def __init__(self, directory: str):
        self.directory = directory

    def open(self, runtime_context: Any) -> None:
        self.samples: list[float] = []

    def invoke(self, value: Any, context: Any) -> None:
        if value[0] % 10 == 0 and value[1]:
            self.samples.append(time.time() - value[1])

    def close(self) -> None:
        import os as _os

        with open(_os.path.join(self.directory, f"{_os.getpid()}.txt"), "w") as f:
            f.write(" ".join(f"{x:.6f}" for x in self.samples))


