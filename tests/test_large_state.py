"""State larger than memory on the RocksDB backend: load, checkpoint incrementally, SIGKILL, restore.

An endless job keeps, per key ``n % KEYS``, the largest number it saw with an incompressible
payload (128 bytes of digests) in value state. After every key has state, the keyed task is killed;
the job restores from its latest incremental checkpoint, goes on, and is cancelled keeping its
checkpoints. The last checkpoint must be a consistent cut: for every key, exactly the value of
the largest number the sources had emitted before their recorded positions — computed here
independently — and no other key. Throughout, the keyed tasks' resident memory stays under the
budget.

``FLINKPY_LARGE_STATE=1`` runs it at the issue's scale: 10,000,000 keys (over 1 GB in the
stores) with task RSS under 300 MB; it takes several minutes, so by default it runs with 100,000
keys (the same code paths: flushes, compactions, incremental uploads, a native restore).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_json, wait_for
from test_incremental_checkpoints import emitted_ranges
from flinkpy.benchmarks.backends import RssPeak
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.state.incremental import read_keyed_state

LARGE = os.environ.get("FLINKPY_LARGE_STATE") == "1"
KEYS = 10_000_000 if LARGE else 100_000
RSS_BUDGET = 300 * 1024 * 1024

JOB = '''
import hashlib
from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors import DataGeneratorSource
from flinkpy.datastream.state import ValueStateDescriptor

KEYS = %d


def payload(n):
    # 128 incompressible bytes (RocksDB compresses its files: a repeated digest would halve)
    return hashlib.blake2b(str(n).encode(), digest_size=64).digest() + hashlib.blake2b(str(-n).encode(), digest_size=64).digest()


class Keep(KeyedProcessFunction):
    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, n, ctx):
        current = self.last.value()
        if current is None or current[0] < n:  # the largest number per key: independent of the order
            self.last.update((n, payload(n)))
        return []


env = StreamExecutionEnvironment.get_execution_environment()
# the second source subtask's indices start at 2**61: its numbers start half way through the keys,
# so that the two subtasks together give every key state after about KEYS numbers
numbers = env.from_source(DataGeneratorSource(lambda i: i if i < 2**61 else i - 2**61 + KEYS // 2, None), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
numbers.key_by(lambda n: n %% KEYS).process(Keep()).name("keep").uid("keep").print()
env.execute("large state")
''' % KEYS


def payload(n: int) -> bytes:
    return hashlib.blake2b(str(n).encode(), digest_size=64).digest() + hashlib.blake2b(str(-n).encode(), digest_size=64).digest()


def emitted_numbers(doc: dict[str, Any]) -> list[tuple[int, int]]:
    """The numbers (not indices) the sources emitted before the checkpoint, as ranges, mapped
    as the job maps indices. An emitted range may straddle 2**61: a restore spreads the
    remaining ranges evenly over the readers, so a reader may take indices from the other side."""
    out = []
    for start, end in emitted_ranges(doc):
        if start < 2**61:
            out.append((start, min(end, 2**61)))
        if end > 2**61:
            out.append((max(start, 2**61) - 2**61 + KEYS // 2, end - 2**61 + KEYS // 2))
    return out


def covered_keys(doc: dict[str, Any]) -> int:
    """How many distinct keys (n % KEYS) the emitted numbers cover."""
    spans = []
    for start, end in emitted_numbers(doc):
        if end - start >= KEYS:
            return KEYS
        a, b = start % KEYS, start % KEYS + (end - start)
        spans += [(a, min(b, KEYS))] + ([(0, b - KEYS)] if b > KEYS else [])
    total, cursor = 0, 0
    for a, b in sorted(spans):
        a = max(a, cursor)
        if b > a:
            total += b - a
            cursor = b
    return total


def keyed_pids(jid: str) -> list[int]:
    try:
        job = cli_json("job", "show", jid)
    except AssertionError:
        return []
    return [s["pid"] for v in job["vertices"] if "keep" in v["name"] for s in v["subtasks"] if s["pid"]]


def latest_checkpoint(storage: CheckpointStorage, jid: str) -> dict[str, Any] | None:
    ids = storage.list_checkpoints(jid)
    for cid in reversed(ids):
        try:
            return storage.read_metadata(storage.checkpoint_dir(jid, cid))
        except Exception:  # noqa: BLE001 - discarded while being read
            continue
    return None


def du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


@pytest.mark.timeout(3600 if LARGE else 240)
def test_state_larger_than_memory_checkpoints_incrementally_and_restores_exactly(cluster, cli, flinkpy_home: Path, tmp_path: Path) -> None:
    job = tmp_path / "large_state.py"
    job.write_text(JOB)
    local = tmp_path / "rocksdb"
    local.mkdir()
    res = cli(
        "run", "-d", "-p", "2", "--json",
        "-D", "state.backend.type=rocksdb",
        "-D", f"state.backend.rocksdb.localdir={local}",
        "-D", "execution.checkpointing.incremental=true",
        "-D", f"execution.checkpointing.interval={'2s' if LARGE else '300ms'}",
        "-D", "execution.checkpointing.num-retained=2",
        "-D", "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
        "-D", "restart-strategy.type=fixed-delay",
        "-D", "restart-strategy.fixed-delay.delay=0s",
        str(job),
    )
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    storage = CheckpointStorage(str(flinkpy_home / "checkpoints"))
    wait_for(lambda: keyed_pids(jid), timeout=30, message="keyed tasks running")
    watch = RssPeak(lambda: keyed_pids(jid), refresh_s=5).start()  # asking the cluster costs a CLI process
    started = time.monotonic()
    # every key has state: the sources emitted more than KEYS numbers before a checkpoint
    wait_for(lambda: (doc := latest_checkpoint(storage, jid)) is not None and covered_keys(doc) == KEYS,
             timeout=3000 if LARGE else 180, interval=0.5, message=f"a checkpoint after {KEYS} keys")
    on_disk = du(local)
    print(f"{KEYS} keys loaded in {time.monotonic() - started:.1f}s; stores on disk: {on_disk / 2**20:.0f} MiB")

    victim = keyed_pids(jid)[0]
    os.kill(victim, signal.SIGKILL)
    before = max(storage.list_checkpoints(jid))
    wait_for(lambda: cli_json("job", "show", jid)["restarts"] >= 1 and len(keyed_pids(jid)) == 2 and victim not in keyed_pids(jid),
             timeout=600 if LARGE else 60, interval=0.5, message="the keyed task restored")
    wait_for(lambda: max(storage.list_checkpoints(jid) or [0]) >= before + 2, timeout=600 if LARGE else 60, interval=0.5, message="2 checkpoints after the restore")
    peak = watch.stop()
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: cli_json("job", "show", jid)["state"] == "CANCELED", timeout=60, message="CANCELED")
    print(f"peak keyed-task RSS {peak / 2**20:.0f} MiB")
    assert peak < RSS_BUDGET, f"a keyed task used {peak / 2**20:.0f} MiB"
    if LARGE:
        assert on_disk > 2**30, f"the stores hold only {on_disk / 2**20:.0f} MiB"

    cid = max(storage.list_checkpoints(jid))
    directory = storage.checkpoint_dir(jid, cid)
    doc = storage.read_metadata(directory)
    want: dict[int, int] = {}
    for start, end in emitted_numbers(doc):
        for n in range(max(start, end - KEYS), end):  # the largest KEYS numbers of a range decide
            k = n % KEYS
            if want.get(k, -1) < n:
                want[k] = n
    (keep,) = [op for op in doc["operators"] if op["uid"] == "keep"]
    seen = 0
    for sub in keep["subtasks"]:
        state = read_keyed_state(storage, directory, sub["keyed_state"])["states"]["last"]["key_groups"]
        for group in state.values():
            for key, (n, data) in group.items():
                assert want.get(key) == n, f"key {key}: state holds {n}, the sources' cut says {want.get(key)}"
                assert data == payload(n)
                seen += 1
    assert seen == len(want) == KEYS
