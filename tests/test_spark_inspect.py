"""`flinkpy checkpoint inspect` on a Spark Structured Streaming checkpoint location.

The location is made by a real streaming query in one module-scoped local[2] SparkSession: a
stateful word count (groupBy + count) over a file source, run twice with Trigger.AvailableNow
(one new file each time, so batches 0 and 1). Every expected figure (distinct words, files,
bytes of the state files) is computed here from the inputs and the directory itself.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli

pytest.importorskip("pyspark")

SEED = 20261122
PARTITIONS = 2


@pytest.fixture(scope="module")
def spark() -> Any:
    from flinkpy.spark.analysis import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": str(PARTITIONS)}, app_name="test_spark_inspect")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def location(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The checkpoint location after two AvailableNow runs, with the query id and the words."""
    from pyspark.sql import functions as F

    base = tmp_path_factory.mktemp("spark-inspect")
    inputs, checkpoint = base / "in", base / "checkpoint"
    inputs.mkdir()
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    words: Counter[str] = Counter()
    query_ids = []
    for run in range(2):
        lines = [" ".join(rng.choice(["a", "b", "c", "d", "e", f"w{run}"]) for _ in range(5)) for _ in range(20)]
        (inputs / f"part-{run}.txt").write_text("\n".join(lines) + "\n")
        words.update(w for line in lines for w in line.split())
        counts = spark.readStream.format("text").load(str(inputs)).select(F.explode(F.split("value", " ")).alias("word")).groupBy("word").count()
        query = counts.writeStream.outputMode("update").format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        query.awaitTermination(60)
        assert not query.isActive and query.exception() is None
        query_ids.append(query.id)
    assert query_ids[0] == query_ids[1]  # a restart from the location keeps the query id
    return {"path": checkpoint, "query_id": query_ids[0], "words": words}


def _state_bytes(path: Path, partition: int) -> tuple[int, int]:
    files = [Path(d) / f for d, _, fs in os.walk(path / "state" / "0" / str(partition)) for f in fs if not f.endswith(".crc") and "_metadata" not in d]
    return sum(f.stat().st_size for f in files), len(files)


@pytest.mark.timeout(120)
def test_inspect_with_spark_readers(location: dict[str, Any], spark: Any) -> None:
    from flinkpy.spark.checkpoint_inspect import inspect, is_spark_checkpoint

    path = location["path"]
    assert is_spark_checkpoint(str(path)) and not is_spark_checkpoint(str(path / "offsets"))
    doc = inspect(str(path), spark=spark)
    assert doc["format"] == "spark" and doc["reader"] == "spark" and doc["query_id"] == location["query_id"]
    assert (doc["latest_batch"], doc["latest_committed_batch"], doc["uncommitted_batch"]) == (1, 1, None)
    assert doc["batches"] == doc["committed_batches"] == [0, 1]
    assert doc["latest"]["committed"] and doc["latest"]["conf"]["spark.sql.shuffle.partitions"] == str(PARTITIONS)
    assert doc["sources"] == [{"index": 0, "offset": {"logOffset": 1}, "files_read": 2}]
    (op,) = doc["operators"]
    assert (op["operator_id"], op["name"], op["partitions"]) == (0, "stateStoreSave", PARTITIONS)
    assert (op["min_batch_id"], op["max_batch_id"]) == (0, 1)
    assert op["rows"] == len(location["words"]) == sum(p["rows"] for p in op["partition_state"])
    assert [p["partition"] for p in op["partition_state"]] == list(range(PARTITIONS))
    for p in op["partition_state"]:
        assert (p["bytes"], p["files"]) == _state_bytes(path, p["partition"])
    assert op["bytes"] == sum(p["bytes"] for p in op["partition_state"]) > 0
    # the rows are those of Spark's own reader of the state: one per word
    read = {r.key.word: r.value["count"] for r in spark.read.format("statestore").load(str(path)).collect()}
    assert read == dict(location["words"])


@pytest.mark.timeout(60)
def test_an_uncommitted_batch_is_shown_as_the_one_a_restart_runs_again(location: dict[str, Any], tmp_path: Path) -> None:
    copy = tmp_path / "crashed"
    shutil.copytree(location["path"], copy)
    for name in ("1", ".1.crc"):  # as if the query died after logging batch 1's offsets
        (copy / "commits" / name).unlink(missing_ok=True)
    res = run_cli("checkpoint", "inspect", str(copy), "--no-spark-reader", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["latest_batch"], doc["latest_committed_batch"], doc["uncommitted_batch"]) == (1, 0, 1)
    assert doc["committed_batches"] == [0] and doc["latest"]["committed"] is False and doc["latest"]["next_watermark_ms"] is None
    assert doc["reader"] == "files" and doc["operators"][0]["rows"] is None
    res = run_cli("checkpoint", "inspect", str(copy), "--no-spark-reader", env={"COLUMNS": "160"})
    assert res.returncode == 0, res.stderr
    assert "Latest batch: 1 (not committed: a restart runs it again" in res.stdout
    assert f"Query id: {location['query_id']}" in res.stdout and "stateStoreSave" in res.stdout


@pytest.mark.timeout(60)
def test_command_json_without_spark_matches_the_directory(location: dict[str, Any]) -> None:
    path = location["path"]
    res = run_cli("checkpoint", "inspect", path.as_uri(), "--no-spark-reader", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) == {
        "path", "format", "query_id", "reader", "latest_batch", "latest_committed_batch", "uncommitted_batch",
        "batches", "committed_batches", "latest", "sources", "operators",
    }
    assert doc["query_id"] == location["query_id"] and doc["sources"][0]["offset"] == {"logOffset": 1}
    sizes = [_state_bytes(path, p) for p in range(PARTITIONS)]
    assert [(p["bytes"], p["files"]) for p in doc["operators"][0]["partition_state"]] == sizes


@pytest.mark.timeout(60)
def test_a_spark_jobs_directory_is_inspected_as_its_checkpoint_location(location: dict[str, Any], tmp_path: Path) -> None:
    """`checkpoint list` prints a Spark job's location `<dir>/<job_id>/spark`; inspect takes the
    job's directory above it too (as `run -s` does), but not a Spark savepoint's directory,
    whose copy of the location sits in spark/ beside its `_metadata`."""
    from flinkpy.spark.checkpoint_inspect import spark_location

    job_dir = tmp_path / "checkpoints" / "3f2a9c0e11aa22bb33cc44dd55ee66ff"
    shutil.copytree(location["path"], job_dir / "spark")
    res = run_cli("checkpoint", "inspect", str(job_dir), "--no-spark-reader", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["path"] == str(job_dir / "spark") and doc["query_id"] == location["query_id"]
    assert doc["committed_batches"] == [0, 1] and doc["sources"][0]["offset"] == {"logOffset": 1}
    assert spark_location(job_dir.as_uri()) == job_dir.as_uri() + "/spark"
    assert spark_location(str(job_dir / "spark")) == str(job_dir / "spark")
    (job_dir / "_metadata").write_text("{}")  # a snapshot's directory: its _metadata speaks for it
    assert spark_location(str(job_dir)) is None and spark_location(str(tmp_path / "checkpoints")) is None
