"""JobManager failover time: SIGKILL the leader, time until the job runs again on the new one.

Part of ``python -m flinkpy.benchmarks`` (``--only failover``). A local ZooKeeper (tickTime
200 ms, so it honours the chosen session timeout exactly) and a cluster of two JobManagers and
one TaskManager run in a temporary home; an endless even/odd job checkpoints every 100 ms.
Each run kills the current leader, then measures from the kill to the moment the last subtask
of the job reports RUNNING on the new leader (the JobManager's own timestamps), and adds a
JobManager back so that the next run has a standby again.
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ENDLESS = """
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.enable_checkpointing(100)
numbers = env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
(numbers.map(lambda n: ("even" if n % 2 == 0 else "odd", n)).key_by(lambda p: p[0]).sum(1).uid("sums")
    .add_sink(lambda v: None))
env.execute("failover benchmark")
"""


def measure_failover(session_timeout_ms: int = 4000, runs: int = 3) -> dict[str, Any]:
    from flinkpy.client.program import run_program
    from flinkpy.cluster import ClusterHome, find_cluster, rest_client_for, start_cluster, stop_cluster
    from flinkpy.config import load_config
    from flinkpy.cluster.ha import add_jobmanager
    from flinkpy.ha.zookeeper_server import start_zookeeper, stop_zookeeper

    with tempfile.TemporaryDirectory() as tmp:
        home = ClusterHome(Path(tmp) / "home")
        home.ensure()
        zk = start_zookeeper(home, port=0, tick_time_ms=200, min_session_timeout_ms=400, max_session_timeout_ms=20000)
        saved = {k: os.environ.get(k) for k in ("FLINKPY_HOME", "FLINKPY_JOBMANAGER")}
        os.environ["FLINKPY_HOME"] = str(home.path)
        os.environ.pop("FLINKPY_JOBMANAGER", None)
        try:
            config = load_config(env={}, overrides={
                "high-availability.type": "zookeeper",
                "high-availability.zookeeper.quorum": zk.quorum,
                "high-availability.zookeeper.client.session-timeout": f"{session_timeout_ms} ms",
            })
            start_cluster(home, jobmanagers=2, taskmanagers=1, slots=2, rest_port=0, config=config)
            job_file = Path(tmp) / "endless.py"
            job_file.write_text(ENDLESS)
            (submitted,) = run_program(str(job_file), [], detached=True)
            jid = submitted.job_id
            times = []
            for _ in range(runs):
                info = find_cluster(home)
                rest = rest_client_for(info, home.token())
                _wait(lambda: rest.request("GET", f"/jobs/{jid}/checkpoints")["counts"]["completed"] >= 2, 60)
                epoch = info.leader["epoch"]
                killed_ms = time.time() * 1000
                os.kill(int(info.leader["pid"]), signal.SIGKILL)

                def running_again() -> float | None:
                    now_leader = find_cluster(home).leader
                    if now_leader is None or now_leader["epoch"] <= epoch:
                        return None
                    doc = rest.job(jid)
                    subs = [s for v in doc["vertices"] for s in v["subtasks"]]
                    if doc["state"] != "RUNNING" or not all(s["status"] == "RUNNING" for s in subs):
                        return None
                    return max(s["timestamps"].get("RUNNING", 0) for s in subs)

                running_ms = _wait(running_again, 60)
                times.append(round(running_ms - killed_ms))
                add_jobmanager(home, config=config)
            rest_client_for(find_cluster(home), home.token()).cancel_job(jid)
        finally:
            stop_cluster(home, timeout_s=10)
            stop_zookeeper(home)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return {"session_timeout_ms": session_timeout_ms, "failover_ms": times, "failover_ms_median": statistics.median(times)}


def _wait(predicate: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - the cluster is failing over
            value = None
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(f"no result within {timeout_s}s")
