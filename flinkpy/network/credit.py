"""Credit-based flow control, as a pure ledger (no sockets, no clock).

A receiver announces credit: the number of buffers it has room for. A sender may put a data
buffer on the wire only while it holds credit, and each buffer spends one. When the receiver has
processed a buffer it returns one credit. The bytes in flight on a channel are therefore bounded
by ``initial_credit x buffer size``, and a slow consumer stops its producers — backpressure — all
the way up to the sources. That bound is in bytes; buffer debloating
(:mod:`flinkpy.network.debloat`) makes it a bound in time by shrinking the buffer size, not the
credit. Control frames (barriers, end of partition, watermarks) never need
credit, so they are never delayed behind it.

>>> c = SenderCredit(); c.grant(2); c.spend(), c.spend(), c.spend()
(True, True, False)
"""

from __future__ import annotations


class SenderCredit:
    """The producer's view of one channel."""

    __slots__ = ("available", "spent")

    def __init__(self) -> None:
        self.available = 0
        self.spent = 0

    def grant(self, n: int) -> None:
        if n <= 0:
            raise ValueError(f"credit announcements must be positive, got {n}")
        self.available += n

    def spend(self) -> bool:
        """Take one credit for one data buffer; False (and nothing taken) when there is none."""
        if self.available <= 0:
            return False
        self.available -= 1
        self.spent += 1
        return True


class ReceiverCredit:
    """The consumer's view: how much it granted, and how many buffers it holds unprocessed."""

    __slots__ = ("initial", "outstanding")

    def __init__(self, initial: int) -> None:
        if initial < 1:
            raise ValueError("a channel needs at least one buffer of credit")
        self.initial = initial
        self.outstanding = initial

    def on_buffer_received(self) -> None:
        if self.outstanding <= 0:
            raise ProtocolViolation("the producer sent a data buffer without credit")
        self.outstanding -= 1

    def on_buffer_processed(self) -> int:
        """The number of credits to announce back now."""
        self.outstanding += 1
        return 1


class ProtocolViolation(ConnectionError):
    pass
