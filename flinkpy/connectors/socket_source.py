"""A socket text source: the lines a TCP server sends, as Flink's ``socketTextStream``.

Meant for demos and quick experiments (``nc -lk 9999`` in another terminal). It is not
replayable: a socket cannot be rewound, so the records received after the last checkpoint are
lost when the job fails — the source's guarantee is "none", and a job that checkpoints with it
says so when it is submitted. Its parallelism is always 1.

The reader connects at its first poll, then reads whatever bytes are available without
blocking and splits them on the delimiter; an unfinished last line waits for the rest. When the
server closes the connection the source ends (after ``max_retry`` reconnection attempts, one
every ``retry_interval_s``; -1 retries forever), as Flink's does.
"""

from __future__ import annotations

import errno
import socket
import time
from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.errors import ClusterUnreachableError

#: bytes read per recv call
_CHUNK = 1 << 16


class SocketTextReader(SourceReader):
    def __init__(self, source: SocketTextSource) -> None:
        self._src = source
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._retries = 0
        self._next_attempt = 0.0
        self._ended = False

    def _connect(self) -> bool:
        src = self._src
        try:
            sock = socket.create_connection((src.hostname, src.port), timeout=5)
        except OSError as e:
            if src.max_retry >= 0 and self._retries >= src.max_retry:
                raise ClusterUnreachableError(
                    f"socket source cannot connect to {src.hostname}:{src.port}: {e.strerror or e}",
                    remedy="start the server first (e.g. `nc -lk PORT`), or allow retries with max_retry",
                ) from None
            self._retries += 1
            self._next_attempt = time.monotonic() + src.retry_interval_s
            return False
        sock.setblocking(False)
        self._sock = sock
        return True

    def poll(self, max_records: int) -> list | None:
        if self._ended:
            return None
        if self._sock is None:
            if time.monotonic() < self._next_attempt or not self._connect():
                return []
        assert self._sock is not None
        try:
            data = self._sock.recv(_CHUNK)
        except BlockingIOError:
            return []
        except OSError as e:
            if e.errno not in (errno.ECONNRESET, errno.EPIPE):
                raise
            data = b""
        if not data:  # the server closed the connection
            self._sock.close()
            self._sock = None
            src = self._src
            if src.max_retry < 0 or self._retries < src.max_retry:
                self._retries += 1
                self._next_attempt = time.monotonic() + src.retry_interval_s
                return []
            self._ended = True
            rest, self._buffer = self._buffer, b""
            return [self._decode(rest)] if rest else None
        self._buffer += data
        delimiter = self._src.delimiter.encode()
        *lines, self._buffer = self._buffer.split(delimiter)
        return [self._decode(line) for line in lines]

    def _decode(self, line: bytes) -> str:
        text = line.decode("utf-8", "replace")
        return text[:-1] if self._src.delimiter == "\n" and text.endswith("\r") else text

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class SocketTextSource(Source):
    """Lines of text from a TCP server: ``env.socket_text_stream(host, port)``."""

    boundedness = Boundedness.CONTINUOUS_UNBOUNDED
    guarantee = "none"
    needs = "nothing it can offer: a socket cannot be replayed; records after the last checkpoint are lost on a failure"

    def __init__(self, hostname: str, port: int, delimiter: str = "\n", max_retry: int = 0, retry_interval_s: float = 0.5) -> None:
        if not delimiter:
            raise ValueError("socket_text_stream: the delimiter must not be empty")
        self.hostname = hostname
        self.port = int(port)
        self.delimiter = delimiter
        self.max_retry = int(max_retry)
        self.retry_interval_s = retry_interval_s

    def create_reader(self, ctx: ReaderContext) -> SocketTextReader:
        return SocketTextReader(self)

    def max_parallelism(self) -> int | None:
        return 1

    def __repr__(self) -> str:
        return f"SocketTextSource({self.hostname!r}, {self.port})"
