"""The seeds' story in one run: a stateful job, a crash, recovery by itself, an exact result.

    python examples/showcase.py [--count N] [--parallelism P]

It starts an embedded local cluster (a real JobManager, a TaskManager, a process per task),
runs even/odd running sums over 1..N with exactly-once checkpoints every 200 ms, waits for a
checkpoint, then kills one of the job's task processes with SIGKILL. Nobody helps the job: the
JobManager notices the dead task at once, its restart strategy restarts the tasks, every task
restores its state from the latest completed checkpoint, the sources rewind to the offsets in it,
and the job runs to the end. The final sums are then checked against the closed formula.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from flinkpy.connectors.collect import collect_sink
from flinkpy.program.context import ExecutionContext, execution_context
from flinkpy.network.rest_client import RestClient
from flinkpy.cluster import EmbeddedCluster
from flinkpy.common import RestartStrategies, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"  [{time.monotonic() - STARTED:5.1f}s] {message}", flush=True)


def wait(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"showcase: gave up waiting for {what}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=3_000_000, help="sum the integers 1..COUNT (default 3,000,000)")
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args(argv)
    n, p = args.count, args.parallelism

    print(f"flinkpy showcase: even/odd running sums over 1..{n:,} at parallelism {p}")
    print("  exactly-once checkpoints every 200 ms; restart strategy: fixed delay, 3 attempts, no delay")
    sink, read_results = collect_sink()
    with EmbeddedCluster(slots=p, job_stdout=subprocess.DEVNULL) as cluster:
        rest = RestClient(cluster.rest_address, cluster.token())
        with execution_context(ExecutionContext(address=cluster.rest_address, token=cluster.token())):
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(p)
            env.enable_checkpointing(200)
            env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
            (
                env.from_source(NumberSequenceSource(1, n), WatermarkStrategy.no_watermarks(), "numbers")
                .map(lambda x: ("even" if x % 2 == 0 else "odd", x))
                .key_by(lambda pair: pair[0])
                .sum(1)
                .uid("sums")
                .sink_to(sink)
            )
            job_id = env.execute_async("showcase").get_job_id()
        say(f"job {job_id} submitted to the embedded cluster at {cluster.rest_address}")

        def completed() -> int:
            return rest.request("GET", f"/jobs/{job_id}/checkpoints")["counts"]["completed"]

        first = wait(lambda: completed() >= 1, "a completed checkpoint")
        latest = rest.request("GET", f"/jobs/{job_id}/checkpoints")["latest"]["completed"]
        say(f"checkpoint {latest['id']} completed: {latest['num_acknowledged_subtasks']} tasks acknowledged, {latest['state_size']} bytes of state")
        vertex = next(v for v in rest.job(job_id)["vertices"] if "Sum" in v["name"])
        victim = vertex["subtasks"][-1]
        os.kill(victim["pid"], signal.SIGKILL)
        say(f"SIGKILL -> task '{vertex['name']}' ({victim['subtask'] + 1}/{vertex['parallelism']}), pid {victim['pid']}")
        del first

        wait(lambda: rest.job(job_id)["restarts"] >= 1, "the restart")
        stats = rest.request("GET", f"/jobs/{job_id}/checkpoints")
        restored = (stats["latest"] or {}).get("restored") or {}
        cause = rest.job_exceptions(job_id)["exceptionHistory"]["entries"][-1]
        say(f"the JobManager saw it: {cause['message']}")
        say(f"restarted ({cause['exceptionName'].rsplit('.', 1)[-1]}), every task restored from checkpoint {restored.get('id', '-')}")
        result = rest.wait_for_job(job_id, 120)
        say(f"job {result.get('application-status')} after {result.get('net-runtime')} ms")

    finals: dict[str, int] = {}
    for key, total in read_results():
        finals[key] = total
    half = n // 2
    expected = {"even": half * (half + 1), "odd": (n - half) ** 2}
    ok = True
    for key in ("even", "odd"):
        good = finals.get(key) == expected[key]
        ok &= good
        print(f"  {key:>4}: {finals.get(key)} (expected {expected[key]}) {'exact' if good else 'WRONG'}")
    print("  exactly-once state: the crash changed nothing." if ok else "  the result is wrong!")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
