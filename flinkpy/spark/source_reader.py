"""The pyspark DataSource that reads flinkpy sources (see :mod:`flinkpy.spark.sources`).

This module imports pyspark at its top, so it is imported only where a Spark query is built or
planned (Spark's planning processes unpickle its classes by reference): the rest of flinkpy
imports without pyspark.
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from flinkpy.spark.records import DDL
from flinkpy.spark.sources import FORMAT, SourceOffsets, decode


class FlinkpySourceReader(DataSourceStreamReader):
    """Plans micro-batches by polling the source's readers on the driver, and reads them again,
    to the record, in Spark's tasks (offsets: see :mod:`flinkpy.spark.sources`)."""

    def __init__(self, options: dict) -> None:
        spec = decode(options["payload"])
        # a source with offsets of its own (an unbounded KafkaSource: Kafka offsets) plans them itself
        own = getattr(spec["source"], "micro_batches", lambda **kw: None)(index=int(spec["index"]), bundled=bool(spec.get("bundled", False)))
        self.offsets = own or SourceOffsets(spec["source"], index=int(spec["index"]), parallelism=int(spec["parallelism"]),
                                            bundled=bool(spec.get("bundled", False)), side_routes=spec.get("side_routes") or {})
        #: the chain level after the source, run on the reader's batches in the same Python
        #: worker (see :func:`flinkpy.spark.sources.read_stream`): decoded where a partition is read, because it
        #: may need the job's shipped modules, which the planning process on the driver lacks
        self.transform_payload: str | None = options.get("transform")
        self.max_records = int(options.get("max_records", "0") or 0)

    def initialOffset(self) -> dict:
        return self.offsets.initial()

    def getDefaultReadLimit(self) -> Any:
        return ReadMaxRows(self.max_records) if self.max_records > 0 else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: Any) -> dict:
        budget = int(getattr(limit, "max_rows", 0) or 0) if isinstance(limit, ReadMaxRows) else 1 << 62
        return self.offsets.plan(start, budget)

    def partitions(self, start: dict, end: dict) -> list:
        return [InputPartition(what) for what in self.offsets.partitions(start, end)]

    def read(self, partition: Any) -> Iterator[Any]:
        if not self.transform_payload:
            return self.offsets.read(partition.value)
        return decode(self.transform_payload)(self.offsets.read(partition.value))

    def commit(self, end: dict) -> None:
        done = getattr(self.offsets, "commit", None)
        if done is not None:
            done(end)


class FlinkpySource(DataSource):
    """The ``flinkpy`` format: its options carry the pickled source (see :func:`flinkpy.spark.sources.read_stream`)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return self.options.get("ddl") or DDL

    def streamReader(self, schema: Any) -> Any:
        return FlinkpySourceReader(self.options)
