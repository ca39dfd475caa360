"""How a flinkpy stream travels through a Spark DataFrame: one row per record or marker.

A record row's ``src`` is its *route*, the edge of the job graph it travels on (a source's rows:
the source's number; see :mod:`flinkpy.spark.plan`); a marker's ``src`` is the source it ends.
Records are arbitrary Python objects, so a row carries the record pickled (``value``) next to
what the engine keeps beside it: the event timestamp (``ts``, null without one), the watermark in
effect when the record was emitted (``w``) and an ordering key (``seq``, bytes: source, subtask,
position, then one index per fan-out) that restores each key's order after Spark's shuffle.

Besides records, sources emit *markers* (``kind``): a watermark row (a generator's periodic
watermark, so that Spark's watermark follows it), the end of a bounded input (watermark
:data:`END_W`, like Flink's final watermark) and a final row, which a keyed step with timers holds
back until Spark's watermark has reached the end and every event-time timer has fired: a sink that
has seen the final row of every source knows the query's work is done.

A keyed reduce whose every update goes straight to a DiscardingSink sends a *counted* row (kind
:data:`COUNTED`) instead of its updates: its ``value`` is the number of updates as eight bytes
(:func:`counted_row`, :func:`count_of`). The sink receives that many records and drops them, as
on the engine, without the updates being pickled, sent through the JVM and unpickled on the
driver first.

Where many records travel together, one *bundle* row (kind :data:`BUNDLE`) carries them: its
``value`` is the pickled pair ``(records, timestamps or None)``, in order, all under the row's
``w``; its ``seq`` orders it among rows as its first record would be ordered. Sources send bundles
to the chain after them, the chain sends one per key group to a keyed reduce, and that reduce
sends its updates on as bundles (see :func:`unbundle`). A bundle of numbers may hold them as numpy
columns instead of a list (:mod:`flinkpy.spark.columns`): a number sequence source sends them so,
and the steps after it keep them so while their functions run over whole columns.

>>> b = to_batch([("a", 1)], [None], [MIN_W], [seq_of(0, 0, 7)], [RECORD], [0])
>>> [pickle.loads(v) for v in b.column("value").to_pylist()]
[('a', 1)]
>>> b = to_batch([(["x", "y"], None)], [None], [MIN_W], [seq_of(0, 0, 7)], [BUNDLE], [0])
>>> unbundle(b.column("value")[0].as_py())
(['x', 'y'], [None, None])
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

RECORD, WATERMARK, END, FINAL, BUNDLE, COUNTED = 0, 1, 2, 3, 4, 5
MIN_W = -(2**63)
#: the end of event time on Spark: far beyond any real timestamp, within Spark's timestamp range
END_W = 2 * 10**15
#: added to the watermark column so that no record falls behind Spark's watermark (see keyed.py)
SHIFT_MS = 2 * 10**15

COLUMNS = ("value", "ts", "w", "seq", "kind", "src")
DDL = "value binary, ts long, w long, seq binary, kind int, src int"
KEYED_DDL = DDL + ", key binary"
#: the grouping key of markers: never the pickle of a real key (a pickle is never empty)
MARKER_KEY = b""


def arrow_schema(keyed: bool = False) -> Any:
    import pyarrow as pa

    fields = [("value", pa.binary()), ("ts", pa.int64()), ("w", pa.int64()), ("seq", pa.binary()), ("kind", pa.int32()), ("src", pa.int32())]
    if keyed:
        fields.append(("key", pa.binary()))
    return pa.schema(fields)


def spark_schema(keyed: bool = False) -> Any:
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

    types = {"value": BinaryType(), "ts": LongType(), "w": LongType(), "seq": BinaryType(), "kind": IntegerType(), "src": IntegerType(), "key": BinaryType()}
    names = list(COLUMNS) + (["key"] if keyed else [])
    return StructType([StructField(n, types[n], True) for n in names])


def seq_of(source: int, subtask: int, position: int) -> bytes:
    return struct.pack(">HHQ", source, subtask, position)


def child_seq(seq: bytes, index: int) -> bytes:
    """The ordering key of the ``index``-th output of the record at ``seq``."""
    return seq + struct.pack(">I", index)


def to_batch(values: list, ts: list, w: list, seq: list, kind: list, src: list, keys: list | None = None, *, pickled: bool = False) -> Any:
    import pyarrow as pa

    dumps = pickle.dumps
    data = {
        "value": values if pickled else [dumps(v, protocol=5) if k == RECORD or k == BUNDLE else b"" for v, k in zip(values, kind)],
        "ts": ts,
        "w": w,
        "seq": seq,
        "kind": kind,
        "src": src,
    }
    if keys is not None:
        data["key"] = keys
    return pa.RecordBatch.from_pydict(data, schema=arrow_schema(keys is not None))


def unbundle(blob: bytes) -> tuple[list, list]:
    """The records of a bundle row and their timestamps (None where a record has none), as
    Python objects also where they travelled as columns (:mod:`flinkpy.spark.columns`)."""
    from flinkpy.spark.columns import records_of

    payload, ts = pickle.loads(blob)
    records = records_of(payload)
    return records, ts if ts is not None else [None] * len(records)


def counted_row(count: int) -> bytes:
    """The ``value`` of a :data:`COUNTED` row of ``count`` updates.

    >>> count_of(counted_row(2_000_000))
    2000000
    """
    return count.to_bytes(8, "big")


def count_of(value: bytes) -> int:
    """The number of updates a :data:`COUNTED` row stands for."""
    return int.from_bytes(value, "big")


def marker_row(kind: int, w: int, src: int, seq: bytes = b"\xff") -> tuple:
    return (b"", None, w, seq, kind, src)
