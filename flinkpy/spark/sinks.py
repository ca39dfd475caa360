"""Sinks on Spark: foreachBatch writers made idempotent by the micro-batch id.

Spark replays a micro-batch after a failure with the same batch id and the same records (the
sources are replayable, see :mod:`flinkpy.spark.sources`), so a write keyed by the batch id is
exactly-once end to end:

- FileSink: one part file per bucket and batch, ``<prefix>-spark-<lineage>-<batch id><suffix>``,
  written hidden and renamed into place (a replay rewrites the same name);
- collect (``execute_and_collect``): one pickled file per batch in the collect directory;
- PostgreSQL sinks: the rows and a row ``(sink id, batch id)`` in ``flinkpy_spark_batches`` in one
  transaction; a batch whose id is already recorded is skipped;
- KafkaSink with EXACTLY_ONCE: a Kafka transaction per batch that also commits the batch id as a
  marker (:mod:`flinkpy.spark.kafka`); a batch the marker covers is skipped;
- Redis sinks: appends and the batch id in one transaction, upserts rewritten by a replay
  (:mod:`flinkpy.spark.redis_writer`);
- print and SinkFunctions: at-least-once, as on the engine.

A query attempt's first micro-batch is the first one its checkpoint has not committed. Before
writing it, file and collect writers remove their files of that batch id and later ones: what an
earlier attempt wrote without committing (in another time bucket, say), or what the cancelled run
wrote after the savepoint a job is restored from — the restored run's batches after it may hold
other records (other batch sizes, other data available), so overwriting by name is not enough.
Such files are told apart by the query's *lineage* (:func:`query_lineage`): the id Spark gives a
query in its checkpoint location, kept by its restarts and by a savepoint restored as Spark's
checkpoint. A query that starts afresh in the same output (state moved from the engine, or a
Spark savepoint restored at another parallelism) numbers its batches from 0 again under a new
lineage, and leaves the files of the others alone.

The writer runs on the driver with the batch's records in their original order. It also watches
for the final rows of a bounded input (see :mod:`flinkpy.spark.records`): once it has seen one
from every source, ``finished`` is set with the batch id.
"""

from __future__ import annotations

import os
import pickle
import re
import sys
import threading
from typing import Any

from flinkpy.errors import InvalidProgramError
from flinkpy.spark.records import BUNDLE, COUNTED, FINAL, RECORD, count_of, unbundle


class BatchWriter:
    """Writes a micro-batch of records; ``write(records, batch_id)`` must be idempotent per id."""

    guarantee = "at-least-once"

    def write(self, records: list, batch_id: int) -> None:
        raise NotImplementedError

    def begin(self, batch_id: int) -> None:
        """Called before the first batch of a query attempt (the first uncommitted batch)."""

    def bind_lineage(self, lineage: str) -> None:
        """The query's lineage (see the module docstring), before :meth:`begin`."""

    def describe(self) -> str:
        return type(self).__name__


def query_lineage(checkpoint_location: str | None) -> str:
    """The first 12 hex digits of the query id Spark keeps in ``<location>/metadata`` (written
    when the query starts, before its first batch); "" when there is none."""
    if not checkpoint_location:
        return ""
    import json

    import fsspec

    fs, root = fsspec.core.url_to_fs(checkpoint_location)
    try:
        first = fs.cat_file(f"{root.rstrip('/')}/metadata").decode().splitlines()[0]
        return json.loads(first)["id"].replace("-", "")[:12]
    except (FileNotFoundError, IndexError, KeyError, ValueError):
        return ""


class PrintWriter(BatchWriter):
    def __init__(self, sink: Any) -> None:
        from flinkpy.connectors.print_sink import print_prefix

        self.prefix = print_prefix(sink.sink_identifier, 0, 1)
        self.to_stderr = sink.to_stderr
        self.text = sink.text()

    def write(self, records: list, batch_id: int) -> None:
        if records:
            stream = sys.stderr if self.to_stderr else sys.stdout
            text = self.text
            stream.write("".join(f"{self.prefix}{text(r)}\n" for r in records))
            stream.flush()

    def describe(self) -> str:
        return "print to stdout (at-least-once)"


class FunctionWriter(BatchWriter):
    def __init__(self, sink: Any) -> None:
        self.fn = sink.fn if hasattr(sink, "fn") else sink

    def write(self, records: list, batch_id: int) -> None:
        if hasattr(self.fn, "invoke"):  # a SinkFunction: invoke(value, context)
            for r in records:
                self.fn.invoke(r, None)
        else:  # a plain callable of the record, as the engine calls it
            for r in records:
                self.fn(r)

    def describe(self) -> str:
        return "SinkFunction.invoke per record on the driver (at-least-once)"


class DiscardWriter(BatchWriter):
    guarantee = "exactly-once"

    def write(self, records: list, batch_id: int) -> None:
        pass


def _atomic_write(fs: Any, path: str, data: bytes) -> None:
    parent, name = path.rsplit("/", 1)
    hidden = f"{parent}/.{name}.inprogress"
    with fs.open(hidden, "wb") as f:
        f.write(data)
    if fs.exists(path):
        fs.rm(path)
    fs.mv(hidden, path)


def _remove_batches_from(fs: Any, root: str, name: re.Pattern[str], batch_id: int) -> None:
    """Delete the files under ``root`` whose name (or hidden in-progress name) matches ``name``
    with a batch id (its group 1) of ``batch_id`` or later."""
    if not fs.exists(root):
        return
    for path in fs.find(root):
        m = name.match(path.rsplit("/", 1)[-1])
        if m and int(m.group(1)) >= batch_id:
            fs.rm(path)


class CollectWriter(BatchWriter):
    guarantee = "exactly-once"

    def __init__(self, sink: Any) -> None:
        self.directory = sink.directory

    def write(self, records: list, batch_id: int) -> None:
        import fsspec

        fs = fsspec.filesystem("file")
        _atomic_write(fs, os.path.join(self.directory, f"spark-batch-{batch_id:012d}"), pickle.dumps(records, protocol=5))

    def begin(self, batch_id: int) -> None:
        import fsspec

        _remove_batches_from(fsspec.filesystem("file"), self.directory, re.compile(r"^\.?spark-batch-(\d{12})(\.inprogress)?$"), batch_id)

    def describe(self) -> str:
        return f"collect into {self.directory} (a file per batch id: exactly-once)"


def read_collected(directory: str) -> list:
    """The records a collect sink wrote, in batch order."""
    out: list = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("spark-batch-"):
            with open(os.path.join(directory, name), "rb") as f:
                out.extend(pickle.load(f))
    return out


class FileWriter(BatchWriter):
    guarantee = "exactly-once"

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.lineage = ""

    def bind_lineage(self, lineage: str) -> None:
        self.lineage = lineage

    def _stem(self) -> str:
        return f"{self.sink.output_file_config.get_part_prefix()}-spark-" + (f"{self.lineage}-" if self.lineage else "")

    def write(self, records: list, batch_id: int) -> None:
        import time

        from fsspec.core import url_to_fs

        from flinkpy.checkpoint.storage import storage_options

        fs, root = url_to_fs(self.sink.base_path, **storage_options(self.sink.base_path))
        root = root.rstrip("/") or "/"
        config = self.sink.output_file_config
        now = int(time.time() * 1000)
        buckets: dict[str, list[bytes]] = {}
        encode = self.sink.encoder.encode
        for r in records:
            buckets.setdefault(self.sink.bucket_assigner.bucket_id(r, now), []).append(encode(r))
        for bucket, lines in buckets.items():
            directory = f"{root}/{bucket}" if bucket else root
            fs.makedirs(directory, exist_ok=True)
            name = f"{self._stem()}{batch_id:012d}{config.get_part_suffix()}"
            _atomic_write(fs, f"{directory}/{name}", b"".join(lines))

    def begin(self, batch_id: int) -> None:
        from fsspec.core import url_to_fs

        from flinkpy.checkpoint.storage import storage_options

        fs, root = url_to_fs(self.sink.base_path, **storage_options(self.sink.base_path))
        config = self.sink.output_file_config
        name = re.compile(rf"^\.?{re.escape(self._stem())}(\d{{12}}){re.escape(config.get_part_suffix())}(\.inprogress)?$")
        _remove_batches_from(fs, root.rstrip("/") or "/", name, batch_id)

    def describe(self) -> str:
        return f"FileSink {self.sink.base_path} (a part file per bucket and batch id, renamed into place: exactly-once)"


class PostgresWriter(BatchWriter):
    """PostgresSink / PostgresUpsertSink / PostgresBatchSink: a transaction per batch that also
    records the batch id, so a replayed batch is skipped."""

    guarantee = "exactly-once"
    TABLE = "flinkpy_spark_batches"

    def __init__(self, sink: Any, sink_id: str) -> None:
        self.sink = sink
        self.sink_id = sink_id

    def write(self, records: list, batch_id: int) -> None:
        import psycopg

        from flinkpy.connectors.postgres_connection import Statement

        statement = Statement(self.sink.sql, getattr(self.sink, "row_mapper", None), getattr(self.sink, "columns", None))
        with psycopg.connect(self.sink.dsn) as conn:
            with conn.cursor() as cur:
                cur.execute(f"CREATE TABLE IF NOT EXISTS {self.TABLE} (sink_id text, batch_id bigint, PRIMARY KEY (sink_id, batch_id))")
            conn.commit()
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(f"INSERT INTO {self.TABLE} VALUES (%s, %s) ON CONFLICT DO NOTHING", (self.sink_id, batch_id))
                if cur.rowcount == 0:
                    return  # this batch was written before a failure: skip the replay
                if records:
                    rows = statement.params(records)
                    statement.check(rows)
                    statement.write(cur, rows)

    def describe(self) -> str:
        return f"PostgreSQL (rows and batch id in one transaction, table {self.TABLE}: exactly-once)"


def writer_for(sink: Any, sink_id: str, operator: str) -> BatchWriter:
    """The batch writer of a flinkpy Sink, or UntranslatableError."""
    from flinkpy.connectors.collect import CollectSink
    from flinkpy.connectors.file_sink import FileSink
    from flinkpy.connectors.function_sink import FunctionSink
    from flinkpy.connectors.print_sink import DiscardingSink, PrintSink

    if isinstance(sink, PrintSink):
        return PrintWriter(sink)
    if isinstance(sink, CollectSink):
        return CollectWriter(sink)
    if isinstance(sink, FileSink):
        return FileWriter(sink)
    if isinstance(sink, DiscardingSink):
        return DiscardWriter()
    if isinstance(sink, FunctionSink):
        return FunctionWriter(sink)
    from flinkpy.connectors.verification import VerifyingSink

    if isinstance(sink, VerifyingSink):
        from flinkpy.spark.verifying import VerifyingBatchWriter

        return VerifyingBatchWriter(sink)
    from flinkpy.connectors.iceberg import IcebergSink

    if isinstance(sink, IcebergSink):
        from flinkpy.spark.iceberg_writer import IcebergBatchWriter

        return IcebergBatchWriter(sink, sink_id)
    from flinkpy.spark import kafka

    if kafka.is_kafka_sink(sink):
        reason = kafka.check_sink(sink)
        if reason:
            from flinkpy.spark.plan import UntranslatableError

            raise UntranslatableError(operator, reason, remedy="set_topic() a fixed topic, or use AT_LEAST_ONCE")
        return kafka.KafkaBatchWriter(sink, sink_id)
    from flinkpy.connectors.redis_sinks import RedisStreamsSink, RedisUpsertSink

    if isinstance(sink, RedisStreamsSink):
        from flinkpy.spark.redis_writer import RedisBatchWriter

        return RedisBatchWriter(sink, sink_id)
    if isinstance(sink, RedisUpsertSink):
        from flinkpy.spark.redis_writer import RedisUpsertBatchWriter

        return RedisUpsertBatchWriter(sink)
    if type(sink).__name__ in ("PostgresSink", "PostgresUpsertSink", "PostgresBatchSink") and hasattr(sink, "dsn") and hasattr(sink, "sql"):
        return PostgresWriter(sink, sink_id)
    from flinkpy.spark.plan import UntranslatableError

    raise UntranslatableError(operator, f"the sink {type(sink).__name__} has no Spark translation")


class SinkRouter(BatchWriter):
    """Several sinks in one query: a record row's ``src`` is its route (see
    :mod:`flinkpy.spark.plan`), each route ends at one sink, and every sink's writer gets its
    records of every batch (possibly none), each idempotent or transactional per batch id as alone.
    """

    def __init__(self, writers: dict[int, BatchWriter], sink_of_route: dict[int, int]) -> None:
        self.writers = writers
        self.sink_of_route = sink_of_route
        self.guarantee = "exactly-once" if all(w.guarantee == "exactly-once" for w in writers.values()) else "at-least-once"

    def begin(self, batch_id: int) -> None:
        for w in self.writers.values():
            w.begin(batch_id)

    def bind_lineage(self, lineage: str) -> None:
        for w in self.writers.values():
            w.bind_lineage(lineage)

    def write(self, records: list, batch_id: int) -> None:
        raise TypeError("a SinkRouter writes rows with their routes: write_rows()")

    def write_rows(self, raw: list, kinds: list, routes: list, batch_id: int) -> int:
        """Write the batch's rows (in order) to their sinks; the number of records written."""
        loads = pickle.loads
        per_sink: dict[int, list] = {sink: [] for sink in self.writers}
        sink_of = self.sink_of_route
        counted = 0
        for v, k, r in zip(raw, kinds, routes):
            if k == RECORD:
                per_sink[sink_of[r]].append(loads(v))
            elif k == BUNDLE:
                per_sink[sink_of[r]].extend(unbundle(v)[0])
            elif k == COUNTED:  # updates a DiscardingSink receives and drops
                counted += count_of(v)
        for sink, records in per_sink.items():
            self.writers[sink].write(records, batch_id)
        return sum(len(r) for r in per_sink.values()) + counted

    def describe(self) -> str:
        return "; ".join(w.describe() for w in self.writers.values())


class QueryStopped(Exception):
    """A micro-batch cut short because flinkpy stopped the query (a savepoint, a cancel, the
    end of a bounded input). It is raised in place of the error the stop caused. That error's
    message holds Python's traceback around Java's, which is long enough to overflow the stack of
    Spark's stream thread when it matches its message to tell an interruption from a failure. py4j
    would also log it as an error. This one carries the error's chain of causes without their
    stack frames (for an interrupted call, ``py4j.protocol.Py4JJavaError: An error occurred while
    calling ... Caused by: java.lang.InterruptedException``), which Spark takes for a stop.

    >>> print(QueryStopped.of(3, RuntimeError("An error occurred while calling o1.getResult.\\n"
    ...     ": org.apache.spark.SparkException: Exception thrown in awaitResult: \\n\\tat a.B.c(B.java:1)\\n"
    ...     "Caused by: java.lang.InterruptedException\\n\\tat d.E.f(E.java:2)\\n\\t... 9 more")))
    micro-batch 3 cut short by the query's stop: builtins.RuntimeError: An error occurred while calling o1.getResult.
    : org.apache.spark.SparkException: Exception thrown in awaitResult:
    Caused by: java.lang.InterruptedException
    """

    @classmethod
    def of(cls, batch_id: int, cause: BaseException) -> QueryStopped:
        causes = [line.rstrip() for line in str(cause).splitlines() if line.strip() and not line.startswith(("\t", " "))]
        kind = f"{type(cause).__module__}.{type(cause).__qualname__}"
        return cls(f"micro-batch {batch_id} cut short by the query's stop: {kind}: " + "\n".join(causes[:12]))


class QuietStops:
    """A logging filter for py4j's callback server: drops its report of :class:`QueryStopped`,
    an expected end of a micro-batch, not an error."""

    def filter(self, record: Any) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], QueryStopped))


class SinkDriver:
    """The foreachBatch function: orders a batch, writes its records, watches for the end.
    ``stopping`` is set before flinkpy stops the query: what the stop interrupts then ends in
    :class:`QueryStopped`."""

    def __init__(self, writer: BatchWriter, sources: set[int], checkpoint_location: str | None = None) -> None:
        self.writer = writer
        self.sources = set(sources)
        self.finals: set[int] = set()
        self.finished = threading.Event()
        self.final_batch: int | None = None
        #: the final batch was committed by an earlier attempt: nothing is left to run
        self.finished_before = False
        self.records_written = 0
        self.begun = False
        self.checkpoint_location = checkpoint_location
        self.stopping = threading.Event()
        self._ends = _EndLog(checkpoint_location) if checkpoint_location and self.sources else None
        if self._ends is not None:
            self.finals, last = self._ends.recover()
            if self.finals >= self.sources and last is not None:
                self.final_batch, self.finished_before = last, True
                self.finished.set()

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            self._batch(df, batch_id)
        except Exception as e:
            if self.stopping.is_set():
                raise QueryStopped.of(batch_id, e) from None
            raise

    def _batch(self, df: Any, batch_id: int) -> None:
        if not self.begun:
            self.writer.bind_lineage(query_lineage(self.checkpoint_location))
            self.writer.begin(batch_id)
            self.begun = True
        table = df.toArrow()
        if table.num_rows == 0:
            return
        table = table.sort_by([("seq", "ascending")])
        kinds = table.column("kind").to_pylist()
        raw = table.column("value").to_pylist()
        srcs = table.column("src").to_pylist()
        if isinstance(self.writer, SinkRouter):
            self.records_written += self.writer.write_rows(raw, kinds, srcs, batch_id)
        else:
            loads = pickle.loads
            records: list = []
            counted = 0
            for v, k in zip(raw, kinds):
                if k == RECORD:
                    records.append(loads(v))
                elif k == BUNDLE:  # a keyed reduce's updates, in order
                    records.extend(unbundle(v)[0])
                elif k == COUNTED:  # a keyed reduce's updates to a DiscardingSink: received and dropped
                    counted += count_of(v)
            self.writer.write(records, batch_id)
            self.records_written += len(records) + counted
        ended = {s for s, k in zip(srcs, kinds) if k == FINAL}
        if ended and self._ends is not None:
            self._ends.record(batch_id, ended)  # before Spark commits the batch
        self.finals |= ended
        if self.sources and self.finals >= self.sources and not self.finished.is_set():
            self.final_batch = batch_id
            self.finished.set()


class _EndLog:
    """Which sources' final rows the sink has seen, per batch id, kept beside the query's checkpoint.

    The final rows of a bounded input reach the sink once: a query attempt that starts after the
    batch holding them (or one source's of several) was committed would otherwise wait for them
    forever. Each batch that carries final rows writes ``flinkpy-ends/<batch id>`` before it is
    committed; a new attempt counts the files of committed batches (a later one is replayed and
    written again) and knows the input ended when every source's final row was among them.
    """

    def __init__(self, checkpoint_location: str) -> None:
        import fsspec

        self.fs, root = fsspec.core.url_to_fs(checkpoint_location)
        self.root = root.rstrip("/")
        self.dir = f"{self.root}/flinkpy-ends"

    def record(self, batch_id: int, sources: set[int]) -> None:
        self.fs.makedirs(self.dir, exist_ok=True)
        _atomic_write(self.fs, f"{self.dir}/{batch_id}", ",".join(str(s) for s in sorted(sources)).encode())

    def recover(self) -> tuple[set[int], int | None]:
        """(sources whose final rows were committed, the last batch holding one)."""
        committed = self._last_committed()
        finals: set[int] = set()
        last = None
        if committed is None or not self.fs.exists(self.dir):
            return finals, None
        for path in self.fs.ls(self.dir, detail=False):
            name = path.rstrip("/").rsplit("/", 1)[-1]
            if not name.isdigit() or int(name) > committed:
                continue
            finals |= {int(x) for x in self.fs.cat_file(path).decode().split(",") if x}
            last = max(last or 0, int(name))
        return finals, last

    def _last_committed(self) -> int | None:
        try:
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(f"{self.root}/commits", detail=False)]
        except FileNotFoundError:
            return None
        ids = [int(n) for n in names if n.isdigit()]
        return max(ids) if ids else None


def check_sink(sink: Any, operator: str) -> None:
    """Refuse at translation what cannot be written (raises UntranslatableError)."""
    writer_for(sink, "check", operator)


__all__ = ["BatchWriter", "SinkDriver", "SinkRouter", "writer_for", "read_collected", "check_sink", "InvalidProgramError"]
