"""The window operator: keyed windows with triggers, evictors, allowed lateness and sessions.

The DataStream API describes a window with a :class:`~flinkpy.common.window_spec.WindowSpec`
(one StreamGraph node of kind ``"window"``); the task builds a :class:`WindowOperator` from it.
All state lives in the keyed state backend, per key, as backend value states whose values are
``{namespace: ...}`` dicts:

* ``_window_contents``: ``{state window: contents}``; contents are the reduced value, the
  aggregate accumulator, or the list of elements (``(value, timestamp)`` pairs with an evictor);
* ``_window_merging``: for merging assigners (sessions), ``{window: state window}``: the
  windows alive for the key and where their contents are kept (a merged session keeps the
  contents of one of the sessions it absorbed, so merging moves as little as possible);
* ``_window_trigger:<name>`` and ``_window_state:<name>``: trigger state and a
  ProcessWindowFunction's per-window state, ``{window: raw state value}``.

So checkpoints, restores and rescaling carry windows like any other keyed state. Timers are
the engine's: the operator registers them on ``self.timers`` with the window as namespace and
gets ``on_event_time`` / ``on_processing_time`` back with the backend's current key set.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable

from flinkpy.common.state import ValueStateDescriptor
from flinkpy.common.window import (
    MAX_TIMESTAMP,
    MergingWindowAssigner,
    TimestampedValue,
    TriggerResult,
)
from flinkpy.common.window_spec import AGGREGATE, PROCESS, REDUCE, WindowSpec
from flinkpy.errors import FlinkpyError, InvalidProgramError
from flinkpy.task.operators import user_method
from flinkpy.task.side_outputs import collect
from flinkpy.task.window_contexts import AssignerContext, TriggerContext, WindowContext
from flinkpy.task.window_state import NamespacedStates

_MISSING = object()


def _lifecycle(fn: Any, name: str) -> Callable | None:
    if fn is None or isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
        return None
    method = getattr(fn, name, None)
    return method if callable(method) else None


# ---------------------------------------------------------------------------------------------
# The operator
# ---------------------------------------------------------------------------------------------


class WindowOperator:
    """Runs a :class:`WindowSpec` on a keyed stream, batch at a time; see the module docstring.

    The engine constructs it, sets ``timers`` (the timer service of this operator) and
    ``side_outputs`` (``{tag_id: Output}``), then calls ``open``, ``process``,
    ``on_event_time`` / ``on_processing_time`` with the current key set, ``end_input`` and
    ``close``. Results carry the window's ``max_timestamp()`` as their timestamp.
    """

    CONTENTS = "_window_contents"
    MERGING = "_window_merging"

    def __init__(self, name: str, spec: WindowSpec, output: Any, key_selector: Callable, backend: Any, batch_mode: bool):
        self.name = name
        self.spec = spec
        #: what the engine inspects for CheckpointedFunction and the like: the spec, not a user function
        self.fn = spec
        self.output = output
        self.key = key_selector
        self.backend = backend
        self.batch_mode = batch_mode
        self.timers: Any = None
        self.side_outputs: dict[str, Any] = {}
        self.assigner = spec.assigner
        self.trigger = spec.trigger
        self.evictor = spec.evictor
        self.lateness = max(0, int(spec.allowed_lateness_ms or 0))
        self.event_time = spec.assigner.is_event_time()
        self.merging = isinstance(spec.assigner, MergingWindowAssigner)
        self._runtime_context: Any = None
        self._out_values: list = []
        self._out_stamps: list = []
        self._late_values: list = []
        self._late_stamps: list = []

    # -- lifecycle ----------------------------------------------------------------------
    def open(self, runtime_context: Any) -> None:
        spec = self.spec
        if self.merging and not self.trigger.can_merge():
            raise InvalidProgramError(
                f"window operator {self.name!r}: trigger {self.trigger!r} cannot merge, but "
                f"{self.assigner!r} merges windows",
                remedy="use a trigger whose can_merge() is True (EventTimeTrigger, CountTrigger, ...)",
            )
        self._runtime_context = runtime_context
        for fn in (spec.aggregate_function, spec.window_function):
            opener = _lifecycle(fn, "open")
            if opener is not None:
                opener(runtime_context)
        self._merging_cell = self.backend.get_partitioned_state(ValueStateDescriptor(self.MERGING)) if self.merging else None
        self.trigger_states = NamespacedStates(self.backend, "_window_trigger:")
        self.window_states = NamespacedStates(self.backend, "_window_state:")
        self._trigger_ctx = TriggerContext(self)
        self._window_ctx = WindowContext(self)
        self._assigner_ctx = AssignerContext(self)
        # Contents: keep elements when there is no pre-aggregation or an evictor must see them.
        self._keep_elements = spec.aggregation is None or self.evictor is not None
        if spec.aggregation == REDUCE:
            self._reduce = user_method(spec.aggregate_function, "reduce")
        elif spec.aggregation == AGGREGATE:
            agg = spec.aggregate_function
            self._create_acc, self._add, self._result, self._merge_acc = (
                agg.create_accumulator, agg.add, agg.get_result, agg.merge
            )
        kind = spec.window_function_kind
        if kind is not None:
            self._window_fn = user_method(spec.window_function, kind)
        self._clear_fn = _lifecycle(spec.window_function, "clear") if kind == PROCESS else None
        self._open_contents()

    def _open_contents(self) -> None:
        """Window contents: one ``{state window: contents}`` value state per key."""
        from flinkpy.common.window_spec import GENERAL
        from flinkpy.task.window_layouts import restore_layout

        restore_layout(self, GENERAL)
        self._contents = self.backend.get_partitioned_state(ValueStateDescriptor(self.CONTENTS))

    def process_watermark_status(self, idle: bool) -> None:
        self.output.process_watermark_status(idle)

    def end_input(self) -> None:
        """Nothing to do: the engine's final watermark has fired the event-time windows."""

    def close(self) -> None:
        for fn in (self.spec.aggregate_function, self.spec.window_function):
            closer = _lifecycle(fn, "close")
            if closer is not None:
                closer()

    def metric_group(self) -> Any:
        get = getattr(self._runtime_context, "get_metrics_group", None)
        return get() if callable(get) else None

    # -- records ------------------------------------------------------------------------
    def process(self, values: list, timestamps: list[int] | None) -> None:
        if self.event_time and timestamps is None:
            raise InvalidProgramError(
                f"window operator {self.name!r} uses event-time windows ({self.assigner!r}), but its "
                "input stream has no timestamps",
                remedy="assign event timestamps with a WatermarkStrategy: "
                "ds.assign_timestamps_and_watermarks(strategy) or env.from_source(source, strategy, name)",
            )
        set_key = self.backend.set_current_key
        assign = self.assigner.assign_windows
        trigger_ctx = self._trigger_ctx
        on_element = self.trigger.on_element
        for i, value in enumerate(values):
            ts = timestamps[i] if timestamps is not None else None
            if self.event_time and ts is None:
                raise InvalidProgramError(
                    f"window operator {self.name!r}: record {value!r} has no timestamp",
                    remedy="assign timestamps to every record with a WatermarkStrategy",
                )
            key = self.key(value)
            set_key(key)
            self._key = key
            windows = assign(value, ts, self._assigner_ctx)
            skipped = True
            mset = self._merging_set() if self.merging else None
            for window in windows:
                if mset is not None:
                    actual = self._add_merging_window(mset, window)
                    if self._window_late(actual):
                        del mset[actual]  # it merged with nothing: no state to clear
                        continue
                    state_window = mset[actual]
                else:
                    if self._window_late(window):
                        continue
                    actual = state_window = window
                skipped = False
                new_window = self._add_element(state_window, value, ts)
                trigger_ctx.window = actual
                result = on_element(value, ts, actual, trigger_ctx)
                self._act(result, actual, state_window)
                if new_window or mset is not None:
                    # once per window: its cleanup timer does not move (merged windows do)
                    self._register_cleanup_timer(actual)
            if mset is not None:
                self._store_merging_set(mset)
            if skipped and self._element_late(ts):
                if self.spec.late_tag_id is not None:
                    self._late_values.append(value)
                    self._late_stamps.append(ts)
        self._flush()

    # -- timers -------------------------------------------------------------------------
    def on_event_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        self._on_timer(key, namespace, timestamp, event_time=True)

    def on_processing_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        self._on_timer(key, namespace, timestamp, event_time=False)

    def _on_timer(self, key: Any, window: Any, timestamp: int, event_time: bool) -> None:
        self._key = key
        mset = None
        if self.merging:
            mset = self._merging_set()
            state_window = mset.get(window)
            if state_window is None:
                return  # the window was merged away or cleaned up; its trigger left a timer behind
        else:
            state_window = window
        ctx = self._trigger_ctx
        ctx.window = window
        if event_time:
            result = self.trigger.on_event_time(timestamp, window, ctx)
        else:
            result = self.trigger.on_processing_time(timestamp, window, ctx)
        self._act(result, window, state_window)
        if event_time == self.event_time and timestamp == self._cleanup_time(window):
            self._clear_all(window, state_window, mset)
        if mset is not None:
            self._store_merging_set(mset)
        self._flush()

    # -- firing -------------------------------------------------------------------------
    def _act(self, result: TriggerResult, window: Any, state_window: Any) -> None:
        if result is TriggerResult.CONTINUE:
            return
        if result.is_fire():
            d = self._contents.value()
            if d is not None and state_window in d:
                self._fire(window, state_window, d[state_window])
        if result.is_purge():
            self._clear_contents(state_window)

    def _fire(self, window: Any, state_window: Any, contents: Any) -> None:
        spec = self.spec
        elements: list[TimestampedValue] | None = None
        if self.evictor is not None:
            elements = [TimestampedValue(v, t) for v, t in contents]
            self._window_ctx._window = window
            self.evictor.evict_before(elements, len(elements), window, self._window_ctx)
            inputs = self._pre_aggregate([e.value for e in elements])
        elif spec.aggregation == REDUCE:
            inputs = [contents]
        elif spec.aggregation == AGGREGATE:
            inputs = [self._result(contents)]
        else:
            inputs = list(contents)
        if inputs is not None:
            self._emit(window, inputs)
        if elements is not None:
            self._window_ctx._window = window
            self.evictor.evict_after(elements, len(elements), window, self._window_ctx)  # type: ignore[union-attr]
            if elements:
                d = self._contents.value()
                d[state_window] = [(e.value, e.timestamp) for e in elements]
                self._contents.update(d)
            else:
                self._clear_contents(state_window)

    def _pre_aggregate(self, values: list) -> list | None:
        """Reduce or aggregate the elements left by an evictor; None: nothing to emit."""
        aggregation = self.spec.aggregation
        if aggregation == REDUCE:
            return [functools.reduce(self._reduce, values)] if values else None
        if aggregation == AGGREGATE:
            acc = self._create_acc()
            for v in values:
                acc = self._add(v, acc)
            return [self._result(acc)]
        return values

    def _emit(self, window: Any, inputs: list) -> None:
        kind = self.spec.window_function_kind
        if kind is None:
            out = inputs
        elif kind == PROCESS:
            ctx = self._window_ctx
            ctx._window = window
            out = self._window_fn(self._key, ctx, inputs) if self.spec.keyed else self._window_fn(ctx, inputs)
        else:
            out = self._window_fn(self._key, window, inputs) if self.spec.keyed else self._window_fn(window, inputs)
        ts = window.max_timestamp()
        main: list = []  # apart until collected: a side output flushes what is pending
        collect(out, main, lambda tag, value: self.side_output(tag.tag_id, value, ts))
        self._out_values.extend(main)
        self._out_stamps.extend([ts] * len(main))

    def side_output(self, tag_id: str, value: Any, timestamp: int | None) -> None:
        target = self.side_outputs.get(tag_id)
        if target is None:
            raise InvalidProgramError(
                f"window operator {self.name!r} wrote to side output {tag_id!r}, which nothing reads",
                remedy="read it with get_side_output(OutputTag(...)) on the window's result stream",
            )
        self._flush()
        target.process([value], None if timestamp is None else [timestamp])

    def _flush(self) -> None:
        if self._out_values:
            values, stamps = self._out_values, self._out_stamps
            self._out_values, self._out_stamps = [], []
            self.output.process(values, stamps)
        if self._late_values:
            values, stamps = self._late_values, self._late_stamps
            self._late_values, self._late_stamps = [], []
            target = self.side_outputs.get(self.spec.late_tag_id)  # type: ignore[arg-type]
            if target is not None:
                target.process(values, stamps)

    # -- contents -----------------------------------------------------------------------
    def _add_element(self, state_window: Any, value: Any, ts: int | None) -> bool:
        """Add to the window's contents; True when the window had none (a new window)."""
        d = self._contents.value()
        if d is None:
            d = {}
        new = state_window not in d
        if self._keep_elements:
            entry = (value, ts) if self.evictor is not None else value
            stored = d.get(state_window)
            if stored is None:
                d[state_window] = [entry]
            else:
                stored.append(entry)
        elif self.spec.aggregation == REDUCE:
            old = d.get(state_window, _MISSING)
            d[state_window] = value if old is _MISSING else self._reduce(old, value)
        else:
            acc = d.get(state_window, _MISSING)
            d[state_window] = self._add(value, self._create_acc() if acc is _MISSING else acc)
        self._contents.update(d)  # a private copy on the RocksDB backend: write it back
        return new

    def _clear_contents(self, state_window: Any) -> None:
        d = self._contents.value()
        if d is not None and state_window in d:
            del d[state_window]
            self._contents.update(d or None)

    def _merge_contents(self, target: Any, sources: list) -> None:
        d = self._contents.value()
        if not d:
            return
        acc = d.get(target, _MISSING)
        for sw in sources:
            if sw not in d:
                continue
            raw = d.pop(sw)
            if acc is _MISSING:
                acc = raw
            elif self._keep_elements:
                acc.extend(raw)  # in place: a session's contents are not copied on each merge
            elif self.spec.aggregation == REDUCE:
                acc = self._reduce(acc, raw)
            else:
                acc = self._merge_acc(acc, raw)
        if acc is not _MISSING:
            d[target] = acc
        self._contents.update(d)

    def _clear_all(self, window: Any, state_window: Any, mset: dict | None) -> None:
        """The window's end plus lateness has passed: drop everything it kept."""
        self._clear_contents(state_window)
        ctx = self._trigger_ctx
        ctx.window = window
        self.trigger.clear(window, ctx)
        if self._clear_fn is not None:
            self._window_ctx._window = window
            self._clear_fn(self._window_ctx)
        if mset is not None:
            mset.pop(window, None)

    # -- lateness and cleanup -----------------------------------------------------------
    def _cleanup_time(self, window: Any) -> int:
        max_ts = window.max_timestamp()
        if not self.event_time:
            return max_ts
        return min(max_ts + self.lateness, MAX_TIMESTAMP)

    def _window_late(self, window: Any) -> bool:
        return self.event_time and self._cleanup_time(window) <= self.timers.current_watermark()

    def _element_late(self, ts: int | None) -> bool:
        return self.event_time and ts is not None and ts + self.lateness <= self.timers.current_watermark()

    def _register_cleanup_timer(self, window: Any) -> None:
        t = self._cleanup_time(window)
        if t == MAX_TIMESTAMP:
            return  # a window that never ends is cleaned up by its trigger (or never)
        if self.event_time:
            self.timers.register_event_time_timer(t, window)
        else:
            self.timers.register_processing_time_timer(t, window)

    def _delete_cleanup_timer(self, window: Any) -> None:
        t = self._cleanup_time(window)
        if t == MAX_TIMESTAMP:
            return
        if self.event_time:
            self.timers.delete_event_time_timer(t, window)
        else:
            self.timers.delete_processing_time_timer(t, window)

    # -- merging windows (sessions) -----------------------------------------------------
    def _merging_set(self) -> dict:
        return self._merging_cell.value() or {}  # type: ignore[union-attr]

    def _store_merging_set(self, mset: dict) -> None:
        self._merging_cell.update(mset or None)  # type: ignore[union-attr]

    def _add_merging_window(self, mset: dict, new: Any) -> Any:
        """Add ``new`` to the key's windows, merging as the assigner says; returns the window
        ``new`` ended up in. Merging keeps the contents of one absorbed window's state window
        and folds the others' into it."""
        if new in mset:
            return new
        merges: list[tuple[set, Any]] = []
        self.assigner.merge_windows([*mset, new], lambda merged, result: merges.append((set(merged), result)))  # type: ignore[attr-defined]
        result_window = new
        merged_new = False
        for merged, result in merges:
            if new in merged:
                merged.discard(new)
                merged_new = True
                result_window = result
            existing = [w for w in mset if w in merged]
            state_windows = [mset.pop(w) for w in existing]
            target = state_windows[0]
            mset[result] = target
            # A new window that falls inside one existing window changes nothing.
            if not (len(existing) == 1 and existing[0] == result):
                self._on_merge(result, existing, target, state_windows[1:])
        if not merged_new:
            mset[new] = new
        return result_window

    def _on_merge(self, result: Any, merged: list, target_state_window: Any, merged_state_windows: list) -> None:
        if self._window_late(result):
            raise FlinkpyError(
                f"window operator {self.name!r}: windows {merged} merged into {result}, which is "
                "already past its cleanup time",
                remedy="this is a bug in the window assigner or trigger; report it",
            )
        ctx = self._trigger_ctx
        ctx.window = result
        ctx.merged_windows = merged
        self.trigger.on_merge(result, ctx)
        ctx.merged_windows = ()
        for w in merged:
            ctx.window = w
            self.trigger.clear(w, ctx)
            self._delete_cleanup_timer(w)
        self._merge_contents(target_state_window, merged_state_windows)
