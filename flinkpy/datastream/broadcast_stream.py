"""The broadcast state pattern: a low-volume stream of rules sent to every parallel instance
of an operator, which keeps them as broadcast state and applies them to another stream.

``rules.broadcast(descriptor)`` makes a :class:`BroadcastStream` (the descriptors are
MapStateDescriptors: the broadcast state it fills); ``events.connect(broadcast_stream)`` (or
``keyed_events.connect(...)``) a :class:`BroadcastConnectedStream`, whose ``process`` runs a
BroadcastProcessFunction (or, keyed, a KeyedBroadcastProcessFunction). Every instance receives
every rule, in the order the rule stream's subtask sent it, and updates its own copy of the
state in ``process_broadcast_element``; ``process_element`` reads it. The state is checkpointed
by every instance and restored at any parallelism (flinkpy.state.operator).

The two inputs are not ordered with respect to each other: a rule and an event that arrive
"together" may be processed in either order. A program that needs the rules first holds events
back in keyed state until the rules arrive, or orders the two by event time (timers).

>>> from flinkpy.datastream import StreamExecutionEnvironment
>>> from flinkpy.datastream.functions import BroadcastProcessFunction
>>> from flinkpy.datastream.state import MapStateDescriptor
>>> LIMITS = MapStateDescriptor("limits")
>>> class Check(BroadcastProcessFunction):
...     def process_element(self, value, ctx):
...         limit = ctx.get_broadcast_state(LIMITS).get("max")
...         yield value, limit is not None and value > limit
...     def process_broadcast_element(self, value, ctx):
...         ctx.get_broadcast_state(LIMITS).put("max", value)
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> limits = env.from_collection([10]).broadcast(LIMITS)
>>> checked = env.from_collection([5, 50]).connect(limits).process(Check())
>>> len(list(checked.execute_and_collect()))
2
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import BROADCAST, StreamRef

if TYPE_CHECKING:
    from flinkpy.datastream.data_stream import DataStream

#: node kinds of the two broadcast operators (flinkpy.task.broadcast builds them)
KIND = "broadcast_process"
KEYED_KIND = "keyed_broadcast_process"


class BroadcastStream:
    """A stream whose records go to every parallel instance of the operator it is connected to,
    together with the broadcast states (MapStateDescriptors) that operator keeps.

    Made by ``DataStream.broadcast(descriptor, ...)``; its only use is
    ``other.connect(broadcast_stream)``.
    """

    def __init__(self, stream: DataStream, descriptors: tuple[Any, ...]):
        from flinkpy.common.state import MapStateDescriptor

        if not descriptors:
            raise InvalidProgramError("broadcast() of a BroadcastStream needs at least one MapStateDescriptor")
        for d in descriptors:
            if not isinstance(d, MapStateDescriptor):
                raise InvalidProgramError(
                    f"broadcast() takes MapStateDescriptors, got {type(d).__name__}",
                    remedy="declare broadcast state as MapStateDescriptor(name, key_type, value_type); "
                    "broadcast() without arguments only sends every record to every subtask",
                )
        names = [d.get_name() for d in descriptors]
        if len(set(names)) != len(names):
            raise InvalidProgramError(f"broadcast() got two descriptors of the same name: {names}")
        self.stream = stream
        self.descriptors = tuple(descriptors)

    def get_execution_environment(self) -> Any:
        return self.stream._env

    def __repr__(self) -> str:
        return f"BroadcastStream(states={[d.get_name() for d in self.descriptors]})"


class BroadcastConnectedStream:
    """A (keyed or non-keyed) stream connected to a :class:`BroadcastStream`.

    :meth:`process` turns it into a two-input operator: the first input is the non-broadcast
    stream (partitioned as it was: by key if keyed), the second the broadcast stream, sent to
    every subtask.
    """

    def __init__(self, non_broadcast: DataStream, broadcast_stream: BroadcastStream):
        from flinkpy.datastream.data_stream import KeyedStream

        if non_broadcast._env is not broadcast_stream.stream._env:
            raise InvalidProgramError("connect() of streams from different execution environments")
        self.non_broadcast = non_broadcast
        self.broadcast_stream = broadcast_stream
        self.is_keyed = isinstance(non_broadcast, KeyedStream)

    def get_first_input(self) -> DataStream:
        """The non-broadcast stream."""
        return self.non_broadcast

    def get_second_input(self) -> BroadcastStream:
        """The broadcast stream."""
        return self.broadcast_stream

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        """Run a BroadcastProcessFunction (non-keyed stream) or a KeyedBroadcastProcessFunction
        (keyed stream): ``process_element`` for the first stream's records with read-only
        broadcast state, ``process_broadcast_element`` for every broadcast record with read-write
        broadcast state."""
        from flinkpy.datastream.data_stream import DataStream

        self._check(func)
        env = self.non_broadcast._env
        second = tuple(
            StreamRef(r.node_id, BROADCAST, None, r.side_tag, type_number=2) for r in self.broadcast_stream.stream._refs
        )
        inputs = tuple(replace(r, type_number=1) for r in self.non_broadcast._refs) + second
        if self.is_keyed:
            node = env._graph.add_node(
                KEYED_KIND, "Keyed Broadcast Process", func, inputs=inputs, key_selector=self.non_broadcast._selector
            )
        else:
            node = env._graph.add_node(KIND, "Broadcast Process", func, inputs=inputs)
        node.params["broadcast_state_descriptors"] = self.broadcast_stream.descriptors
        if output_type is not None:
            node.params["output_type"] = output_type
        return DataStream(env, (StreamRef(node.id),), node)

    def _check(self, func: Any) -> None:
        from flinkpy.common.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction

        missing = [m for m in ("process_element", "process_broadcast_element") if not callable(getattr(func, m, None))]
        expected = "KeyedBroadcastProcessFunction" if self.is_keyed else "BroadcastProcessFunction"
        if missing:
            raise InvalidProgramError(
                f"BroadcastConnectedStream.process() needs a {expected}, got {type(func).__name__} "
                f"without {', '.join(m + '()' for m in missing)}",
                remedy=f"subclass {expected} and implement process_element() and process_broadcast_element()",
            )
        if isinstance(func, KeyedBroadcastProcessFunction) and not self.is_keyed:
            raise InvalidProgramError(
                "a KeyedBroadcastProcessFunction needs a keyed stream connected to the broadcast stream",
                remedy="key the stream first: stream.key_by(key).connect(broadcast_stream).process(...), "
                "or use a BroadcastProcessFunction",
            )
        if isinstance(func, BroadcastProcessFunction) and self.is_keyed:
            raise InvalidProgramError(
                "a BroadcastProcessFunction runs on a non-keyed stream, but this one is keyed",
                remedy="use a KeyedBroadcastProcessFunction (keyed state, timers, apply_to_keyed_state), "
                "or connect the stream before key_by()",
            )
