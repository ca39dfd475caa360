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

from typing import TYPE_CHECKING, Any

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import (
    BROADCAST,
    CUSTOM,
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
    """A stream of records: what a source or an operator emits, and the input of the next one.

    Its methods describe the job rather than run it: a transformation (``map``, ``filter``,
    ``process``, ...) adds an operator and returns the stream of its output, a partitioning
    (``key_by``, ``rebalance``, ``broadcast``, ...) says how records travel to the next
    operator's subtasks, and a sink (``sink_to``, ``print``) ends a branch. The job runs when
    the environment executes it, or when :meth:`execute_and_collect` does. Methods named as in
    PyFlink's ``DataStream`` behave as there.

    Functions may be lambdas, plain functions, or instances of the function classes of
    :mod:`flinkpy.datastream` (``MapFunction``, ...), whose ``open(runtime_context)`` runs in
    each subtask before the first record. They are pickled (with cloudpickle) and run in the
    task processes, so what they capture must be picklable.

    >>> from flinkpy.datastream import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> words = env.from_collection(["to be", "or not", "to be"]).flat_map(str.split)
    >>> sorted(words.filter(lambda w: w != "or").map(str.upper).execute_and_collect())
    ['BE', 'BE', 'NOT', 'TO', 'TO']
    """

    def __init__(self, env: "StreamExecutionEnvironment", refs: tuple[StreamRef, ...], node: StreamNode | None = None):
        self._env = env
        self._refs = refs
        #: the node this stream is the direct output of (None for virtual streams: union, partitioning)
        self._node = node

    def __getattr__(self, name: str) -> Any:
        # only reached for a name the class lacks: a PyFlink method flinkpy does not have says so
        from flinkpy.unsupported import attribute_error

        raise attribute_error("flinkpy.datastream.DataStream", self, name)

    # -- properties of the operator that produced this stream ---------------------------------

    def _require_node(self, what: str) -> StreamNode:
        if self._node is None:
            raise InvalidProgramError(
                f"{what}() applies to an operator, but this stream is the result of a partitioning or union",
                remedy=f"call {what}() on the operator's own stream, before key_by()/rebalance()/union()",
            )
        return self._node

    def get_name(self) -> str:
        """The name of the operator that produces this stream, as plans and ``flinkpy job show`` show it.

        >>> from flinkpy.datastream import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> env.from_collection([1, 2]).map(lambda x: x + 1).get_name()
        'Map'
        """
        return self._require_node("get_name").name

    def name(self, name: str) -> "DataStream":
        """Name the operator that produces this stream (plans, ``flinkpy job show``, logs); returns
        this stream, so it chains after the transformation.

        >>> from flinkpy.datastream import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> env.from_collection([1, 2]).map(lambda x: x + 1).name("add one").get_name()
        'add one'
        """
        self._require_node("name").name = name
        return self

    def uid(self, uid: str) -> "DataStream":
        """Give the operator a stable id, unique in the job, under which checkpoints and savepoints
        store its state.

        Without one the id is a hash of the operator's kind, name and place in the graph: stable
        for the same program, but an edit upstream changes it and a restore then finds no state
        for the operator. Set uids on the stateful operators of any job you mean to upgrade.

        >>> from flinkpy.datastream import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> totals = env.from_collection([("a", 1)]).key_by(lambda t: t[0]).sum(1).uid("totals")
        >>> env.from_collection([2]).map(str).uid("totals")
        Traceback (most recent call last):
        ...
        flinkpy.errors.InvalidProgramError: uid 'totals' is used by two operators ('Keyed Sum' and 'Map') (give every operator a unique uid)
        """
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
        """PyFlink's way to pin an operator's id by hash; here the same as :meth:`uid`."""
        return self.uid(uid_hash)

    def get_type(self) -> Any:
        """The ``output_type`` given to the transformation that made this stream (None if none was).

        Type information is kept for PyFlink programs; records travel pickled whatever it says.
        """
        return self._node.params.get("output_type") if self._node else None

    def get_execution_environment(self) -> "StreamExecutionEnvironment":
        """The environment this stream belongs to."""
        return self._env

    def get_execution_config(self) -> Any:
        """The environment's ExecutionConfig (auto-watermark interval, global job parameters)."""
        return self._env.get_config()

    def set_parallelism(self, parallelism: int) -> "DataStream":
        """Run the operator that produces this stream in ``parallelism`` subtasks (each a task in a
        slot); operators without one run at the environment's parallelism. Sources that cannot run
        in parallel (collections, sockets, SourceFunctions) refuse more than 1.

        >>> from flinkpy.datastream import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> env.from_collection([1]).set_parallelism(2)
        Traceback (most recent call last):
        ...
        flinkpy.errors.InvalidProgramError: operator 'Collection Source' is not parallel and cannot run with parallelism 2
        """
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
        """The most subtasks this operator can ever be rescaled to, 1 to 32768: for a keyed operator,
        its number of key groups, the unit in which keyed state moves between subtasks on a rescale.
        Fixed for the life of the job's state: a restore with another value is refused.
        """
        if not isinstance(max_parallelism, int) or not 1 <= max_parallelism <= 32768:
            raise InvalidProgramError(f"max parallelism must be between 1 and 32768, got {max_parallelism!r}")
        self._require_node("set_max_parallelism").max_parallelism = max_parallelism
        return self

    def force_non_parallel(self) -> "DataStream":
        """Run the operator in one subtask, now and after any rescale (parallelism and max parallelism 1)."""
        node = self._require_node("force_non_parallel")
        node.parallelism = 1
        node.max_parallelism = 1
        return self

    def set_buffer_timeout(self, timeout_millis: int) -> "DataStream":
        """Accepted for PyFlink programs and recorded on the operator; flinkpy flushes every
        operator's output buffers by the environment's timeout
        (:meth:`StreamExecutionEnvironment.set_buffer_timeout`).
        """
        self._require_node("set_buffer_timeout").params["buffer_timeout"] = int(timeout_millis)
        return self

    def start_new_chain(self) -> "DataStream":
        """Begin a new operator chain with this operator: it is not fused into the task of the operator
        before it (but the operators after it may be fused into its task).
        """
        self._require_node("start_new_chain").chaining = "head"
        return self

    def disable_chaining(self) -> "DataStream":
        """Never fuse this operator with its neighbours: it runs in a task of its own, with network
        channels on both sides (useful to see its busy time, or to isolate a slow function).
        """
        self._require_node("disable_chaining").chaining = "never"
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> "DataStream":
        """Accepted for PyFlink programs and recorded on the operator; flinkpy places every task of a
        job as one slot sharing group.
        """
        self._require_node("slot_sharing_group").params["slot_sharing_group"] = str(slot_sharing_group)
        return self

    # -- transformations ---------------------------------------------------------------------

    def _add(self, kind: str, name: str, fn: Any = None, output_type: Any = None, **kw: Any) -> "DataStream":
        node = self._env._graph.add_node(kind, name, fn, inputs=self._refs, **kw)
        if output_type is not None:
            node.params["output_type"] = output_type
        return DataStream(self._env, (StreamRef(node.id),), node)

    def map(self, func: Any, output_type: Any = None) -> "DataStream":
        """One output record per input record: ``func(value)``, or ``func.map(value)`` for a
        :class:`~flinkpy.datastream.MapFunction` (whose ``open`` sees the runtime context).

        ``output_type`` is kept for PyFlink programs (see :meth:`get_type`).
        """
        _check_function(func, "map", "map")
        return self._add("map", "Map", func, output_type)

    def flat_map(self, func: Any, output_type: Any = None) -> "DataStream":
        """Zero or more output records per input record: ``func(value)`` (or ``func.flat_map(value)``)
        returns an iterable, or is a generator; None counts as no output.
        """
        _check_function(func, "flat_map", "flat_map")
        return self._add("flat_map", "FlatMap", func, output_type)

    def filter(self, func: Any) -> "DataStream":
        """Keep the records for which ``func(value)`` (or ``func.filter(value)``) is true."""
        _check_function(func, "filter", "filter")
        return self._add("filter", "Filter", func, self.get_type())

    def process(self, func: Any, output_type: Any = None) -> "DataStream":
        """Run a :class:`~flinkpy.datastream.ProcessFunction`: ``process_element(value, ctx)`` yields
        any number of outputs, and through ``ctx`` reads the record's timestamp, the clocks, and
        emits to side outputs (``ctx.output(tag, value)``, read with :meth:`get_side_output`).
        Timers and keyed state need a keyed stream: see :meth:`KeyedStream.process`.
        """
        _check_function(func, "process_element", "process")
        return self._add("process", "Process", func, output_type)

    def key_by(self, key_selector: Any, key_type: Any = None) -> "KeyedStream":
        """Partition the stream by ``key_selector(value)`` (a function, or a
        :class:`~flinkpy.datastream.KeySelector`): all records of one key reach the same subtask
        of the next operator, which then keeps state, timers and windows per key.

        Keys are hashed stably across processes and runs (not with Python's ``hash()``), so a
        restored job finds each key's state where it left it. Returns a :class:`KeyedStream`.
        """
        _check_function(key_selector, "get_key", "key_by")
        selector = key_selector.get_key if hasattr(key_selector, "get_key") else key_selector
        refs = tuple(StreamRef(r.node_id, HASH, selector, r.side_tag) for r in self._refs)
        return KeyedStream(self._env, refs, selector, key_type, self)

    def union(self, *streams: "DataStream") -> "DataStream":
        """One stream of the records of this stream and ``streams`` (all of the same environment),
        interleaved in arrival order; no operator is added.

        >>> from flinkpy.datastream import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> evens, odds = env.from_collection([0, 2]), env.from_collection([1, 3])
        >>> sorted(evens.union(odds).map(lambda x: x * x).execute_and_collect())
        [0, 1, 4, 9]
        """
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
        """Cut the whole stream into windows of ``window_assigner`` (one window operator at
        parallelism 1, since every record belongs to the same windows); returns an
        :class:`~flinkpy.datastream.AllWindowedStream`. Prefer :meth:`KeyedStream.window`, which
        runs in parallel.
        """
        from flinkpy.datastream.window_stream import AllWindowedStream

        return AllWindowedStream(self, window_assigner)

    def count_window_all(self, size: int, slide: int | None = None) -> Any:
        """Windows of ``size`` records over the whole stream (tumbling), or of the last ``size``
        records every ``slide`` records; see :meth:`window_all`.
        """
        from flinkpy.datastream import window_stream

        return window_stream.count_window_all(self, size, slide)

    def forward(self) -> "DataStream":
        """Send each subtask's records to the same-numbered subtask of the next operator; both must
        have the same parallelism. The default between operators of equal parallelism, and what
        lets them be chained into one task.
        """
        return self._partition(FORWARD)

    def rebalance(self) -> "DataStream":
        """Send records round-robin to every subtask of the next operator, evening out skew; the
        default between operators of different parallelism.
        """
        return self._partition(REBALANCE)

    def rescale(self) -> "DataStream":
        """Round-robin, but each subtask sends only to a local group of the next operator's subtasks
        (fewer channels than :meth:`rebalance` when parallelisms differ by a factor).
        """
        return self._partition(RESCALE)

    def shuffle(self) -> "DataStream":
        """Send each record to a subtask of the next operator chosen at random."""
        return self._partition(SHUFFLE)

    def broadcast(self, *broadcast_state_descriptors: Any) -> Any:
        """Send every record to every subtask of the next operator. With MapStateDescriptors,
        a :class:`~flinkpy.datastream.BroadcastStream` for the broadcast state pattern
        (``other.connect(broadcast_stream)``; see flinkpy.datastream.broadcast_stream)."""
        if broadcast_state_descriptors:
            from flinkpy.datastream.broadcast_stream import BroadcastStream

            return BroadcastStream(self, broadcast_state_descriptors)
        return self._partition(BROADCAST)

    def global_(self) -> "DataStream":
        """Send every record to the first subtask of the next operator."""
        return self._partition(GLOBAL)

    def partition_custom(self, partitioner: Any, key_selector: Any) -> "DataStream":
        """Send each record to the subtask ``partitioner.partition(key, num_partitions)`` picks
        for its key ``key_selector(value)`` (a Partitioner, or a function of the same two
        arguments). An answer outside ``0..num_partitions-1`` fails the job with a message that
        names it. Unlike ``key_by``, the next operator is not keyed.
        """
        from flinkpy.datastream.connected_streams import CustomPartitioning

        _check_function(partitioner, "partition", "partition_custom")
        _check_function(key_selector, "get_key", "partition_custom")
        key = key_selector.get_key if hasattr(key_selector, "get_key") else key_selector
        select = CustomPartitioning(partitioner, key)
        return DataStream(self._env, tuple(StreamRef(r.node_id, CUSTOM, select, r.side_tag) for r in self._refs))

    def connect(self, ds: Any) -> Any:
        """Connect ``ds`` to this stream for a two-input operator: a
        :class:`~flinkpy.datastream.ConnectedStreams` whose functions take each input's records
        with their own method (``map1``/``map2``, ``process_element1``/``process_element2``);
        connected to a BroadcastStream, a :class:`~flinkpy.datastream.BroadcastConnectedStream`."""
        from flinkpy.datastream.broadcast_stream import BroadcastConnectedStream, BroadcastStream
        from flinkpy.datastream.connected_streams import ConnectedStreams

        if isinstance(ds, BroadcastStream):
            return BroadcastConnectedStream(self, ds)
        if isinstance(self, KeyedStream) and isinstance(ds, KeyedStream):
            return ConnectedStreams(self._origin, ds._origin, (self._selector, ds._selector))
        return ConnectedStreams(self, ds)

    def join(self, other_stream: "DataStream") -> Any:
        """A window join with ``other_stream``: ``.where(k1).equal_to(k2).window(assigner)
        .apply(JoinFunction)`` (see :mod:`flinkpy.datastream.joins`)."""
        from flinkpy.datastream.joins import JoinedStreams

        return JoinedStreams(self, other_stream)

    def co_group(self, other_stream: "DataStream") -> Any:
        """A window co-group with ``other_stream``: ``.where(k1).equal_to(k2).window(assigner)
        .apply(CoGroupFunction)`` (see :mod:`flinkpy.datastream.joins`)."""
        from flinkpy.datastream.joins import CoGroupedStreams

        return CoGroupedStreams(self, other_stream)

    def project(self, *field_indexes: int) -> "DataStream":
        """Keep the given fields of tuple records, in that order.

        >>> from flinkpy.datastream import StreamExecutionEnvironment
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> env.from_collection([("a", 1, True)]).project(2, 0).get_name()
        'Projection'
        """
        idx = tuple(field_indexes)
        return self.map(lambda value: tuple(value[i] for i in idx)).name("Projection")

    # -- sinks -------------------------------------------------------------------------------

    def print(self, sink_identifier: str | None = None) -> "DataStreamSink":
        """Print every record on the standard output of the TaskManager that runs the sink
        (``flinkpy cluster logs tm-N --stdout``; the terminal for an embedded cluster), prefixed
        with the subtask number (``2> ...``) when the sink runs in parallel and with
        ``sink_identifier`` when given. Records replayed after a failure are printed again.
        A stream with type information prints as PyFlink prints it, in Java's form (a
        ``Types.TUPLE`` record ``(hi,9)``, a ``Types.ROW`` record ``+I[hi, 9]``, a boolean
        ``true``; see :mod:`flinkpy.common.printed_forms`); one without prints ``str(record)``.
        """
        from flinkpy.connectors.print_sink import PrintSink

        stream = self._add("sink", "Print to Std. Out", PrintSink(sink_identifier, type_info=self.get_type()))
        return DataStreamSink(stream)

    def sink_to(self, sink: Any) -> "DataStreamSink":
        """Write the stream to a :class:`~flinkpy.datastream.connectors.Sink` (FileSink, PostgresSink,
        RedisStreamsSink, ...); what a failure does to the output depends on the sink (``flinkpy
        info JOB.py`` prints each sink's guarantee). Returns a :class:`DataStreamSink`.
        """
        from flinkpy.connectors.base import Sink

        if not isinstance(sink, Sink):
            raise InvalidProgramError(
                f"sink_to() needs a Sink (FileSink, ...), got {type(sink).__name__}",
                remedy="use add_sink() for a SinkFunction, or map()/process() for custom output",
            )
        name = getattr(sink, "name", None) or type(sink).__name__
        # a sink that writes text writes this stream's records in their printed form
        return DataStreamSink(self._add("sink", name, sink.for_record_type(self.get_type())))

    def add_sink(self, sink_func: Any) -> "DataStreamSink":
        """Hand every record to ``sink_func`` (a function, or a
        :class:`~flinkpy.datastream.SinkFunction` with ``invoke(value, context)``), at least once:
        records replayed after a failure are handed over again. A Sink object goes to
        :meth:`sink_to`.
        """
        from flinkpy.connectors.base import Sink

        if isinstance(sink_func, Sink):
            return self.sink_to(sink_func)
        _check_function(sink_func, "invoke", "add_sink")
        from flinkpy.connectors.function_sink import FunctionSink

        return DataStreamSink(self._add("sink", "Unnamed", FunctionSink(sink_func)))

    def execute_and_collect(self, job_execution_name: str | None = None, limit: int | None = None) -> Any:
        """Run the job and return its records as they arrive, as PyFlink does: a
        :class:`CloseableIterator` over a running job (closing it, or leaving its ``with``,
        cancels the job), or with ``limit`` a list of the first ``limit`` records (the job is
        cancelled once they are there). A failed job raises :class:`~flinkpy.errors.JobExecutionError`
        once its records are read. Records come back through files in the cluster's home, so
        it works for embedded and for background clusters on this host; results of an attempt
        that failed and was restarted stay in the output (a key's last value is its final one).
        """
        import itertools
        import shutil

        from flinkpy.client.collect_results import CollectResultIterator
        from flinkpy.connectors.collect import collect_sink

        sink, _ = collect_sink()
        self._add("sink", "Collect Sink", sink)
        try:
            started = self._env._start(job_execution_name or "Collect Job")
        except BaseException:
            shutil.rmtree(sink.directory, ignore_errors=True)
            raise
        if started is None:  # captured (the Spark runner): nothing runs here
            shutil.rmtree(sink.directory, ignore_errors=True)
            return [] if limit is not None else CloseableIterator([])
        results = CollectResultIterator(started, sink.directory)
        if limit is None:
            return results
        with results:
            return list(itertools.islice(results, limit))


class CloseableIterator:
    """What ``execute_and_collect`` returns: the job's records, in a ``for`` or a ``with``.

    >>> with CloseableIterator(["x", "y"]) as records:
    ...     next(records)
    'x'
    >>> list(records)    # closed: the rest is dropped
    []
    """

    def __init__(self, items: list):
        self._it = iter(items)

    def __iter__(self) -> "CloseableIterator":
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def close(self) -> None:
        """Drop the records not read yet."""
        self._it = iter(())

    def __enter__(self) -> "CloseableIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class DataStreamSink:
    """The end of a branch, returned by ``sink_to``, ``add_sink`` and ``print``: the sink
    operator can be named, given a uid and a parallelism, but not transformed further."""

    def __init__(self, stream: DataStream):
        self._stream = stream

    def name(self, name: str) -> "DataStreamSink":
        """Name the sink operator."""
        self._stream.name(name)
        return self

    def uid(self, uid: str) -> "DataStreamSink":
        """Give the sink a stable id for its state in checkpoints and savepoints (see :meth:`DataStream.uid`)."""
        self._stream.uid(uid)
        return self

    def set_parallelism(self, parallelism: int) -> "DataStreamSink":
        """Run the sink in ``parallelism`` subtasks."""
        self._stream.set_parallelism(parallelism)
        return self

    def disable_chaining(self) -> "DataStreamSink":
        """Run the sink in a task of its own."""
        self._stream.disable_chaining()
        return self

    def start_new_chain(self) -> "DataStreamSink":
        """Begin a new chain at the sink."""
        self._stream.start_new_chain()
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> "DataStreamSink":
        """Accepted for PyFlink programs; see :meth:`DataStream.slot_sharing_group`."""
        self._stream.slot_sharing_group(slot_sharing_group)
        return self


# KeyedStream lives in its own module; it is importable from here as before (it subclasses
# DataStream, so it is imported once DataStream exists)
from flinkpy.datastream.keyed_stream import KeyedStream  # noqa: E402
