"""FileSink (row format): exactly-once part files on any fsspec file system, by two-phase commit.

Built the way PyFlink builds it::

    FileSink.for_row_format("out/", Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("pre").build())
        .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=1 << 20))
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .build()

Layout, as Flink's: ``<base>/<bucket>/<prefix>-<writer uuid>-<counter><suffix>``, the uuid one per
subtask and attempt. A part file lives through three states. *In-progress*: being written, hidden
as ``.<final name>.inprogress.<sink id>-<subtask>`` (the subtask, which the final name no longer
carries, tells a restored subtask which leftovers are its own). *Pending*: closed (rolled, or at a snapshot), still
hidden, recorded in the next checkpoint's state. *Finished*: renamed to its visible final name
once the checkpoint that recorded it is complete, or at the end of a bounded input.

The protocol is the generic two-phase commit of
:mod:`flinkpy.connectors.two_phase_commit`: a transaction is the set of part files written
between two checkpoints; pre-commit closes them; commit renames them. A restored writer commits
the pending files of its state (idempotently) and deletes the in-progress files that earlier
attempts of the subtasks it stands in for left behind, so nothing written after the checkpoint
becomes visible: exactly once.

Why every snapshot rolls the part file (for every rolling policy): fsspec file systems cannot
reopen a file to append at a recorded length, so an in-progress file cannot be carried across a
checkpoint the way Flink carries it on HDFS or S3.

The ``<sink id>`` (the transaction prefix; Flink puts a random uuid there) is derived from the
job id, operator name and base path, so a later attempt recognises its predecessors' leftovers
and nobody else's; a job resumed from a savepoint finds the old job's through its state.
"""

from __future__ import annotations

import copy
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import fsspec
from fsspec.spec import AbstractFileSystem

from flinkpy.connectors.base import ReaderContext, Sink
from flinkpy.connectors.two_phase_commit import TwoPhaseCommitSinkWriter, default_transaction_prefix
from flinkpy.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from flinkpy.common.serialization import Encoder


# ---- bucket assigners ----

_JAVA_FIELDS = {
    "yyyy": "%Y",
    "yy": "%y",
    "MM": "%m",
    "dd": "%d",
    "HH": "%H",
    "mm": "%M",
    "ss": "%S",
}


def java_pattern_to_strftime(pattern: str) -> str:
    """Translate the subset of Java DateTimeFormatter patterns buckets use into strftime.

    >>> java_pattern_to_strftime("yyyy-MM-dd--HH")
    '%Y-%m-%d--%H'
    >>> java_pattern_to_strftime("'dt='yyyyMMdd")
    'dt=%Y%m%d'
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":  # quoted literal; '' is a quote
            end = pattern.find("'", i + 1)
            if end < 0:
                raise UsageError(f"unterminated quote in date-time bucket format {pattern!r}")
            out.append("'" if end == i + 1 else pattern[i + 1 : end].replace("%", "%%"))
            i = end + 1
        elif ch.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == ch:
                j += 1
            token = pattern[i:j]
            if token not in _JAVA_FIELDS:
                raise UsageError(
                    f"date-time bucket format {pattern!r}: {token!r} is not supported",
                    remedy="use yyyy, yy, MM, dd, HH, mm, ss and quoted literals",
                )
            out.append(_JAVA_FIELDS[token])
            i = j
        else:
            out.append("%%" if ch == "%" else ch)
            i += 1
    return "".join(out)


class BucketAssigner:
    """Chooses the bucket (sub-directory of the base path) a record is written to.

    >>> BucketAssigner.base_path_bucket_assigner().bucket_id("x", 0)
    ''
    >>> BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH", "UTC").bucket_id("x", 0)
    '1970-01-01--00'
    """

    #: False when the bucket depends on time only: then one bucket is computed per batch
    depends_on_record: bool = False

    def bucket_id(self, record: Any, now_ms: int) -> str:
        return ""

    @staticmethod
    def base_path_bucket_assigner() -> BucketAssigner:
        """No bucketing: every part file goes directly under the base path."""
        return BucketAssigner()

    @staticmethod
    def date_time_bucket_assigner(
        format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None
    ) -> BucketAssigner:
        """A bucket per period of processing time, named by a Java-style ``format_str``."""
        return DateTimeBucketAssigner(format_str, timezone_id)

    def __repr__(self) -> str:
        return "BucketAssigner.base_path_bucket_assigner()"


class DateTimeBucketAssigner(BucketAssigner):
    """Buckets named by the current processing time, e.g. ``2024-05-01--13``."""

    def __init__(self, format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None) -> None:
        self.format_str = format_str
        self.timezone_id = timezone_id
        self._strftime = java_pattern_to_strftime(format_str)
        if timezone_id is not None:
            try:
                ZoneInfo(timezone_id)
            except (ZoneInfoNotFoundError, ValueError):
                raise UsageError(
                    f"unknown time zone {timezone_id!r} for date_time_bucket_assigner",
                    remedy="use an IANA name such as 'UTC' or 'Europe/Berlin'",
                ) from None

    def bucket_id(self, record: Any, now_ms: int) -> str:
        tz = ZoneInfo(self.timezone_id) if self.timezone_id else None
        moment = datetime.fromtimestamp(now_ms / 1000, tz)
        return moment.strftime(self._strftime)

    def __repr__(self) -> str:
        args = f"{self.format_str!r}, {self.timezone_id!r}"
        return f"BucketAssigner.date_time_bucket_assigner({args})"


# ---- rolling policies ----


class RollingPolicy:
    """When a bucket closes its part file and opens a new one (sizes in bytes, times in ms)."""

    def __init__(self, part_size: int, rollover_interval: int, inactivity_interval: int) -> None:
        self.part_size = part_size
        self.rollover_interval = rollover_interval
        self.inactivity_interval = inactivity_interval

    @staticmethod
    def default_rolling_policy(
        part_size: int = 1024 * 1024 * 128,
        rollover_interval: int = 60 * 1000,
        inactivity_interval: int = 60 * 1000,
    ) -> DefaultRollingPolicy:
        """Roll at ``part_size`` bytes, ``rollover_interval`` ms after opening, or after
        ``inactivity_interval`` ms without writes — and at every checkpoint (see the module)."""
        return DefaultRollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> OnCheckpointRollingPolicy:
        """Roll only at checkpoints (and at the end of input)."""
        return OnCheckpointRollingPolicy()

    def should_roll(self, size: int, opened_ms: int, last_write_ms: int, now_ms: int) -> bool:
        """Roll before writing more to a part of ``size`` bytes?"""
        return (
            size >= self.part_size
            or now_ms - opened_ms >= self.rollover_interval
            or now_ms - last_write_ms >= self.inactivity_interval
        )


class DefaultRollingPolicy(RollingPolicy):
    def __repr__(self) -> str:
        return (
            f"RollingPolicy.default_rolling_policy({self.part_size}, {self.rollover_interval}, "
            f"{self.inactivity_interval})"
        )


class OnCheckpointRollingPolicy(RollingPolicy):
    def __init__(self) -> None:
        big = 1 << 62
        super().__init__(big, big, big)

    def should_roll(self, size: int, opened_ms: int, last_write_ms: int, now_ms: int) -> bool:
        return False

    def __repr__(self) -> str:
        return "RollingPolicy.on_checkpoint_rolling_policy()"


# ---- output file names ----


class OutputFileConfig:
    """The prefix and suffix of part file names.

    >>> c = OutputFileConfig.builder().with_part_prefix("pre").with_part_suffix(".ext").build()
    >>> c.get_part_prefix(), c.get_part_suffix()
    ('pre', '.ext')
    """

    def __init__(self, part_prefix: str = "part", part_suffix: str = "") -> None:
        self.part_prefix = part_prefix
        self.part_suffix = part_suffix

    @staticmethod
    def builder() -> OutputFileConfig.OutputFileConfigBuilder:
        return OutputFileConfig.OutputFileConfigBuilder()

    def get_part_prefix(self) -> str:
        return self.part_prefix

    def get_part_suffix(self) -> str:
        return self.part_suffix

    def __repr__(self) -> str:
        return f"OutputFileConfig({self.part_prefix!r}, {self.part_suffix!r})"

    class OutputFileConfigBuilder:
        def __init__(self) -> None:
            self.part_prefix = "part"
            self.part_suffix = ""

        def with_part_prefix(self, prefix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self.part_prefix = prefix
            return self

        def with_part_suffix(self, suffix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self.part_suffix = suffix
            return self

        def build(self) -> OutputFileConfig:
            return OutputFileConfig(self.part_prefix, self.part_suffix)


# ---- the sink ----


class FileSink(Sink):
    """Writes records into part files under ``base_path``; start with :meth:`for_row_format`."""

    guarantee = "exactly-once"
    needs = "checkpointing; a file system with atomic rename for the commit (local, HDFS-like)"

    def __init__(
        self,
        base_path: str,
        encoder: Encoder,
        bucket_assigner: BucketAssigner,
        rolling_policy: RollingPolicy,
        output_file_config: OutputFileConfig,
        bucket_check_interval: int = 60 * 1000,
    ) -> None:
        self.base_path = base_path
        self.encoder = encoder
        self.bucket_assigner = bucket_assigner
        self.rolling_policy = rolling_policy
        self.output_file_config = output_file_config
        self.bucket_check_interval = bucket_check_interval

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> FileSink.RowFormatBuilder:
        """Start building a sink that encodes each record with ``encoder.encode(record)``."""
        return FileSink.RowFormatBuilder(base_path, encoder)

    def create_writer(self, ctx: ReaderContext) -> FileSinkWriter:
        return FileSinkWriter(self, ctx)

    def for_record_type(self, type_info: Any) -> FileSink:
        """A copy whose encoder writes records of ``type_info`` as PyFlink's encoder writes them."""
        for_type = getattr(self.encoder, "for_type", None)  # a user's own encoder: as it is
        if for_type is None:
            return self
        typed = copy.copy(self)
        typed.encoder = for_type(type_info)
        return typed

    def __repr__(self) -> str:
        return f"FileSink({self.base_path!r})"

    class RowFormatBuilder:
        def __init__(self, base_path: str, encoder: Encoder) -> None:
            self._base_path = str(base_path)
            self._encoder = encoder
            self._bucket_assigner: BucketAssigner = BucketAssigner.date_time_bucket_assigner()
            self._rolling_policy: RollingPolicy = RollingPolicy.default_rolling_policy()
            self._output_file_config = OutputFileConfig()
            self._bucket_check_interval = 60 * 1000

        def with_bucket_check_interval(self, interval: int) -> FileSink.RowFormatBuilder:
            """Accepted for compatibility; time-based rolls are checked at every write."""
            self._bucket_check_interval = int(interval)
            return self

        def with_bucket_assigner(
            self, bucket_assigner: BucketAssigner
        ) -> FileSink.RowFormatBuilder:
            self._bucket_assigner = bucket_assigner
            return self

        def with_rolling_policy(self, rolling_policy: RollingPolicy) -> FileSink.RowFormatBuilder:
            self._rolling_policy = rolling_policy
            return self

        def with_output_file_config(
            self, output_file_config: OutputFileConfig
        ) -> FileSink.RowFormatBuilder:
            self._output_file_config = output_file_config
            return self

        def build(self) -> FileSink:
            return FileSink(
                self._base_path,
                self._encoder,
                self._bucket_assigner,
                self._rolling_policy,
                self._output_file_config,
                self._bucket_check_interval,
            )


@dataclass
class _Part:
    """An open in-progress part file of one bucket."""

    bucket: str
    inprogress: str  # path relative to the base path
    final: str
    stream: Any
    opened_ms: int
    last_write_ms: int
    size: int = 0


def _relative(bucket: str, name: str) -> str:
    return f"{bucket}/{name}" if bucket else name


@dataclass
class _Transaction:
    """The part files written since the last checkpoint: open ones by bucket, and rolled ones
    (closed by the rolling policy, still hidden)."""

    open: dict[str, _Part] = field(default_factory=dict)
    rolled: list[list[str]] = field(default_factory=list)


class FileSinkWriter(TwoPhaseCommitSinkWriter[_Transaction]):
    """One subtask's part files: in-progress -> pending (prepared at a snapshot) -> finished
    (committed when that checkpoint completes).

    A transaction is the set of part files written between two checkpoints; its committable is
    ``[[in-progress path, final path], ...]`` relative to the base path. The transaction prefix
    (the ``<sink id>`` at the end of in-progress names) defaults to one derived from the job id,
    the operator name and the base path.
    """

    def __init__(
        self,
        sink: FileSink,
        ctx: ReaderContext,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(ctx, default_transaction_prefix(ctx, salt=sink.base_path))
        self._sink = sink
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._fs: AbstractFileSystem
        self._fs, root = fsspec.core.url_to_fs(sink.base_path)
        self._root = root.rstrip("/") or "/"
        self._uid = str(uuid.uuid4())  # this attempt's writer id, keeps final names unique
        self._counter = 0
        self._known_buckets: set[str] = set()
        # nothing to connect to: recover at once (``open`` will find it done)
        self.recover(ctx.restored_state)

    # -- paths --

    def _abs(self, relative: str) -> str:
        return f"{self._root}/{relative}" if self._root != "/" else f"/{relative}"

    def _inprogress_pattern(self, prefix: str) -> re.Pattern[str]:
        config = self._sink.output_file_config
        return re.compile(
            rf"^\.{re.escape(config.part_prefix)}-[0-9a-f-]{{36}}-\d+"
            rf"{re.escape(config.part_suffix)}\.inprogress\.{re.escape(prefix)}-(\d+)$"
        )

    # -- the transaction --

    def begin_transaction(self) -> _Transaction:
        return _Transaction()

    def invoke(self, txn: _Transaction, records: list) -> None:
        now = self._clock_ms()
        assigner = self._sink.bucket_assigner
        if not assigner.depends_on_record:
            self._write_bucket(txn, assigner.bucket_id(None, now), records, now)
            return
        for record in records:
            self._write_bucket(txn, assigner.bucket_id(record, now), [record], now)

    def _write_bucket(self, txn: _Transaction, bucket: str, records: list, now: int) -> None:
        encode = self._sink.encoder.encode
        data = [encode(r) for r in records]
        policy = self._sink.rolling_policy
        part = txn.open.get(bucket)
        if part is not None and policy.should_roll(
            part.size, part.opened_ms, part.last_write_ms, now
        ):
            self._roll(txn, part)
            part = None
        total = sum(map(len, data))
        if part is not None and part.size + total < policy.part_size:
            part.stream.write(b"".join(data))  # fast path: the whole batch fits
            part.size += total
            part.last_write_ms = now
            return
        for chunk in data:  # slow path: the part may fill up within this batch
            if part is None:
                part = self._open_part(txn, bucket, now)
            elif part.size >= policy.part_size:
                self._roll(txn, part)
                part = self._open_part(txn, bucket, now)
            part.stream.write(chunk)
            part.size += len(chunk)
            part.last_write_ms = now

    def _open_part(self, txn: _Transaction, bucket: str, now: int) -> _Part:
        config = self._sink.output_file_config
        final_name = f"{config.part_prefix}-{self._uid}-{self._counter}{config.part_suffix}"
        self._counter += 1
        if bucket not in self._known_buckets:
            self._fs.makedirs(self._abs(bucket) if bucket else self._root, exist_ok=True)
            self._known_buckets.add(bucket)
        inprogress = _relative(bucket, f".{final_name}.inprogress.{self.prefix}-{self.ctx.subtask_index}")
        part = _Part(
            bucket=bucket,
            inprogress=inprogress,
            final=_relative(bucket, final_name),
            stream=self._fs.open(self._abs(inprogress), "wb"),
            opened_ms=now,
            last_write_ms=now,
        )
        txn.open[bucket] = part
        return part

    @staticmethod
    def _roll(txn: _Transaction, part: _Part) -> None:
        """Close an in-progress part: it waits, hidden, for the transaction's commit."""
        part.stream.close()
        del txn.open[part.bucket]
        txn.rolled.append([part.inprogress, part.final])

    def pre_commit(self, txn: _Transaction) -> list[list[str]] | None:
        for part in list(txn.open.values()):
            self._roll(txn, part)
        return txn.rolled or None

    def commit(self, committable: list[list[str]]) -> None:
        for inprogress, final in committable:
            self._commit_file(inprogress, final)

    def _commit_file(self, inprogress: str, final: str) -> None:
        """Make a pending file visible; committing a second time is harmless."""
        src, dst = self._abs(inprogress), self._abs(final)
        try:
            self._fs.mv(src, dst)
        except FileNotFoundError:
            pass
        if self._fs.exists(src):
            raise NotFoundError(
                f"FileSink could not commit {dst}: the pending file is still at {src}",
                remedy="check that the sink's file system supports rename and is writable",
            )
        if not self._fs.exists(dst):
            raise NotFoundError(
                f"FileSink cannot commit {dst}: its pending file {src} is gone "
                f"(subtask {self.ctx.subtask_index})",
                remedy="restore from a later checkpoint, or check whether something deleted "
                "hidden files under the sink's base path",
            )

    def abort(self, txn: _Transaction) -> None:
        """Close the open part files without committing them (the next attempt deletes them)."""
        for part in list(txn.open.values()):
            part.stream.close()
        txn.open.clear()

    # -- recovery --

    def abort_lingering(self, prefixes: set[str], keep: list[Any]) -> None:
        """Delete the in-progress files of ``prefixes`` that belong to the subtasks this one
        stands in for — its own earlier attempts and, after a scale-down, the old subtasks
        that no longer exist — except those just committed (already renamed away)."""
        if not self._fs.exists(self._root):
            return
        kept = {inprogress for committable in keep for inprogress, _ in committable}
        patterns = [self._inprogress_pattern(p) for p in sorted(prefixes)]
        base = len(self._root.rstrip("/")) + 1
        for path in self._fs.find(self._root):
            name = path.rsplit("/", 1)[-1]
            for pattern in patterns:
                match = pattern.match(name)
                if match is not None and self.stands_in_for(int(match.group(1))):
                    if path[base:] not in kept:
                        self._fs.rm(path)
                    break
