"""State backends, as PyFlink names them: where keyed state lives while a job runs.

``env.set_state_backend(HashMapStateBackend())`` (or ``state.backend.type: hashmap``) keeps keyed
state in the task's memory, in dicts organised by key group, snapshotted copy-on-write — the
backend flinkpy has. Checkpoint storage is configured apart from it
(``execution.checkpointing.dir``), as in current Flink.

``EmbeddedRocksDBStateBackend`` (``state.backend.type: rocksdb``) is accepted by the API so that
PyFlink programs load, but a job that asks for it is refused at submission with an explanation:
flinkpy has no on-disk backend yet, and running a job sized for one on the heap instead would
fail later, and worse.

>>> HashMapStateBackend().type_name
'hashmap'
"""

from __future__ import annotations

from typing import Any


class StateBackend:
    type_name = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashMapStateBackend(StateBackend):
    """Keyed state on the heap of the task process."""

    type_name = "hashmap"


class EmbeddedRocksDBStateBackend(StateBackend):
    """Keyed state in an embedded store on local disk — not available yet (refused at submission)."""

    type_name = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: Any = None) -> None:
        self.enable_incremental_checkpointing = enable_incremental_checkpointing


def backend_of(type_name: str) -> StateBackend:
    return EmbeddedRocksDBStateBackend() if type_name == "rocksdb" else HashMapStateBackend()
