"""Sliced window aggregation: tumbling and sliding windows with an incremental function.

A sliding window of size S every D overlaps S / D others, so the general
:class:`~flinkpy.task.window_operator.WindowOperator` updates every record into S / D windows,
each with its own contents, trigger call and timers. Here time is cut into *slices* of
``gcd(S, D)`` (the window itself when tumbling): each record is folded into the one slice of its
key that holds its timestamp, and a window's result is the combination of the slices it covers
(``reduce`` or ``AggregateFunction.merge``), computed once when the window fires.

Two layouts. On the heap backend, :mod:`flinkpy.task.slice_buffer` keeps the slices in the
operator by time, then key, and shows them to keyed state at snapshots. On a store such as
RocksDB, :class:`SlicedWindowOperator` keeps per key one backend value state
``_window_slices``, ``{slice end: reduced value or accumulator}``, with timers per key group and
window end, not per key and window: a new slice asks for one at the end of the first window
that will fire with it (and one when the last window that covers it is cleaned up, with allowed
lateness only); the timer fires the window for every key of the group that has slices in it,
and asks for the next window's while slices it shares remain. Both write the same keyed state,
the heap path adding :data:`FIRED` (up to when each key group's windows fired, which the store
path says with its timers), so a snapshot of one restores on the other, at any parallelism.

The semantics are the general path's: default triggers, allowed lateness with late firings
(a late record re-fires at once every already-fired, not yet cleaned-up window that holds it),
late data to a side output, offsets. Which path a window takes is :func:`execution_path`'s
decision; ``flinkpy info`` shows it. The two paths keep different state: a snapshot of one is
converted when the other restores it (:mod:`flinkpy.task.window_layouts`). Two differences. In processing time, a
record that arrives in the very millisecond its window fired makes the window fire again with
all its records on the store path, counts in the next window on the heap path, and makes the
window fire with that record alone on the general path (which purged it). After a restore, a
record behind the time up to which its key group had fired is late, as it was before the
snapshot; the general path, like Flink, starts every key afresh from the restored watermark.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

from flinkpy.common.state import ValueStateDescriptor
from flinkpy.common.window import TimeWindow
from flinkpy.common.window_spec import AGGREGATE, GENERAL, REDUCE, SLICED, WindowSpec, execution_path  # noqa: F401 (GENERAL: importable here too)
from flinkpy.state.heap import TIMER_EVENT_TABLE, TIMER_PROCESSING_TABLE, HeapKeyedStateBackend
from flinkpy.task.watermarks import MIN_WATERMARK
from flinkpy.task.window_operator import WindowOperator

#: the namespace of every timer of a sliced window operator: a timer at t means "the window
#: ending at t + 1 fires" and "slices whose last window is cleaned up at t go"
SLICE_TIMER = "slices"
#: the key of every timer: timers are per key group, not per key (a window end fires every key
#: of the group that has slices in the window), and move with their key group when rescaled
GROUP_TIMER_KEY = ("flinkpy.window-slices",)
#: the state that says, per key group (at key GROUP_TIMER_KEY), up to when its windows fired
FIRED = "_window_fired"
_MISSING = object()
#: types whose values copy.copy returns as they are: a window's result may start as such a slice value itself
_SHARED_AS_IS = frozenset({int, float, str, bytes, tuple, bool, type(None), frozenset, complex})


def create_window_operator(name: str, spec: WindowSpec, output: Any, key_selector: Callable, backend: Any, batch_mode: bool) -> WindowOperator:
    """The window operator of a ``"window"`` node: sliced when :func:`execution_path` allows,
    with its slices in the operator on the heap backend (:mod:`flinkpy.task.slice_buffer`)."""
    if execution_path(spec)[0] != SLICED:
        return WindowOperator(name, spec, output, key_selector, backend, batch_mode)
    if isinstance(backend, HeapKeyedStateBackend):
        from flinkpy.task.slice_buffer import BufferedSlicedWindowOperator

        return BufferedSlicedWindowOperator(name, spec, output, key_selector, backend, batch_mode)
    return SlicedWindowOperator(name, spec, output, key_selector, backend, batch_mode)


def restored_fired(backend: Any, event_time: bool) -> dict[int, int]:
    """Per key group, the time up to which its windows had fired when the restored snapshot was
    taken (every window ending at or before that time + 1). The heap path writes it as state
    (:data:`FIRED`); a snapshot of the store path says it with its timers: each key group's
    earliest window timer is after the watermark of the snapshot, and no window between holds
    a slice of the group, so that timer - 1 will do."""
    fired: dict[int, int] = {}
    table = backend.table(TIMER_EVENT_TABLE if event_time else TIMER_PROCESSING_TABLE)
    for kg, timers in table.items():
        for key, namespace, ts in timers:
            if key == GROUP_TIMER_KEY and namespace == SLICE_TIMER and ts - 1 < fired.get(kg, ts):
                fired[kg] = ts - 1
    if FIRED in backend.state_names():
        cell = backend.get_partitioned_state(ValueStateDescriptor(FIRED))
        for key, kg in backend.keys_of(FIRED):
            backend.set_current_key_and_group(key, kg)
            value = cell.value()
            if value is not None:
                fired[kg] = value
    return fired


def forget_fired(backend: Any) -> None:
    """Drop the restored :data:`FIRED` state once it is read (a later snapshot must not carry it)."""
    if FIRED not in backend.state_names():
        return
    cell = backend.get_partitioned_state(ValueStateDescriptor(FIRED))
    for key, kg in backend.keys_of(FIRED):
        backend.set_current_key_and_group(key, kg)
        cell.clear()


class SlicedWindowOperator(WindowOperator):
    """A :class:`WindowOperator` for tumbling and sliding windows over slices (module docstring)."""

    SLICES = "_window_slices"

    def _open_contents(self) -> None:
        from flinkpy.task.window_layouts import restore_layout

        restore_layout(self, SLICED)
        self._slices = self.backend.get_partitioned_state(ValueStateDescriptor(self.SLICES))
        self._open_geometry()
        #: (time, key group) of the timers registered and not fired yet (empty after a restore:
        #: registering again is harmless, the timer service keeps one)
        self._registered: set[tuple[int, int]] = set()
        #: key group -> the time up to which it fired, restored from the heap path (until the
        #: watermark passes it)
        self._fired_kg: dict[int, int] = {}
        self._schedule_restored()

    def _open_geometry(self) -> None:
        a = self.assigner
        self._size = a.size
        self._slide = getattr(a, "slide", a.size)
        self._offset = a.offset
        self._g = math.gcd(self._size, self._slide)
        # window ends are the instants e with (e - end_phase) % slide == 0
        self._end_phase = (self._offset + self._size) % self._slide
        if self.spec.aggregation == REDUCE:
            self._fold = self._reduce
        else:
            create, add = self._create_acc, self._add
            self._fold = lambda acc, value: add(value, acc)
            self._first = lambda value: add(value, create())

    def _schedule_restored(self) -> None:
        """Timers for slices restored from a snapshot of the heap path, which carries no window
        timers but says what fired (:data:`FIRED`); a snapshot of this path carries its timers."""
        if FIRED not in self.backend.state_names() or not self.backend.keys_of(FIRED):
            return
        keys = self.backend.keys_of(self.SLICES)
        fired = restored_fired(self.backend, self.event_time)
        self._fired_kg = dict(fired)
        set_key = self.backend.set_current_key_and_group
        for key, kg in keys:
            set_key(key, kg)
            for se in self._slices.value() or ():
                self._register_slice(se, fired.get(kg, MIN_WATERMARK), kg)
        forget_fired(self.backend)

    # -- geometry ---------------------------------------------------------------------------
    def _first_end(self, after: int) -> int:
        """The first window end strictly after ``after``."""
        return after + 1 + (self._end_phase - after - 1) % self._slide

    def _last_end(self, ts: int) -> int:
        """The end of the latest-starting window that holds ``ts``."""
        return ts - (ts - self._offset) % self._slide + self._size

    def _cleanup_at(self, slice_end: int) -> int:
        t = self._last_end(slice_end - 1) - 1
        return t + self.lateness if self.event_time else t

    # -- records ----------------------------------------------------------------------------
    def process(self, values: list, timestamps: list[int] | None) -> None:
        if self.event_time:
            if timestamps is None or None in timestamps:
                super().process(values, timestamps)  # raises the general path's error
                return
            wm = self.timers.current_watermark()
        else:
            now = self.timers.current_processing_time()
            timestamps = [now] * len(values)
            wm = now - 1  # nothing is late in processing time
        by_key: dict[Any, list[int]] = {}
        key_of = self.key
        for i, value in enumerate(values):
            k = key_of(value)
            idx = by_key.get(k)
            if idx is None:
                by_key[k] = [i]
            else:
                idx.append(i)
        for k, idx in by_key.items():
            self._process_key(k, idx, values, timestamps, wm)
        self._flush()

    def _process_key(self, key: Any, idx: list[int], values: list, stamps: list, wm: int) -> None:
        self.backend.set_current_key(key)
        self._key = key
        if self._fired_kg:  # a restored key group's records are late by its own time
            wm = max(wm, self._fired_kg.get(self.backend.current_key_group, wm))
        cell = self._slices
        d = cell.value()
        if d is None:
            d = {}
        g, phase, fold = self._g, (self._offset % self._g), self._fold
        first = self._first if self.spec.aggregation == AGGREGATE else None
        new: list[int] = []
        for i in idx:
            ts = stamps[i]
            if ts <= wm:
                self._late_record(d, values[i], ts, wm, new)
                continue
            se = ts - (ts - phase) % g + g
            old = d.get(se, _MISSING)
            if old is _MISSING:
                d[se] = values[i] if first is None else first(values[i])
                new.append(se)
            else:
                d[se] = fold(old, values[i])
        cell.update(d or None)
        kg = self.backend.current_key_group
        for se in new:
            self._register_slice(se, wm, kg)

    def _kept_from(self, value: Any, ts: int, wm: int) -> int | None:
        """For a record at or behind the watermark: the first window end still kept (``e - 1 +
        lateness > wm``), or None when no window that holds it is (it is late data then, for the
        side output if there is one)."""
        last_end = self._last_end(ts)
        kept_from = wm + 2 - self.lateness if self.event_time else wm + 2
        if self._first_end(ts) > last_end or last_end < kept_from:
            if self.event_time and ts + self.lateness <= wm and self.spec.late_tag_id is not None:
                self._late_values.append(value)
                self._late_stamps.append(ts)
            return None
        return kept_from

    def _late_record(self, d: dict, value: Any, ts: int, wm: int, new: list[int]) -> None:
        """A record at or behind the watermark: into its slice if a window that holds it is
        still kept, then fire at once the kept windows that already fired (newest first, as the
        general path's assigner lists them)."""
        kept_from = self._kept_from(value, ts, wm)
        if kept_from is None:
            return
        first_end, last_end = self._first_end(ts), self._last_end(ts)
        se = ts - (ts - self._offset % self._g) % self._g + self._g
        old = d.get(se, _MISSING)
        if old is _MISSING:
            d[se] = value if self.spec.aggregation == REDUCE else self._first(value)
            new.append(se)
        else:
            d[se] = self._fold(old, value)
        e = last_end
        while e >= first_end:
            if e - 1 <= wm and e >= kept_from:
                self._fire_window(d, e)
            e -= self._slide

    def _register_slice(self, se: int, wm: int, key_group: int) -> None:
        """Timers of a new slice: the first window holding it that has not fired, and cleanup
        (a timer of its key group: see :data:`GROUP_TIMER_KEY`)."""
        first, last = self._first_end(se - 1), self._last_end(se - 1)
        if first - 1 <= wm:
            first += -(-(wm + 2 - first) // self._slide) * self._slide
        if first <= last:
            self._register_fire(first - 1, key_group)
        # Without lateness the last window that holds the slice fires at its cleanup time, and
        # that window has a timer (the slice is in it): no timer of its own.
        if self.lateness and self.event_time:
            self._register_group(self._cleanup_at(se), key_group)

    def _register_fire(self, t: int, key_group: int) -> None:
        """A timer for the window ending at ``t + 1``."""
        self._register_group(t, key_group)

    def _register_group(self, t: int, key_group: int) -> None:
        if (t, key_group) in self._registered:
            return
        self._registered.add((t, key_group))
        self.backend.set_current_key_and_group(GROUP_TIMER_KEY, key_group)
        if self.event_time:
            self.timers.register_event_time_timer(t, SLICE_TIMER)
        else:
            self.timers.register_processing_time_timer(t, SLICE_TIMER)

    # -- timers -----------------------------------------------------------------------------
    def _on_timer(self, key: Any, namespace: Any, timestamp: int, event_time: bool) -> None:
        """A key group's timer: fire the window ending at ``timestamp + 1`` for each of its keys
        that has slices in it, and drop the slices whose last window is cleaned up."""
        if event_time != self.event_time:
            return
        backend = self.backend
        kg = backend.current_key_group
        self._registered.discard((timestamp, kg))
        table = backend.table(self.SLICES)
        group = table.get(kg)
        if not group:
            return
        end = timestamp + 1
        size, slide, offset = self._size, self._slide, self._offset
        fires = (end - self._end_phase) % slide == 0
        start, nxt_start = end - size, end + slide - size
        late = self.lateness if event_time else 0
        set_key = backend.set_current_key_and_group
        chain = False
        for k in list(group):
            d = group.get(k)
            if not d:
                continue
            in_window = fires and any(start < se <= end for se in d)
            gone = [se for se in d if se - 1 - (se - 1 - offset) % slide + size - 1 + late <= timestamp]
            if not in_window and not gone:
                continue
            set_key(k, kg)
            self._key = k
            d = self._slices.value()  # a private copy after a snapshot (or from RocksDB)
            if in_window:
                self._fire_window(d, end)
                if not chain:
                    chain = any(nxt_start < se <= end for se in d)  # a slice of it is in the next
            if gone:
                for se in gone:
                    del d[se]
                self._slices.update(d or None)
        if chain:
            self._register_group(end + slide - 1, kg)
        if not event_time:
            self._flush()  # event-time firings go out together in timers_fired()

    def end_input(self) -> None:
        self._flush()  # nothing should be pending here (timers_fired ran); never lose it

    def timers_fired(self) -> None:
        """The watermark fired every due timer: emit their windows as one batch, before the
        watermark is forwarded."""
        if self._fired_kg:
            wm = self.timers.current_watermark()
            self._fired_kg = {kg: t for kg, t in self._fired_kg.items() if t > wm}
        self._flush()

    def _fire_window(self, d: dict, end: int) -> bool:
        """Emit the window ``[end - size, end)`` from its slices; False when it has none."""
        start = end - self._size
        parts = [d[se] for se in sorted(d) if start < se <= end] if len(d) > 1 else [v for se, v in d.items() if start < se <= end]
        if not parts:
            return False
        acc = self._combine(parts)
        if self.spec.window_function_kind is None:
            self._out_values.append(acc)
            self._out_stamps.append(end - 1)
        else:
            self._emit(TimeWindow(start, end), [acc])
        return True

    def _combine(self, parts: list) -> Any:
        """A window's result from the values of its slices, in time order."""
        if self.spec.aggregation == REDUCE:
            acc = parts[0]
            if len(parts) > 1:
                acc = copy.copy(acc)  # a reduce that changes its first argument must not reach a slice
                for p in parts[1:]:
                    acc = self._reduce(acc, p)
            return acc
        acc = self._create_acc()
        for p in parts:
            acc = self._merge_acc(acc, p)
        return self._result(acc)
