"""The state objects and raw tables of the RocksDB backend: every read and write goes to the DB.

A state object reads its entry for the backend's current key (``backend._cursor``: the key
group's 2 bytes and the length-prefixed serialized key, computed once per key) and deserializes
it; a write serializes and puts. So, unlike on the heap, a value read from state is a private
copy: changing it in place changes nothing until it is written back with ``update()`` — the
contract of Flink's state API, which flinkpy's engine code keeps on both backends.

:class:`RocksTable` is what ``backend.table(name)`` returns: a mapping key group -> a
write-through view of that group's ``{key: value}`` (list state: lists, map state: dicts), for
the engine's fast paths (timers, keyed reduce, TTL cleanup).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from flinkpy.common.state import AggregatingState, ListState, MapState, ReducingState, ValueState
from flinkpy.state import rocksdb_keys as rk
from flinkpy.state.backend import no_current_key

_dump, _load = rk.dump, rk.load


def scan(db: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of ``db`` whose key starts with ``prefix``, in key order."""
    n = len(prefix)
    for k, v in db.items(from_key=prefix):
        if k[:n] != prefix:
            return
        yield k, v


def delete_prefix(db: Any, prefix: bytes) -> None:
    keys = [k for k, _ in scan(db, prefix)]
    for k in keys:
        del db[k]


class _RocksState:
    __slots__ = ("name", "sid", "_backend", "_db")

    def __init__(self, name: str, backend: Any) -> None:
        self.name = name
        self.sid = rk.state_id(name)
        self._backend = backend
        self._db = backend.db

    def _key(self) -> bytes:
        cursor = self._backend._cursor
        if cursor is None:
            raise no_current_key()
        return cursor[0] + self.sid + cursor[1]

    def clear(self) -> None:
        self._db.delete(self._key())


class RocksValueState(_RocksState, ValueState):
    __slots__ = ()

    def value(self) -> Any:
        raw = self._db.get(self._key())
        return None if raw is None else _load(raw)

    def update(self, value: Any) -> None:
        if value is None:
            self._db.delete(self._key())
        else:
            self._db.put(self._key(), _dump(value))


class RocksListState(_RocksState, ListState):
    """Elements as concatenated pickles: ``add`` appends bytes, decoding nothing."""

    __slots__ = ()

    def get(self) -> list[Any]:
        raw = self._db.get(self._key())
        return rk.load_list(raw) if raw else []

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"cannot add None to list state {self.name!r}")
        k = self._key()
        raw = self._db.get(k)
        self._db.put(k, _dump(value) if raw is None else raw + _dump(value))

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if not values:
            return
        if any(v is None for v in values):
            raise ValueError(f"cannot add None to list state {self.name!r}")
        k = self._key()
        raw = self._db.get(k)
        self._db.put(k, (raw or b"") + rk.dump_list(values))

    def update(self, values: Iterable[Any]) -> None:
        values = list(values) if values is not None else []
        if not values:
            self._db.delete(self._key())
            return
        if any(v is None for v in values):
            raise ValueError(f"cannot add None to list state {self.name!r}")
        self._db.put(self._key(), rk.dump_list(values))


class RocksMapState(_RocksState, MapState):
    """One DB entry per user key, after the key's prefix: ``get``/``put`` touch one entry."""

    __slots__ = ()

    def _entries(self) -> Iterator[tuple[bytes, bytes]]:
        prefix = self._key()
        n = len(prefix)
        for k, v in scan(self._db, prefix):
            yield k[n:], v

    def get(self, key: Any) -> Any:
        raw = self._db.get(self._key() + rk.user_key_bytes(key))
        return None if raw is None else _load(raw)

    def put(self, key: Any, value: Any) -> None:
        self._db.put(self._key() + rk.user_key_bytes(key), _dump(value))

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        prefix = self._key()
        for k, v in dict_value.items():
            self._db.put(prefix + rk.user_key_bytes(k), _dump(v))

    def remove(self, key: Any) -> None:
        self._db.delete(self._key() + rk.user_key_bytes(key))

    def contains(self, key: Any) -> bool:
        return self._db.get(self._key() + rk.user_key_bytes(key)) is not None

    def keys(self) -> Iterable[Any]:
        return [_load(uk) for uk, _ in self._entries()]

    def values(self) -> Iterable[Any]:
        return [_load(v) for _, v in self._entries()]

    def items(self) -> Iterable[tuple[Any, Any]]:
        return [(_load(uk), _load(v)) for uk, v in self._entries()]

    def is_empty(self) -> bool:
        return next(self._entries(), None) is None

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def clear(self) -> None:
        delete_prefix(self._db, self._key())


class RocksReducingState(RocksValueState, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(self, name: str, backend: Any, descriptor: Any) -> None:
        super().__init__(name, backend)
        self._reduce = descriptor.reduce

    def get(self) -> Any:
        return self.value()

    def add(self, value: Any) -> None:
        current = self.value()
        self.update(value if current is None else self._reduce(current, value))


class RocksAggregatingState(RocksValueState, AggregatingState):
    __slots__ = ("_agg",)

    def __init__(self, name: str, backend: Any, descriptor: Any) -> None:
        super().__init__(name, backend)
        self._agg = descriptor.agg_function

    def get(self) -> Any:
        acc = self.value()
        return None if acc is None else self._agg.get_result(acc)

    def add(self, value: Any) -> None:
        acc = self.value()
        self.update(self._agg.add(value, self._agg.create_accumulator() if acc is None else acc))


STATE_CLASSES: dict[str, type[_RocksState]] = {
    "value": RocksValueState,
    "list": RocksListState,
    "map": RocksMapState,
    "reducing": RocksReducingState,
    "aggregating": RocksAggregatingState,
}


# -- raw tables ------------------------------------------------------------------------------


class Codec:
    """How one state kind's per-key value is read from and written to the DB, in the shape the
    canonical snapshot has (a list for list state, a dict for map state)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def read(self, db: Any, k: bytes) -> Any:
        """The value of entry key ``k``; ``rk.META`` (a sentinel) when absent."""
        if self.kind == "map":
            m = {_load(uk): _load(v) for uk, v in ((ek[len(k):], v) for ek, v in scan(db, k))}
            return m if m else _ABSENT
        raw = db.get(k)
        if raw is None:
            return _ABSENT
        return rk.load_list(raw) if self.kind == "list" else _load(raw)

    def write(self, db: Any, k: bytes, value: Any) -> None:
        if self.kind == "map":
            delete_prefix(db, k)
            for uk, v in value.items():
                db.put(k + rk.user_key_bytes(uk), _dump(v))
        elif self.kind == "list":
            if value:
                db.put(k, rk.dump_list(list(value)))
            else:
                db.delete(k)
        else:
            db.put(k, _dump(value))

    def delete(self, db: Any, k: bytes) -> None:
        if self.kind == "map":
            delete_prefix(db, k)
        else:
            db.delete(k)


_ABSENT: Any = object()


class RocksGroup(MutableMapping):
    """``{key: value}`` of one state in one key group, read from and written to the DB."""

    __slots__ = ("_db", "_prefix", "_codec")

    def __init__(self, db: Any, prefix: bytes, codec: Codec) -> None:
        self._db = db
        self._prefix = prefix
        self._codec = codec

    def __getitem__(self, key: Any) -> Any:
        v = self._codec.read(self._db, self._prefix + rk.key_part(key))
        if v is _ABSENT:
            raise KeyError(key)
        return v

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._codec.read(self._db, self._prefix + rk.key_part(key))
        return default if v is _ABSENT else v

    def __contains__(self, key: Any) -> bool:
        k = self._prefix + rk.key_part(key)
        if self._codec.kind == "map":
            return next(scan(self._db, k), None) is not None
        return self._db.get(k) is not None

    def __setitem__(self, key: Any, value: Any) -> None:
        self._codec.write(self._db, self._prefix + rk.key_part(key), value)

    def __delitem__(self, key: Any) -> None:
        if key not in self:
            raise KeyError(key)
        self._codec.delete(self._db, self._prefix + rk.key_part(key))

    def pop(self, key: Any, *default: Any) -> Any:
        v = self._codec.read(self._db, self._prefix + rk.key_part(key))
        if v is _ABSENT:
            if default:
                return default[0]
            raise KeyError(key)
        self._codec.delete(self._db, self._prefix + rk.key_part(key))
        return v

    def _key_parts(self) -> Iterator[bytes]:
        last = None
        for k, _ in scan(self._db, self._prefix):
            kpart, _rest = rk.split_key_part(k)
            if kpart != last:  # a map state has one entry per user key
                last = kpart
                yield kpart

    def __iter__(self) -> Iterator[Any]:
        for kpart in self._key_parts():
            yield _load(kpart[4:])

    def __len__(self) -> int:
        return sum(1 for _ in self._key_parts())

    def __bool__(self) -> bool:
        return next(scan(self._db, self._prefix), None) is not None


class RocksTable(Mapping):
    """``backend.table(name)``: key group -> :class:`RocksGroup`, for the groups of the
    backend's range. Every group "exists" (an empty view); iteration yields the non-empty ones."""

    def __init__(self, backend: Any, name: str) -> None:
        self._backend = backend
        self.name = name
        self.sid = rk.state_id(name)
        self._groups: dict[int, RocksGroup] = {}

    def _codec(self) -> Codec:
        return Codec(self._backend.kind_of(self.name))

    def get(self, key_group: int, default: Any = None) -> RocksGroup | Any:  # type: ignore[override]
        if key_group not in self._backend.key_group_range:
            return default
        g = self._groups.get(key_group)
        if g is None or g._db is not self._backend.db or g._codec.kind != self._backend.kind_of(self.name):
            g = self._groups[key_group] = RocksGroup(self._backend.db, rk.group_prefix(key_group, self.sid), self._codec())
        return g

    def __getitem__(self, key_group: int) -> RocksGroup:
        g = self.get(key_group)
        if g is None:
            raise KeyError(key_group)
        return g

    def __setitem__(self, key_group: int, values: Mapping[Any, Any]) -> None:
        g = self[key_group]
        for k in list(g):
            del g[k]
        g.update(values)

    def get_many(self, keys: Iterable[tuple[Any, int]], default: Any) -> dict[Any, Any]:
        """``{key: value or default}`` for ``(key, key group)`` pairs of a value-kind table, in
        one multi-get."""
        pairs = list(keys)
        sid = self.sid
        raws = self._backend.db.get([rk.group_prefix(kg, sid) + rk.key_part(k) for k, kg in pairs]) if pairs else []
        return {k: default if raw is None else _load(raw) for (k, _), raw in zip(pairs, raws)}

    def put_many(self, items: Iterable[tuple[int, Any, Any]]) -> None:
        """Write ``(key group, key, value)`` entries of a value-kind table in one write batch."""
        import rocksdict

        batch = rocksdict.WriteBatch(raw_mode=True)
        sid = self.sid
        for kg, key, value in items:
            batch.put(rk.group_prefix(kg, sid) + rk.key_part(key), _dump(value))
        self._backend.db.write(batch)

    def __iter__(self) -> Iterator[int]:
        return (kg for kg in self._backend.key_group_range if self[kg])

    def __len__(self) -> int:
        return sum(1 for _ in self)
