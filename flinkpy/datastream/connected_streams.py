"""ConnectedStreams: two streams, possibly of different types, into one two-input operator.

``a.connect(b)`` keeps the two streams apart — unlike ``union``, each record arrives at the
function of its own input (``map1``/``map2``, ``process_element1``/``process_element2``) — while
the operator's state, timers and event time are shared. Keyed (``key_by(k1, k2)``, or two keyed
streams connected), the records of both inputs with equal keys meet in the same subtask and see
the same keyed state: the building block of joins and of rules that control a stream.

>>> from flinkpy.datastream import StreamExecutionEnvironment
>>> from flinkpy.datastream.functions import CoMapFunction
>>> class Tag(CoMapFunction):
...     def map1(self, value):
...         return ("number", value)
...     def map2(self, value):
...         return ("word", value)
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> numbers, words = env.from_collection([1, 2]), env.from_collection(["a"])
>>> sorted(numbers.connect(words).map(Tag()).execute_and_collect())
[('number', 1), ('number', 2), ('word', 'a')]
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import HASH, StreamRef

if TYPE_CHECKING:
    from flinkpy.datastream.data_stream import DataStream


def _selector(key_selector: Any, what: str) -> Callable:
    if hasattr(key_selector, "get_key"):
        return key_selector.get_key  # type: ignore[no-any-return]
    if callable(key_selector):
        return key_selector  # type: ignore[no-any-return]
    raise InvalidProgramError(
        f"{what} needs a function or a KeySelector, got {type(key_selector).__name__}",
        remedy="pass a lambda, a def, or a KeySelector",
    )


def _require(fn: Any, methods: tuple[str, ...], what: str, expected: str) -> None:
    missing = [m for m in methods if not callable(getattr(fn, m, None))]
    if missing:
        raise InvalidProgramError(
            f"{what} needs a {expected}, got {type(fn).__name__} without {', '.join(m + '()' for m in missing)}",
            remedy=f"subclass {expected} and implement {' and '.join(m + '()' for m in methods)}",
        )


class ConnectedStreams:
    """Two streams connected by :meth:`DataStream.connect`, for a two-input operator.

    The methods are PyFlink's: :meth:`map` (a CoMapFunction), :meth:`flat_map` (a
    CoFlatMapFunction), :meth:`process` (a CoProcessFunction, or a KeyedCoProcessFunction once
    keyed) and :meth:`key_by`. The resulting operator's parallelism is the environment's default
    unless set on its output stream (``set_parallelism``).
    """

    def __init__(self, stream1: DataStream, stream2: DataStream, keys: tuple[Callable, Callable] | None = None):
        if stream1._env is not stream2._env:
            raise InvalidProgramError("connect() of streams from different execution environments")
        self.stream1 = stream1
        self.stream2 = stream2
        #: the key selectors of the two inputs when keyed (None: not keyed)
        self._keys = keys

    @property
    def is_keyed(self) -> bool:
        return self._keys is not None

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: Any = None) -> ConnectedStreams:
        """Key both inputs, each by its own selector: records of equal keys reach the same subtask
        and share its keyed state and timers."""
        k1 = _selector(key_selector1, "key_by()'s first key selector")
        k2 = _selector(key_selector2, "key_by()'s second key selector")
        return ConnectedStreams(self.stream1, self.stream2, (k1, k2))

    def _refs(self) -> tuple[StreamRef, ...]:
        if self._keys is None:
            first = self.stream1._refs
            second = self.stream2._refs
        else:
            k1, k2 = self._keys
            first = tuple(StreamRef(r.node_id, HASH, k1, r.side_tag) for r in self.stream1._refs)
            second = tuple(StreamRef(r.node_id, HASH, k2, r.side_tag) for r in self.stream2._refs)
        return first + tuple(replace(r, type_number=2) for r in second)

    def _add(self, kind: str, name: str, fn: Any, output_type: Any) -> DataStream:
        from flinkpy.datastream.data_stream import DataStream

        env = self.stream1._env
        if self._keys is not None:
            node = env._graph.add_node("keyed_" + kind, name, fn, inputs=self._refs(), key_selector=self._keys[0])
            node.params["key_selector2"] = self._keys[1]
        else:
            node = env._graph.add_node(kind, name, fn, inputs=self._refs())
        if output_type is not None:
            node.params["output_type"] = output_type
        return DataStream(env, (StreamRef(node.id),), node)

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        """One output per record of either input: ``func.map1(value)`` for the first input's
        records, ``func.map2(value)`` for the second's (a CoMapFunction)."""
        _require(func, ("map1", "map2"), "ConnectedStreams.map()", "CoMapFunction")
        return self._add("co_map", "Co-Map", func, output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        """Zero or more outputs per record: ``flat_map1`` / ``flat_map2`` of a CoFlatMapFunction
        return an iterable or are generators."""
        _require(func, ("flat_map1", "flat_map2"), "ConnectedStreams.flat_map()", "CoFlatMapFunction")
        return self._add("co_flat_map", "Co-Flat Map", func, output_type)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        """Run a CoProcessFunction (``process_element1`` / ``process_element2`` with a context
        for timestamps and side outputs), or — keyed — a KeyedCoProcessFunction, which also has
        keyed state, timers and ``on_timer``."""
        from flinkpy.common.functions import KeyedCoProcessFunction

        _require(func, ("process_element1", "process_element2"), "ConnectedStreams.process()", "CoProcessFunction")
        if isinstance(func, KeyedCoProcessFunction) and self._keys is None:
            raise InvalidProgramError(
                "a KeyedCoProcessFunction needs keyed connected streams",
                remedy="key both inputs: a.connect(b).key_by(key1, key2).process(...)",
            )
        name = "Keyed Co-Process" if self._keys is not None else "Co-Process"
        return self._add("co_process", name, func, output_type)


class CustomPartitioning:
    """The channel selector of a ``partition_custom`` edge: the record's key, through the user's
    Partitioner, picks the subtask (``partition(key, num_partitions)``)."""

    def __init__(self, partitioner: Any, key_selector: Callable):
        self.partition = partitioner.partition if hasattr(partitioner, "partition") else partitioner
        self.key = key_selector

    def __call__(self, record: Any, num_partitions: int) -> int:
        return self.partition(self.key(record), num_partitions)  # type: ignore[no-any-return]
