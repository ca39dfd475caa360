"""Control connections: authenticated sockets that carry typed control messages.

Used between JobManager and TaskManagers and between a TaskManager and its task processes.
Messages are :mod:`flinkpy.protocol` dataclasses, encoded and decoded here, at the wire edge;
their pickled fields are safe only because both ends proved they hold the cluster secret
(``auth``) before the first message. Sending is thread-safe.
"""

from __future__ import annotations

import errno
import socket
import ssl
import threading

from flinkpy.network import auth
from flinkpy.network.framing import FrameReader, send_frame
from flinkpy.protocol import Message, decode, encode

MESSAGE = 1


class Connection:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._reader = FrameReader(sock)
        self._send_lock = threading.Lock()
        self.closed = False

    def send(self, message: Message) -> None:
        data = encode(message)
        with self._send_lock:
            send_frame(self.sock, MESSAGE, data)

    def recv(self) -> Message | None:
        """Block for the next message; ``None`` when the peer closed the connection.

        Raises :class:`flinkpy.protocol.ProtocolError` for a message of another protocol
        version or an unknown type (the connection stays usable: the frame was consumed)."""
        frame = self._reader.read_one()
        if frame is None:
            return None
        return decode(frame[1])

    @property
    def buffered(self) -> bool:
        return self._reader.buffered

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def connect(host: str, port: int, secret: bytes, timeout: float = 5.0, tls: ssl.SSLContext | None = None) -> Connection:
    """Open and authenticate a control connection (inside TLS when ``tls``, a client context,
    is given: see :mod:`flinkpy.network.tls`)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host)
        auth.connect_handshake(sock, secret, timeout)
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return Connection(sock)


def listen(host: str, port: int = 0, backlog: int = 128) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


def listen_from(host: str, first_port: int, *, ports: int = 1000) -> socket.socket:
    """Listen on ``host`` at the first free port from ``first_port`` upward (any free port when
    it is 0): the task processes of one TaskManager share its ``taskmanager.data.port`` range.
    ``OSError`` when none of ``ports`` ports is free, or ``host`` is no local address."""
    if first_port == 0:
        return listen(host, 0)
    for port in range(first_port, min(first_port + ports, 65536)):
        try:
            return listen(host, port)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no free port in {first_port}-{min(first_port + ports, 65536) - 1} on {host} (taskmanager.data.port)")


def accept(listener: socket.socket, secret: bytes, timeout: float = 5.0, tls: ssl.SSLContext | None = None) -> Connection:
    """Accept one connection and authenticate it; raises AuthenticationFailed (socket closed)."""
    sock, _ = listener.accept()
    return handshake(sock, secret, timeout, tls)


def handshake(sock: socket.socket, secret: bytes, timeout: float = 5.0, tls: ssl.SSLContext | None = None) -> Connection:
    """Authenticate an accepted socket (after the TLS handshake when ``tls``, a server context,
    is given); raises AuthenticationFailed, or ``ssl.SSLError`` for a peer without a trusted
    certificate (socket closed either way)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if tls is not None:
            sock.settimeout(timeout)
            sock = tls.wrap_socket(sock, server_side=True)
        auth.accept_handshake(sock, secret, timeout)
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return Connection(sock)
