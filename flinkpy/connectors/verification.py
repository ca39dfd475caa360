"""The verification source and sink: an input whose every record is known, an output that is checked.

:class:`SequenceSource` emits ``(key, seq)`` with ``seq`` = 1..``per_key`` for every key in
``range(keys)``; key ``k`` belongs to subtask ``k % parallelism``. Its state is the next sequence
number of each key it owns, so a restore — at the same or another parallelism — resumes every
key exactly where the snapshot left it. :class:`VerifyingSink` records what it received, one
JSON line per record, committed with checkpoints (two-phase: a pending file per checkpoint,
renamed visible when the checkpoint completes). Together they let ``flinkpy verify`` tell, per
key, which sequence numbers were lost and which were written twice.

>>> src = SequenceSource(keys=3, per_key=2)
>>> reader = src.create_reader(ReaderContext(subtask_index=0, parallelism=2))
>>> reader.poll(10), reader.poll(10)
([(0, 1), (2, 1), (0, 2), (2, 2)], None)
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

from flinkpy.connectors.base import Boundedness, ReaderContext, Sink, Source, SourceReader
from flinkpy.connectors.two_phase_commit import TwoPhaseCommitSinkWriter
from flinkpy.errors import UsageError

#: committed files are visible (``part-...``); pending ones are hidden (``.pending-...``)
_PENDING = re.compile(r"^\.pending-(\d+)-[0-9a-f]{32}-\d+\.jsonl$")


class SequenceReader(SourceReader):
    """Emits its keys' sequence numbers round-robin over the keys, optionally rate-limited."""

    def __init__(self, ctx: ReaderContext, next_seq: dict[int, int], per_key: int, rate: float | None) -> None:
        self._ctx = ctx
        self._next = dict(sorted(next_seq.items()))
        self._per_key = per_key
        # records per second of this subtask: the source's rate split evenly
        self._rate = rate / ctx.parallelism if rate else None
        self._started = time.monotonic()
        self._emitted = 0

    def poll(self, max_records: int) -> list | None:
        live = [k for k, s in self._next.items() if s <= self._per_key]
        if not live:
            return None
        budget = max(0, max_records)
        if self._rate is not None:
            # a token schedule: never ahead of rate * elapsed (restarts begin a new schedule)
            allowed = int(self._rate * (time.monotonic() - self._started)) + 1 - self._emitted
            budget = min(budget, max(0, allowed))
        out: list[tuple[int, int]] = []
        while len(out) < budget and live:
            for k in list(live):
                if len(out) >= budget:
                    break
                out.append((k, self._next[k]))
                self._next[k] += 1
                if self._next[k] > self._per_key:
                    live.remove(k)
        self._emitted += len(out)
        return out

    def snapshot_state(self) -> dict[str, Any]:
        return {
            "subtask": self._ctx.subtask_index,
            "parallelism": self._ctx.parallelism,
            "next": {str(k): s for k, s in self._next.items()},
        }


class SequenceSource(Source):
    """A bounded, parallel, replayable source of ``(key, seq)`` records (see the module).

    ``rate`` caps the records per second of the whole source (None: as fast as possible), so a
    run lasts long enough for faults to land in it.

    >>> r = SequenceSource(2, 3).create_reader(ReaderContext(subtask_index=1, parallelism=2))
    >>> r.poll(2), r.snapshot_state()["next"]
    ([(1, 1), (1, 2)], {'1': 3})
    """

    guarantee = "exactly-once"
    needs = "checkpointing (each key's next sequence number is in the checkpoint)"

    boundedness = Boundedness.BOUNDED

    def __init__(self, keys: int, per_key: int, rate: float | None = None) -> None:
        if keys < 1 or per_key < 1:
            raise UsageError(f"SequenceSource({keys}, {per_key}): keys and per_key must be positive", remedy="pass keys >= 1 and per_key >= 1")
        if rate is not None and rate <= 0:
            raise UsageError(f"SequenceSource rate {rate} is not positive", remedy="pass a positive rate, or None for no limit")
        self.keys = int(keys)
        self.per_key = int(per_key)
        self.rate = rate

    def create_reader(self, ctx: ReaderContext) -> SequenceReader:
        return SequenceReader(ctx, self._owned(ctx), self.per_key, self.rate)

    def _owned(self, ctx: ReaderContext) -> dict[int, int]:
        """Next seq per key of this subtask: fresh, or from the restored states.

        Given the states of every old subtask (union redistribution) it pools them and takes
        the keys ``k % parallelism == index``; given only some, it owns exactly their keys.
        """
        i, p = ctx.subtask_index, ctx.parallelism
        if not ctx.restored_state:
            return {k: 1 for k in range(i, self.keys, p)}
        by_subtask = {int(s["subtask"]): s for s in ctx.restored_state if s}
        pooled = {int(k): int(v) for s in by_subtask.values() for k, v in s["next"].items()}
        old_p = int(next(iter(by_subtask.values()))["parallelism"]) if by_subtask else p
        if set(by_subtask) == set(range(old_p)):
            return {k: v for k, v in pooled.items() if k % p == i}
        return pooled

    def max_parallelism(self) -> int | None:
        return self.keys

    def __repr__(self) -> str:
        return f"SequenceSource(keys={self.keys}, per_key={self.per_key}, rate={self.rate})"


class VerifyingWriter(TwoPhaseCommitSinkWriter[list]):
    """Buffers records (the transaction); at a checkpoint writes them to a hidden pending file
    (pre-commit); renames it visible when the checkpoint completes (commit).

    The committable is ``[pending name, final name]``. Pending files carry no transaction
    prefix — the directory belongs to one verification run — so a restored subtask discards the
    pending files of every old subtask it stands in for.
    """

    def __init__(self, directory: str, ctx: ReaderContext) -> None:
        super().__init__(ctx)
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._uid = uuid.uuid4().hex  # this attempt's id: names never collide across attempts
        self._tag = 0
        self.recover(ctx.restored_state)

    def begin_transaction(self) -> list:
        return []

    def invoke(self, txn: list, records: list) -> None:
        txn.extend(json.dumps(list(r) if isinstance(r, tuple) else r) for r in records)

    def pre_commit(self, txn: list) -> list[str] | None:
        if not txn:
            return None
        self._tag += 1
        base = f"{self.ctx.subtask_index}-{self._uid}-{self._tag}.jsonl"
        pending, final = f".pending-{base}", f"part-{base}"
        with open(self._dir / pending, "w") as f:
            f.write("\n".join(txn) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return [pending, final]

    def commit(self, committable: list[str]) -> None:
        """Rename a pending file visible; a second commit of the same file is harmless."""
        pending, final = committable
        try:
            os.replace(self._dir / pending, self._dir / final)
        except FileNotFoundError:
            if not (self._dir / final).exists():
                raise UsageError(
                    f"VerifyingSink cannot commit {final} in {self._dir}: its pending file is gone (subtask {self.ctx.subtask_index})",
                    remedy="check whether something deleted hidden files in the sink's directory",
                ) from None

    def abort_lingering(self, prefixes: set[str], keep: list[Any]) -> None:
        """Discard the pending files written after the restored checkpoint (their records will
        be replayed) by the old subtasks this one stands in for."""
        kept = {pending for pending, _ in keep}
        for path in self._dir.iterdir():
            m = _PENDING.match(path.name)
            if m and self.stands_in_for(int(m.group(1))) and path.name not in kept:
                path.unlink(missing_ok=True)


class VerifyingSink(Sink):
    """A two-phase sink that records every record it received in ``directory`` (see the module).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> w = VerifyingSink(d).create_writer(ReaderContext(subtask_index=0, parallelism=1))
    >>> w.write([(0, 1, 1)]); _ = w.snapshot_state(1); list(read_committed(d))
    []
    >>> w.notify_checkpoint_complete(1); list(read_committed(d))
    [[0, 1, 1]]
    """

    guarantee = "exactly-once"
    needs = "checkpointing (two-phase commit of one file per checkpoint)"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = str(directory)

    def create_writer(self, ctx: ReaderContext) -> VerifyingWriter:
        return VerifyingWriter(self.directory, ctx)

    def __repr__(self) -> str:
        return f"VerifyingSink({self.directory!r})"


def read_committed(directory: str | os.PathLike[str]) -> Iterator[Any]:
    """Every record of the committed files in ``directory`` (pending files are not output)."""
    for path in sorted(Path(directory).glob("part-*.jsonl")):
        with open(path) as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def check(records: Any, keys: int, per_key: int) -> dict[str, Any]:
    """Compare records ``[key, seq, count]`` with what SequenceSource(keys, per_key) implies.

    Per key: missing sequence numbers, duplicated ones (each extra copy counts), and state
    mismatches (a record whose running count differs from its seq: state and input disagree).

    >>> r = check([[0, 1, 1], [0, 3, 2], [0, 3, 3], [1, 1, 1]], keys=2, per_key=3)
    >>> r["lost"], r["duplicated"], r["mismatched"], r["keys"]["0"]["missing"]
    (3, 1, 1, [2])
    """
    seen: dict[int, dict[int, int]] = {k: {} for k in range(keys)}
    mismatches: dict[int, int] = {}
    unexpected = 0
    total = 0
    for rec in records:
        total += 1
        key, seq = int(rec[0]), int(rec[1])
        if key not in seen or not 1 <= seq <= per_key:
            unexpected += 1
            continue
        seen[key][seq] = seen[key].get(seq, 0) + 1
        if len(rec) > 2 and int(rec[2]) != seq:
            mismatches[key] = mismatches.get(key, 0) + 1
    per: dict[str, Any] = {}
    lost = dup = 0
    for k in range(keys):
        missing = [s for s in range(1, per_key + 1) if s not in seen[k]]
        dups = {s: c - 1 for s, c in seen[k].items() if c > 1}
        lost += len(missing)
        dup += sum(dups.values())
        if missing or dups or mismatches.get(k):
            per[str(k)] = {"missing": missing, "duplicates": sorted(dups), "duplicate-copies": sum(dups.values()),
                           "state-mismatches": mismatches.get(k, 0)}
    return {"expected": keys * per_key, "received": total, "lost": lost, "duplicated": dup,
            "mismatched": sum(mismatches.values()), "unexpected": unexpected, "keys": per}
