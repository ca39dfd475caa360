"""A cluster process's log files: written with rotation by size, read from the end, followed.

A JobManager or TaskManager runs for weeks, and what it and its tasks write (the ``.log``: its
logging and anything on stderr; a TaskManager's ``.out``: what the jobs print) would grow without
bound in a plain redirect. The process therefore points its own stdout/stderr at a pipe and one
thread copies the pipe into a :class:`RotatingFile`: when the next write would pass the size
limit, ``X`` becomes ``X.1`` (``X.1`` becomes ``X.2``, ...; the oldest beyond the backup count
is deleted) and a new ``X`` starts. The pipe, not a logging handler, is what makes this work for
``.out``: task processes inherit the TaskManager's stdout and print into it directly, and
tracebacks, warnings and prints of any library land on the same file descriptors.

Readers never load a whole file: :func:`tail` reads backwards from the end until it has the
lines it needs, and :func:`follow` streams what is appended, across rotations, like ``tail -F``.

>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> f = RotatingFile(os.path.join(d, "tm.out"), max_bytes=10, backups=1)
>>> for line in (b"one\\n", b"two\\n", b"three\\n", b"four\\n"):
...     f.write(line)
>>> f.close()
>>> sorted(os.listdir(d)), tail(os.path.join(d, "tm.out"), 1)
(['tm.out', 'tm.out.1'], b'four\\n')
"""

from __future__ import annotations

import atexit
import os
import select
import socket
import threading
import time
from typing import Callable, Iterator

_CHUNK = 64 * 1024
#: the most a tail request returns, whatever the number of lines asked for
TAIL_LIMIT = 8 << 20


class RotatingFile:
    """An append-only file that rotates to ``path.1`` ... ``path.<backups>`` past ``max_bytes``
    (0: never). Thread-safe."""

    def __init__(self, path: str, *, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        self._file = open(path, "ab", buffering=0)
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        with self._lock:
            if self.max_bytes and self._size and self._size + len(data) > self.max_bytes:
                self._rotate()
            self._file.write(data)
            self._size += len(data)

    def _rotate(self) -> None:
        self._file.close()
        try:
            if self.backups:
                for i in range(self.backups - 1, 0, -1):
                    if os.path.exists(f"{self.path}.{i}"):
                        os.replace(f"{self.path}.{i}", f"{self.path}.{i + 1}")
                os.replace(self.path, f"{self.path}.1")
            else:
                os.unlink(self.path)
        except OSError:
            pass  # someone moved or removed it: start a new file all the same
        self._file = open(self.path, "ab", buffering=0)
        self._size = self._file.tell()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def redirect(fds: tuple[int, ...], path: str, *, max_bytes: int, backups: int) -> None:
    """Send what this process (and every child it starts from now on) writes to ``fds`` into
    ``path``, rotated by size. At exit the pipe is drained, so a last traceback is not lost."""
    out = RotatingFile(path, max_bytes=max_bytes, backups=backups)
    read_end, write_end = os.pipe()
    for fd in fds:
        os.dup2(write_end, fd)
    os.close(write_end)

    def pump() -> None:
        while True:
            try:
                chunk = os.read(read_end, _CHUNK)
            except OSError:
                return
            if not chunk:
                return
            try:
                out.write(chunk)
            except OSError:
                pass  # a full disk must not stop the process: the bytes are dropped

    thread = threading.Thread(target=pump, name=f"log-pump-{os.path.basename(path)}", daemon=True)
    thread.start()

    def drain() -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in fds:
            os.dup2(devnull, fd)  # our write ends closed: the pump sees the end (unless children still write)
        os.close(devnull)
        thread.join(timeout=1.0)

    atexit.register(drain)


def rotate_process_output(*, max_bytes: int, backups: int) -> None:
    """Rotate this cluster process's output files, named by its launcher in the environment:
    ``FLINKPY_LOG_FILE`` takes stderr (and stdout when stdout was redirected to the same file),
    ``FLINKPY_STDOUT_FILE`` (when set) takes stdout. A process started otherwise is left alone."""
    log_file, out_file = os.environ.get("FLINKPY_LOG_FILE"), os.environ.get("FLINKPY_STDOUT_FILE")
    if not log_file:
        return
    try:
        same = (os.fstat(1).st_ino, os.fstat(1).st_dev) == (os.fstat(2).st_ino, os.fstat(2).st_dev)
    except OSError:
        same = False
    redirect((1, 2) if same and not out_file else (2,), log_file, max_bytes=max_bytes, backups=backups)
    if out_file:
        redirect((1,), out_file, max_bytes=max_bytes, backups=backups)


def files_of(path: str) -> list[dict[str, object]]:
    """``path`` and its rotated files (``path.1``, ``path.2``, ...) that exist, newest first,
    each as Flink's ``{"name", "size", "mtime"}`` (mtime in ms) plus its ``path``.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> f = RotatingFile(os.path.join(d, "tm.out"), max_bytes=10, backups=2)
    >>> for line in (b"one\\n", b"two\\n", b"three\\n"):
    ...     f.write(line)
    >>> f.close()
    >>> [(x["name"], x["size"]) for x in files_of(os.path.join(d, "tm.out"))]
    [('tm.out', 6), ('tm.out.1', 8)]
    """
    out: list[dict[str, object]] = []
    candidates = [path] + [f"{path}.{i}" for i in range(1, _rotated_count(path) + 1)]
    for candidate in candidates:
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        out.append({"name": os.path.basename(candidate), "size": st.st_size, "mtime": int(st.st_mtime * 1000), "path": candidate})
    return out


def _rotated_count(path: str) -> int:
    """The highest N with ``path.N`` in the directory (the backup count may have changed since)."""
    directory, base = os.path.split(path)
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return 0
    numbers = [int(n[len(base) + 1:]) for n in names if n.startswith(base + ".") and n[len(base) + 1:].isdigit()]
    return max(numbers, default=0)


def tail(path: str, lines: int) -> bytes:
    """The last ``lines`` lines of ``path`` (at most :data:`TAIL_LIMIT` bytes), read backwards
    in blocks: the cost follows what is returned, not the size of the file. b"" when missing."""
    try:
        f = open(path, "rb")
    except OSError:
        return b""
    with f:
        end = f.seek(0, os.SEEK_END)
        pos, data = end, b""
        # one newline more than lines: the file's last line usually ends with one
        while pos > 0 and data.count(b"\n") <= lines and len(data) < TAIL_LIMIT:
            step = min(_CHUNK, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    body = data.rstrip(b"\n")
    kept = body.split(b"\n")[-lines:] if lines > 0 else []
    text = b"\n".join(kept)[-TAIL_LIMIT:]
    return text + b"\n" if text else b""


def follow(path: str, *, alive: Callable[[], bool], peer: socket.socket | None = None, poll_s: float = 0.2) -> Iterator[bytes]:
    """What is appended to ``path`` from now on, across rotations (the file replaced under its
    name) and truncations, until ``alive()`` turns false (the process whose file it is ended)
    or ``peer`` (the client's socket) closes."""
    f = _open_at_end(path)
    try:
        while True:
            chunk = f.read(_CHUNK) if f else b""
            if chunk:
                yield chunk
                continue
            newer = _reopen_if_rotated(path, f)
            if newer is not f:
                f = newer  # read the new file (after what the old one got last) at once
                continue
            if not alive():
                return
            if peer is not None and _peer_closed(peer, poll_s):
                return
            if peer is None:
                time.sleep(poll_s)
    finally:
        if f is not None:
            f.close()


def _open_at_end(path: str):  # type: ignore[no-untyped-def]
    try:
        f = open(path, "rb")
    except OSError:
        return None
    f.seek(0, os.SEEK_END)
    return f


def _reopen_if_rotated(path: str, f):  # type: ignore[no-untyped-def]
    """The file now under ``path`` when it is another one than ``f`` (or shorter: truncated)."""
    try:
        st = os.stat(path)
    except OSError:
        return f
    if f is None:
        return open(path, "rb")
    mine = os.fstat(f.fileno())
    if (st.st_ino, st.st_dev) != (mine.st_ino, mine.st_dev):
        rest = f.read()  # what the old file got after our last read is lost otherwise
        f.close()
        new = open(path, "rb")
        if rest:  # hand it over by putting the new file's reader behind it
            return _Prefixed(rest, new)
        return new
    if st.st_size < f.tell():
        f.seek(0)
    return f


class _Prefixed:
    """A file reader that first returns ``prefix`` (the end of a rotated file)."""

    def __init__(self, prefix: bytes, f) -> None:  # type: ignore[no-untyped-def]
        self.prefix, self.f = prefix, f

    def read(self, n: int = -1) -> bytes:
        if self.prefix:
            out, self.prefix = self.prefix, b""
            return out
        return self.f.read(n)

    def tell(self) -> int:
        return self.f.tell()

    def seek(self, pos: int) -> int:
        return self.f.seek(pos)

    def fileno(self) -> int:
        return self.f.fileno()

    def close(self) -> None:
        self.f.close()


def _peer_closed(sock: socket.socket, wait_s: float) -> bool:
    """Wait up to ``wait_s`` for the client to close its side (a follower sends nothing more)."""
    try:
        ready, _, _ = select.select([sock], [], [], wait_s)
        if not ready:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True
