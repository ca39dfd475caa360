"""State backends, as PyFlink names them: where keyed state lives while a job runs.

- ``HashMapStateBackend()`` (``state.backend.type: hashmap``, the default): keyed state in the
  task process's memory, in dicts organised by key group, snapshotted copy-on-write. Fastest;
  the state must fit in memory (flinkpy.state.heap).
- ``EmbeddedRocksDBStateBackend()`` (``state.backend.type: rocksdb``): keyed state in an
  embedded RocksDB on the TaskManager's local disk (``state.backend.rocksdb.localdir``), for
  state larger than memory; every access serializes, snapshots are flat in the state size, and
  incremental checkpoints upload only new files (flinkpy.state.rocksdb).

Checkpoint storage is configured apart from the backend (``execution.checkpointing.dir``), as in
current Flink, and snapshots are backend-independent: a savepoint taken on one backend restores
on the other.

>>> HashMapStateBackend().type_name, EmbeddedRocksDBStateBackend().type_name
('hashmap', 'rocksdb')
>>> backend_of("rocksdb", {"state.backend.rocksdb.block.cache-size": "16 mb"}).options.block_cache_size
16777216
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the task builds its keyed backend from the settings these objects record
# (flinkpy.state.configured.create_keyed_backend): these objects only name and configure one
from flinkpy.state.configured import check_type


class StateBackend:
    type_name = ""

    def settings(self) -> dict[str, str]:
        """The configuration this backend stands for (what ``env.set_state_backend`` records)."""
        return {"state.backend.type": self.type_name}

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashMapStateBackend(StateBackend):
    """Keyed state on the heap of the task process."""

    type_name = "hashmap"


class EmbeddedRocksDBStateBackend(StateBackend):
    """Keyed state in an embedded RocksDB on local disk, one instance per subtask.

    ``enable_incremental_checkpointing`` sets ``execution.checkpointing.incremental``;
    ``set_db_storage_path(path)`` sets ``state.backend.rocksdb.localdir``.
    """

    type_name = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: Any = None, options: Any = None) -> None:
        from flinkpy.state.rocksdb import RocksDBOptions

        self.enable_incremental_checkpointing = enable_incremental_checkpointing
        self.options = options or RocksDBOptions()

    def set_db_storage_path(self, path: str) -> None:
        from dataclasses import replace

        self.options = replace(self.options, local_dir=str(path))

    def set_db_storage_paths(self, *paths: str) -> None:
        if paths:
            self.set_db_storage_path(paths[0])

    def get_db_storage_paths(self) -> list[str]:
        return [self.options.local_dir] if self.options.local_dir else []

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self.enable_incremental_checkpointing)

    def settings(self) -> dict[str, str]:
        from flinkpy.state.rocksdb import RocksDBOptions

        out = super().settings()
        o, default = self.options, RocksDBOptions()
        # only what was set on this object: configuration given elsewhere (-D, flinkpy.yaml) stays
        if o.local_dir:
            out["state.backend.rocksdb.localdir"] = o.local_dir
        if o.block_cache_size != default.block_cache_size:
            out["state.backend.rocksdb.block.cache-size"] = f"{o.block_cache_size} b"
        if o.write_buffer_size != default.write_buffer_size:
            out["state.backend.rocksdb.writebuffer.size"] = f"{o.write_buffer_size} b"
        if o.write_buffer_count != default.write_buffer_count:
            out["state.backend.rocksdb.writebuffer.count"] = str(o.write_buffer_count)
        if self.enable_incremental_checkpointing is not None:
            out["execution.checkpointing.incremental"] = "true" if self.enable_incremental_checkpointing else "false"
        return out


def backend_of(type_name: str, settings: Mapping[str, Any] | None = None) -> StateBackend:
    """The backend ``state.backend.type`` names, configured by ``state.backend.*`` settings."""
    if check_type(type_name) == "rocksdb":
        from flinkpy.state.rocksdb import RocksDBOptions

        return EmbeddedRocksDBStateBackend(options=RocksDBOptions.from_config(settings or {}))
    return HashMapStateBackend()
