"""flinkpy sources as Spark streaming sources, replayable to the record.

A flinkpy :class:`~flinkpy.connectors.base.Source` hands out one reader per subtask, and a
reader reports its position as state. That is all Spark needs for an exact replay: a Spark offset
here is, per subtask, the reader's position (its pickled ``snapshot_state``), the number of records
read so far and whether the reader ended. Planning a micro-batch (``latestOffset``, on the
driver) restores each reader at the batch's start, polls up to the batch limit and notes where it
stopped; reading the batch (``read``, in a Spark task) restores the reader at the same start and
polls exactly as many records. A restarted query resumes at the offsets of its checkpoint, so no
record is lost or read twice — for sources that read the same records from the same position
(collections, number sequences, files, Redis Streams).

When operators follow the source (a chain, :mod:`flinkpy.spark.chain`), a task's records leave
the reader as bundle rows of up to :data:`CHUNK` records (see :mod:`flinkpy.spark.records`)
rather than a row per record.

A bounded input ends with two markers (see :mod:`flinkpy.spark.records`), both in the micro-batch
that reads its last records (or the next one): the end of event time, then the final row. A keyed
step that has timers holds the final row back until Spark's watermark has reached the end (one
more micro-batch, which Spark runs because its watermark advanced); the other steps pass it on at
once, so that a job without timers ends with the micro-batch that read its last records.

A bounded source with no batch limit is read whole in one micro-batch anyway, so it is planned
on the driver when the query starts (:func:`plan_whole`) and read without a Python data source
(:func:`read_whole`): Spark starts a Python process on the driver for each query that has one
(about a second before the first batch) and another to plan each batch's reads. The planned
partitions travel with the query; Spark's ``rate-micro-batch`` source numbers them. A query
restarted from its checkpoint keeps the road it started on (its source offsets say which).
"""

from __future__ import annotations

import base64
import pickle
from typing import Any, Iterator

from flinkpy.spark.records import BUNDLE, DDL, END, END_W, FINAL, MIN_W, RECORD, child_seq, seq_of, to_batch

FORMAT = "flinkpy"
#: records polled (and sent on, as rows or one bundle) at a time by a reading task
CHUNK = 8192
#: the same for a source whose records travel as columns (:mod:`flinkpy.spark.columns`): each
#: step costs a few numpy calls per bundle, whatever its size, so bundles are larger
COLUMN_CHUNK = 65536


def encode(obj: Any) -> str:
    import cloudpickle

    return base64.b64encode(cloudpickle.dumps(obj)).decode("ascii")


def decode(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


def _drop_side_output(tag_id: str, records: list) -> None:
    """Planning a batch only counts records: a source's side output is read with the batch."""


def _reader(source: Any, subtask: int, parallelism: int, state: str | None, side_output: Any = _drop_side_output) -> Any:
    from flinkpy.connectors.base import ReaderContext

    restored = [decode(state)] if state else []
    return source.create_reader(ReaderContext(subtask_index=subtask, parallelism=parallelism, operator_name="spark", restored_state=restored,
                                              side_output=side_output))


def poll_exactly(reader: Any, count: int, chunk: int = 4096) -> tuple[list, bool]:
    """Up to ``count`` records (fewer when nothing more is available now); True once it ended."""
    out: list = []
    while len(out) < count:
        got = reader.poll(min(chunk, count - len(out)))
        if got is None:
            return out, True
        if not got:
            break
        out.extend(got)
    return out, False


def count_polled(reader: Any, budget: int, chunk: int = 4096) -> tuple[int, bool]:
    """Poll up to ``budget`` records (fewer when nothing more is available now) and count them
    without keeping them: planning a whole bounded input holds one chunk at a time. True once
    the reader ended."""
    count = 0
    while count < budget:
        got = reader.poll(min(chunk, budget - count))
        if got is None:
            return count, True
        if not got:
            break
        count += len(got)
    return count, False


class SourceOffsets:
    """A flinkpy source's micro-batches, without pyspark: the offsets of the next batch planned
    by polling the source's readers (:meth:`plan`), its input partitions (:meth:`partitions`:
    plain tuples) and the rows of one partition read again, to the record (:meth:`read`).

    An offset is ``{"<subtask>": {"s": reader state, "n": records read, "d": ended, "x": side
    output records met}, "m": markers emitted}``: 1 the end of event time, 2 the final row.
    """

    def __init__(self, source: Any, *, index: int, parallelism: int, bundled: bool = False, side_routes: dict | None = None) -> None:
        self.source = source
        self.index = index
        self.parallelism = parallelism
        #: records leave in bundle rows, for a chain to open
        self.bundled = bundled
        #: OutputTag id -> routes of the readers of the source's side output (see plan.py)
        self.side_routes: dict = side_routes or {}

    def initial(self) -> dict:
        offset: dict = {str(i): {"s": "", "n": 0, "d": False} for i in range(self.parallelism)}
        offset["m"] = 0
        return offset

    def plan(self, start: dict, budget: int) -> dict:
        """The end offsets of a batch from ``start`` with up to ``budget`` records per subtask."""
        end: dict = {"m": start["m"]}
        for i in range(self.parallelism):
            part = start[str(i)]
            if part["d"]:
                end[str(i)] = part
                continue
            side = [0]  # side-output records met on the way (read() emits as many)
            reader = _reader(self.source, i, self.parallelism, part["s"] or None,
                             lambda tag_id, recs: side.__setitem__(0, side[0] + len(recs)))
            try:
                count, done = count_polled(reader, budget)
                state = reader.snapshot_state()
            finally:
                reader.close()
            end[str(i)] = {"s": encode(state), "n": part["n"] + count, "d": done}
            if side[0] or "x" in part:
                end[str(i)]["x"] = part.get("x", 0) + side[0]
        if all(end[str(i)]["d"] for i in range(self.parallelism)):
            # the end of event time and the final row in the batch that reads the last
            # records (a checkpoint of an older attempt may stop at 1, the end only)
            end["m"] = 2
        return end

    def partitions(self, start: dict, end: dict) -> list[tuple]:
        """The input partitions of the batch from ``start`` to ``end``: ``("records", subtask,
        reader state, first position, count, side output count)`` or ``("marker", kind)``."""
        parts: list[tuple] = []
        for i in range(self.parallelism):
            a, b = start[str(i)], end[str(i)]
            side = b.get("x", 0) - a.get("x", 0)
            if b["n"] > a["n"] or side:
                parts.append(("records", i, a["s"], a["n"], b["n"] - a["n"], side))
        for m in range(start["m"] + 1, end["m"] + 1):
            parts.append(("marker", END if m == 1 else FINAL))
        return parts

    def read(self, what: tuple) -> Iterator[Any]:
        """The Arrow batches of one input partition (see :meth:`partitions`)."""
        if what[0] == "marker":
            yield to_batch([None], [None], [END_W], [b"\xff" * 4], [what[1]], [self.index])
            return
        _, subtask, state, first, count, *more = what
        side_count = more[0] if more else 0
        side: list = []
        sent = 0
        reader = _reader(self.source, subtask, self.parallelism, state or None,
                         lambda tag_id, records: side.extend((tag_id, r) for r in records))
        columnar = self.bundled and self._columnar()
        chunk = COLUMN_CHUNK if columnar else CHUNK
        try:
            position = first
            remaining = count
            while remaining > 0:
                records, done = poll_exactly(reader, min(remaining, chunk), chunk)
                if not records:
                    raise RuntimeError(
                        f"source {self.source!r} (subtask {subtask}) gave fewer records on replay than when the batch was planned: "
                        "it does not read the same records from the same position"
                    )
                n = len(records)
                if self.bundled:
                    payload = _as_columns(records) if columnar else records
                    yield to_batch([(payload, None)], [None], [MIN_W], [seq_of(self.index, subtask, position)], [BUNDLE], [self.index])
                else:
                    seqs = [seq_of(self.index, subtask, p) for p in range(position, position + n)]
                    yield to_batch(records, [None] * n, [MIN_W] * n, seqs, [RECORD] * n, [self.index] * n)
                if side:
                    sent += len(side)
                    yield self._side_rows(side, subtask, position)
                position += n
                remaining -= n
            while sent + len(side) < side_count:  # met after the last record, as planning met them
                if not reader.poll(1):  # a record past the batch is not emitted: it is the next one's
                    break
            if side:
                yield self._side_rows(side[: side_count - sent], subtask, position)
        finally:
            reader.close()

    def _columnar(self) -> bool:
        """Whether the source's records are numbers that travel as columns: a number sequence's."""
        from flinkpy.connectors.number_sequence import NumberSequenceSource

        return type(self.source) is NumberSequenceSource

    def _side_rows(self, side: list, subtask: int, position: int) -> Any:
        """A source's side-output records as rows on the routes that read them, ordered after
        the chunk's first record; ``side`` is emptied."""
        rows = [(r, route) for tag_id, r in side for route in self.side_routes.get(tag_id, ())]
        side.clear()
        m = len(rows)
        seqs = [child_seq(seq_of(self.index, subtask, position), 1 << 31 | j) for j in range(m)]
        return to_batch([r for r, _ in rows], [None] * m, [MIN_W] * m, seqs, [RECORD] * m, [route for _, route in rows])


def _as_columns(numbers: list) -> Any:
    """A number sequence's records as a column (:mod:`flinkpy.spark.columns`), or as they are
    when they cannot be one."""
    from flinkpy.spark.columns import Columns, holdable

    try:
        cols = Columns.of_ints(numbers)
    except (OverflowError, TypeError, ValueError):
        return numbers
    return cols if holdable(cols.fields[0]) else numbers


def make_data_source() -> Any:
    """The pyspark DataSource class (in its own module, so flinkpy imports without pyspark)."""
    from flinkpy.spark.source_reader import FlinkpySource

    return FlinkpySource


def read_stream(spark: Any, source: Any, *, index: int, parallelism: int, max_records: int, bundled: bool = False,
                side_routes: dict | None = None, transform: Any = None, ddl: str | None = None) -> Any:
    """A streaming DataFrame of ``source``'s records through the ``flinkpy`` data source; ``bundled``:
    in bundle rows, for a chain to open; ``side_routes``: OutputTag id -> routes that read the
    source's side output (its records leave as rows on those routes).

    ``transform`` (a mapInArrow function, with its output schema ``ddl``) is applied to the
    reader's Arrow batches inside the reading Python worker: the chain after a source then costs
    no second Python worker, Arrow round trip through the JVM or unpickling of the source's rows.

    The data source is registered here, by the first source that reads through it: registering
    one makes Spark start a Python process on the driver to look for installed data sources
    (seconds of start-up on a loaded machine), which a query whose sources are all read whole
    (:func:`read_whole`) never needs.
    """
    if not getattr(spark, "_flinkpy_data_source", False):
        spark.dataSource.register(make_data_source())
        spark._flinkpy_data_source = True
    payload = encode({"source": source, "parallelism": parallelism, "index": index, "bundled": bundled, "side_routes": side_routes or {}})
    # the schema given here spares Spark a Python worker on the driver to ask the data source for it
    reader = spark.readStream.format(FORMAT).schema(ddl or DDL).option("payload", payload)
    if transform is not None:
        reader = reader.option("transform", encode(transform))
    if ddl:
        reader = reader.option("ddl", ddl)
    if max_records > 0:
        reader = reader.option("max_records", str(max_records))
    return reader.load()


def is_data_source_offset(offset: Any) -> bool:
    """Whether ``offset`` (as Spark logged it) is the ``flinkpy`` data source's."""
    return isinstance(offset, dict) and "m" in offset


def plan_whole(source: Any, *, index: int, parallelism: int, bundled: bool = False, side_routes: dict | None = None) -> tuple[SourceOffsets, list[tuple]] | None:
    """A bounded source planned on the driver as one micro-batch: its offsets and the batch's
    input partitions (every record and both markers); None when a reader has not ended after
    everything it had at once (a rate-limited or slow source: it keeps the data source road)."""
    offsets = SourceOffsets(source, index=index, parallelism=parallelism, bundled=bundled, side_routes=side_routes)
    start = offsets.initial()
    end = offsets.plan(start, 1 << 62)
    if end["m"] != 2:
        return None
    return offsets, offsets.partitions(start, end)


def read_whole(spark: Any, offsets: SourceOffsets, parts: list[tuple], *, transform: Any = None, ddl: str | None = None) -> Any:
    """A streaming DataFrame of a source planned by :func:`plan_whole`, without a Python data
    source: Spark's ``rate-micro-batch`` source ticks ``len(parts)`` numbered rows per
    micro-batch, and a ``mapInArrow`` reads input partition ``n`` for row ``n`` (rows of later
    batches, numbered past the parts, read nothing). The ticks are Spark's own offsets, so a
    restarted query replays the batch it had not committed, and a query restarted after it reads
    nothing again. What this spares: the Python process Spark starts on the driver for every
    query with a Python data source (and the one that plans each batch's reads): about a second
    before the first batch, on a query whose whole input is one batch."""
    n = len(parts)
    ticks = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", n)
             .option("numPartitions", max(1, min(n, offsets.parallelism))).load().select("value"))

    def read(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for tick in batch.column(0).to_pylist():
                if tick < n:
                    yield from offsets.read(parts[tick])

    if transform is None:
        return ticks.mapInArrow(read, DDL)
    return ticks.mapInArrow(lambda batches: transform(read(batches)), ddl or DDL)


def socket_stream(spark: Any, host: str, port: int, index: int) -> Any:
    """Spark's socket source as flinkpy rows: lines as str records, no replay (like Flink's)."""
    from pyspark.sql import functions as F

    lines = spark.readStream.format("socket").option("host", host).option("port", int(port)).load()

    def to_rows(batches: Iterator[Any]) -> Iterator[Any]:
        import os

        salt = os.getpid() & 0xFFFF
        counter = 0
        for b in batches:
            texts = b.column("value").to_pylist()
            n = len(texts)
            seqs = [child_seq(seq_of(index, salt, counter + i), 0) for i in range(n)]
            counter += n
            yield to_batch(texts, [None] * n, [MIN_W] * n, seqs, [RECORD] * n, [index] * n)

    return lines.select(F.col("value")).mapInArrow(to_rows, DDL)
