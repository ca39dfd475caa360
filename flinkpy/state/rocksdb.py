"""The RocksDB keyed state backend: keyed state in an embedded RocksDB on the task's local disk.

``state.backend.type: rocksdb`` (or ``env.set_state_backend(EmbeddedRocksDBStateBackend())``)
keeps each subtask's keyed state in one RocksDB instance under a local working directory, so the
state is bounded by the disk, not by the task's memory: the memtables
(``state.backend.rocksdb.writebuffer.size`` x ``.count``) and the block cache
(``state.backend.rocksdb.block.cache-size``) are what it keeps in RAM. Every access serializes
(pickle, protocol 5); a snapshot is cheap (below). The byte layout — key group first, so a key
group is one contiguous range and a rescale is a range scan — is in flinkpy.state.rocksdb_keys;
keys compare by their serialized bytes, as in Flink's RocksDB backend.

Why RocksDB through ``rocksdict``: it is a maintained binding with wheels for Linux and macOS
(nothing to compile), a raw-bytes mode (our own encoding, readable by any RocksDB tool), point-in-
time reads and native checkpoints (hard-linked SST files, the base of incremental checkpoints).
An LSM tree writes sequentially and never rewrites a file, which is what incremental checkpoints
need; LevelDB (plyvel) has no checkpoints and a C++ build, and LMDB (a B-tree in one memory-
mapped file) rewrites pages in place, so a checkpoint is a copy of the whole file.

Snapshots. ``snapshot_sync()`` (on the task thread) creates a RocksDB iterator: RocksDB pins the
sequence number and the memtables and files of that moment, O(1) in the state size; the
uploader thread then walks it, streaming the canonical, backend-independent file
(flinkpy.state.canonical: a frame of keys at a time, so a savepoint of a store larger than memory
needs no more memory than a frame; it restores on the heap backend and vice versa, and
``restore_file`` reads one back frame by frame). (rocksdict 0.3's ``Snapshot.iter()``
reads the latest data rather than the snapshot's, so the iterator is the point-in-time view.)
``native_checkpoint(dir)`` flushes the memtables and hard-links the DB's files into ``dir``
(incremental checkpoints, flinkpy.state.incremental); ``restore_native(dirs)`` opens such
directories again, adopting one as the working DB when its key groups are exactly ours.

The working directory (``state.backend.rocksdb.localdir``, default the system's temporary
directory, as Flink's ``io.tmp.dirs``) holds ``flinkpy-rocksdb-<pid>-*`` per backend; ``close()``
deletes it, and a new backend deletes the directories of task processes that died without
closing theirs (a SIGKILLed task).

>>> import tempfile
>>> from flinkpy.datastream.state import ListStateDescriptor
>>> backend = RocksDBKeyedStateBackend(128, range(0, 128), local_dir=tempfile.mkdtemp())
>>> seen = backend.get_partitioned_state(ListStateDescriptor("seen"))
>>> backend.set_current_key("a"); seen.add(1); seen.add(2)
>>> seen.get(), backend.snapshot()["states"]["seen"]["key_groups"]
([1, 2], {55: {'a': [1, 2]}})
>>> backend.close()
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flinkpy.common.state import StateDescriptor
from flinkpy.errors import ConfigurationError, FlinkpyError
from flinkpy.state import rocksdb_keys as rk
from flinkpy.state.backend import NO_KEY, KeyedStateBackendBase
from flinkpy.state.rocksdb_snapshot import RocksDBSnapshot
from flinkpy.state.rocksdb_states import STATE_CLASSES, RocksTable, scan

MB = 1 << 20
DIR_PREFIX = "flinkpy-rocksdb-"
#: key groups are never shared with a snapshot on this backend: nothing ever needs a thaw
_NEVER_FROZEN: frozenset[int] = frozenset()


@dataclass(frozen=True)
class RocksDBOptions:
    """The memory and disk knobs, with Flink's option names (``from_config``)."""

    local_dir: str | None = None
    block_cache_size: int = 8 * MB
    write_buffer_size: int = 8 * MB
    write_buffer_count: int = 2
    #: a bloom filter per SST (10 bits a key): a read of a key a file does not hold skips the
    #: file — state reads are point lookups, many of keys seen for the first time
    use_bloom_filter: bool = True
    #: LEVEL or UNIVERSAL (``state.backend.rocksdb.compaction.style``)
    compaction_style: str = "LEVEL"
    max_size_level_base: int = 256 * MB
    target_file_size_base: int = 64 * MB

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RocksDBOptions:
        """From ``state.backend.rocksdb.*`` settings (strings, as a job's configuration has them)."""
        from flinkpy.config import BoolType, EnumType, IntType, MemorySizeType

        def parse(key: str, type_: Any, default: Any) -> Any:
            raw = config.get(key)
            if raw is None:
                return default
            try:
                return type_.parse(raw)
            except ValueError:
                raise ConfigurationError(f"{key}: {raw!r} is not {type_.allowed}") from None

        return cls(
            local_dir=config.get("state.backend.rocksdb.localdir") or None,
            block_cache_size=parse("state.backend.rocksdb.block.cache-size", MemorySizeType(), cls.block_cache_size),
            write_buffer_size=parse("state.backend.rocksdb.writebuffer.size", MemorySizeType(), cls.write_buffer_size),
            write_buffer_count=parse("state.backend.rocksdb.writebuffer.count", IntType(1), cls.write_buffer_count),
            use_bloom_filter=parse("state.backend.rocksdb.use-bloom-filter", BoolType(), cls.use_bloom_filter),
            compaction_style=parse("state.backend.rocksdb.compaction.style", EnumType("LEVEL", "UNIVERSAL"), cls.compaction_style),
            max_size_level_base=parse("state.backend.rocksdb.compaction.level.max-size-level-base", MemorySizeType(), cls.max_size_level_base),
            target_file_size_base=parse("state.backend.rocksdb.compaction.level.target-file-size-base", MemorySizeType(), cls.target_file_size_base),
        )


def open_db(path: str, options: RocksDBOptions, *, read_only: bool = False) -> Any:
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(options.write_buffer_size)
    opts.set_max_write_buffer_number(options.write_buffer_count)
    opts.set_max_background_jobs(2)
    opts.set_keep_log_file_num(2)
    if options.compaction_style == "UNIVERSAL":
        opts.set_compaction_style(rocksdict.DBCompactionStyle.universal())
    else:
        opts.set_compaction_style(rocksdict.DBCompactionStyle.level())
    opts.set_max_bytes_for_level_base(options.max_size_level_base)
    opts.set_target_file_size_base(options.target_file_size_base)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(rocksdict.Cache(options.block_cache_size))
    if options.use_bloom_filter:
        table.set_bloom_filter(10, False)
    table.set_cache_index_and_filter_blocks(True)
    opts.set_block_based_table_factory(table)
    if read_only:
        return rocksdict.Rdict(path, opts, access_type=rocksdict.AccessType.read_only())
    db = rocksdict.Rdict(path, opts)
    # No write-ahead log: the working DB is not durable state; checkpoints are (a native
    # checkpoint flushes the memtables first, so it needs no log either).
    writes = rocksdict.WriteOptions()
    writes.disable_wal = True
    db.set_write_options(writes)
    return db


def sweep_dead_working_dirs(parent: str) -> None:
    """Delete working directories whose task process is gone (it was killed before close())."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(DIR_PREFIX):
            continue
        try:
            pid = int(name[len(DIR_PREFIX) :].split("-", 1)[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        except (ValueError, PermissionError):
            continue


class RocksDBKeyedStateBackend(KeyedStateBackendBase):
    """Keyed state of one subtask in RocksDB; the same surface as HeapKeyedStateBackend.

    Not thread-safe for writes: the task thread owns it; a snapshot's asynchronous part reads
    a point-in-time iterator from another thread.
    """

    def __init__(self, max_parallelism: int, key_group_range: range, *, local_dir: str | None = None, options: RocksDBOptions | None = None) -> None:
        super().__init__(max_parallelism, key_group_range)
        self.options = options or RocksDBOptions(local_dir=local_dir)
        parent = local_dir or self.options.local_dir or tempfile.gettempdir()
        try:
            os.makedirs(parent, exist_ok=True)
            sweep_dead_working_dirs(parent)
            self.working_dir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir=parent)
        except OSError as e:
            raise ConfigurationError(
                f"cannot create the RocksDB working directory under {parent}: {e}",
                remedy="set state.backend.rocksdb.localdir to a writable local directory",
            ) from None
        #: where native checkpoints are made (same file system, so they are hard links)
        self.working_root = self.working_dir
        self._db_path = os.path.join(self.working_dir, "db")
        self.db: Any = open_db(self._db_path, self.options)
        #: (key group bytes, length-prefixed key bytes) of the current key; None: no key
        self._cursor: tuple[bytes, bytes] | None = None
        self._tables: dict[str, RocksTable] = {}
        #: every state the DB knows: name -> {"kind": ..., "ttl_ms": ...} (also kept in the DB)
        self._meta: dict[str, dict[str, Any]] = {}
        self._ids: dict[bytes, str] = {}

    # -- current key --------------------------------------------------------------------
    def set_current_key_and_group(self, key: Any, key_group: int) -> None:
        """Fast path for callers that already know the key group (it is not checked)."""
        if key is not self._current_key or key_group != self._current_group:
            self._current_key = key
            self._current_group = key_group
            self._cursor = (rk.group_bytes(key_group), rk.key_part(key))
        if self._record_cleaners:
            for cleaner in self._record_cleaners:
                cleaner.step()

    def clear_current_key(self) -> None:
        self._current_key = NO_KEY
        self._current_group = None
        self._cursor = None

    def rebind(self) -> None:
        """Nothing to re-point: state objects read the DB for the current key at each access."""

    # -- states and tables --------------------------------------------------------------
    def _register(self, name: str, kind: str | None = None) -> None:
        sid = rk.state_id(name)
        other = self._ids.get(sid)
        if other is not None and other != name:
            raise FlinkpyError(
                f"state names {other!r} and {name!r} have the same 4-byte id in the RocksDB backend",
                remedy="rename one of the two states",
            )
        self._ids[sid] = name
        entry = {"kind": kind or self._kinds.get(name, "value"), "ttl_ms": self._ttl_ms(name),
                 **self.undeclared_ttl().get(name, {})}
        if self._meta.get(name) != entry:
            self._meta[name] = entry
            self.db.put(rk.meta_key(name), rk.dump(entry))

    def _ttl_ms(self, name: str) -> int | None:
        policy = self._ttl.get(name)
        return policy.ttl_ms if policy is not None else self._restored_ttl.get(name)

    def _new_state(self, name: str, kind: str, descriptor: StateDescriptor) -> Any:
        cls = STATE_CLASSES[kind]
        if kind in ("reducing", "aggregating"):
            return cls(name, self, descriptor)  # type: ignore[call-arg]
        return cls(name, self)

    def get_partitioned_state(self, descriptor: StateDescriptor) -> Any:
        state = super().get_partitioned_state(descriptor)
        self._register(descriptor.name, self._kinds[descriptor.name])
        return state

    def kind_of(self, name: str) -> str:
        return self._kinds.get(name, "value")

    def table(self, state_name: str) -> RocksTable:
        """A write-through view of ``state_name`` (key group -> {key: value}) for engine fast paths."""
        t = self._tables.get(state_name)
        if t is None:
            self._register(state_name)
            t = self._tables[state_name] = RocksTable(self, state_name)
        return t

    def frozen(self, state_name: str) -> frozenset[int]:
        """Always empty: a snapshot reads a point-in-time view of the DB, never a shared dict."""
        return _NEVER_FROZEN

    def thaw(self, state_name: str, key_group: int) -> Any:
        return self.table(state_name)[key_group]

    def state_names(self) -> list[str]:
        return list(self._meta)

    def _entries(self) -> Iterable[tuple[bytes, bytes]]:
        """(state id, key part) of every (state, key) with state, in DB order."""
        r = self.key_group_range
        upper = rk.group_bytes(r.stop)
        last = None
        for k, _ in self.db.items(from_key=rk.group_bytes(r.start)):
            if k >= upper:
                return
            kpart, _rest = rk.split_key_part(k)
            item = (k[:6], kpart)
            if item != last:
                last = item
                yield item

    def num_keys(self) -> int:
        """The number of distinct keys that have any state (a scan of the DB)."""
        return len({(sid[:2], kpart) for sid, kpart in self._entries()})

    def num_entries(self) -> int:
        """The number of (state, key) entries (a scan of the DB)."""
        return sum(1 for _ in self._entries())

    def state_summary(self) -> dict[str, dict[str, Any]]:
        """The states and their kinds, without a scan (for native checkpoints' metadata)."""
        out: dict[str, dict[str, Any]] = {}
        for name, m in self._meta.items():
            out[name] = {"kind": m["kind"]}
            if self._ttl_ms(name) is not None:
                out[name]["ttl_ms"] = self._ttl_ms(name)
            elif m.get("ttl_unknown"):
                out[name]["ttl_unknown"] = True
        return out

    # -- snapshots ----------------------------------------------------------------------
    def snapshot_sync(self) -> RocksDBSnapshot:
        """The synchronous part: a point-in-time iterator, O(1) in the state size."""
        ttl = {name: (policy, self.ttl_clock()) for name, policy in self._ttl.items()}
        return RocksDBSnapshot(self.db.iter(), dict(self._meta), self.key_group_range, ttl)

    def snapshot(self) -> dict[str, Any]:
        """The canonical document (flinkpy.state.backend), read from the DB now."""
        return self.snapshot_sync().to_dict()

    def restore_frames(self, states: Mapping[str, Mapping[str, Any]], frames: Iterable[tuple[str, int, list[tuple[Any, Any]]]]) -> None:
        import rocksdict

        kinds = {}
        for name, entry in states.items():
            kinds[name] = self._check_restored(name, entry)
            self._register(name, kinds[name])
        for name, kg, entries in frames:
            if kg not in self.key_group_range or not entries:
                continue
            kind = kinds[name]
            prefix = rk.group_prefix(kg, rk.state_id(name))
            batch = rocksdict.WriteBatch(raw_mode=True)
            for key, value in entries:
                k = prefix + rk.key_part(key)
                if kind == "map":
                    for uk, v in value.items():
                        batch.put(k + rk.user_key_bytes(uk), rk.dump(v))
                elif kind == "list":
                    if value:
                        batch.put(k, rk.dump_list(list(value)))
                else:
                    batch.put(k, rk.dump(value))
            self.db.write(batch)

    # -- native checkpoints (incremental checkpoints build on them) ----------------------
    def native_checkpoint(self, target_dir: str) -> list[str]:
        """Flush the memtables and create a RocksDB checkpoint in ``target_dir`` (which must not
        exist): hard links to the immutable SST files plus copies of the small metadata files.
        The synchronous part of an incremental checkpoint; returns the file names."""
        import rocksdict

        self.db.flush(True)
        rocksdict.Checkpoint(self.db).create_checkpoint(target_dir)
        return sorted(os.listdir(target_dir))

    def restore_native(self, dirs: list[tuple[str, range]]) -> None:
        """Restore from DB directories of a native checkpoint, each with the key groups it covers.

        One directory whose range is exactly ours becomes the working DB (its SSTs hard-linked);
        otherwise our key groups are copied out of each by range scans (a rescale).
        """
        mine = self.key_group_range
        if len(dirs) == 1 and (dirs[0][1].start, dirs[0][1].stop) == (mine.start, mine.stop):
            self.db.close()
            shutil.rmtree(self._db_path, ignore_errors=True)
            _link_tree(dirs[0][0], self._db_path)
            self.db = open_db(self._db_path, self.options)
            for state in self._states.values():
                state._db = self.db
        else:
            for path, covered in dirs:
                self._copy_range(path, range(max(covered.start, mine.start), min(covered.stop, mine.stop)))
        for k, v in scan(self.db, rk.META):
            name = k[len(rk.META) :].decode("utf-8")
            entry = rk.load(v)
            kind = self._check_restored(name, entry)
            self._register(name, kind)

    def _copy_range(self, path: str, groups: range) -> None:
        import rocksdict

        src = open_db(path, self.options, read_only=True)
        try:
            for k, v in scan(src, rk.META):
                if self.db.get(k) is None:
                    self.db.put(k, v)
            if len(groups) == 0:
                return
            upper = rk.group_bytes(groups.stop)
            batch = rocksdict.WriteBatch(raw_mode=True)
            n = 0
            for k, v in src.items(from_key=rk.group_bytes(groups.start)):
                if k >= upper:
                    break
                batch.put(k, v)
                n += 1
                if n % 10_000 == 0:
                    self.db.write(batch)
                    batch = rocksdict.WriteBatch(raw_mode=True)
            self.db.write(batch)
        finally:
            src.close()

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Close the DB and delete the working directory (idempotent)."""
        db, self.db = self.db, None
        if db is not None:
            try:
                db.close()
            finally:
                shutil.rmtree(self.working_dir, ignore_errors=True)

    dispose = close

    def __repr__(self) -> str:
        return f"RocksDBKeyedStateBackend({self._range_text()}, dir={self.working_dir}, states={sorted(self._meta)})"


def _link_tree(src: str, dst: str) -> None:
    """Copy a DB directory: SST files (immutable) as hard links where possible, others copied."""
    os.makedirs(dst)
    for name in os.listdir(src):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if name.endswith(".sst"):
            try:
                os.link(s, d)
                continue
            except OSError:
                pass
        shutil.copy2(s, d)
