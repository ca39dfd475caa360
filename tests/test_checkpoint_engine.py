"""Checkpointing end to end: retention, manual triggers, statistics, failures, S3, FileSink.

Every test runs real JobManager/TaskManager/task processes and drives them through the CLI, as
operators do; it synchronises by polling ``flinkpy checkpoint list --json`` (``wait_for``),
never by sleeping. Expected values are derived independently from the files on disk.
"""

from __future__ import annotations

import json
import os
import random
import re
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, running_cluster, wait_for
from commands.context import token_of
from flinkpy.network.rest_client import RestClient
from flinkpy.cluster import ClusterHome
from flinkpy.connectors.number_sequence import split_ranges
from flinkpy.errors import ExitCode

N = 10**12  # effectively unbounded: the tests cancel their jobs

#: A keyed job (state in every checkpoint): sums of even and odd numbers.
KEYED_JOB = textwrap.dedent(
    f"""
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_source(NumberSequenceSource(1, {N}), WatermarkStrategy.no_watermarks(), "numbers")
    (numbers.map(lambda n: ("even" if n % 2 == 0 else "odd", n))
        .key_by(lambda pair: pair[0])
        .sum(1).uid("sums")
        .add_sink(lambda value: None))
    env.execute("keyed-sums")
    """
)

#: A stateless job: only source offsets and the JobManager's `_metadata` are written.
PLAIN_JOB = textwrap.dedent(
    f"""
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_source(NumberSequenceSource(1, {N}), WatermarkStrategy.no_watermarks(), "numbers")
    numbers.map(lambda n: n + 1).add_sink(lambda value: None)
    env.execute("plain")
    """
)


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED", random.randrange(2**32)))
    print(f"seed: {seed} (re-run with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


# --------------------------------------------------------------------------- helpers


def submit(tmp_path: Path, source: str, *options: str, parallelism: int = 2, env: dict[str, str] | None = None) -> str:
    job = tmp_path / f"job-{uuid.uuid4().hex[:8]}.py"
    job.write_text(source)
    args = ["run", "-d", "-p", str(parallelism)]
    for option in options:
        args += ["-D", option]
    res = run_cli(*args, "--json", str(job), env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def stats(jid: str, history: int = 100, env: dict[str, str] | None = None) -> dict[str, Any]:
    res = run_cli("checkpoint", "list", jid, "--history", str(history), "--json", env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def job_state(jid: str, env: dict[str, str] | None = None) -> str:
    res = run_cli("job", "show", jid, "--json", env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["state"]


def cancel(jid: str, env: dict[str, str] | None = None) -> None:
    res = run_cli("cancel", jid, env=env)
    assert res.returncode == 0, res.stderr
    wait_for(lambda: job_state(jid, env) == "CANCELED", timeout=30, message=f"job {jid} CANCELED")


def completed_ids(doc: dict[str, Any]) -> list[int]:
    return sorted(h["id"] for h in doc["history"] if h["status"] == "COMPLETED")


def committed_ids_on_disk(job_dir: Path) -> set[int]:
    """Checkpoints whose `_metadata` exists (the commit point) under ``<base>/<jid>/``."""
    out = set()
    for chk in job_dir.glob("chk-*"):
        if (chk / "_metadata").exists():
            out.add(int(chk.name.split("-", 1)[1]))
    return out


def path_of(external_path: str) -> Path:
    """A local checkpoint's `_metadata` path from its external path (a plain path or file:// URL)."""
    p = Path(external_path[len("file://"):] if external_path.startswith("file://") else external_path)
    return p if p.name == "_metadata" else p / "_metadata"


# --------------------------------------------------------------------------- 1, 2, 3


@pytest.mark.timeout(120)
def test_retention_trigger_and_statistics(cluster, flinkpy_home: Path, tmp_path: Path) -> None:
    """One cluster, two jobs: a periodic keyed job keeping 2 checkpoints, a job triggered by hand."""
    periodic = submit(
        tmp_path, KEYED_JOB,
        "execution.checkpointing.interval=100ms",
        "execution.checkpointing.num-retained=2",
    )
    job_dir = flinkpy_home / "checkpoints" / periodic

    # -- 1. retention: only the newest two committed checkpoints stay on disk ------------------
    samples = 0
    max_on_disk = 0

    # Sampled in-process (a CLI round trip outlasts a checkpoint here); `checkpoint list --json`
    # returns this very document, as the statistics checks below show.
    rest = RestClient(cluster.rest_address, token_of(ClusterHome(flinkpy_home)))

    def fast_stats() -> dict[str, Any]:
        return rest.request("GET", f"/jobs/{periodic}/checkpoints", params={"history": 100})

    def retained_and_enough() -> bool:
        nonlocal samples, max_on_disk
        before = fast_stats()
        on_disk = committed_ids_on_disk(job_dir)
        after = fast_stats()
        samples += 1
        max_on_disk = max(max_on_disk, len(on_disk))
        done_before, done_after = completed_ids(before), completed_ids(after)
        # A directory without _metadata is never reported completed: every completed id of
        # `before` is committed on disk unless newer ones subsumed it meanwhile.
        for cid in done_before:
            if cid not in on_disk:
                assert len([c for c in done_after if c > cid]) >= 2, (
                    f"checkpoint {cid} is COMPLETED but has no _metadata, and is not subsumed: "
                    f"on disk {sorted(on_disk)}, completed {done_after}"
                )
        # Nothing older than the retained ones survives (one just-subsumed checkpoint may still
        # be on its way out: discarding runs after the commit of its successor).
        if done_before:
            keep = set(done_before[-3:])
            stale = {c for c in on_disk if c not in keep and c < done_before[-1]}
            assert not stale, f"discarded checkpoints still committed on disk: {sorted(stale)} (completed {done_before})"
        # A checkpoint newer than the latest reported one may be committing (its _metadata is
        # written before the JobManager counts it complete); it does not count here.
        settled = before["latest"]["completed"] == after["latest"]["completed"]
        newest = done_after[-1] if done_after else 0
        return after["counts"]["completed"] >= 5 and settled and {c for c in on_disk if c <= newest} == set(done_after[-2:])

    wait_for(retained_and_enough, timeout=60, interval=0.05, message="5 completed checkpoints, the newest 2 on disk")
    print(f"retention: {samples} samples, at most {max_on_disk} committed checkpoint(s) on disk at once")
    assert max_on_disk <= 3

    # -- 3. statistics in Flink's shape --------------------------------------------------------
    doc = stats(periodic)
    assert set(doc) >= {"counts", "summary", "latest", "history"}
    counts = doc["counts"]
    assert counts["completed"] >= 5
    assert counts["total"] == counts["completed"] + counts["failed"] + counts["in_progress"]
    assert counts["failed"] == 0
    latest = doc["latest"]["completed"]
    assert latest["status"] == "COMPLETED" and latest["id"] == max(completed_ids(doc))
    # the job goes on checkpointing every 100 ms: by now two newer ones may have subsumed it
    newest_now = max(completed_ids(fast_stats()))
    assert path_of(latest["external_path"]).is_file() or newest_now >= latest["id"] + 2, (latest, newest_now)
    assert path_of(latest["external_path"]).parent.name == f"chk-{latest['id']}"
    ids = [h["id"] for h in doc["history"]]
    assert ids == sorted(ids, reverse=True), "history is newest first"
    for h in doc["history"]:
        assert h["status"] in ("COMPLETED", "IN_PROGRESS", "FAILED")
        assert {"trigger_timestamp", "end_to_end_duration", "state_size", "num_acknowledged_subtasks",
                "num_subtasks", "latest_ack_timestamp", "external_path", "checkpoint_type"} <= set(h)
        if h["status"] != "COMPLETED":
            continue
        # 2 source/map subtasks + 2 keyed-sum/sink subtasks
        assert h["num_subtasks"] == 4 and h["num_acknowledged_subtasks"] == 4, h
        assert h["state_size"] > 0, "the keyed sums are in every checkpoint"
        assert h["end_to_end_duration"] >= 0
        assert h["trigger_timestamp"] <= h["latest_ack_timestamp"] <= h["trigger_timestamp"] + h["end_to_end_duration"]
        assert h["checkpoint_type"] == "CHECKPOINT" and not h["is_savepoint"]
        assert h["external_path"] and h["failure_message"] is None
    done = [h for h in doc["history"] if h["status"] == "COMPLETED"]
    triggers = [h["trigger_timestamp"] for h in done]
    assert triggers == sorted(triggers, reverse=True)
    assert doc["summary"]["state_size"]["max"] >= doc["summary"]["state_size"]["min"] > 0
    assert doc["summary"]["end_to_end_duration"]["max"] >= max(h["end_to_end_duration"] for h in done)
    # the human table agrees
    text = run_cli("checkpoint", "list", periodic, env={"COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    assert "Counts: " in text.stdout and "Latest completed: " in text.stdout, text.stdout
    assert "4/4" in text.stdout

    # Canceled without RETAIN_ON_CANCELLATION: the retained checkpoints go too.
    cancel(periodic)
    wait_for(lambda: not committed_ids_on_disk(job_dir), timeout=20, message="checkpoints discarded at cancel")

    # -- 2. manual triggers on a job without periodic checkpoints -------------------------------
    # (run after the first job ended: two jobs at once collide, see the test below)
    manual = submit(tmp_path, PLAIN_JOB)
    wait_for(lambda: job_state(manual) == "RUNNING", timeout=30, message="manual job RUNNING")
    assert stats(manual)["counts"]["total"] == 0, "no periodic checkpoints without an interval"
    res = run_cli("checkpoint", "trigger", manual)
    assert res.returncode == 0, res.stderr
    match = re.fullmatch(r"Checkpoint (\d+) completed\. Path: (\S+)\n", res.stdout)
    assert match, res.stdout
    first = int(match.group(1))
    verified = run_cli("checkpoint", "verify", match.group(2))
    assert verified.returncode == 0, verified.stderr
    assert f"checkpoint {first} of job {manual}" in verified.stdout

    res = run_cli("checkpoint", "trigger", manual, "--json")
    assert res.returncode == 0, res.stderr
    detail = json.loads(res.stdout)  # exactly one document
    assert detail["status"] == "COMPLETED" and detail["id"] > first
    assert path_of(detail["external_path"]).is_file()
    report = json.loads(run_cli("checkpoint", "verify", detail["external_path"], "--json").stdout)
    assert report["restorable"] and report["checkpoint_id"] == detail["id"] and report["job_id"] == manual
    after = stats(manual)
    assert after["counts"]["completed"] == 2 and after["latest"]["completed"]["id"] == detail["id"]

    cancel(manual)
    res = run_cli("checkpoint", "trigger", manual)
    assert res.returncode == ExitCode.CONFLICT, (res.returncode, res.stderr)
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flinkpy: error: ") and manual in lines[0], res.stderr

    unknown = uuid.uuid4().hex
    res = run_cli("checkpoint", "trigger", unknown)
    assert res.returncode == ExitCode.NOT_FOUND, (res.returncode, res.stderr)
    res = run_cli("checkpoint", "list", unknown)
    assert res.returncode == ExitCode.NOT_FOUND, (res.returncode, res.stderr)


def test_manual_trigger_waits_its_turn_behind_a_periodic_checkpoint(cluster, tmp_path: Path) -> None:
    """A checkpoint trigger while a periodic checkpoint is in progress (at most one at a time)
    queues behind it, as in Flink, instead of failing; --timeout bounds the wait (exit 6)."""
    jid = submit(tmp_path, KEYED_JOB, "execution.checkpointing.interval=200ms", "execution.checkpointing.timeout=60s")
    wait_for(lambda: stats(jid)["counts"]["completed"] >= 1, timeout=30, message="a first checkpoint")
    # a frozen sum task holds the next periodic checkpoint in progress for 25 s (on a loaded
    # machine each CLI call below takes seconds: seeing it held and starting the trigger took
    # more than 10 s on CI's two cores)
    paused = run_cli("fault", "pause-task", jid, "--vertex", "sums", "--subtask", "0", "--for", "25s")
    assert paused.returncode == 0, paused.stderr
    blocked = wait_for(lambda: stats(jid)["counts"]["in_progress"] == 1 and stats(jid)["latest"].get("completed"),
                       timeout=20, message="a checkpoint held in progress by the paused task")
    assert blocked
    held = max(h["id"] for h in stats(jid)["history"] if h["status"] == "IN_PROGRESS")
    res = run_cli("checkpoint", "trigger", jid, "--timeout", "1s")
    assert res.returncode == ExitCode.TIMEOUT, (res.returncode, res.stderr)
    assert "could start within" in res.stderr and res.stdout == "", res.stderr
    res = run_cli("checkpoint", "trigger", jid, "--json", "--timeout", "60s")
    assert res.returncode == 0, res.stderr
    detail = json.loads(res.stdout)
    assert detail["status"] == "COMPLETED" and detail["id"] > held, (held, detail["id"])
    # it went next: no periodic checkpoint started between the held one and it
    assert detail["id"] == held + 1, (held, detail["id"])
    cancel(jid)


# --------------------------------------------------------------------------- clusters of our own


@pytest.mark.timeout(90)
def test_two_jobs_on_one_taskmanager_checkpoint_independently(flinkpy_home: Path, tmp_path: Path) -> None:
    """Two jobs whose tasks share a TaskManager: each one's triggers, notifications and cancel
    must reach its own tasks. (Both jobs have the same shape, so their executions have the
    same vertex id, subtask and attempt.)"""
    with running_cluster(flinkpy_home, taskmanagers=1, slots=4):
        first = submit(tmp_path, PLAIN_JOB, "execution.checkpointing.interval=100ms", parallelism=1)
        wait_for(lambda: stats(first)["counts"]["completed"] >= 2, timeout=30, message="first job's checkpoints")
        second = submit(tmp_path, PLAIN_JOB, "execution.checkpointing.interval=100ms", parallelism=1)
        wait_for(lambda: job_state(second) == "RUNNING", timeout=30, message="second job RUNNING")
        mark = {jid: stats(jid)["counts"]["completed"] for jid in (first, second)}
        try:
            for jid in (first, second):
                wait_for(
                    lambda: stats(jid)["counts"]["completed"] >= mark[jid] + 3,
                    timeout=15,
                    message=f"3 more checkpoints of job {jid} while both jobs run (had {mark[jid]})",
                )
            cancel(first)
            assert job_state(second) == "RUNNING"
            again = stats(second)["counts"]["completed"]
            wait_for(lambda: stats(second)["counts"]["completed"] >= again + 2, timeout=15, message="second job goes on alone")
            assert job_state(second) == "RUNNING"
        finally:
            for jid in (first, second):
                run_cli("cancel", jid)  # stopping the cluster ends whatever a cancel missed


# --------------------------------------------------------------------------- 4. failures


@pytest.mark.timeout(90)
def test_unwritable_checkpoint_storage(cluster, tmp_path: Path) -> None:
    """Checkpoint storage that stops taking writes while jobs run. (A directory that cannot be
    written at all is refused at submission: test_checkpoint_dir_writable.py. Here storage
    fails after it, as an outage does: the injected one fails every write of the cluster.)"""
    assert run_cli("fault", "storage-outage", "--for", "2min").returncode == 0
    unwritable = [str(tmp_path / "checkpoints-1"), str(tmp_path / "checkpoints-2")]

    # Not tolerated: the first failed checkpoint fails the job (no restarts, to see FAILED).
    strict = submit(
        tmp_path, KEYED_JOB,
        "execution.checkpointing.interval=100ms",
        f"execution.checkpointing.dir={unwritable[0]}",
        "execution.checkpointing.tolerable-failed-checkpoints=0",
        "restart-strategy.type=none",
    )
    wait_for(lambda: job_state(strict) == "FAILED", timeout=30, message="job FAILED by a failed checkpoint")
    res = run_cli("job", "exceptions", strict, "--json")
    assert res.returncode == 0, res.stderr
    root = json.loads(res.stdout)["root-exception"]
    assert "checkpoint" in root.lower() and "tolerable" in root.lower(), root
    doc = stats(strict)
    assert doc["counts"]["completed"] == 0 and doc["counts"]["failed"] >= 1
    assert doc["latest"]["failed"]["failure_message"]
    assert not list(Path(unwritable[0]).rglob("_metadata"))

    # Tolerated: checkpoints fail one after the other, the job keeps running.
    lenient = submit(
        tmp_path, PLAIN_JOB,
        "execution.checkpointing.interval=100ms",
        f"execution.checkpointing.dir={unwritable[1]}",
        "execution.checkpointing.tolerable-failed-checkpoints=1000",
        "restart-strategy.type=none",
    )
    wait_for(lambda: stats(lenient)["counts"]["failed"] >= 3, timeout=30, message="3 failed checkpoints")
    assert job_state(lenient) == "RUNNING"
    doc = stats(lenient)
    failed = [h for h in doc["history"] if h["status"] == "FAILED"]
    assert len(failed) >= 3 and doc["counts"]["completed"] == 0
    for h in failed:
        assert h["failure_message"] and "storage outage" in h["failure_message"], h
        assert h["failure_timestamp"] >= h["trigger_timestamp"] and h["external_path"] is None
    assert doc["latest"]["completed"] is None and doc["latest"]["failed"]["status"] == "FAILED"
    text = run_cli("checkpoint", "list", lenient, env={"COLUMNS": "300"})
    assert "FAILED" in text.stdout, text.stdout
    # a manual trigger reports the failure: exit 12 (as a failed savepoint) and the reason when
    # the checkpoint was taken and failed, exit 9 when it was refused while a periodic one failed
    res = run_cli("checkpoint", "trigger", lenient)
    failed_itself = re.search(r"checkpoint \d+ of job \w+ failed", res.stderr)
    expected = ExitCode.SAVEPOINT_FAILED if failed_itself else ExitCode.CONFLICT
    assert res.returncode == expected, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
    cancel(lenient)


# --------------------------------------------------------------------------- 5. S3


@pytest.mark.timeout(120)
def test_checkpoints_on_s3(flinkpy_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        for name, value in {
            "FLINKPY_S3_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            monkeypatch.setenv(name, value)
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="bucket")
        with running_cluster(flinkpy_home, taskmanagers=2, slots=2):
            jid = submit(
                tmp_path, KEYED_JOB,
                "execution.checkpointing.interval=200ms",
                "execution.checkpointing.dir=s3://bucket/cp",
                "execution.checkpointing.num-retained=100",  # nothing goes while we inspect
            )
            try:
                wait_for(lambda: stats(jid)["counts"]["completed"] >= 2, timeout=60, message="2 checkpoints on S3")
                latest = stats(jid)["latest"]["completed"]
                cid = latest["id"]
                assert latest["external_path"].startswith(f"s3://bucket/cp/{jid}/chk-{cid}"), latest
                keys = {o["Key"] for o in s3.list_objects_v2(Bucket="bucket", Prefix=f"cp/{jid}/chk-{cid}/")["Contents"]}
                assert f"cp/{jid}/chk-{cid}/_metadata" in keys and len(keys) >= 2, keys  # keyed state files too

                url = f"s3://bucket/cp/{jid}/chk-{cid}"
                res = run_cli("checkpoint", "inspect", url, "--json")
                assert res.returncode == 0, res.stderr
                doc = json.loads(res.stdout)
                assert doc["metadata"]["job_id"] == jid and doc["metadata"]["checkpoint_id"] == cid
                assert doc["summary"]["files"] == len(keys) - 1
                res = run_cli("checkpoint", "inspect", url, env={"COLUMNS": "200"})
                assert res.returncode == 0 and f"Checkpoint id: {cid}" in res.stdout, res.stderr
                res = run_cli("checkpoint", "verify", url, "--json")
                assert res.returncode == 0, res.stderr
                report = json.loads(res.stdout)
                assert report["restorable"] and report["files_checked"] == len(keys) - 1
            finally:
                run_cli("cancel", jid)
                wait_for(lambda: job_state(jid) == "CANCELED", timeout=30)
            # canceled without retention: the checkpoints are deleted from the bucket
            wait_for(
                lambda: not any(k["Key"].endswith("/_metadata") for k in s3.list_objects_v2(Bucket="bucket", Prefix=f"cp/{jid}/").get("Contents", [])),
                timeout=20,
                message="checkpoints deleted from S3 at cancel",
            )
    finally:
        server.stop()


# --------------------------------------------------------------------------- 6. FileSink


FILE_SINK_JOB = textwrap.dedent(
    f"""
    import sys
    from flinkpy.common import WatermarkStrategy
    from flinkpy.common.serialization import Encoder
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.file_system import FileSink
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(200)
    numbers = env.from_source(NumberSequenceSource(1, {N}), WatermarkStrategy.no_watermarks(), "numbers")
    numbers.sink_to(FileSink.for_row_format(sys.argv[1], Encoder.simple_string_encoder()).build())
    env.execute("numbers-to-files")
    """
)


def visible_files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file() and not p.name.startswith("."))


@pytest.mark.timeout(120)
def test_file_sink_commits_exactly_what_a_completed_checkpoint_covers(cluster, flinkpy_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = tmp_path / "sink_job.py"
    job.write_text(FILE_SINK_JOB)
    res = run_cli(
        "run", "-d", "-p", "2",
        "-D", "execution.checkpointing.num-retained=1000",
        "-D", "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
        "--json", str(job), str(out),
    )
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]

    def committed_only_after_checkpoints() -> bool:
        files = visible_files(out)  # first the files, then the count: it only grows
        done = stats(jid)["counts"]["completed"]
        assert not files or done >= 1, f"files visible before any checkpoint completed: {files}"
        return done >= 3 and len(files) >= 2

    wait_for(committed_only_after_checkpoints, timeout=60, message="3 checkpoints and committed files")
    cancel(jid)

    metas = {}
    for meta in (flinkpy_home / "checkpoints" / jid).glob("chk-*/_metadata"):
        doc = json.loads(meta.read_text())
        metas[doc["checkpoint_id"]] = doc
    assert len(metas) >= 3
    latest = metas[max(metas)]
    # unread ranges of each source subtask at each checkpoint -> the first unread number
    first_unread: dict[int, dict[int, int]] = {}
    for cid, doc in metas.items():
        (source,) = [op for op in doc["operators"] if op["name"] == "numbers"]
        assert source["parallelism"] == 2
        for sub in source["subtasks"]:
            ranges = sub["source_offsets"]["ranges"]
            first_unread.setdefault(sub["subtask"], {})[cid] = min(a for a, b in ranges if a < b)
    # sink subtask i writes source subtask i's numbers (forward, chained) into files named as
    # Flink names them, part-<writer uuid>-<n>: one writer per subtask here (nothing restarts)
    by_writer: dict[str, list[int]] = {}
    pattern = re.compile(r"^part-([0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})-(\d+)$")
    for f in visible_files(out):
        match = pattern.match(f.name)
        assert match, f"unexpected visible file {f}"
        by_writer.setdefault(match.group(1), []).extend(int(line) for line in f.read_text().splitlines())
    assert len(by_writer) <= 2, f"more writers than sink subtasks: {sorted(by_writer)}"
    ranges = {i: split_ranges([(1, N + 1)], i, 2)[0] for i in (0, 1)}
    by_subtask: dict[int, list[int]] = {0: [], 1: []}
    for numbers in by_writer.values():
        (i,) = [i for i, (start, stop) in ranges.items() if start <= min(numbers) < stop]
        by_subtask[i] = numbers
    for i, numbers in by_subtask.items():
        ((start, stop),) = split_ranges([(1, N + 1)], i, 2)
        assert numbers, f"subtask {i} committed nothing"
        assert len(numbers) == len(set(numbers)), f"subtask {i}: duplicates in committed files"
        end = max(numbers) + 1
        # no gaps: exactly [start, end)
        assert min(numbers) == start and len(numbers) == end - start, f"subtask {i}: gaps in {start}..{end}"
        # and it stops exactly where a completed checkpoint's source offsets stopped
        cuts = first_unread[i]
        assert end in cuts.values(), f"subtask {i}: committed up to {end}, checkpoint cuts {sorted(cuts.values())}"
        assert end <= cuts[latest["checkpoint_id"]], "committed beyond the latest completed checkpoint"
    # the hidden in-progress/pending files hold the rest: nothing of it is visible
    assert all(p.name.startswith(".") for p in out.rglob("*") if p.is_file() and ".inprogress." in p.name)
