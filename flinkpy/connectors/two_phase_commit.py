"""The two-phase-commit sink protocol, for sinks whose output becomes visible exactly once.

A subclass of :class:`TwoPhaseCommitSinkWriter` says what a transaction is in its external system;
this base drives the protocol against the engine's checkpoints:

1. ``begin_transaction()`` when the first record after a checkpoint arrives;
2. ``invoke(txn, records)`` for every batch — written inside the open transaction, not visible;
3. ``pre_commit(txn)`` at the snapshot of checkpoint *n* (the barrier reached the sink): the
   transaction is made durable but still invisible (a part file is closed, PostgreSQL's
   ``PREPARE TRANSACTION``); what it returns — the *committable*, small and picklable — goes into
   checkpoint *n*'s state;
4. ``commit(committable)`` once checkpoint *n* is complete (every task has snapshotted), making
   the output visible. Commit must be idempotent: after a failure it may be repeated.

Recovery (``open``): the committables in the restored state belong to a completed checkpoint, so
they are committed (``recover_and_commit``); every other transaction this subtask or the old
subtasks it stands in for left behind (written or prepared after that checkpoint) is aborted
(``abort_lingering``). Whatever happened after the checkpoint therefore never becomes visible,
and whatever happened before it becomes visible exactly once — the guarantee holds when a task is
killed after a write, after a prepare, or after the checkpoint completed but before its commit.

A transaction id prefix names this sink's transactions in the external system; by default it is
derived from the job id and the operator's name, so two jobs never abort each other's
transactions, and a job resumed from a savepoint (a new job id) still finds the old job's
leftovers through the prefixes recorded in its restored state.

Example, a sink whose "transactions" are files in a directory (the visible output is the
directory's ``*.txt`` files)::

    class DirectoryWriter(TwoPhaseCommitSinkWriter):
        def begin_transaction(self):
            return {"path": f"{DIR}/.{self.transaction_id(uuid.uuid4().hex)}", "lines": []}
        def invoke(self, txn, records):
            txn["lines"].extend(records)
        def pre_commit(self, txn):
            Path(txn["path"]).write_text("".join(f"{r}\\n" for r in txn["lines"]))
            return txn["path"]
        def commit(self, path):
            if os.path.exists(path):
                os.replace(path, path.replace("/.", "/") + ".txt")
        def abort_lingering(self, prefixes, keep):
            ...  # delete hidden files named with one of ``prefixes`` not in ``keep``
"""

from __future__ import annotations

import hashlib
from abc import abstractmethod
from typing import Any, Generic, TypeVar

from flinkpy.connectors.base import ReaderContext, Sink, SinkWriter

TxnT = TypeVar("TxnT")


def default_transaction_prefix(ctx: ReaderContext, salt: str = "") -> str:
    """``fp-<job id, 12 hex>-<operator, 8 hex>``: short enough for any external system's limits
    (PostgreSQL's transaction ids hold 200 bytes), unique per job and sink operator."""
    job = (ctx.job_id or "local").replace("-", "")[:12]
    op = hashlib.sha1(f"{ctx.operator_name}/{salt}".encode()).hexdigest()[:8]
    return f"fp-{job}-{op}"


class TwoPhaseCommitSinkWriter(SinkWriter, Generic[TxnT]):
    """One subtask's side of the protocol; subclasses implement the transaction hooks.

    State (the checkpointed part): ``{"prefix", "subtask", "parallelism", "pending":
    [committable, ...]}`` — the committables prepared at this or earlier checkpoints and not yet
    committed when the snapshot was taken.
    """

    def __init__(self, ctx: ReaderContext, transaction_prefix: str | None = None) -> None:
        self.ctx = ctx
        self.prefix = transaction_prefix or default_transaction_prefix(ctx)
        self._txn: TxnT | None = None
        #: committables by the checkpoint that prepared them
        self._pending: dict[int, list[Any]] = {}
        self._recovered = False

    # -- what a subclass implements ------------------------------------------------------------

    @abstractmethod
    def begin_transaction(self) -> TxnT:
        """Open a new transaction (records written to it stay invisible)."""

    @abstractmethod
    def invoke(self, txn: TxnT, records: list) -> None:
        """Write a batch of records into ``txn``."""

    @abstractmethod
    def pre_commit(self, txn: TxnT) -> Any:
        """Make ``txn`` durable, still invisible; return its committable (picklable), or None
        when there is nothing to commit (an empty transaction)."""

    @abstractmethod
    def commit(self, committable: Any) -> None:
        """Make a prepared transaction visible. Idempotent: committing twice is harmless."""

    def abort(self, txn: TxnT) -> None:
        """Discard an open (not prepared) transaction: the task is cancelled or failing."""

    def recover_and_commit(self, committable: Any) -> None:
        """Commit a transaction found in the restored state (by default :meth:`commit`)."""
        self.commit(committable)

    def abort_lingering(self, prefixes: set[str], keep: list[Any]) -> None:
        """Abort the transactions an earlier attempt left behind: those named with one of
        ``prefixes`` that belong to a subtask this one stands in for
        (:meth:`stands_in_for`) and are not among ``keep`` (just committed)."""

    def close_resources(self) -> None:
        """Close connections and files (after :meth:`abort` of an open transaction)."""

    # -- helpers for subclasses ---------------------------------------------------------------

    def transaction_id(self, unique: str) -> str:
        """An id for a new transaction: ``<prefix>-<subtask>-<unique>`` (parse it back with
        :meth:`subtask_of`). ``unique`` has no ``-``, so that ids of a prefix that extends
        another (``orders`` and ``orders-1``) can never be taken for each other's."""
        if "-" in unique:
            raise ValueError(f"the unique part of a transaction id must not contain '-': {unique!r}")
        return f"{self.prefix}-{self.ctx.subtask_index}-{unique}"

    @staticmethod
    def subtask_of(prefix: str, transaction_id: str) -> int | None:
        """The subtask index in a transaction id made by :meth:`transaction_id`, or None when
        the id is not one of ``prefix``'s.

        >>> TwoPhaseCommitSinkWriter.subtask_of("orders", "orders-1-ab12")
        1
        >>> TwoPhaseCommitSinkWriter.subtask_of("orders", "orders-1-3-ab12") is None  # orders-1's
        True
        """
        if not transaction_id.startswith(prefix + "-"):
            return None
        parts = transaction_id[len(prefix) + 1 :].split("-")
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1]:
            return None
        return int(parts[0])

    def stands_in_for(self, old_subtask: int) -> bool:
        """Whether this subtask cleans up after ``old_subtask`` of a previous run: its own
        earlier attempts and, after a rescale, the old subtasks with ``index % p == this``."""
        return old_subtask % self.ctx.parallelism == self.ctx.subtask_index

    # -- the protocol (called by the engine) -----------------------------------------------------

    def open(self, runtime_context: Any = None) -> None:
        self.recover(self.ctx.restored_state)

    def recover(self, states: list[Any]) -> None:
        """Commit the restored state's pending transactions, abort every other leftover."""
        if self._recovered:
            return
        self._recovered = True
        prefixes = {self.prefix}
        committed: list[Any] = []
        for state in states or []:
            if not state:
                continue
            prefixes.add(state.get("prefix", self.prefix))
            for committable in state.get("pending", []):
                self.recover_and_commit(committable)
                committed.append(committable)
        self.abort_lingering(prefixes, committed)

    def write(self, records: list) -> None:
        if not records:
            return
        if self._txn is None:
            self._txn = self.begin_transaction()
        self.invoke(self._txn, records)

    def _prepare(self, checkpoint_id: int) -> None:
        if self._txn is None:
            return
        txn, self._txn = self._txn, None
        committable = self.pre_commit(txn)
        if committable is not None:
            self._pending.setdefault(checkpoint_id, []).append(committable)

    def snapshot_state(self, checkpoint_id: int) -> dict[str, Any]:
        self._prepare(checkpoint_id)
        return {
            "prefix": self.prefix,
            "subtask": self.ctx.subtask_index,
            "parallelism": self.ctx.parallelism,
            "pending": [c for cid in sorted(self._pending) for c in self._pending[cid]],
        }

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        # an aborted checkpoint's transactions are committed by the next completed one: its
        # state lists them as pending too
        for cid in sorted(c for c in self._pending if c <= checkpoint_id):
            for committable in self._pending[cid]:
                self.commit(committable)
            del self._pending[cid]

    def flush(self, end_of_input: bool) -> None:
        if not end_of_input:
            return
        # a bounded input ends: everything is committed, as at Flink's final checkpoint
        self._prepare(max(self._pending, default=0) + 1)
        self.notify_checkpoint_complete(max(self._pending, default=0))

    def close(self) -> None:
        try:
            if self._txn is not None:
                txn, self._txn = self._txn, None
                self.abort(txn)
        finally:
            self.close_resources()


def pending_summary(state: Any) -> dict[str, Any] | None:
    """What ``checkpoint inspect`` shows of a two-phase-commit writer's state (None for any
    other state): the transactions the checkpoint pre-committed and its completion commits.

    ``kind`` stays ``sink`` (what every reader of ``_metadata`` knows); ``entries`` counts them; ``pending`` describes each, by the committable's own ``describe()``
    where it has one (Iceberg: transaction id, checkpoint, data files, records), as a transaction
    id where the committable is one (PostgreSQL's prepared transactions), or as a count of files
    where it is a list of them (the FileSink's pending part files).

    >>> pending_summary({"prefix": "fp-1", "subtask": 0, "parallelism": 1, "pending": ["fp-1-0-ab"]})
    {'kind': 'sink', 'entries': 1, 'transaction_prefix': 'fp-1', 'pending': [{'transaction_id': 'fp-1-0-ab'}]}
    """
    if not isinstance(state, dict) or "prefix" not in state or not isinstance(state.get("pending"), list):
        return None
    pending = [describe_committable(c) for c in state["pending"]]
    summary = {"kind": "sink", "entries": len(pending), "transaction_prefix": state["prefix"], "pending": pending}
    if all(isinstance(p.get("records"), int) for p in pending):
        # every transaction knows its records (Iceberg's, the Kafka sink's): what a restore commits
        summary["pending_records"] = sum(p["records"] for p in pending)
    return summary


def describe_committable(committable: Any) -> dict[str, Any]:
    """One pending transaction as JSON-able facts (see :func:`pending_summary`)."""
    describe = getattr(committable, "describe", None)
    if callable(describe):
        return dict(describe())
    if isinstance(committable, str):
        return {"transaction_id": committable}
    kept = committable.get("records", committable.get("values")) if isinstance(committable, dict) else None
    if isinstance(kept, list):
        # a transaction kept with its records (or, for one topic, their values) to replay: the Kafka sink's batches
        facts = {k: v for k, v in committable.items() if isinstance(v, (int, str))}
        return {**facts, "records": len(kept)}
    if isinstance(committable, (list, tuple)):
        return {"files": len(committable)}
    return {}


class TwoPhaseCommitSink(Sink):
    """A sink of :class:`TwoPhaseCommitSinkWriter` s: subclasses implement :meth:`create_writer`.

    ``guarantee`` is what the connectors table reports for it.
    """

    guarantee = "exactly-once"

    @abstractmethod
    def create_writer(self, ctx: ReaderContext) -> TwoPhaseCommitSinkWriter:
        """The writer of subtask ``ctx.subtask_index``."""
