"""Checkpoints under sustained back-pressure: aligned, aligned with buffer debloating, unaligned.

Part of ``python -m flinkpy.benchmarks`` (``--only backpressure``). The job: a paced source of
integers (p=2) whose sink (p=2, behind a rebalance, so each sink subtask aligns barriers over
two channels) is throttled to a tenth of the source's rate. The source is back-pressured all
along; every credit is spent and every buffer full, so a barrier queues behind the whole
backlog in flight. Exactly-once checkpoints every 1 s; each configuration runs until
``checkpoints`` of them completed (or a deadline), then is canceled. Reported from the job's
checkpoint statistics (``GET /jobs/<id>/checkpoints``, what ``flinkpy checkpoint list --json``
shows): the end-to-end duration of the completed checkpoints (median, p99), their alignment
time (median of the largest per checkpoint), and the sink's throughput over the same time.

The first configuration is aligned checkpoints, the second the same with
``taskmanager.network.memory.buffer-debloat.enabled`` (target 1 s), the third unaligned
checkpoints (``execution.checkpointing.unaligned.enabled``): the barriers overtake the backlog,
which is stored with each checkpoint; the report adds the bytes stored in flight and the sink's
throughput relative to the aligned run's.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, cells

#: the sink's share of the source's rate
SLOWDOWN = 10


class PacedIntegers:
    """An unbounded source of consecutive integers at ``rate`` records per second per subtask."""

    def __new__(cls, rate: float) -> Any:
        from flinkpy.connectors.base import Boundedness, Source, SourceReader

        class Reader(SourceReader):
            def __init__(self, start: int) -> None:
                self.next = start
                self.sent = 0
                self.began = time.monotonic()

            def poll(self, max_records: int) -> list | None:
                due = int((time.monotonic() - self.began) * rate) - self.sent
                n = min(max_records, due)
                if n <= 0:
                    return []
                batch = list(range(self.next, self.next + n))
                self.next += n
                self.sent += n
                return batch

            def snapshot_state(self) -> Any:
                return self.next

        class Paced(Source):
            boundedness = Boundedness.CONTINUOUS_UNBOUNDED
            #: its position is its snapshot: a restore rewinds it exactly
            guarantee = "exactly-once"
            needs = ""

            def create_reader(self, ctx: Any) -> SourceReader:
                restored = ctx.restored_state
                return Reader(restored if isinstance(restored, int) else ctx.subtask_index * 10**12)

        return Paced()


class ThrottledSink:
    """A SinkFunction that takes at least ``1 / rate`` seconds per record on average (it sleeps
    the difference every few records), so its rate is exact however fast records arrive."""

    def __init__(self, rate: float):
        self.rate = rate

    def open(self, runtime_context: Any) -> None:
        self.count = 0
        self.began = time.monotonic()

    def invoke(self, value: Any, context: Any) -> None:
        self.count += 1
        if self.count % 16 == 0:
            ahead = self.count / self.rate - (time.monotonic() - self.began)
            if ahead > 0:
                time.sleep(ahead)


def build(env: Any, source_rate: float) -> None:
    """Source (p=2) -> map -> rebalance -> throttled sink (p=2, a tenth of the source's rate)."""
    from flinkpy.common import WatermarkStrategy

    sink_rate = source_rate / SLOWDOWN
    (
        env.from_source(PacedIntegers(source_rate), WatermarkStrategy.no_watermarks(), "paced")
        .map(lambda n: n * 2)
        .rebalance()
        .add_sink(ThrottledSink(sink_rate))
        .name("throttled sink")
    )


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _sink_records(rest: Any, jid: str) -> int:
    doc = rest.job(jid)
    return sum(int(s.get("read-records", 0) or 0) for v in doc.get("vertices", []) if "throttled sink" in v.get("name", "")
               for s in v.get("subtasks", []))


def run_config(address: str, token: str, name: str, settings: dict[str, str], *, source_rate: float, checkpoints: int,
               deadline_s: float, log: Callable[[str], None]) -> dict[str, Any]:
    """One configuration: run until ``checkpoints`` checkpoints completed after the warm-up,
    then cancel; the figures come from the job's own checkpoint statistics."""
    from flinkpy.common import Configuration
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.network.rest_client import RestClient
    from flinkpy.program.context import ExecutionContext, execution_context

    from flinkpy.benchmarks.workloads import ROOT

    rest = RestClient(address, token)
    with execution_context(ExecutionContext(address=address, token=token, python_path=[str(ROOT)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.configure(Configuration({"execution.checkpointing.timeout": "10 min", **settings}))
        env.set_parallelism(2)
        env.enable_checkpointing(1000)
        build(env, source_rate)
        client = env.execute_async(name)
    jid = client.get_job_id()

    def completed() -> int:
        return int(rest.request("GET", f"/jobs/{jid}/checkpoints")["counts"]["completed"])

    try:
        began = time.monotonic()
        # warm-up: the first checkpoint completes once the backlog has built up
        while completed() < 1 and time.monotonic() - began < deadline_s:
            time.sleep(0.2)
        first = completed()
        t0, r0 = time.monotonic(), _sink_records(rest, jid)
        while completed() < first + checkpoints and time.monotonic() - began < deadline_s:
            time.sleep(0.2)
        t1, r1 = time.monotonic(), _sink_records(rest, jid)
        stats = rest.request("GET", f"/jobs/{jid}/checkpoints", params={"history": 200})
        sizes = _debloated_sizes(rest, jid)
    finally:
        client.cancel()
    done = [h for h in stats.get("history", []) if h.get("status") == "COMPLETED" and h["id"] > first]
    durations = [float(h["end_to_end_duration"]) for h in done]
    alignments = [float(h.get("alignment_duration_max") or 0) for h in done]
    entry: dict[str, Any] = {
        "settings": settings,
        "checkpoints": len(done),
        "failed": int(stats["counts"]["failed"]),
        "duration_ms_median": statistics.median(durations) if durations else None,
        "duration_ms_p99": _percentile(durations, 0.99),
        "duration_ms_max": max(durations) if durations else None,
        "alignment_ms_median": statistics.median(alignments) if alignments else None,
        "alignment_ms_max": max(alignments) if alignments else None,
        "sink_rate": (r1 - r0) / (t1 - t0) if t1 > t0 else None,
        "target_sink_rate": source_rate / SLOWDOWN * 2,
        "debloated_buffer_size": sizes,
        "persisted_data_median": statistics.median([float(h.get("persisted_data") or 0) for h in done]) if done else None,
        "durations_ms": durations,
    }
    log(f"{name}: {entry['checkpoints']} checkpoints, median {entry['duration_ms_median']} ms, p99 {entry['duration_ms_p99']} ms")
    return entry


def _debloated_sizes(rest: Any, jid: str) -> list[int]:
    """The buffer size each sink subtask announced last (empty without debloating)."""
    doc = rest.job(jid)
    out: list[int] = []
    for v in doc.get("vertices", []):
        if "throttled sink" not in v.get("name", ""):
            continue
        for s in v.get("subtasks", []):
            size = (s.get("metrics") or {}).get("debloatedBufferSize")
            if size is not None:
                out.append(int(size))
    return out


def measure(address: str, token: str, log: Callable[[str], None], *, quick: bool = False) -> dict[str, Any]:
    """Aligned checkpoints, then the same with buffer debloating, on one cluster in one run."""
    source_rate = 20_000.0  # per source subtask; the two sink subtasks take a tenth of both
    checkpoints = 5 if quick else 15
    deadline = 120.0 if quick else 400.0
    result: dict[str, Any] = {"source_rate": source_rate * 2, "sink_rate": source_rate * 2 / SLOWDOWN}
    log("back-pressure: aligned checkpoints every 1 s, sink at a tenth of the source's rate ...")
    result["aligned"] = run_config(address, token, "bench-backpressure-aligned", {}, source_rate=source_rate,
                                   checkpoints=checkpoints, deadline_s=deadline, log=log)
    log("back-pressure: the same with buffer debloating (target 1 s) ...")
    result["debloated"] = run_config(address, token, "bench-backpressure-debloated",
                                     {"taskmanager.network.memory.buffer-debloat.enabled": "true"},
                                     source_rate=source_rate, checkpoints=checkpoints, deadline_s=deadline, log=log)
    log("back-pressure: unaligned checkpoints ...")
    result["unaligned"] = run_config(address, token, "bench-backpressure-unaligned",
                                     {"execution.checkpointing.unaligned.enabled": "true"},
                                     source_rate=source_rate, checkpoints=checkpoints, deadline_s=deadline, log=log)
    aligned_rate, unaligned_rate = result["aligned"]["sink_rate"], result["unaligned"]["sink_rate"]
    result["unaligned"]["sink_rate_vs_aligned"] = unaligned_rate / aligned_rate if aligned_rate and unaligned_rate else None
    return result


def report(result: dict[str, Any]) -> list[str]:
    """The report's lines (people's table)."""
    if not result:
        return []
    lines = [f"back-pressure: source {result['source_rate'] / 1e3:.0f} k ints/s offered, sink throttled to "
             f"{result['sink_rate'] / 1e3:.0f} k/s; exactly-once checkpoints every 1 s"]
    for name in ("aligned", "debloated", "unaligned"):
        e = result.get(name)
        if not e:
            continue
        label = {"aligned": "aligned", "debloated": "aligned + buffer debloating", "unaligned": "unaligned"}[name]
        rate = f"{e['sink_rate']:.0f}" if e["sink_rate"] is not None else "?"
        lines.append(
            f"  {label:28} {e['checkpoints']:>3} checkpoints: duration median {_ms(e['duration_ms_median'])}, "
            f"p99 {_ms(e['duration_ms_p99'])}; alignment median {_ms(e['alignment_ms_median'])}, max {_ms(e['alignment_ms_max'])}; "
            f"sink {rate} records/s"
        )
    e = result.get("unaligned")
    if e:
        vs = e.get("sink_rate_vs_aligned")
        lines.append(f"  unaligned: median {(e.get('persisted_data_median') or 0) / 1024:.0f} KiB in flight per checkpoint; "
                     f"sink throughput {'?' if vs is None else f'{vs * 100:.1f}%'} of aligned")
    else:
        lines.append("  unaligned: not measured")
    return lines


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


#: the configurations' rows in the report
LABELS = {"aligned": "aligned", "debloated": "aligned + buffer debloating", "unaligned": "unaligned"}


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (table ``backpressure``)."""
    out: list[Figure] = []
    for name, label in LABELS.items():
        if result.get(name):
            out += cells("backpressure", label, result[name], [
                ("checkpoints", "checkpoints", Unit.COUNT), ("duration, median", "duration_ms_median", Unit.MS),
                ("duration, p99", "duration_ms_p99", Unit.MS), ("alignment, median", "alignment_ms_median", Unit.MS),
                ("alignment, max", "alignment_ms_max", Unit.MS), ("sink", "sink_rate", Unit.RECORDS_PER_S),
                ("sink / aligned", "sink_rate_vs_aligned", Unit.RATIO),
                ("in flight per checkpoint, median", "persisted_data_median", Unit.BYTES),
                ("failed checkpoints", "failed", Unit.COUNT),
            ])
    return out
