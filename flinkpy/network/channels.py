"""Data channels between tasks: one TCP connection per (producer subtask, consumer subtask, edge).

The consumer connects to the producer's listener, proves it knows the cluster secret, says which
edge and subtask it is (HELLO) and announces its initial credit. From then on the producer sends
DATA frames (a pickled batch of records) only against credit, and control frames (END_OF_PARTITION,
later barriers and watermarks) regardless of credit. The consumer returns one credit per DATA frame
it has processed, so the bytes in flight per channel stay bounded. With buffer debloating the
consumer also announces a buffer size (BUFFER_SIZE) from its measured throughput, and the
producer cuts its buffers to it, so that the time those bytes take to process stays bounded too
(:mod:`flinkpy.network.debloat`).

Closing is a handshake: after END_OF_PARTITION the producer half-closes and waits until the
consumer closes, so no frame is ever lost to a reset of a connection with unread credit frames.
"""

from __future__ import annotations

import io
import pickle
import socket
import ssl
import struct
import threading
from typing import Any

from flinkpy.errors import FlinkpyError
from flinkpy.network import auth
from flinkpy.network.credit import ReceiverCredit, SenderCredit
from flinkpy.network.debloat import BufferDebloater
from flinkpy.network.framing import MAX_FRAME, FrameReader, encode, send_frame

HELLO = 1
DATA = 2
CREDIT = 3
END_OF_PARTITION = 4
BARRIER = 5
WATERMARK = 6
DATA_TS = 7  # a batch with event timestamps: pickled [records, timestamps]
WATERMARK_STATUS = 8  # one byte: 1 = the producer is idle, 0 = active again
BUFFER_SIZE = 9  # consumer -> producer (buffer debloating): uint32, the buffer size to cut to
#: the producer's input ended (its operators have ended theirs); the channel stays open for the
#: final checkpoint's barrier, and END_OF_PARTITION follows once that checkpoint completed
END_OF_DATA = 10
#: END_OF_PARTITION payload of a job stopped with a savepoint without draining: event time
#: does not advance to the end (windows stay open in the savepoint)
STOPPED = b"stop"

_U32 = struct.Struct(">I")
CREDIT_ONE = encode(CREDIT, _U32.pack(1))
PICKLE_PROTOCOL = 5


class ChannelBroken(ConnectionError):
    """The other side of a data channel went away before the end of the partition."""


class RecordTooLargeError(FlinkpyError):
    """A buffer of records is larger than a data channel's frame limit."""

    def __init__(self, size: int, records: int, limit: int, describe: str) -> None:
        what = f"a record of {size} bytes" if records == 1 else f"a buffer of {size} bytes ({records} records)"
        super().__init__(
            f"{what} for {describe} is larger than taskmanager.network.max-frame-size ({limit} bytes), the most one "
            "data channel carries between two tasks",
            remedy="raise taskmanager.network.max-frame-size (up to 4 gb), or pass large values by reference (a path in shared storage)",
        )


class OutputChannel:
    """The producer's end of one channel."""

    def __init__(self, sock: socket.socket, edge_id: int, consumer: int, describe: str):
        self.sock = sock
        self.edge_id = edge_id
        self.consumer = consumer
        self.describe = describe
        self.credit = SenderCredit()
        #: the largest frame the consumer accepts (``taskmanager.network.max-frame-size``)
        self.max_frame = MAX_FRAME
        self.reader = FrameReader(sock, chunk=4096)
        self.bytes_sent = 0
        self.buffers_sent = 0
        #: seconds spent waiting for credit: the backpressure this channel exerted on us
        self.backpressured_s = 0.0
        #: when the ongoing wait for credit began (0.0: not waiting); read by the task's metrics
        self.blocked_since = 0.0
        #: an injected slow link (`flinkpy fault network --delay`): each data buffer waits
        #: ``delay_s`` before it is sent, until ``delay_until`` (time.monotonic)
        self.delay_s = 0.0
        self.delay_until = 0.0
        #: the buffer size the consumer announced (buffer debloating); 0: the segment size
        self.buffer_size = 0

    def _absorb(self, frames: list[tuple[int, bytes]] | None) -> None:
        if frames is None:
            raise ChannelBroken(f"consumer of {self.describe} closed the channel")
        for kind, payload in frames:
            if kind == CREDIT:
                self.credit.grant(_U32.unpack(payload)[0])
            elif kind == BUFFER_SIZE:
                self.buffer_size = _U32.unpack(payload)[0]
            else:
                raise ChannelBroken(f"unexpected frame kind {kind} from the consumer of {self.describe}")

    def check_size(self, payload: bytes, records: int) -> None:
        """``RecordTooLargeError`` for a buffer the consumer would refuse, before it is sent."""
        if len(payload) > self.max_frame:
            raise RecordTooLargeError(len(payload), records, self.max_frame, self.describe)

    def send_data(self, payload: bytes, kind: int = DATA) -> None:
        """Send one buffer; blocks (backpressure) until the consumer has credit for it."""
        if self.delay_s:
            self._injected_delay()
        if not self.credit.spend():
            import time

            started = self.blocked_since = time.monotonic()
            try:
                while not self.credit.spend():
                    self._absorb(self.reader.feed())
            finally:
                self.blocked_since = 0.0
            self.backpressured_s += time.monotonic() - started
        send_frame(self.sock, kind, payload)
        self.bytes_sent += len(payload)
        self.buffers_sent += 1

    def _injected_delay(self) -> None:
        """`flinkpy fault network --delay`: each data buffer waits ``delay_s`` until ``delay_until``."""
        import time

        if time.monotonic() < self.delay_until:
            time.sleep(self.delay_s)
        else:
            self.delay_s = 0.0

    def send_event(self, kind: int, payload: bytes = b"") -> None:
        """Control frames bypass credit."""
        send_frame(self.sock, kind, payload)

    def finish(self, payload: bytes = b"") -> None:
        """Send END_OF_PARTITION, then wait for the consumer to close its end."""
        send_frame(self.sock, END_OF_PARTITION, payload)
        try:
            if not isinstance(self.sock, ssl.SSLSocket):
                # (a TLS socket's shutdown would drop its TLS session under the credits still
                # arriving: END_OF_PARTITION alone tells the consumer, which then closes)
                self.sock.shutdown(socket.SHUT_WR)
            while self.reader.feed() is not None:
                pass
        except (OSError, ChannelBroken):
            pass
        finally:
            self.sock.close()


class QueuingOutputChannel(OutputChannel):
    """An output channel that never blocks the task (unaligned checkpoints).

    A data buffer without credit waits in :attr:`queue`, and so does every control frame behind
    it (a watermark never overtakes data); only :meth:`send_priority` (an unaligned barrier)
    goes straight to the wire, ahead of the queue. The task stops processing input while a
    queue is non-empty and waits on the socket for credit (:meth:`on_readable`): it blocks only
    between records, where a barrier can be handled, never inside a batch.
    """

    def __init__(self, sock: socket.socket, edge_id: int, consumer: int, describe: str):
        super().__init__(sock, edge_id, consumer, describe)
        from collections import deque

        self.queue: deque[tuple[int, bytes]] = deque()

    def send_data(self, payload: bytes, kind: int = DATA) -> None:
        if self.delay_s:
            self._injected_delay()  # a slow link is a fault injected on purpose: it may block
        if not self.queue and self.credit.spend():
            send_frame(self.sock, kind, payload)
            self.bytes_sent += len(payload)
            self.buffers_sent += 1
        else:
            self.queue.append((kind, payload))

    def send_event(self, kind: int, payload: bytes = b"") -> None:
        if self.queue:
            self.queue.append((kind, payload))
        else:
            send_frame(self.sock, kind, payload)

    def send_priority(self, kind: int, payload: bytes = b"") -> None:
        """Ahead of everything queued (an unaligned barrier overtakes the buffers)."""
        send_frame(self.sock, kind, payload)

    def queued_data(self) -> list[tuple[int, bytes]]:
        """The data buffers waiting for credit: this channel's in-flight state."""
        return [(k, p) for k, p in self.queue if k in (DATA, DATA_TS)]

    def pump(self) -> None:
        """Send from the head of the queue while credit (or a control frame) allows."""
        q = self.queue
        while q:
            kind, payload = q[0]
            if kind in (DATA, DATA_TS):
                if not self.credit.spend():
                    return
                self.bytes_sent += len(payload)
                self.buffers_sent += 1
            q.popleft()
            send_frame(self.sock, kind, payload)

    def on_readable(self) -> None:
        """The consumer sent something (credit): take it and send what it allows."""
        self._absorb(self.reader.feed())
        self.pump()

    def finish(self, payload: bytes = b"") -> None:
        while self.queue:
            self.pump()
            if self.queue:
                self._absorb(self.reader.feed())
        super().finish(payload)


class InputChannel:
    """The consumer's end of one channel."""

    def __init__(self, sock: socket.socket, edge_id: int, producer: int, initial_credit: int, describe: str, max_frame: int = MAX_FRAME):
        self.sock = sock
        self.edge_id = edge_id
        self.producer = producer
        self.describe = describe
        self.reader = FrameReader(sock, max_frame=max_frame)
        self.credit = ReceiverCredit(initial_credit)
        self.finished = False
        self.bytes_received = 0
        #: bytes of the DATA frames processed (the throughput buffer debloating measures)
        self.bytes_processed = 0
        #: credits for processed buffers not yet announced to the producer
        self.owed = 0
        self._announce_at = max(1, initial_credit // 2)

    def fileno(self) -> int:
        return self.sock.fileno()

    def return_credit(self, nbytes: int = 0) -> None:
        """One buffer (of ``nbytes``) processed. Its credit is announced once half of the initial
        credit is owed, in one frame: a send (and the producer's wake-up) per few buffers rather
        than per buffer. The task calls :meth:`announce_credit` before it waits for input, so
        that a producer is never left without credit the consumer owes it."""
        self.credit.on_buffer_processed()
        self.bytes_processed += nbytes
        self.owed += 1
        if self.owed >= self._announce_at:
            self.announce_credit()

    def announce_credit(self) -> None:
        """Send the credit owed, if any (nothing once the channel is finished)."""
        n, self.owed = self.owed, 0
        if n and not self.finished:
            self.sock.sendall(CREDIT_ONE if n == 1 else encode(CREDIT, _U32.pack(n)))

    def announce_buffer_size(self, size: int) -> None:
        """Tell the producer the buffer size to cut to (buffer debloating); like credit, a frame
        from consumer to producer, read by the producer when it next looks for credit."""
        if not self.finished:
            try:
                self.sock.sendall(encode(BUFFER_SIZE, _U32.pack(size)))
            except OSError:
                pass  # advisory: a producer that went away is reported by the read side

    def close(self) -> None:
        self.finished = True
        try:
            self.sock.close()
        except OSError:
            pass


class InputGateDebloat:
    """Buffer debloating for one task's input channels (its gate): the I/O around
    :class:`~flinkpy.network.debloat.BufferDebloater`.

    The task's input loop calls :meth:`tick` after each round; once a period has passed, the
    bytes processed on the channels and the time the task was busy (the period minus the time
    it waited for input) go to the debloater, and a new size, if it decides one, is announced
    to every producer still open. One size for the whole gate, as in Flink: the channels of a
    gate feed one operator, whose throughput is the gate's.
    """

    def __init__(self, channels: list[InputChannel], debloater: BufferDebloater, period_s: float, now: float):
        self.channels = channels
        self.debloater = debloater
        self.period_s = period_s
        self._next = now + period_s
        self._last = now
        self._bytes = 0
        self._idle = 0.0

    @property
    def buffer_size(self) -> int:
        """The size the producers were last told (the segment size before any announcement)."""
        return self.debloater.announced

    def tick(self, now: float, idle_s: float) -> None:
        """``idle_s``: the task's total seconds spent waiting for input so far."""
        if now < self._next:
            return
        processed = sum(ch.bytes_processed for ch in self.channels)
        busy = max(0.0, (now - self._last) - (idle_s - self._idle))
        size = self.debloater.on_period(processed - self._bytes, busy)
        self._bytes, self._idle, self._last = processed, idle_s, now
        self._next = now + self.period_s
        if size is not None:
            for ch in self.channels:
                if not ch.finished:
                    ch.announce_buffer_size(size)


def open_input_channel(
    host: str,
    port: int,
    secret: bytes,
    *,
    job_id: str,
    edge_id: int,
    producer: int,
    consumer: int,
    initial_credit: int,
    describe: str,
    timeout: float = 10.0,
    max_frame: int = MAX_FRAME,
    tls: ssl.SSLContext | None = None,
) -> InputChannel:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    if tls is not None:  # internal TLS: a client context (flinkpy.network.tls)
        sock = tls.wrap_socket(sock, server_hostname=host)
    auth.connect_handshake(sock, secret, timeout)
    hello = pickle.dumps({"job_id": job_id, "edge_id": edge_id, "consumer": consumer, "producer": producer})
    send_frame(sock, HELLO, hello)
    send_frame(sock, CREDIT, _U32.pack(initial_credit))
    sock.settimeout(None)
    return InputChannel(sock, edge_id, producer, initial_credit, describe, max_frame)


class ChannelAcceptor:
    """Accepts consumers on a task's listener, in a thread, for as long as the task lives.

    Connections that fail the handshake, or that name a channel nobody expects, are closed
    without a byte of payload read: a stranger cannot disturb the task.
    """

    def __init__(self, listener: socket.socket, secret: bytes, job_id: str, producer: int, expected: set[tuple[int, int]],
                 tls: ssl.SSLContext | None = None):
        self.listener = listener
        self.secret = secret
        #: internal TLS: a server context; consumers without a trusted certificate are refused
        self.tls = tls
        self.job_id = job_id
        self.producer = producer
        self.expected = set(expected)
        self.accepted: dict[tuple[int, int], socket.socket] = {}
        #: the frame reader of each accepted channel (it may hold bytes read after HELLO)
        self._readers: dict[tuple[int, int], FrameReader] = {}
        self.rejected = 0
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="channel-acceptor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handshake, args=(sock,), daemon=True).start()

    def _handshake(self, sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            if self.tls is not None:
                sock.settimeout(10.0)
                sock = self.tls.wrap_socket(sock, server_side=True)
            auth.accept_handshake(sock, self.secret)
            sock.settimeout(10.0)
            reader = FrameReader(sock, chunk=4096)
            frame = reader.read_one()
            if frame is None or frame[0] != HELLO:
                raise ChannelBroken("no HELLO")
            hello = pickle.loads(frame[1])  # safe: the peer proved it holds the secret
            key = (int(hello["edge_id"]), int(hello["consumer"]))
            if hello.get("job_id") != self.job_id or hello.get("producer") != self.producer:
                raise ChannelBroken("HELLO for another task")
            sock.settimeout(None)
            with self._cv:
                if key not in self.expected or key in self.accepted:
                    raise ChannelBroken("unexpected channel")
                self.accepted[key] = sock
                self._readers[key] = reader
                self._cv.notify_all()
        except (OSError, ChannelBroken, auth.AuthenticationFailed, pickle.UnpicklingError, KeyError, TypeError, ValueError):
            self.rejected += 1
            try:
                sock.close()
            except OSError:
                pass

    def wait_all(self, timeout: float) -> dict[tuple[int, int], tuple[socket.socket, FrameReader]]:
        with self._cv:
            if not self._cv.wait_for(lambda: set(self.accepted) >= self.expected, timeout=timeout):
                missing = sorted(self.expected - set(self.accepted))
                raise ChannelBroken(f"consumers did not connect in {timeout:.0f}s: missing (edge, subtask) {missing}")
            return {k: (s, self._readers[k]) for k, s in self.accepted.items()}

    def close(self) -> None:
        try:
            self.listener.close()
        except OSError:
            pass


def make_output_channel(sock: socket.socket, reader: FrameReader, edge_id: int, consumer: int, describe: str, *, queuing: bool = False,
                        max_frame: int = MAX_FRAME) -> OutputChannel:
    ch = (QueuingOutputChannel if queuing else OutputChannel)(sock, edge_id, consumer, describe)
    ch.max_frame = max_frame
    ch.reader = reader  # keeps bytes (the initial credit) read after HELLO
    ch._absorb(reader.drain_buffered())
    return ch


def dumps_batch(records: list[Any]) -> bytes:
    """Serialize a buffer of records.

    The pickler runs in "fast" mode: no memo, so no dict insert per object, which makes both
    dumping and loading a list of small records about a third cheaper. Records are values, not
    object graphs; a record that shares sub-objects is written once per reference, and a cyclic
    one (which fast mode refuses) falls back to the ordinary, memoizing pickler.
    """
    f = io.BytesIO()
    p = pickle.Pickler(f, PICKLE_PROTOCOL)
    p.fast = True
    try:
        p.dump(records)
    except ValueError:
        return pickle.dumps(records, PICKLE_PROTOCOL)
    return f.getvalue()
