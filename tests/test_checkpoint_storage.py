"""CheckpointStorage and the `_metadata` format: one conformance suite, run on every backend.

Backends: a plain directory, a file:// URL, memory:// (cleared around each test: it is one
store per process) and s3:// against a real S3-compatible server (moto, on 127.0.0.1 port 0,
started here). State bytes come from a seeded RNG; the seed is printed (shown on failure)
and can be fixed with FLINKPY_TEST_SEED.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import random
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator

import fsspec
import pytest

from flinkpy.checkpoint import (
    CheckpointStorage,
    CorruptCheckpointError,
    checksum_of,
    keyed_state,
    new_metadata,
    new_operator,
    new_subtask,
    operator_state,
    savepoint_dir,
    storage_options,
    summarize,
    validate,
)
from flinkpy.errors import ExitCode, NotFoundError

pytestmark = pytest.mark.timeout(60)

BUCKET = "flinkpy-checkpoints"
JOB = "3f2a9c0e11d84b5a"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED", random.randrange(2**32)))
    print(f"seed: {seed} (re-run with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A real S3 endpoint on loopback, with the environment s3fs and flinkpy read pointed at it."""
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "FLINKPY_S3_ENDPOINT_URL": endpoint,
        }.items():
            mp.setenv(key, value)
        # s3fs cannot create a bucket in us-east-1 against moto; boto3 can.
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        try:
            yield endpoint
        finally:
            server.stop()


def _clear_memory() -> None:
    from fsspec.implementations.memory import MemoryFileSystem

    MemoryFileSystem.store.clear()
    MemoryFileSystem.pseudo_dirs[:] = [""]


@pytest.fixture(params=["path", "file", "memory", "s3"])
def base_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The base URL of a fresh, empty checkpoint storage on each backend."""
    if request.param == "path":
        yield str(tmp_path / "checkpoints")
    elif request.param == "file":
        yield (tmp_path / "checkpoints").as_uri()
    elif request.param == "memory":
        _clear_memory()
        yield f"memory://flinkpy-test-{uuid.uuid4().hex[:8]}/checkpoints"
        _clear_memory()
    else:
        request.getfixturevalue("s3_endpoint")
        yield f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/checkpoints"


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """Direct file-system access to damage files the way a crash or a bad disk would."""
    fs, path = fsspec.core.url_to_fs(url, **storage_options(url))
    fs.invalidate_cache()
    return fs, path


def _overwrite(url: str, data: bytes) -> None:
    fs, path = _fs(url)
    fs.pipe_file(path, data)


def _delete(url: str) -> None:
    fs, path = _fs(url)
    fs.rm_file(path)


def build_checkpoint(storage: CheckpointStorage, rng: random.Random, checkpoint_id: int = 5, job_id: str = JOB) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Write a two-operator checkpoint (a source with offsets, a keyed operator at parallelism 2)."""
    blobs = {
        "sums-0.keyed": rng.randbytes(rng.randrange(1, 5000)),
        "sums-1.keyed": rng.randbytes(rng.randrange(1, 5000)),
        "source-0.op": rng.randbytes(rng.randrange(1, 200)),
    }
    h = {name: storage.write_state(job_id, checkpoint_id, name, data) for name, data in blobs.items()}
    doc = new_metadata(
        job_id=job_id,
        job_name="running sums",
        checkpoint_id=checkpoint_id,
        trigger_timestamp=1_700_000_000_000,
        completion_timestamp=1_700_000_000_250,
        operators=[
            new_operator(
                operator_id="op-source", uid="numbers", name="Source: numbers", vertex_id=1, parallelism=1, max_parallelism=128,
                subtasks=[new_subtask(0, operator_state=operator_state(h["source-0.op"], {"splits": {"kind": "source", "entries": 1}}), source_offsets={"split": "0", "offset": 1234})],
            ),
            new_operator(
                operator_id="op-sums", uid="sums", name="running sums", vertex_id=2, parallelism=2, max_parallelism=128,
                subtasks=[
                    new_subtask(0, keyed_state=keyed_state(h["sums-0.keyed"], (0, 63), {"total": {"kind": "value", "entries": 17}, "seen": {"kind": "map", "entries": 40}})),
                    new_subtask(1, keyed_state=keyed_state(h["sums-1.keyed"], (64, 127), {"total": {"kind": "value", "entries": 9}})),
                ],
            ),
        ],
    )
    storage.write_metadata(job_id, checkpoint_id, doc)
    return doc, blobs


# --------------------------------------------------------------------------- every backend


def test_round_trip(base_url: str, rng: random.Random) -> None:
    storage = CheckpointStorage(base_url)
    doc, blobs = build_checkpoint(storage, rng)
    chk = storage.checkpoint_dir(JOB, 5)
    assert chk == f"{base_url}/{JOB}/chk-5"
    assert storage.list_checkpoints(JOB) == [5]
    # The directory, its _metadata, and the directory with a trailing slash all name it.
    for path in (chk, chk + "/", chk + "/_metadata"):
        assert storage.read_metadata(path) == doc
    for op in doc["operators"]:
        for sub in op["subtasks"]:
            for handle in (sub["keyed_state"], sub["operator_state"]):
                if handle:
                    assert storage.read_state(chk, handle) == blobs[handle["path"]]
    report = storage.verify(chk)
    assert report.restorable and report.problems == []
    assert report.files_checked == 3
    assert report.bytes_checked == sum(len(b) for b in blobs.values())


def test_handles_record_relative_path_size_and_checksum(base_url: str, rng: random.Random) -> None:
    storage = CheckpointStorage(base_url)
    data = rng.randbytes(100)
    handle = storage.write_state(JOB, 1, "sub/dir/state.bin", data)
    assert handle == {"path": "sub/dir/state.bin", "size": 100, "checksum": checksum_of(data)}
    assert storage.read_state(storage.checkpoint_dir(JOB, 1), handle) == data


def test_checkpoint_without_metadata_is_not_listed_and_not_readable(base_url: str, rng: random.Random) -> None:
    storage = CheckpointStorage(base_url)
    build_checkpoint(storage, rng, checkpoint_id=1)
    storage.write_state(JOB, 2, "sums-0.keyed", rng.randbytes(10))  # chk-2 never committed
    build_checkpoint(storage, rng, checkpoint_id=10)
    assert storage.list_checkpoints(JOB) == [1, 10]
    chk2 = storage.checkpoint_dir(JOB, 2)
    with pytest.raises(NotFoundError) as err:
        storage.read_metadata(chk2)
    assert chk2 in err.value.message and "no _metadata" in err.value.message
    assert err.value.exit_code == ExitCode.NOT_FOUND
    with pytest.raises(NotFoundError):
        storage.verify(chk2)


def test_missing_path_is_not_found(base_url: str) -> None:
    storage = CheckpointStorage(base_url)
    missing = storage.checkpoint_dir("nojob", 1)
    assert storage.list_checkpoints("nojob") == []
    for path in (missing, missing + "/_metadata"):
        with pytest.raises(NotFoundError) as err:
            storage.read_metadata(path)
        assert f"no checkpoint at {missing}" in err.value.message


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda raw: raw[: len(raw) // 2], "truncated or not JSON"),
        (lambda raw: b"", "empty file"),
        (lambda raw: b"\xff\xfe garbage", "truncated or not JSON"),
        (lambda raw: json.dumps({**json.loads(raw), "format": "something-else"}).encode(), "format: not a flinkpy checkpoint"),
        (lambda raw: json.dumps({**json.loads(raw), "version": 2}).encode(), "written by a newer flinkpy"),
        (lambda raw: json.dumps({k: v for k, v in json.loads(raw).items() if k != "operators"}).encode(), "missing field 'operators'"),
    ],
    ids=["truncated", "empty", "binary", "format", "version", "missing-field"],
)
def test_corrupt_metadata_names_the_file_and_the_problem(base_url: str, rng: random.Random, damage: Any, expected: str) -> None:
    storage = CheckpointStorage(base_url)
    build_checkpoint(storage, rng)
    chk = storage.checkpoint_dir(JOB, 5)
    meta = f"{chk}/_metadata"
    fs, path = _fs(meta)
    _overwrite(meta, damage(fs.cat_file(path)))
    with pytest.raises(CorruptCheckpointError) as err:
        storage.read_metadata(chk)
    assert err.value.path == meta and expected in err.value.problem
    assert str(err.value).startswith(f"{meta}: ")
    assert err.value.exit_code == ExitCode.CONFLICT
    report = storage.verify(chk)
    assert not report.restorable
    assert [(p.path, expected in p.problem) for p in report.problems] == [(meta, True)]


def test_damaged_state_files_are_reported_with_expected_and_actual(base_url: str, rng: random.Random) -> None:
    storage = CheckpointStorage(base_url)
    doc, blobs = build_checkpoint(storage, rng)
    chk = storage.checkpoint_dir(JOB, 5)
    # Same length, different bytes: only the checksum can tell.
    flipped = bytearray(blobs["sums-0.keyed"])
    flipped[rng.randrange(len(flipped))] ^= 0xFF
    _overwrite(f"{chk}/sums-0.keyed", bytes(flipped))
    _overwrite(f"{chk}/sums-1.keyed", blobs["sums-1.keyed"] + b"tail")
    _delete(f"{chk}/source-0.op")

    report = storage.verify(chk)
    assert not report.restorable
    by_file = {p.path: p.problem for p in report.problems}
    assert set(by_file) == {f"{chk}/sums-0.keyed", f"{chk}/sums-1.keyed", f"{chk}/source-0.op"}
    h0 = doc["operators"][1]["subtasks"][0]["keyed_state"]
    assert by_file[f"{chk}/sums-0.keyed"] == f"checksum mismatch: _metadata records {h0['checksum']}, the file has {checksum_of(bytes(flipped))}"
    n = len(blobs["sums-1.keyed"])
    assert by_file[f"{chk}/sums-1.keyed"] == f"size mismatch: _metadata records {n} bytes, the file has {n + 4}"
    assert by_file[f"{chk}/source-0.op"] == "state file is missing"

    h1 = doc["operators"][1]["subtasks"][1]["keyed_state"]
    with pytest.raises(CorruptCheckpointError, match="size mismatch") as err:
        storage.read_state(chk, h1)
    assert err.value.path == f"{chk}/sums-1.keyed"
    with pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
        storage.read_state(chk, h0)
    with pytest.raises(CorruptCheckpointError, match="state file is missing"):
        storage.read_state(chk, doc["operators"][0]["subtasks"][0]["operator_state"])


def test_discard_is_idempotent_and_removes_metadata_first(base_url: str, rng: random.Random) -> None:
    storage = CheckpointStorage(base_url)
    build_checkpoint(storage, rng, checkpoint_id=1)
    build_checkpoint(storage, rng, checkpoint_id=2)
    storage.discard(JOB, 1)
    assert storage.list_checkpoints(JOB) == [2]
    storage.discard(JOB, 1)
    storage.discard(JOB, 99)
    storage.discard("never-ran", 1)
    fs, path = _fs(storage.checkpoint_dir(JOB, 1))
    assert not fs.exists(path)
    with pytest.raises(NotFoundError):
        storage.read_metadata(storage.checkpoint_dir(JOB, 1))
    storage.discard_path(storage.checkpoint_dir(JOB, 2))
    storage.discard_path(storage.checkpoint_dir(JOB, 2))
    assert storage.list_checkpoints(JOB) == []


def test_savepoint_directory_round_trip(base_url: str, rng: random.Random) -> None:
    storage = CheckpointStorage(base_url)
    target = savepoint_dir(f"{base_url}/savepoints", JOB, token="0123456789ab")
    assert target == f"{base_url}/savepoints/savepoint-{JOB[:6]}-0123456789ab"
    assert savepoint_dir(base_url, JOB) != savepoint_dir(base_url, JOB)
    data = rng.randbytes(64)
    handle = storage.write_state_in(target, "sums-0.keyed", data)
    doc = new_metadata(
        job_id=JOB, job_name="sums", checkpoint_id=7, kind="savepoint", savepoint_format="canonical",
        trigger_timestamp=1, completion_timestamp=2,
        operators=[new_operator(operator_id="op", uid="sums", name="sums", vertex_id=1, parallelism=1, max_parallelism=128,
                                subtasks=[new_subtask(0, keyed_state=keyed_state(handle, (0, 127), {"total": {"kind": "value", "entries": 1}}))])],
    )
    assert storage.write_metadata_in(target, doc) == f"{target}/_metadata"
    assert storage.read_metadata(target)["kind"] == "savepoint"
    assert storage.verify(target).restorable
    storage.discard_path(target)
    with pytest.raises(NotFoundError):
        storage.read_metadata(target)


def test_invalid_metadata_is_refused_and_nothing_is_committed(base_url: str, rng: random.Random) -> None:
    storage = CheckpointStorage(base_url)
    doc, _ = build_checkpoint(storage, rng, checkpoint_id=1)
    bad = copy.deepcopy(doc)
    bad["checkpoint_id"] = 2
    bad["operators"][1]["subtasks"][0]["keyed_state"]["key_groups"] = [0, 500]
    with pytest.raises(CorruptCheckpointError, match=r"operators\[1\]\.subtasks\[0\]\.keyed_state\.key_groups"):
        storage.write_metadata(JOB, 2, bad)
    assert storage.list_checkpoints(JOB) == [1]


# --------------------------------------------------------------------------- local file system


def test_local_writes_leave_no_temporary_files_and_ignore_leftovers(tmp_path: Path, rng: random.Random) -> None:
    storage = CheckpointStorage(str(tmp_path))
    build_checkpoint(storage, rng, checkpoint_id=1)
    chk = tmp_path / JOB / "chk-1"
    assert sorted(p.name for p in chk.iterdir()) == ["_metadata", "source-0.op", "sums-0.keyed", "sums-1.keyed"]
    # What a crash between write and rename leaves behind is not a checkpoint.
    crashed = tmp_path / JOB / "chk-2"
    crashed.mkdir()
    (crashed / "_metadata.tmp-deadbeef").write_text('{"format": "flinkpy-checkpoint"')
    assert storage.list_checkpoints(JOB) == [1]


def test_a_savepoint_is_relocatable(tmp_path: Path, rng: random.Random) -> None:
    storage = CheckpointStorage(str(tmp_path / "a"))
    build_checkpoint(storage, rng, checkpoint_id=3)
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(tmp_path / "a" / JOB / "chk-3", moved)
    report = CheckpointStorage(str(moved)).verify(moved.as_uri())
    assert report.restorable, report.problems


def test_storage_pickles_for_task_processes(tmp_path: Path, rng: random.Random) -> None:
    storage = pickle.loads(pickle.dumps(CheckpointStorage(tmp_path.as_uri() + "/")))
    assert storage.base_url == tmp_path.as_uri()
    build_checkpoint(storage, rng, checkpoint_id=4)
    assert storage.list_checkpoints(JOB) == [4]


# --------------------------------------------------------------------------- the document alone


def _valid_doc() -> dict[str, Any]:
    handle = {"path": "k", "size": 10, "checksum": "sha256:" + "a" * 64}
    return new_metadata(
        job_id="j", job_name="n", checkpoint_id=1, trigger_timestamp=5, completion_timestamp=6,
        operators=[
            new_operator(operator_id="a", uid=None, name="a", vertex_id=1, parallelism=2, max_parallelism=4,
                         subtasks=[new_subtask(0, keyed_state=keyed_state(handle, (0, 1), {"v": {"kind": "value", "entries": 3}})),
                                   new_subtask(1, keyed_state=keyed_state({**handle, "path": "k2", "size": 5}, (2, 3), {"v": {"kind": "value", "entries": 1}}),
                                               operator_state=operator_state({**handle, "path": "o", "size": 7}, {"buf": {"kind": "union", "entries": 2}}))]),
        ],
    )


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.pop("job_id"), "missing field 'job_id'"),
        (lambda d: d.update(kind="snapshot"), "kind: expected one of checkpoint, savepoint"),
        (lambda d: d.update(kind="savepoint"), "savepoint_format: a savepoint needs"),
        (lambda d: d.update(mode="SOMETIMES"), "mode: expected one of"),
        (lambda d: d.update(completion_timestamp=1), "completion_timestamp: 1 is before"),
        (lambda d: d["operators"][0].update(parallelism=9), "operators[0].parallelism: 9 exceeds max_parallelism 4"),
        (lambda d: d["operators"][0]["subtasks"][1].update(subtask=0), "operators[0].subtasks[1].subtask: subtask 0 appears twice"),
        (lambda d: d["operators"][0]["subtasks"][0]["keyed_state"].update(path="../x"), "keyed_state.path: expected a path relative"),
        (lambda d: d["operators"][0]["subtasks"][0]["keyed_state"].update(size=-1), "keyed_state.size: expected an integer >= 0"),
        (lambda d: d["operators"][0]["subtasks"][0]["keyed_state"].update(checksum="md5:1"), "keyed_state.checksum: expected 'sha256:'"),
        (lambda d: d["operators"][0]["subtasks"][0]["keyed_state"]["states"]["v"].update(kind="union"), "keyed_state.states['v'].kind"),
        (lambda d: d["operators"][0]["subtasks"][1]["operator_state"]["states"]["buf"].pop("entries"), "missing field 'entries'"),
        (lambda d: d["operators"][0]["subtasks"][0].pop("source_offsets"), "operators[0].subtasks[0]: missing field 'source_offsets'"),
    ],
)
def test_validate_names_the_field_and_the_problem(mutate: Any, field: str) -> None:
    doc = _valid_doc()
    assert validate(doc, "here") is doc
    mutate(doc)
    with pytest.raises(CorruptCheckpointError) as err:
        validate(doc, "/ckpt/chk-1/_metadata")
    assert err.value.path == "/ckpt/chk-1/_metadata"
    assert field in err.value.problem, err.value.problem


def test_summarize_totals() -> None:
    summary = summarize(_valid_doc())
    assert summary["total_size"] == 22 and summary["files"] == 3
    (op,) = summary["operators"]
    assert op["size"] == 22 and op["files"] == 3
    assert [(s["subtask"], s["size"], s["key_groups"]) for s in op["subtasks"]] == [(0, 10, [0, 1]), (1, 12, [2, 3])]
    assert [(r["key_groups"], r["size"]) for r in summary["key_group_ranges"]] == [([0, 1], 10), ([2, 3], 5)]
