"""A window operator's keyed state, converted between the sliced and the general layout.

The two window paths (:func:`~flinkpy.common.window_spec.execution_path`) keep different state.
The sliced path keeps per key ``_window_slices`` (``{slice end: reduced value or
accumulator}``), per key group :data:`~flinkpy.task.window_slicing.FIRED` (every window ending
at or before it + 1 fired) and timers per key group (:data:`GROUP_TIMER_KEY`,
:data:`SLICE_TIMER`). The general path keeps per key ``_window_contents`` (``{TimeWindow:
contents}``), trigger state per window, and timers per key and window. A job whose window moves
from one path to the other (an evictor added, the Spark runner, the default trigger put back)
keeps its windows through the two functions here, pure over the ``"states"`` mapping of a
canonical keyed-state document (all key groups together, as in
:mod:`flinkpy.state.backend`), and the restore hook :func:`restore_layout` that the window
operators call before they read their state.

>>> from flinkpy.common.time import Time
>>> from flinkpy.common.window import EventTimeTrigger, TimeWindow, TumblingEventTimeWindows
>>> from flinkpy.common.window_spec import REDUCE, WindowSpec
>>> spec = WindowSpec(TumblingEventTimeWindows.of(Time.milliseconds(10)), EventTimeTrigger(),
...                   aggregation=REDUCE, aggregate_function=lambda a, b: a + b)
>>> general = sliced_to_general({"_window_slices": {"kind": "value", "key_groups": {3: {"a": {10: 5, 20: 7}}}},
...                              "_window_fired": {"kind": "value", "key_groups": {3: {GROUP_TIMER_KEY: 9}}}}, spec, 128)
>>> general["_window_contents"]["key_groups"]
{3: {'a': {TimeWindow(start=10, end=20): 7}}}
>>> sorted(general_to_sliced(general, spec, 128)["_window_slices"]["key_groups"][3]["a"].items())
[(20, 7)]
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from flinkpy.common.window import MAX_TIMESTAMP, TimeWindow, _Sliding, _Tumbling
from flinkpy.common.window_spec import AGGREGATE, GENERAL, REDUCE, SLICED, WindowSpec, execution_path
from flinkpy.errors import InvalidProgramError
from flinkpy.state.heap import TIMER_EVENT_TABLE, TIMER_PROCESSING_TABLE
from flinkpy.task.operators import user_method
from flinkpy.task.watermarks import MIN_WATERMARK
from flinkpy.task.window_operator import WindowOperator
from flinkpy.task.window_slicing import FIRED, GROUP_TIMER_KEY, SLICE_TIMER, SlicedWindowOperator

SLICES = SlicedWindowOperator.SLICES
CONTENTS = WindowOperator.CONTENTS
MERGING = WindowOperator.MERGING
TRIGGER_PREFIX = "_window_trigger:"
TIMER_TABLES = (TIMER_EVENT_TABLE, TIMER_PROCESSING_TABLE)


class WindowLayoutError(InvalidProgramError):
    """A window's state cannot be converted to the other path's layout; the message says why."""


@dataclass(frozen=True)
class _Geometry:
    """Where the windows of a tumbling or sliding assigner end, and the slices they cover."""

    size: int
    slide: int
    offset: int
    g: int

    @property
    def end_phase(self) -> int:
        return (self.offset + self.size) % self.slide

    def first_end(self, after: int) -> int:
        """The first window end strictly after ``after``."""
        return after + 1 + (self.end_phase - after - 1) % self.slide

    def last_end(self, ts: int) -> int:
        """The end of the latest-starting window that holds ``ts``."""
        return ts - (ts - self.offset) % self.slide + self.size

    def aligned_slice(self, se: int) -> bool:
        return (se - self.offset) % self.g == 0

    def window_of(self, window: Any) -> bool:
        """Whether ``window`` is one of this assigner's windows."""
        return isinstance(window, TimeWindow) and window.end - window.start == self.size and (window.end - self.end_phase) % self.slide == 0


def _geometry(spec: WindowSpec) -> _Geometry:
    import math

    a = spec.assigner
    if not isinstance(a, (_Tumbling, _Sliding)):
        raise WindowLayoutError(f"{a!r} windows are not cut into slices")
    slide = getattr(a, "slide", a.size)
    return _Geometry(a.size, slide, a.offset, math.gcd(a.size, slide))


def _lateness(spec: WindowSpec) -> int:
    return max(0, int(spec.allowed_lateness_ms or 0)) if spec.assigner.is_event_time() else 0


def _timer_table(spec: WindowSpec) -> str:
    return TIMER_EVENT_TABLE if spec.assigner.is_event_time() else TIMER_PROCESSING_TABLE


def _groups(states: Mapping[str, Any], name: str) -> Mapping[int, Mapping[Any, Any]]:
    entry = states.get(name)
    return entry.get("key_groups", {}) if entry else {}


def _value_state(groups: dict[int, dict[Any, Any]]) -> dict[str, Any]:
    return {"kind": "value", "key_groups": groups}


def _is_group_timer(timer: tuple) -> bool:
    return timer[0] == GROUP_TIMER_KEY and timer[1] == SLICE_TIMER


def _is_window_timer(timer: tuple) -> bool:
    return isinstance(timer[1], TimeWindow)


def _replace_timers(states: Mapping[str, Any], out: dict[str, Any], drop: Callable[[tuple], bool], add: Mapping[str, dict[int, set]]) -> None:
    """Into ``out``: each timer table of ``states`` without the timers ``drop`` picks, plus ``add``."""
    for table in TIMER_TABLES:
        entry = states.get(table)
        groups: dict[int, dict] = {}
        for kg, timers in (entry.get("key_groups", {}) if entry else {}).items():
            kept = {t: None for t in timers if not drop(t)}
            if kept:
                groups[kg] = kept
        for kg, timers in add.get(table, {}).items():
            groups.setdefault(kg, {}).update(dict.fromkeys(sorted(timers, key=lambda t: t[2])))
        if groups or entry is not None:
            out[table] = {**(entry or {"kind": "value"}), "key_groups": groups}


# -- sliced -> general ----------------------------------------------------------------------


def fired_marks(states: Mapping[str, Any], event_time: bool) -> dict[int, int]:
    """Per key group, the time up to which the sliced path fired its windows: :data:`FIRED`
    where the heap path wrote it, else its earliest group timer - 1 (the store path), as
    :func:`~flinkpy.task.window_slicing.restored_fired` reads a backend."""
    marks: dict[int, int] = {}
    for kg, timers in _groups(states, TIMER_EVENT_TABLE if event_time else TIMER_PROCESSING_TABLE).items():
        for timer in timers:
            if _is_group_timer(timer) and timer[2] - 1 < marks.get(kg, timer[2]):
                marks[kg] = timer[2] - 1
    for kg, keys in _groups(states, FIRED).items():
        value = keys.get(GROUP_TIMER_KEY)
        if value is not None:
            marks[kg] = value
    return marks


def _general_contents(spec: WindowSpec) -> Callable[[list[tuple[int, Any]]], Any]:
    """How the general path keeps a window whose slices are ``[(slice end, value)]``, in time
    order, for ``spec``; raises where it keeps what slices cannot give."""
    if spec.aggregation == REDUCE:
        reduce = user_method(spec.aggregate_function, "reduce")
        if spec.evictor is not None:
            # an evictor sees elements: each slice's reduced value is one, stamped with the
            # slice's last millisecond (reducing them gives the window's value)
            return lambda parts: [(value, se - 1) for se, value in parts]

        def reduced(parts: list[tuple[int, Any]]) -> Any:
            acc = parts[0][1]
            if len(parts) > 1:
                acc = copy.copy(acc)  # a reduce that changes its first argument must not reach a slice
                for _, value in parts[1:]:
                    acc = reduce(acc, value)
            return acc

        return reduced
    if spec.aggregation == AGGREGATE:
        if spec.evictor is not None:
            raise WindowLayoutError("the evictor needs the window's elements, and its slices hold only accumulators of the AggregateFunction")
        agg = spec.aggregate_function

        def merged(parts: list[tuple[int, Any]]) -> Any:
            acc = agg.create_accumulator()
            for _, value in parts:
                acc = agg.merge(acc, value)
            return acc

        return merged
    raise WindowLayoutError("the window function alone needs every element, and the slices hold only reduced values")


def sliced_to_general(states: Mapping[str, Any], spec: WindowSpec, max_parallelism: int) -> dict[str, Any]:
    """The general path's states for the sliced path's ``states`` (module docstring).

    Every window that holds a slice and has not fired (``end - 1`` after its key group's fired
    time), and with allowed lateness every fired one not yet cleaned up, gets its contents from
    its slices, its timers (the window's end, unless it fired, and its cleanup time) and the
    trigger state of the default trigger, which is none. Windows that fired and were cleaned up
    do not come back. Other states pass through.
    """
    del max_parallelism  # the key groups are those of the state
    geo = _geometry(spec)
    # only windows in flight need contents the general path can keep
    contents_of = _general_contents(spec) if any(any(keys.values()) for keys in _groups(states, SLICES).values()) else None
    lateness = _lateness(spec)
    table = _timer_table(spec)
    marks = fired_marks(states, spec.assigner.is_event_time())
    contents: dict[int, dict[Any, dict]] = {}
    timers: dict[int, set] = {}
    for kg, keys in _groups(states, SLICES).items():
        mark = marks.get(kg, MIN_WATERMARK)
        for key, slices in keys.items():
            if not slices:
                continue
            ends = sorted(slices)
            bad = [se for se in ends if not geo.aligned_slice(se)]
            if bad:
                raise WindowLayoutError(f"slice end {bad[0]} of key {key!r} is not one of {spec.assigner!r}'s slices (was the window's size, slide or offset changed?)")
            windows: dict[TimeWindow, Any] = {}
            for e in sorted({e for se in ends for e in range(geo.first_end(se - 1), geo.last_end(se - 1) + 1, geo.slide)}):
                cleanup = min(e - 1 + lateness, MAX_TIMESTAMP)
                if cleanup <= mark:
                    continue  # fired and cleaned up
                window = TimeWindow(e - geo.size, e)
                windows[window] = contents_of([(se, slices[se]) for se in ends if e - geo.size < se <= e])  # type: ignore[misc]
                kg_timers = timers.setdefault(kg, set())
                if e - 1 > mark:
                    kg_timers.add((key, window, e - 1))
                if cleanup != MAX_TIMESTAMP:
                    kg_timers.add((key, window, cleanup))
            if windows:
                contents.setdefault(kg, {})[key] = windows
    out = {name: entry for name, entry in states.items() if name not in (SLICES, FIRED) and name not in TIMER_TABLES}
    if contents or CONTENTS in states:
        merged = {kg: dict(keys) for kg, keys in _groups(states, CONTENTS).items()}
        for kg, keys in contents.items():
            merged.setdefault(kg, {}).update(keys)
        out[CONTENTS] = _value_state(merged)
    _replace_timers(states, out, _is_group_timer, {table: timers})
    return out


# -- general -> sliced ----------------------------------------------------------------------


def general_to_sliced(states: Mapping[str, Any], spec: WindowSpec, max_parallelism: int) -> dict[str, Any]:
    """The sliced path's states for the general path's ``states`` (module docstring).

    A tumbling window's contents (reduced value or accumulator; the elements an evictor kept,
    ``(value, timestamp)`` pairs, are folded with the reduce or ``add``) become its one slice; a window
    that has fired (its timer at the window's end is gone) and waits for late records keeps its
    slice, and :data:`FIRED` says up to when windows fired: the latest end - 1 of a fired window
    (the operator's watermark reached it), for every key group of ``max_parallelism``. Group
    timers are written as the store path registers them. A sliding window's value cannot be
    split into its slices: :class:`WindowLayoutError` unless no sliding window is in flight.
    Trigger state (the default trigger keeps none) is dropped; other states pass through.
    """
    path, why = execution_path(spec)
    if path != SLICED:
        raise WindowLayoutError(f"the window runs on the general path ({why})")
    geo = _geometry(spec)
    if _groups(states, MERGING) and any(_groups(states, MERGING).values()):
        raise WindowLayoutError("the state holds merging (session) windows, which are not cut into slices")
    lateness = _lateness(spec)
    table = _timer_table(spec)
    # the elements an evictor kept, when every window's contents are such (one test over the
    # whole state: a reduced value that merely looks like them in one window stays as it is)
    contents = [(w, v) for keys in _groups(states, CONTENTS).values() for windows in keys.values() for w, v in (windows or {}).items()]
    fold = _folding(spec) if contents and all(_stamped_elements(v, w) for w, v in contents) else None
    window_timers = {kg: {(t[0], t[1], t[2]) for t in ts if _is_window_timer(t)} for kg, ts in _groups(states, table).items()}
    slices: dict[int, dict[Any, dict[int, Any]]] = {}
    fired_ends: dict[int, int] = {}
    open_ends: dict[int, int] = {}
    for kg, keys in _groups(states, CONTENTS).items():
        for key, windows in keys.items():
            for window, value in (windows or {}).items():
                if not geo.window_of(window):
                    raise WindowLayoutError(f"window {window!r} of key {key!r} is not one of {spec.assigner!r}'s windows (was the window's size, slide or offset changed?)")
                if geo.slide < geo.size:
                    raise WindowLayoutError(
                        f"sliding window {window!r} of key {key!r} is in flight, and its reduced value cannot be split into the "
                        f"slices of {geo.g} ms the sliced path keeps"
                    )
                if (key, window, window.end - 1) in window_timers.get(kg, ()):
                    open_ends[kg] = min(open_ends.get(kg, window.end), window.end)
                else:
                    fired_ends[kg] = max(fired_ends.get(kg, window.start), window.end)
                if fold is not None:
                    value = fold(value)
                slices.setdefault(kg, {}).setdefault(key, {})[window.end] = value
    # The operator's watermark passed every fired window: one time for all key groups where it
    # fits, a key group's own where a window of it is still open before (state of subtasks that
    # stopped at different watermarks).
    common = max(fired_ends.values(), default=MIN_WATERMARK + 1) - 1
    marks: dict[int, int] = {}
    for kg in range(max_parallelism):
        own = fired_ends.get(kg, MIN_WATERMARK + 1) - 1
        first_open = open_ends.get(kg)
        if first_open is not None and own >= first_open - 1:
            raise WindowLayoutError(f"in key group {kg} a window ending at {own + 1} fired and one ending at {first_open} did not: "
                                    "the windows did not fire in time order (a trigger other than the default?)")
        marks[kg] = common if first_open is None or common < first_open - 1 else own
    timers: dict[int, set] = {}
    for kg, keys in slices.items():
        mark = marks[kg]
        for key_slices in keys.values():
            for se in key_slices:
                timers.setdefault(kg, set()).update((GROUP_TIMER_KEY, SLICE_TIMER, t) for t in _slice_timers(geo, se, mark, lateness, table == TIMER_EVENT_TABLE))
    dropped = (CONTENTS, MERGING)
    out = {name: entry for name, entry in states.items() if name not in dropped and not name.startswith(TRIGGER_PREFIX) and name not in TIMER_TABLES}
    if slices or SLICES in states:
        merged = {kg: dict(keys) for kg, keys in _groups(states, SLICES).items()}
        for kg, keys in slices.items():
            merged.setdefault(kg, {}).update(keys)
        out[SLICES] = _value_state(merged)
    if slices:
        out[FIRED] = _value_state({kg: {GROUP_TIMER_KEY: mark} for kg, mark in marks.items()})
    _replace_timers(states, out, _is_window_timer, {table: timers})
    return out


def _stamped_elements(value: Any, window: TimeWindow) -> bool:
    """Whether a window's contents are the elements an evictor keeps: ``(value, timestamp)``
    pairs, every timestamp in the window (or None: records in processing time have none)."""
    return isinstance(value, list) and bool(value) and all(
        type(e) is tuple and len(e) == 2 and (e[1] is None or type(e[1]) is int and window.start <= e[1] < window.end) for e in value
    )


def _folding(spec: WindowSpec) -> Callable[[list], Any]:
    """A slice's value from the elements an evictor kept (the evictor is gone: all of them)."""
    if spec.aggregation == REDUCE:
        reduce = user_method(spec.aggregate_function, "reduce")

        def reduced(elements: list) -> Any:
            acc = copy.copy(elements[0][0])
            for value, _ in elements[1:]:
                acc = reduce(acc, value)
            return acc

        return reduced
    agg = spec.aggregate_function

    def added(elements: list) -> Any:
        acc = agg.create_accumulator()
        for value, _ in elements:
            acc = agg.add(value, acc)
        return acc

    return added


def _slice_timers(geo: _Geometry, se: int, mark: int, lateness: int, event_time: bool) -> list[int]:
    """The group timers the store path registers for slice ``se`` when its key group fired up to
    ``mark``: the first window holding it that has not fired, and with lateness its cleanup."""
    first, last = geo.first_end(se - 1), geo.last_end(se - 1)
    if first - 1 <= mark:
        first += -(-(mark + 2 - first) // geo.slide) * geo.slide
    out = [first - 1] if first <= last else []
    if lateness and event_time:
        out.append(last - 1 + lateness)
    return out


# -- the restore hook -----------------------------------------------------------------------


def _holds(backend: Any, names: list[str], name: str) -> bool:
    return name in names and bool(backend.keys_of(name))


def _holds_timers(backend: Any, names: list[str], pick: Callable[[tuple], bool]) -> bool:
    return any(pick(t) for table in TIMER_TABLES if table in names for timers in backend.table(table).values() for t in timers)


def restore_layout(op: WindowOperator, path: str) -> None:
    """Before window operator ``op`` on ``path`` reads its restored state: convert what the other
    path wrote, in the backend, or refuse naming the operator and why (nothing is changed then)."""
    backend = op.backend
    if getattr(backend, "state_names", None) is None:
        return
    names = backend.state_names()
    # the other path's states are registered wherever it wrote any (the scan of timers below
    # runs only then)
    if not any(name in names for name in ((SLICES, FIRED) if path == GENERAL else (CONTENTS,))):
        return
    if path == GENERAL:
        if not (_holds(backend, names, SLICES) or _holds(backend, names, FIRED) or _holds_timers(backend, names, _is_group_timer)):
            return
        convert, other, read = sliced_to_general, SLICED, [SLICES, FIRED, CONTENTS]
    else:
        if not (_holds(backend, names, CONTENTS) or _holds_timers(backend, names, _is_window_timer)):
            return
        convert, other = general_to_sliced, GENERAL
        read = [CONTENTS, MERGING, SLICES, FIRED, *(n for n in names if n.startswith(TRIGGER_PREFIX))]
    read = [n for n in dict.fromkeys(read + list(TIMER_TABLES)) if n in names]
    states = {name: _value_state({kg: dict(m) for kg, m in backend.table(name).items() if m}) for name in read}
    try:
        converted = convert(states, op.spec, backend.max_parallelism)
    except WindowLayoutError as e:
        raise WindowLayoutError(
            f"window operator {op.name!r}: the restored state was written by the {other} window path, and this job runs "
            f"the operator on the {path} path: {e.message}",
            remedy="restore it with the job as it was when the snapshot was taken, let its windows fire and take a new "
            "savepoint after they are empty, or start without the snapshot",
        ) from None
    for name in read:
        table = backend.table(name)
        for kg in list(table):
            group = backend.thaw(name, kg) if kg in backend.frozen(name) else table[kg]
            for k in list(group):
                del group[k]
    entries = {name: {"kind": "value"} for name in converted}
    frames = [(name, kg, list(m.items())) for name in entries for kg, m in converted[name]["key_groups"].items()]
    backend.restore_frames(entries, frames)
    rebuild = getattr(op.timers, "rebuild", None)
    if rebuild is not None:
        rebuild()
