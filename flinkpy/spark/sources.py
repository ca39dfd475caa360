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

A bounded input ends with two markers in two micro-batches (see :mod:`flinkpy.spark.records`):
the end of event time, then the final row.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any, Iterator

from flinkpy.spark.records import BUNDLE, END, END_W, FINAL, MIN_W, RECORD, child_seq, seq_of, to_batch

FORMAT = "flinkpy"
#: records polled (and sent on, as rows or one bundle) at a time by a reading task
CHUNK = 8192


def encode(obj: Any) -> str:
    import cloudpickle

    return base64.b64encode(cloudpickle.dumps(obj)).decode("ascii")


def decode(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


def _reader(source: Any, subtask: int, parallelism: int, state: str | None) -> Any:
    from flinkpy.connectors.base import ReaderContext

    restored = [decode(state)] if state else []
    return source.create_reader(ReaderContext(subtask_index=subtask, parallelism=parallelism, operator_name="spark", restored_state=restored))


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
                reader = _reader(self.source, i, self.parallelism, part["s"] or None)
                try:
                    records, done = poll_exactly(reader, budget)
                    state = reader.snapshot_state()
                finally:
                    reader.close()
                end[str(i)] = {"s": encode(state), "n": part["n"] + len(records), "d": done}
            if all(end[str(i)]["d"] for i in range(self.parallelism)) and start["m"] < 2:
                # the end of event time in the batch that reads the last records (or the next),
                # the final row one batch later, when Spark's watermark has reached the end
                end["m"] = start["m"] + 1
            return end

        def partitions(self, start: dict, end: dict) -> list:
            parts = []
            for i in range(self.parallelism):
                a, b = start[str(i)], end[str(i)]
                if b["n"] > a["n"]:
                    parts.append(InputPartition(("records", i, a["s"], a["n"], b["n"] - a["n"])))
            for m in range(start["m"] + 1, end["m"] + 1):
                parts.append(InputPartition(("marker", END if m == 1 else FINAL)))
            return parts

        def read(self, partition: Any) -> Iterator[Any]:
            what = partition.value
            if what[0] == "marker":
                kind = what[1]
                yield to_batch([None], [None], [END_W], [b"\xff" * 4], [kind], [self.index])
                return
            _, subtask, state, first, count = what
            reader = _reader(self.source, subtask, self.parallelism, state or None)
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
                    position += n
                    remaining -= n
            finally:
                reader.close()

        def commit(self, end: dict) -> None:
            pass

    class FlinkpySource(DataSource):
        @classmethod
        def name(cls) -> str:
            return FORMAT

        def schema(self) -> str:
            return DDL

        def streamReader(self, schema: Any) -> Any:
            return FlinkpySourceReader(self.options)

    return FlinkpySource


def read_stream(spark: Any, source: Any, *, index: int, parallelism: int, max_records: int, bundled: bool = False) -> Any:
    """A streaming DataFrame of ``source``'s records (register the data source first); ``bundled``:
    in bundle rows, for a chain to open."""
    payload = encode({"source": source, "parallelism": parallelism, "index": index, "bundled": bundled})
    reader = spark.readStream.format(FORMAT).option("payload", payload)
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
