"""What a Spark Structured Streaming checkpoint location holds, for ``flinkpy checkpoint inspect``.

A Spark checkpoint location is a directory with ``metadata`` (the query id), ``offsets/N`` (the
write-ahead log: batch N's offsets, one line per source, written before the batch runs),
``commits/N`` (written when batch N is done), ``sources/I/`` (a file source's log of the files
it has read) and ``state/OP/PARTITION/`` (each stateful operator's state store files, one
directory per shuffle partition, with ``state/OP/_metadata`` naming the operator and its
stores). The batch whose offsets are logged but not committed is the one a restart runs again.

:func:`inspect` reads the logs directly (any fsspec URL; no JVM needed) and lists each stateful
operator's partitions with the bytes of their files on disk (every retained version). Given a
SparkSession, it also asks Spark's own readers: ``state-metadata`` for the operators, their
stores and the batch range their state covers, and ``statestore`` for the rows (keys) per
partition at the latest committed batch.

>>> is_spark_checkpoint("/nonexistent/chk")
False
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

import fsspec

from flinkpy.checkpoint.metadata import METADATA_FILE
from flinkpy.spark.supervisor_snapshots import SPARK_DIR

_BATCH = re.compile(r"^\d+$")


def _fs(path: str) -> tuple[Any, str]:
    """The file system of ``path`` with flinkpy's storage options (e.g. the S3 endpoint)."""
    from flinkpy.checkpoint.storage import storage_options

    return fsspec.core.url_to_fs(path, **storage_options(path))


def is_spark_checkpoint(path: str) -> bool:
    """True when ``path`` is a directory laid out as a Spark checkpoint location."""
    try:
        fs, root = _fs(path)
        return fs.isdir(root) and fs.isfile(f"{root.rstrip('/')}/metadata") and fs.isdir(f"{root.rstrip('/')}/offsets")
    except Exception:  # noqa: BLE001 - unreachable or not a directory: not a Spark location; the flinkpy path reports why
        return False


def spark_location(path: str) -> str | None:
    """The Spark checkpoint location ``path`` names: ``path`` itself, or the ``spark/`` location
    inside a Spark job's directory ``<execution.checkpointing.dir>/<job_id>`` (what ``flinkpy
    checkpoint list JOB_ID`` prints, and ``run -s`` takes); None when it names neither. A
    directory with a ``_metadata`` is a snapshot (a Spark savepoint keeps its copy of the
    location in ``spark/`` too), never a job's directory.

    >>> spark_location("/nonexistent/3f2a9c0e11aa22bb33cc44dd55ee66ff") is None
    True
    """
    if is_spark_checkpoint(path):
        return path
    inner = f"{path.rstrip('/')}/{SPARK_DIR}"
    if not is_spark_checkpoint(inner):
        return None
    fs, root = _fs(path)
    return None if fs.exists(f"{root.rstrip('/')}/{METADATA_FILE}") else inner


def inspect(path: str, *, spark: Any = None) -> dict[str, Any]:
    """The checkpoint location at ``path`` as a JSON-serializable dict::

        {"path", "format": "spark", "query_id", "reader": "spark"|"files",
         "latest_batch", "latest_committed_batch", "uncommitted_batch",
         "batches": [...], "committed_batches": [...],
         "latest": {"batch_id", "timestamp_ms", "watermark_ms", "committed", "next_watermark_ms", "conf"},
         "sources": [{"index", "offset", "files_read"}],
         "operators": [{"operator_id", "name", "stores", "partitions", "min_batch_id", "max_batch_id",
                        "bytes", "files", "rows", "partition_state": [{"partition", "bytes", "files", "rows"}]}]}

    ``batches`` are the ids with logged offsets still retained, ``committed_batches`` those
    committed; ``offset`` is the source's offset as Spark logged it (parsed JSON; null before
    its first data); ``files_read`` counts the files a file source has read (null for other
    sources). ``rows`` (keys in the state at the latest committed batch) and the batch range
    come from Spark's readers when ``spark`` is given, else they are null.
    """
    fs, root = _fs(path)
    root = root.rstrip("/")
    meta = _json(fs.cat_file(f"{root}/metadata").decode())
    batches = _batch_ids(fs, f"{root}/offsets")
    committed = _batch_ids(fs, f"{root}/commits")
    latest = batches[-1] if batches else None
    doc: dict[str, Any] = {
        "path": path,
        "format": "spark",
        "query_id": meta.get("id") if isinstance(meta, dict) else None,
        "reader": "spark" if spark is not None else "files",
        "latest_batch": latest,
        "latest_committed_batch": committed[-1] if committed else None,
        "uncommitted_batch": latest if latest is not None and latest not in committed else None,
        "batches": batches,
        "committed_batches": committed,
        "latest": None,
        "sources": [],
        "operators": [],
    }
    if latest is not None:
        header, offsets = _offset_log(fs.cat_file(f"{root}/offsets/{latest}").decode())
        commit = _commit(fs, f"{root}/commits/{latest}") if latest in committed else None
        doc["latest"] = {
            "batch_id": latest,
            "timestamp_ms": header.get("batchTimestampMs"),
            "watermark_ms": header.get("batchWatermarkMs"),
            "committed": latest in committed,
            "next_watermark_ms": commit.get("nextBatchWatermarkMs") if commit else None,
            "conf": header.get("conf", {}),
        }
        doc["sources"] = [{"index": i, "offset": offset, "files_read": _files_read(fs, f"{root}/sources/{i}")} for i, offset in enumerate(offsets)]
    doc["operators"] = _operators(fs, f"{root}/state")
    if spark is not None and doc["operators"]:
        _with_spark_readers(spark, path, doc)
    return doc


# --------------------------------------------------------------------------- the logs


def inspect_with_readers(path: str, spark_reader: bool | None = None) -> dict[str, Any]:
    """:func:`inspect`, with Spark's state readers on a local Spark started for it (and stopped
    after) when ``spark_reader`` is True, or None and PySpark is installed."""
    import importlib.util

    if spark_reader is None:
        spark_reader = importlib.util.find_spec("pyspark") is not None
    spark = None
    if spark_reader:
        from flinkpy.spark.analysis import spark_session

        spark = spark_session("local[1]", {"spark.sql.shuffle.partitions": "1"}, app_name="flinkpy checkpoint inspect")
    try:
        return inspect(path, spark=spark)
    finally:
        if spark is not None:
            spark.stop()


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _batch_ids(fs: Any, directory: str) -> list[int]:
    try:
        names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(directory, detail=False)]
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if _BATCH.match(n))


def _offset_log(text: str) -> tuple[dict[str, Any], list[Any]]:
    """(the batch's header, one offset per source) of an ``offsets/N`` file: a version line,
    the header as JSON, then one line per source ("-" for a source without an offset yet)."""
    lines = text.splitlines()
    header = _json(lines[1]) if len(lines) > 1 else {}
    return (header if isinstance(header, dict) else {}), [None if line == "-" else _json(line) for line in lines[2:]]


def _commit(fs: Any, path: str) -> dict[str, Any]:
    lines = fs.cat_file(path).decode().splitlines()
    doc = _json(lines[1]) if len(lines) > 1 else {}
    return doc if isinstance(doc, dict) else {}


def _files_read(fs: Any, directory: str) -> int | None:
    """Files a file source has read: the entries of its latest compacted log and of every batch after it."""
    try:
        names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(directory, detail=False)]
    except FileNotFoundError:
        return None
    logs = []
    for name in names:
        stem, _, ext = name.partition(".")
        if _BATCH.match(stem) and ext in ("", "compact"):
            logs.append((int(stem), name))
    logs.sort()
    compacted = [i for i, n in logs if n.endswith(".compact")]
    start = compacted[-1] if compacted else -1
    paths = set()
    for i, name in logs:
        if i >= start:
            for line in fs.cat_file(f"{directory}/{name}").decode().splitlines()[1:]:
                entry = _json(line)
                if isinstance(entry, dict) and "path" in entry:
                    paths.add(entry["path"])
    return len(paths)


# --------------------------------------------------------------------------- state


def _operators(fs: Any, state_dir: str) -> list[dict[str, Any]]:
    operators = []
    for op_id in _batch_ids(fs, state_dir):
        op_dir = f"{state_dir}/{op_id}"
        info = _operator_info(fs, f"{op_dir}/_metadata")
        parts = []
        for partition in _batch_ids(fs, op_dir):
            files = [f for f in fs.find(f"{op_dir}/{partition}", detail=True).values() if _counted(f["name"])]
            parts.append({"partition": partition, "bytes": sum(f["size"] for f in files), "files": len(files), "rows": None})
        operators.append({
            "operator_id": op_id,
            "name": info.get("name"),
            "stores": info.get("stores", []),
            "partitions": max((s["partitions"] for s in info.get("stores", [])), default=len(parts)),
            "min_batch_id": None,
            "max_batch_id": None,
            "bytes": sum(p["bytes"] for p in parts),
            "files": sum(p["files"] for p in parts),
            "rows": None,
            "partition_state": parts,
        })
    return operators


def _counted(name: str) -> bool:
    base = posixpath.basename(name)
    return not base.endswith(".crc") and "/_metadata/" not in name and not base.startswith(".")


def _operator_info(fs: Any, metadata_dir: str) -> dict[str, Any]:
    """Name and stores of a stateful operator from ``state/OP/_metadata`` (format v1, or the
    newest file of v2's per-batch directory)."""
    candidates = [f"{metadata_dir}/metadata"]
    v2 = _batch_ids(fs, f"{metadata_dir}/v2")
    if v2:
        candidates.insert(0, f"{metadata_dir}/v2/{v2[-1]}")
    for path in candidates:
        try:
            lines = fs.cat_file(path).decode().splitlines()
        except (FileNotFoundError, IsADirectoryError):
            continue
        doc = _json(lines[1]) if len(lines) > 1 else {}
        if isinstance(doc, dict):
            op = doc.get("operatorInfo", {})
            stores = [{"name": s.get("storeName"), "partitions": s.get("numPartitions")} for s in doc.get("stateStoreInfo", [])]
            return {"name": op.get("operatorName"), "stores": stores}
    return {}


def _with_spark_readers(spark: Any, path: str, doc: dict[str, Any]) -> None:
    """Fill in the batch ranges and rows per partition from Spark's state readers."""
    from pyspark.sql import functions as F

    by_id = {op["operator_id"]: op for op in doc["operators"]}
    for row in spark.read.format("state-metadata").load(path).collect():
        op = by_id.get(row.operatorId)
        if op is None:
            continue
        op["name"] = row.operatorName
        op["min_batch_id"], op["max_batch_id"] = row.minBatchId, row.maxBatchId
        if row.stateStoreName and row.stateStoreName not in [s["name"] for s in op["stores"]]:
            op["stores"].append({"name": row.stateStoreName, "partitions": row.numPartitions})
    if doc["latest_committed_batch"] is None:
        return
    for op in doc["operators"]:
        counts: dict[int, int] = {}
        try:
            for store in op["stores"] or [{"name": "default"}]:
                reader = spark.read.format("statestore").option("operatorId", op["operator_id"]).option("storeName", store["name"])
                for r in reader.load(path).groupBy("partition_id").agg(F.count(F.lit(1)).alias("n")).collect():
                    counts[r.partition_id] = counts.get(r.partition_id, 0) + r.n
        except Exception as exc:  # noqa: BLE001 - e.g. transformWithState needs a state variable name; say so, keep the rest
            op["rows_error"] = str(exc).strip().splitlines()[0][:300]
            continue
        op["rows"] = sum(counts.values())
        for part in op["partition_state"]:
            part["rows"] = counts.get(part["partition"], 0)
