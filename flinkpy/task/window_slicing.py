"""Sliced window aggregation: tumbling and sliding windows with an incremental function.

A sliding window of size S every D overlaps S / D others, so the general
:class:`~flinkpy.task.window_operator.WindowOperator` updates every record into S / D windows,
each with its own contents, trigger call and timers. Here time is cut into *slices* of
``gcd(S, D)`` (the window itself when tumbling): each record is folded into the one slice of its
key that holds its timestamp, and a window's result is the combination of the slices it covers
(``reduce`` or ``AggregateFunction.merge``), computed once when the window fires.

Per key, one backend value state ``_window_slices`` holds ``{slice end: reduced value or
accumulator}``, so slices are checkpointed, restored and rescaled like any keyed state. Timers
are per key group and window end, not per key and window: a new slice asks for one at the end
of the first window that will fire with it (and one when the last window that covers it is
cleaned up, with allowed lateness only); the timer fires the window for every key of the group
that has slices in it, and asks for the next window's while slices it shares remain. On the heap
backend a key group keeps only its earliest window timer: when it fires, every window of the
group that the watermark has passed fires in one pass over each key's slices (each slice folded
into the windows that hold it, so an empty window costs nothing), and the group asks for the
next window that holds a slice; the heap path also caches each key's slices dict (checked
against the table's live key-group dicts, so copy-on-write after a snapshot holds).

The semantics are the general path's: default triggers, allowed lateness with late firings
(a late record re-fires at once every already-fired, not yet cleaned-up window that holds it),
late data to a side output, offsets. Which path a window takes is :func:`execution_path`'s
decision; ``flinkpy info`` shows it. The two paths keep different state, so a snapshot of one is
refused by the other (:func:`check_restored_path`). One difference, in processing time only:
a record that arrives in the very millisecond its window fired makes the window fire again with
all its records here, and with that record alone on the general path (which purged the window).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

from flinkpy.common.state import ValueStateDescriptor
from flinkpy.common.window import (
    EventTimeTrigger,
    ProcessAllWindowFunction,
    ProcessingTimeTrigger,
    ProcessWindowFunction,
    TimeWindow,
    _Sliding,
    _Tumbling,
)
from flinkpy.errors import FlinkpyError
from flinkpy.state.key_groups import KeyGroupAssigner
from flinkpy.task.window_operator import AGGREGATE, PROCESS, REDUCE, WindowOperator, WindowSpec

SLICED = "sliced"
GENERAL = "general"
#: the namespace of every timer of a sliced window operator: a timer at t means "the window
#: ending at t + 1 fires" and "slices whose last window is cleaned up at t go"
SLICE_TIMER = "slices"
#: the key of every timer: timers are per key group, not per key (a window end fires every key
#: of the group that has slices in the window), and move with their key group when rescaled
GROUP_TIMER_KEY = ("flinkpy.window-slices",)
_MISSING = object()
#: past this many cached keys the cache of key -> slices dict starts again
_HOMES_MAX = 1_000_000
#: types whose values copy.copy returns as they are: a window's result may start as such a slice value itself
_SHARED_AS_IS = frozenset({int, float, str, bytes, tuple, bool, type(None), frozenset, complex})


def execution_path(spec: WindowSpec) -> tuple[str, str]:
    """``("sliced" | "general", why)``: whether a window runs on slices, decided from its spec."""
    assigner = spec.assigner
    if not isinstance(assigner, (_Tumbling, _Sliding)):
        return GENERAL, f"{type(assigner).__name__} windows are not cut into slices"
    if spec.evictor is not None:
        return GENERAL, "an evictor needs every element"
    if spec.aggregation not in (REDUCE, AGGREGATE):
        return GENERAL, "a window function alone needs every element"
    default = EventTimeTrigger if assigner.is_event_time() else ProcessingTimeTrigger
    if type(spec.trigger) is not default:
        return GENERAL, f"trigger {spec.trigger!r} is not the assigner's default"
    fn = spec.window_function
    if spec.window_function_kind == PROCESS and getattr(type(fn), "clear", None) not in (
        None,
        ProcessWindowFunction.clear,
        ProcessAllWindowFunction.clear,
    ):
        return GENERAL, "the window function's clear() runs per window"
    size = assigner.size
    slide = getattr(assigner, "slide", size)
    if slide > size:
        return GENERAL, "windows with gaps between them (slide > size)"
    return SLICED, f"slices of {math.gcd(size, slide)} ms"


def create_window_operator(name: str, spec: WindowSpec, output: Any, key_selector: Callable, backend: Any, batch_mode: bool) -> WindowOperator:
    """The window operator of a ``"window"`` node: sliced when :func:`execution_path` allows."""
    cls = SlicedWindowOperator if execution_path(spec)[0] == SLICED else WindowOperator
    return cls(name, spec, output, key_selector, backend, batch_mode)


def check_restored_path(op: WindowOperator, path: str) -> None:
    """Refuse state the other path wrote: it keeps windows where this one keeps slices (and the
    reverse), and its timers carry another namespace."""
    other, other_path = (WindowOperator.CONTENTS, GENERAL) if path == SLICED else (SlicedWindowOperator.SLICES, SLICED)
    backend = op.backend
    names = getattr(backend, "state_names", None)
    if names is not None and other in names() and backend.keys_of(other):
        raise FlinkpyError(
            f"window operator {op.name!r}: the restored state was written by the {other_path} window "
            f"path, and this job runs the operator on the {path} path ({execution_path(op.spec)[1]})",
            remedy="restore it with the job as it was when the snapshot was taken, let its windows "
            "fire and take a new savepoint after they are empty, or start without the snapshot",
        )


class SlicedWindowOperator(WindowOperator):
    """A :class:`WindowOperator` for tumbling and sliding windows over slices (module docstring)."""

    SLICES = "_window_slices"

    def _open_contents(self) -> None:
        check_restored_path(self, SLICED)
        self._slices = self.backend.get_partitioned_state(ValueStateDescriptor(self.SLICES))
        # the heap backend's raw table: records write to it directly (see _process_heap)
        self._table = self.backend.table(self.SLICES)
        self._frozen = self.backend.frozen(self.SLICES)
        self._assign = KeyGroupAssigner(self.backend.max_parallelism)
        #: key -> its writable {slice end: value} dict in the table (heap backend only)
        self._homes: dict[Any, dict] = {}
        #: key group -> its dict in the table when homes of its keys were cached (see _homes_valid)
        self._home_groups: dict[int, dict] = {}
        #: key group -> the watermark up to which its windows fired (event time, heap backend)
        self._fired_to: dict[int, int] = {}
        #: key group -> its earliest window timer not fired yet (heap backend; see _register_fire)
        self._pending: dict[int, int] = {}
        #: (time, key group) of the timers registered and not fired yet (empty after a restore:
        #: registering again is harmless, the timer service keeps one)
        self._registered: set[tuple[int, int]] = set()
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
        if isinstance(self._table, dict):
            self._process_heap(values, timestamps, wm)
            self._flush()
            return
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

    def _process_heap(self, values: list, stamps: list, wm: int) -> None:
        """:meth:`process` on a heap backend: on-time records go straight into the backend's
        table (as the rolling keyed reduce does), so a record costs its key, one lookup of its
        key's slices (cached in ``_homes``), one slice lookup and one fold. New slices are noted
        and their timers registered once per (slice, key group) after the batch. Records at or
        behind the watermark take the per-key path, in their order."""
        homes = self._homes
        if len(homes) > _HOMES_MAX or not self._homes_valid():
            self._forget_homes()
        homes_get, home = homes.get, self._home
        key_of, fold, g = self.key, self._fold, self._g
        phase = self._offset % g
        first = self._first if self.spec.aggregation == AGGREGATE else None
        missing = _MISSING
        new: list[tuple[int, Any]] = []
        late: list[int] = []
        for i, (value, ts) in enumerate(zip(values, stamps)):
            if ts <= wm:
                late.append(i)
                continue
            k = key_of(value)
            d = homes_get(k)
            if d is None:
                d = home(k)
            se = ts - (ts - phase) % g + g
            old = d.get(se, missing)
            if old is missing:
                d[se] = value if first is None else first(value)
                new.append((se, k))
            else:
                d[se] = fold(old, value)
        if new:
            self._register_slices(new, wm)
        if late:
            self._forget_homes()  # the per-key path may drop or replace a key's dict
            for i in late:
                self._process_key(key_of(values[i]), [i], values, stamps, wm)

    def _home(self, k: Any) -> dict:
        """The writable ``{slice end: value}`` dict of key ``k`` (created, or thawed after a
        snapshot), remembered in ``_homes`` until the key's slices are all dropped."""
        kg = self._assign.memo.get(k)
        if kg is None:
            kg = self._assign(k)
            if kg not in self.backend.key_group_range:
                self.backend.set_current_key(k)  # raises: the record reached the wrong subtask
        table = self._table
        m = table.get(kg)
        if m is None:
            m = table[kg] = {}
        elif self._frozen and kg in self._frozen:
            m = self._thaw(kg)
        d = m.get(k)
        if d is None:
            d = m[k] = {}
        self._homes[k] = d
        self._home_groups[kg] = m
        return d

    def _homes_valid(self) -> bool:
        """Whether every cached home is still in the table's live dict of its key group: a
        snapshot freezes key groups, and binding a state object or the timer service to a
        frozen group (set_current_key) replaces its dict with a copy, without telling us."""
        table, frozen = self._table, self._frozen
        for kg, m in self._home_groups.items():
            if table.get(kg) is not m or kg in frozen:
                return False
        return True

    def _forget_homes(self) -> None:
        self._homes.clear()
        self._home_groups.clear()

    def _thaw(self, kg: int) -> dict:
        """Copy-on-write of a key group after a snapshot; the cached homes of its keys (and,
        simply, of all keys) point into the snapshot's copy, so they are forgotten."""
        self._forget_homes()
        return self.backend.thaw(self.SLICES, kg)

    def _register_slices(self, new: list[tuple[int, Any]], wm: int) -> None:
        """Timers of the slices a batch created: once per (slice end, key group)."""
        memo_get, assign = self._assign.memo.get, self._assign
        seen = {(se, memo_get(k)) for se, k in new}  # the memo knows k: _home asked for it
        for se, kg in seen:
            if kg is None:  # the memo was full and started again: ask each key
                for kg in {assign(k) for s, k in new if s == se}:
                    self._register_slice(se, wm, kg)
            else:
                self._register_slice(se, wm, kg)

    def _process_key(self, key: Any, idx: list[int], values: list, stamps: list, wm: int) -> None:
        self.backend.set_current_key(key)
        self._key = key
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

    def _late_record(self, d: dict, value: Any, ts: int, wm: int, new: list[int]) -> None:
        """A record at or behind the watermark: into its slice if a window that holds it is
        still kept, then fire at once the kept windows that already fired (newest first, as the
        general path's assigner lists them)."""
        first_end, last_end = self._first_end(ts), self._last_end(ts)
        kept_from = wm + 2 - self.lateness if self.event_time else wm + 2  # e - 1 + lateness > wm
        if first_end > last_end or last_end < kept_from:
            if self.event_time and ts + self.lateness <= wm and self.spec.late_tag_id is not None:
                self._late_values.append(value)
                self._late_stamps.append(ts)
            return
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
        """A timer for the window ending at ``t + 1``. On the heap backend a key group keeps one
        such timer, its earliest: when it fires, every window the watermark has passed fires
        with it, and the group asks for the next window that holds a slice (:meth:`_fire_group`)."""
        if isinstance(self._table, dict):
            pending = self._pending.get(key_group)
            if pending is not None and pending <= t:
                return
            self._pending[key_group] = t
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
        pending = self._pending.get(kg)
        if pending is not None and pending <= timestamp:
            del self._pending[kg]  # fired now (even when the group has no slices left)
        table = backend.table(self.SLICES)
        group = table.get(kg)
        if not group:
            return
        if isinstance(table, dict):
            if event_time and timestamp <= self._fired_to.get(kg, timestamp - 1):
                return  # an earlier timer of the group fired this one's windows with its own
            if kg in self._frozen:
                group = self._thaw(kg)  # copy-on-write after a snapshot
            # event time: every window of the group that the watermark has passed, in one pass
            # per key (the timers after this one up to the watermark have nothing left to do)
            limit = self.timers.current_watermark() if event_time else timestamp
            self._fire_group(group, timestamp, max(limit, timestamp), kg)
            if event_time:
                self._fired_to[kg] = max(limit, timestamp)
            else:
                self._flush()
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

    def _fire_group(self, group: dict, timestamp: int, limit: int, kg: int) -> None:
        """:meth:`_on_timer` on a heap backend, for every timer of the key group from
        ``timestamp`` to ``limit``: each key's slices are read once, and each slice is folded
        into the windows that hold it and end in ``(timestamp, limit + 1]``; a key's windows go
        out in time order. The key group's dict is changed in place."""
        size, slide = self._size, self._slide
        phase = self._end_phase
        lo = self._first_end(timestamp)  # the first window end after timestamp
        hi = limit + 1 - (limit + 1 - phase) % slide  # the last window end at or before limit + 1
        # slices whose last window is cleaned up by limit: the ends up to the first window start
        # after (limit + 1 - lateness) - size
        late = self.lateness if self.event_time else 0
        low = limit + 2 - late - size
        cut = low + (self._offset - low) % slide
        nxt = self._first_end(limit + 1)  # the first window end the watermark has not passed
        reduce = self.spec.aggregation == REDUCE
        fold = self._reduce if reduce else None
        plain = self.spec.window_function_kind is None
        with_state = self.spec.window_function_kind == PROCESS
        one_window = size == slide  # tumbling: a slice is its window
        out_values, out_stamps = self._out_values, self._out_stamps
        first_from, last_to = lo - size, hi  # slices in (first_from, last_to] are in a window that fires
        after = nxt - size  # slices after this are in windows still to fire
        pending = self._pending.get(kg)
        if pending is not None and pending <= limit:
            del self._pending[kg]  # fired now, with the others up to limit
        earliest = None  # the first slice still to fire in a window
        for k, d in list(group.items()):
            if lo <= hi:
                parts = sorted([(se, p) for se, p in d.items() if first_from < se <= last_to]) if len(d) > 1 else \
                    [(se, p) for se, p in d.items() if first_from < se <= last_to]
                if parts:
                    if one_window and plain and reduce:
                        for se, p in parts:
                            out_values.append(p)
                            out_stamps.append(se - 1)
                    else:
                        self._fire_key(k, kg, parts, lo, hi, fold, plain, with_state)
            for se in d:
                if se > after and (earliest is None or se < earliest):
                    earliest = se
            if d and min(d) <= cut:
                for se in [se for se in d if se <= cut]:
                    del d[se]
                if not d:
                    del group[k]
                    self._homes.pop(k, None)
        if earliest is not None:
            self._register_fire(max(nxt, self._first_end(earliest - 1)) - 1, kg)

    def _fire_key(self, k: Any, kg: int, parts: list, lo: int, hi: int, fold: Any, plain: bool, with_state: bool) -> None:
        """Emit key ``k``'s windows ending in ``[lo, hi]`` from its slices ``parts`` (in time
        order): each slice goes into the windows that hold it, so a window costs one fold per
        slice it has, and none when it has none."""
        size, slide = self._size, self._slide
        missing, shared = _MISSING, _SHARED_AS_IS
        accs: dict[int, Any] = {}
        owned: set[int] = set()  # windows whose acc is a private object (a reduce may change it)
        for se, p in parts:
            e = se if se >= lo else lo
            e += (self._end_phase - e) % slide  # the first window end >= max(se, lo)
            stop = min(hi, se + size - 1)
            while e <= stop:
                acc = accs.get(e, missing)
                if fold is None:
                    accs[e] = self._merge_acc(self._create_acc() if acc is missing else acc, p)
                elif acc is missing:
                    accs[e] = p
                else:
                    if e not in owned:
                        if type(acc) not in shared:
                            acc = copy.copy(acc)
                        owned.add(e)
                    accs[e] = fold(acc, p)
                e += slide
        out_values, out_stamps = self._out_values, self._out_stamps
        for e, acc in accs.items():  # inserted in increasing order: parts are in time order
            if fold is None:
                acc = self._result(acc)
            if plain:
                out_values.append(acc)
                out_stamps.append(e - 1)
            else:
                self._key = k
                if with_state:  # the function's global_state() and window_state() are k's
                    self.backend.set_current_key_and_group(k, kg)
                self._emit(TimeWindow(e - size, e), [acc])

    def end_input(self) -> None:
        self._flush()  # nothing should be pending here (timers_fired ran); never lose it

    def timers_fired(self) -> None:
        """The watermark fired every due timer: emit their windows as one batch, before the
        watermark is forwarded."""
        self._flush()

    def _fire_window(self, d: dict, end: int) -> bool:
        """Emit the window ``[end - size, end)`` from its slices; False when it has none."""
        start = end - self._size
        parts = [d[se] for se in sorted(d) if start < se <= end] if len(d) > 1 else [v for se, v in d.items() if start < se <= end]
        if not parts:
            return False
        if self.spec.aggregation == REDUCE:
            acc = parts[0]
            if len(parts) > 1:
                acc = copy.copy(acc)  # a reduce that changes its first argument must not reach a slice
                for p in parts[1:]:
                    acc = self._reduce(acc, p)
        else:
            acc = self._create_acc()
            for p in parts:
                acc = self._merge_acc(acc, p)
            acc = self._result(acc)
        if self.spec.window_function_kind is None:
            self._out_values.append(acc)
            self._out_stamps.append(end - 1)
        else:
            self._emit(TimeWindow(start, end), [acc])
        return True
