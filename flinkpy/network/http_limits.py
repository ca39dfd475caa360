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
- ``rest.server.read-timeout``: the time a client has to send one request's line, headers and
  body, counted from its first byte (and the longest a kept-alive connection may sit idle).
- ``rest.server.numThreads``: requests served at once; a connection beyond it is answered 503
  at once instead of getting a thread.

The check of the bearer token comes before the body is read (``RestEndpoint.handle`` in :mod:`flinkpy.network.rest_server`): the
limits here bound what an unauthenticated peer can cost to one bounded thread for one timeout.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any, Mapping

log = logging.getLogger("flinkpy.rest")

MAX_CONTENT_LENGTH_KEY = "rest.server.max-content-length"
READ_TIMEOUT_KEY = "rest.server.read-timeout"
NUM_THREADS_KEY = "rest.server.numThreads"


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


class LimitedHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server with a bound on the threads that serve requests at once."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any, limits: HttpLimits) -> None:
        super().__init__(address, handler)
        self.limits = limits
        self.watchdog = ReadWatchdog(limits.read_timeout_s)
        self._slots = threading.BoundedSemaphore(limits.max_threads)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            # answered from the accepting thread: a few bytes into an empty socket buffer
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.watchdog.disarm(request)
            self._slots.release()

    def server_close(self) -> None:
        self.watchdog.stop()
        super().server_close()
