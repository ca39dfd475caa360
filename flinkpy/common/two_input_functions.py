"""The function classes of joins and of the broadcast state pattern, as ``pyflink.datastream.functions`` has them.

Split from :mod:`flinkpy.common.functions` (which exports them too): interval joins
(``ProcessJoinFunction``), window joins and co-groups (``JoinFunction``, ``FlatJoinFunction``,
``CoGroupFunction``) and the two broadcast process functions with their contexts.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from flinkpy.common.functions import KEY, OUT, Function, TimeDomain, TimerService

if TYPE_CHECKING:
    from flinkpy.common.output_tag import OutputTag
    from flinkpy.common.state import BroadcastState, MapStateDescriptor, ReadOnlyBroadcastState


class ProcessJoinFunction(Function):
    """The function of an interval join (``KeyedStream.interval_join``): called once per pair of
    a left and a right record with equal keys whose timestamps are within the join's bounds.

    ``process_element`` returns or yields the outputs; each carries the larger of the two
    timestamps. ``ctx`` gives both timestamps and emits to side outputs.
    """

    class Context(abc.ABC):
        @abc.abstractmethod
        def get_left_timestamp(self) -> int:
            """The left record's timestamp."""

        @abc.abstractmethod
        def get_right_timestamp(self) -> int:
            """The right record's timestamp."""

        @abc.abstractmethod
        def get_timestamp(self) -> int:
            """The output's timestamp: the larger of the two."""

        @abc.abstractmethod
        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag``."""

    @abc.abstractmethod
    def process_element(self, left: Any, right: Any, ctx: ProcessJoinFunction.Context) -> Iterable[Any] | None:
        ...


class JoinFunction(Function):
    """A window join's function (``DataStream.join``): one output per pair of records of the two
    inputs with equal keys in the same window."""

    @abc.abstractmethod
    def join(self, first: Any, second: Any) -> Any:
        ...


class FlatJoinFunction(Function):
    """A window join's function with any number of outputs per pair: ``join`` returns an
    iterable or yields."""

    @abc.abstractmethod
    def join(self, first: Any, second: Any) -> Iterable[Any] | None:
        ...


class CoGroupFunction(Function):
    """A window co-group's function (``DataStream.co_group``): called once per window and key
    with the records of each input (either may be empty); returns an iterable or yields."""

    @abc.abstractmethod
    def co_group(self, first: Iterable[Any], second: Iterable[Any]) -> Iterable[Any] | None:
        ...
#: the two inputs' types of a broadcast process function (``BroadcastProcessFunction[IN1, IN2, OUT]``)
IN1 = TypeVar("IN1")
IN2 = TypeVar("IN2")


class BaseBroadcastProcessFunction(Function):
    """What both broadcast process functions share: the contexts their two methods receive.

    A broadcast connection (``stream.connect(rules.broadcast(descriptor))``) sends every record
    of the broadcast stream to every parallel instance; ``process_broadcast_element`` sees it with
    read-write access to the broadcast state, ``process_element`` sees the other stream's records
    with read-only access. Keeping writes on the broadcast side is what keeps every instance's
    copy of the state the same.
    """

    class BaseContext(abc.ABC):
        """Time and side outputs, on both sides."""

        @abc.abstractmethod
        def timestamp(self) -> int | None:
            """The current record's timestamp, or None if it has none."""

        @abc.abstractmethod
        def current_processing_time(self) -> int:
            """The processing time, in milliseconds since the epoch."""

        @abc.abstractmethod
        def current_watermark(self) -> int:
            """The operator's event time: the minimum watermark of its two inputs."""

        @abc.abstractmethod
        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag`` (``yield tag, value`` works too)."""

    class Context(BaseContext):
        """The broadcast side's context: the broadcast state may be read and written."""

        @abc.abstractmethod
        def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState:
            """The broadcast state declared by ``state_descriptor`` (one passed to ``broadcast()``)."""

    class ReadOnlyContext(BaseContext):
        """The non-broadcast side's context: the broadcast state may only be read."""

        @abc.abstractmethod
        def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> ReadOnlyBroadcastState:
            """A read-only view of the broadcast state declared by ``state_descriptor``."""


class BroadcastProcessFunction(BaseBroadcastProcessFunction, Generic[IN1, IN2, OUT]):
    """The function of a non-keyed stream connected to a broadcast stream.

    ``process_element(value, ctx)`` handles the non-broadcast stream's records (read-only
    broadcast state); ``process_broadcast_element(value, ctx)`` handles the broadcast records
    (read-write). Both may return or ``yield`` outputs, and ``yield (output_tag, value)`` for a
    side output.
    """

    class Context(BaseBroadcastProcessFunction.Context, abc.ABC):
        pass

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, abc.ABC):
        pass

    @abc.abstractmethod
    def process_element(self, value: Any, ctx: BroadcastProcessFunction.ReadOnlyContext) -> Iterable[Any] | None:
        ...

    @abc.abstractmethod
    def process_broadcast_element(self, value: Any, ctx: BroadcastProcessFunction.Context) -> Iterable[Any] | None:
        ...


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction, Generic[KEY, IN1, IN2, OUT]):
    """The function of a keyed stream connected to a broadcast stream.

    ``process_element`` also has the key's keyed state (declared in ``open()``), timers and
    ``get_current_key()``; ``on_timer`` fires them. ``process_broadcast_element`` has no current
    key, but may visit the keyed state of every key of this instance with
    ``ctx.apply_to_keyed_state(descriptor, function(key, state))`` — say, to drop what a
    removed rule had gathered.
    """

    class Context(BaseBroadcastProcessFunction.Context, abc.ABC):
        @abc.abstractmethod
        def apply_to_keyed_state(self, state_descriptor: Any, function: Any) -> None:
            """Call ``function(key, state)`` for every key that has ``state_descriptor``'s state
            in this parallel instance, with ``state`` bound to that key."""

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, abc.ABC):
        @abc.abstractmethod
        def timer_service(self) -> TimerService:
            ...

        @abc.abstractmethod
        def get_current_key(self) -> Any:
            ...

    class OnTimerContext(ReadOnlyContext, abc.ABC):
        @abc.abstractmethod
        def time_domain(self) -> TimeDomain:
            ...

    @abc.abstractmethod
    def process_element(self, value: Any, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext) -> Iterable[Any] | None:
        ...

    @abc.abstractmethod
    def process_broadcast_element(self, value: Any, ctx: KeyedBroadcastProcessFunction.Context) -> Iterable[Any] | None:
        ...

    def on_timer(self, timestamp: int, ctx: KeyedBroadcastProcessFunction.OnTimerContext) -> Iterable[Any] | None:
        """Called when a timer of the current key fires; default: nothing."""
        return None
