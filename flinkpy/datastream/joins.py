"""Joins of two streams: the interval join of two keyed streams, window joins and co-groups.

**Interval join** (``KeyedStream.interval_join``): a left record ``l`` and a right record ``r``
with equal keys join when ``l.ts + lower <= r.ts <= l.ts + upper``. Event time only: both inputs
need timestamps. Each side is buffered in keyed state until the watermark says nothing of the
other side can still match it; records behind the watermark are late and dropped (or sent to a
side output). Each output carries the larger of the two timestamps.

>>> from flinkpy.common import Time, WatermarkStrategy
>>> from flinkpy.datastream import ProcessJoinFunction, StreamExecutionEnvironment
>>> class Shipped(ProcessJoinFunction):
...     def process_element(self, order, shipment, ctx):
...         yield order[1], shipment[1], ctx.get_right_timestamp() - ctx.get_left_timestamp()
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> by_ts = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, _: e[2])
>>> orders = env.from_collection([(1, "tea", 1_000), (2, "cake", 2_000)]).assign_timestamps_and_watermarks(by_ts)
>>> shipments = env.from_collection([(1, "truck", 4_000), (2, "van", 9_000)]).assign_timestamps_and_watermarks(by_ts)
>>> joined = (orders.key_by(lambda o: o[0]).interval_join(shipments.key_by(lambda s: s[0]))
...           .between(Time.seconds(0), Time.seconds(5)).process(Shipped()))
>>> sorted(joined.execute_and_collect())    # the van left 7 s after the order: too late
[('tea', 'truck', 3000)]

**Window join and co-group** (``DataStream.join`` / ``DataStream.co_group``): the records of both
inputs with equal keys that fall into the same window meet when it fires — every pair goes to a
JoinFunction, or all of them at once to a CoGroupFunction. As in Flink, this is the window
operator over the union of the two inputs, tagged by side, so triggers, allowed lateness,
checkpoints and rescaling are those of windows.

>>> from flinkpy.datastream.window import TumblingEventTimeWindows
>>> clicks = env.from_collection([(1, "home", 500), (2, "cart", 1_500)]).assign_timestamps_and_watermarks(by_ts)
>>> views = env.from_collection([(1, "ad", 700), (2, "ad", 2_500)]).assign_timestamps_and_watermarks(by_ts)
>>> pairs = (clicks.join(views).where(lambda c: c[0]).equal_to(lambda v: v[0])
...          .window(TumblingEventTimeWindows.of(Time.seconds(1)))
...          .apply(lambda c, v: (c[1], v[1])))
>>> sorted(pairs.execute_and_collect())    # user 2's view is in the next second
[('home', 'ad')]
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.common.time import Duration, Time
from flinkpy.common.window import to_millis
from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import StreamRef

if TYPE_CHECKING:
    from flinkpy.datastream.data_stream import DataStream, KeyedStream
    from flinkpy.datastream.window_stream import WindowedStream

Bound = Time | Duration | int


def _selector(key_selector: Any, what: str) -> Callable:
    if callable(getattr(key_selector, "get_key", None)):
        return key_selector.get_key  # type: ignore[no-any-return]
    if callable(key_selector):
        return key_selector  # type: ignore[no-any-return]
    raise InvalidProgramError(f"{what} needs a function or a KeySelector, got {type(key_selector).__name__}")


def _tag_id(output_tag: Any, what: str) -> str:
    tag_id = getattr(output_tag, "tag_id", None)
    if not isinstance(tag_id, str):
        raise InvalidProgramError(f"{what} needs an OutputTag, got {type(output_tag).__name__}")
    return tag_id


# ---------------------------------------------------------------------------------------------
# Interval join
# ---------------------------------------------------------------------------------------------


class IntervalJoin:
    """Two keyed streams to be joined by time (``left.interval_join(right)``); :meth:`between`
    sets the interval."""

    def __init__(self, left: KeyedStream, right: KeyedStream):
        from flinkpy.datastream.data_stream import KeyedStream

        if not isinstance(right, KeyedStream):
            raise InvalidProgramError(
                f"interval_join() needs a KeyedStream to join with, got {type(right).__name__}",
                remedy="key the other stream too: left.key_by(k1).interval_join(right.key_by(k2))",
            )
        if left._env is not right._env:
            raise InvalidProgramError("interval_join() of streams from different execution environments")
        self.left = left
        self.right = right

    def between(self, lower_bound: Bound, upper_bound: Bound) -> IntervalJoined:
        """Join a left record at ``t`` with the right records in ``[t + lower_bound, t +
        upper_bound]`` (a Time, a Duration or milliseconds; negative bounds reach into the past).
        Both bounds are inclusive unless made exclusive on the result."""
        lower = to_millis(lower_bound, "interval join lower bound")
        upper = to_millis(upper_bound, "interval join upper bound")
        if lower > upper:
            raise InvalidProgramError(
                f"interval join bounds are reversed: lower {lower} ms > upper {upper} ms",
                remedy="pass the lower bound first: between(Time.milliseconds(-2), Time.milliseconds(1))",
            )
        return IntervalJoined(self.left, self.right, lower, upper)


class IntervalJoined:
    """An interval join with its bounds: optionally exclusive bounds and side outputs for late
    records, then :meth:`process` with a ProcessJoinFunction."""

    def __init__(self, left: KeyedStream, right: KeyedStream, lower: int, upper: int):
        self.left = left
        self.right = right
        self.lower = lower
        self.upper = upper
        self._lower_exclusive = False
        self._upper_exclusive = False
        self._late: list[str | None] = [None, None]

    def lower_bound_exclusive(self) -> IntervalJoined:
        """Leave out right records exactly at ``t + lower_bound``."""
        self._lower_exclusive = True
        return self

    def upper_bound_exclusive(self) -> IntervalJoined:
        """Leave out right records exactly at ``t + upper_bound``."""
        self._upper_exclusive = True
        return self

    def side_output_left_late_data(self, output_tag: Any) -> IntervalJoined:
        """Send left records that arrive behind the watermark to ``output_tag`` instead of
        dropping them (read them with ``get_side_output`` on the join's result)."""
        self._late[0] = _tag_id(output_tag, "side_output_left_late_data()")
        return self

    def side_output_right_late_data(self, output_tag: Any) -> IntervalJoined:
        """The same for late right records."""
        self._late[1] = _tag_id(output_tag, "side_output_right_late_data()")
        return self

    def process(self, process_join_function: Any, output_type: Any = None) -> DataStream:
        """Call ``process_join_function.process_element(left, right, ctx)`` for every pair that
        joins; it returns or yields the outputs (each stamped with the pair's larger timestamp)
        and reads ``ctx.get_left_timestamp()``, ``get_right_timestamp()``, ``get_timestamp()``.
        """
        from flinkpy.datastream.data_stream import DataStream

        fn = process_join_function
        if not callable(getattr(fn, "process_element", None)) and not callable(fn):
            raise InvalidProgramError(
                f"interval join process() needs a ProcessJoinFunction, got {type(fn).__name__}",
                remedy="subclass ProcessJoinFunction and implement process_element(left, right, ctx)",
            )
        # exclusive bounds are inclusive bounds one millisecond inwards (timestamps are integers)
        lower = self.lower + 1 if self._lower_exclusive else self.lower
        upper = self.upper - 1 if self._upper_exclusive else self.upper
        if lower > upper:
            raise InvalidProgramError(
                f"interval join matches nothing: with exclusive bounds the interval is [{lower}, {upper}] ms",
                remedy="widen the bounds or make them inclusive",
            )
        env = self.left._env
        refs = self.left._refs + tuple(replace(r, type_number=2) for r in self.right._refs)
        node = env._graph.add_node("interval_join", "IntervalJoin", fn, inputs=refs, key_selector=self.left._selector)
        node.params.update(key_selector2=self.right._selector, lower_bound=lower, upper_bound=upper, late_tags=tuple(self._late))
        if output_type is not None:
            node.params["output_type"] = output_type
        return DataStream(env, (StreamRef(node.id),), node)


# ---------------------------------------------------------------------------------------------
# Window join and co-group
# ---------------------------------------------------------------------------------------------


class _TwoInputs:
    """``join(...)`` / ``co_group(...)``: two streams, then ``where`` (the first's key) and
    ``equal_to`` (the second's)."""

    _what = "join"

    def __init__(self, input1: DataStream, input2: DataStream):
        if input1._env is not input2._env:
            raise InvalidProgramError(f"{self._what}() of streams from different execution environments")
        self.input1 = input1
        self.input2 = input2

    def where(self, key_selector: Any, key_type: Any = None) -> _Where:
        """The first input's key."""
        return _Where(self, _selector(key_selector, f"{self._what}().where()"))


class _Where:
    def __init__(self, streams: _TwoInputs, key1: Callable):
        self._streams = streams
        self._key1 = key1

    def equal_to(self, key_selector: Any, key_type: Any = None) -> _EqualTo:
        """The second input's key: records whose keys are equal meet."""
        what = f"{self._streams._what}().equal_to()"
        return _EqualTo(self._streams, self._key1, _selector(key_selector, what))


class _EqualTo:
    def __init__(self, streams: _TwoInputs, key1: Callable, key2: Callable):
        self._streams = streams
        self._keys = (key1, key2)

    def window(self, assigner: Any) -> WithWindow:
        """The windows both inputs' records are grouped into (tumbling, sliding, session...)."""
        from flinkpy.common.window import WindowAssigner

        if not isinstance(assigner, WindowAssigner):
            raise InvalidProgramError(
                f"{self._streams._what}().window() needs a WindowAssigner, got {type(assigner).__name__}",
                remedy="use e.g. TumblingEventTimeWindows.of(Time.seconds(5))",
            )
        return WithWindow(self._streams, self._keys, assigner)


class WithWindow:
    """A window join or co-group with its keys and windows: optionally ``trigger``, ``evictor``,
    ``allowed_lateness``, then ``apply``, which adds the operators (nothing is added before)."""

    def __init__(self, streams: _TwoInputs, keys: tuple[Callable, Callable], assigner: Any):
        self._streams = streams
        self._keys = keys
        self._assigner = assigner
        #: WindowedStream calls to replay on the window once apply() builds it
        self._settings: list[tuple[str, Any]] = []

    def trigger(self, trigger: Any) -> WithWindow:
        """Replace the window assigner's trigger (see ``WindowedStream.trigger``)."""
        self._settings.append(("trigger", trigger))
        return self

    def evictor(self, evictor: Any) -> WithWindow:
        """Remove records from a window before it is evaluated (see ``WindowedStream.evictor``)."""
        self._settings.append(("evictor", evictor))
        return self

    def allowed_lateness(self, time_ms: Bound) -> WithWindow:
        """Keep windows for this long after the watermark passed them; a late record fires the
        window again (see ``WindowedStream.allowed_lateness``)."""
        self._settings.append(("allowed_lateness", time_ms))
        return self

    def apply(self, function: Any, output_type: Any = None) -> DataStream:
        """Run the join's or co-group's function on each window that fires, per key: a
        JoinFunction's ``join(first, second)`` once per pair (a FlatJoinFunction's yields any
        number of outputs; a plain function of two records is a JoinFunction), or a
        CoGroupFunction's ``co_group(firsts, seconds)`` once with both sides' records. Outputs
        carry the window's last timestamp."""
        from flinkpy.task.window_join import CO_GROUP, FLAT_JOIN, JOIN, CoGroupWindow

        kind = self._kind(function)
        if kind is None:
            expected = "CoGroupFunction" if isinstance(self._streams, CoGroupedStreams) else "JoinFunction or FlatJoinFunction"
            raise InvalidProgramError(
                f"{self._streams._what}().apply() needs a {expected} (or a function), got {type(function).__name__}",
            )
        windowed = self._window()
        kinds = {"join": JOIN, "flat_join": FLAT_JOIN, "co_group": CO_GROUP}
        return windowed.apply(CoGroupWindow(function, kinds[kind]), output_type)

    def _window(self) -> WindowedStream:
        """Both inputs tagged with their side, united, keyed by their own keys, windowed."""
        from flinkpy.datastream.data_stream import DataStream
        from flinkpy.task.window_join import FIRST, SECOND, TagInput, UnionKey

        inputs = ((self._streams.input1, FIRST), (self._streams.input2, SECOND))
        tagged = [self._tag(DataStream.map(s, TagInput(side)), s) for s, side in inputs]
        windowed = tagged[0].union(tagged[1]).key_by(UnionKey(*self._keys)).window(self._assigner)
        for method, arg in self._settings:
            getattr(windowed, method)(arg)
        return windowed  # type: ignore[no-any-return]

    @staticmethod
    def _tag(tagged: DataStream, origin: DataStream) -> DataStream:
        # as Flink: the tagging runs at its input's parallelism, so it chains to it
        node = origin._node
        if node is not None and node.parallelism is not None:
            tagged.set_parallelism(node.parallelism)
        return tagged

    def _kind(self, function: Any) -> str | None:
        from flinkpy.common.functions import FlatJoinFunction

        if isinstance(self._streams, CoGroupedStreams):
            return "co_group" if callable(getattr(function, "co_group", None)) or callable(function) else None
        if isinstance(function, FlatJoinFunction):
            return "flat_join"
        return "join" if callable(getattr(function, "join", None)) or callable(function) else None


class JoinedStreams(_TwoInputs):
    """``a.join(b)``: pairs of records with equal keys in the same window.
    ``where(k1).equal_to(k2).window(assigner).apply(JoinFunction)``; an inner join (a record
    with no partner in its window produces nothing)."""

    _what = "join"


class CoGroupedStreams(_TwoInputs):
    """``a.co_group(b)``: per window and key, all records of both inputs at once.
    ``where(k1).equal_to(k2).window(assigner).apply(CoGroupFunction)``; a key that only one input
    has in a window is still called (with an empty list for the other), which makes outer joins."""

    _what = "co_group"
