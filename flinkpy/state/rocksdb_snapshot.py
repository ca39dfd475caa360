"""The asynchronous part of a RocksDB backend snapshot: walk a point-in-time iterator into the
canonical document (flinkpy.state.backend), on the checkpoint uploader thread.

It has the surface of the heap backend's FrozenSnapshot (``to_dict``, ``serialize``,
``summary``, ``empty``, ``key_group_range``), so the task checkpointer treats both alike. The
document is built once, on first use, and the iterator released (RocksDB frees the files and
memtables it pinned).
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

from flinkpy.state import rocksdb_keys as rk
from flinkpy.state.backend import SNAPSHOT_VERSION
from flinkpy.state.heap import ttl_entry


class RocksDBSnapshot:
    def __init__(self, iterator: Any, meta: dict[str, dict[str, Any]], key_group_range: range, ttl: dict[str, tuple[Any, int]]) -> None:
        self._it = iterator
        self.meta = meta
        self.key_group_range = key_group_range
        #: time-to-live policies of states, with the time of the snapshot (full-snapshot cleanup)
        self.ttl = ttl
        self._doc: dict[str, Any] | None = None
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def _groups(self) -> dict[str, dict[int, dict[Any, Any]]]:
        """Every state's key groups, read from the iterator."""
        names = {rk.state_id(name): name for name in self.meta}
        out: dict[str, dict[int, dict[Any, Any]]] = {name: {} for name in self.meta}
        r = self.key_group_range
        upper = rk.group_bytes(r.stop)
        it = self._it
        it.seek(rk.group_bytes(r.start))
        load, load_list, split = rk.load, rk.load_list, rk.split_key_part
        map_of: dict[Any, Any] | None = None
        last_map: tuple[bytes, bytes] | None = None
        while it.valid():
            k = it.key()
            if k >= upper:
                break
            name = names.get(k[2:6])
            if name is not None:
                kg = int.from_bytes(k[:2], "big")
                kpart, rest = split(k)
                kind = self.meta[name]["kind"]
                group = out[name].get(kg)
                if group is None:
                    group = out[name][kg] = {}
                if kind == "map":
                    # the entries of one key (one per user key) are adjacent
                    if last_map != (k[:6], kpart):
                        last_map = (k[:6], kpart)
                        map_of = group[load(kpart[4:])] = {}
                    map_of[load(rest)] = load(it.value())  # type: ignore[index]
                elif kind == "list":
                    group[load(kpart[4:])] = load_list(it.value())
                else:
                    group[load(kpart[4:])] = load(it.value())
            it.next()
        return out

    def to_dict(self) -> dict[str, Any]:
        """The canonical document (the same a heap backend with this state would write)."""
        with self._lock:
            if self._doc is None:
                groups = self._groups()
                self._it = None  # release what the iterator pins
                states = {}
                for name, m in self.meta.items():
                    policy, now = self.ttl.get(name, (None, 0))
                    states[name] = ttl_entry(m["kind"], groups[name], policy, lambda now=now: now)
                    self._counts[name] = sum(len(g) for g in states[name]["key_groups"].values())
                self._doc = {"version": SNAPSHOT_VERSION, "states": states}
            return self._doc

    def serialize(self) -> bytes:
        return pickle.dumps(self.to_dict(), protocol=5)

    def summary(self) -> dict[str, dict[str, Any]]:
        self.to_dict()
        return {name: {"kind": m["kind"], "entries": self._counts[name]} for name, m in self.meta.items()}

    @property
    def empty(self) -> bool:
        self.to_dict()
        return not any(self._counts.values())
