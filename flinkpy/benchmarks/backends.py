"""The state-backend part of the benchmark (``python -m flinkpy.benchmarks --only backends``).

- W1 and W2 on the RocksDB backend against the heap backend, in the same run (p=2).
- For a keyed state of N keys (each value a 128-byte incompressible payload, about 150 bytes a
  key in the store): the first incremental checkpoint (which uploads everything), incremental
  checkpoints after about 1% of the keys changed, and a full snapshot of the same state (a
  canonical savepoint) — sizes and durations; the synchronous pause of the incremental ones.
- Restoring a job from the last incremental checkpoint: submit to every task running, restored.

The job: a generator's two subtasks emit the numbers of two halves of the key space, each up to
N/2 as fast as they can (the load: every key gets state once), after that at a rate that changes
about 1% of the keys between two checkpoints.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, cells, summary
from flinkpy.benchmarks.workloads import ROOT, WORKLOAD_ROWS

SPREAD = 2**61  # the endless generator's second subtask starts here


def _value(n: int) -> tuple[int, bytes]:
    # 128 incompressible bytes: RocksDB compresses its files, and a repeated digest would halve
    return n, hashlib.blake2b(str(n).encode(), digest_size=64).digest() + hashlib.blake2b(str(-n).encode(), digest_size=64).digest()


def _load_then_trickle(keys: int, rate: float, marker_dir: str) -> Any:
    """An endless generator source of two subtasks: subtask 0 emits 0, 1, 2, ..., subtask 1
    keys/2, keys/2 + 1, ...; each its first keys/2 as fast as it can (so that every key gets
    state once), leaving a marker file when done, then ``rate`` numbers a second."""
    half = (keys + 1) // 2
    from flinkpy.connectors.datagen import DataGeneratorReader, DataGeneratorSource
    from flinkpy.connectors.number_sequence import NumberSequenceReader, restore_ranges

    class Reader(DataGeneratorReader):
        def __init__(self, numbers: Any, subtask: int) -> None:
            super().__init__(numbers, lambda n: n if n < SPREAD else n - SPREAD + half, None)
            self.subtask = subtask

        def poll(self, max_records: int) -> list | None:
            if self._rate is None and self._emitted >= half:
                Path(marker_dir, f"loaded-{self.subtask}").touch()
                self._rate, self._started, self._emitted = rate, None, 0
            elif self._rate is None:
                max_records = min(max_records, half - self._emitted)
            return super().poll(max_records)

    class LoadThenTrickle(DataGeneratorSource):
        def create_reader(self, ctx: Any) -> Any:
            numbers = NumberSequenceReader(ctx, restore_ranges(ctx.restored_state, ctx, [(0, 2**62)]))
            return Reader(numbers, ctx.subtask_index)

    return LoadThenTrickle(lambda n: n, None)


def _keep(keys: int) -> Any:
    from flinkpy.common import Types
    from flinkpy.datastream import KeyedProcessFunction
    from flinkpy.datastream.state import ValueStateDescriptor

    class Keep(KeyedProcessFunction):
        def open(self, runtime_context: Any) -> None:
            self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.PICKLED_BYTE_ARRAY()))

        def process_element(self, value: int, ctx: Any) -> Any:
            self.last.update(_value(value))
            return []

    return Keep()


def job_large_state(env: Any, keys: int, rate: float, marker_dir: str) -> None:
    from flinkpy.common import WatermarkStrategy
    from flinkpy.connectors.print_sink import DiscardingSink

    (
        env.from_source(_load_then_trickle(keys, rate, marker_dir), WatermarkStrategy.no_watermarks(), "numbers")
        .uid("numbers")
        .key_by(lambda v, k=keys: v % k)
        .process(_keep(keys))
        .name("keep")
        .uid("keep")
        .sink_to(DiscardingSink())
    )


def _rocksdb(incremental: bool = False) -> Any:
    from flinkpy.datastream.state_backend import EmbeddedRocksDBStateBackend

    return EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=incremental)


class RssPeak:
    """The largest resident memory of some processes, sampled on a thread while in use.

    ``pids()`` names the processes; it is asked again every ``refresh_s`` seconds (every half
    second at most while it names none), since tasks being deployed or restarted get new pids.
    """

    def __init__(self, pids: Callable[[], list[int]], refresh_s: float = 1.0) -> None:
        import threading

        self.peak = 0
        self._pids, self._refresh_s = pids, refresh_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        pids, refreshed = self._pids(), time.monotonic()
        while not self._stop.wait(0.1):
            if time.monotonic() - refreshed > (self._refresh_s if pids else min(self._refresh_s, 0.5)):
                pids, refreshed = self._pids(), time.monotonic()
            for pid in pids:
                try:
                    self.peak = max(self.peak, psutil.Process(pid).memory_info().rss)
                except psutil.Error:
                    pass

    def start(self) -> RssPeak:
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop sampling; return the peak (bytes)."""
        self._stop.set()
        self._thread.join(timeout=5)
        return self.peak

    def __enter__(self) -> RssPeak:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _keyed_pids(rest: Any, jid: str) -> Callable[[], list[int]]:
    """The pids of the benchmark job's keyed tasks (none while it is being deployed)."""

    def pids() -> list[int]:
        try:
            return [s["pid"] for v in rest.job(jid)["vertices"] if "keep" in v["name"].lower() for s in v["subtasks"] if s.get("pid")]
        except Exception:  # noqa: BLE001 - the job is being deployed: no pids yet
            return []

    return pids


def throughput(address: str, token: str, runs: int, workloads: dict[str, tuple[int, Callable[[], float], Callable[[Any], None], str]], run_job: Callable[..., float], log: Callable[[str], None]) -> dict[str, Any]:
    """W1 and W2 at p=2 on both backends (records/s, ratios to the loop and to the heap)."""
    out: dict[str, Any] = {}
    for name, (n, loop, build, unit) in workloads.items():
        loop_s = statistics.median(loop() for _ in range(runs))
        entry: dict[str, Any] = {"records": n, "unit": unit, "loop_rate": n / loop_s}
        for backend in ("hashmap", "rocksdb"):
            log(f"{name} on {backend}, p=2 ...")

            def with_backend(env: Any, backend: str = backend) -> None:
                if backend == "rocksdb":
                    env.set_state_backend(_rocksdb())
                build(env)

            secs = statistics.median(run_job(address, token, with_backend, 2, f"bench-{name}-{backend}") for _ in range(runs))
            entry[f"{backend}_rate"] = n / secs
            entry[f"{backend}_ratio"] = (n / secs) / entry["loop_rate"]
        entry["rocksdb_vs_hashmap"] = entry["rocksdb_rate"] / entry["hashmap_rate"]
        out[name] = entry
    return out


def _figures(d: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": d["status"],
        "uploaded_bytes": d.get("checkpointed_size"),
        "full_bytes": d.get("state_size"),
        "duration_ms": d.get("end_to_end_duration"),
        "sync_ms_max": d.get("sync_duration_max"),
    }


class _LargeStateJob:
    """The large-state job on one cluster: submitting it (fresh or restored), checkpointing it
    on demand, and cancelling it so that its slots are free for the next run."""

    def __init__(self, address: str, token: str, keys: int, rate: float, compaction: str, work: str) -> None:
        from flinkpy.network.rest_client import RestClient

        self.address, self.token, self.keys, self.rate, self.compaction, self.work = address, token, keys, rate, compaction, work
        self.rest = RestClient(address, token)

    def submit(self, savepoint: str | None = None) -> str:
        from flinkpy.program.context import ExecutionContext, execution_context
        from flinkpy.common import Configuration
        from flinkpy.datastream import StreamExecutionEnvironment

        with execution_context(ExecutionContext(address=self.address, token=self.token, python_path=[str(ROOT)], savepoint_path=savepoint)):
            env = StreamExecutionEnvironment.get_execution_environment(Configuration().set_string("state.backend.rocksdb.compaction.style", self.compaction))
            env.set_parallelism(2)
            env.set_state_backend(_rocksdb(incremental=True))
            env.get_checkpoint_config().set_externalized_checkpoint_cleanup("RETAIN_ON_CANCELLATION")
            job_large_state(env, self.keys, self.rate, self.work)
            return env.execute_async(f"bench-large-state-{self.keys}").get_job_id()

    def running(self, jid: str) -> bool:
        doc = self.rest.job(jid)
        return doc["state"] == "RUNNING" and all(s["status"] == "RUNNING" for v in doc["vertices"] for s in v["subtasks"])

    def cancel(self, jid: str) -> None:
        """Cancel and wait until the job is over (its slots are free for the next one)."""
        if self.rest.job(jid)["state"] in ("RUNNING", "CREATED", "RESTARTING"):
            self.rest.cancel_job(jid)
        while self.rest.job(jid)["state"] not in ("CANCELED", "FAILED", "FINISHED"):
            time.sleep(0.05)

    def checkpoint(self, jid: str) -> dict[str, Any]:
        cid = self.rest.request("POST", f"/jobs/{jid}/checkpoints")["checkpoint_id"]
        while (d := self.rest.request("GET", f"/jobs/{jid}/checkpoints/details/{cid}"))["status"] == "IN_PROGRESS":
            time.sleep(0.02)
        return _figures(d)

    def wait_loaded(self, jid: str) -> float:
        """Seconds until both source subtasks have emitted every key once."""
        deadline = time.monotonic() + 3600
        started = time.monotonic()
        while not all(os.path.exists(os.path.join(self.work, f"loaded-{i}")) for i in range(2)):
            if time.monotonic() > deadline or self.rest.job(jid)["state"] in ("FAILED", "CANCELED"):
                cause = self.rest.request("GET", f"/jobs/{jid}/exceptions").get("root-exception")
                raise RuntimeError(f"loading {self.keys} keys did not finish: {cause}")
            time.sleep(0.5)
        return time.monotonic() - started

    def full_snapshot(self, jid: str) -> tuple[str, dict[str, Any]]:
        """A canonical savepoint: its location, and its size, duration and the keyed tasks' peak RSS."""
        target = os.path.join(self.work, "savepoints")
        t0 = time.perf_counter()
        with RssPeak(_keyed_pids(self.rest, jid)) as rss:  # the canonical file is streamed: memory stays flat
            tid = self.rest.request("POST", f"/jobs/{jid}/savepoints", body={"target-directory": target})["request-id"]
            while (st := self.rest.request("GET", f"/jobs/{jid}/savepoints/{tid}"))["status"]["id"] != "COMPLETED":
                if st.get("operation", {}).get("failure-cause"):
                    raise RuntimeError(f"savepoint failed: {st['operation']['failure-cause']}")
                time.sleep(0.05)
        full_ms = (time.perf_counter() - t0) * 1000
        location = st["operation"]["location"]
        full_bytes = sum(f.stat().st_size for f in Path(location).rglob("*") if f.is_file())
        return location, {"bytes": full_bytes, "duration_ms": round(full_ms), "task_rss_peak": rss.peak}

    def restore(self, path: str) -> tuple[float, int]:
        """Submission to every task running, restored from ``path``; the keyed tasks' peak RSS."""
        t0 = time.perf_counter()
        jid2 = self.submit(path)
        with RssPeak(_keyed_pids(self.rest, jid2)) as peak:
            while not self.running(jid2):
                if self.rest.job(jid2)["state"] in ("FAILED", "CANCELED"):
                    raise RuntimeError(f"the restored job ended: {self.rest.request('GET', f'/jobs/{jid2}/exceptions').get('root-exception')}")
                time.sleep(0.01)
            ms = (time.perf_counter() - t0) * 1000
        self.cancel(jid2)
        return ms, peak.peak


def large_state(address: str, token: str, keys: int, log: Callable[[str], None], *, changed: float = 0.01, interval_s: float | None = None,
                compaction: str = "LEVEL", checkpoints: int = 6) -> dict[str, Any]:
    """Checkpoints of ``keys`` keys on RocksDB: incremental (first, then with ``changed`` of the
    keys changed), a full canonical snapshot, and a restore from the last incremental one, with
    RocksDB's ``compaction`` style (``state.backend.rocksdb.compaction.style``).

    The interval between the checkpoints is long enough for the job to change ``changed`` of
    the keys at about 10 k records/s (what p=2 on RocksDB sustains with these values here)."""
    work = tempfile.mkdtemp(prefix="flinkpy-bench-backends-")
    if interval_s is None:
        interval_s = max(5.0, keys * changed / 10_000)
    rate = keys * changed / interval_s / 2  # per source subtask
    job = _LargeStateJob(address, token, keys, rate, compaction, work)
    jid = job.submit()
    try:
        load_s = job.wait_loaded(jid)
        log(f"  {keys} keys loaded in {load_s:.0f} s; first checkpoint ...")
        first = job.checkpoint(jid)
        increments = []
        for _ in range(checkpoints):
            time.sleep(interval_s)  # let about `changed` of the keys change (the throttled phase)
            increments.append(job.checkpoint(jid))
        log("  full snapshot (canonical savepoint) ...")
        location, full_snapshot = job.full_snapshot(jid)
        last = job.rest.request("GET", f"/jobs/{jid}/checkpoints")["latest"]["completed"]["external_path"]
    finally:
        job.cancel(jid)
    log("  restore from the last incremental checkpoint ...")
    restore_ms, _ = job.restore(str(Path(last).parent) if last.endswith("_metadata") else last)
    log("  restore from the savepoint ...")
    savepoint_restore_ms, savepoint_restore_rss = job.restore(location)
    shutil.rmtree(work, ignore_errors=True)
    return {
        "keys": keys,
        "compaction": compaction,
        "changed": changed,
        "load_s": round(load_s, 1),
        "first": first,
        "incremental": increments,
        "full_snapshot": full_snapshot,
        "restore_ms": round(restore_ms),
        "savepoint_restore": {"duration_ms": round(savepoint_restore_ms), "task_rss_peak": savepoint_restore_rss},
    }


def report(results: dict[str, Any]) -> list[str]:
    lines = []
    for name, e in results.get("throughput", {}).items():
        lines.append(
            f"{name} p2: hashmap {e['hashmap_rate'] / 1e3:.0f} k ({e['hashmap_ratio']:.2f} of the loop), rocksdb {e['rocksdb_rate'] / 1e3:.0f} k "
            f"({e['rocksdb_ratio']:.2f} of the loop, {e['rocksdb_vs_hashmap']:.2f} of hashmap)  ({e['unit']})"
        )
    for s in results.get("large_state", []):
        inc = [i for i in s["incremental"] if i["status"] == "COMPLETED"]
        mib = lambda b: (b or 0) / 2**20  # noqa: E731
        uploaded = [i["uploaded_bytes"] or 0 for i in inc]
        lines.append(
            f"{s['keys']} keys (rocksdb, {s.get('compaction', 'LEVEL')} compaction, loaded in {s['load_s']} s): first checkpoint uploads {mib(s['first']['uploaded_bytes']):.0f} MiB in {s['first']['duration_ms']} ms; "
            f"with {s['changed']:.0%} of keys changed, incremental uploads "
            + ", ".join(f"{mib(i['uploaded_bytes']):.1f} MiB of {mib(i['full_bytes']):.0f} MiB in {i['duration_ms']} ms (sync {i['sync_ms_max']} ms)" for i in inc)
            + (f" (median {mib(statistics.median(uploaded)):.1f} MiB, mean {mib(statistics.mean(uploaded)):.1f} MiB)" if uploaded else "")
            + f"; a full snapshot: {mib(s['full_snapshot']['bytes']):.0f} MiB in {s['full_snapshot']['duration_ms']} ms"
            + f" (keyed task RSS peak {mib(s['full_snapshot'].get('task_rss_peak')):.0f} MiB); restore (submit to running): {s['restore_ms']} ms"
            + (f"; restore from the savepoint: {s['savepoint_restore']['duration_ms']} ms (keyed task RSS peak {mib(s['savepoint_restore']['task_rss_peak']):.0f} MiB)"
               if "savepoint_restore" in s else "")
        )
    return lines


def figures(results: dict[str, Any]) -> list[Figure]:
    """The part's figures as records (tables ``backends`` and ``large-state``)."""
    out: list[Figure] = []
    for name, e in results.get("throughput", {}).items():
        rate = Unit(e["unit"])
        out += cells("backends", f"{WORKLOAD_ROWS[name]}, p=2", e, [
            ("plain loop", "loop_rate", rate), ("hashmap", "hashmap_rate", rate), ("hashmap / loop", "hashmap_ratio", Unit.RATIO),
            ("rocksdb", "rocksdb_rate", rate), ("rocksdb / loop", "rocksdb_ratio", Unit.RATIO),
            ("rocksdb / hashmap", "rocksdb_vs_hashmap", Unit.RATIO),
        ])
    for s in results.get("large_state", []):
        row = f"{s['keys']:,} keys, {s.get('compaction', 'LEVEL')}"
        inc = [i for i in s["incremental"] if i["status"] == "COMPLETED"]
        snap, restored = s["full_snapshot"], s.get("savepoint_restore") or {}
        out += cells("large-state", row, {"load_s": s["load_s"], "first_bytes": s["first"]["uploaded_bytes"],
                                         "first_ms": s["first"]["duration_ms"]},
                     [("loaded in", "load_s", Unit.S), ("first checkpoint: uploaded", "first_bytes", Unit.BYTES),
                      ("first checkpoint: duration", "first_ms", Unit.MS)])
        out += summary("large-state", row, "full size", [i["full_bytes"] for i in inc if i["full_bytes"]], Unit.BYTES)
        uploaded = [i["uploaded_bytes"] or 0 for i in inc]
        out += summary("large-state", row, "incremental: uploaded, median", uploaded, Unit.BYTES)
        if uploaded:
            out.append(Figure("large-state", row, "incremental: uploaded, mean", statistics.mean(uploaded), Unit.BYTES))
        out += summary("large-state", row, "incremental: duration", [i["duration_ms"] for i in inc if i["duration_ms"] is not None], Unit.MS)
        out += summary("large-state", row, "incremental: sync pause", [i["sync_ms_max"] for i in inc if i["sync_ms_max"] is not None], Unit.MS)
        out += cells("large-state", row, {"bytes": snap["bytes"], "ms": snap["duration_ms"], "rss": snap.get("task_rss_peak"),
                                         "restore": s["restore_ms"], "sp_restore": restored.get("duration_ms"),
                                         "sp_rss": restored.get("task_rss_peak")},
                     [("savepoint: size", "bytes", Unit.BYTES), ("savepoint: duration", "ms", Unit.MS),
                      ("savepoint: keyed tasks' RSS peak", "rss", Unit.BYTES), ("restore from incremental", "restore", Unit.MS),
                      ("restore from savepoint", "sp_restore", Unit.MS), ("restore from savepoint: RSS peak", "sp_rss", Unit.BYTES)])
    return out

