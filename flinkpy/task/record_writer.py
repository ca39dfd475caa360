"""RecordWriter: partitions a task's output records onto the channels of one outgoing edge.

Records are collected per channel into buffers; a buffer is serialized and sent when it holds
its target number of records or when the buffer timeout expires (``flush_if_due``). The target
adapts so that a serialized buffer lands near the configured segment size: large enough to
amortize per-frame costs, small enough that credit bounds the bytes in flight.

Records with event timestamps travel with a parallel list of them (a DATA_TS frame); a buffer
holds timestamps only when some of its records have them. Watermarks flush every buffer first,
then go to every channel, so no record overtakes the watermark that follows it.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

from flinkpy.graph.stream_graph import BROADCAST, CUSTOM, FORWARD, GLOBAL, HASH, REBALANCE, RESCALE, SHUFFLE
import struct

from flinkpy.network import channels as net
from flinkpy.network.channels import OutputChannel, dumps_batch
from flinkpy.state.key_groups import KeyGroupAssigner, compute_operator_index_for_key_group
from flinkpy.task.watermarks import MIN_WATERMARK


class RecordWriter:
    def __init__(
        self,
        channels: list[OutputChannel],
        partitioner: str,
        *,
        key_selector: Callable[[Any], Any] | None,
        max_parallelism: int,
        consumer_parallelism: int,
        buffer_timeout_ms: int,
        segment_size: int,
        seed: int = 0,
    ):
        self.channels = channels
        self.partitioner = partitioner
        self.n = len(channels)
        self.pending: list[list[Any]] = [[] for _ in channels]
        #: per channel: the timestamps of the pending records, or None while none has one
        self.pending_ts: list[list[Any] | None] = [None for _ in channels]
        self.timestamped = False
        self.timeout_s = buffer_timeout_ms / 1000.0
        self.flush_every_record = buffer_timeout_ms == 0
        self.segment_size = segment_size
        self.targets = [1 if self.flush_every_record else 64 for _ in channels]
        self.oldest: float | None = None
        self.records_out = 0
        #: the last watermark sent downstream (the task's currentOutputWatermark)
        self.watermark = MIN_WATERMARK
        #: the channel the next record of a round-robin edge (rebalance, rescale) goes to
        self.round_robin_position = 0
        self._rng = random.Random(seed)
        if partitioner == HASH:
            if key_selector is None:
                raise ValueError("a HASH edge needs a key selector")
            self._key = key_selector
            self._assign = KeyGroupAssigner(max_parallelism)
            # key group -> channel index; channels are ordered by consumer subtask index
            consumers = [ch.consumer for ch in channels]
            position = {c: i for i, c in enumerate(consumers)}
            self._kg_to_channel = [
                position[compute_operator_index_for_key_group(max_parallelism, consumer_parallelism, kg)]
                for kg in range(max_parallelism)
            ]
        if partitioner == CUSTOM:
            if key_selector is None:
                raise ValueError("a CUSTOM edge needs a channel selector")
            #: (record, number of consumers) -> consumer subtask: the user's Partitioner
            self._select = key_selector
            self._position = {ch.consumer: i for i, ch in enumerate(channels)}
        self.emit = self._choose_emit()

    # -- the Output interface (operators call these) -----------------------------------------

    def process(self, values: list, timestamps: list[int] | None) -> None:
        if timestamps is None and not self.timestamped:
            self.emit(values)
        elif self.partitioner == HASH and self.n > 1:
            self._emit_hash_timestamped(values, timestamps)
        else:
            self._emit_with_timestamps(values, timestamps)

    def process_watermark(self, watermark: int) -> None:
        self.watermark = watermark
        self.broadcast_event(net.WATERMARK, struct.pack(">q", watermark))

    def process_watermark_status(self, idle: bool) -> None:
        self.broadcast_event(net.WATERMARK_STATUS, b"\x01" if idle else b"\x00")

    def _channel_indexes(self, values: list) -> list[int]:
        """The channel of each record (every partitioner but broadcast)."""
        n = self.n
        if n == 1 or self.partitioner in (FORWARD, GLOBAL):
            return [0] * len(values)
        if self.partitioner == HASH:
            key, table, assign = self._key, self._kg_to_channel, self._assign
            return [table[assign(key(r))] for r in values]
        if self.partitioner == SHUFFLE:
            choice = self._rng.randrange
            return [choice(n) for _ in values]
        if self.partitioner == CUSTOM:
            return [self._custom_channel(r) for r in values]
        start = self.round_robin_position
        self.round_robin_position = (start + len(values)) % n
        return [(start + j) % n for j in range(len(values))]

    def _emit_with_timestamps(self, values: list, timestamps: list[int] | None) -> None:
        if not values:
            return
        self.timestamped = True
        ts = timestamps if timestamps is not None else [None] * len(values)
        if self.partitioner == BROADCAST and self.n > 1:
            targets = [(i, values, ts) for i in range(self.n)]
        else:
            idx = self._channel_indexes(values)
            per: dict[int, tuple[list, list]] = {}
            for i, v, t in zip(idx, values, ts):
                bucket = per.get(i)
                if bucket is None:
                    bucket = per[i] = ([], [])
                bucket[0].append(v)
                bucket[1].append(t)
            targets = [(i, vs, tss) for i, (vs, tss) in per.items()]
        for i, vs, tss in targets:
            pts = self.pending_ts[i]
            if pts is None:
                pts = self.pending_ts[i] = [None] * len(self.pending[i])
            self.pending[i].extend(vs)
            pts.extend(tss)
        self.records_out += len(values)
        self._after_fanout()

    def _choose_emit(self) -> Callable[[list], None]:
        if self.partitioner == CUSTOM:
            return self._emit_custom
        if self.n == 1 or self.partitioner in (FORWARD, GLOBAL):
            return self._emit_single
        if self.partitioner == HASH:
            return self._emit_hash
        if self.partitioner == BROADCAST:
            return self._emit_broadcast
        if self.partitioner == SHUFFLE:
            return self._emit_shuffle
        if self.partitioner in (REBALANCE, RESCALE):
            return self._emit_round_robin
        raise ValueError(f"unknown partitioner {self.partitioner}")

    # -- partitioning ------------------------------------------------------------------------

    def _mark(self) -> None:
        if self.oldest is None:
            self.oldest = time.monotonic()

    def _emit_single(self, records: list) -> None:
        if not records:
            return
        buf = self.pending[0]
        buf.extend(records)
        self.records_out += len(records)
        if len(buf) >= self.targets[0]:
            self._flush_full(0)
        elif buf:
            self._mark()

    def _emit_hash(self, records: list) -> None:
        key, assign = self._key, self._assign
        memo = assign.memo
        table = self._kg_to_channel
        pending = self.pending
        for r in records:
            k = key(r)
            try:
                kg = memo[k]  # a subscript, not a get() call: most keys are memoised
            except KeyError:
                kg = assign(k)
            pending[table[kg]].append(r)
        self.records_out += len(records)
        self._after_fanout()

    def _emit_hash_timestamped(self, records: list, timestamps: list[int] | None) -> None:
        """``_emit_hash`` for records with timestamps (a Kafka source's, say): one pass, each
        key's group from the memo, each record and its timestamp appended to its channel's
        buffers (the general path computes every channel first, then buckets in a second pass)."""
        if not records:
            return
        self.timestamped = True
        pending, pending_ts = self.pending, self.pending_ts
        for i, pts in enumerate(pending_ts):
            if pts is None:
                pending_ts[i] = [None] * len(pending[i])
        values_of = [buf.append for buf in pending]
        stamps_of = [pts.append for pts in pending_ts]  # type: ignore[union-attr]
        key, assign, memo, table = self._key, self._assign, self._assign.memo, self._kg_to_channel
        for r, t in zip(records, timestamps if timestamps is not None else [None] * len(records)):
            k = key(r)
            try:
                channel = table[memo[k]]
            except (KeyError, TypeError):  # not memoised yet, or unhashable: the assigner decides
                channel = table[assign(k)]
            values_of[channel](r)
            stamps_of[channel](t)
        self.records_out += len(records)
        self._after_fanout()

    def _custom_channel(self, record: Any) -> int:
        """The channel ``partition_custom``'s Partitioner chose; a subtask out of range fails
        the task with the partitioner's answer in the message (records are never dropped)."""
        target = self._select(record, self.n)
        channel = self._position.get(target) if isinstance(target, int) else None
        if channel is None:
            raise ValueError(
                f"partition_custom: the Partitioner returned {target!r} for {record!r}; "
                f"it must return a subtask index in 0..{self.n - 1}"
            )
        return channel

    def _emit_custom(self, records: list) -> None:
        pending = self.pending
        channel = self._custom_channel
        for r in records:
            pending[channel(r)].append(r)
        self.records_out += len(records)
        self._after_fanout()

    def _emit_round_robin(self, records: list) -> None:
        n = self.n
        start = self.round_robin_position
        for i in range(n):
            part = records[(i - start) % n :: n]
            if part:
                self.pending[i].extend(part)
        self.round_robin_position = (start + len(records)) % n
        self.records_out += len(records)
        self._after_fanout()

    def _emit_shuffle(self, records: list) -> None:
        n = self.n
        choice = self._rng.randrange
        pending = self.pending
        for r in records:
            pending[choice(n)].append(r)
        self.records_out += len(records)
        self._after_fanout()

    def _emit_broadcast(self, records: list) -> None:
        for buf in self.pending:
            buf.extend(records)
        self.records_out += len(records)
        self._after_fanout()

    def _after_fanout(self) -> None:
        any_pending = False
        for i, buf in enumerate(self.pending):
            if len(buf) >= self.targets[i]:
                self._flush_full(i)
            if self.pending[i]:
                any_pending = True
        if any_pending:
            self._mark()

    # -- flushing ----------------------------------------------------------------------------

    def _send(self, i: int, batch: list, timestamps: list | None = None) -> None:
        if timestamps is not None and any(t is not None for t in timestamps):
            payload = dumps_batch([batch, timestamps])
            self.channels[i].check_size(payload, len(batch))
            self.channels[i].send_data(payload, net.DATA_TS)
        else:
            payload = dumps_batch(batch)
            self.channels[i].check_size(payload, len(batch))
            self.channels[i].send_data(payload)
        if not self.flush_every_record:
            size = len(payload)
            target = self.targets[i]
            # under buffer debloating the consumer's announced size is a bound, not a mean
            announced = getattr(self.channels[i], "buffer_size", 0)
            segment = announced or self.segment_size
            if size < segment // 2 and len(batch) >= target and target < 16384:
                self.targets[i] = target * 2
            elif size > (announced or segment * 2) and target > 1:
                self.targets[i] = max(1, target // 2)

    def _flush_full(self, i: int) -> None:
        buf = self.pending[i]
        ts = self.pending_ts[i]
        target = self.targets[i]
        start = 0
        while len(buf) - start >= target:
            self._send(i, buf[start : start + target], None if ts is None else ts[start : start + target])
            start += target
            target = self.targets[i]
        self.pending[i] = buf[start:] if start < len(buf) else []
        if ts is not None:
            self.pending_ts[i] = ts[start:] if start < len(ts) else []

    def flush(self) -> None:
        """Send every non-empty buffer now."""
        for i, buf in enumerate(self.pending):
            if buf:
                ts = self.pending_ts[i]
                self.pending[i] = []
                if ts is not None:
                    self.pending_ts[i] = []
                self._send(i, buf, ts)
        self.oldest = None

    def flush_if_due(self, now: float) -> None:
        if self.oldest is not None and now - self.oldest >= self.timeout_s:
            self.flush()

    def finish(self, *, stopped: bool = False) -> None:
        self.flush()
        for ch in self.channels:
            ch.finish(net.STOPPED if stopped else b"")

    def broadcast_event(self, kind: int, payload: bytes = b"") -> None:
        """Control events go to every channel, after the records buffered before them."""
        self.flush()
        for ch in self.channels:
            ch.send_event(kind, payload)
