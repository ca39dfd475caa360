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
only to wake the key when it is due (``sync``). What "due" means follows the step's time mode
(:mod:`flinkpy.spark.time_mode`): in ``EventTime`` mode Spark's timers are event-time timers and
wake the key when Spark's watermark passes them; processing-time timers cannot be woken there,
so registering one fails with a message. In ``ProcessingTime`` mode Spark's timers are
processing-time timers: a processing-time timer wakes its key in the first micro-batch that
starts after it (Spark runs one on every trigger, input or not), and a key with pending
event-time timers asks to be woken in the next micro-batch, where the timers Spark's watermark
passed fire. Either way a timer fires once, in timestamp order within its time domain.

State time-to-live: a descriptor with ``enable_time_to_live`` gets the engine's own TTL wrapper
(:mod:`flinkpy.state.ttl`) over the Spark state, on the same clock (the wall clock, in
milliseconds), so update type, visibility and expiry per value, list element and map entry are
the engine's. Expired values are removed when read, as on the engine. Spark's own state TTL
serves as the background cleanup (the engine's incremental cleanup needs to walk every key,
which Spark's per-key state does not offer); it counts from the micro-batch's start rather than
from the write, so it is set :data:`TTL_CLEANUP_GRACE_MS` longer than the state's TTL, and removes
only values the wrapper no longer returns (unless a micro-batch ran longer than that). Spark
allows it in ``ProcessingTime`` mode only, which the translation picks for functions that enable
TTL; in a step whose TTL it did not see (``EventTime`` mode), expired values are removed when read
and by nothing else.
"""

from __future__ import annotations

import logging
import pickle
import time
from typing import Any, Callable, Iterable, Mapping

from flinkpy.common.state import (
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
#: Spark's TTL of a state outlives flinkpy's by this much (see the module docstring): a value
#: written later in a micro-batch than this after the batch started could lose it a little early
TTL_CLEANUP_GRACE_MS = 10 * 60 * 1000

log = logging.getLogger(__name__)
#: (operator, state) pairs warned about in this process (a processor is set up again every batch)
_WARNED: set[tuple[str, str]] = set()


def wall_clock_ms() -> int:
    """Processing time as the engine reads it (its TTL clock and timer service)."""
    return int(time.time() * 1000)


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
    ``processing_time``: the step runs in Spark's ProcessingTime mode, where Spark's state TTL
    is available as the background cleanup of states with a time-to-live.
    """

    max_parallelism = 128
    LATE = "_flinkpy_late_states"

    def __init__(self, handle: Any, operator_name: str, *, processing_time: bool = False) -> None:
        self._handle = handle
        self._name = operator_name
        self._processing_time = processing_time
        self._states: dict[str, Any] = {}
        #: the engine's kind of each state asked for (a descriptor's), by name
        self.kinds: dict[str, str] = {}
        #: states with a time-to-live, with it in ms (their values carry the wrapper's timestamps)
        self.ttl_states: dict[str, int] = {}
        #: the Spark state variable of each state declared in open(), and how it is laid out
        self._cells: dict[str, tuple[str, Any]] = {}
        self._late = handle.getMapState(self.LATE, "name string", _B)
        self._initialising = True
        self.current_key: Any = None
        self.current_key_group: int | None = None
        #: milliseconds; the TTL wrappers read it late-bound, so a test may replace it
        self.ttl_clock: Callable[[], int] = wall_clock_ms

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
        policy = None
        if d.ttl_config is not None and d.ttl_config.is_enabled():
            from flinkpy.state.ttl import TtlPolicy

            policy = TtlPolicy.of(d.ttl_config)
        kind = d.kind
        # with TTL, reducing and aggregating states are value states of (accumulator, timestamp)
        # that the TTL wrapper folds, as on the engine's backends
        raw = "value" if policy is not None and kind in ("reducing", "aggregating") else kind
        spark_ttl = self._spark_ttl_ms(d.name, policy)
        self.kinds[d.name] = kind
        if policy is not None:
            self.ttl_states[d.name] = policy.ttl_ms
        if not self._initialising:
            if kind not in ("value", "reducing", "aggregating"):
                raise InvalidProgramError(
                    f"operator {self._name!r} asked for {kind} state {d.name!r} after open(); on the Spark runner "
                    "list and map states must be declared in open()",
                    remedy="declare the state in open()",
                )
            inner: Any = SparkValueState(_Entry(self._late, d.name))
        elif kind in ("value", "reducing", "aggregating"):
            cell = self._handle.getValueState(d.name, _B, spark_ttl)
            self._cells[d.name] = ("value", cell)
            inner = SparkValueState(cell)
        elif kind == "list":
            cell = self._handle.getListState(d.name, _B, spark_ttl)
            self._cells[d.name] = ("list", cell)
            inner = SparkListState(cell)
        elif kind == "map":
            cell = self._handle.getMapState(d.name, "k binary", _B, spark_ttl)
            self._cells[d.name] = ("map", cell)
            inner = SparkMapState(cell)
        else:
            raise InvalidProgramError(f"operator {self._name!r}: unknown state kind {kind!r} of {d.name!r}")
        if policy is not None:
            from flinkpy.state.ttl import wrap

            return wrap(kind, inner, policy, lambda: self.ttl_clock(), d, None)
        if raw == "reducing":
            return SparkReducingState(inner, d.reduce)
        if raw == "aggregating":
            return SparkAggregatingState(inner, d.agg_function)
        return inner

    def seed(self, name: str, kind: str, rows: list[tuple[bytes | None, bytes]]) -> None:
        """Write a state moved from the engine for the current key, as its state objects would
        (:mod:`flinkpy.spark.keyed_move`): ``rows`` of (pickled map key, pickled value; a list's
        pickled elements pickled as one list).
        A state the function did not declare in open() goes into the late states' map, where it
        would ask for it later; only value, reducing and aggregating states can be kept there."""
        declared = self._cells.get(name)
        if declared is None:
            if kind not in ("value", "reducing", "aggregating"):
                raise InvalidProgramError(
                    f"operator {self._name!r}: the moved {kind} state {name!r} is not declared in the function's open(), "
                    "and on the Spark runner list and map states must be",
                    remedy="declare the state in open(), or keep the job on the engine")
            self._late.updateValue((name,), (rows[-1][1],))
            return
        layout, cell = declared
        if layout == "value":
            cell.update((rows[-1][1],))
        elif layout == "list":
            cell.put([(element,) for element in pickle.loads(rows[-1][1])])
        else:
            for part, value in rows:
                cell.updateValue((part,), (value,))

    def _spark_ttl_ms(self, name: str, policy: Any) -> int | None:
        """Spark's TTL for a state's background cleanup, where Spark offers one."""
        if policy is None:
            return None
        if self._processing_time and self._initialising:
            return policy.ttl_ms + TTL_CLEANUP_GRACE_MS
        if (self._name, name) in _WARNED or getattr(self._handle, "noting", False):
            return None  # warned already, or only noting the states declared (flinkpy.spark.state_reading)
        _WARNED.add((self._name, name))
        why = "it is declared after open()" if self._processing_time else "the step runs in Spark's EventTime mode"
        log.warning("operator %r: state %r has a time-to-live; on Spark its expired values are removed only when "
                    "read (%s, where Spark's state TTL is not available)", self._name, name, why)
        return None


class SparkTimers:
    """The timer service of one keyed operator on Spark; see the module docstring.

    ``load`` a key's timers, fire what is due (``fire_processing`` by the clock, ``advance`` by
    the watermark), ``sync`` them back. A key's timers are stored as the set of its event-time
    timers ``{(timestamp, namespace)}`` — a pair of sets (event time, processing time) once it
    has processing-time timers.
    """

    STATE = "_flinkpy_timers"

    def __init__(self, handle: Any, operator_name: str, on_event_time: Callable[[Any, Any, int], None],
                 on_processing_time: Callable[[Any, Any, int], None] | None = None, *, processing_time: bool = False) -> None:
        self._handle = handle
        self._name = operator_name
        self._cell = handle.getValueState(self.STATE, _B)
        self._on_event = on_event_time
        self._on_processing = on_processing_time
        #: the step runs in Spark's ProcessingTime mode (its Spark timers are processing-time timers)
        self.processing_time = processing_time
        self.watermark = -(2**63)
        #: the start of the micro-batch (Spark's processing time), ms
        self.batch_time = -1
        self.clock: Callable[[], int] = wall_clock_ms
        self._key: Any = None
        self._pending: set[tuple[int, Any]] = set()
        self._processing: set[tuple[int, Any]] = set()
        #: the key's timers changed since load(): sync() writes them (each state call is a round trip to Spark)
        self._dirty = False

    def load(self, key: Any, watermark: int, batch_time: int = -1) -> None:
        self._key = key
        row = self._cell.get()
        stored = pickle.loads(row[0]) if row is not None else set()
        if isinstance(stored, tuple):
            self._pending, self._processing = stored
        else:
            self._pending, self._processing = stored, set()
        self._dirty = False
        self.watermark = watermark
        self.batch_time = batch_time

    def seed(self, key: Any, event: set[tuple[int, Any]], processing: set[tuple[int, Any]], batch_time: int) -> None:
        """Give ``key`` the timers moved from the engine and register its Spark wake-ups."""
        self.load(key, -(2**63), batch_time)
        self._pending |= event
        self._processing |= processing
        self._dirty = True
        self.sync()

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
        if not self.processing_time:
            raise InvalidProgramError(
                f"operator {self._name!r} registered a processing-time timer, but the Spark runner found no call to "
                "register_processing_time_timer in its code and runs it in Spark's EventTime mode, where a key "
                "without new records could not be woken by processing time",
                remedy="call ctx.timer_service().register_processing_time_timer(...) in the function's own class or module, "
                       "so that the translation sees it, or run this job on flinkpy's engine",
            )
        entry = (int(timestamp), namespace)
        if entry not in self._processing:
            self._processing.add(entry)
            self._dirty = True

    def delete_processing_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        entry = (int(timestamp), namespace)
        if entry in self._processing:
            self._processing.discard(entry)
            self._dirty = True

    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        return self.clock()

    def advance(self, watermark: int) -> None:
        """Fire, in timestamp order, the event-time timers at or before ``watermark``."""
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

    def fire_processing(self) -> None:
        """Fire, in timestamp order, the processing-time timers that are due now.

        Now is the later of the clock and the micro-batch's start, so that the Spark timer that
        woke the key has always fired (Spark deletes it once the key's call returns).
        """
        while self._processing:
            now = max(self.clock(), self.batch_time)
            due = min(self._processing, key=lambda t: t[0])
            if due[0] > now:
                break
            self._processing.discard(due)
            self._dirty = True
            if self._on_processing is not None:
                self._on_processing(self._key, due[1], due[0])

    def sync(self) -> None:
        """Store the key's timers and align Spark's wake-up timers with them."""
        polls = self.processing_time and bool(self._pending)
        if not self._dirty and not polls:
            return
        if self._dirty:
            if self._processing:
                self._cell.update((pickle.dumps((self._pending, self._processing), protocol=5),))
            elif self._pending:
                self._cell.update((pickle.dumps(self._pending, protocol=5),))
            else:
                self._cell.clear()
        if self.processing_time:
            wanted = {ts for ts, _ in self._processing}
            poll = max(self.batch_time, 0) + 1  # the next micro-batch: Spark's watermark may pass a timer there
            if polls and not any(ts <= poll for ts in wanted):
                wanted.add(poll)
        else:
            wanted = {min(ts, END_W) for ts, _ in self._pending}
        registered = set(self._handle.listTimers())
        for ts in registered - wanted:
            self._handle.deleteTimer(ts)
        for ts in wanted - registered:
            self._handle.registerTimer(ts)
