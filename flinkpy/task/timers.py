"""Timers of a keyed operator: event-time and processing-time, kept as keyed state.

A timer is (timestamp, key, namespace); registering the same one twice keeps one. Timers live in
the keyed state backend — tables ``_timers.event`` and ``_timers.processing``, per key group,
``{(key, namespace, timestamp): None}`` — so checkpoints carry them, restores bring them back,
and a rescale hands each key's timers to the subtask that owns the key. Two heaps index them by
time for firing; deleted timers are skipped lazily when they reach the top.

Event-time timers fire when the watermark passes them (``advance_watermark``), in timestamp
order; processing-time timers when the clock does (``fire_processing_timers``). Before each
callback the backend's current key is set to the timer's key.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable

from flinkpy.clock import now_ms
from flinkpy.state.heap import TIMER_EVENT_TABLE as EVENT
from flinkpy.state.heap import TIMER_PROCESSING_TABLE as PROCESSING
from flinkpy.task.watermarks import MIN_WATERMARK


class InternalTimerService:
    def __init__(self, backend: Any, on_event_time: Callable[[Any, Any, int], None], on_processing_time: Callable[[Any, Any, int], None], *, clock: Callable[[], int] = now_ms):
        self.backend = backend
        self._on_event = on_event_time
        self._on_processing = on_processing_time
        #: processing time in epoch milliseconds (a test harness gives a manual clock)
        self._clock = clock
        self.watermark = MIN_WATERMARK
        self._heaps: dict[str, list[tuple[int, int, Any, int, Any]]] = {EVENT: [], PROCESSING: []}
        self._seq = itertools.count()
        self._tables = {name: backend.table(name) for name in (EVENT, PROCESSING)}
        self._frozen = {name: backend.frozen(name) for name in (EVENT, PROCESSING)}
        self.rebuild()

    # -- state -------------------------------------------------------------------------------

    def _dict(self, name: str) -> dict:
        kg = self.backend.current_key_group
        table = self._tables[name]
        d = table.get(kg)
        if d is None:
            d = table[kg] = {}
        elif kg in self._frozen[name]:
            d = self.backend.thaw(name, kg)
        return d

    def rebuild(self) -> None:
        """Index the timers in the backend (after a restore)."""
        for name in (EVENT, PROCESSING):
            heap = []
            for kg, timers in self.backend.table(name).items():
                for key, namespace, ts in timers:
                    heap.append((ts, next(self._seq), key, kg, namespace))
            heapq.heapify(heap)
            self._heaps[name] = heap

    def _register(self, name: str, timestamp: int, namespace: Any) -> None:
        key = self.backend.current_key
        entry = (key, namespace, int(timestamp))
        d = self._dict(name)
        if entry not in d:
            d[entry] = None
            heapq.heappush(self._heaps[name], (int(timestamp), next(self._seq), key, self.backend.current_key_group, namespace))

    def _delete(self, name: str, timestamp: int, namespace: Any) -> None:
        self._dict(name).pop((self.backend.current_key, namespace, int(timestamp)), None)

    # -- the API operators use (for the backend's current key) -------------------------------

    def register_event_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        self._register(EVENT, timestamp, namespace)

    def delete_event_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        self._delete(EVENT, timestamp, namespace)

    def register_processing_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        self._register(PROCESSING, timestamp, namespace)

    def delete_processing_time_timer(self, timestamp: int, namespace: Any = None) -> None:
        self._delete(PROCESSING, timestamp, namespace)

    def current_watermark(self) -> int:
        return self.watermark

    def current_processing_time(self) -> int:
        return self._clock()

    # -- firing ------------------------------------------------------------------------------

    def _pop_due(self, name: str, limit: int) -> tuple[Any, Any, int] | None:
        heap = self._heaps[name]
        table = self.backend.table(name)
        while heap and heap[0][0] <= limit:
            ts, _, key, kg, namespace = heapq.heappop(heap)
            timers = table.get(kg)
            entry = (key, namespace, ts)
            if timers is None or entry not in timers:
                continue  # deleted
            if kg in self.backend.frozen(name):
                timers = self.backend.thaw(name, kg)
            del timers[entry]
            self.backend.set_current_key_and_group(key, kg)
            return key, namespace, ts
        return None

    def advance_watermark(self, watermark: int) -> None:
        self.watermark = max(self.watermark, watermark)
        while (timer := self._pop_due(EVENT, self.watermark)) is not None:
            self._on_event(*timer)

    def next_processing_time(self) -> int | None:
        heap = self._heaps[PROCESSING]
        table = self.backend.table(PROCESSING)
        while heap:
            ts, _, key, kg, namespace = heap[0]
            if (key, namespace, ts) in (table.get(kg) or ()):
                return ts
            heapq.heappop(heap)
        return None

    def fire_processing_timers(self) -> None:
        now = self.current_processing_time()
        while (timer := self._pop_due(PROCESSING, now)) is not None:
            self._on_processing(*timer)

    @property
    def has_event_timers(self) -> bool:
        return bool(self._heaps[EVENT])
