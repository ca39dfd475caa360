"""Watermarks: generating them at sources, combining them at inputs (pure, no clock).

A watermark W says "no record with a timestamp <= W is still to come". Sources (or an
``assign_timestamps_and_watermarks`` operator) generate them from the timestamps they have seen:
monotonous timestamps give ``max_ts - 1``, bounded out-of-orderness ``max_ts - bound - 1`` (as
Flink). A task with several input channels follows the *minimum* of its channels' watermarks,
never going backwards; a channel whose source is idle (no data for ``with_idleness``) is left
out of the minimum, so one quiet partition does not stall event time for all.

>>> v = StatusWatermarkValve(2)
>>> v.on_watermark(0, 10), v.on_watermark(1, 5), v.on_watermark(1, 20)
(None, 5, 10)
>>> v.on_status(0, idle=True)      # channel 0 goes quiet: channel 1 alone decides
20
"""

from __future__ import annotations

from typing import Any

MIN_WATERMARK = -(2**63)
MAX_WATERMARK = 2**63 - 1


class StatusWatermarkValve:
    """Combines the watermarks and idleness of a task's input channels."""

    def __init__(self, channels: int):
        self.watermarks = [MIN_WATERMARK] * channels
        self.idle = [False] * channels
        self.finished = [False] * channels
        #: channels that ended without ending event time (stopped with a savepoint, no drain):
        #: their last watermark still holds the minimum back, or the task's timers would fire for
        #: records the savepoint hands to the resumed job
        self.held = [False] * channels
        self.current = MIN_WATERMARK
        self.all_idle = False

    def _recompute(self) -> int | None:
        active = [w for w, idle, fin, held in zip(self.watermarks, self.idle, self.finished, self.held) if held or (not idle and not fin)]
        if not active:
            # every input idle or finished: finished ones carry MAX already (end of input)
            done = [w for w, fin in zip(self.watermarks, self.finished) if fin]
            if done and all(self.finished):
                candidate = min(done)
            else:
                return None
        else:
            candidate = min(active)
        if candidate > self.current:
            self.current = candidate
            return candidate
        return None

    def on_watermark(self, channel: int, watermark: int) -> int | None:
        """A channel's watermark arrived; returns the task's new watermark if it advanced."""
        if watermark > self.watermarks[channel]:
            self.watermarks[channel] = watermark
        self.idle[channel] = False
        self.all_idle = False
        return self._recompute()

    def on_status(self, channel: int, *, idle: bool) -> int | None:
        self.idle[channel] = idle
        self.all_idle = all(i or f for i, f in zip(self.idle, self.finished))
        return self._recompute()

    def on_end_of_partition(self, channel: int, *, advance: bool = True) -> int | None:
        """A channel ended: its event time ended too — unless the job was stopped without
        draining, when it stays where it was (open windows go into the savepoint)."""
        self.finished[channel] = True
        if advance:
            self.watermarks[channel] = MAX_WATERMARK
        else:
            self.held[channel] = True
        return self._recompute()


class WatermarkGenerator:
    """Tracks the highest timestamp seen and proposes watermarks (periodic emission)."""

    def __init__(self, strategy: Any):
        self.kind = getattr(strategy, "kind", "no-watermarks")
        self.bound = int(getattr(strategy, "max_out_of_orderness_ms", 0) or 0)
        self.idle_timeout_ms = getattr(strategy, "idle_timeout_ms", None)
        self.max_ts = MIN_WATERMARK + self.bound + 1
        self.emitted = MIN_WATERMARK

    @property
    def emits(self) -> bool:
        return self.kind != "no-watermarks"

    def on_timestamps(self, timestamps: list[int]) -> None:
        if timestamps:
            m = max(timestamps)
            if m > self.max_ts:
                self.max_ts = m

    def current(self) -> int | None:
        """The watermark to emit now, if it advanced."""
        if not self.emits:
            return None
        wm = self.max_ts - self.bound - 1
        if wm > self.emitted:
            self.emitted = wm
            return wm
        return None


class SplitWatermarks:
    """Per-split watermarks of one source reader (Flink's per-split watermark outputs): each split
    (a Kafka partition) has its own generator; the reader's watermark is the minimum over the
    splits that are not idle — a split with no records for the strategy's idle timeout is left
    out, and a reader whose splits are all idle (or that has none) is idle. Time is passed in.

    >>> from flinkpy.common import Duration, WatermarkStrategy
    >>> w = SplitWatermarks(WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_millis(10)))
    >>> w.sync(["a", "b"], now=0.0)
    >>> w.on_timestamps("a", [100], now=0.0); w.on_timestamps("b", [50], now=0.0)
    >>> w.current(now=0.001)
    (49, False)
    >>> w.on_timestamps("a", [200], now=0.02); w.current(now=0.02)   # b idle for 20 ms: a alone
    (199, False)
    """

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy
        idle_ms = getattr(strategy, "idle_timeout_ms", None)
        self.idle_s = idle_ms / 1000.0 if idle_ms else None
        self.generators: dict[str, WatermarkGenerator] = {}
        self.last_active: dict[str, float] = {}

    def sync(self, split_ids: list[str], now: float) -> None:
        """The reader's splits now: new ones start (holding the watermark back until they have
        records or go idle), finished ones no longer count."""
        for split in split_ids:
            if split not in self.generators:
                self.generators[split] = WatermarkGenerator(self.strategy)
                self.last_active[split] = now
        for split in set(self.generators) - set(split_ids):
            del self.generators[split]
            del self.last_active[split]

    def on_timestamps(self, split: str, timestamps: list[int], now: float) -> None:
        gen = self.generators.get(split)
        if gen is None:
            gen = self.generators[split] = WatermarkGenerator(self.strategy)
        gen.on_timestamps(timestamps)
        self.last_active[split] = now

    def current(self, now: float) -> tuple[int | None, bool]:
        """(the reader's watermark, or None when there is none yet; whether the reader is idle)."""
        active = [
            split for split in self.generators
            if self.idle_s is None or now - self.last_active[split] < self.idle_s
        ]
        if not active:
            return None, True
        wm = min(self.generators[s].max_ts - self.generators[s].bound - 1 for s in active)
        return (wm if wm > MIN_WATERMARK else None), False


class WatermarkOutput:
    """What a user's WatermarkGenerator emits into (Flink's WatermarkOutput)."""

    def __init__(self) -> None:
        self.watermark: int | None = None
        self.idle: bool | None = None

    def emit_watermark(self, watermark: Any) -> None:
        value = int(getattr(watermark, "timestamp", watermark))
        if self.watermark is None or value > self.watermark:
            self.watermark = value

    def mark_idle(self) -> None:
        self.idle = True

    def mark_active(self) -> None:
        self.idle = False


class Stamper:
    """Timestamps and watermarks at the head of a stream (a source, or assign_timestamps_and_watermarks).

    With a built-in strategy, watermarks are periodic (``emit_periodic``). With a user
    generator (``WatermarkStrategy.for_generator``: objects with ``on_event(event, timestamp,
    output)`` and ``on_periodic_emit(output)``, as Flink's WatermarkGenerator), a watermark the
    generator emits *on an event* cuts the batch right after that event — punctuated watermarks
    are placed exactly, so results do not depend on batching or timing.
    """

    def __init__(self, strategy: Any, output: Any):
        self.strategy = strategy
        self.output = output
        self.assigns = getattr(strategy, "timestamp_assigner", None) is not None
        supplier = getattr(strategy, "generator_supplier", None)
        self.user = supplier() if getattr(strategy, "kind", None) == "generator" and supplier else None
        self.builtin = WatermarkGenerator(strategy) if self.user is None else None
        self.emitted = MIN_WATERMARK

    def process(self, values: list, timestamps: list[int] | None) -> None:
        if self.assigns:
            extract = self.strategy.extract_timestamp
            previous = timestamps if timestamps is not None else [MIN_WATERMARK] * len(values)
            timestamps = [int(extract(v, t)) for v, t in zip(values, previous)]
        if self.user is None:
            if self.builtin is not None and timestamps is not None:
                self.builtin.on_timestamps(timestamps)
            self.output.process(values, timestamps)
            return
        out = WatermarkOutput()
        ts = timestamps if timestamps is not None else [MIN_WATERMARK] * len(values)
        start = 0
        for i, (v, t) in enumerate(zip(values, ts)):
            self.user.on_event(v, t, out)
            if out.watermark is not None:
                self.output.process(values[start : i + 1], None if timestamps is None else ts[start : i + 1])
                start = i + 1
                self._emit(out)
        if start < len(values):
            self.output.process(values[start:], None if timestamps is None else ts[start:])

    def _emit(self, out: WatermarkOutput) -> None:
        if out.watermark is not None and out.watermark > self.emitted:
            self.emitted = out.watermark
            self.output.process_watermark(out.watermark)
        out.watermark = None
        if out.idle is not None:
            self.output.process_watermark_status(out.idle)
            out.idle = None

    def emit_periodic(self) -> None:
        if self.user is not None:
            out = WatermarkOutput()
            periodic = getattr(self.user, "on_periodic_emit", None)
            if periodic is not None:
                periodic(out)
            self._emit(out)
            return
        if self.builtin is not None:
            wm = self.builtin.current()
            if wm is not None and wm > self.emitted:
                self.emitted = wm
                self.output.process_watermark(wm)
