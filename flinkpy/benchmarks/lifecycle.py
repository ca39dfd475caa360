"""A job's downtime through its lifecycle: each upgrade mode and an in-place rescale
(``--only lifecycle``).

A cluster of two TaskManagers with two slots each runs, in a temporary home, a paced job: a
SequenceSource of :data:`RATE` records/s over :data:`KEYS` keys, a keyed running count that stamps
each record with the wall-clock time at which it counted it, and a VerifyingSink that commits
with the checkpoints (every 200 ms). Each run replaces the job by the same program with ``flinkpy
upgrade`` in savepoint, last-state and stateless mode (through the library's
:class:`~flinkpy.client.upgrade_runner.UpgradeRunner`, health check included), then rescales it in
place 2 -> 3 and 3 -> 2 (``flinkpy job rescale``'s REST call, then the wait for RUNNING).

The downtime of an operation is read from the records themselves: in the committed output, the
largest gap between two consecutive timestamps around the operation, from the last record
counted before it (and committed: a last-state upgrade replays what followed its checkpoint) to
the first counted after it. Beside it, the operation's own time from the call to its return
(an upgrade returns once the new job is healthy: running, with a checkpoint completed).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, summary

#: records per second of the whole source, and its keys
RATE = 1000
KEYS = 8

#: the operations of one run, in order: (key in the result, row in the report)
OPERATIONS = (
    ("savepoint", "upgrade, savepoint mode"),
    ("last-state", "upgrade, last-state mode"),
    ("stateless", "upgrade, stateless mode"),
    ("rescale-up", "rescale in place, 2 -> 3"),
    ("rescale-down", "rescale in place, 3 -> 2"),
)

JOB = """
import sys, time
from flinkpy.common import Types, WatermarkStrategy
from flinkpy.connectors.verification import SequenceSource, VerifyingSink
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.state import ValueStateDescriptor

keys, rate, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield [value[0], value[1], count, int(time.time() * 1000)]


env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(200)
records = env.from_source(SequenceSource(keys, 10**9, rate), WatermarkStrategy.no_watermarks(), "sequences").uid("sequences")
counted = records.key_by(lambda r: r[0]).process(Count()).uid("count").name("count")
counted.sink_to(VerifyingSink(out)).uid("sink").name("sink")
env.execute("lifecycle benchmark")
"""


def gap_around(stamps: list[int], start_ms: float, end_ms: float) -> int | None:
    """The largest gap between two consecutive ``stamps`` (sorted) that reaches into
    ``[start_ms, end_ms]``: the output's pause around an operation; None without records on
    both sides.

    >>> gap_around([100, 101, 102, 900, 901, 1500, 1501], 300, 950)
    798
    >>> gap_around([100, 101], 300, 950) is None
    True
    """
    best = None
    for a, b in zip(stamps, stamps[1:]):
        if b >= start_ms and a <= end_ms and (best is None or b - a > best):
            best = b - a
    if best is None or stamps[0] > end_ms or stamps[-1] < start_ms:
        return None
    return int(best)


def measure(runs: int, log: Callable[[str], None], *, quick: bool = False) -> dict[str, Any]:
    from flinkpy.client import Client
    from flinkpy.client.operations import Deadline, wait_for_state
    from flinkpy.client.upgrade import Phase, UpgradeMode, UpgradeSpec
    from flinkpy.client.upgrade_runner import UpgradeRunner
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster
    from flinkpy.connectors.verification import read_committed

    runs = 1 if quick else runs
    with tempfile.TemporaryDirectory() as tmp:
        home = ClusterHome(Path(tmp) / "home")
        home.ensure()
        windows: dict[str, list[tuple[float, float]]] = {key: [] for key, _ in OPERATIONS}
        out = Path(tmp) / "out"
        start_cluster(home, taskmanagers=2, slots=2, rest_port=0)
        try:
            client = Client(home=home.path)
            job_file = Path(tmp) / "lifecycle_job.py"
            job_file.write_text(JOB)
            args = (str(KEYS), str(RATE), str(out))
            (submitted,) = client.run(str(job_file), list(args), parallelism=2, detached=True)
            jid = submitted.job_id

            def settled(job_id: str, after: int = 2) -> None:
                """Running with ``after`` more checkpoints completed: the output before is committed."""
                deadline = Deadline(120)
                wait_for_state(client, job_id, "RUNNING", deadline, "120 s")
                done = _completed(client, job_id)
                _wait(lambda: _completed(client, job_id) >= done + after, deadline)

            settled(jid)
            for run in range(runs):
                for key, row in OPERATIONS:
                    log(f"lifecycle: {row}, run {run + 1} of {runs} ...")
                    start = time.time() * 1000
                    if key.startswith("rescale"):
                        client.cluster.rescale(jid, parallelism=3 if key == "rescale-up" else 2)
                        wait_for_state(client, jid, "RUNNING", Deadline(120), "120 s")
                    else:
                        spec = UpgradeSpec(job_id=jid, program=str(job_file), args=args, mode=UpgradeMode(key), parallelism=2,
                                           ready_timeout_ms=120_000)
                        machine = UpgradeRunner(client, spec, step_timeout_s=120).run()
                        if machine.phase is not Phase.DONE:
                            raise RuntimeError(f"the {key} upgrade of job {jid} ended {machine.phase.value}: {machine.reason}")
                        jid = str(machine.new_job_id)
                    windows[key].append((start, time.time() * 1000))
                    settled(jid)
            client.cancel(jid)
        finally:
            stop_cluster(home, timeout_s=10)
        stamps = sorted(int(rec[3]) for rec in read_committed(out))
    result: dict[str, Any] = {"rate": RATE, "keys": KEYS, "records": len(stamps)}
    for key, _ in OPERATIONS:
        gaps = [gap_around(stamps, a, b) for a, b in windows[key]]
        if None in gaps:
            raise RuntimeError(f"lifecycle: no committed records on both sides of a {key} operation")
        result[key] = {"downtime_ms": gaps, "command_ms": [round(b - a) for a, b in windows[key]]}
    return result


def _completed(client: Any, job_id: str) -> int:
    return int(((client.checkpoints(job_id) or {}).get("counts") or {}).get("completed") or 0)


def _wait(predicate: Callable[[], Any], deadline: Any) -> None:
    while not predicate():
        if deadline.left() <= 0:
            raise TimeoutError("the job completed no checkpoint in time")
        time.sleep(0.05)


# -- report -----------------------------------------------------------------------------------


def report(result: dict[str, Any]) -> list[str]:
    if not result:
        return []
    lines = []
    for key, row in OPERATIONS:
        e = result[key]
        down, took = e["downtime_ms"], e["command_ms"]
        lines.append(f"{row}: output paused {sorted(down)[len(down) // 2]} ms median ({', '.join(map(str, down))}); "
                     f"the command took {sorted(took)[len(took) // 2]} ms median, at {result['rate']} records/s")
    return lines


def figures(result: dict[str, Any]) -> list[Figure]:
    """Table ``lifecycle``: per operation, the output's pause and the command's time."""
    out: list[Figure] = []
    for key, row in OPERATIONS:
        if key in result:
            out += summary("lifecycle", row, "last record before to first after", result[key]["downtime_ms"], Unit.MS)
            out += summary("lifecycle", row, "the command, call to return", result[key]["command_ms"], Unit.MS)
    return out
