"""Mutual HMAC-SHA256 challenge on a fresh connection, before any payload is deserialized.

Both sides know the cluster's secret. The acceptor sends a random nonce; the connector answers
with HMAC(secret, "connector" + nonce) and its own nonce; the acceptor checks it and answers with
HMAC(secret, "acceptor" + nonce'). Only fixed-size raw bytes cross the wire during the exchange,
so a peer without the secret can neither make us unpickle anything nor learn anything but a
nonce. The exchange has a deadline so a silent peer cannot hold a thread.

>>> import socket
>>> a, b = socket.socketpair()
>>> import threading; t = threading.Thread(target=accept_handshake, args=(a, b"k")); t.start()
>>> connect_handshake(b, b"k"); t.join()
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import socket
import stat
from pathlib import Path
from typing import Iterator

from flinkpy.errors import ConfigurationError

NONCE = 32
DIGEST = hashlib.sha256().digest_size
MAGIC = b"FLKP1"


class AuthenticationFailed(ConnectionError):
    """The peer does not know the cluster's secret (or does not speak flinkpy)."""


def read_secret(path: str | os.PathLike[str]) -> str:
    """The cluster's secret from ``path``, refused when anyone but its owner may read it.

    As ssh does with a private key: a secret that others could have read is no longer one, and
    using it silently would let the operator believe the cluster is closed to them. Raises
    ``FileNotFoundError`` when there is none, ``ConfigurationError`` (exit 8) for a loose mode.
    """
    path = Path(path)
    with open(path) as f:
        mode = os.fstat(f.fileno()).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigurationError(
                f"the cluster secret {path} is accessible by others (mode {stat.S_IMODE(mode):04o}): it is refused",
                remedy=f"run 'chmod 600 {path}' (or delete it and start the cluster again for a new secret)",
            )
        return f.read().strip()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise AuthenticationFailed("peer closed the connection during the handshake")
        data += chunk
    return bytes(data)


def _mac(secret: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, role + nonce, hashlib.sha256).digest()


@contextlib.contextmanager
def _handshake(sock: socket.socket, timeout: float) -> Iterator[None]:
    """The socket under the handshake's deadline, its own timeout back afterwards; a socket error
    or a silent peer as AuthenticationFailed."""
    previous = sock.gettimeout()
    sock.settimeout(timeout)
    try:
        yield
    except (socket.timeout, OSError) as e:
        if isinstance(e, AuthenticationFailed):
            raise
        raise AuthenticationFailed(f"handshake failed: {e}") from e
    finally:
        try:
            sock.settimeout(previous)
        except OSError:
            pass


def accept_handshake(sock: socket.socket, secret: bytes, timeout: float = 5.0) -> None:
    """Run the acceptor's side; raises AuthenticationFailed (the caller closes the socket)."""
    with _handshake(sock, timeout):
        nonce = os.urandom(NONCE)
        sock.sendall(MAGIC + nonce)
        answer = _recv_exact(sock, len(MAGIC) + DIGEST + NONCE)
        if answer[: len(MAGIC)] != MAGIC:
            raise AuthenticationFailed("peer does not speak the flinkpy protocol")
        digest = answer[len(MAGIC) : len(MAGIC) + DIGEST]
        if not hmac.compare_digest(digest, _mac(secret, b"connector", nonce)):
            sock.sendall(b"\x00")
            raise AuthenticationFailed("peer does not know the cluster secret")
        their_nonce = answer[len(MAGIC) + DIGEST :]
        sock.sendall(b"\x01" + _mac(secret, b"acceptor", their_nonce))


def connect_handshake(sock: socket.socket, secret: bytes, timeout: float = 5.0) -> None:
    """Run the connector's side; raises AuthenticationFailed."""
    with _handshake(sock, timeout):
        hello = _recv_exact(sock, len(MAGIC) + NONCE)
        if hello[: len(MAGIC)] != MAGIC:
            raise AuthenticationFailed("peer does not speak the flinkpy protocol")
        my_nonce = os.urandom(NONCE)
        sock.sendall(MAGIC + _mac(secret, b"connector", hello[len(MAGIC) :]) + my_nonce)
        verdict = _recv_exact(sock, 1)
        if verdict != b"\x01":
            raise AuthenticationFailed("the peer refused our credentials: wrong cluster secret")
        proof = _recv_exact(sock, DIGEST)
        if not hmac.compare_digest(proof, _mac(secret, b"acceptor", my_nonce)):
            raise AuthenticationFailed("the peer could not prove it knows the cluster secret")
