"""User function classes, named as in ``pyflink.datastream.functions``.

A job subclasses these (or passes plain callables where the DataStream API allows it). Every
function gets ``open(runtime_context)`` before its first record, in the task process, and
``close()`` at the end; that is where it declares its state.

>>> class Tokenizer(FlatMapFunction):
...     def flat_map(self, value):
...         yield from value.split()
>>> list(Tokenizer().flat_map("to be or"))
['to', 'be', 'or']

A keyed process function that counts per key:

>>> from flinkpy.datastream.state import ValueStateDescriptor
>>> class Count(KeyedProcessFunction):
...     def open(self, runtime_context):
...         self.count = runtime_context.get_state(ValueStateDescriptor("count"))
...     def process_element(self, value, ctx):
...         n = (self.count.value() or 0) + 1
...         self.count.update(n)
...         yield ctx.get_current_key(), n
"""

from __future__ import annotations

import abc
import enum
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from flinkpy.common.output_tag import OutputTag
    from flinkpy.common.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ReducingState,
        ReducingStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )


#: the type parameters of PyFlink's generic function classes (``ProcessWindowFunction[IN, OUT,
#: KEY, W]``, ``Trigger[T, W]``): documentation for the reader, not checked at run time
IN = TypeVar("IN")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")
T = TypeVar("T")
W = TypeVar("W")
W2 = TypeVar("W2")


class TimeDomain(enum.Enum):
    """Which clock fired a timer."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1


class RuntimeContext(abc.ABC):
    """What a function knows about where it runs, and its door to keyed state.

    The task process implements it; ``get_*_state`` is only valid on a keyed stream.
    """

    @abc.abstractmethod
    def get_task_name(self) -> str:
        ...

    @abc.abstractmethod
    def get_number_of_parallel_subtasks(self) -> int:
        ...

    @abc.abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int:
        ...

    @abc.abstractmethod
    def get_index_of_this_subtask(self) -> int:
        ...

    @abc.abstractmethod
    def get_attempt_number(self) -> int:
        ...

    def get_task_name_with_subtasks(self) -> str:
        """Flink's ``name (i/n)#attempt`` form, with 1-based i, as shown in logs."""
        return (
            f"{self.get_task_name()} ({self.get_index_of_this_subtask() + 1}/"
            f"{self.get_number_of_parallel_subtasks()})#{self.get_attempt_number()}"
        )

    @abc.abstractmethod
    def get_job_parameter(self, key: str, default_value: str) -> str:
        ...

    @abc.abstractmethod
    def get_metrics_group(self) -> Any:
        ...

    @abc.abstractmethod
    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState:
        ...

    @abc.abstractmethod
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState:
        ...

    @abc.abstractmethod
    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState:
        ...

    @abc.abstractmethod
    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState:
        ...

    @abc.abstractmethod
    def get_aggregating_state(
        self, state_descriptor: AggregatingStateDescriptor
    ) -> AggregatingState:
        ...


class TimerService(abc.ABC):
    """Clocks and timers of a keyed function; timers are per key and fire ``on_timer``."""

    @abc.abstractmethod
    def current_processing_time(self) -> int:
        ...

    @abc.abstractmethod
    def current_watermark(self) -> int:
        ...

    @abc.abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None:
        ...

    @abc.abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None:
        ...

    @abc.abstractmethod
    def delete_processing_time_timer(self, timestamp: int) -> None:
        ...

    @abc.abstractmethod
    def delete_event_time_timer(self, timestamp: int) -> None:
        ...


class Function(abc.ABC):  # noqa: B024  (no abstract method: open/close are optional hooks)
    """Base of all user functions: lifecycle hooks, both optional.

    A function reaches its task pickled. Pickle's default restore writes the attributes into
    the instance's ``__dict__``, which takes the object off CPython's (3.11+) compact attribute
    layout for good: every ``self.x`` in a per-record method then costs a dictionary lookup
    instead of a specialised load, up to half the time of a small ``invoke()``. Setting them
    one by one keeps the compact layout; what is restored is the same.

    >>> import cloudpickle  # how a job's functions travel
    >>> class Count(SinkFunction):
    ...     def __init__(self):
    ...         self.count = 0
    ...     def invoke(self, value, context):
    ...         self.count += 1
    >>> c = Count(); c.count = 7
    >>> cloudpickle.loads(cloudpickle.dumps(c)).count
    7
    """

    def __setstate__(self, state: Any) -> None:
        # pickle's shapes: the instance's dict, or (dict or None, slots' values or None)
        slots = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        if state:
            if not isinstance(state, dict):
                raise TypeError(f"cannot restore a {type(self).__name__} from a {type(state).__name__}: its state is not a dict")
            for name, value in state.items():
                object.__setattr__(self, sys.intern(name), value)  # as pickle does: no __setattr__ of the class
        if slots:
            for name, value in slots.items():
                setattr(self, name, value)

    def open(self, runtime_context: RuntimeContext) -> None:
        pass

    def close(self) -> None:
        pass


class MapFunction(Function):
    """One record in, one record out."""

    @abc.abstractmethod
    def map(self, value: Any) -> Any:
        ...


class FlatMapFunction(Function):
    """One record in, any number out: return an iterable or ``yield``."""

    @abc.abstractmethod
    def flat_map(self, value: Any) -> Iterable[Any]:
        ...


class FilterFunction(Function):
    """Keeps the records for which ``filter`` is true."""

    @abc.abstractmethod
    def filter(self, value: Any) -> bool:
        ...


class ReduceFunction(Function):
    """Combines two values of the same type into one (rolling reduce, reducing state)."""

    @abc.abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any:
        ...


class AggregateFunction(Function):
    """Folds values into an accumulator and reads a result from it.

    ``add`` and ``merge`` return the new accumulator (they may also mutate and return it).
    """

    @abc.abstractmethod
    def create_accumulator(self) -> Any:
        ...

    @abc.abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any:
        ...

    @abc.abstractmethod
    def get_result(self, accumulator: Any) -> Any:
        ...

    @abc.abstractmethod
    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        ...


class KeySelector(Function):
    """Extracts the key of a record for ``key_by``; keys must hash stably (see key groups)."""

    @abc.abstractmethod
    def get_key(self, value: Any) -> Any:
        ...


class Partitioner(Function):
    """Chooses the downstream channel of a key for ``partition_custom``."""

    @abc.abstractmethod
    def partition(self, key: Any, num_partitions: int) -> int:
        ...


class CoMapFunction(Function):
    """A map over two connected streams: ``map1`` for the first, ``map2`` for the second."""

    @abc.abstractmethod
    def map1(self, value: Any) -> Any:
        ...

    @abc.abstractmethod
    def map2(self, value: Any) -> Any:
        ...


class CoFlatMapFunction(Function):
    """A flat map over two connected streams."""

    @abc.abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any]:
        ...

    @abc.abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any]:
        ...


class ProcessFunction(Function):
    """The most general per-record function: outputs, side outputs, timestamps, time.

    ``process_element`` may return an iterable of outputs or ``yield`` them (or return None).
    """

    class Context(abc.ABC):
        @abc.abstractmethod
        def timestamp(self) -> int | None:
            """The current record's timestamp, or None if it has none."""

        @abc.abstractmethod
        def timer_service(self) -> TimerService:
            ...

        @abc.abstractmethod
        def output(self, output_tag: OutputTag, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag``."""

    @abc.abstractmethod
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None:
        ...


class KeyedProcessFunction(Function):
    """A process function on a keyed stream: keyed state and per-key timers."""

    class Context(abc.ABC):
        @abc.abstractmethod
        def timestamp(self) -> int | None:
            ...

        @abc.abstractmethod
        def timer_service(self) -> TimerService:
            ...

        @abc.abstractmethod
        def get_current_key(self) -> Any:
            ...

        @abc.abstractmethod
        def output(self, output_tag: OutputTag, value: Any) -> None:
            ...

    class OnTimerContext(Context):
        @abc.abstractmethod
        def time_domain(self) -> TimeDomain:
            ...

    @abc.abstractmethod
    def process_element(
        self, value: Any, ctx: KeyedProcessFunction.Context
    ) -> Iterable[Any] | None:
        ...

    def on_timer(
        self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext
    ) -> Iterable[Any] | None:
        """Called when a timer registered for the current key fires; default: nothing."""
        return None


class CoProcessFunction(Function):
    """A process function over two connected streams."""

    class Context(ProcessFunction.Context, abc.ABC):
        pass

    @abc.abstractmethod
    def process_element1(self, value: Any, ctx: CoProcessFunction.Context) -> Iterable[Any] | None:
        ...

    @abc.abstractmethod
    def process_element2(self, value: Any, ctx: CoProcessFunction.Context) -> Iterable[Any] | None:
        ...


class KeyedCoProcessFunction(Function):
    """A process function over two connected keyed streams, with keyed state and timers."""

    class Context(KeyedProcessFunction.Context, abc.ABC):
        pass

    class OnTimerContext(KeyedProcessFunction.OnTimerContext, abc.ABC):
        pass

    @abc.abstractmethod
    def process_element1(
        self, value: Any, ctx: KeyedCoProcessFunction.Context
    ) -> Iterable[Any] | None:
        ...

    @abc.abstractmethod
    def process_element2(
        self, value: Any, ctx: KeyedCoProcessFunction.Context
    ) -> Iterable[Any] | None:
        ...

    def on_timer(
        self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext
    ) -> Iterable[Any] | None:
        return None


class SinkFunction(Function):
    """A simple sink called once per record (see flinkpy.connectors for checkpointed sinks)."""

    @abc.abstractmethod
    def invoke(self, value: Any, context: Any) -> None:
        ...

    def finish(self) -> None:
        """Called once at the end of a bounded input, before ``close()``."""


class SourceFunction(Function):
    """A simple source that pushes records from ``run`` until it returns or is cancelled.

    ``cancel()`` is called from another thread; ``run`` should check a flag it sets. For
    sources whose position is checkpointed, use flinkpy.connectors.base.Source instead.
    """

    class SourceContext(abc.ABC):
        @abc.abstractmethod
        def collect(self, element: Any) -> None:
            ...

        @abc.abstractmethod
        def collect_with_timestamp(self, element: Any, timestamp: int) -> None:
            ...

        @abc.abstractmethod
        def emit_watermark(self, watermark: int) -> None:
            ...

        def mark_as_temporarily_idle(self) -> None:
            pass

    @abc.abstractmethod
    def run(self, ctx: SourceFunction.SourceContext) -> None:
        ...

    @abc.abstractmethod
    def cancel(self) -> None:
        ...


class FunctionSnapshotContext:
    """What ``CheckpointedFunction.snapshot_state`` receives."""

    def __init__(self, checkpoint_id: int, checkpoint_timestamp: int):
        self._id = checkpoint_id
        self._ts = checkpoint_timestamp

    def get_checkpoint_id(self) -> int:
        return self._id

    def get_checkpoint_timestamp(self) -> int:
        return self._ts


class FunctionInitializationContext:
    """What ``CheckpointedFunction.initialize_state`` receives: the operator state store."""

    def __init__(self, operator_state_store: Any, restored: bool):
        self._store = operator_state_store
        self._restored = restored

    def get_operator_state_store(self) -> Any:
        return self._store

    def is_restored(self) -> bool:
        return self._restored


class CheckpointedFunction(abc.ABC):  # noqa: B024
    """Mix into a function to keep operator state (lists redistributed on rescale), as Flink's
    CheckpointedFunction. ``initialize_state`` runs before ``open``; ``snapshot_state`` runs in
    every checkpoint, before the state is copied out.

    >>> class Buffering(MapFunction, CheckpointedFunction):
    ...     def initialize_state(self, context):
    ...         store = context.get_operator_state_store()
    ...         self.seen = store.get_list_state(ListStateDescriptor("seen", None))
    ...     def snapshot_state(self, context):
    ...         pass
    ...     def map(self, value):
    ...         self.seen.add(value)
    ...         return value
    """

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        pass

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        pass


class CheckpointListener(abc.ABC):  # noqa: B024
    """Mix in to learn when a checkpoint completed (to commit side effects) or was aborted."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        pass


# The function classes of joins and of the broadcast state pattern live in their own module;
# importable from here too, as in PyFlink. Looked up on first use (PEP 562): that module
# subclasses Function, so importing it from here at import time would be circular.
_TWO_INPUT = frozenset({
    "IN1", "IN2", "BaseBroadcastProcessFunction", "BroadcastProcessFunction", "CoGroupFunction",
    "FlatJoinFunction", "JoinFunction", "KeyedBroadcastProcessFunction", "ProcessJoinFunction",
})


def __getattr__(name: str) -> Any:
    if name in _TWO_INPUT:
        from flinkpy.common import two_input_functions

        return getattr(two_input_functions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
