"""Incremental snapshots of the on-disk keyed state backend: upload what changed, reference the rest.

The store (RocksDB, an LSM tree) writes immutable sorted files (SSTs) and never changes one
after it is written; compaction replaces files by new ones. A checkpoint of the store is a set
of files, so checkpoint *N* only has to upload the SSTs that the checkpoint it builds on did
not have, and reference the others. The synchronous part (:class:`IncrementalSnapshot` made by
the task thread) is a native checkpoint of the store into a local directory — hard links, flat in
the state size; the asynchronous part (:meth:`IncrementalSnapshot.upload`) uploads:

- every SST the base checkpoint did not upload into the job's ``shared/`` directory (a fresh
  name each time), referencing the base's files for the others;
- the store's small private files (CURRENT, MANIFEST, OPTIONS) as one bundle in ``chk-<n>/``.

The keyed-state handle in `_metadata` is then a full description of the store::

    {"path": "<op>-<subtask>-keyed.rocksdb", "size", "checksum",      # the private bundle
     "format": "rocksdb-incremental", "key_groups": [a, b], "states": {...},
     "shared": [{"file": "000042.sst", "url": ".../shared/<uuid>-000042.sst",
                 "size", "checksum", "checkpoint_id": <the checkpoint that uploaded it>}]}

Restoring (:func:`download`) fetches the bundle and every shared file into a local directory the
store opens as it was. The JobManager counts references to shared files
(flinkpy.checkpoint.shared_state) and deletes one when no retained checkpoint needs it.
"""

from __future__ import annotations

import os
import pickle
import shutil
from typing import Any, Callable, Mapping

FORMAT = "rocksdb-incremental"


def is_incremental(handle: Mapping[str, Any] | None) -> bool:
    return bool(handle) and handle.get("format") == FORMAT  # type: ignore[union-attr]


class IncrementalSnapshot:
    """What the synchronous part of an incremental snapshot hands to the uploader thread.

    ``local_dir`` holds the store's native checkpoint (deleted after the upload); ``base`` maps
    SST file names to the shared handles of the checkpoint this one builds on.
    """

    empty = False

    def __init__(self, local_dir: str, key_group_range: range, summary: dict[str, dict[str, Any]], base: Mapping[str, dict[str, Any]]):
        self.local_dir = local_dir
        self.key_group_range = key_group_range
        self._summary = summary
        self.base = dict(base)

    def summary(self) -> dict[str, dict[str, Any]]:
        return self._summary

    def upload(
        self,
        checkpoint_id: int,
        write_private: Callable[[bytes], dict[str, Any]],
        write_shared: Callable[[str, str], dict[str, Any]],
    ) -> dict[str, Any]:
        """Upload new SSTs (``write_shared(local_path, file_name)``) and the private bundle
        (``write_private(data)``); return the keyed-state handle (without key groups/states)."""
        try:
            shared: list[dict[str, Any]] = []
            private: dict[str, bytes] = {}
            for name in sorted(os.listdir(self.local_dir)):
                path = os.path.join(self.local_dir, name)
                if not name.endswith(".sst"):
                    with open(path, "rb") as f:
                        private[name] = f.read()
                    continue
                known = self.base.get(name)
                if known is not None and known["size"] == os.path.getsize(path):
                    shared.append(dict(known))
                    continue
                handle = write_shared(path, name)
                shared.append({"file": name, **handle, "checkpoint_id": checkpoint_id})
            handle = write_private(pickle.dumps(private, protocol=5))
            return {**handle, "format": FORMAT, "shared": shared}
        finally:
            shutil.rmtree(self.local_dir, ignore_errors=True)

    def discard(self) -> None:
        shutil.rmtree(self.local_dir, ignore_errors=True)


def download(handle: Mapping[str, Any], read_private: Callable[[Mapping[str, Any]], bytes], fetch_shared: Callable[[Mapping[str, Any], str], None], target_dir: str,
             loads: Callable[[bytes], Any] = pickle.loads) -> str:
    """Materialise the store an incremental handle describes in ``target_dir``; return it.

    Every file is checked against its size and checksum while it is read; shared files are
    streamed to disk (``fetch_shared(handle, local_path)``), never held in memory whole.
    """
    os.makedirs(target_dir, exist_ok=True)
    for name, data in loads(read_private(handle)).items():
        with open(os.path.join(target_dir, name), "wb") as f:
            f.write(data)
    for f in handle.get("shared") or ():
        fetch_shared(f, os.path.join(target_dir, f["file"]))
    return target_dir


def shared_by_file(handle: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The shared files of a handle by SST name: what a store restored from it may build on."""
    return {f["file"]: dict(f) for f in handle.get("shared") or ()}


def read_keyed_state(storage: Any, checkpoint_dir: str, handle: Mapping[str, Any], *, restricted: bool = False) -> dict[str, Any]:
    """The canonical keyed-state document of one handle, whichever way it was written (a full
    snapshot file, or an incremental store read out key group by key group); ``restricted``
    decodes with ``flinkpy.state.safe_pickle`` (offline analysis of a snapshot not trusted)."""
    from flinkpy.state import safe_pickle

    if not is_incremental(handle):
        from flinkpy.state.canonical import loads

        return loads(storage.read_state(checkpoint_dir, handle), safe_pickle.load if restricted else pickle.load)
    import tempfile

    target = tempfile.mkdtemp(prefix="flinkpy-keyed-")
    try:
        download(handle, lambda h: storage.read_state(checkpoint_dir, h), storage.fetch_shared, target,
                 safe_pickle.loads if restricted else pickle.loads)
        first, last = handle["key_groups"]
        return read_canonical(target, range(first, last + 1), restricted=restricted)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def read_canonical(path: str, key_groups: range, *, restricted: bool = False) -> dict[str, Any]:
    """The canonical keyed-state document of a store directory (restored from an incremental
    checkpoint), key groups in ``key_groups`` only: how the heap backend restores from one."""
    from flinkpy.state import rocksdb_keys as rk
    from flinkpy.state.rocksdb import RocksDBOptions, open_db
    from flinkpy.state.rocksdb_snapshot import RocksDBSnapshot
    from flinkpy.state.rocksdb_states import scan

    db = open_db(path, RocksDBOptions(), read_only=True)
    try:
        from flinkpy.state import safe_pickle

        load = safe_pickle.loads if restricted else rk.load
        meta = {k[len(rk.META):].decode("utf-8"): load(v) for k, v in scan(db, rk.META)}
        snapshot = RocksDBSnapshot(db.iter(), meta, key_groups, {})
        if restricted:
            snapshot.load, snapshot.load_list = safe_pickle.loads, safe_pickle.load_list
        return snapshot.to_dict()
    finally:
        db.close()
