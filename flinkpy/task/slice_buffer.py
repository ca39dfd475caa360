"""Sliced windows on the heap backend: slices kept by time, then key, in the operator.

:class:`~flinkpy.task.window_slicing.SlicedWindowOperator` keeps a key's slices as one keyed
value state, ``{slice end: value}``, with timers per key group and window: what a store such as
RocksDB needs. On the heap backend this operator keeps ``{slice end: {key: value}}`` instead.
A record then costs what it costs the rolling keyed reduce, one dict lookup and one fold in the
slice its batch is writing, and a window is its slices combined key by key when the watermark
passes its end (a tumbling window is its one slice: its values go out as they are). Nothing is
registered per slice or key: the operator knows the earliest window end due, compares it with
each watermark, and in processing time sets one timer there.

Keyed state sees the slices at snapshots. The backend asks the operator for a view
(:meth:`~flinkpy.state.heap.HeapKeyedStateBackend.attach_view`): the operator hands over its
slice dicts and marks them shared (O(slices); the first write to a shared slice copies it), and
the snapshot's thread lays them out as the store path keeps them, by key group, key and slice,
beside :data:`~flinkpy.task.window_slicing.FIRED`, the time up to which windows fired, per key
group. So a snapshot of either path restores on the other, at any parallelism. After a rescale
that merges key groups which fired to different times, a key group keeps its own time until the
watermark passes it: its windows do not fire twice, and its records behind that time are late,
as they were before the restore.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from flinkpy.common.window import TimeWindow
from flinkpy.common.window_spec import AGGREGATE, PROCESS, REDUCE
from flinkpy.state.heap import writable_copy
from flinkpy.state.key_groups import KeyGroupAssigner
from flinkpy.state.views import SlicesByKeyGroup
from flinkpy.task.watermarks import MIN_WATERMARK
from flinkpy.task.window_operator import WindowOperator
from flinkpy.task.window_layouts import restore_layout
from flinkpy.task.window_slicing import (
    _SHARED_AS_IS,
    FIRED,
    GROUP_TIMER_KEY,
    SLICE_TIMER,
    SLICED,
    SlicedWindowOperator,
    forget_fired,
    restored_fired,
)

_MISSING = object()
SLICES = SlicedWindowOperator.SLICES


class BufferedSlicedWindowOperator(SlicedWindowOperator):
    """A :class:`SlicedWindowOperator` whose slices live in the operator (module docstring).
    It is its backend's view of the states in :attr:`names` (``attach_view``)."""

    names = (SLICES, FIRED)

    def _open_contents(self) -> None:
        restore_layout(self, SLICED)
        self._open_geometry()
        backend = self.backend
        self._assign = KeyGroupAssigner(backend.max_parallelism)
        #: slice end -> {key: reduced value or accumulator}
        self._buf: dict[int, dict[Any, Any]] = {}
        #: slice ends whose dict a snapshot holds: copied before the next write
        self._shared: set[int] = set()
        #: every window ending at or before this + 1 has fired, for every key
        self._fired_to = MIN_WATERMARK
        #: key group -> its own such time where it is later than _fired_to (after a restore)
        self._fired_kg: dict[int, int] = {}
        #: the earliest time something is due: a window end - 1, or a slice's cleanup
        self._due: int | None = None
        self._restore()
        backend.attach_view(self)

    def _restore(self) -> None:
        backend = self.backend
        if SLICES not in backend.state_names() and FIRED not in backend.state_names():
            return
        fired = restored_fired(backend, self.event_time)
        forget_fired(backend)
        marks = [fired.get(kg, MIN_WATERMARK) for kg in backend.key_group_range]
        self._fired_to = min(marks) if marks else MIN_WATERMARK
        self._fired_kg = {kg: t for kg, t in fired.items() if t > self._fired_to and kg in backend.key_group_range}
        table = backend.table(SLICES)
        buf = self._buf
        for keys in table.values():
            for k, slices in keys.items():
                for se, value in slices.items():
                    d = buf.get(se)
                    if d is None:
                        d = buf[se] = {}
                    d[k] = value
        table.clear()
        backend.frozen(SLICES).clear()
        self._schedule()

    # -- records ----------------------------------------------------------------------------
    def process(self, values: list, timestamps: list[int] | None) -> None:
        if self.event_time:
            if timestamps is None or None in timestamps:
                WindowOperator.process(self, values, timestamps)  # raises the general path's error
                return
            wm = max(self.timers.current_watermark(), self._fired_to)
        else:
            # a record in the very millisecond its window fired counts in the next window
            now = max(self.timers.current_processing_time(), self._fired_to + 1)
            timestamps = [now] * len(values)
            wm = now - 1
        if self._fired_kg:
            self._process_restoring(values, timestamps, wm)
        else:
            self._process_batch(values, timestamps, wm)
        self._flush()

    def _process_batch(self, values: list, stamps: list, wm: int) -> None:
        """Fold each record into its key's value in its slice: the batch's records mostly share
        a slice, so the slice is looked up again only when a record leaves the current one."""
        key_of, fold = self.key, self._fold
        g = self._g
        phase = self._offset % g
        first = self._first if self.spec.aggregation == AGGREGATE else None
        missing = _MISSING
        lo = hi = 0
        cur: dict = {}
        for value, ts in zip(values, stamps):
            if not lo <= ts < hi:
                if ts <= wm:
                    self._late(key_of(value), value, ts, wm)
                    lo = hi = 0  # the late path may have copied the current slice
                    continue
                se = ts - (ts - phase) % g + g
                cur = self._writable(se)
                lo, hi = max(se - g, wm + 1), se
            k = key_of(value)
            old = cur.get(k, missing)
            if old is missing:
                cur[k] = value if first is None else first(value)
            else:
                cur[k] = fold(old, value)

    def _process_restoring(self, values: list, stamps: list, wm: int) -> None:
        """:meth:`_process_batch` while restored key groups keep times of their own: a record is
        late by its key group's time."""
        key_of, assign, marks = self.key, self._assign, self._fired_kg
        g = self._g
        phase = self._offset % g
        event_time = self.event_time
        for value, ts in zip(values, stamps):
            k = key_of(value)
            mark = marks.get(assign(k), MIN_WATERMARK)
            if not event_time and ts <= mark:
                ts = mark + 1  # a clock behind the restored one: the group's next window
            w = max(wm, mark)
            if ts <= w:
                self._late(k, value, ts, w)
            else:
                self._fold_into(self._writable(ts - (ts - phase) % g + g), k, value)

    def _fold_into(self, d: dict, k: Any, value: Any) -> None:
        old = d.get(k, _MISSING)
        if old is _MISSING:
            d[k] = value if self.spec.aggregation == REDUCE else self._first(value)
        else:
            d[k] = self._fold(old, value)

    def _writable(self, se: int) -> dict:
        """Slice ``se``'s dict, to write: created (and scheduled), or copied if a snapshot holds it."""
        d = self._buf.get(se)
        if d is None:
            d = self._buf[se] = {}
            self._schedule_slice(se)
        elif se in self._shared:
            d = self._buf[se] = writable_copy(d)
            self._shared.discard(se)
        return d

    def _late(self, k: Any, value: Any, ts: int, wm: int) -> None:
        """A record at or behind the watermark: into its slice if a window that holds it is
        still kept, then fire at once, for its key, the kept windows that already fired (newest
        first, as the general path's assigner lists them); else late data."""
        kept_from = self._kept_from(value, ts, wm)
        if kept_from is None:
            return
        first_end, last_end = self._first_end(ts), self._last_end(ts)
        g = self._g
        self._fold_into(self._writable(ts - (ts - self._offset % g) % g + g), k, value)
        e = last_end
        while e >= first_end:
            if e - 1 <= wm and e >= kept_from:
                self._emit_key_window(k, e)
            e -= self._slide

    # -- firing -----------------------------------------------------------------------------
    def _slice_due(self, se: int) -> int:
        """When slice ``se`` next matters: its first window that has not fired, or its cleanup."""
        first = self._first_end(max(se - 1, self._fired_to + 1))
        if first <= self._last_end(se - 1):
            return first - 1
        return self._cleanup_at(se)

    def _schedule_slice(self, se: int) -> None:
        t = self._slice_due(se)
        if self._due is None or t < self._due:
            self._due = t
            if not self.event_time:
                self._set_timer(t)

    def _schedule(self) -> None:
        self._due = min((self._slice_due(se) for se in self._buf), default=None)
        if self._due is not None and not self.event_time:
            self._set_timer(self._due)

    def _set_timer(self, t: int) -> None:
        self.backend.set_current_key_and_group(GROUP_TIMER_KEY, self.backend.key_group_range.start)
        self.timers.register_processing_time_timer(t, SLICE_TIMER)

    def timers_fired(self) -> None:
        """After each watermark: fire the windows it passed, before it is forwarded."""
        if self.event_time:
            wm = self.timers.current_watermark()
            if self._due is not None and wm >= self._due:
                self._fire_until(wm)
            elif wm > self._fired_to:
                self._passed(wm)  # nothing due: windows up to wm + 1 hold no slice
        self._flush()

    def _on_timer(self, key: Any, namespace: Any, timestamp: int, event_time: bool) -> None:
        """The processing-time timer; event-time windows fire in :meth:`timers_fired` (a window
        timer restored from the store path has nothing left to do)."""
        if event_time or self.event_time:
            return
        if self._due is not None and timestamp >= self._due:
            self._fire_until(timestamp)
        self._flush()

    def _fire_until(self, t: int) -> None:
        """Fire every window that ends at or before ``t + 1`` and has not fired, in time order;
        drop the slices whose last window is cleaned up by ``t``."""
        buf, slide = self._buf, self._slide
        after = self._fired_to + 1
        lo = self._first_end(after)
        if (t + 1 - lo) // slide < len(buf):
            ends: Any = range(lo, t + 2, slide)  # fewer windows than slices (a window without any is skipped)
        else:  # a long way (the final watermark): the windows that hold a slice
            ends = set()
            for se in buf:
                e = self._first_end(max(se - 1, after))
                last = min(self._last_end(se - 1), t + 1)
                while e <= last:
                    ends.add(e)
                    e += slide
            ends = sorted(ends)
        for e in ends:
            self._emit_window(e)
        self._passed(t)
        for se in [se for se in buf if self._cleanup_at(se) <= t]:
            del buf[se]
            self._shared.discard(se)
        self._schedule()

    def _passed(self, t: int) -> None:
        """Every window ending at or before ``t + 1`` has fired (a late record's windows then
        fire once, at its arrival)."""
        self._fired_to = max(self._fired_to, t)
        if self._fired_kg:
            self._fired_kg = {kg: f for kg, f in self._fired_kg.items() if f > t}

    def _window_parts(self, e: int) -> list[dict]:
        g, buf = self._g, self._buf
        return [buf[se] for se in range(e - self._size + g, e + 1, g) if se in buf]

    def _emit_window(self, e: int) -> None:
        """Window ``[e - size, e)`` for every key with slices in it."""
        parts = self._window_parts(e)
        if not parts:
            return
        reduce = self.spec.aggregation == REDUCE
        if len(parts) == 1:
            accs = parts[0]
        elif reduce:
            accs = _combine_reduced(parts, self._reduce)
        else:
            merge, create = self._merge_acc, self._create_acc
            accs = {}
            for part in parts:
                for k, v in part.items():
                    a = accs.get(k, _MISSING)
                    accs[k] = merge(create() if a is _MISSING else a, v)
        if self._fired_kg:  # restored key groups that fired this window already
            marks, assign = self._fired_kg, self._assign
            accs = {k: v for k, v in accs.items() if marks.get(assign(k), MIN_WATERMARK) < e - 1}
        if not reduce:
            result = self._result
            accs = {k: result(v) for k, v in accs.items()}
        if self.spec.window_function_kind is None:
            self._out_values.extend(accs.values())
            self._out_stamps.extend([e - 1] * len(accs))
        else:
            for k, v in accs.items():
                self._call_window_function(k, e, v)

    def _emit_key_window(self, k: Any, e: int) -> None:
        """Window ``[e - size, e)`` of key ``k`` alone (a late record's firing)."""
        parts = [p[k] for p in self._window_parts(e) if k in p]
        if not parts:
            return
        acc = self._combine(parts)
        if self.spec.window_function_kind is None:
            self._out_values.append(acc)
            self._out_stamps.append(e - 1)
        else:
            self._call_window_function(k, e, acc)

    def _call_window_function(self, k: Any, e: int, acc: Any) -> None:
        self._key = k
        if self.spec.window_function_kind == PROCESS:  # its global_state() and window_state() are k's
            self.backend.set_current_key_and_group(k, self._assign(k))
        self._emit(TimeWindow(e - self._size, e), [acc])

    # -- snapshots --------------------------------------------------------------------------
    def freeze(self) -> dict[str, Mapping[int, dict]]:
        """The slices and fired times as keyed state, for a snapshot (see the module docstring)."""
        slices = dict(self._buf)
        self._shared.update(slices)
        marks = self._fired_kg
        # every key group, also when nothing fired: it tells the store path to schedule timers
        fired = {kg: {GROUP_TIMER_KEY: max(self._fired_to, marks.get(kg, MIN_WATERMARK))} for kg in self.backend.key_group_range}
        return {SLICES: SlicesByKeyGroup(slices, self._assign.memo, self.backend.max_parallelism), FIRED: fired}


def _combine_reduced(parts: list[dict], reduce: Any) -> dict:
    """Key -> the reduce of its values in ``parts``, in order. A value taken from a slice is
    copied before a reduce gets it as first argument, unless its type cannot change in place."""
    accs: dict = {}
    owned: set = set()
    shared = _SHARED_AS_IS
    for part in parts:
        for k, v in part.items():
            a = accs.get(k, _MISSING)
            if a is _MISSING:
                accs[k] = v
                continue
            if type(a) not in shared and k not in owned:
                a = copy.copy(a)
                owned.add(k)
            accs[k] = reduce(a, v)
    return accs
