"""IcebergSink: a stream appended to an Apache Iceberg table exactly once, through pyiceberg.

The two-phase commit of :mod:`flinkpy.connectors.two_phase_commit`, in Iceberg's terms (as
Flink's Iceberg sink does it):

- **write**: each subtask buffers its records and writes them as Parquet data files into the
  table's ``data/`` directory — a file whenever ``target_file_rows`` records wait, the rest at
  the checkpoint's barrier. The files are in the table's location but in no snapshot: no reader
  sees them. A partitioned table gets one file per partition value.
- **pre-commit** (the barrier reached the sink): the list of the transaction's files is the
  committable, kept in checkpoint *n*'s state.
- **commit** (checkpoint *n* completed): the files are added to the table as one Iceberg
  snapshot (``add_files``) whose summary carries ``flink.job-id``,
  ``flink.max-committed-checkpoint-id`` (Flink's keys), ``flinkpy.subtask`` and the
  transaction's id, ``flinkpy.transaction-id``. Readers see the rows from this snapshot on.
- **replay**: a restarted or rescaled subtask commits the committables of the restored
  checkpoint again; one whose transaction id a snapshot of the table already carries was
  committed before the crash and is skipped, so a crash after the checkpoint completed — before
  or during the commit — commits its files once.
- **clean-up**: data files of this sink's transactions that no completed checkpoint lists and
  no snapshot holds (written after the restored checkpoint by an attempt that died) are deleted
  when the subtask standing in for their writer starts.

Each writing subtask commits its own snapshot per checkpoint (Flink gathers the subtasks' files
into one committer task; here a checkpoint of a sink at parallelism *p* adds up to *p*
snapshots, each one atomic). Concurrent commits to the table are retried.

Upserts by key are refused: they need equality-delete files, which pyiceberg (0.12) can neither
write nor read.

>>> from flinkpy.connectors.iceberg import IcebergSink
>>> IcebergSink.guarantee
'exactly-once'
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flinkpy.connectors.base import ReaderContext
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
from flinkpy.connectors.two_phase_commit import TwoPhaseCommitSink, TwoPhaseCommitSinkWriter, default_transaction_prefix
from flinkpy.errors import ConfigurationError, ExitCode, FlinkpyError, NotFoundError

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: the snapshot summary's keys: Flink's for job and checkpoint, ours for the rest
SUMMARY_JOB_ID = "flink.job-id"
SUMMARY_CHECKPOINT_ID = "flink.max-committed-checkpoint-id"
SUMMARY_SUBTASK = "flinkpy.subtask"
SUMMARY_TRANSACTION_ID = "flinkpy.transaction-id"

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
    out = set()
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        txn = summary.additional_properties.get(SUMMARY_TRANSACTION_ID) if summary is not None else None
        if txn:
            out.add(txn)
    return out


class IcebergSinkWriter(TwoPhaseCommitSinkWriter[_Transaction]):
    """One subtask's data files and commits; see the module docstring."""

    def __init__(self, sink: IcebergSink, ctx: ReaderContext) -> None:
        super().__init__(ctx, sink.transaction_prefix or default_transaction_prefix(ctx, salt=sink.table_identifier))
        self._sink = sink
        self._catalog: Any = None
        self._schema: Any = None
        self._data_dir = ""
        #: the table as the writer opened it: its partition spec and file IO for data files
        self._opened: Any = None
        self._checkpoint_id = 0

    def open(self, runtime_context: Any = None) -> None:
        table = self._opened = self._table()
        self._schema = arrow_schema(table)
        self._data_dir = f"{table.location().rstrip('/')}/data"
        super().open(runtime_context)

    def _table(self) -> Table:
        if self._catalog is None:
            self._catalog = open_catalog(self._sink.catalog_name, self._sink.catalog_properties)
        return load_table(self._catalog, self._sink.catalog_name, self._sink.table_identifier)

    # -- the transaction --

    def begin_transaction(self) -> _Transaction:
        return _Transaction(self.transaction_id(uuid.uuid4().hex), [], [])

    def invoke(self, txn: _Transaction, records: list) -> None:
        txn.buffer.extend(records)
        if len(txn.buffer) >= self._sink.target_file_rows:
            self._write_files(txn)

    def _write_files(self, txn: _Transaction) -> None:
        """The buffered records as Parquet files, in no snapshot yet."""
        if not txn.buffer:
            return
        records, txn.buffer = txn.buffer, []
        txn.files += write_data_files(self._opened, self._schema, records, self._sink.table_identifier,
                                      f"{self._data_dir}/{txn.transaction_id}", first=len(txn.files))
        txn.records += len(records)

    def _prepare(self, checkpoint_id: int) -> None:
        self._checkpoint_id = checkpoint_id
        super()._prepare(checkpoint_id)

    def pre_commit(self, txn: _Transaction) -> IcebergCommittable | None:
        self._write_files(txn)
        if not txn.files:
            return None
        return IcebergCommittable(
            transaction_id=txn.transaction_id,
            job_id=self.ctx.job_id,
            checkpoint_id=self._checkpoint_id,
            subtask=self.ctx.subtask_index,
            files=tuple(txn.files),
            records=txn.records,
        )

    def commit(self, committable: IcebergCommittable) -> None:
        """Add the files as one snapshot, unless a snapshot already carries the transaction."""
        exceptions = require(ICEBERG, "pyiceberg.exceptions")
        properties = {
            SUMMARY_JOB_ID: committable.job_id,
            SUMMARY_CHECKPOINT_ID: str(committable.checkpoint_id),
            SUMMARY_SUBTASK: str(committable.subtask),
            SUMMARY_TRANSACTION_ID: committable.transaction_id,
        }
        attempts = max(1, self._sink.max_commit_attempts)
        for attempt in range(1, attempts + 1):
            table = self._table()
            if committable.transaction_id in committed_transactions(table):
                return  # a replay: committed before the crash
            try:
                table.add_files(list(committable.files), snapshot_properties=properties, check_duplicate_files=False)
                return
            except exceptions.CommitFailedException as e:
                # another subtask committed first: retry on the new metadata
                if attempt == attempts:
                    raise FlinkpyError(
                        f"committing transaction {committable.transaction_id} (checkpoint {committable.checkpoint_id}) to Iceberg table"
                        f" {self._sink.table_identifier!r} failed {attempts} times on concurrent commits: {e}",
                        remedy="raise IcebergSink's max_commit_attempts; the restarted job commits it again",
                    ) from e
                time.sleep(random.uniform(0.01, 0.05) * attempt)
            except FileNotFoundError as e:
                raise FlinkpyError(
                    f"data files of transaction {committable.transaction_id} (checkpoint {committable.checkpoint_id}) are gone"
                    f" from {self._data_dir} before their commit: {e}",
                    remedy="something deleted uncommitted files under the table's data/ (an orphan-file clean-up?);"
                    " its records are lost: replay them from a savepoint before that checkpoint",
                ) from e

    def abort(self, txn: _Transaction) -> None:
        try:
            self._delete(txn.files)
        except Exception:  # noqa: BLE001 - the next attempt's clean-up deletes them
            pass

    def abort_lingering(self, prefixes: set[str], keep: list[Any]) -> None:
        """Delete data files of transactions an earlier attempt of a subtask this one stands in
        for wrote and no completed checkpoint kept: in no snapshot, never to be committed."""
        pafs = require(ICEBERG, "pyarrow.fs")
        io = self._opened.io
        if hasattr(io, "fs_by_scheme"):  # pyiceberg's PyArrowFileIO: the catalog's credentials
            scheme, netloc, base = io.parse_location(self._data_dir)
            fs = io.fs_by_scheme(scheme, netloc)
        else:
            fs, base = pafs.FileSystem.from_uri(self._data_dir)
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        kept = {c.transaction_id for c in keep}
        candidates = []
        for info in infos:
            if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
                continue
            txn = info.base_name[: -len(".parquet")].rsplit("-", 1)[0]
            if txn in kept:
                continue
            for prefix in prefixes:
                old = self.subtask_of(prefix, txn)
                if old is not None and self.stands_in_for(old):
                    candidates.append((txn, f"{self._data_dir}/{info.base_name}"))
                    break
        if not candidates:
            return
        table = self._table()
        committed = committed_transactions(table)
        live = {str(p) for p in table.inspect.files().column("file_path").to_pylist()} if table.current_snapshot() else set()
        self._delete([path for txn, path in candidates if txn not in committed and path not in live])

    def _delete(self, paths: list[str]) -> None:
        if not paths:
            return
        io = self._opened.io
        for path in paths:
            try:
                io.delete(path)
            except FileNotFoundError:
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


class IcebergSink(TwoPhaseCommitSink):
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
    needs = "checkpointing, a replayable source; rows show at checkpoints, one snapshot per checkpoint and subtask"

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
