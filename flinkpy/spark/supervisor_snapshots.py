"""A Spark query's checkpoint location as flinkpy's checkpoints and savepoints.

Spark keeps a streaming query's progress in its checkpoint location: ``offsets/<batch>`` (the
source offsets a micro-batch was planned with, and the SQL settings that cannot change, such
as ``spark.sql.shuffle.partitions``), ``commits/<batch>`` (written when the batch's sink and
state are done), ``state/`` (the state store's files) and ``sources/``. A committed batch is
flinkpy's completed checkpoint; its id is the batch id.

A *Spark savepoint* is a copy of a quiet checkpoint location (the query stopped at a batch
boundary) in a self-contained directory ``savepoint-<jobid6>-<random>``::

    _metadata        flinkpy's versioned JSON (kind savepoint), with "runner": "spark" and a
                     "spark" section: the batch id, the source offsets, the shuffle partitions,
                     and every copied file with its size and sha256
    spark/           the checkpoint location as it was

so that ``flinkpy savepoint list``/``checkpoint inspect`` show it, and ``flinkpy run -s
--runner spark`` restores it into a new job's checkpoint location after checking each file.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from flinkpy.errors import InvalidProgramError, NotFoundError, UsageError

SPARK_DIR = "spark"
RUNNER = "spark"


def local_path(url: str) -> str:
    """A checkpoint location Spark can use: a plain path (``file://`` accepted)."""
    if url.startswith("file://"):
        return url[len("file://"):]
    if "://" in url:
        raise InvalidProgramError(
            f"the Spark runner keeps its checkpoint location on a local or mounted file system, not {url}",
            remedy="set execution.checkpointing.dir to a path (savepoints may still go to any fsspec URL)",
        )
    return url


def checkpoint_location(checkpoint_dir: str, job_id: str) -> str:
    """``<execution.checkpointing.dir>/<job_id>/spark`` as a local path."""
    return f"{local_path(checkpoint_dir).rstrip('/')}/{job_id}/{SPARK_DIR}"


def _batches(location: str, log: str) -> list[int]:
    try:
        names = os.listdir(os.path.join(location, log))
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def offset_batches(location: str) -> list[int]:
    """Batch ids whose offsets are logged, oldest first."""
    return _batches(location, "offsets")


def committed_batches(location: str) -> list[int]:
    """Batch ids whose commit record exists, oldest first."""
    return _batches(location, "commits")


def read_offsets(location: str, batch_id: int) -> dict[str, Any]:
    """The offset log entry of ``batch_id``: ``{"metadata": {...}, "sources": [...]}``.

    Each source's offset is JSON where Spark wrote JSON, else the raw text; a source that had
    no offset yet is None.
    """
    text = Path(location, "offsets", str(batch_id)).read_text()
    lines = text.splitlines()
    metadata = json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else {}
    sources: list[Any] = []
    for line in lines[2:]:
        if line == "-":
            sources.append(None)
            continue
        try:
            sources.append(json.loads(line))
        except ValueError:
            sources.append(line)
    return {"metadata": metadata, "sources": sources}


def shuffle_partitions_of(location: str) -> int | None:
    """The state partitions the query was started with (fixed for its checkpoint's lifetime)."""
    batches = _batches(location, "offsets")
    if not batches:
        return None
    value = read_offsets(location, batches[-1])["metadata"].get("conf", {}).get("spark.sql.shuffle.partitions")
    return int(value) if value is not None else None


def _dir_size(path: str, *, version: int | None = None) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            if f.startswith("."):
                continue
            if version is not None and not f.startswith(f"{version}."):
                continue
            total += os.path.getsize(os.path.join(root, f))
    return total


def checkpoint_stats(location: str, *, restored: dict[str, Any] | None, history: int = 10) -> dict[str, Any]:
    """Flink's /jobs/<id>/checkpoints document built from the commit log (newest first)."""
    batches = committed_batches(location)
    entries = []
    for batch in reversed(batches[-history:]):
        commit = Path(location, "commits", str(batch))
        done = int(commit.stat().st_mtime * 1000)
        try:
            planned = int(read_offsets(location, batch)["metadata"].get("batchTimestampMs") or done)
        except (OSError, ValueError, IndexError):
            planned = done
        # Spark's state store version of batch N is N + 1: its files are named after it
        state_size = _dir_size(os.path.join(location, "state"), version=batch + 1)
        entries.append(
            {
                "id": batch,
                "status": "COMPLETED",
                "is_savepoint": False,
                "trigger_timestamp": planned,
                "latest_ack_timestamp": done,
                "end_to_end_duration": max(0, done - planned),
                "state_size": state_size,
                "checkpointed_size": state_size,
                "external_path": location,
                "num_subtasks": 1,
                "num_acknowledged_subtasks": 1,
            }
        )
    latest = {"completed": entries[0] if entries else None, "failed": None, "savepoint": None, "restored": restored}
    return {
        "counts": {"restored": int(restored is not None), "total": len(batches), "in_progress": 0,
                   "completed": len(batches), "failed": 0},
        "summary": {},
        "latest": latest,
        "history": entries,
    }


# --------------------------------------------------------------------------- savepoints


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


#: the directory of SourceFunctions' journals in a checkpoint location (flinkpy.spark.function_journal)
JOURNALS = "source-functions"


def _files(location: str) -> list[dict[str, Any]]:
    out = []
    for root, _dirs, files in os.walk(location):
        if os.path.relpath(root, location).split(os.sep)[0] == JOURNALS:
            continue  # SourceFunctions' journals grow while their functions run (a partial last frame is cut on restore)
        for f in sorted(files):
            full = os.path.join(root, f)
            rel = posixpath.join(SPARK_DIR, os.path.relpath(full, location).replace(os.sep, "/"))
            out.append({"path": rel, "size": os.path.getsize(full), "checksum": _sha256(full)})
    return sorted(out, key=lambda h: h["path"])


def savepoint_metadata(location: str, *, job_id: str, job_name: str, trigger_ms: int, parallelism: int, master: str,
                       key_groups: int | None = None) -> dict[str, Any]:
    """The `_metadata` of a Spark savepoint of the (stopped) query at ``location``; ``key_groups``:
    how many key groups the plan's keyed reduce keeps its state in (None: no such reduce)."""
    from flinkpy.checkpoint.metadata import new_metadata, new_operator, new_subtask

    batches = committed_batches(location)
    batch = batches[-1] if batches else -1
    offsets = read_offsets(location, batch) if batch >= 0 else {"metadata": {}, "sources": []}
    partitions = shuffle_partitions_of(location) or parallelism
    operators = [
        new_operator(operator_id=f"spark-source-{i}", uid=None, name=f"Spark source {i}", vertex_id=i, parallelism=1,
                     max_parallelism=1, subtasks=[new_subtask(0, source_offsets=offset)])
        for i, offset in enumerate(offsets["sources"])
    ]
    operators.append(new_operator(operator_id="spark-state", uid=None, name="Spark state store", vertex_id=len(operators),
                                  parallelism=partitions, max_parallelism=partitions, subtasks=[]))
    doc = new_metadata(job_id=job_id, job_name=job_name, checkpoint_id=max(batch, 0), trigger_timestamp=trigger_ms,
                       completion_timestamp=max(trigger_ms, int(time.time() * 1000)), operators=operators,
                       kind="savepoint", savepoint_format="native", max_parallelism=partitions)
    doc["runner"] = RUNNER
    doc["spark"] = {
        "checkpoint": SPARK_DIR,
        "batch_id": batch,
        "source_offsets": offsets["sources"],
        "batch_watermark_ms": offsets["metadata"].get("batchWatermarkMs"),
        "shuffle_partitions": partitions,
        "key_groups": key_groups,
        "parallelism": parallelism,
        "master": master,
        "files": _files(location),
    }
    return doc


def write_savepoint(location: str, target_dir: str, doc: dict[str, Any], *, job_id: str,
                    engine: Callable[[str], None] | None = None) -> str:
    """Copy the quiet checkpoint location under ``target_dir`` (any fsspec URL); ``engine(url)``
    then adds the engine's layout of the state to the directory and ``doc`` (see
    :mod:`flinkpy.spark.state_move`); `_metadata` last, so a directory without it is never taken
    for a savepoint. Returns its URL."""
    from flinkpy.checkpoint.storage import CheckpointStorage, savepoint_dir

    url = savepoint_dir(target_dir, job_id)
    storage = CheckpointStorage(url)
    fs, path = storage.filesystem(url)
    fs.makedirs(path, exist_ok=True)
    fs.put(location.rstrip("/") + "/", f"{path.rstrip('/')}/{SPARK_DIR}", recursive=True)
    if engine is not None:
        engine(url)
    storage.write_metadata_in(url, doc)
    return url


def read_snapshot(path: str) -> tuple[str, dict[str, Any]]:
    """(directory URL, `_metadata`) of a savepoint or retained checkpoint of either runner."""
    from flinkpy.checkpoint.storage import CheckpointStorage

    storage = CheckpointStorage(path)
    directory, _ = storage.locate(path)
    return directory, storage.read_metadata(path)


#: the key groups of a Spark keyed reduce before savepoints recorded them
LEGACY_KEY_GROUPS = 128


#: how a Spark savepoint restores on Spark: its query's checkpoint copied back, or a new query
#: seeded from the engine's layout of its state that the savepoint also carries
SPARK_CHECKPOINT, ENGINE_LAYOUT = "spark-checkpoint", "engine-layout"


def _layout_refusal(doc: dict[str, Any]) -> str | None:
    """Why the savepoint's engine layout cannot stand in for its Spark checkpoint (None: it can)."""
    moved = doc.get("moved")
    if moved is None:
        return "it was written before Spark savepoints carried the engine's layout of their state"
    refused = moved.get("refused") or []
    if refused:
        first = refused[0]
        return f"operator {first['operator']!r} could not be converted ({first['reason']})"
    return None


def restores_through_engine_layout(doc: dict[str, Any], *, shuffle_partitions: int, allow_non_restored_state: bool) -> bool:
    """Whether a Spark savepoint restores on Spark as a new query seeded from its engine layout
    rather than by copying its query's checkpoint back: at another parallelism than it was taken
    at, or with -n (see :func:`check_restore`; ``savepoint plan`` asks the same)."""
    return allow_non_restored_state or int(doc["spark"]["shuffle_partitions"]) != shuffle_partitions


def check_restore(doc: dict[str, Any], *, shuffle_partitions: int, where: str, key_groups: int | None = None,
                  allow_non_restored_state: bool = False) -> str:
    """How a Spark savepoint restores on Spark (:data:`SPARK_CHECKPOINT` or :data:`ENGINE_LAYOUT`),
    or why it cannot.

    With the parallelism it was taken at and without -n, its query's checkpoint is copied back:
    the query goes on from its last batch. Spark fixes a query's state partitions when it first
    starts and cannot redistribute them, so at another parallelism (a rescale) or with -n (state
    of operators the program no longer has left behind), a new query starts from the engine's
    layout of the same state, which the savepoint also carries, as when state moves from the
    engine; refused, with the reason, where that layout is missing or incomplete. A keyed reduce's
    running values restored from Spark's checkpoint must be looked up in the key groups they were
    saved in, else they would be silently lost."""
    spark = doc["spark"]
    had = int(spark["shuffle_partitions"])
    if restores_through_engine_layout(doc, shuffle_partitions=shuffle_partitions, allow_non_restored_state=allow_non_restored_state):
        why = _layout_refusal(doc)
        if why is None:
            return ENGINE_LAYOUT
        if allow_non_restored_state:
            raise UsageError(
                f"-n/--allow-non-restored-state: the Spark savepoint {where} cannot leave any operator's state "
                f"behind: {why}, and Spark's own checkpoint restores all of its state or none",
                remedy="restore it without -n, or take a new savepoint of the job with this flinkpy",
            )
        raise rescale_refused(f"Spark savepoint {where}", had, shuffle_partitions, f": {why}", "start the job afresh without -s")
    check_key_groups(f"Spark savepoint {where}", spark.get("key_groups", LEGACY_KEY_GROUPS), key_groups)
    return SPARK_CHECKPOINT


def rescale_refused(what: str, had: int, shuffle_partitions: int, why: str, instead: str) -> InvalidProgramError:
    """The refusal of restoring ``what`` (its state in ``had`` partitions) at another parallelism;
    ``why`` ends the message, ``instead`` says how to change the parallelism."""
    return InvalidProgramError(
        f"the {what} has its state in {had} partitions (spark.sql.shuffle.partitions), "
        f"but this run would use {shuffle_partitions}, and its state cannot be redistributed{why}",
        remedy=f"run with -p {had} (or --spark-conf spark.sql.shuffle.partitions={had}); to change the parallelism, {instead}",
    )


def check_key_groups(what: str, saved: int | None, key_groups: int | None) -> None:
    """A keyed reduce's running values restored from Spark's checkpoint are looked up in the key
    groups they were saved in (``saved``): refuse another number, they would be silently lost."""
    if key_groups and saved and saved != key_groups:
        raise InvalidProgramError(
            f"the {what} keeps its keyed reduce's state in {saved} key groups, but this version "
            f"of flinkpy's Spark runner groups keys into {key_groups}: the saved running values would not be found",
            remedy="restore it with the flinkpy version that took it, or start the job afresh without -s",
        )


def restore_savepoint(directory: str, doc: dict[str, Any], location: str) -> None:
    """Copy the savepoint's checkpoint into a new job's (empty) checkpoint location, checking
    every file against its recorded size and checksum."""
    from flinkpy.checkpoint.metadata import CorruptCheckpointError

    copy_location(f"{directory.rstrip('/')}/{SPARK_DIR}", location, what=f"the Spark savepoint {directory}")
    for handle in doc["spark"]["files"]:
        rel = handle["path"][len(SPARK_DIR) + 1:]
        full = os.path.join(location, rel)
        if not os.path.isfile(full):
            shutil.rmtree(location, ignore_errors=True)
            raise CorruptCheckpointError(f"{directory}/{handle['path']}", "state file is missing")
        if os.path.getsize(full) != handle["size"] or _sha256(full) != handle["checksum"]:
            shutil.rmtree(location, ignore_errors=True)
            raise CorruptCheckpointError(f"{directory}/{handle['path']}", "size or checksum differs from _metadata")


def copy_location(source: str, location: str, *, what: str = "the Spark checkpoint", move: bool = False) -> None:
    """Copy the checkpoint location at ``source`` (any fsspec URL) into a new job's (empty)
    ``location``; ``move``: move it there instead (a local ``source``)."""
    from flinkpy.checkpoint.storage import CheckpointStorage

    fs, src = CheckpointStorage(source).filesystem(source)
    if os.path.exists(location) and os.listdir(location):
        raise InvalidProgramError(f"the checkpoint location {location} is not empty", remedy="restore into a new job")
    os.makedirs(os.path.dirname(location.rstrip("/")), exist_ok=True)
    if not fs.exists(src):
        raise NotFoundError(f"{what} has no {SPARK_DIR}/ directory", remedy="use a complete savepoint")
    if move:
        if os.path.isdir(location):
            os.rmdir(location)
        shutil.move(src, location)
        return
    fs.get(src.rstrip("/") + "/", location, recursive=True)
