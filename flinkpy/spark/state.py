"""flinkpy's keyed state and timers over Spark's state handles (transformWithState).

Spark scopes every state variable to the grouping key being processed, exactly as flinkpy's keyed
state is scoped to the current key, so each flinkpy state maps onto one Spark state variable of
the same name: ValueState -> Spark ValueState, ListState -> Spark ListState (one element per
entry), MapState -> Spark MapState; reducing and aggregating states keep their folded value in a
Spark ValueState. Values are pickled (any Python object, as in flinkpy).

Spark lets a processor declare its state variables only while it initialises; states a function
asks for later (window triggers' per-window states) are kept as entries of one Spark MapState.

Timers: flinkpy timers carry a namespace (a window) and Spark's do not, so the authoritative set
of a key's timers is a state of its own; a Spark timer is registered at every distinct timestamp
only to wake the key when Spark's watermark passes it (``sync``).
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Iterable, Mapping

from flinkpy.datastream.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    ValueState,
)
from flinkpy.errors import InvalidProgramError
from flinkpy.spark.records import END_W

_B = "v binary"
MAX_WATERMARK = 2**63 - 1


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


class SparkValueState(ValueState):
    def __init__(self, cell: Any) -> None:
        self._cell = cell

    def value(self) -> Any:
        row = self._cell.get()
        return None if row is None else pickle.loads(row[0])

    def update(self, value: Any) -> None:
        if value is None:
            self._cell.clear()
        else:
            self._cell.update((_dumps(value),))

    def clear(self) -> None:
        self._cell.clear()


class SparkListState(ListState):
    def __init__(self, cell: Any) -> None:
        self._cell = cell

    def get(self) -> list:
        if not self._cell.exists():
            return []
        return [pickle.loads(row[0]) for row in self._cell.get()]

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError("ListState.add(None): a list state holds no None elements")
        self._cell.appendValue((_dumps(value),))

    def add_all(self, values: list) -> None:
        rows = [(_dumps(v),) for v in values]
        if rows:
            self._cell.appendList(rows)

    def update(self, values: list) -> None:
        rows = [(_dumps(v),) for v in values]
        if rows:
            self._cell.put(rows)
        else:
            self._cell.clear()

    def clear(self) -> None:
        self._cell.clear()


class SparkMapState(MapState):
    def __init__(self, cell: Any) -> None:
        self._cell = cell

    def get(self, key: Any) -> Any:
        row = self._cell.getValue((_dumps(key),))
        return None if row is None else pickle.loads(row[0])

    def put(self, key: Any, value: Any) -> None:
        self._cell.updateValue((_dumps(key),), (_dumps(value),))

    def put_all(self, dict_value: Mapping) -> None:
        for k, v in dict_value.items():
            self.put(k, v)

    def remove(self, key: Any) -> None:
        self._cell.removeKey((_dumps(key),))

    def contains(self, key: Any) -> bool:
        return bool(self._cell.containsKey((_dumps(key),)))

    def items(self) -> Iterable[tuple[Any, Any]]:
        if not self._cell.exists():
            return []
        return [(pickle.loads(k[0]), pickle.loads(v[0])) for k, v in self._cell.iterator()]

    def keys(self) -> Iterable[Any]:
        return [k for k, _ in self.items()]

    def values(self) -> Iterable[Any]:
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        return not self._cell.exists()

    def clear(self) -> None:
        self._cell.clear()


class SparkReducingState(ReducingState):
    def __init__(self, value: ValueState, reduce: Callable[[Any, Any], Any]) -> None:
        self._value = value
        self._reduce = reduce

    def get(self) -> Any:
        return self._value.value()

    def add(self, value: Any) -> None:
        old = self._value.value()
        self._value.update(value if old is None else self._reduce(old, value))

    def clear(self) -> None:
        self._value.clear()


class SparkAggregatingState(AggregatingState):
    def __init__(self, value: ValueState, function: Any) -> None:
        self._value = value
        self._fn = function

    def get(self) -> Any:
        acc = self._value.value()
        return None if acc is None else self._fn.get_result(acc)

    def add(self, value: Any) -> None:
        acc = self._value.value()
        if acc is None:
            acc = self._fn.create_accumulator()
        self._value.update(self._fn.add(value, acc))

    def clear(self) -> None:
        self._value.clear()


class _Entry:
    """A Spark-ValueState-shaped view of one entry of the catch-all MapState."""

    def __init__(self, cell: Any, name: str) -> None:
        self._cell = cell
        self._key = (name,)

    def get(self) -> Any:
        row = self._cell.getValue(self._key)
        return None if row is None else (row[0],)

    def update(self, row: tuple) -> None:
        self._cell.updateValue(self._key, (row[0],))

    def clear(self) -> None:
        self._cell.removeKey(self._key)

    def exists(self) -> bool:
        return bool(self._cell.containsKey(self._key))


class SparkKeyedBackend:
    """What flinkpy's keyed operators ask of a state backend, over a Spark processor handle.

    The key is set by the Spark group being processed; ``set_current_key`` only records it.
    """

    max_parallelism = 128
    LATE = "_flinkpy_late_states"

    def __init__(self, handle: Any, operator_name: str) -> None:
        self._handle = handle
        self._name = operator_name
        self._states: dict[str, Any] = {}
        self._late = handle.getMapState(self.LATE, "name string", _B)
        self._initialising = True
        self.current_key: Any = None
        self.current_key_group: int | None = None

    def done_initialising(self) -> None:
        self._initialising = False

    def set_current_key(self, key: Any) -> None:
        self.current_key = key

    def set_current_key_and_group(self, key: Any, key_group: int) -> None:
        self.current_key = key
        self.current_key_group = key_group

    def get_partitioned_state(self, descriptor: Any) -> Any:
        state = self._states.get(descriptor.name)
        if state is None:
            state = self._states[descriptor.name] = self._create(descriptor)
        return state

    def _create(self, d: Any) -> Any:
        if d.ttl_config is not None and d.ttl_config.is_enabled():
            raise InvalidProgramError(
                f"operator {self._name!r}: state {d.name!r} has a time-to-live, which the Spark runner does not translate "
                "(Spark's state TTL counts from processing time at a different moment)",
                remedy="run this job on flinkpy's engine, or drop enable_time_to_live() from the descriptor",
            )
        kind = d.kind
        if not self._initialising:
            if kind not in ("value", "reducing", "aggregating"):
                raise InvalidProgramError(
                    f"operator {self._name!r} asked for {kind} state {d.name!r} after open(); on the Spark runner "
                    "list and map states must be declared in open()",
                    remedy="declare the state in open()",
                )
            value: Any = SparkValueState(_Entry(self._late, d.name))
        elif kind in ("value", "reducing", "aggregating"):
            value = SparkValueState(self._handle.getValueState(d.name, _B))
        elif kind == "list":
            return SparkListState(self._handle.getListState(d.name, _B))
        elif kind == "map":
            return SparkMapState(self._handle.getMapState(d.name, "k binary", _B))
        else:
            raise InvalidProgramError(f"operator {self._name!r}: unknown state kind {kind!r} of {d.name!r}")
        if kind == "reducing":
            return SparkReducingState(value, d.reduce)
        if kind == "aggregating":
            return SparkAggregatingState(value, d.agg_function)
        return value


class SparkTimers:
    """The timer service of one keyed operator on Spark; see the module docstring.

    ``load`` a key's timers, fire what the watermark passes (``advance``), ``sync`` them back.
    """

    STATE = "_flinkpy_timers"

    def __init__(self, handle: Any, operator_name: str, on_event_time: Callable[[Any, Any, int], None]) -> None:
        self._handle = handle
        self._name = operator_name
        self._cell = handle.getValueState(self.STATE, _B)
        self._on_event = on_event_time
        self.watermark = -(2**63)
        self._key: Any = None
        self._pending: set[tuple[int, Any]] = set()
        #: the key's timers changed since load(): sync() writes them (each state call is a round trip to Spark)
        self._dirty = False

    def load(self, key: Any, watermark: int) -> None:
        self._key = key
        row = self._cell.get()
        self._pending = pickle.loads(row[0]) if row is not None else set()
        self._dirty = False
        self.watermark = watermark

    def register_event_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        entry = (int(timestamp), namespace)
        if entry not in self._pending:
            self._pending.add(entry)
            self._dirty = True

    def delete_event_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        entry = (int(timestamp), namespace)
        if entry in self._pending:
            self._pending.discard(entry)
            self._dirty = True

    def register_processing_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        raise InvalidProgramError(
            f"operator {self._name!r} registers a processing-time timer, which the Spark runner does not translate "
            "(its results depend on when records are processed)",
            remedy="use event-time timers, or run this job on flinkpy's engine",
        )

    def delete_processing_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        pass

    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        import time

        return int(time.time() * 1000)

    def advance(self, watermark: int) -> None:
        """Fire, in timestamp order, the timers at or before ``watermark``."""
        if watermark >= END_W:
            watermark = MAX_WATERMARK
        if watermark > self.watermark:
            self.watermark = watermark
        while self._pending:
            due = min(self._pending, key=lambda t: t[0])
            if due[0] > self.watermark:
                break
            self._pending.discard(due)
            self._dirty = True
            self._on_event(self._key, due[1], due[0])

    def sync(self) -> None:
        """Store the key's timers and align Spark's wake-up timers with them."""
        if not self._dirty:
            return
        if self._pending:
            self._cell.update((pickle.dumps(self._pending, protocol=5),))
        else:
            self._cell.clear()
        wanted = {min(ts, END_W) for ts, _ in self._pending}
        registered = set(self._handle.listTimers())
        for ts in registered - wanted:
            self._handle.deleteTimer(ts)
        for ts in wanted - registered:
            self._handle.registerTimer(ts)
