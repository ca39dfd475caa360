"""Snapshot analysis with Spark: a flinkpy checkpoint's or savepoint's keyed state as a DataFrame.

The read side of a state processor, for snapshots too large for one process. The driver reads
only `_metadata`; the list of state files is parallelized, one Spark task per file, and each
task reads its file (checking its size and sha256 against `_metadata` before decoding it) and
explodes it into one row per key of every keyed state. :func:`read_keyed_state` returns that
DataFrame for the user's own queries; :func:`analyze` computes from it, with DataFrame
aggregations, the report of ``flinkpy state analyze`` — the same report, figure for figure, as
the local engine of :mod:`flinkpy.checkpoint.analysis` (both hand their measurements to
``build_report``).

Columns of :func:`read_keyed_state` (:data:`KEY_COLUMNS`): ``operator_id``, ``uid``,
``operator`` (its name), ``subtask``, ``state``, ``kind`` (value, list, map, reducing,
aggregating), ``internal`` (the engine's own states: timers, window contents), ``key_group``,
``key`` (``repr`` of the key), ``entries`` and ``bytes`` (as defined in
:mod:`flinkpy.checkpoint.analysis`: the key's elements, and the pickled size of its entry).

The Spark workers decode pickles, so the job's modules must be importable there when its state
holds instances of the job's classes (``PYTHONPATH`` on the workers), and only trusted
snapshots should be analyzed. Incremental checkpoints (their keyed state in native store files
under ``shared/``) are refused; analyze a savepoint (canonical format) of the job instead.

Example (needs PySpark and Java)::

    from flinkpy.spark.analysis import read_keyed_state, spark_session
    spark = spark_session("local[4]")
    keys = read_keyed_state(spark, "s3://bucket/savepoints/savepoint-3f2a9c-1b2c3d4e5f60")
    keys.groupBy("operator", "state").agg({"bytes": "sum", "key": "count"}).show()
    keys.orderBy(keys.bytes.desc()).limit(20).show(truncate=False)
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Any

from flinkpy.checkpoint.metadata import CorruptCheckpointError, handles
from flinkpy.checkpoint.storage import CheckpointStorage, Problem, VerifyReport
from flinkpy.errors import ConfigurationError, FlinkpyError, UsageError
from flinkpy.checkpoint.analysis import (
    OperatorFacts,
    StateFileReader,
    build_report,
    cut_repr,
    keyed_entries,
    not_restorable,
    operator_states,
)

#: the columns of :func:`read_keyed_state`, in order
KEY_COLUMNS = ("operator_id", "uid", "operator", "subtask", "state", "kind", "internal", "key_group", "key", "entries", "bytes")

#: the rows the tasks produce: KEY_COLUMNS plus the operator's place in `_metadata`, the key's
#: identity within its file (key equality, as the local engine counts distinct keys) and the
#: row's place in the file (ties in the top keys go to the key the snapshot holds first). A row
#: with a null key_group declares a state (so a state without keys is still listed).
_ROW_DDL = (
    "op_index INT, operator_id STRING, uid STRING, operator STRING, subtask INT, state STRING, kind STRING, "
    "internal BOOLEAN, key_group INT, key STRING, key_id LONG, seq LONG, entries LONG, bytes LONG"
)
#: how a task's FlinkpyError crosses the JVM back to the driver: JSON between two markers
_MARK = "@@flinkpy-error@@"


def spark_session(master: str = "local[*]", conf: Mapping[str, str] | None = None, *, app_name: str = "flinkpy state analyze") -> Any:
    """A SparkSession on ``master`` with ``conf`` (flinkpy.spark.session); exit 8 when PySpark or
    Java is missing."""
    from flinkpy.spark.session import spark_session as start

    return start(master, {"spark.sql.shuffle.partitions": "8", **dict(conf or {})}, app_name=app_name)


def read_keyed_state(spark: Any, path: str, *, storage_options: Mapping[str, Any] | None = None, trusted: bool = False) -> Any:
    """The keyed state of the checkpoint or savepoint at ``path`` as a Spark DataFrame, one row
    per operator, subtask, state and key (columns :data:`KEY_COLUMNS`).

    Every state file is verified first, in Spark tasks (sizes and checksums against
    `_metadata`): a missing or damaged snapshot is refused here, as ``flinkpy checkpoint verify``
    would (``NotFoundError``, ``CorruptCheckpointError``). The DataFrame itself is lazy: files
    are decoded when an action runs, with a restricted unpickler unless ``trusted``
    (:mod:`flinkpy.state.safe_pickle`).
    """
    snapshot = _Snapshot.open(spark, path, storage_options, trusted)
    return snapshot.rows().where("key_group IS NOT NULL").select(*KEY_COLUMNS)


def analyze(
    path: str,
    *,
    top: int = 10,
    storage_options: Mapping[str, Any] | None = None,
    spark: Any = None,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    trusted: bool = False,
) -> dict[str, Any]:
    """The report of ``flinkpy.client.analysis.analyze(path, engine="spark")``, computed by Spark.

    Uses ``spark`` when given (and leaves it running), else starts a session on ``master`` with
    ``conf`` and stops it at the end.
    """
    if top < 0:
        raise UsageError(f"top must be 0 or more, got {top}")
    own = spark is None
    if own:
        spark = spark_session(master, conf)
    try:
        return _Snapshot.open(spark, path, storage_options, trusted).report(top)
    finally:
        if own:
            spark.stop()


# --------------------------------------------------------------------------- the driver's side


class _Snapshot:
    """One verified snapshot on one SparkSession: its handles and the DataFrame of its keys."""

    def __init__(self, spark: Any, verified: VerifyReport, reader: StateFileReader):
        self.spark = spark
        self.verified = verified
        self.reader = reader
        self.doc: dict[str, Any] = verified.metadata  # type: ignore[assignment]

    @classmethod
    def open(cls, spark: Any, path: str, storage_options: Mapping[str, Any] | None, trusted: bool = False) -> _Snapshot:
        storage = CheckpointStorage(path, storage_options=storage_options)
        dir_url, meta_url = storage.locate(path)
        try:
            doc = storage.read_metadata(meta_url)  # NotFoundError (exit 4): nothing there
        except CorruptCheckpointError as exc:
            raise not_restorable(VerifyReport(dir_url, meta_url, None, 0, 0, [Problem(exc.path, exc.problem)])) from None
        reader = StateFileReader(storage, dir_url, trusted=trusted)
        verified = _verify(spark, reader, dir_url, meta_url, doc)
        if not verified.restorable:
            raise not_restorable(verified)
        return cls(spark, verified, reader)

    def rows(self) -> Any:
        """The DataFrame of every row the tasks produce (keys and state declarations)."""
        tasks = [
            (i, op["operator_id"], op["uid"], op["name"], sub["subtask"], sub["keyed_state"])
            for i, op in enumerate(self.doc["operators"])
            for sub in op["subtasks"]
            if sub.get("keyed_state")
        ]
        rdd = self.spark.sparkContext.parallelize(tasks, max(1, len(tasks))).flatMap(partial(_keyed_rows, self.reader))
        return self.spark.createDataFrame(rdd, _ROW_DDL, verifySchema=False)

    def report(self, top: int) -> dict[str, Any]:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        facts = [OperatorFacts() for _ in self.doc["operators"]]
        rows = self.rows().persist(StorageLevel.MEMORY_AND_DISK)  # decoded once, aggregated several times
        try:
            with _task_errors():
                declared = rows.where("key_group IS NULL").select("op_index", "subtask", "seq", "state", "kind").collect()
                keys = rows.where("key_group IS NOT NULL")
                groups = (
                    keys.groupBy("op_index", "state", "kind", "key_group", "subtask")
                    .agg(F.count(F.lit(1)).alias("keys"), F.sum("entries").alias("entries"), F.sum("bytes").alias("bytes"))
                    .collect()
                )
                per_subtask = (
                    keys.groupBy("op_index", "subtask", "key_group", "key_id")
                    .agg(F.sum("bytes").alias("key_bytes"))
                    .groupBy("op_index", "subtask")
                    .agg(F.count(F.lit(1)).alias("keys"), F.max("key_bytes").alias("largest"))
                    .collect()
                )
                largest = keys.orderBy(F.desc("bytes"), "op_index", "subtask", "seq").limit(top).collect() if top else []
                op_state = self._operator_state()
        finally:
            rows.unpersist()
        for r in sorted(declared, key=lambda r: (r.op_index, r.subtask, r.seq)):
            facts[r.op_index].declared.setdefault(r.state, r.kind)
        for r in groups:
            facts[r.op_index].key_groups.append(
                {"state": r.state, "kind": r.kind, "key_group": r.key_group, "subtask": r.subtask, "keys": r["keys"], "entries": r.entries, "bytes": r.bytes}
            )
        for r in per_subtask:
            facts[r.op_index].subtask_keys[r.subtask] = (r["keys"], r.largest)
        for op_index, subtask, _, name, kind, entries, size in sorted(op_state):
            facts[op_index].operator_state.append({"subtask": subtask, "name": name, "kind": kind, "entries": entries, "bytes": size})
        top_keys = [
            {
                "operator": r.operator, "uid": r.uid, "operator_id": r.operator_id, "state": r.state, "kind": r.kind,
                "key": cut_repr(r.key), "key_group": r.key_group, "subtask": r.subtask, "entries": r.entries, "bytes": r.bytes,
            }
            for r in largest
        ]
        return build_report(self.verified, facts, top_keys, engine="spark")

    def _operator_state(self) -> list[tuple[int, int, int, str, str, int, int]]:
        tasks = [(i, sub["subtask"], sub["operator_state"]) for i, op in enumerate(self.doc["operators"]) for sub in op["subtasks"] if sub.get("operator_state")]
        if not tasks:
            return []
        return self.spark.sparkContext.parallelize(tasks, len(tasks)).flatMap(partial(_operator_rows, self.reader)).collect()


def _verify(spark: Any, reader: StateFileReader, dir_url: str, meta_url: str, doc: dict[str, Any]) -> VerifyReport:
    """What ``CheckpointStorage.verify`` reports, with the files read and checked in Spark tasks."""
    files: dict[str, dict[str, Any]] = {}
    for _op, _sub, _kind, handle in handles(doc):
        files.setdefault(handle["path"], handle)
    if not files:
        return VerifyReport(dir_url, meta_url, doc, 0, 0, [])
    checked = spark.sparkContext.parallelize(list(enumerate(files.values())), len(files)).map(partial(_check_file, reader)).collect()
    checked.sort()
    problems = [Problem(url, problem) for _, url, _, problem in checked if problem]
    found = [size for _, _, size, _ in checked if size is not None]
    return VerifyReport(dir_url, meta_url, doc, len(found), sum(found), problems)


@contextmanager
def _task_errors() -> Iterator[None]:
    """Raise the FlinkpyError a Spark task raised (it reaches the driver as Spark's own error)."""
    try:
        yield
    except FlinkpyError:
        raise
    except Exception as exc:  # noqa: BLE001 - Spark wraps the task's error; unwrap ours, keep the rest
        text = str(exc)
        start = text.find(_MARK)
        end = text.find(_MARK, start + len(_MARK)) if start >= 0 else -1
        if end < 0:
            raise
        raise _decode(text[start + len(_MARK) : end]) from None


def _decode(payload: str) -> FlinkpyError:
    error = json.loads(payload)
    if error["type"] == "corrupt":
        return CorruptCheckpointError(error["path"], error["problem"], remedy=error["remedy"])
    if error["type"] == "configuration":
        return ConfigurationError(error["message"], remedy=error["remedy"])
    return FlinkpyError(error["message"], remedy=error["remedy"])


def _encode(exc: FlinkpyError) -> RuntimeError:
    error: dict[str, Any] = {"type": "other", "message": exc.message, "remedy": exc.remedy}
    if isinstance(exc, CorruptCheckpointError):
        error.update(type="corrupt", path=exc.path, problem=exc.problem)
    elif isinstance(exc, ConfigurationError):
        error["type"] = "configuration"
    return RuntimeError(f"{_MARK}{json.dumps(error)}{_MARK}")


# --------------------------------------------------------------------------- the tasks' side


def _check_file(reader: StateFileReader, item: tuple[int, Mapping[str, Any]]) -> tuple[int, str, int | None, str | None]:
    """(index, url, size or None when missing, problem or None) of one state file."""
    index, handle = item
    try:
        return index, reader.url(handle), len(reader.storage.read_state(reader.dir_url, handle)), None
    except CorruptCheckpointError as exc:
        missing = exc.problem.endswith("is missing")
        return index, exc.path, None if missing else handle["size"], exc.problem


def _keyed_rows(reader: StateFileReader, task: tuple[int, str, str | None, str, int, Mapping[str, Any]]) -> Iterator[tuple[Any, ...]]:
    op_index, operator_id, uid, name, subtask, handle = task
    ids: dict[Any, int] = {}
    try:
        for seq, (state, kind, kg, key, entries, size) in enumerate(keyed_entries(reader.load(handle), reader.url(handle))):
            internal = state.startswith("_")
            if kg is None:
                yield (op_index, operator_id, uid, name, subtask, state, kind, internal, None, None, None, seq, 0, 0)
            else:
                key_id = ids.setdefault(key, len(ids))
                yield (op_index, operator_id, uid, name, subtask, state, kind, internal, kg, repr(key), key_id, seq, entries, size)
    except FlinkpyError as exc:
        raise _encode(exc) from None


def _operator_rows(reader: StateFileReader, task: tuple[int, int, Mapping[str, Any]]) -> list[tuple[int, int, int, str, str, int, int]]:
    op_index, subtask, handle = task
    try:
        return [(op_index, subtask, i, *row) for i, row in enumerate(operator_states(reader.load(handle)))]
    except FlinkpyError as exc:
        raise _encode(exc) from None
