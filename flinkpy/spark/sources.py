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
"""

from __future__ import annotations

import base64
import pickle
from typing import Any, Iterator

from flinkpy.spark.records import BUNDLE, DDL, END, END_W, FINAL, MIN_W, RECORD, child_seq, seq_of, to_batch

FORMAT = "flinkpy"
#: records polled (and sent on, as rows or one bundle) at a time by a reading task
CHUNK = 8192


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


def make_data_source() -> Any:
    """The pyspark DataSource class (defined here so flinkpy imports without pyspark)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from flinkpy.spark.records import DDL

    class FlinkpySourceReader(DataSourceStreamReader):
        def __init__(self, options: dict) -> None:
            spec = decode(options["payload"])
            self.source = spec["source"]
            self.parallelism = int(spec["parallelism"])
            self.index = int(spec["index"])
            self.bundled = bool(spec.get("bundled", False))
            #: OutputTag id -> routes of the readers of the source's side output (see plan.py)
            self.side_routes: dict = spec.get("side_routes") or {}
            #: the chain level after the source, run on the reader's batches in the same Python
            #: worker (see :func:`read_stream`): decoded where a partition is read, because it
            #: may need the job's shipped modules, which the planning process on the driver lacks
            self.transform_payload: str | None = options.get("transform")
            self.max_records = int(options.get("max_records", "0") or 0)

        def initialOffset(self) -> dict:
            offset: dict = {str(i): {"s": "", "n": 0, "d": False} for i in range(self.parallelism)}
            offset["m"] = 0
            return offset

        def getDefaultReadLimit(self) -> Any:
            from pyspark.sql.streaming.datasource import ReadAllAvailable

            return ReadMaxRows(self.max_records) if self.max_records > 0 else ReadAllAvailable()

        def latestOffset(self, start: dict, limit: Any) -> dict:
            budget = int(getattr(limit, "max_rows", 0) or 0) if isinstance(limit, ReadMaxRows) else 1 << 62
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
                    records, done = poll_exactly(reader, budget)
                    state = reader.snapshot_state()
                finally:
                    reader.close()
                end[str(i)] = {"s": encode(state), "n": part["n"] + len(records), "d": done}
                if side[0] or "x" in part:
                    end[str(i)]["x"] = part.get("x", 0) + side[0]
            if all(end[str(i)]["d"] for i in range(self.parallelism)):
                # the end of event time and the final row in the batch that reads the last
                # records (a checkpoint of an older attempt may stop at 1, the end only)
                end["m"] = 2
            return end

        def partitions(self, start: dict, end: dict) -> list:
            parts = []
            for i in range(self.parallelism):
                a, b = start[str(i)], end[str(i)]
                side = b.get("x", 0) - a.get("x", 0)
                if b["n"] > a["n"] or side:
                    parts.append(InputPartition(("records", i, a["s"], a["n"], b["n"] - a["n"], side)))
            for m in range(start["m"] + 1, end["m"] + 1):
                parts.append(InputPartition(("marker", END if m == 1 else FINAL)))
            return parts

        def read(self, partition: Any) -> Iterator[Any]:
            if not self.transform_payload:
                return self._read(partition)
            return decode(self.transform_payload)(self._read(partition))

        def _read(self, partition: Any) -> Iterator[Any]:
            what = partition.value
            if what[0] == "marker":
                kind = what[1]
                yield to_batch([None], [None], [END_W], [b"\xff" * 4], [kind], [self.index])
                return
            _, subtask, state, first, count, *more = what
            side_count = more[0] if more else 0
            side: list = []
            sent = 0
            reader = _reader(self.source, subtask, self.parallelism, state or None,
                             lambda tag_id, records: side.extend((tag_id, r) for r in records))
            try:
                position = first
                remaining = count
                while remaining > 0:
                    records, done = poll_exactly(reader, min(remaining, CHUNK))
                    if not records:
                        raise RuntimeError(
                            f"source {self.source!r} (subtask {subtask}) gave fewer records on replay than when the batch was planned: "
                            "it does not read the same records from the same position"
                        )
                    n = len(records)
                    if self.bundled:
                        yield to_batch([(records, None)], [None], [MIN_W], [seq_of(self.index, subtask, position)], [BUNDLE], [self.index])
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

        def _side_rows(self, side: list, subtask: int, position: int) -> Any:
            """A source's side-output records as rows on the routes that read them, ordered after
            the chunk's first record; ``side`` is emptied."""
            rows = [(r, route) for tag_id, r in side for route in self.side_routes.get(tag_id, ())]
            side.clear()
            m = len(rows)
            seqs = [child_seq(seq_of(self.index, subtask, position), 1 << 31 | j) for j in range(m)]
            return to_batch([r for r, _ in rows], [None] * m, [MIN_W] * m, seqs, [RECORD] * m, [route for _, route in rows])

        def commit(self, end: dict) -> None:
            pass

    class FlinkpySource(DataSource):
        @classmethod
        def name(cls) -> str:
            return FORMAT

        def schema(self) -> str:
            return self.options.get("ddl") or DDL

        def streamReader(self, schema: Any) -> Any:
            return FlinkpySourceReader(self.options)

    return FlinkpySource


def read_stream(spark: Any, source: Any, *, index: int, parallelism: int, max_records: int, bundled: bool = False,
                side_routes: dict | None = None, transform: Any = None, ddl: str | None = None) -> Any:
    """A streaming DataFrame of ``source``'s records (register the data source first); ``bundled``:
    in bundle rows, for a chain to open; ``side_routes``: OutputTag id -> routes that read the
    source's side output (its records leave as rows on those routes).

    ``transform`` (a mapInArrow function, with its output schema ``ddl``) is applied to the
    reader's Arrow batches inside the reading Python worker: the chain after a source then costs
    no second Python worker, Arrow round trip through the JVM or unpickling of the source's rows.
    """
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


def socket_stream(spark: Any, host: str, port: int, index: int) -> Any:
    """Spark's socket source as flinkpy rows: lines as str records, no replay (like Flink's)."""
    from pyspark.sql import functions as F

    from flinkpy.spark.records import DDL

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
