"""Keyed state under checkpoints: snapshot durations, savepoint and restore, recovery after a kill."""

from __future__ import annotations

import statistics
import time
from typing import Any

from flinkpy.benchmarks.workloads import ROOT, add


def job_keyed_state(env: Any, keys: int) -> None:
    """An endless job whose keyed state holds ``keys`` keys once it has run a little."""
    from flinkpy.common import WatermarkStrategy
    from flinkpy.connectors.print_sink import DiscardingSink
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    (
        env.from_source(NumberSequenceSource(0, 10**15), WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(lambda n, k=keys: n % k)
        .reduce(add)
        .sink_to(DiscardingSink())
    )


def snapshot_durations(address: str, token: str, keys: int, checkpoints: int) -> dict[str, Any]:
    """Sync and async durations of checkpoints of a keyed state of ``keys`` keys (p=1)."""
    from flinkpy.program.context import ExecutionContext, execution_context
    from flinkpy.network.rest_client import RestClient
    from flinkpy.datastream import StreamExecutionEnvironment

    rest = RestClient(address, token)
    with execution_context(ExecutionContext(address=address, token=token, python_path=[str(ROOT)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        job_keyed_state(env, keys)
        client = env.execute_async(f"bench-state-{keys}")
    jid = client.get_job_id()
    try:
        # wait until the reducer has seen every key: records_in is reported at the end only, so
        # wait until the source has certainly emitted `keys` numbers (a generous bound)
        deadline = time.monotonic() + 120

        def all_running() -> bool:
            doc = rest.job(jid)
            return doc["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in doc["vertices"])

        while not all_running() and time.monotonic() < deadline:
            time.sleep(0.05)

        def checkpoint() -> dict[str, Any]:
            cid = rest.request("POST", f"/jobs/{jid}/checkpoints")["checkpoint_id"]
            while True:
                d = rest.request("GET", f"/jobs/{jid}/checkpoints/details/{cid}")
                if d["status"] != "IN_PROGRESS":
                    return d
                time.sleep(0.02)

        # warm up until every key is in the state: the checkpointed size stops growing
        previous = -1
        while time.monotonic() < deadline:
            size = checkpoint().get("state_size") or 0
            if size == previous:
                break
            previous = size
        sync, asyncs, sizes = [], [], []
        for _ in range(checkpoints):
            d = checkpoint()
            if d["status"] == "COMPLETED":
                sync.append(d.get("sync_duration_max") or 0)
                asyncs.append(d.get("async_duration_max") or 0)
                sizes.append(d.get("state_size") or 0)
        sync.sort()
        return {
            "keys": keys,
            "checkpoints": len(sync),
            "sync_ms_median": statistics.median(sync) if sync else None,
            "sync_ms_max": max(sync) if sync else None,
            "async_ms_median": statistics.median(asyncs) if asyncs else None,
            "state_bytes": statistics.median(sizes) if sizes else None,
        }
    finally:
        rest.cancel_job(jid)



def recovery_time(address: str, token: str, keys: int) -> dict[str, Any]:
    """Kill the keyed task of a job holding ``keys`` keys; time until its tasks run again restored."""
    import os
    import signal

    from flinkpy.program.context import ExecutionContext, execution_context
    from flinkpy.network.rest_client import RestClient
    from flinkpy.common import RestartStrategies
    from flinkpy.datastream import StreamExecutionEnvironment

    rest = RestClient(address, token)
    with execution_context(ExecutionContext(address=address, token=token, python_path=[str(ROOT)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(1)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(10, 0))
        job_keyed_state(env, keys)
        jid = env.execute_async(f"bench-recovery-{keys}").get_job_id()
    try:
        deadline = time.monotonic() + 120

        def doc() -> dict[str, Any]:
            return rest.job(jid)

        while not all(v["status"] == "RUNNING" for v in doc()["vertices"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        previous, size = -1, 0
        while time.monotonic() < deadline:  # fill the state, then checkpoint it
            cid = rest.request("POST", f"/jobs/{jid}/checkpoints")["checkpoint_id"]
            while (d := rest.request("GET", f"/jobs/{jid}/checkpoints/details/{cid}"))["status"] == "IN_PROGRESS":
                time.sleep(0.01)
            size = d.get("state_size") or 0
            if size == previous:
                break
            previous = size
        keyed = next(v for v in doc()["vertices"] if "Reduce" in v["name"])
        killed_ms = time.time() * 1000
        os.kill(keyed["subtasks"][0]["pid"], signal.SIGKILL)
        while time.monotonic() < deadline:
            d = doc()
            subs = [s for v in d["vertices"] for s in v["subtasks"]]
            if d["restarts"] >= 1 and all(s["status"] == "RUNNING" and s["attempt"] >= 1 for s in subs):
                running_ms = max(s["timestamps"].get("RUNNING", 0) for s in subs)
                return {"keys": keys, "state_bytes": size, "recovery_ms": round(running_ms - killed_ms)}
            time.sleep(0.005)
        return {"keys": keys, "state_bytes": size, "recovery_ms": None}
    finally:
        rest.cancel_job(jid)



def savepoint_timing(address: str, token: str, keys: int) -> dict[str, Any]:
    """A savepoint of ``keys`` keys: its duration, and the time to restore a job from it."""
    import tempfile as _tempfile

    from flinkpy.program.context import ExecutionContext, execution_context
    from flinkpy.network.rest_client import RestClient
    from flinkpy.datastream import StreamExecutionEnvironment

    rest = RestClient(address, token)
    target = _tempfile.mkdtemp(prefix="flinkpy-bench-sp-")

    def submit(savepoint: str | None) -> str:
        with execution_context(ExecutionContext(address=address, token=token, python_path=[str(ROOT)], savepoint_path=savepoint)):
            env = StreamExecutionEnvironment.get_execution_environment()
            env.set_parallelism(1)
            job_keyed_state(env, keys)
            return env.execute_async(f"bench-savepoint-{keys}").get_job_id()

    def running(jid: str) -> bool:
        return all(v["status"] == "RUNNING" for v in rest.job(jid)["vertices"])

    jid = submit(None)
    deadline = time.monotonic() + 120
    while not running(jid) and time.monotonic() < deadline:
        time.sleep(0.02)
    previous = -1
    while time.monotonic() < deadline:  # until the state holds every key
        cid = rest.request("POST", f"/jobs/{jid}/checkpoints")["checkpoint_id"]
        while (d := rest.request("GET", f"/jobs/{jid}/checkpoints/details/{cid}"))["status"] == "IN_PROGRESS":
            time.sleep(0.01)
        if d.get("state_size") == previous:
            break
        previous = d.get("state_size")
    started = time.perf_counter()
    tid = rest.request("POST", f"/jobs/{jid}/savepoints", body={"target-directory": target})["request-id"]
    while (st := rest.request("GET", f"/jobs/{jid}/savepoints/{tid}"))["status"]["id"] != "COMPLETED":
        time.sleep(0.005)
    savepoint_ms = (time.perf_counter() - started) * 1000
    rest.cancel_job(jid)
    location = st["operation"]["location"]
    started = time.perf_counter()
    jid2 = submit(location)
    while not running(jid2) and time.monotonic() < deadline:
        time.sleep(0.005)
    restore_ms = (time.perf_counter() - started) * 1000
    rest.cancel_job(jid2)
    return {"keys": keys, "state_bytes": previous, "savepoint_ms": round(savepoint_ms), "restore_ms": round(restore_ms)}

