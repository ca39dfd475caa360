"""The broadcast state pattern on Spark: a broadcast operator's records, of both inputs, in one Spark group.

On the engine every parallel instance of a ``BroadcastProcessFunction`` or
``KeyedBroadcastProcessFunction`` applies each broadcast record to its own copy of the broadcast
state, its data records read that copy, and ``apply_to_keyed_state`` visits every key of the
instance. Spark keeps state per grouping key only and shares nothing between groups, so the
translation (:mod:`flinkpy.spark.plan`) sends every row into the operator to one group (the
grouping key :func:`~flinkpy.spark.keyed.one_group`): the operator runs at parallelism 1, which
on the engine gives the same results as any parallelism wherever those are deterministic (every
instance holds the same broadcast state; a key's records and timers are the key's alone).

Keying the group by the data side's key instead, with broadcast rows copied to every group,
would not do: a key that first appears after a broadcast record never received it, and a broadcast
record reaches only the keys that have rows in its micro-batch, not every key that has state.

Inside the group :class:`BroadcastProcessor` runs the engine's own operators over the engine's
own state classes, as one subtask does: ``BroadcastProcessOperator`` or
``KeyedBroadcastProcessOperator``, an :class:`~flinkpy.state.operator.OperatorStateBackend` for
the broadcast states, a :class:`~flinkpy.state.heap.HeapKeyedStateBackend` over every key group
for keyed state and an :class:`~flinkpy.task.timers.InternalTimerService` for timers (which live
in that backend, as on the engine). Their contents live in Spark's state between calls:

- ``_flinkpy_keyed``, a Spark MapState ``(state, key group) -> {key: value}``: the heap backend's
  tables (timers among them), one entry per key group that has entries;
- ``_flinkpy_broadcast``, a Spark MapState ``(broadcast state, key) -> value``.

State moved from the engine (:mod:`flinkpy.spark.broadcast_move`) arrives as the query's initial
state, which :meth:`BroadcastProcessor.handleInitialState` writes into both map states; a Spark
savepoint reads them back for the engine.

A call (the group's rows of a micro-batch, or its Spark timer) loads both, runs the rows or timers
and writes back what changed: a key group whose dict was touched (the heap backend copies a
loaded key group before it is written: copy-on-write, as for its snapshots) and pickles other
than it was loaded; the broadcast entries that differ, after broadcast records ran. Every call
reads the operator's whole state, which is why it suits state that fits one Python worker, as
broadcast state is meant to.

Event time is the engine's: the lower of the two inputs' watermarks as far as the rows tell,
from Spark's watermark at the start of the micro-batch (as for connected keyed streams,
:mod:`flinkpy.spark.keyed`); the group registers one Spark timer, at its earliest event-time timer
(in ProcessingTime mode, at its earliest processing-time timer, and at the next micro-batch while
event-time timers wait), so that it is woken without rows.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterator

from flinkpy.errors import InvalidProgramError
from flinkpy.spark import broadcast_move
from flinkpy.spark.chain import _Collector, _runtime_context
from flinkpy.spark.keyed import _RoutedOut, _SidePort
from flinkpy.spark.processors import FlinkpyKeyedProcessor
from flinkpy.spark.records import END_W, MIN_W, RECORD
from flinkpy.spark.state import MAX_WATERMARK, wall_clock_ms

#: key groups of the keyed state in the one group (the engine's default max parallelism)
MAX_PARALLELISM = broadcast_move.MAX_PARALLELISM
_B = "v binary"


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


class BroadcastProcessor(FlinkpyKeyedProcessor):
    """The one Spark group of a broadcast operator (see the module docstring); its outputs and
    timer outputs leave as a keyed operator's do."""

    KEYED = broadcast_move.KEYED_CELLS
    BROADCAST = broadcast_move.BROADCAST_CELLS

    def setup(self, handle: Any) -> None:
        from flinkpy.state.operator import OperatorStateBackend
        from flinkpy.task.row_output import with_row_type

        spec = self.spec
        self.keyed_cells = handle.getMapState(self.KEYED, "name string, kg int", _B)
        self.broadcast_cells = handle.getMapState(self.BROADCAST, "name string, k binary", _B)
        self.out = _RoutedOut(spec.routes) if spec.side_routes or len(spec.routes) != 1 else _Collector()
        out = with_row_type(spec.row_type, self.out, spec.name)
        descriptors = spec.params["broadcast_state_descriptors"]
        context = _runtime_context(spec.name, spec.job_parameters)
        operator_state = OperatorStateBackend()
        if spec.kind == "keyed_broadcast_process":
            from flinkpy.state.heap import HeapKeyedStateBackend
            from flinkpy.task.broadcast import KeyedBroadcastProcessOperator
            from flinkpy.task.timers import InternalTimerService

            self.backend: Any = HeapKeyedStateBackend(MAX_PARALLELISM, range(MAX_PARALLELISM))
            op: Any = KeyedBroadcastProcessOperator(spec.name, spec.fn, out, spec.key_selector, self.backend, spec.batch_mode,
                                                    descriptors=descriptors)
            op.timers = InternalTimerService(self.backend, self._stamped(op.on_event_time), op.on_processing_time, clock=self._now)
            context._backend = self.backend
        else:
            from flinkpy.task.broadcast import BroadcastProcessOperator

            self.backend = None
            op = BroadcastProcessOperator(spec.name, spec.fn, out, descriptors)
        op.broadcast_backend = operator_state
        if spec.side_routes:
            op.side_outputs = {tag: _SidePort(self.out, routes) for tag, routes in spec.side_routes.items()}
        op.open(context)
        self.op = op
        self.timers = op.timers if self.backend is not None else None
        self.broadcast = {d.get_name(): operator_state.get_broadcast_state(d) for d in descriptors}
        #: what the call loaded: (state, key group) -> (dict, its pickle); broadcast: name -> {key: (key pickle, value pickle)}
        self._keyed_loaded: dict[tuple[str, int], tuple[dict, bytes]] = {}
        self._broadcast_loaded: dict[str, dict[Any, tuple[bytes, bytes]]] = {}
        #: watermark of the operator (the non-keyed one has no timer service to keep it)
        self._watermark = MIN_W

    def _now(self) -> int:
        """Processing time: the clock, but never before the micro-batch's start (see SparkTimers)."""
        return max(wall_clock_ms(), self.batch_time)

    # -- Spark state <-> the engine's state objects ----------------------------------------------
    def _load(self) -> None:
        for name, state in self.broadcast.items():
            state.load({})
        self._broadcast_loaded = {name: {} for name in self.broadcast}
        if self.broadcast_cells.exists():
            for (name, kb), (vb,) in self.broadcast_cells.iterator():
                if name in self.broadcast:
                    key = pickle.loads(kb)
                    self.broadcast[name].put(key, pickle.loads(vb))
                    self._broadcast_loaded[name][key] = (kb, vb)
        self._keyed_loaded = {}
        backend = self.backend
        if backend is None:
            return
        backend.clear_current_key()
        for name in backend.state_names():
            backend.table(name).clear()
            backend.frozen(name).clear()
        if self.keyed_cells.exists():
            for (name, kg), (blob,) in self.keyed_cells.iterator():
                entries = pickle.loads(blob)
                backend.table(name)[kg] = entries
                backend.frozen(name).add(kg)  # a write copies it first: what changed is what is not this dict
                self._keyed_loaded[(name, kg)] = (entries, blob)
        self.timers.rebuild()
        self.timers.watermark = MIN_W

    def _save(self, broadcast_ran: bool) -> None:
        if broadcast_ran:  # only broadcast records write broadcast state
            for name, state in self.broadcast.items():
                loaded = self._broadcast_loaded[name]
                now = state.copy_items()
                for key, value in now.items():
                    vb = _dumps(value)
                    old = loaded.get(key)
                    if old is None or old[1] != vb:
                        self.broadcast_cells.updateValue((name, old[0] if old else _dumps(key)), (vb,))
                for key, (kb, _) in loaded.items():
                    if key not in now:
                        self.broadcast_cells.removeKey((name, kb))
        backend = self.backend
        if backend is None:
            return
        kept: set[tuple[str, int]] = set()
        for name in backend.state_names():
            for kg, entries in backend.table(name).items():
                old = self._keyed_loaded.get((name, kg))
                if old is not None and old[0] is entries:
                    kept.add((name, kg))
                    continue
                if not entries:
                    continue
                kept.add((name, kg))
                blob = _dumps(entries)
                if old is None or old[1] != blob:
                    self.keyed_cells.updateValue((name, kg), (blob,))
        for name, kg in self._keyed_loaded.keys() - kept:
            self.keyed_cells.removeKey((name, kg))

    def _wake(self) -> None:
        """Align the group's Spark timers with its earliest timer (see the module docstring)."""
        if self.backend is None:
            return
        from flinkpy.state.heap import TIMER_EVENT_TABLE

        event = min((ts for timers in self.backend.table(TIMER_EVENT_TABLE).values() for _, _, ts in timers), default=None)
        processing = self.timers.next_processing_time()
        wanted: set[int] = set()
        if self.spec.processing_time:
            if processing is not None:
                wanted.add(processing)
            poll = max(self.batch_time, 0) + 1  # the next micro-batch: Spark's watermark may pass a timer there
            if event is not None and not any(ts <= poll for ts in wanted):
                wanted.add(poll)
        else:
            if processing is not None:
                raise InvalidProgramError(
                    f"operator {self.spec.name!r} registered a processing-time timer, but the Spark runner found no call to "
                    "register_processing_time_timer in its code and runs it in Spark's EventTime mode, where nothing would wake it",
                    remedy="call ctx.timer_service().register_processing_time_timer(...) in the function's own class or module, "
                           "so that the translation sees it, or run this job on flinkpy's engine",
                )
            if event is not None:
                wanted.add(min(event, END_W))
        registered = set(self.handle.listTimers())
        for ts in registered - wanted:
            self.handle.deleteTimer(ts)
        for ts in wanted - registered:
            self.handle.registerTimer(ts)

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:  # noqa: N802, N803 - Spark's names
        """Write the operator's state moved from the engine (:mod:`flinkpy.spark.broadcast_move`)
        into its two map states, as it would have written them itself, and wake the group at its
        earliest timer: Spark calls this in the query's first batch only, maybe several times
        (the rows in chunks, each row whole)."""
        self.batch_time = timerValues.getCurrentProcessingTimeInMs()
        for name, kind, part, value in zip(initialState["name"], initialState["kind"], initialState["part"], initialState["value"]):
            if kind == broadcast_move.KEYED_TABLE:
                self.keyed_cells.updateValue((name, int(pickle.loads(part))), (value,))
            elif kind == broadcast_move.BROADCAST_ENTRY:
                self.broadcast_cells.updateValue((name, part), (value,))
        self._load()
        self._wake()

    # -- event time ------------------------------------------------------------------------------
    def _advance(self, watermark: int) -> None:
        """The operator's watermark is now ``watermark``: fire the timers it passed."""
        if watermark >= END_W:
            watermark = MAX_WATERMARK
        if self.timers is not None:
            self.timers.advance_watermark(watermark)
            self.out.watermark = self.timers.watermark
        else:
            self._watermark = max(self._watermark, watermark)
            self.op.watermark = self.out.watermark = self._watermark

    def _start(self, watermark: int) -> None:
        """Load the state, and fire the processing-time timers due and the event-time ones
        Spark's ``watermark`` passed."""
        self._load()
        self._watermark = MIN_W
        self.out.watermark = MIN_W
        if self.timers is not None:
            self.timers.fire_processing_timers()
        self._advance(watermark)

    def _finish(self, watermark: int, broadcast_ran: bool) -> None:
        if self.spec.processing_time:  # what Spark's timer phase does in EventTime mode after the rows
            self._advance(watermark)
        self._save(broadcast_ran)
        self._wake()

    def records(self, key: bytes, pdf: Any, watermark: int) -> Iterator[Any]:
        depth1 = self.spec.depth == 1
        self._start(watermark if depth1 else MIN_W)
        start = self.timers.watermark if self.timers is not None else self._watermark
        seen = {1: start, 2: start}
        second = self.spec.second
        kinds, ws, tss, values = pdf["kind"].tolist(), pdf["w"].tolist(), pdf["ts"].tolist(), pdf["value"].tolist()
        inputs = [2 if r in second else 1 for r in pdf["src"].tolist()]
        broadcast_ran = False
        i, n = 0, len(kinds)
        while i < n:
            j = i
            while j < n and ws[j] == ws[i] and inputs[j] == inputs[i]:
                j += 1
            seen[inputs[i]] = max(seen[inputs[i]], int(ws[i]))
            self._advance(min(seen.values()))
            run_ts = [None if t != t or t is None else int(t) for t in tss[i:j]]
            batch = [pickle.loads(v) for v, kd in zip(values[i:j], kinds[i:j]) if kd == RECORD]
            stamps = None if run_ts[0] is None else run_ts
            if inputs[i] == 2:
                broadcast_ran = True
                self.op.process2(batch, stamps)
            else:
                self.op.process(batch, stamps)
            i = j
        self._finish(watermark, broadcast_ran)
        if self.out.values:
            yield self._drain(pdf["seq"].iloc[0])

    def timer(self, key: bytes, watermark: int, expiry: int) -> Iterator[Any]:
        import struct

        self._start(watermark)
        self._finish(watermark, False)
        yield self._drain(b"\xfe" + struct.pack(">q", expiry))
