"""The limits a REST server puts on its clients, so that no client can exhaust it.

An HTTP server that reads a body before it knows who sends it, accepts any size, and waits
forever for headers gives every peer on the network a way to take the JobManager's memory
(one 300 MiB POST) or all of its threads (connections that send half a header and stop).
Three limits close that, each a configuration key:

- ``rest.server.max-content-length``: the largest body a request may carry (Flink's key and
  default, 100 MiB). The largest legitimate body is a job submission: the job graph with its
  pickled functions, any ``from_collection`` data and the archive of the job's Python files
  (its directory's modules and ``python.files``, base64: 4/3 of the archive), a few MiB in
  practice. The client asks for the limit (``GET /config``) and refuses a larger submission
  itself, saying what to raise (:mod:`flinkpy.client.shipping`).
- ``rest.server.read-timeout``: the time a client has to send its request's line and headers,
  counted from its connection, and then its body.
- ``rest.server.numThreads``: requests served at once; a request beyond it is answered 503 at
  once instead of getting a thread.

A connection gets a thread only once its headers have arrived: until then one selector thread
reads it (so a thousand idle or trickling sockets cost file descriptors, not the threads the
operators' requests need), and when too many connections wait for their headers the one that
has waited longest is closed. Every connection carries one request (``Connection: close``): a
kept-alive idle connection would hold its thread again. The check of the bearer token comes
before the body is read (``RestEndpoint.handle`` in :mod:`flinkpy.network.rest_server`): the limits here bound what an unauthenticated
peer can cost to one bounded thread for one timeout, and only once it has sent its headers.
"""

from __future__ import annotations

import io
import logging
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Mapping

log = logging.getLogger("flinkpy.rest")

MAX_CONTENT_LENGTH_KEY = "rest.server.max-content-length"
READ_TIMEOUT_KEY = "rest.server.read-timeout"
NUM_THREADS_KEY = "rest.server.numThreads"
#: the most connections that may wait for their headers at once; beyond it the oldest is closed
MAX_PENDING_CONNECTIONS = 256
#: the largest request line and headers a client may send
MAX_HEADER_BYTES = 64 << 10


@dataclass(frozen=True)
class HttpLimits:
    """What one REST server allows a client.

    >>> HttpLimits.from_config({"rest.server.max-content-length": "1 mb"}).max_content_length
    1048576
    """

    max_content_length: int = 100 << 20
    read_timeout_s: float = 30.0
    max_threads: int = 32

    @classmethod
    def from_config(cls, settings: Mapping[str, Any] | Any) -> HttpLimits:
        """From a ``Config`` or a plain mapping of ``rest.server.*`` strings (defaults for the rest)."""
        from flinkpy.config import typed_value

        def get(key: str) -> Any:
            if hasattr(settings, "get") and not isinstance(settings, Mapping):
                return settings.get(key)
            return typed_value(settings, key, source="REST server")

        return cls(int(get(MAX_CONTENT_LENGTH_KEY)), int(get(READ_TIMEOUT_KEY)) / 1000.0, int(get(NUM_THREADS_KEY)))


class ReadWatchdog:
    """Closes connections whose request has not been read in full by its deadline.

    A per-``recv`` socket timeout alone does not stop a client that sends one byte every few
    seconds; one thread checks every armed connection against its deadline instead, and shuts
    down the socket of a late one, which ends the ``recv`` its handler thread is blocked in.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._deadlines: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        threading.Thread(target=self._run, name="rest-read-watchdog", daemon=True).start()

    def arm(self, sock: socket.socket) -> None:
        with self._lock:
            self._deadlines[sock] = time.monotonic() + self.timeout_s

    def disarm(self, sock: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(sock, None)

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        interval = max(0.05, min(1.0, self.timeout_s / 4))
        while not self._stopped.wait(interval):
            now = time.monotonic()
            with self._lock:
                late = [s for s, deadline in self._deadlines.items() if deadline <= now]
                for s in late:
                    del self._deadlines[s]
            for s in late:
                try:
                    peer = s.getpeername()
                except OSError:
                    peer = "?"
                log.warning("closing REST connection from %s: request not received within %.1f s", peer, self.timeout_s)
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _plain_response(status: str, doc: str) -> bytes:
    body = doc.encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


_BUSY = _plain_response("503 Service Unavailable", '{"errors": ["the REST server is serving its maximum of requests at once"], '
                        '"kind": "Busy", "remedy": "retry in a moment, or raise rest.server.numThreads"}')


_HEADERS_TOO_LARGE = _plain_response("431 Request Header Fields Too Large", '{"errors": ["the request line and headers are larger '
                                     f'than the REST server accepts ({MAX_HEADER_BYTES} bytes)"], "kind": "RequestHeaderFieldsTooLarge"}}')


@dataclass
class _Pending:
    """A connection whose request line and headers have not all arrived yet."""

    address: Any
    deadline: float
    head: bytearray = field(default_factory=bytearray)


class _Prefixed(io.RawIOBase):
    """A socket's bytes, after those the selector already read from it."""

    def __init__(self, prefix: bytes, sock: socket.socket) -> None:
        self._prefix = memoryview(prefix)
        self._raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int | None:
        if self._prefix:
            n = min(len(b), len(self._prefix))
            b[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        return self._raw.readinto(b)


class LimitedRequestHandler(BaseHTTPRequestHandler):
    """Serves the one request of a connection whose headers the server has read already."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.rfile = io.BufferedReader(_Prefixed(self.server.take_head(self.connection), self.connection))  # type: ignore[attr-defined]

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()


class LimitedHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server with a bound on the threads that serve requests at once, whose
    threads serve only connections that have sent their headers (read by one selector)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any, limits: HttpLimits, tls: ssl.SSLContext | None = None) -> None:
        # before the bind: a failed bind closes the server, and closing stops the watchdog
        self.limits = limits
        #: HTTPS (security.ssl.rest.*): a server context; each connection's TLS handshake runs
        #: in the selector like the reading of its headers, so a stalled one holds up no thread
        self.tls = tls
        self._handshaking: set[socket.socket] = set()
        self.watchdog = ReadWatchdog(limits.read_timeout_s)
        self._slots = threading.BoundedSemaphore(limits.max_threads)
        self._pending: dict[socket.socket, _Pending] = {}
        self._heads: dict[socket.socket, bytes] = {}
        self._heads_lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        super().__init__(address, handler)

    # -- the selector: accepting, and reading request heads ----------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.socket, selectors.EVENT_READ, None)
                while not self._stop.is_set():
                    for key, _ in sel.select(min(poll_interval, 0.2)):
                        if key.data is None:
                            self._accept(sel)
                        else:
                            self._read_head(sel, key.fileobj)  # type: ignore[arg-type]
                    now = time.monotonic()
                    for sock in [s for s, p in self._pending.items() if p.deadline <= now]:
                        log.warning("closing REST connection from %s: no request within %.1f s", self._pending[sock].address, self.limits.read_timeout_s)
                        self._drop(sel, sock)
                for sock in list(self._pending):
                    self._drop(sel, sock)
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        try:
            sock, address = self.socket.accept()
        except OSError:
            return
        if len(self._pending) >= MAX_PENDING_CONNECTIONS:
            oldest = next(iter(self._pending))
            log.warning("closing REST connection from %s: %d connections wait for their headers", self._pending[oldest].address, len(self._pending))
            self._drop(sel, oldest)
        sock.setblocking(False)
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except OSError:
                sock.close()
                return
            self._handshaking.add(sock)
        self._pending[sock] = _Pending(address, time.monotonic() + self.limits.read_timeout_s)
        sel.register(sock, selectors.EVENT_READ, address)

    def _read_head(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        pending = self._pending[sock]
        try:
            if sock in self._handshaking:
                sock.do_handshake()  # type: ignore[attr-defined]
                self._handshaking.discard(sock)
            data = sock.recv(65536)
            while data and getattr(sock, "pending", lambda: 0)():  # decrypted bytes select() does not see
                data += sock.recv(65536)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except ssl.SSLError as e:
            log.warning("closing REST connection from %s: TLS handshake failed: %s", pending.address, e)
            data = b""
        except OSError:
            data = b""
        if not data:
            self._drop(sel, sock)
            return
        start = max(0, len(pending.head) - 3)
        pending.head += data
        if b"\r\n\r\n" in pending.head[start:]:
            sel.unregister(sock)
            del self._pending[sock]
            sock.setblocking(True)
            self._dispatch(sock, pending)
        elif len(pending.head) > MAX_HEADER_BYTES:
            _answer(sock, _HEADERS_TOO_LARGE)
            self._drop(sel, sock)

    def _drop(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        self._pending.pop(sock, None)
        self._handshaking.discard(sock)
        try:
            sel.unregister(sock)
        except (KeyError, ValueError):
            pass
        self.shutdown_request(sock)

    def _dispatch(self, sock: socket.socket, pending: _Pending) -> None:
        if not self._slots.acquire(blocking=False):
            _answer(sock, _BUSY)
            self.shutdown_request(sock)
            return
        with self._heads_lock:
            self._heads[sock] = bytes(pending.head)
        try:
            self.process_request(sock, pending.address)
        except BaseException:
            self.take_head(sock)
            self._slots.release()
            raise

    def take_head(self, sock: socket.socket) -> bytes:
        """What the selector read of ``sock`` (its request line, headers, perhaps some body)."""
        with self._heads_lock:
            return self._heads.pop(sock, b"")

    # -- the threads -------------------------------------------------------------------------

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.watchdog.disarm(request)
            self._slots.release()

    def server_close(self) -> None:
        self.watchdog.stop()
        super().server_close()


def _answer(sock: socket.socket, response: bytes) -> None:
    """A short answer into an (almost certainly) empty socket buffer, never blocking on it."""
    try:
        sock.setblocking(False)
        sock.send(response)
    except OSError:
        pass
