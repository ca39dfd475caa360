"""State time-to-live on both keyed state backends (``StateTtlConfig``, as PyFlink configures it).

A state whose descriptor has ``enable_time_to_live(config)`` stores each value with the time it
was last written (or, with ``OnReadAndWrite``, read): value, reducing and aggregating state as
``(value, timestamp)`` per key, list state per element, map state per entry — Flink's
granularity. A value older than the TTL is *expired*: with ``NeverReturnExpired`` it reads as
absent (and is dropped on the spot); with ``ReturnExpiredIfNotCleanedUp`` it is returned until a
cleanup removes it. Cleanups:

- on access: an expired value that is read is removed (``NeverReturnExpired``);
- ``cleanup_full_snapshot()``: expired values are left out of every snapshot (checkpoints and
  savepoints), so a restore never sees them;
- ``cleanup_incrementally(n, every_record)``: each state access (and, with ``every_record``,
  each record) also checks the next ``n`` entries of the state, round-robin over its key groups,
  and removes the expired ones — the background cleanup of both backends (Flink's RocksDB
  backend cleans up in compactions instead; rocksdict has no compaction filter).

Time is processing time in milliseconds from the backend's ``ttl_clock`` (injected in tests).
Timestamps are checkpointed with the values, so a restored state expires when it would have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from flinkpy.common.state import AggregatingState, ListState, MapState, ReducingState, ValueState

Clock = Callable[[], int]


@dataclass(frozen=True)
class TtlPolicy:
    ttl_ms: int
    update_on_read: bool
    return_expired: bool
    full_snapshot: bool
    incremental: int  # entries checked per access; 0: none
    incremental_every_record: bool

    @classmethod
    def of(cls, config: Any) -> TtlPolicy:
        from flinkpy.common.state import StateTtlConfig

        strategies = config.get_cleanup_strategies()
        incremental = strategies.get("incremental")
        if incremental:
            size, every = int(incremental[0]), bool(incremental[1])
        elif strategies.get("background", True):
            size, every = 5, False  # the heap backend's default background cleanup, as Flink's
        else:
            size, every = 0, False
        return cls(
            ttl_ms=int(config.get_ttl().to_milliseconds()),
            update_on_read=config.get_update_type() is StateTtlConfig.UpdateType.OnReadAndWrite,
            return_expired=config.get_state_visibility() is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp,
            full_snapshot=bool(strategies.get("full_snapshot")),
            incremental=size,
            incremental_every_record=every,
        )

    def expired(self, ts: int, now: int) -> bool:
        return ts + self.ttl_ms <= now


def drop_expired(kind: str, groups: Mapping[int, dict[Any, Any]], policy: TtlPolicy, now: int) -> dict[int, dict[Any, Any]]:
    """A copy of a table's key groups without expired values (full-snapshot cleanup)."""
    out: dict[int, dict[Any, Any]] = {}
    for kg, m in groups.items():
        kept: dict[Any, Any] = {}
        for k, v in m.items():
            alive = alive_value(kind, v, policy, now)
            if alive is not None:
                kept[k] = alive
        if kept:
            out[kg] = kept
    return out


def alive_value(kind: str, value: Any, policy: TtlPolicy, now: int) -> Any:
    """One key's stored value without its expired parts (None when nothing is left)."""
    expired = policy.expired
    if kind == "list":
        alive = [e for e in value if not expired(e[1], now)]
        return alive or None
    if kind == "map":
        alive_map = {mk: e for mk, e in value.items() if not expired(e[1], now)}
        return alive_map or None
    return None if expired(value[1], now) else value


class _Ttl:
    """Shared by the TTL wrappers: the inner heap state, the policy, the clock, incremental cleanup."""

    def __init__(self, inner: Any, policy: TtlPolicy, clock: Clock, kind: str, cleaner: IncrementalCleanup | None) -> None:
        self.inner = inner
        self.policy = policy
        self.clock = clock
        self.kind = kind
        self.cleaner = cleaner

    @property
    def name(self) -> str:
        return self.inner.name

    def _now(self) -> int:
        if self.cleaner is not None:
            self.cleaner.step()
        return self.clock()

    def clear(self) -> None:
        self.inner.clear()


class TtlValueState(_Ttl, ValueState):
    def value(self) -> Any:
        raw = self.inner.value()
        if raw is None:
            return None
        v, ts = raw
        now = self._now()
        if self.policy.expired(ts, now):
            if self.policy.return_expired:
                return v
            self.inner.clear()
            return None
        if self.policy.update_on_read:
            self.inner.update((v, now))
        return v

    def update(self, value: Any) -> None:
        if value is None:
            self.inner.clear()
        else:
            self.inner.update((value, self._now()))


class TtlReducingState(TtlValueState, ReducingState):
    """Reducing state: the accumulated value carries one timestamp (written at every add)."""

    def __init__(self, inner: Any, policy: TtlPolicy, clock: Clock, kind: str, cleaner: Any, reduce: Callable[[Any, Any], Any]) -> None:
        super().__init__(inner, policy, clock, kind, cleaner)
        self._reduce = reduce

    def get(self) -> Any:
        return self.value()

    def add(self, value: Any) -> None:
        current = self._live()
        self.update(value if current is None else self._reduce(current, value))

    def _live(self) -> Any:
        raw = self.inner.value()
        if raw is None or self.policy.expired(raw[1], self.clock()):
            return None
        return raw[0]


class TtlAggregatingState(TtlReducingState, AggregatingState):
    """Aggregating state: the accumulator carries the timestamp; ``get`` returns the result."""

    def __init__(self, inner: Any, policy: TtlPolicy, clock: Clock, kind: str, cleaner: Any, agg: Any) -> None:
        super().__init__(inner, policy, clock, kind, cleaner, agg.add)
        self._agg = agg

    def get(self) -> Any:
        acc = self.value()
        return None if acc is None else self._agg.get_result(acc)

    def add(self, value: Any) -> None:
        acc = self._live()
        if acc is None:
            acc = self._agg.create_accumulator()
        self.update(self._agg.add(value, acc))


class TtlListState(_Ttl, ListState):
    def get(self) -> list[Any]:
        entries = self.inner.get() or []
        now = self._now()
        expired = self.policy.expired
        alive = [e for e in entries if not expired(e[1], now)]
        if len(alive) != len(entries) and not self.policy.return_expired:
            self.inner.update(alive)
            entries = alive
        if self.policy.update_on_read and alive:
            self.inner.update([(v, now) for v, _ in entries])
        return [v for v, _ in (entries if self.policy.return_expired else alive)]

    def add(self, value: Any) -> None:
        self.inner.add((value, self._now()))

    def add_all(self, values: Iterable[Any]) -> None:
        now = self._now()
        self.inner.add_all([(v, now) for v in values])

    def update(self, values: Iterable[Any]) -> None:
        now = self._now()
        self.inner.update([(v, now) for v in values])


class TtlMapState(_Ttl, MapState):
    def _entry(self, key: Any) -> tuple[bool, Any]:
        raw = self.inner.get(key)
        if raw is None:
            return False, None
        v, ts = raw
        now = self._now()
        if self.policy.expired(ts, now):
            if self.policy.return_expired:
                return True, v
            self.inner.remove(key)
            return False, None
        if self.policy.update_on_read:
            self.inner.put(key, (v, now))
        return True, v

    def get(self, key: Any) -> Any:
        return self._entry(key)[1]

    def contains(self, key: Any) -> bool:
        return self._entry(key)[0]

    def put(self, key: Any, value: Any) -> None:
        self.inner.put(key, (value, self._now()))

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        now = self._now()
        self.inner.put_all({k: (v, now) for k, v in dict_value.items()})

    def remove(self, key: Any) -> None:
        self.inner.remove(key)

    def _alive(self) -> list[tuple[Any, Any]]:
        now = self._now()
        out = []
        for k, (v, ts) in list(self.inner.items()):
            if not self.policy.expired(ts, now):
                out.append((k, v))
            elif self.policy.return_expired:
                out.append((k, v))
            else:
                self.inner.remove(k)
        return out

    def items(self) -> Iterable[tuple[Any, Any]]:
        return self._alive()

    def keys(self) -> Iterable[Any]:
        return [k for k, _ in self._alive()]

    def values(self) -> Iterable[Any]:
        return [v for _, v in self._alive()]

    def is_empty(self) -> bool:
        return not self._alive()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())


class IncrementalCleanup:
    """Checks ``size`` entries of one state's table per step, round-robin, removing the
    expired ones (copying a key group first if a snapshot shares it).

    The round goes key group by key group and lists one group's keys at a time, so it holds
    at most one key group's keys (on the RocksDB backend, the rest stay on disk)."""

    def __init__(self, backend: Any, name: str, kind: str, policy: TtlPolicy, clock: Clock) -> None:
        self._backend = backend
        self._name = name
        self._kind = kind
        self._policy = policy
        self._clock = clock
        self._pending: Iterator[tuple[int, Any]] = iter(())

    def _round(self, table: Any) -> Iterator[tuple[int, Any]]:
        for kg in list(table):
            for k in list(table.get(kg) or ()):
                yield kg, k

    def step(self) -> None:
        size = self._policy.incremental
        if size <= 0:
            return
        table = self._backend.table(self._name)
        now = self._clock()
        expired = self._policy.expired
        frozen = self._backend.frozen(self._name)
        for i in range(size):
            nxt = next(self._pending, None)
            if nxt is None:
                if i:
                    return  # the round ended: the next step starts a new one
                self._pending = self._round(table)
                nxt = next(self._pending, None)
                if nxt is None:
                    return
            kg, k = nxt
            m = table.get(kg)
            if m is None or k not in m:
                continue
            v = m[k]
            if self._kind == "list":
                alive = [e for e in v if not expired(e[1], now)]
                change, new = len(alive) != len(v), alive
            elif self._kind == "map":
                alive_map = {mk: e for mk, e in v.items() if not expired(e[1], now)}
                change, new = len(alive_map) != len(v), alive_map
            else:
                change, new = expired(v[1], now), None
            if not change:
                continue
            if kg in frozen:
                m = self._backend.thaw(self._name, kg)
                self._backend.rebind()
            if new:
                m[k] = new
            else:
                del m[k]


def wrap(kind: str, inner: Any, policy: TtlPolicy, clock: Clock, descriptor: Any, cleaner: IncrementalCleanup | None) -> Any:
    if kind == "value":
        return TtlValueState(inner, policy, clock, kind, cleaner)
    if kind == "list":
        return TtlListState(inner, policy, clock, kind, cleaner)
    if kind == "map":
        return TtlMapState(inner, policy, clock, kind, cleaner)
    if kind == "reducing":
        return TtlReducingState(inner, policy, clock, kind, cleaner, descriptor.reduce)
    return TtlAggregatingState(inner, policy, clock, kind, cleaner, descriptor.agg_function)
