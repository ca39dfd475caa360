"""The IcebergSink's committer: one task that commits every writer's files, a snapshot per checkpoint.

Its records are the writers' :class:`~flinkpy.connectors.iceberg.IcebergCommittable` s, which
arrive ahead of the barrier of their checkpoint (:mod:`flinkpy.task.committable_writer`). Its
state is every committable not yet committed; when checkpoint *n* completes it commits those of
checkpoints up to *n* in one ``add_files`` — one table snapshot for the whole sink — and a
restored committer first commits what its state holds. A commit skips the transactions a
snapshot of the table already carries, so replaying one after a crash adds nothing twice.

Clean-up of what dead attempts left: once the first checkpoint of this attempt has completed,
every committable of an earlier attempt has reached the committer (from its restored state or
from the restored channels, ahead of that checkpoint's barrier) and is committed. A data file of
this sink written by an earlier attempt (or under a prefix of the restored job) that no snapshot
holds is then an orphan, and is deleted.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from flinkpy.connectors.base import ReaderContext, Sink, SinkWriter
from flinkpy.connectors.drivers import ICEBERG, require
from flinkpy.connectors.iceberg import (
    SUMMARY_CHECKPOINT_ID,
    SUMMARY_JOB_ID,
    SUMMARY_TRANSACTION_IDS,
    IcebergCommittable,
    attempt_of,
    committed_transactions,
    iceberg_prefix,
)
from flinkpy.connectors.iceberg_table import load_table, open_catalog
from flinkpy.errors import FlinkpyError

if TYPE_CHECKING:
    from flinkpy.connectors.iceberg import IcebergSink
    from pyiceberg.table import Table


class IcebergCommitter(SinkWriter):
    """The committer's one subtask (see the module)."""

    def __init__(self, sink: IcebergSink, ctx: ReaderContext) -> None:
        self._sink = sink
        self.ctx = ctx
        self.prefix = iceberg_prefix(sink, ctx)
        self._catalog: Any = None
        #: committables received and not committed yet, in arrival order
        self._pending: list[IcebergCommittable] = []
        #: the prefixes whose files this committer may clean up (its own, the restored job's)
        self._prefixes = {self.prefix}
        self._clean_up_due = True

    def _table(self) -> Table:
        if self._catalog is None:
            self._catalog = open_catalog(self._sink.catalog_name, self._sink.catalog_properties)
        return load_table(self._catalog, self._sink.catalog_name, self._sink.table_identifier)

    def open(self, runtime_context: Any = None) -> None:
        restored: list[IcebergCommittable] = []
        for state in self.ctx.restored_state or []:
            if state:
                self._prefixes.add(state.get("prefix", self.prefix))
                restored += state.get("pending", [])
        # they belong to the restored checkpoint, which completed: commit them now
        self._commit(restored)

    def write(self, records: list) -> None:
        self._pending.extend(records)

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        # the shape of a two-phase-commit writer's state: `checkpoint inspect` lists the pending commits
        return {"prefix": self.prefix, "subtask": 0, "parallelism": 1, "pending": list(self._pending)}

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        due = [c for c in self._pending if c.checkpoint_id <= checkpoint_id]
        self._pending = [c for c in self._pending if c.checkpoint_id > checkpoint_id]
        self._commit(due)
        self._clean_up()

    def flush(self, end_of_input: bool) -> None:
        if end_of_input:
            # a bounded input ends: everything is committed, as at Flink's final checkpoint
            due, self._pending = self._pending, []
            self._commit(due)
            self._clean_up()

    def _commit(self, committables: list[IcebergCommittable]) -> None:
        """The files of ``committables`` as one snapshot, less those a snapshot already carries."""
        if not committables:
            return
        exceptions = require(ICEBERG, "pyiceberg.exceptions")
        attempts = max(1, self._sink.max_commit_attempts)
        for attempt in range(1, attempts + 1):
            table = self._table()
            done = committed_transactions(table)
            todo = [c for c in committables if c.transaction_id not in done]
            if not todo:
                return  # a replay: committed before the crash
            properties = {
                SUMMARY_JOB_ID: todo[-1].job_id,
                SUMMARY_CHECKPOINT_ID: str(max(c.checkpoint_id for c in todo)),
                SUMMARY_TRANSACTION_IDS: ",".join(c.transaction_id for c in todo),
            }
            try:
                table.add_files([f for c in todo for f in c.files], snapshot_properties=properties, check_duplicate_files=False)
                return
            except exceptions.CommitFailedException as e:
                # another writer of the table committed first: retry on the new metadata
                if attempt == attempts:
                    raise FlinkpyError(
                        f"committing checkpoint {properties[SUMMARY_CHECKPOINT_ID]} to Iceberg table {self._sink.table_identifier!r}"
                        f" failed {attempts} times on concurrent commits: {e}",
                        remedy="raise IcebergSink's max_commit_attempts; the restarted job commits it again",
                    ) from e
                time.sleep(random.uniform(0.01, 0.05) * attempt)
            except FileNotFoundError as e:
                raise FlinkpyError(
                    f"data files of checkpoint {properties[SUMMARY_CHECKPOINT_ID]} are gone from Iceberg table"
                    f" {self._sink.table_identifier!r} before their commit: {e}",
                    remedy="something deleted uncommitted files under the table's data/ (an orphan-file clean-up?);"
                    " their records are lost: replay them from a savepoint before that checkpoint",
                ) from e

    def _clean_up(self) -> None:
        """Delete the data files earlier attempts left outside the table (once; see the module)."""
        if not self._clean_up_due:
            return
        self._clean_up_due = False
        pafs = require(ICEBERG, "pyarrow.fs")
        table = self._table()
        data_dir = f"{table.location().rstrip('/')}/data"
        io = table.io
        if hasattr(io, "fs_by_scheme"):  # pyiceberg's PyArrowFileIO: the catalog's credentials
            scheme, netloc, base = io.parse_location(data_dir)
            fs = io.fs_by_scheme(scheme, netloc)
        else:
            fs, base = pafs.FileSystem.from_uri(data_dir)
        waiting = {c.transaction_id for c in self._pending}
        candidates = []
        for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
                continue
            txn = info.base_name[: -len(".parquet")].rsplit("-", 1)[0]
            if txn in waiting:
                continue
            for prefix in self._prefixes:
                attempt = attempt_of(prefix, txn)
                if attempt is not None and (prefix != self.prefix or attempt < self.ctx.attempt):
                    candidates.append((txn, f"{data_dir}/{info.base_name}"))
                    break
        if not candidates:
            return
        committed = committed_transactions(table)
        live = {str(p) for p in table.inspect.files().column("file_path").to_pylist()} if table.current_snapshot() else set()
        for txn, path in candidates:
            if txn not in committed and path not in live:
                try:
                    io.delete(path)
                except FileNotFoundError:
                    pass


class IcebergCommitterSink(Sink):
    """The committer of an :class:`~flinkpy.connectors.iceberg.IcebergSink`, run at parallelism 1."""

    guarantee = "exactly-once"

    def __init__(self, sink: IcebergSink) -> None:
        self.sink = sink
        self.needs = sink.needs

    def create_writer(self, ctx: ReaderContext) -> IcebergCommitter:
        return IcebergCommitter(self.sink, ctx)

    def __repr__(self) -> str:
        return f"IcebergCommitterSink({self.sink!r})"
