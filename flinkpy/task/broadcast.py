"""The broadcast state pattern's operators: a data stream (input 1) and a broadcast stream
(input 2, every record to every subtask) into one two-input operator.

``process2`` runs ``process_broadcast_element`` with read-write access to the broadcast state;
``process`` runs ``process_element`` with a read-only view of it (flinkpy.state.broadcast). The
broadcast state is operator state in mode "broadcast" (flinkpy.state.operator): the chain gives
the operator its OperatorStateBackend before ``open`` (restored from a checkpoint, if any), and
snapshots it with the operator's other operator state.

The keyed variant adds what a KeyedProcessFunction has on the data side (keyed state, timers,
``on_timer``, ``get_current_key``) and, on the broadcast side, ``apply_to_keyed_state``: a
broadcast record has no key, but may visit every key's state in this subtask.
"""

from __future__ import annotations

from typing import Any, Callable

from flinkpy.errors import InvalidProgramError
from flinkpy.state.broadcast import BroadcastMapState, ReadOnlyView
from flinkpy.task.operators import (
    KeyedProcessOperator,
    ProcessOperator,
    user_method,
    _OnTimerContext,
    _ProcessContext,
    process_batch,
)

MIN_WATERMARK = -(2**63)


class _BroadcastStates:
    """The operator's broadcast states by name, registered from the descriptors that
    ``broadcast()`` was given (a function may only use those)."""

    def __init__(self, backend: Any, descriptors: tuple[Any, ...], operator_name: str):
        self.operator_name = operator_name
        self.states: dict[str, BroadcastMapState] = {d.get_name(): backend.get_broadcast_state(d) for d in descriptors}
        self.views = {name: ReadOnlyView(s) for name, s in self.states.items()}

    def _name(self, descriptor: Any) -> str:
        name = descriptor.get_name() if hasattr(descriptor, "get_name") else str(descriptor)
        if name not in self.states:
            raise InvalidProgramError(
                f"{self.operator_name!r} asks for broadcast state {name!r}, but its broadcast stream declares "
                f"{sorted(self.states) or 'none'}",
                remedy="pass the state's MapStateDescriptor to broadcast(...) on the broadcast stream",
            )
        return name

    def writable(self, descriptor: Any) -> BroadcastMapState:
        return self.states[self._name(descriptor)]

    def read_only(self, descriptor: Any) -> ReadOnlyView:
        return self.views[self._name(descriptor)]


class _TimeMixin:
    """Clocks for the broadcast contexts: the operator's watermark and processing time."""

    _operator: Any

    def current_processing_time(self) -> int:
        timers = getattr(self._operator, "timers", None)
        return timers.current_processing_time() if timers is not None else self._operator.clock()

    def current_watermark(self) -> int:
        timers = getattr(self._operator, "timers", None)
        return timers.current_watermark() if timers is not None else self._operator.watermark


class ReadOnlyContext(_TimeMixin, _ProcessContext):
    """``process_element``'s context: read-only broadcast state (and, keyed, key and timers)."""

    def __init__(self, operator: Any, timers: Any, states: _BroadcastStates):
        super().__init__(operator, timers)
        self._states = states

    def get_broadcast_state(self, state_descriptor: Any) -> ReadOnlyView:
        return self._states.read_only(state_descriptor)


class OnTimerContext(_TimeMixin, _OnTimerContext):
    """``on_timer``'s context (keyed): the firing timer's key and domain, read-only broadcast state."""

    def __init__(self, operator: Any, timers: Any, states: _BroadcastStates):
        super().__init__(operator, timers)
        self._states = states

    def get_broadcast_state(self, state_descriptor: Any) -> ReadOnlyView:
        return self._states.read_only(state_descriptor)


class Context(_TimeMixin, _ProcessContext):
    """``process_broadcast_element``'s context: read-write broadcast state, no current key;
    keyed, ``apply_to_keyed_state`` over every key of a keyed state."""

    def __init__(self, operator: Any, states: _BroadcastStates, backend: Any = None):
        super().__init__(operator, None)
        self._states = states
        self._backend = backend

    def get_broadcast_state(self, state_descriptor: Any) -> BroadcastMapState:
        return self._states.writable(state_descriptor)

    def get_current_key(self) -> Any:
        raise InvalidProgramError(
            "a broadcast record has no key: get_current_key() is only available in process_element() and on_timer()",
            remedy="visit the keys' state with ctx.apply_to_keyed_state(descriptor, function)",
        )

    def timer_service(self) -> Any:
        raise InvalidProgramError(
            "timers cannot be registered for a broadcast record (it has no key)",
            remedy="register timers in process_element() of a KeyedBroadcastProcessFunction",
        )

    def apply_to_keyed_state(self, state_descriptor: Any, function: Callable[[Any, Any], Any]) -> None:
        """Call ``function(key, state)`` for every key of this subtask that has the state of
        ``state_descriptor``, the state bound to that key (it may read, update or clear it)."""
        backend = self._backend
        if backend is None:
            raise InvalidProgramError(
                "apply_to_keyed_state() needs keyed state: it exists only when a keyed stream is connected",
                remedy="key the stream first and use a KeyedBroadcastProcessFunction",
            )
        state = backend.get_partitioned_state(state_descriptor)
        try:
            for key, key_group in backend.keys_of(state_descriptor.get_name()):
                backend.set_current_key_and_group(key, key_group)
                function(key, state)
        finally:
            backend.clear_current_key()


class BroadcastProcessOperator(ProcessOperator):
    """A BroadcastProcessFunction on a non-keyed stream connected to a broadcast stream."""

    #: the broadcast states' OperatorStateBackend, given by the chain before ``open``
    broadcast_backend: Any = None

    def __init__(self, name: str, fn: Any, output: Any, descriptors: tuple[Any, ...]):
        super().__init__(name, fn, output)
        self.descriptors = descriptors

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        states = _BroadcastStates(self.broadcast_backend, self.descriptors, self.name)
        self._ctx = ReadOnlyContext(self, None, states)
        self._broadcast_ctx = Context(self, states)
        self._f2 = user_method(self.fn, "process_broadcast_element")

    def process2(self, values: list, timestamps: list[int] | None) -> None:
        process_batch(self._f2, self._broadcast_ctx, values, timestamps, self.output)


class KeyedBroadcastProcessOperator(KeyedProcessOperator):
    """A KeyedBroadcastProcessFunction on a keyed stream connected to a broadcast stream."""

    broadcast_backend: Any = None
    watermark = MIN_WATERMARK

    def __init__(self, *args: Any, descriptors: tuple[Any, ...], **kw: Any):
        super().__init__(*args, method="process_element", **kw)
        self.descriptors = descriptors

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        states = _BroadcastStates(self.broadcast_backend, self.descriptors, self.name)
        self._ctx = ReadOnlyContext(self, self.timers, states)
        self._timer_ctx = OnTimerContext(self, self.timers, states)
        self._broadcast_ctx = Context(self, states, self.backend)
        self._f2 = user_method(self.fn, "process_broadcast_element")

    def process2(self, values: list, timestamps: list[int] | None) -> None:
        # a broadcast record has no key: keyed state is out of reach but through apply_to_keyed_state
        self.backend.clear_current_key()
        process_batch(self._f2, self._broadcast_ctx, values, timestamps, self.output)


#: node kinds (flinkpy.datastream.broadcast_stream) -> operator classes
KINDS = {"broadcast_process": BroadcastProcessOperator, "keyed_broadcast_process": KeyedBroadcastProcessOperator}
