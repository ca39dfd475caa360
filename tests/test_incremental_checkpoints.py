"""Incremental checkpoints of the RocksDB backend, on a real cluster.

- A job checkpoints incrementally (later checkpoints reference files earlier ones uploaded) and,
  SIGKILLed right after a checkpoint completed, restores from it exactly.
- Reference counting: a hundred checkpoints with retention 3 and a task killed on the way; every
  retained checkpoint stays restorable while the job runs (each file it references is there,
  checksum and all), and after the job is cancelled (retaining its checkpoints) the job's
  ``shared/`` directory holds exactly the files the retained checkpoints reference: no orphan,
  nothing missing.
- Restore modes: ``--claim-mode claim`` hands a retained checkpoint to the new job, which deletes
  it (and the shared files only it referenced) once its own checkpoints subsume it;
  ``no_claim`` leaves it untouched and the new job's first checkpoint references none of its
  files.
- An incremental checkpoint restores on the heap backend and at another parallelism.

Every keyed sum in a checkpoint is checked against the source's position in the same checkpoint
(a consistent cut), computed independently here.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_json, wait_for
from flinkpy.checkpoint.shared_state import metadata_shared_files
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.state.incremental import read_keyed_state

KEYS = 500

#: sums of n per key n % KEYS over a DataGeneratorSource of n = 0, 1, 2, ... (paced, endless or not)
JOB = '''
import sys
from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import DataGeneratorSource

count = None if sys.argv[1] == "endless" else int(sys.argv[1])
rate = float(sys.argv[2])
env = StreamExecutionEnvironment.get_execution_environment()
numbers = env.from_source(DataGeneratorSource(lambda n: n, count, rate), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
sums = numbers.map(lambda n: (n %% %d, n)).name("pair").key_by(lambda p: p[0]).sum(1).name("sums").uid("sums")
if count is None:
    sums.filter(lambda p: False).print()
else:
    sums.print()
env.execute("incremental sums")
''' % KEYS

ROCKSDB = ["-D", "state.backend.type=rocksdb", "-D", "execution.checkpointing.incremental=true"]


def flags(interval: str = "50ms", retained: int = 3, restart: str = "fixed-delay") -> list[str]:
    return [
        *ROCKSDB,
        "-D", f"execution.checkpointing.interval={interval}",
        "-D", f"execution.checkpointing.num-retained={retained}",
        "-D", "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
        "-D", f"restart-strategy.type={restart}",
        "-D", "restart-strategy.fixed-delay.attempts=3",
        "-D", "restart-strategy.fixed-delay.delay=0s",
    ]


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "incremental_sums.py"
    path.write_text(JOB)
    return path


def submit(cli, job_file: Path, *args: str, count: str = "endless", rate: float = 4000, p: int = 2) -> str:
    res = cli("run", "-d", "-p", str(p), *args, "--json", str(job_file), count, str(rate))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def completed(jid: str) -> int:
    return cli_json("checkpoint", "list", jid)["counts"]["completed"]


def retained_dirs(home: Path, jid: str) -> list[Path]:
    found = [m.parent for m in (home / "checkpoints").glob(f"{jid}/chk-*/_metadata")]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def consistent_cut(storage: CheckpointStorage, directory: Path) -> dict[str, Any]:
    """Read a checkpoint (incremental keyed state included) and check that every keyed sum
    equals the sum of the numbers the source emitted before its position; return _metadata."""
    doc = storage.read_metadata(str(directory))
    ops = {op["uid"]: op for op in doc["operators"]}
    want: Counter = Counter()
    for start, end in emitted_ranges(doc):
        for n in range(start, end):
            want[n % KEYS] += n
    have: Counter = Counter()
    for sub in ops["sums"]["subtasks"]:
        if sub["keyed_state"] is None:
            continue
        snapshot = read_keyed_state(storage, str(directory), sub["keyed_state"])
        for groups in snapshot["states"]["_reduce"]["key_groups"].values():
            for key, value in groups.items():
                have[key] += value[1]
    assert have == want, f"{directory.name} is not a consistent cut"
    return doc


def emitted_ranges(doc: dict[str, Any], uid: str = "numbers") -> list[tuple[int, int]]:
    """The numbers the generator source ``uid`` emitted before a checkpoint: its readers record
    the ranges still to emit, so what was emitted is [0, 2**62) minus those."""
    (source,) = [op for op in doc["operators"] if op["uid"] == uid]
    remaining = sorted((int(a), int(b)) for s in source["subtasks"] for a, b in (s["source_offsets"] or {}).get("ranges", []))
    done, cursor = [], 0
    for start, end in remaining:
        if start > cursor:
            done.append((cursor, start))
        cursor = max(cursor, end)
    return done


@pytest.mark.timeout(120)
def test_a_hundred_checkpoints_with_retention_3_leave_no_orphan_and_lose_no_file(cluster, cli, flinkpy_home: Path, job_file: Path) -> None:
    jid = submit(cli, job_file, *flags(interval="20ms", retained=3))
    storage = CheckpointStorage(str(flinkpy_home / "checkpoints"))
    shared_dir = flinkpy_home / "checkpoints" / jid / "shared"
    checked = 0
    killed = False
    # a hundred checkpoints, and at least six retained ones verified while the job runs (on a
    # quiet machine a hundred checkpoints of 20 ms are done before the CLI has listed a few)
    while completed(jid) < 100 or checked < 6:
        for directory in retained_dirs(flinkpy_home, jid):
            try:
                report = storage.verify(str(directory))
            except Exception:  # noqa: BLE001 - discarded between the listing and the read
                continue
            if not report.restorable and not (directory / "_metadata").exists():
                continue  # discarded while being verified (a discard deletes _metadata first)
            assert report.restorable, [str(p) for p in report.problems]
            checked += 1
        if not killed and completed(jid) >= 40:
            # a task dies mid-run: its in-flight upload is abandoned, the job restores and goes on
            victim = _keyed_task(jid)
            os.kill(victim, signal.SIGKILL)
            killed = True
    assert killed and checked >= 6
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: cli_json("job", "show", jid)["state"] == "CANCELED", timeout=20, message="CANCELED")
    dirs = retained_dirs(flinkpy_home, jid)
    assert len(dirs) == 3, dirs
    referenced: set[str] = set()
    for directory in dirs:
        doc = consistent_cut(storage, directory)
        referenced |= {os.path.basename(u) for u in metadata_shared_files(doc)}
    # later checkpoints build on earlier ones: files uploaded by older checkpoints are referenced
    owners = {}
    for directory in dirs:
        doc = storage.read_metadata(str(directory))
        owners[doc["checkpoint_id"]] = sorted({f["checkpoint_id"] for op in doc["operators"] for s in op["subtasks"] for f in (s["keyed_state"] or {}).get("shared", [])})
    assert any(min(ids) < cid for cid, ids in owners.items()), owners

    def orphans_and_missing() -> tuple[list[str], list[str]]:
        present = {p.name for p in shared_dir.iterdir()}
        return sorted(present - referenced), sorted(referenced - present)

    wait_for(lambda: orphans_and_missing() == ([], []), timeout=20, message=f"shared/ to hold exactly the {len(referenced)} referenced files", describe=orphans_and_missing)
    # inspect shows both sizes; a checkpoint right after a compaction may upload all it references
    summaries = [cli_json("checkpoint", "inspect", str(d))["summary"] for d in dirs]
    assert all(x["incremental"] for x in summaries)
    assert any(x["incremental_size"] < x["full_size"] for x in summaries), summaries


def _keyed_task(jid: str) -> int:
    job = cli_json("job", "show", jid)
    for v in job["vertices"]:
        if "sums" in v["name"]:
            return next(s["pid"] for s in v["subtasks"] if s["pid"])
    raise AssertionError(f"no keyed task in {job['vertices']}")


@pytest.mark.timeout(120)
def test_claim_mode_hands_the_checkpoint_over_and_no_claim_leaves_it(cluster, cli, flinkpy_home: Path, job_file: Path) -> None:
    storage = CheckpointStorage(str(flinkpy_home / "checkpoints"))
    old = run_then_cancel(cli, job_file, *flags(retained=1), checkpoints=3)
    (chk,) = retained_dirs(flinkpy_home, old)
    old_files = set(metadata_shared_files(storage.read_metadata(str(chk))))
    assert old_files

    # no_claim (the default): the new job neither references nor deletes the old files
    new = run_then_cancel(cli, job_file, *flags(retained=1), "-s", str(chk), checkpoints=2)
    (mine,) = retained_dirs(flinkpy_home, new)
    assert not set(metadata_shared_files(consistent_cut(storage, mine))) & old_files
    assert (chk / "_metadata").exists() and all(os.path.exists(u) for u in old_files)

    # claim: the new job builds on the old checkpoint and deletes it once subsumed
    claimed = submit(cli, job_file, *flags(retained=1), "-s", str(chk), "--claim-mode", "claim")
    wait_for(lambda: completed(claimed) >= 1, timeout=30, message="a checkpoint of the claiming job")
    wait_for(lambda: not chk.exists(), timeout=20, message="the claimed checkpoint deleted")
    assert cli("cancel", claimed).returncode == 0
    wait_for(lambda: cli_json("job", "show", claimed)["state"] == "CANCELED", timeout=20, message="CANCELED")
    (latest,) = retained_dirs(flinkpy_home, claimed)
    kept = set(metadata_shared_files(consistent_cut(storage, latest)))
    # whatever of the claimed files the claiming job still references is there; the rest is gone
    # (the coordinator's tests show the first checkpoint after a claim builds on the claimed one)
    assert storage.verify(str(latest)).restorable
    wait_for(lambda: not [u for u in old_files - kept if os.path.exists(u)], timeout=20, message="the claimed files no checkpoint references deleted")


def run_then_cancel(cli, job_file: Path, *args: str, checkpoints: int, p: int = 2) -> str:
    """Run the endless job until ``checkpoints`` completed, cancel it (retaining them)."""
    jid = submit(cli, job_file, *args, p=p)
    wait_for(lambda: completed(jid) >= checkpoints, timeout=40, message=f"{checkpoints} checkpoints of {jid}")
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: cli_json("job", "show", jid)["state"] == "CANCELED", timeout=20, message="CANCELED")
    return jid


@pytest.mark.timeout(120)
def test_an_incremental_checkpoint_restores_on_the_heap_and_at_another_parallelism(cluster, cli, flinkpy_home: Path, job_file: Path) -> None:
    storage = CheckpointStorage(str(flinkpy_home / "checkpoints"))
    old = run_then_cancel(cli, job_file, *flags(retained=1), checkpoints=3)
    (chk,) = retained_dirs(flinkpy_home, old)
    consistent_cut(storage, chk)
    # the restored jobs go on from the checkpoint; their own checkpoints are consistent cuts only
    # if the restored sums were exact
    heap = [a if a != "state.backend.type=rocksdb" else "state.backend.type=hashmap" for a in flags(retained=1)]
    for args, p in ((heap, 2), (flags(retained=1), 3)):
        new = run_then_cancel(cli, job_file, *args, "-s", str(chk), checkpoints=2, p=p)
        (latest,) = retained_dirs(flinkpy_home, new)
        doc = consistent_cut(storage, latest)
        assert {op["uid"]: op["parallelism"] for op in doc["operators"]}["sums"] == p


def test_claim_mode_flag_is_checked(cli, tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text("print('never runs')\n")
    res = cli("run", "--claim-mode", "bogus", "-s", str(tmp_path), str(job))
    assert res.returncode == 2 and "is not a claim mode" in res.stderr and "Traceback" not in res.stderr
    res = cli("run", "--claim-mode", "claim", str(job))
    assert res.returncode == 2 and "needs -s PATH" in res.stderr
