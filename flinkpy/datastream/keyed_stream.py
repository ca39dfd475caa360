"""KeyedStream: a stream partitioned by key, and what PyFlink runs on one.

Split from :mod:`flinkpy.datastream.data_stream` (which still exports it): the keyed
operations — rolling aggregations, keyed process functions, windows, interval joins — are a
concept of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from flinkpy.datastream.data_stream import DataStream, _check_function
from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import StreamRef

if TYPE_CHECKING:
    from flinkpy.datastream.stream_execution_environment import StreamExecutionEnvironment


class KeyedStream(DataStream):
    """A stream partitioned by key (``DataStream.key_by``): the next operator sees each key in
    one subtask, and keeps its state, timers and windows per key.

    Keyed state is checkpointed by key group (``set_max_parallelism`` of them) and restored
    into whichever subtask owns the group after a restart or a rescale. In STREAMING mode the
    aggregations (``reduce``, ``sum``, ``max_by``, ...) emit every updated value; in BATCH mode,
    each key's final value once the input ends. A KeyedStream is a partitioning, not an
    operator: name, uid and parallelism go on the operator that follows it.

    >>> from flinkpy.datastream import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> sales = env.from_collection([("tea", 3), ("cake", 2), ("tea", 4), ("cake", 5), ("tea", 1)])
    >>> totals = sales.key_by(lambda sale: sale[0]).sum(1)
    >>> sorted(totals.execute_and_collect())    # every running total
    [('cake', 2), ('cake', 7), ('tea', 3), ('tea', 7), ('tea', 8)]
    """

    def __init__(self, env: "StreamExecutionEnvironment", refs: tuple[StreamRef, ...], selector: Callable, key_type: Any, origin: DataStream):
        super().__init__(env, refs, None)
        self._selector = selector
        self._key_type = key_type
        self._origin = origin

    def _keyed(self, kind: str, name: str, fn: Any = None, output_type: Any = None, **params: Any) -> DataStream:
        node = self._env._graph.add_node(kind, name, fn, inputs=self._refs, key_selector=self._selector)
        node.params.update(params)
        if output_type is not None:
            node.params["output_type"] = output_type
        return DataStream(self._env, (StreamRef(node.id),), node)

    def get_key_type(self) -> Any:
        """The ``key_type`` given to ``key_by`` (None if none was)."""
        return self._key_type

    def reduce(self, func: Any) -> DataStream:
        """A running reduce per key: the first record of a key is its value, each next one is combined
        with it by ``func(value, record)`` (or ``func.reduce``), and every new value is emitted
        (in BATCH mode, only each key's final value). The value is keyed state: checkpointed,
        restored, and moved with its key group on a rescale.

        >>> from flinkpy.datastream import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> longest = env.from_collection(["ant", "bee", "wasp"]).key_by(len).reduce(lambda a, b: max(a, b))
        >>> sorted(longest.execute_and_collect())
        ['ant', 'bee', 'wasp']
        """
        _check_function(func, "reduce", "reduce")
        return self._keyed("keyed_reduce", "Keyed Reduce", func, self._origin.get_type())

    def _aggregate(self, name: str, how: str, position: int | str) -> DataStream:
        from flinkpy.datastream.aggregations import field_aggregator

        return self._keyed("keyed_reduce", name, field_aggregator(how, position), self._origin.get_type())

    def sum(self, position_to_sum: int | str = 0) -> DataStream:
        """A running sum per key of field ``position_to_sum`` (a tuple index, or a Row field name);
        the other fields are those of the key's first record. See :meth:`reduce`.
        """
        return self._aggregate("Keyed Sum", "sum", position_to_sum)

    def min(self, position_to_min: int | str = 0) -> DataStream:
        """A running minimum per key of field ``position_to_min``; the other fields are those of the
        key's first record (use :meth:`min_by` for the whole record that holds the minimum).
        """
        return self._aggregate("Keyed Min", "min", position_to_min)

    def max(self, position_to_max: int | str = 0) -> DataStream:
        """A running maximum per key of field ``position_to_max``; the other fields are those of the
        key's first record (use :meth:`max_by` for the whole record that holds the maximum).
        """
        return self._aggregate("Keyed Max", "max", position_to_max)

    def min_by(self, position_to_min_by: int | str = 0) -> DataStream:
        """Per key, the record with the smallest field ``position_to_min_by`` so far."""
        return self._aggregate("Keyed MinBy", "min_by", position_to_min_by)

    def max_by(self, position_to_max_by: int | str = 0) -> DataStream:
        """Per key, the record with the largest field ``position_to_max_by`` so far."""
        return self._aggregate("Keyed MaxBy", "max_by", position_to_max_by)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        """Run a :class:`~flinkpy.datastream.KeyedProcessFunction`: ``process_element(value, ctx)``
        with the key's state (declared in ``open`` through ``get_runtime_context()``) and timers
        (``ctx.timer_service()``); ``on_timer(timestamp, ctx)`` is called when one fires, for its key.
        State and timers are checkpointed per key group.
        """
        _check_function(func, "process_element", "process")
        return self._keyed("keyed_process", "KeyedProcess", func, output_type)

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        """:meth:`DataStream.map` with keyed state: a :class:`~flinkpy.datastream.MapFunction` may
        declare state in ``open``, and each call sees the state of its record's key.
        """
        _check_function(func, "map", "map")
        return self._keyed("keyed_map", "Map", func, output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        """:meth:`DataStream.flat_map` with keyed state (see :meth:`map`)."""
        _check_function(func, "flat_map", "flat_map")
        return self._keyed("keyed_flat_map", "FlatMap", func, output_type)

    def filter(self, func: Any) -> DataStream:
        """:meth:`DataStream.filter` with keyed state (see :meth:`map`)."""
        _check_function(func, "filter", "filter")
        return self._keyed("keyed_filter", "Filter", func, self._origin.get_type())

    def key_by(self, key_selector: Any, key_type: Any = None) -> "KeyedStream":
        """Key the original stream by another selector instead (the keys do not nest)."""
        return self._origin.key_by(key_selector, key_type)

    def window(self, window_assigner: Any) -> Any:
        """Cut each key's records into windows of ``window_assigner`` (tumbling, sliding, session,
        global); returns a :class:`~flinkpy.datastream.WindowedStream` to configure and then
        aggregate.
        """
        from flinkpy.datastream.window_stream import WindowedStream

        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int | None = None) -> Any:
        """Per key, windows of ``size`` records (tumbling), or of the last ``size`` records every
        ``slide`` records. A last window that never fills does not fire.

        >>> from flinkpy.datastream import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> pairs = env.from_collection([("a", 1), ("a", 2), ("b", 5), ("a", 3)]).key_by(lambda t: t[0]).count_window(2)
        >>> sorted(pairs.reduce(lambda x, y: (x[0], x[1] + y[1])).execute_and_collect())
        [('a', 3)]
        """
        from flinkpy.datastream import window_stream

        return window_stream.count_window(self, size, slide)

    def interval_join(self, other: "KeyedStream") -> Any:
        """Join with the keyed stream ``other`` by event time: ``.between(lower, upper)
        .process(ProcessJoinFunction)`` (see :mod:`flinkpy.datastream.joins`)."""
        from flinkpy.datastream.joins import IntervalJoin

        return IntervalJoin(self, other)

    def _unsupported(self, what: str) -> Any:
        raise InvalidProgramError(f"{what}() cannot be applied to a KeyedStream", remedy="apply it before key_by()")

    def set_parallelism(self, parallelism: int) -> DataStream:
        """Refused: a keyed stream is a partitioning, not an operator; set it on the operator after it."""
        return self._unsupported("set_parallelism")

    def name(self, name: str) -> DataStream:
        """Refused: name the operator before ``key_by`` or after the keyed operation."""
        return self._unsupported("name")

    def uid(self, uid: str) -> DataStream:
        """Refused: set the uid on the keyed operation's result (``keyed.sum(1).uid("totals")``)."""
        return self._unsupported("uid")
