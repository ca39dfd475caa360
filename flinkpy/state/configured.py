"""The keyed state backend a job's ``state.backend.*`` settings name, built in the task process.

The DataStream API's backend objects (:mod:`flinkpy.datastream.state_backend`) only record
settings; the task, which sits below the API, builds the backend from those settings here.

>>> backend = create_keyed_backend({"state.backend.type": "hashmap"}, 128, range(0, 128))
>>> type(backend).__name__
'HeapKeyedStateBackend'
>>> check_type(" RocksDB ")
'rocksdb'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flinkpy.errors import ConfigurationError

#: the values of ``state.backend.type``
TYPES = ("hashmap", "rocksdb")


def check_type(type_name: str) -> str:
    """``state.backend.type`` normalised, or a ConfigurationError that names the choices."""
    t = str(type_name).strip().lower()
    if t not in TYPES:
        raise ConfigurationError(
            f"state.backend.type: {type_name!r} is not a state backend flinkpy has",
            remedy="use hashmap (keyed state in memory) or rocksdb (keyed state on local disk)",
        )
    return t


def create_keyed_backend(settings: Mapping[str, Any], max_parallelism: int, key_group_range: range) -> Any:
    """The keyed state backend of one subtask, from the job's ``state.backend.*`` settings."""
    if check_type(settings.get("state.backend.type", "hashmap")) == "rocksdb":
        # imported only when chosen: RocksDB's bindings are a heavy import for a task on the heap
        from flinkpy.state.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions

        return RocksDBKeyedStateBackend(max_parallelism, key_group_range, options=RocksDBOptions.from_config(settings))
    from flinkpy.state.heap import HeapKeyedStateBackend

    return HeapKeyedStateBackend(max_parallelism, key_group_range)
