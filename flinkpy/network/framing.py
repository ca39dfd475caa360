"""Length-prefixed frames on a stream socket.

A frame is a 5-byte header — payload length (uint32, big endian) and a kind byte — followed by
the payload. Kinds are small integers defined by the layer that uses them (data channels and
control connections each have their own). Reading is buffered: one ``recv_into`` may yield many
frames, which is what keeps small control frames (credits, barriers) cheap.
"""

from __future__ import annotations

import socket
import struct
from typing import Iterator

HEADER = struct.Struct(">IB")
HEADER_SIZE = HEADER.size
#: a frame larger than this is refused: a corrupt or hostile length must not allocate gigabytes
#: (data channels take theirs from ``taskmanager.network.max-frame-size``)
MAX_FRAME = 256 * 1024 * 1024


class FrameError(ConnectionError):
    """The peer sent something that is not a frame (or closed the connection mid-frame)."""


def encode(kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind) + payload


def send_frame(sock: socket.socket, kind: int, payload: bytes = b"") -> None:
    """Send one frame; large payloads are not copied into the header's buffer."""
    if len(payload) < 65536:
        sock.sendall(HEADER.pack(len(payload), kind) + payload)
    else:
        sock.sendall(HEADER.pack(len(payload), kind))
        sock.sendall(payload)


class FrameReader:
    """Accumulates bytes from a socket and splits them into ``(kind, payload)`` frames.

    ``feed`` reads what is available (one ``recv``) and returns the complete frames; it returns
    ``None`` once the peer has closed the connection cleanly between frames.
    """

    def __init__(self, sock: socket.socket, chunk: int = 1 << 18, max_frame: int = MAX_FRAME):
        self.sock = sock
        self.chunk = chunk
        self.max_frame = max_frame
        self._buf = bytearray()
        #: a TLS socket's count of decrypted bytes it holds (None for a plain socket): a select()
        #: on the socket does not see them, so they are read with the bytes before them
        self._tls_pending = getattr(sock, "pending", None)

    def feed(self) -> list[tuple[int, bytes]] | None:
        data = self.sock.recv(self.chunk)
        if not data:
            if self._buf:
                raise FrameError(f"connection closed inside a frame ({len(self._buf)} bytes pending)")
            return None
        self._buf += data
        if self._tls_pending is not None:
            while self._tls_pending():
                self._buf += self.sock.recv(self.chunk)
        return self.drain_buffered()

    def drain_buffered(self) -> list[tuple[int, bytes]]:
        """The complete frames already buffered, without reading from the socket."""
        buf = self._buf
        frames: list[tuple[int, bytes]] = []
        pos = 0
        n = len(buf)
        while n - pos >= HEADER_SIZE:
            length, kind = HEADER.unpack_from(buf, pos)
            if length > self.max_frame:
                raise FrameError(f"frame of {length} bytes exceeds the limit of {self.max_frame}")
            end = pos + HEADER_SIZE + length
            if end > n:
                break
            frames.append((kind, bytes(buf[pos + HEADER_SIZE : end])))
            pos = end
        if pos:
            del buf[:pos]
        return frames

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """Blocking iteration over frames until the peer closes."""
        while True:
            got = self.feed()
            if got is None:
                return
            yield from got

    def read_one(self) -> tuple[int, bytes] | None:
        """Block until one frame is complete; frames beyond it stay buffered for the next call."""
        while True:
            if len(self._buf) >= HEADER_SIZE:
                length, kind = HEADER.unpack_from(self._buf, 0)
                if length > self.max_frame:
                    raise FrameError(f"frame of {length} bytes exceeds the limit of {self.max_frame}")
                if len(self._buf) >= HEADER_SIZE + length:
                    payload = bytes(self._buf[HEADER_SIZE : HEADER_SIZE + length])
                    del self._buf[: HEADER_SIZE + length]
                    return kind, payload
            data = self.sock.recv(self.chunk)
            if not data:
                if self._buf:
                    raise FrameError("connection closed inside a frame")
                return None
            self._buf += data

    @property
    def buffered(self) -> bool:
        """True when bytes are waiting in the reader (a select() on the socket would miss them)."""
        return len(self._buf) >= HEADER_SIZE or (self._tls_pending is not None and self._tls_pending() > 0)
