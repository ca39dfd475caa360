"""IcebergSink: a stream appended to an Apache Iceberg table exactly once, through pyiceberg.

A two-phase commit bound to checkpoints, shaped as Flink's Iceberg sink: writers at the sink's
parallelism and one committer after them (:mod:`flinkpy.graph.committers` puts both in the job).

- **write** (each writer subtask): records are buffered and written as Parquet data files into
  the table's ``data/`` directory — a file whenever ``target_file_rows`` records wait, the rest
  at the checkpoint's barrier. The files are in the table's location but in no snapshot: no
  reader sees them. A partitioned table gets one file per partition value.
- **pre-commit** (before barrier *n* leaves a writer): the writer's files since barrier *n-1*
  become one committable (:class:`IcebergCommittable`), sent to the committer ahead of the
  barrier; the committer's snapshot of checkpoint *n* keeps every committable not yet committed.
- **commit** (checkpoint *n* completed; :mod:`flinkpy.connectors.iceberg_committer`): the
  committer adds the files of all writers up to checkpoint *n* as **one** Iceberg snapshot
  (``add_files``) whose summary carries ``flink.job-id``, ``flink.max-committed-checkpoint-id``
  (Flink's keys) and the writers' transaction ids, ``flinkpy.transaction-ids``. Readers see the
  rows from this snapshot on.
- **replay**: a restored committer commits the committables of the restored checkpoint; one
  whose transaction id a snapshot of the table already carries was committed before the crash
  and is skipped, so a crash after the checkpoint completed — before or during the commit —
  commits its files once. Writers keep no state: a rescale changes nothing to commit.
- **clean-up**: data files of this sink that no snapshot holds and no committable still waits
  for, written by an earlier attempt (after the restored checkpoint, by an attempt that died),
  are deleted once this attempt's first checkpoint completed.

Upserts by key are refused: they need equality-delete files, which pyiceberg (0.12) can neither
write nor read.

>>> from flinkpy.connectors.iceberg import IcebergSink
>>> IcebergSink.guarantee
'exactly-once'
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from flinkpy.connectors.base import ReaderContext, Sink, SinkWriter
from flinkpy.connectors.drivers import ICEBERG, require
from flinkpy.connectors.iceberg_table import (
    IcebergSchemaError,
    arrow_schema,
    create_table,
    load_table,
    open_catalog,
    table_columns,
    to_arrow,
    type_mismatches,
)
from flinkpy.connectors.two_phase_commit import default_transaction_prefix
from flinkpy.errors import ConfigurationError, ExitCode, FlinkpyError, NotFoundError

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: the snapshot summary's keys: Flink's for job and checkpoint, ours for the rest
SUMMARY_JOB_ID = "flink.job-id"
SUMMARY_CHECKPOINT_ID = "flink.max-committed-checkpoint-id"
#: the writers' transactions a snapshot commits, comma-separated (a replayed commit skips them)
SUMMARY_TRANSACTION_IDS = "flinkpy.transaction-ids"

#: the refusal of upserts, said once for the builder, the docs and the tests
UPSERT_REFUSAL = (
    "IcebergSink cannot upsert by key: an upsert writes equality-delete files, which pyiceberg "
    "(0.12) can neither write nor read"
)


class IcebergUpsertUnsupportedError(FlinkpyError):
    """Upserts need what pyiceberg lacks (exit 14, like any feature flinkpy does not have)."""

    exit_code = ExitCode.UNSUPPORTED


@dataclass(frozen=True)
class IcebergCommittable:
    """What checkpoint *n*'s state keeps of one subtask's transaction: its data files."""

    transaction_id: str
    job_id: str
    checkpoint_id: int
    subtask: int
    files: tuple[str, ...]
    records: int

    def describe(self) -> dict[str, Any]:
        """What ``checkpoint inspect`` shows of it (the file names are in the state file)."""
        return {"transaction_id": self.transaction_id, "checkpoint_id": self.checkpoint_id,
                "files": len(self.files), "records": self.records}


@dataclass
class _Transaction:
    transaction_id: str
    buffer: list
    files: list[str]
    records: int = 0


def write_data_files(table: Table, schema: Any, records: list, identifier: str, stem: str, first: int = 0) -> list[str]:
    """``records`` as Parquet files ``<stem>-<nnnnn>.parquet`` (numbered from ``first``), one per
    partition value of a partitioned table; the paths. The files are in no snapshot."""
    pq = require(ICEBERG, "pyarrow.parquet")
    data = to_arrow(records, schema, identifier)
    if table.spec().is_unpartitioned():
        parts = [data]
    else:
        partitions = require(ICEBERG, "pyiceberg.io.pyarrow")._determine_partitions
        parts = [p.arrow_table_partition for p in partitions(table.spec(), table.schema(), data)]
    paths = []
    for part in parts:
        path = f"{stem}-{first + len(paths):05d}.parquet"
        with table.io.new_output(path).create(overwrite=True) as out:
            pq.write_table(part, out)
        paths.append(path)
    return paths


def committed_transactions(table: Table) -> set[str]:
    """The transaction ids the table's snapshots carry (committed, whoever committed them)."""
    out: set[str] = set()
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        props = summary.additional_properties if summary is not None else {}
        out.update(t for t in props.get(SUMMARY_TRANSACTION_IDS, "").split(",") if t)
    return out


def iceberg_prefix(sink: IcebergSink, ctx: ReaderContext) -> str:
    """The sink's transaction prefix (names its data files): the one set, or the job's and the
    table's (the same for its writers and its committer, whatever their operators' names)."""
    return sink.transaction_prefix or default_transaction_prefix(replace(ctx, operator_name=""), salt=sink.table_identifier)


def attempt_of(prefix: str, transaction_id: str) -> int | None:
    """The writer's attempt in a transaction id of ``prefix`` (``<prefix>-<subtask>-a<attempt>x<hex>``),
    or None when the id is not one of ``prefix``'s.

    >>> attempt_of("fp-1", "fp-1-0-a3x9f"), attempt_of("fp-1", "fp-12-0-a3x9f")
    (3, None)
    """
    if not transaction_id.startswith(prefix + "-"):
        return None
    parts = transaction_id[len(prefix) + 1 :].split("-")
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].startswith("a") or "x" not in parts[1]:
        return None
    attempt = parts[1][1:].split("x", 1)[0]
    return int(attempt) if attempt.isdigit() else None


class IcebergSinkWriter(SinkWriter):
    """One writing subtask: data files, and at each barrier their committable for the committer
    (see the module docstring). It commits nothing and keeps no state."""

    def __init__(self, sink: IcebergSink, ctx: ReaderContext) -> None:
        self._sink = sink
        self.ctx = ctx
        self.prefix = iceberg_prefix(sink, ctx)
        self._schema: Any = None
        self._data_dir = ""
        #: the table as the writer opened it: its partition spec and file IO for data files
        self._opened: Any = None
        self._txn: _Transaction | None = None
        self._last_checkpoint = 0
        #: pending commits of a savepoint taken when each writer committed its own files: the
        #: committer commits them (a snapshot already holding one is skipped)
        self._handed_over = [c for s in ctx.restored_state or [] if isinstance(s, dict) for c in s.get("pending", [])]

    def open(self, runtime_context: Any = None) -> None:
        table = self._opened = load_table(open_catalog(self._sink.catalog_name, self._sink.catalog_properties),
                                          self._sink.catalog_name, self._sink.table_identifier)
        self._schema = arrow_schema(table)
        self._data_dir = f"{table.location().rstrip('/')}/data"

    def write(self, records: list) -> None:
        if not records:
            return
        if self._txn is None:
            unique = f"a{self.ctx.attempt}x{uuid.uuid4().hex[:16]}"
            self._txn = _Transaction(f"{self.prefix}-{self.ctx.subtask_index}-{unique}", [], [])
        self._txn.buffer.extend(records)
        if len(self._txn.buffer) >= self._sink.target_file_rows:
            self._write_files(self._txn)

    def _write_files(self, txn: _Transaction) -> None:
        """The buffered records as Parquet files, in no snapshot yet."""
        if not txn.buffer:
            return
        records, txn.buffer = txn.buffer, []
        txn.files += write_data_files(self._opened, self._schema, records, self._sink.table_identifier,
                                      f"{self._data_dir}/{txn.transaction_id}", first=len(txn.files))
        txn.records += len(records)

    def prepare_commit(self, checkpoint_id: int | None) -> list[IcebergCommittable]:
        """Close the open transaction's files; its committable (none when nothing was written)."""
        checkpoint_id = checkpoint_id if checkpoint_id is not None else self._last_checkpoint + 1
        self._last_checkpoint = checkpoint_id
        earlier, self._handed_over = self._handed_over, []
        txn, self._txn = self._txn, None
        if txn is None:
            return earlier
        self._write_files(txn)
        return earlier + [IcebergCommittable(
            transaction_id=txn.transaction_id,
            job_id=self.ctx.job_id,
            checkpoint_id=checkpoint_id,
            subtask=self.ctx.subtask_index,
            files=tuple(txn.files),
            records=txn.records,
        )]

    def close(self) -> None:
        # files of a transaction never handed to the committer: no checkpoint will list them
        txn, self._txn = self._txn, None
        if txn is not None and txn.files and self._opened is not None:
            for path in txn.files:
                try:
                    self._opened.io.delete(path)
                except Exception:  # noqa: BLE001 - the committer's clean-up deletes them later
                    pass


def refuse_unordered_partitions(table: Table, identifier: str) -> None:
    """A ConfigurationError (exit 8) for a table partitioned by a transform that does not
    preserve order (``bucket[N]``): ``add_files`` reads a file's partition back from its column
    statistics, so such a table would fail at the first commit, after the job started."""
    unordered = [f"{f.name} ({f.transform})" for f in table.spec().fields if not f.transform.preserves_order]
    if unordered:
        raise ConfigurationError(
            f"IcebergSink cannot commit to Iceberg table {identifier!r}: it is partitioned by {', '.join(unordered)}, and"
            " pyiceberg's add_files, which the sink commits through, cannot take a transform that does not preserve order",
            remedy="write to a table partitioned by identity, truncate or time transforms (year, month, day, hour)",
        )


class IcebergSink(Sink):
    """Exactly-once appends to an Iceberg table; see the module docstring.

    ``catalog_properties`` are pyiceberg's (``load_catalog(catalog_name, **properties)``): any
    catalog pyiceberg opens — REST, Glue, Hive, SQL, ... — e.g. ``{"type": "sql", "uri":
    "sqlite:////data/catalog.db", "warehouse": "file:///data/warehouse"}``. ``table`` is
    ``namespace.name``; the table must exist, unless ``create_if_missing`` (then ``sink_to``
    creates it for the stream's type, partitioned by ``partition_by``). Records are dicts or named Rows (by column name),
    tuples, lists or Rows (by position), or single values for a one-column table.

    Building the sink opens the catalog and the table, so that a wrong name fails the job
    program before it is submitted; ``sink_to`` checks the stream's type against the table's
    schema. Build one with :meth:`builder`.
    """

    guarantee = "exactly-once"
    needs = "checkpointing, a replayable source; rows show at checkpoints, one table snapshot per checkpoint"

    def __init__(
        self,
        catalog_properties: dict[str, str],
        table: str,
        *,
        catalog_name: str = "default",
        transaction_prefix: str | None = None,
        target_file_rows: int = 250_000,
        max_commit_attempts: int = 10,
        create_if_missing: bool = False,
        partition_by: list[tuple[str, str]] | None = None,
    ) -> None:
        require(ICEBERG)  # in the job program, before the job is submitted
        self.catalog_properties = {str(k): str(v) for k, v in catalog_properties.items()}
        self.catalog_name = catalog_name
        self.table_identifier = table
        self.transaction_prefix = transaction_prefix
        self.target_file_rows = max(1, target_file_rows)
        self.max_commit_attempts = max_commit_attempts
        self.create_if_missing = create_if_missing
        self.partition_by = [(str(c), str(t)) for c, t in partition_by or []]
        if self.partition_by and not create_if_missing:
            raise ConfigurationError(
                f"IcebergSink partitions only a table it creates, and table {table!r} is not to be created",
                remedy="call set_create_table_if_missing(True) too, or partition the existing table with Iceberg's own tools",
            )
        catalog = open_catalog(catalog_name, self.catalog_properties)
        #: ``(name, Iceberg type, required)`` of the table's columns when the sink was built
        #: (None: the table does not exist yet and is created for the stream's type by ``sink_to``)
        self.columns: list[tuple[str, str, bool]] | None = None
        try:
            loaded = load_table(catalog, catalog_name, table)
        except NotFoundError:
            if not create_if_missing:
                raise
        else:
            self.columns = table_columns(loaded)
            refuse_unordered_partitions(loaded, table)

    @staticmethod
    def builder() -> IcebergSinkBuilder:
        return IcebergSinkBuilder()

    def for_record_type(self, type_info: Any) -> IcebergSink:
        if self.columns is None:  # create_if_missing, and the table was missing: create it now
            catalog = open_catalog(self.catalog_name, self.catalog_properties)
            created = create_table(catalog, self.catalog_name, self.table_identifier, type_info, self.partition_by)
            self.columns = table_columns(created)
        problems = type_mismatches(type_info, self.columns)
        if problems:
            raise IcebergSchemaError(
                f"the stream's records do not fit Iceberg table {self.table_identifier!r}: {'; '.join(problems)}",
                remedy="change the stream's output_type (Types.ROW_NAMED of the table's columns) or the table's schema",
            )
        return self

    def create_writer(self, ctx: ReaderContext) -> IcebergSinkWriter:
        return IcebergSinkWriter(self, ctx)

    def committer(self) -> Sink:
        """The one task that commits every writer's files, a snapshot per checkpoint."""
        from flinkpy.connectors.iceberg_committer import IcebergCommitterSink

        return IcebergCommitterSink(self)

    def __repr__(self) -> str:
        return f"IcebergSink({self.catalog_name!r}, {self.table_identifier!r})"


class IcebergSinkBuilder:
    """``IcebergSink.builder().set_catalog_properties({...}).set_table("db.events").build()``.

    >>> IcebergSink.builder().set_table("db.t").set_upsert(["id"])
    Traceback (most recent call last):
    ...
    flinkpy.connectors.iceberg.IcebergUpsertUnsupportedError: IcebergSink cannot upsert by key: an upsert writes equality-delete files, which pyiceberg (0.12) can neither write nor read (append instead, and keep the latest row per key when reading; or write to PostgreSQL or Redis with their upsert sinks)
    """

    def __init__(self) -> None:
        self._properties: dict[str, str] = {}
        self._catalog_name = "default"
        self._table: str | None = None
        self._options: dict[str, Any] = {}

    def set_catalog_name(self, name: str) -> IcebergSinkBuilder:
        self._catalog_name = name
        return self

    def set_catalog_properties(self, properties: dict[str, str]) -> IcebergSinkBuilder:
        """pyiceberg's catalog properties (``type``, ``uri``, ``warehouse``, credentials, ...)."""
        self._properties = dict(properties)
        return self

    def set_table(self, identifier: str) -> IcebergSinkBuilder:
        """``namespace.table``."""
        self._table = identifier
        return self

    def set_transaction_prefix(self, prefix: str) -> IcebergSinkBuilder:
        """Names this sink's data files (default: the job id and the operator's name)."""
        self._options["transaction_prefix"] = prefix
        return self

    def set_target_file_rows(self, rows: int) -> IcebergSinkBuilder:
        """Records per data file before the checkpoint closes it (default 250 000)."""
        self._options["target_file_rows"] = rows
        return self

    def set_max_commit_attempts(self, attempts: int) -> IcebergSinkBuilder:
        """Tries of a commit that meets concurrent commits (default 10)."""
        self._options["max_commit_attempts"] = attempts
        return self

    def set_create_table_if_missing(self, create: bool = True) -> IcebergSinkBuilder:
        """Create the table when it does not exist, with a column per field of the stream's type
        (``sink_to`` creates it, in the job program, before the job is submitted). Without this a
        missing table is refused."""
        self._options["create_if_missing"] = create
        return self

    def set_partition_by(self, *fields: str | tuple[str, str]) -> IcebergSinkBuilder:
        """The partition spec of a table the sink creates: columns (identity) or ``(column,
        transform)`` pairs in Iceberg's transform names, e.g. ``("ts", "day"), ("id",
        "truncate[1000]")`` (identity, truncate[W], year, month, day, hour; not bucket[N]: the
        sink commits through pyiceberg's ``add_files``, which cannot take it). An existing table
        keeps its own spec."""
        self._options["partition_by"] = [(f, "identity") if isinstance(f, str) else tuple(f) for f in fields]
        return self

    def set_upsert(self, key_columns: list[str]) -> IcebergSinkBuilder:
        """Refused: see :data:`UPSERT_REFUSAL`."""
        raise IcebergUpsertUnsupportedError(
            UPSERT_REFUSAL,
            remedy="append instead, and keep the latest row per key when reading; or write to PostgreSQL or Redis with their upsert sinks",
        )

    def build(self) -> IcebergSink:
        if not self._table:
            raise ConfigurationError("IcebergSink.builder() needs a table", remedy='call set_table("namespace.table")')
        return IcebergSink(self._properties, self._table, catalog_name=self._catalog_name, **self._options)
