"""Buffer debloating, as a pure state machine: throughput samples in, announced buffer sizes out.

Credit bounds the *number* of buffers in flight on a channel, not the *time* they take to
process. Under back-pressure every credit is spent, so a checkpoint barrier queues behind
``credit x buffer size`` bytes per channel: with full 32 KB buffers of small records and a slow
consumer, that is tens of seconds of work, and an aligned checkpoint takes as long. Debloating
sizes buffers by time instead: a consumer measures how fast it really processes its input
(bytes per second of *busy* time: waiting for input is left out, or an idle task would shrink
its buffers, starve, measure less and shrink them again), and announces a buffer size so that
all its buffers together hold about ``target`` worth of processing. Producers then cut their
buffers to that size, and a barrier waits behind about ``target``, whatever the back-pressure.

The class reads no socket and no clock: the I/O side (:class:`flinkpy.network.channels.InputGateDebloat`)
calls :meth:`BufferDebloater.on_period` once per period with what happened in it.

>>> d = BufferDebloater(target_ms=1000, buffers=4, max_size=32768, min_size=256, samples=1)
>>> d.on_period(processed_bytes=8000, busy_s=1.0)  # 8 KB/s for 1 s in 4 buffers: 2000 bytes each
2000
>>> d.on_period(processed_bytes=8400, busy_s=1.0) is None  # within the 25% threshold: keep it
True
"""

from __future__ import annotations

#: a period with less busy time than this says nothing about the throughput
MIN_BUSY_S = 0.001


class BufferDebloater:
    """Turns a consumer's throughput into the buffer size its producers should use.

    ``buffers`` is how many buffers can be in flight towards the consumer at once (its input
    channels times the credit of each); the announced size is ``throughput x target / buffers``,
    kept within ``[min_size, max_size]`` (the configured segment size is the largest). The
    throughput is an exponential moving average over about ``samples`` periods (weight
    ``2 / (samples + 1)`` for the newest), so one slow record does not collapse the buffers.
    A new size is announced only when it differs from the last announced one by more than
    ``threshold_pct`` percent, or when it reaches a bound: announcements cost a frame per
    channel and a change of the producers' batching, and small wobbles are not worth either.
    """

    def __init__(
        self,
        *,
        target_ms: int,
        buffers: int,
        max_size: int,
        min_size: int = 256,
        samples: int = 20,
        threshold_pct: int = 25,
    ) -> None:
        if target_ms <= 0:
            raise ValueError(f"the debloat target must be positive, got {target_ms} ms")
        if buffers < 1:
            raise ValueError(f"a gate with debloating needs at least one buffer in flight, got {buffers}")
        if not 1 <= min_size <= max_size:
            raise ValueError(f"the smallest buffer size ({min_size}) must be from 1 to the segment size ({max_size})")
        if samples < 1:
            raise ValueError(f"the throughput needs at least one sample, got {samples}")
        self.target_s = target_ms / 1000.0
        self.buffers = buffers
        self.max_size = max_size
        self.min_size = min_size
        self.alpha = 2.0 / (samples + 1)
        self.threshold = threshold_pct / 100.0
        #: bytes per second of busy time, averaged; None before the first sample with data
        self.throughput: float | None = None
        #: the size the producers use now: the segment size until the first announcement
        self.announced = max_size

    def on_period(self, processed_bytes: int, busy_s: float) -> int | None:
        """One period's figures: bytes the consumer processed and seconds it was busy (not
        waiting for input). Returns the buffer size to announce now, or None to keep the last."""
        if processed_bytes < 0 or busy_s < 0:
            raise ValueError(f"a period cannot take back work: {processed_bytes} bytes, {busy_s} s busy")
        if busy_s < MIN_BUSY_S:
            return None  # the consumer waited all along: nothing learned about its speed
        rate = processed_bytes / busy_s
        self.throughput = rate if self.throughput is None else self.throughput + self.alpha * (rate - self.throughput)
        return self._decide(self.desired_size())

    def desired_size(self) -> int:
        """The buffer size that makes ``buffers`` buffers about ``target`` of processing."""
        if self.throughput is None:
            return self.max_size
        size = round(self.throughput * self.target_s / self.buffers)
        return max(self.min_size, min(self.max_size, size))

    def _decide(self, size: int) -> int | None:
        last = self.announced
        if size == last:
            return None
        at_bound = size in (self.min_size, self.max_size)
        if not at_bound and abs(size - last) <= last * self.threshold:
            return None
        self.announced = size
        return size

    def time_to_consume_ms(self, queued_bytes: int) -> int | None:
        """How long the consumer needs for ``queued_bytes`` at its measured throughput (Flink's
        estimatedTimeToConsumeBuffersMs); None before the throughput is known."""
        if not self.throughput:
            return None
        return round(queued_bytes / self.throughput * 1000)
