"""The interval join operator: two keyed inputs joined on key and a window of event time.

A left record ``l`` and a right record ``r`` with equal keys join when
``l.ts + lower <= r.ts <= l.ts + upper`` (the API has already turned exclusive bounds into
inclusive ones by moving them one millisecond inwards). Every record is kept in its side's buffer
— keyed map state ``{timestamp: (records...)}``, so checkpoints, restores and rescaling carry
it by key group with either backend — and joined against the other side's buffer, both as it
arrives and, later, when a record of the other side arrives. A record stays buffered only as
long as a record of the other side could still match it: once the watermark passes
``l.ts + upper`` no right record that is not late can join ``l`` any more, so an event-time timer
at that time (namespace ``left``) removes its bucket; the right side's by symmetry. Records behind
the watermark are late: they are dropped (or sent to a side output), as Flink drops them.

Each output carries ``max(l.ts, r.ts)``, the earliest time at which both records are known.

>>> from flinkpy.state.heap import HeapKeyedStateBackend
>>> from flinkpy.task.operators import Output
>>> from flinkpy.task.timers import InternalTimerService
>>> class Collect(Output):
...     def __init__(self):
...         self.records = []
...     def process(self, values, timestamps):
...         self.records += zip(values, timestamps)
...     def process_watermark(self, watermark):
...         pass
>>> out, backend = Collect(), HeapKeyedStateBackend(128, range(128))
>>> op = IntervalJoinOperator("join", lambda l, r, ctx: [(l, r)], out, lambda v: v[0], backend, False,
...                           key2=lambda v: v[0], lower=-5, upper=5)
>>> op.timers = InternalTimerService(backend, op.on_event_time, op.on_processing_time)
>>> op.open(None)
>>> op.process([("a", "order")], [100])
>>> op.process2([("a", "ship"), ("a", "too late"), ("b", "other key")], [103, 106, 100])
>>> out.records
[((('a', 'order'), ('a', 'ship')), 103)]
"""

from __future__ import annotations

from typing import Any, Callable

from flinkpy.common.state import MapStateDescriptor
from flinkpy.errors import FlinkpyError
from flinkpy.task.operators import KeyedOperator, user_method
from flinkpy.task.side_outputs import collect

LEFT, RIGHT = "left", "right"


class JoinContext:
    """The ``ctx`` of ``ProcessJoinFunction.process_element``: both timestamps, side outputs."""

    def __init__(self, operator: IntervalJoinOperator):
        self._operator = operator
        self.left_ts = 0
        self.right_ts = 0

    def get_left_timestamp(self) -> int:
        return self.left_ts

    def get_right_timestamp(self) -> int:
        return self.right_ts

    def get_timestamp(self) -> int:
        return max(self.left_ts, self.right_ts)

    def output(self, output_tag: Any, value: Any) -> None:
        tag_id = getattr(output_tag, "tag_id", output_tag)
        self._operator.side_output(tag_id, [value], [self.get_timestamp()])


class IntervalJoinOperator(KeyedOperator):
    """``interval_join(...).between(lower, upper).process(ProcessJoinFunction)``; see the module
    docstring. ``key`` keys the left input (``process``), ``key2`` the right (``process2``);
    ``lower``/``upper`` are inclusive, in milliseconds; ``late_tags`` name the side outputs of
    each side's late records (None: dropped)."""

    LEFT_BUFFER = "_interval_join_left"
    RIGHT_BUFFER = "_interval_join_right"

    def __init__(
        self,
        name: str,
        fn: Any,
        output: Any,
        key_selector: Callable,
        backend: Any,
        batch_mode: bool,
        *,
        key2: Callable,
        lower: int,
        upper: int,
        late_tags: tuple[str | None, str | None] = (None, None),
    ):
        super().__init__(name, fn, output, key_selector, backend, batch_mode)
        if lower > upper:
            raise FlinkpyError(f"interval join {name!r}: lower bound {lower} ms is above upper bound {upper} ms")
        self.key2 = key2
        self.lower = lower
        self.upper = upper
        self.late_tags = late_tags

    def open(self, runtime_context: Any) -> None:
        super().open(runtime_context)
        self._f = user_method(self.fn, "process_element")
        self._ctx = JoinContext(self)
        self._left = self.backend.get_partitioned_state(MapStateDescriptor(self.LEFT_BUFFER))
        self._right = self.backend.get_partitioned_state(MapStateDescriptor(self.RIGHT_BUFFER))

    def process(self, values: list, timestamps: list[int] | None) -> None:
        self._join(values, timestamps, is_left=True)

    def process2(self, values: list, timestamps: list[int] | None) -> None:
        self._join(values, timestamps, is_left=False)

    def _join(self, values: list, timestamps: list[int] | None, *, is_left: bool) -> None:
        """Buffer each record, join it with the other side's buffer, and schedule its cleanup."""
        if timestamps is None:
            self._no_timestamps(is_left)
        key = self.key if is_left else self.key2
        ours, other = (self._left, self._right) if is_left else (self._right, self._left)
        # the other side's timestamps that match a record at t: [t + low, t + high]
        low, high = (self.lower, self.upper) if is_left else (-self.upper, -self.lower)
        namespace = LEFT if is_left else RIGHT
        late_tag = self.late_tags[0 if is_left else 1]
        set_key, assign, timers = self.backend.set_current_key_and_group, self.assign, self.timers
        out: list = []
        ts_out: list[int] = []
        for r, t in zip(values, timestamps):  # type: ignore[arg-type]
            if t is None:
                self._no_timestamps(is_left)
            if t < timers.current_watermark():
                if late_tag is not None:
                    self.side_output(late_tag, [r], [t])
                continue
            k = key(r)
            set_key(k, assign(k))
            bucket = ours.get(t)
            # a new tuple each time: a snapshot may still share the old one (copy-on-write)
            ours.put(t, (r,) if bucket is None else bucket + (r,))
            for other_ts, records in other.items():
                if t + low <= other_ts <= t + high:
                    for o in records:
                        if is_left:
                            self._call(r, o, t, other_ts, out, ts_out)
                        else:
                            self._call(o, r, other_ts, t, out, ts_out)
            timers.register_event_time_timer(t + high if high > 0 else t, namespace)
        if out:
            self.output.process(out, ts_out)

    def _call(self, left: Any, right: Any, left_ts: int, right_ts: int, out: list, ts_out: list[int]) -> None:
        ctx = self._ctx
        ctx.left_ts, ctx.right_ts = left_ts, right_ts
        n = collect(self._f(left, right, ctx), out, ctx.output)
        ts_out.extend([max(left_ts, right_ts)] * n)

    def on_event_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        """A bucket's last chance to match has passed: drop it (the backend's key is the timer's)."""
        if namespace == LEFT:
            self._left.remove(timestamp - self.upper if self.upper > 0 else timestamp)
        elif namespace == RIGHT:
            self._right.remove(timestamp + self.lower if self.lower <= 0 else timestamp)

    def _no_timestamps(self, is_left: bool) -> None:
        side = "left (first)" if is_left else "right (second)"
        raise FlinkpyError(
            f"interval join {self.name!r} received a record without an event-time timestamp on its "
            f"{side} input: an interval join matches records by their timestamps",
            remedy="assign timestamps to both inputs: ds.assign_timestamps_and_watermarks(strategy) or "
            "env.from_source(source, strategy, name) with a WatermarkStrategy and a timestamp assigner",
        )
