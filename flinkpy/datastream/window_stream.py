"""WindowedStream and AllWindowedStream: PyFlink's window API over one StreamGraph node.

``key_by(...).window(assigner)`` gives a :class:`WindowedStream`; ``trigger``, ``evictor``,
``allowed_lateness`` and ``side_output_late_data`` configure it, and one terminal call
(``reduce``, ``aggregate``, ``process``, ``apply``) adds a single ``"window"`` node whose payload
is a :class:`~flinkpy.task.window_operator.WindowSpec`. ``window_all`` is the same with every
record under one key, at parallelism 1.

>>> from flinkpy.common.time import Time
>>> from flinkpy.datastream import StreamExecutionEnvironment
>>> from flinkpy.datastream.window import TumblingEventTimeWindows
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> keyed = env.from_collection([("a", 1), ("b", 2)]).key_by(lambda t: t[0])
>>> sums = WindowedStream(keyed, TumblingEventTimeWindows.of(Time.seconds(5))).reduce(
...     lambda x, y: (x[0], x[1] + y[1]))
>>> sums.get_name()
'Window(TumblingEventTimeWindows(5000), EventTimeTrigger(), <lambda>)'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flinkpy.common.time import Duration, Time
from flinkpy.datastream.window import (
    AllWindowFunction,
    CountEvictor,
    CountTrigger,
    Evictor,
    GlobalWindows,
    MergingWindowAssigner,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    PurgingTrigger,
    Trigger,
    WindowAssigner,
    WindowFunction,
    to_millis,
)
from flinkpy.errors import InvalidProgramError

if TYPE_CHECKING:
    from flinkpy.datastream.data_stream import DataStream, KeyedStream
    from flinkpy.datastream.output_tag import OutputTag
    from flinkpy.common.window_spec import WindowSpec

# The names the window operator uses for a spec's function kinds (see WindowSpec); spelled out
# here because the API layer imports the task layer only when it builds a node.
REDUCE, AGGREGATE, PROCESS, APPLY = "reduce", "aggregate", "process", "apply"


def _constant_key(value: Any) -> int:
    """The key of every record of a window_all: one window state, one subtask."""
    return 0


def _require(fn: Any, methods: tuple[str, ...], what: str, allow_callable: bool) -> None:
    if all(callable(getattr(fn, m, None)) for m in methods):
        return
    if allow_callable and callable(fn):
        return
    raise InvalidProgramError(
        f"{what} needs an object with {', '.join(m + '()' for m in methods)}, got {type(fn).__name__}",
        remedy=f"pass an instance of a class that implements {', '.join(methods)}"
        + (" (or a plain function)" if allow_callable else ""),
    )


def _window_function_kind(fn: Any, keyed: bool) -> str:
    """How the window function after a reduce/aggregate is called: process() or apply()."""
    if isinstance(fn, (ProcessWindowFunction, ProcessAllWindowFunction)):
        return PROCESS
    if isinstance(fn, (WindowFunction, AllWindowFunction)):
        return APPLY
    if callable(getattr(fn, "process", None)):
        return PROCESS
    if callable(getattr(fn, "apply", None)) or callable(fn):
        return APPLY
    expected = "ProcessWindowFunction or WindowFunction" if keyed else "ProcessAllWindowFunction or AllWindowFunction"
    raise InvalidProgramError(f"window_function must be a {expected}, got {type(fn).__name__}")


class WindowedStream:
    """A keyed stream cut into windows (``KeyedStream.window``): each key's records are
    grouped into the windows of an assigner, and one aggregation per window is emitted when
    the window's trigger fires.

    The assigner decides which windows a record belongs to: tumbling (fixed, disjoint),
    sliding (fixed, overlapping) or session windows (closed by a gap of inactivity), in event
    time (the records' timestamps, advanced by watermarks) or processing time (the clock);
    ``trigger``, ``evictor``, ``allowed_lateness`` and ``side_output_late_data`` adjust it. The
    terminal call (``reduce``, ``aggregate``, ``process``, ``apply``) adds the window operator.
    Window contents, triggers' state and timers are keyed state: checkpointed and restored.
    When a bounded input ends the watermark jumps to the end of time, so every event-time
    window fires.

    >>> from flinkpy.common import Time, WatermarkStrategy
    >>> from flinkpy.datastream import StreamExecutionEnvironment
    >>> from flinkpy.datastream.window import TumblingEventTimeWindows
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> clicks = env.from_collection([("home", 1_000), ("cart", 2_500), ("home", 9_000), ("home", 12_000)])
    >>> stamped = clicks.assign_timestamps_and_watermarks(
    ...     WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda click, ts: click[1]))
    >>> per_page = stamped.map(lambda click: (click[0], 1)).key_by(lambda pair: pair[0])
    >>> counts = per_page.window(TumblingEventTimeWindows.of(Time.seconds(10))).reduce(lambda a, b: (a[0], a[1] + b[1]))
    >>> sorted(counts.execute_and_collect())    # clicks per page in [0 s, 10 s) and [10 s, 20 s)
    [('cart', 1), ('home', 1), ('home', 2)]
    """

    _keyed = True

    def __init__(self, keyed_stream: KeyedStream, window_assigner: WindowAssigner) -> None:
        if not isinstance(window_assigner, WindowAssigner):
            raise InvalidProgramError(
                f"window() needs a WindowAssigner, got {type(window_assigner).__name__}",
                remedy="use e.g. TumblingEventTimeWindows.of(Time.seconds(5))",
            )
        self._env = keyed_stream._env
        self._refs = keyed_stream._refs
        self._selector = keyed_stream._selector
        self._assigner = window_assigner
        self._trigger: Trigger | None = None
        self._evictor: Evictor | None = None
        self._lateness_ms = 0
        self._late_tag: OutputTag | None = None

    # -- configuration ------------------------------------------------------------------
    def trigger(self, trigger: Trigger) -> WindowedStream:
        """Replace the assigner's default trigger, which decides when a window's contents are
        evaluated (fire) and when they are dropped (purge): e.g. ``CountTrigger.of(100)``, or
        ``ContinuousEventTimeTrigger.of(Time.seconds(5))`` for early results. With a merging
        assigner (sessions) the trigger must be able to merge.
        """
        if not isinstance(trigger, Trigger):
            raise InvalidProgramError(f"trigger() needs a Trigger, got {type(trigger).__name__}")
        if isinstance(self._assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise InvalidProgramError(
                f"{trigger!r} cannot be used with {self._assigner!r}, which merges windows",
                remedy="use a trigger whose can_merge() returns True",
            )
        self._trigger = trigger
        return self

    def evictor(self, evictor: Evictor) -> WindowedStream:
        """Remove elements from a window before or after the window function runs
        (``CountEvictor``, ``TimeEvictor``, ``DeltaEvictor``). A window with an evictor keeps
        every element rather than a running aggregate, so it costs more state.
        """
        if not isinstance(evictor, Evictor):
            raise InvalidProgramError(f"evictor() needs an Evictor, got {type(evictor).__name__}")
        self._evictor = evictor
        return self

    def allowed_lateness(self, time_ms: int | Time | Duration) -> WindowedStream:
        """Keep event-time windows for ``time_ms`` (milliseconds, ``Time`` or ``Duration``) after the
        watermark passed their end: a record that arrives late but within that time is added and
        the window fires again with it, so a result may be emitted more than once. Records later
        than that are dropped, or sent to :meth:`side_output_late_data`. Default 0.
        """
        ms = to_millis(time_ms, "allowed lateness")
        if ms < 0:
            raise InvalidProgramError(f"allowed lateness must be >= 0 ms, got {ms}")
        self._lateness_ms = ms
        return self

    def side_output_late_data(self, output_tag: OutputTag) -> WindowedStream:
        """Emit records that arrive too late for their window (after the watermark passed its end
        plus the allowed lateness) to ``output_tag`` instead of dropping them; read them with
        ``get_side_output(output_tag)`` on the windowed result.
        """
        tag_id = getattr(output_tag, "tag_id", None)
        if not isinstance(tag_id, str):
            raise InvalidProgramError(f"side_output_late_data() needs an OutputTag, got {type(output_tag).__name__}")
        self._late_tag = output_tag
        return self

    # -- terminal calls ----------------------------------------------------------------
    def reduce(self, reduce_function: Any, window_function: Any = None, output_type: Any = None) -> DataStream:
        """Combine the elements of each window with ``reduce_function(a, b)`` (or its ``reduce``) as
        they arrive, so the window's state is one value; when the window fires, emit that value,
        or hand it to ``window_function`` (a ProcessWindowFunction or WindowFunction, which also
        sees the key and the window).
        """
        _require(reduce_function, ("reduce",), "reduce()", allow_callable=True)
        kind = None if window_function is None else _window_function_kind(window_function, self._keyed)
        return self._build(REDUCE, reduce_function, window_function, kind, output_type)

    def aggregate(self, aggregate_function: Any, window_function: Any = None, accumulator_type: Any = None, output_type: Any = None) -> DataStream:
        """Fold each window's elements into an accumulator with an
        :class:`~flinkpy.datastream.AggregateFunction` (``create_accumulator``, ``add``,
        ``get_result``, ``merge`` for merging windows); when the window fires, emit
        ``get_result``, or hand it to ``window_function``.
        """
        _require(aggregate_function, ("create_accumulator", "add", "get_result", "merge"), "aggregate()", allow_callable=False)
        kind = None if window_function is None else _window_function_kind(window_function, self._keyed)
        return self._build(AGGREGATE, aggregate_function, window_function, kind, output_type)

    def process(self, process_window_function: Any, output_type: Any = None) -> DataStream:
        """Keep every element of each window and, when it fires, call ``process_window_function``
        (a :class:`~flinkpy.datastream.ProcessWindowFunction`): ``process(key, context, elements)``
        yields the outputs, and ``context`` gives the window, the clocks and per-window state.

        >>> from flinkpy.common import Time, WatermarkStrategy
        >>> from flinkpy.datastream import ProcessWindowFunction, StreamExecutionEnvironment
        >>> from flinkpy.datastream.window import TumblingEventTimeWindows
        >>> class Visits(ProcessWindowFunction):
        ...     def process(self, key, context, elements):
        ...         yield key, context.window().start, len(list(elements))
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> clicks = env.from_collection([("home", 1_000), ("cart", 2_500), ("home", 9_000), ("home", 12_000)])
        >>> stamped = clicks.assign_timestamps_and_watermarks(
        ...     WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda click, ts: click[1]))
        >>> windows = stamped.key_by(lambda click: click[0]).window(TumblingEventTimeWindows.of(Time.seconds(10)))
        >>> sorted(windows.process(Visits()).execute_and_collect())
        [('cart', 0, 1), ('home', 0, 2), ('home', 10000, 1)]
        """
        _require(process_window_function, ("process",), "process()", allow_callable=True)
        return self._build(None, None, process_window_function, PROCESS, output_type)

    def apply(self, window_function: Any, output_type: Any = None) -> DataStream:
        """Like :meth:`process`, with a :class:`~flinkpy.datastream.WindowFunction` (or a plain
        function): ``apply(key, window, elements)`` yields the outputs.
        """
        _require(window_function, ("apply",), "apply()", allow_callable=True)
        return self._build(None, None, window_function, APPLY, output_type)

    def _spec(self, aggregation: str | None, aggregate_function: Any, window_function: Any, kind: str | None) -> WindowSpec:
        from flinkpy.common.window_spec import WindowSpec

        return WindowSpec(
            assigner=self._assigner,
            trigger=self._trigger if self._trigger is not None else self._assigner.get_default_trigger(self._env),
            evictor=self._evictor,
            allowed_lateness_ms=self._lateness_ms,
            late_tag_id=self._late_tag.tag_id if self._late_tag is not None else None,
            aggregation=aggregation,
            aggregate_function=aggregate_function,
            window_function=window_function,
            window_function_kind=kind,
            keyed=self._keyed,
        )

    def _build(self, aggregation: str | None, aggregate_function: Any, window_function: Any, kind: str | None, output_type: Any) -> DataStream:
        from flinkpy.datastream.data_stream import DataStream
        from flinkpy.graph.stream_graph import StreamRef

        spec = self._spec(aggregation, aggregate_function, window_function, kind)
        node = self._env._graph.add_node("window", spec.describe(), spec, inputs=self._refs, key_selector=self._selector)
        if output_type is not None:
            node.params["output_type"] = output_type
        if self._late_tag is not None:
            node.params["late_data_tag"] = self._late_tag
        self._configure_node(node)
        return DataStream(self._env, (StreamRef(node.id),), node)

    def _configure_node(self, node: Any) -> None:
        pass


class AllWindowedStream(WindowedStream):
    """A non-keyed stream cut into windows (``DataStream.window_all``): all records share one
    key, so the window operator runs at parallelism 1. Configured and ended like a
    :class:`WindowedStream`; window functions take no key: ``ProcessAllWindowFunction``,
    ``AllWindowFunction``.

    >>> from flinkpy.datastream import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> sums = env.from_collection(range(10)).count_window_all(4).reduce(lambda a, b: a + b)
    >>> list(sums.execute_and_collect())    # 0+1+2+3, 4+5+6+7; the last two never fill a window
    [6, 22]
    """

    _keyed = False

    def __init__(self, data_stream: DataStream, window_assigner: WindowAssigner) -> None:
        from dataclasses import replace

        from flinkpy.datastream.data_stream import KeyedStream
        from flinkpy.graph.stream_graph import HASH

        # replace() keeps the other fields of each input (e.g. which side output it reads)
        refs = tuple(replace(r, partitioner=HASH, key_selector=_constant_key) for r in data_stream._refs)
        keyed = KeyedStream(data_stream._env, refs, _constant_key, None, data_stream)
        super().__init__(keyed, window_assigner)

    def _configure_node(self, node: Any) -> None:
        node.parallelism = 1
        node.max_allowed_parallelism = 1


def count_window(keyed_stream: KeyedStream, size: int, slide: int | None = None) -> WindowedStream:
    """``KeyedStream.count_window``: tumbling windows of ``size`` elements per key, or windows of
    the last ``size`` elements every ``slide`` elements. A partial last window never fires."""
    return _count(WindowedStream(keyed_stream, GlobalWindows.create()), size, slide)


def count_window_all(data_stream: DataStream, size: int, slide: int | None = None) -> AllWindowedStream:
    """``DataStream.count_window_all``: :func:`count_window` over the whole stream."""
    return _count(AllWindowedStream(data_stream, GlobalWindows.create()), size, slide)  # type: ignore[return-value]


def _count(ws: WindowedStream, size: int, slide: int | None) -> WindowedStream:
    if not isinstance(size, int) or size < 1:
        raise InvalidProgramError(f"count windows need a positive size, got {size!r}")
    if not slide:  # PyFlink passes slide=0 for tumbling
        return ws.trigger(PurgingTrigger.of(CountTrigger.of(size)))
    if not isinstance(slide, int) or slide < 1:
        raise InvalidProgramError(f"count windows need a positive slide, got {slide!r}")
    return ws.trigger(CountTrigger.of(slide)).evictor(CountEvictor.of(size))
