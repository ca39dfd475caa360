"""Keyed state as a user function sees it: descriptors, TTL configuration and interfaces.

A function declares its state with a descriptor in ``open()`` and reads and writes it for the
key of the record being processed; the state backend keeps one value per key and state name,
organised by key group so that it can be snapshotted and rescaled.

>>> from flinkpy.common import Types
>>> from flinkpy.common.time import Time
>>> descriptor = ValueStateDescriptor("count", Types.LONG())
>>> descriptor.get_name()
'count'
>>> ttl = (StateTtlConfig.new_builder(Time.seconds(1))
...        .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
...        .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
...        .build())
>>> descriptor.enable_time_to_live(ttl)
>>> descriptor.ttl_config.get_ttl().to_milliseconds()
1000
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from flinkpy.common.time import Time
from flinkpy.common.typeinfo import TypeInformation, Types

if TYPE_CHECKING:
    from flinkpy.common.functions import AggregateFunction, ReduceFunction

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")


# ---------------------------------------------------------------------------------------------
# State interfaces
# ---------------------------------------------------------------------------------------------


class State(abc.ABC):
    """State of the current key; ``clear()`` removes it."""

    @abc.abstractmethod
    def clear(self) -> None:
        ...


class ValueState(State, Generic[T]):
    """One value per key; ``value()`` is None until ``update()`` is called."""

    @abc.abstractmethod
    def value(self) -> T | None:
        ...

    @abc.abstractmethod
    def update(self, value: T | None) -> None:
        """Set the value; ``update(None)`` clears it, as in Flink."""


class AppendingState(State, Generic[IN, OUT]):
    """State that values are added to and read back folded (list, reducing, aggregating)."""

    @abc.abstractmethod
    def get(self) -> OUT:
        ...

    @abc.abstractmethod
    def add(self, value: IN) -> None:
        ...


class MergingState(AppendingState[IN, OUT]):
    """Appending state whose values of several namespaces can be merged (for windows)."""


class ListState(MergingState[T, Iterable[T]]):
    """A list of values per key; ``get()`` of an empty state is an empty list."""

    @abc.abstractmethod
    def update(self, values: list[T]) -> None:
        """Replace the whole list; an empty list clears the state."""

    @abc.abstractmethod
    def add_all(self, values: list[T]) -> None:
        ...

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())


class ReducingState(MergingState[T, T]):
    """One value per key, combined with each added value by a reduce function."""


class AggregatingState(MergingState[IN, OUT]):
    """An accumulator per key, fed by ``add()`` and read through ``get_result``."""


class _MapReads(abc.ABC, Generic[K, V]):
    """The reading half of a map-shaped state (keyed map state, broadcast state)."""

    @abc.abstractmethod
    def get(self, key: K) -> V | None:
        ...

    @abc.abstractmethod
    def contains(self, key: K) -> bool:
        ...

    @abc.abstractmethod
    def items(self) -> Iterable[tuple[K, V]]:
        ...

    @abc.abstractmethod
    def keys(self) -> Iterable[K]:
        ...

    @abc.abstractmethod
    def values(self) -> Iterable[V]:
        ...

    @abc.abstractmethod
    def is_empty(self) -> bool:
        ...

    def __getitem__(self, key: K) -> V:
        if not self.contains(key):
            raise KeyError(key)
        return self.get(key)  # type: ignore[return-value]

    def __contains__(self, key: object) -> bool:
        return self.contains(key)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())


class _MapWrites(_MapReads[K, V]):
    """The writing half, on top of the reading one."""

    @abc.abstractmethod
    def put(self, key: K, value: V) -> None:
        ...

    @abc.abstractmethod
    def put_all(self, dict_value: Mapping[K, V]) -> None:
        ...

    @abc.abstractmethod
    def remove(self, key: K) -> None:
        ...

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)


class MapState(State, _MapWrites[K, V]):
    """A map per key. Reading an absent user key returns None."""


class ReadOnlyBroadcastState(State, _MapReads[K, V]):
    """The broadcast state as the non-broadcast side of a broadcast connection reads it.

    Every parallel instance holds its own copy of the same map, written only by the broadcast
    side (``process_broadcast_element``), so that every copy sees the same updates in the same
    order. A function that changed it while processing its own partition of the other stream
    would make the copies diverge, which is why this view refuses writes.
    """


class BroadcastState(ReadOnlyBroadcastState[K, V], _MapWrites[K, V]):
    """The broadcast state as ``process_broadcast_element`` sees it: a map it may change.

    Updates must be deterministic functions of the broadcast records: every parallel instance
    applies them to its own copy, and after a rescale a new instance takes an old one's copy.
    """


# ---------------------------------------------------------------------------------------------
# Time to live
# ---------------------------------------------------------------------------------------------


class StateTtlConfig:
    """How long state lives after it was last written (or read); enforced by the heap backend
    (see :mod:`flinkpy.state.ttl`: expiry per value, list element and map entry, visibility,
    full-snapshot and incremental cleanup).

    Built with :meth:`new_builder`; see the module docstring.
    """

    class UpdateType(enum.Enum):
        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class StateVisibility(enum.Enum):
        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(enum.Enum):
        ProcessingTime = 0

    def __init__(
        self,
        update_type: StateTtlConfig.UpdateType,
        state_visibility: StateTtlConfig.StateVisibility,
        ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic,
        ttl: Time,
        cleanup_strategies: dict[str, Any],
    ) -> None:
        self._update_type = update_type
        self._state_visibility = state_visibility
        self._ttl_time_characteristic = ttl_time_characteristic
        self._ttl = ttl
        self._cleanup_strategies = dict(cleanup_strategies)

    @staticmethod
    def new_builder(ttl: Time) -> StateTtlConfig.Builder:
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> StateTtlConfig.UpdateType:
        return self._update_type

    def get_state_visibility(self) -> StateTtlConfig.StateVisibility:
        return self._state_visibility

    def get_ttl(self) -> Time:
        return self._ttl

    def get_ttl_time_characteristic(self) -> StateTtlConfig.TtlTimeCharacteristic:
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        return self._update_type is not StateTtlConfig.UpdateType.Disabled

    def get_cleanup_strategies(self) -> dict[str, Any]:
        """The background cleanups asked for, by name: ``full_snapshot``, ``incremental``."""
        return dict(self._cleanup_strategies)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StateTtlConfig) and (
            self._update_type,
            self._state_visibility,
            self._ttl_time_characteristic,
            self._ttl,
            self._cleanup_strategies,
        ) == (
            other._update_type,
            other._state_visibility,
            other._ttl_time_characteristic,
            other._ttl,
            other._cleanup_strategies,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"StateTtlConfig(ttl={self._ttl.to_milliseconds()} ms, "
            f"update_type={self._update_type.name}, visibility={self._state_visibility.name})"
        )

    class Builder:
        """Collects TTL settings; each setter returns the builder."""

        def __init__(self, ttl: Time) -> None:
            self._ttl = ttl
            self._update_type = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._state_visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._ttl_time_characteristic = StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            self._cleanup: dict[str, Any] = {}
            self._background_cleanup = True

        def set_update_type(self, update_type: StateTtlConfig.UpdateType) -> StateTtlConfig.Builder:
            self._update_type = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(
            self, state_visibility: StateTtlConfig.StateVisibility
        ) -> StateTtlConfig.Builder:
            self._state_visibility = state_visibility
            return self

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(
                StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
            )

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(
            self, ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic
        ) -> StateTtlConfig.Builder:
            self._ttl_time_characteristic = ttl_time_characteristic
            return self

        def use_processing_time(self) -> StateTtlConfig.Builder:
            return self.set_ttl_time_characteristic(
                StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            )

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            self._cleanup["full_snapshot"] = True
            return self

        def cleanup_incrementally(
            self, cleanup_size: int, run_cleanup_for_every_record: bool
        ) -> StateTtlConfig.Builder:
            self._cleanup["incremental"] = (cleanup_size, run_cleanup_for_every_record)
            return self

        def cleanup_in_rocksdb_compact_filter(
            self, query_time_after_num_entries: int
        ) -> StateTtlConfig.Builder:
            self._cleanup["rocksdb_compact_filter"] = query_time_after_num_entries
            return self

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            self._background_cleanup = False
            return self

        def set_ttl(self, ttl: Time) -> StateTtlConfig.Builder:
            self._ttl = ttl
            return self

        def build(self) -> StateTtlConfig:
            cleanup = dict(self._cleanup)
            cleanup["background"] = self._background_cleanup
            return StateTtlConfig(
                self._update_type,
                self._state_visibility,
                self._ttl_time_characteristic,
                self._ttl,
                cleanup,
            )


# ---------------------------------------------------------------------------------------------
# Descriptors
# ---------------------------------------------------------------------------------------------


class StateDescriptor(abc.ABC):
    """Names a state and says what kind it is; the backend creates the state from it.

    ``kind`` is the stable, serialized name of the state's kind in snapshots.
    """

    kind: str = ""

    def __init__(self, name: str, type_info: TypeInformation | None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"state name must be a non-empty string, got {name!r}")
        self.name = name
        self.type_info = type_info if type_info is not None else Types.PICKLED_BYTE_ARRAY()
        self.ttl_config: StateTtlConfig | None = None

    def get_name(self) -> str:
        return self.name

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        self.ttl_config = ttl_config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.type_info})"


class ValueStateDescriptor(StateDescriptor):
    """Declares a :class:`ValueState`."""

    kind = "value"

    def __init__(self, name: str, value_type_info: TypeInformation | None = None) -> None:
        super().__init__(name, value_type_info)


class ListStateDescriptor(StateDescriptor):
    """Declares a :class:`ListState` of elements of ``elem_type_info``."""

    kind = "list"

    def __init__(self, name: str, elem_type_info: TypeInformation | None = None) -> None:
        super().__init__(name, Types.LIST(elem_type_info or Types.PICKLED_BYTE_ARRAY()))
        self.elem_type_info = elem_type_info


class MapStateDescriptor(StateDescriptor):
    """Declares a :class:`MapState` from ``key_type_info`` to ``value_type_info``."""

    kind = "map"

    def __init__(
        self,
        name: str,
        key_type_info: TypeInformation | None = None,
        value_type_info: TypeInformation | None = None,
    ) -> None:
        pickled = Types.PICKLED_BYTE_ARRAY()
        super().__init__(name, Types.MAP(key_type_info or pickled, value_type_info or pickled))
        self.key_type_info = key_type_info
        self.value_type_info = value_type_info


def _as_reduce(reduce_function: ReduceFunction | Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    reduce = getattr(reduce_function, "reduce", None)
    if callable(reduce):
        return reduce
    if callable(reduce_function):
        return reduce_function
    raise TypeError(
        f"reduce_function must be a ReduceFunction or a callable of two values, "
        f"got {type(reduce_function).__name__}"
    )


class ReducingStateDescriptor(StateDescriptor):
    """Declares a :class:`ReducingState`; ``reduce_function`` may be a plain callable."""

    kind = "reducing"

    def __init__(
        self,
        name: str,
        reduce_function: ReduceFunction | Callable[[Any, Any], Any],
        type_info: TypeInformation | None = None,
    ) -> None:
        super().__init__(name, type_info)
        self.reduce_function = reduce_function
        #: the two-argument callable the backend applies
        self.reduce = _as_reduce(reduce_function)

    def get_reduce_function(self) -> ReduceFunction | Callable[[Any, Any], Any]:
        return self.reduce_function


class AggregatingStateDescriptor(StateDescriptor):
    """Declares an :class:`AggregatingState` driven by an ``AggregateFunction``."""

    kind = "aggregating"

    def __init__(
        self,
        name: str,
        agg_function: AggregateFunction,
        state_type_info: TypeInformation | None = None,
    ) -> None:
        super().__init__(name, state_type_info)
        for method in ("create_accumulator", "add", "get_result"):
            if not callable(getattr(agg_function, method, None)):
                raise TypeError(
                    f"agg_function must be an AggregateFunction; "
                    f"{type(agg_function).__name__} has no {method}()"
                )
        self.agg_function = agg_function

    def get_agg_function(self) -> AggregateFunction:
        return self.agg_function
