"""IcebergSink on Spark: one Iceberg snapshot per micro-batch, committed once per batch id.

Spark replays a micro-batch after a failure with the same batch id and the same records, so the
batch's transaction is named after it: ``spark-<sink>-<batch id>``. The snapshot's summary
carries that name (``flinkpy.transaction-ids``, as the engine's committer writes them) and the batch id (``flinkpy.spark-batch-id``);
a batch whose name a snapshot already carries was committed before the failure and is skipped.
Its data files are named after it too, so a replay that died before its commit overwrites them
instead of leaving orphans.
"""

from __future__ import annotations

import hashlib
from typing import Any

from flinkpy.spark.sinks import BatchWriter

SUMMARY_BATCH_ID = "flinkpy.spark-batch-id"


class IcebergBatchWriter(BatchWriter):
    guarantee = "exactly-once"

    def __init__(self, sink: Any, sink_id: str) -> None:
        self.sink = sink
        # the sink's id (query name and operator uid) may hold any character: a digest names it
        self.name = "spark-" + hashlib.sha1(sink_id.encode()).hexdigest()[:12]

    def write(self, records: list, batch_id: int) -> None:
        from flinkpy.connectors.iceberg import SUMMARY_TRANSACTION_IDS, committed_transactions, write_data_files
        from flinkpy.connectors.iceberg_table import arrow_schema, load_table, open_catalog

        if not records:
            return
        sink = self.sink
        table = load_table(open_catalog(sink.catalog_name, sink.catalog_properties), sink.catalog_name, sink.table_identifier)
        transaction = f"{self.name}-{batch_id:012d}"
        if transaction in committed_transactions(table):
            return  # written before a failure: skip the replay
        stem = f"{table.location().rstrip('/')}/data/{transaction}"
        files = write_data_files(table, arrow_schema(table), records, sink.table_identifier, stem)
        properties = {SUMMARY_TRANSACTION_IDS: transaction, SUMMARY_BATCH_ID: str(batch_id)}
        table.add_files(files, snapshot_properties=properties, check_duplicate_files=False)

    def describe(self) -> str:
        return f"Iceberg table {self.sink.table_identifier} (a snapshot per batch id: exactly-once)"
