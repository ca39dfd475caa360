"""Asking a ZooKeeper server how it is: its four-letter words (``ruok``, ``srvr``, ``mntr``...),
and from ``srvr`` its mode (standalone, leader, follower) and version. A server that does not
answer, or does not serve requests (an ensemble member without quorum), gives None.
"""

from __future__ import annotations

import re
import socket

HOST = "127.0.0.1"


def four_letter_word(port: int, word: str, host: str = HOST, timeout_s: float = 1.0) -> str | None:
    """Send a four-letter command (``ruok``, ``srvr``, ``mntr``, ...); its answer, or None when
    the server does not answer."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(word.encode("ascii"))
            chunks = []
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", "replace")


def server_mode(port: int, host: str = HOST, timeout_s: float = 1.0) -> tuple[str | None, str | None]:
    """(mode, version) from ``srvr``: mode is standalone, leader or follower; None when the
    server does not answer or does not serve requests (an ensemble member without quorum)."""
    text = four_letter_word(port, "srvr", host, timeout_s)
    if not text:
        return None, None
    mode = re.search(r"^Mode: *(\S+)", text, re.M)
    version = re.search(r"^Zookeeper version: *([^,\s]+)", text, re.M)
    # Debian's build leaves an unexpanded "-${mvngit.commit.id}" in its version
    v = re.sub(r"-\$\{[^}]*\}$", "", version.group(1)) if version else None
    return (mode.group(1) if mode else None), v
