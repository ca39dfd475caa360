"""The asynchronous part of a RocksDB backend snapshot: walk a point-in-time iterator into the
canonical encoding (flinkpy.state.canonical), on the checkpoint uploader thread.

It has the surface of the heap backend's FrozenSnapshot (``write``, ``serialize``, ``to_dict``,
``summary``, ``empty``, ``key_group_range``), so the task checkpointer treats both alike.
``write`` streams: it holds one frame of keys at a time, never the state, so a savepoint of a
store larger than memory fits in a task's memory. The iterator is released once the snapshot
has been written (RocksDB frees the files and memtables it pinned).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import IO, Any

from flinkpy.state import rocksdb_keys as rk
from flinkpy.state.backend import SNAPSHOT_VERSION
from flinkpy.state.canonical import FrameWriter, write_document


class RocksDBSnapshot:
    def __init__(self, iterator: Any, meta: dict[str, dict[str, Any]], key_group_range: range, ttl: dict[str, tuple[Any, int]]) -> None:
        self._it = iterator
        self.meta = meta
        self.key_group_range = key_group_range
        #: time-to-live policies of states, with the time of the snapshot (full-snapshot cleanup)
        self.ttl = ttl
        self._counts: dict[str, int] | None = None
        self._doc: dict[str, Any] | None = None
        self._lock = threading.Lock()
        #: how keys and values are decoded: ``flinkpy.state.safe_pickle`` when analysing a
        #: snapshot offline (refuses classes that could run code), pickle's own otherwise
        self.load, self.load_list = rk.load, rk.load_list

    def _states(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, m in self.meta.items():
            out[name] = {"kind": m["kind"], **self._ttl_of(name, m)}
        return out

    def _ttl_of(self, name: str, meta: dict[str, Any]) -> dict[str, Any]:
        """A state's ``ttl_ms`` (its policy's; for a state restored and not declared since, the
        one its meta kept, or ``ttl_unknown``), as a snapshot's entry and summary record it."""
        policy, _ = self.ttl.get(name, (None, 0))
        if policy is not None:
            return {"ttl_ms": policy.ttl_ms}
        if meta.get("ttl_ms") is not None:
            return {"ttl_ms": meta["ttl_ms"]}
        return {"ttl_unknown": True} if meta.get("ttl_unknown") else {}

    def _walk(self) -> Iterator[tuple[str, int, Any, Any]]:
        """``(state, key group, key, value)`` of every key in range, in the store's order (a map
        state's key with all its entries), without what full-snapshot TTL cleanup drops."""
        from flinkpy.state.ttl import alive_value

        names = {rk.state_id(name): name for name in self.meta}
        cleanup = {name: (policy, now) for name, (policy, now) in self.ttl.items() if policy is not None and policy.full_snapshot}
        r = self.key_group_range
        upper = rk.group_bytes(r.stop)
        it = self._it
        it.seek(rk.group_bytes(r.start))
        load, load_list, split = self.load, self.load_list, rk.split_key_part
        pending: tuple[str, int, Any, dict[Any, Any]] | None = None  # a map key being gathered
        pending_id: tuple[bytes, bytes] | None = None

        def finish(item: tuple[str, int, Any, Any]) -> Iterator[tuple[str, int, Any, Any]]:
            name, kg, key, value = item
            if name in cleanup:
                policy, now = cleanup[name]
                value = alive_value(self.meta[name]["kind"], value, policy, now)
                if value is None:
                    return
            yield name, kg, key, value

        while it.valid():
            k = it.key()
            if k >= upper:
                break
            name = names.get(k[2:6])
            if name is not None:
                kpart, rest = split(k)
                kind = self.meta[name]["kind"]
                if kind == "map":
                    if pending_id != (k[:6], kpart):
                        if pending is not None:
                            yield from finish(pending)
                        pending_id = (k[:6], kpart)
                        pending = (name, int.from_bytes(k[:2], "big"), load(kpart[4:]), {})
                    pending[3][load(rest)] = load(it.value())  # type: ignore[index]
                else:
                    if pending is not None:
                        yield from finish(pending)
                        pending, pending_id = None, None
                    value = load_list(it.value()) if kind == "list" else load(it.value())
                    yield from finish((name, int.from_bytes(k[:2], "big"), load(kpart[4:]), value))
            it.next()
        if pending is not None:
            yield from finish(pending)

    def write(self, out: IO[bytes]) -> dict[str, int]:
        """Stream the canonical file to ``out``; return each state's key count."""
        with self._lock:
            if self._it is None:
                if self._doc is None:
                    raise RuntimeError("this snapshot has been written already")
                return write_document(out, self._doc)  # read out by to_dict() before
            writer = FrameWriter(out, self._states())
            for name, kg, key, value in self._walk():
                writer.add(name, kg, key, value)
            self._counts = writer.close()
            self._it = None  # release what the iterator pins
            return self._counts

    def serialize(self) -> bytes:
        out = io.BytesIO()
        self.write(out)
        return out.getvalue()

    def to_dict(self) -> dict[str, Any]:
        """The canonical document (the same a heap backend with this state would write), in
        memory: for small states and tools; checkpoints stream with ``write``."""
        with self._lock:
            if self._doc is None:
                if self._it is None:
                    raise RuntimeError("this snapshot has been written already")
                states = {name: dict(entry, key_groups={}) for name, entry in self._states().items()}
                counts = dict.fromkeys(states, 0)
                for name, kg, key, value in self._walk():
                    groups = states[name]["key_groups"]
                    group = groups.get(kg)
                    if group is None:
                        group = groups[kg] = {}
                    group[key] = value
                    counts[name] += 1
                self._doc, self._counts, self._it = {"version": SNAPSHOT_VERSION, "states": states}, counts, None
            return self._doc

    def summary(self) -> dict[str, dict[str, Any]]:
        if self._counts is None:
            self.to_dict()
        assert self._counts is not None
        out: dict[str, dict[str, Any]] = {}
        for name, m in self.meta.items():
            out[name] = {"kind": m["kind"], "entries": self._counts[name], **self._ttl_of(name, m)}
        return out

    @property
    def empty(self) -> bool:
        """Whether no registered state has a key in range (a seek, not a walk)."""
        if self._counts is not None:
            return not any(self._counts.values())
        with self._lock:
            ids = {rk.state_id(name) for name in self.meta}
            upper = rk.group_bytes(self.key_group_range.stop)
            it = self._it
            it.seek(rk.group_bytes(self.key_group_range.start))
            while it.valid() and it.key() < upper:
                if it.key()[2:6] in ids:
                    return False
                it.next()
            return True
