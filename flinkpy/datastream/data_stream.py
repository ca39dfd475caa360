"""DataStream and KeyedStream: PyFlink's names and semantics over flinkpy's StreamGraph.

Every transformation adds one node to the environment's StreamGraph and returns a stream that
refers to it; partitioning calls (``key_by``, ``rebalance``, ``union``, ...) add no node but
change how the next operator's input edges are built. Nothing runs until ``env.execute()``.

>>> from flinkpy.datastream import StreamExecutionEnvironment
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> ds = env.from_collection(["a b", "b"]).flat_map(str.split).map(lambda w: (w, 1))
>>> counts = ds.key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import (
    BROADCAST,
    FORWARD,
    GLOBAL,
    HASH,
    REBALANCE,
    RESCALE,
    SHUFFLE,
    StreamNode,
    StreamRef,
)

if TYPE_CHECKING:
    from flinkpy.datastream.stream_execution_environment import StreamExecutionEnvironment


def _check_function(fn: Any, method: str, what: str) -> None:
    if callable(fn) or callable(getattr(fn, method, None)):
        return
    raise InvalidProgramError(
        f"{what}() needs a function or an object with a {method}() method, got {type(fn).__name__}",
        remedy=f"pass a lambda, a def, or an instance of a class with {method}()",
    )


class DataStream:
    """A stream of records; see PyFlink's ``pyflink.datastream.DataStream``."""

    def __init__(self, env: "StreamExecutionEnvironment", refs: tuple[StreamRef, ...], node: StreamNode | None = None):
        self._env = env
        self._refs = refs
        #: the node this stream is the direct output of (None for virtual streams: union, partitioning)
        self._node = node

    # -- properties of the operator that produced this stream ---------------------------------

    def _require_node(self, what: str) -> StreamNode:
        if self._node is None:
            raise InvalidProgramError(
                f"{what}() applies to an operator, but this stream is the result of a partitioning or union",
                remedy=f"call {what}() on the operator's own stream, before key_by()/rebalance()/union()",
            )
        return self._node

    def get_name(self) -> str:
        return self._require_node("get_name").name

    def name(self, name: str) -> "DataStream":
        self._require_node("name").name = name
        return self

    def uid(self, uid: str) -> "DataStream":
        node = self._require_node("uid")
        for other in self._env._graph.nodes.values():
            if other is not node and other.uid == uid:
                raise InvalidProgramError(
                    f"uid {uid!r} is used by two operators ({other.name!r} and {node.name!r})",
                    remedy="give every operator a unique uid",
                )
        node.uid = uid
        return self

    def set_uid_hash(self, uid_hash: str) -> "DataStream":
        return self.uid(uid_hash)

    def get_type(self) -> Any:
        return self._node.params.get("output_type") if self._node else None

    def get_execution_environment(self) -> "StreamExecutionEnvironment":
        return self._env

    def get_execution_config(self) -> Any:
        return self._env.get_config()

    def set_parallelism(self, parallelism: int) -> "DataStream":
        node = self._require_node("set_parallelism")
        if not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidProgramError(f"parallelism must be a positive integer, got {parallelism!r}")
        if node.max_allowed_parallelism is not None and parallelism > node.max_allowed_parallelism:
            raise InvalidProgramError(
                f"operator {node.name!r} is not parallel and cannot run with parallelism {parallelism}"
            )
        node.parallelism = parallelism
        return self

    def set_max_parallelism(self, max_parallelism: int) -> "DataStream":
        if not isinstance(max_parallelism, int) or not 1 <= max_parallelism <= 32768:
            raise InvalidProgramError(f"max parallelism must be between 1 and 32768, got {max_parallelism!r}")
        self._require_node("set_max_parallelism").max_parallelism = max_parallelism
        return self

    def force_non_parallel(self) -> "DataStream":
        node = self._require_node("force_non_parallel")
        node.parallelism = 1
        node.max_parallelism = 1
        return self

    def set_buffer_timeout(self, timeout_millis: int) -> "DataStream":
        self._require_node("set_buffer_timeout").params["buffer_timeout"] = int(timeout_millis)
        return self

    def start_new_chain(self) -> "DataStream":
        self._require_node("start_new_chain").chaining = "head"
        return self

    def disable_chaining(self) -> "DataStream":
        self._require_node("disable_chaining").chaining = "never"
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> "DataStream":
        self._require_node("slot_sharing_group").params["slot_sharing_group"] = str(slot_sharing_group)
        return self

    # -- transformations ---------------------------------------------------------------------

    def _add(self, kind: str, name: str, fn: Any = None, output_type: Any = None, **kw: Any) -> "DataStream":
        node = self._env._graph.add_node(kind, name, fn, inputs=self._refs, **kw)
        if output_type is not None:
            node.params["output_type"] = output_type
        return DataStream(self._env, (StreamRef(node.id),), node)

    def map(self, func: Any, output_type: Any = None) -> "DataStream":
        _check_function(func, "map", "map")
        return self._add("map", "Map", func, output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> "DataStream":
        _check_function(func, "flat_map", "flat_map")
        return self._add("flat_map", "FlatMap", func, output_type)

    def filter(self, func: Any) -> "DataStream":
        _check_function(func, "filter", "filter")
        return self._add("filter", "Filter", func, self.get_type())

    def process(self, func: Any, output_type: Any = None) -> "DataStream":
        _check_function(func, "process_element", "process")
        return self._add("process", "Process", func, output_type)

    def key_by(self, key_selector: Any, key_type: Any = None) -> "KeyedStream":
        _check_function(key_selector, "get_key", "key_by")
        selector = key_selector.get_key if hasattr(key_selector, "get_key") else key_selector
        refs = tuple(StreamRef(r.node_id, HASH, selector, r.side_tag) for r in self._refs)
        return KeyedStream(self._env, refs, selector, key_type, self)

    def union(self, *streams: "DataStream") -> "DataStream":
        refs = list(self._refs)
        for s in streams:
            if s._env is not self._env:
                raise InvalidProgramError("union() of streams from different execution environments")
            refs.extend(s._refs)
        return DataStream(self._env, tuple(refs))

    def _partition(self, partitioner: str) -> "DataStream":
        return DataStream(self._env, tuple(StreamRef(r.node_id, partitioner, None, r.side_tag) for r in self._refs))

    def get_side_output(self, output_tag: Any) -> "DataStream":
        """The records this operator emitted to ``output_tag`` (``ctx.output(tag, value)``, or
        a window's late data)."""
        node = self._require_node("get_side_output")
        tag_id = getattr(output_tag, "tag_id", None)
        if not tag_id:
            raise InvalidProgramError(f"get_side_output() needs an OutputTag, got {type(output_tag).__name__}")
        return DataStream(self._env, (StreamRef(node.id, None, None, tag_id),))

    def assign_timestamps_and_watermarks(self, watermark_strategy: Any) -> "DataStream":
        """Stamp records with the strategy's timestamp assigner and generate its watermarks."""
        if not hasattr(watermark_strategy, "extract_timestamp"):
            raise InvalidProgramError(
                f"assign_timestamps_and_watermarks() needs a WatermarkStrategy, got {type(watermark_strategy).__name__}"
            )
        return self._add("timestamps", "Timestamps/Watermarks", watermark_strategy, self.get_type())

    def window_all(self, window_assigner: Any) -> Any:
        from flinkpy.datastream.window_stream import AllWindowedStream

        return AllWindowedStream(self, window_assigner)

    def count_window_all(self, size: int, slide: int | None = None) -> Any:
        from flinkpy.datastream import window_stream

        return window_stream.count_window_all(self, size, slide)

    def forward(self) -> "DataStream":
        return self._partition(FORWARD)

    def rebalance(self) -> "DataStream":
        return self._partition(REBALANCE)

    def rescale(self) -> "DataStream":
        return self._partition(RESCALE)

    def shuffle(self) -> "DataStream":
        return self._partition(SHUFFLE)

    def broadcast(self) -> "DataStream":
        return self._partition(BROADCAST)

    def global_(self) -> "DataStream":
        return self._partition(GLOBAL)

    def project(self, *field_indexes: int) -> "DataStream":
        idx = tuple(field_indexes)
        return self.map(lambda value: tuple(value[i] for i in idx)).name("Projection")

    # -- sinks -------------------------------------------------------------------------------

    def print(self, sink_identifier: str | None = None) -> "DataStreamSink":
        from flinkpy.connectors.print_sink import PrintSink

        stream = self._add("sink", "Print to Std. Out", PrintSink(sink_identifier))
        return DataStreamSink(stream)

    def sink_to(self, sink: Any) -> "DataStreamSink":
        from flinkpy.connectors.base import Sink

        if not isinstance(sink, Sink):
            raise InvalidProgramError(
                f"sink_to() needs a Sink (FileSink, ...), got {type(sink).__name__}",
                remedy="use add_sink() for a SinkFunction, or map()/process() for custom output",
            )
        return DataStreamSink(self._add("sink", getattr(sink, "name", None) or type(sink).__name__, sink))

    def add_sink(self, sink_func: Any) -> "DataStreamSink":
        from flinkpy.connectors.base import Sink

        if isinstance(sink_func, Sink):
            return self.sink_to(sink_func)
        _check_function(sink_func, "invoke", "add_sink")
        from flinkpy.connectors.function_sink import FunctionSink

        return DataStreamSink(self._add("sink", "Unnamed", FunctionSink(sink_func)))

    def execute_and_collect(self, job_name: str | None = None, limit: int | None = None) -> "CloseableIterator":
        """Run the job and return its records (bounded jobs). Records come back through files in
        the cluster's home, so it works for embedded and for background clusters on this host."""
        from flinkpy.connectors.collect import collect_sink

        sink, reader = collect_sink()
        self._add("sink", "Collect Sink", sink)
        self._env.execute(job_name or "Collect Job")
        items = reader()
        if limit is not None:
            items = items[:limit]
        return CloseableIterator(items)


class CloseableIterator:
    """What ``execute_and_collect`` returns (iterate it, or use it in a ``with``)."""

    def __init__(self, items: list):
        self._it = iter(items)

    def __iter__(self) -> "CloseableIterator":
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        self._it = iter(())

    def __enter__(self) -> "CloseableIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class DataStreamSink:
    """The result of a sink: only naming and parallelism can be set on it."""

    def __init__(self, stream: DataStream):
        self._stream = stream

    def name(self, name: str) -> "DataStreamSink":
        self._stream.name(name)
        return self

    def uid(self, uid: str) -> "DataStreamSink":
        self._stream.uid(uid)
        return self

    def set_parallelism(self, parallelism: int) -> "DataStreamSink":
        self._stream.set_parallelism(parallelism)
        return self

    def disable_chaining(self) -> "DataStreamSink":
        self._stream.disable_chaining()
        return self

    def start_new_chain(self) -> "DataStreamSink":
        self._stream.start_new_chain()
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> "DataStreamSink":
        self._stream.slot_sharing_group(slot_sharing_group)
        return self


class KeyedStream(DataStream):
    """A stream partitioned by key: keyed state and aggregations apply per key."""

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
        return self._key_type

    def reduce(self, func: Any) -> DataStream:
        _check_function(func, "reduce", "reduce")
        return self._keyed("keyed_reduce", "Keyed Reduce", func, self._origin.get_type())

    def _aggregate(self, name: str, how: str, position: int | str) -> DataStream:
        from flinkpy.datastream.aggregations import field_aggregator

        return self._keyed("keyed_reduce", name, field_aggregator(how, position), self._origin.get_type())

    def sum(self, position_to_sum: int | str = 0) -> DataStream:
        return self._aggregate("Keyed Sum", "sum", position_to_sum)

    def min(self, position_to_min: int | str = 0) -> DataStream:
        return self._aggregate("Keyed Min", "min", position_to_min)

    def max(self, position_to_max: int | str = 0) -> DataStream:
        return self._aggregate("Keyed Max", "max", position_to_max)

    def min_by(self, position_to_min_by: int | str = 0) -> DataStream:
        return self._aggregate("Keyed MinBy", "min_by", position_to_min_by)

    def max_by(self, position_to_max_by: int | str = 0) -> DataStream:
        return self._aggregate("Keyed MaxBy", "max_by", position_to_max_by)

    def process(self, func: Any, output_type: Any = None) -> DataStream:
        _check_function(func, "process_element", "process")
        return self._keyed("keyed_process", "KeyedProcess", func, output_type)

    def map(self, func: Any, output_type: Any = None) -> DataStream:
        _check_function(func, "map", "map")
        return self._keyed("keyed_map", "Map", func, output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> DataStream:
        _check_function(func, "flat_map", "flat_map")
        return self._keyed("keyed_flat_map", "FlatMap", func, output_type)

    def filter(self, func: Any) -> DataStream:
        _check_function(func, "filter", "filter")
        return self._keyed("keyed_filter", "Filter", func, self._origin.get_type())

    def key_by(self, key_selector: Any, key_type: Any = None) -> "KeyedStream":
        return self._origin.key_by(key_selector, key_type)

    def window(self, window_assigner: Any) -> Any:
        from flinkpy.datastream.window_stream import WindowedStream

        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int | None = None) -> Any:
        from flinkpy.datastream import window_stream

        return window_stream.count_window(self, size, slide)

    def _unsupported(self, what: str) -> Any:
        raise InvalidProgramError(f"{what}() cannot be applied to a KeyedStream", remedy="apply it before key_by()")

    def set_parallelism(self, parallelism: int) -> DataStream:
        return self._unsupported("set_parallelism")

    def name(self, name: str) -> DataStream:
        return self._unsupported("name")

    def uid(self, uid: str) -> DataStream:
        return self._unsupported("uid")
