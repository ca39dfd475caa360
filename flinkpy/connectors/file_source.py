"""FileSource: the lines of text files on any fsspec file system, resumable at the exact line.

Built the way PyFlink builds it::

    FileSource.for_record_stream_format(StreamFormat.text_line_format(), "data/", "memory://x.txt")
        .process_static_file_set()
        .build()

Directories are expanded recursively to their files, sorted, skipping hidden files and
directories (names starting with ``.`` or ``_``, as Flink's default file filter does). File ``k``
of that list is read by subtask ``k % parallelism``. A reader's state is the list of its files
not yet finished, each with the byte offset of its next unread line: unlike Flink's
TextLineInputFormat, which re-reads and skips lines on recovery, a restored reader seeks straight
to the line. Offsets are exact because lines are split on the bytes, before decoding — which is
why only charsets in which ``"\\n"`` is the single byte 0x0A are accepted (UTF-8, ASCII,
Latin-1, ...; not UTF-16).

>>> import fsspec
>>> fsspec.filesystem("memory").pipe("/doc/lines.txt", b"a\\nb\\r\\nc")
>>> src = FileSource.for_record_stream_format(
...     StreamFormat.text_line_format(), "memory://doc/lines.txt").build()
>>> src.create_reader(ReaderContext(subtask_index=0, parallelism=1)).poll(10)
['a', 'b', 'c']
>>> fsspec.filesystem("memory").rm("/doc", recursive=True)
"""

from __future__ import annotations

import codecs
from datetime import timedelta
from typing import Any

import fsspec
from fsspec.spec import AbstractFileSystem

from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.errors import NotFoundError, UsageError

#: bytes read from a file per I/O call; large, so big files are read at memory speed
DEFAULT_BLOCK_SIZE = 1 << 20


def _to_millis(interval: Any) -> int:
    """Accept a flinkpy ``Duration``, a ``timedelta`` or a number of milliseconds."""
    if hasattr(interval, "to_milliseconds"):
        return int(interval.to_milliseconds())
    if isinstance(interval, timedelta):
        return int(interval.total_seconds() * 1000)
    if isinstance(interval, (int, float)):
        return int(interval)
    raise UsageError(
        f"cannot use {interval!r} as a time interval",
        remedy="pass a flinkpy.common.time.Duration, e.g. Duration.of_seconds(10)",
    )


class StreamFormat:
    """How a file's bytes become records; the one format so far reads text lines.

    >>> StreamFormat.text_line_format().charset_name
    'UTF-8'
    """

    def __init__(self, charset_name: str = "UTF-8") -> None:
        try:
            codec = codecs.lookup(charset_name)
        except LookupError:
            raise UsageError(
                f"unknown charset {charset_name!r} for text_line_format",
                remedy="use a charset Python knows, such as 'UTF-8' or 'ISO-8859-1'",
            ) from None
        if "\n".encode(codec.name) != b"\n":
            raise UsageError(
                f"charset {charset_name!r} is not supported by text_line_format: its newline is "
                "not the single byte 0x0A",
                remedy="convert the files to UTF-8, or use an ASCII-compatible charset",
            )
        self.charset_name = charset_name
        self._codec = codec.name

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> StreamFormat:
        """Lines of text decoded with ``charset_name``; the line terminator is not included."""
        return StreamFormat(charset_name)

    def __repr__(self) -> str:
        return f"StreamFormat.text_line_format({self.charset_name!r})"


def _qualified(fs: AbstractFileSystem, path: str) -> str:
    """A path that reopens on the same file system in another process (local paths stay plain)."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return path if protocol in ("file", "local") else fs.unstrip_protocol(path)


def _hidden(relative: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


def enumerate_files(paths: tuple[str, ...]) -> list[str]:
    """The files under ``paths`` in reading order: given order, directories expanded and sorted."""
    files: list[str] = []
    for url in paths:
        fs, root = fsspec.core.url_to_fs(url)
        if not fs.exists(root):
            raise NotFoundError(
                f"FileSource input path {url!r} does not exist",
                remedy="check the path and the file system URL (file://, memory://, s3://, ...)",
            )
        if fs.isdir(root):
            base = root.rstrip("/")
            found = sorted(
                p for p in fs.find(root) if not _hidden(p[len(base) :]) and not fs.isdir(p)
            )
            files.extend(_qualified(fs, p) for p in found)
        else:
            files.append(_qualified(fs, root))
    return files


class _LineCursor:
    """Reads lines of one file from a byte offset, a block at a time, keeping offsets exact."""

    def __init__(self, url: str, offset: int, codec: str, block_size: int) -> None:
        fs, path = fsspec.core.url_to_fs(url)
        self._file = fs.open(path, "rb")
        if offset:
            self._file.seek(offset)
        self.offset = offset  # byte offset of the next line not yet returned
        self._codec = codec
        self._block_size = block_size
        self._lines: list[bytes] = []  # complete lines of the current block
        self._next = 0
        self._tail = b""  # the unfinished last line of the blocks read so far
        self._has_cr = False
        self._unterminated = False  # self._lines is the file's last line, without a newline
        self.done = False

    def read(self, limit: int) -> list[str]:
        out: list[str] = []
        while len(out) < limit:
            if self._next >= len(self._lines) and not self._fill():
                self.done = True
                break
            take = self._lines[self._next : self._next + limit - len(out)]
            self._next += len(take)
            self.offset += sum(map(len, take)) + len(take) - (1 if self._unterminated else 0)
            codec = self._codec
            text = [line.decode(codec, "replace") for line in take]
            if self._has_cr:  # "\r\n" ends a line too
                text = [t[:-1] if t.endswith("\r") else t for t in text]
            out.extend(text)
        return out

    def _fill(self) -> bool:
        """Load the next block's complete lines; False at the end of the file."""
        while True:
            chunk = self._file.read(self._block_size)
            if not chunk:
                if not self._tail:
                    return False
                self._lines, self._next, self._tail = [self._tail], 0, b""
                self._has_cr = self._lines[0].endswith(b"\r")
                self._unterminated = True
                return True
            data = self._tail + chunk if self._tail else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                self._tail = data
                continue
            self._lines = data[:cut].split(b"\n")
            self._next = 0
            self._tail = data[cut + 1 :]
            self._has_cr = b"\r" in data
            return True

    def close(self) -> None:
        self._file.close()


class FileSourceReader(SourceReader):
    """Reads its files in order; its state is ``[[file index, path, next line offset], ...]``."""

    def __init__(
        self,
        ctx: ReaderContext,
        files: list[list[Any]],
        stream_format: StreamFormat,
        block_size: int = DEFAULT_BLOCK_SIZE,
        continuous: bool = False,
    ) -> None:
        self._ctx = ctx
        self._continuous = continuous
        self._files = files  # still to read, the first one possibly begun
        self._codec = stream_format._codec
        self._block_size = block_size
        self._cursor: _LineCursor | None = None

    def poll(self, max_records: int) -> list | None:
        out: list[str] = []
        while len(out) < max_records and self._files:
            if self._cursor is None:
                _, url, offset = self._files[0]
                self._cursor = _LineCursor(url, offset, self._codec, self._block_size)
            out.extend(self._cursor.read(max_records - len(out)))
            self._files[0][2] = self._cursor.offset
            if self._cursor.done:
                self._cursor.close()
                self._cursor = None
                self._files.pop(0)
        if not out and not self._files and not self._continuous:
            return None
        return out

    def snapshot_state(self) -> dict[str, Any]:
        return {
            "subtask": self._ctx.subtask_index,
            "parallelism": self._ctx.parallelism,
            "files": [list(entry) for entry in self._files],
        }

    def close(self) -> None:
        if self._cursor is not None:
            self._cursor.close()
            self._cursor = None


def _restore_files(states: list[Any], ctx: ReaderContext) -> list[list[Any]]:
    """The files a restored reader owns; the same redistribution rule as the range sources."""
    by_subtask = {int(s["subtask"]): s for s in states}
    old_parallelism = int(next(iter(by_subtask.values()))["parallelism"])
    pooled = sorted(
        ([int(i), str(url), int(off)] for s in by_subtask.values() for i, url, off in s["files"]),
        key=lambda entry: entry[0],
    )
    if set(by_subtask) == set(range(old_parallelism)):  # every old subtask's state: re-split
        return [e for e in pooled if e[0] % ctx.parallelism == ctx.subtask_index]
    return pooled


class FileSource(Source):
    """A source of the lines of files; build it with :meth:`for_record_stream_format`."""

    def __init__(
        self,
        stream_format: StreamFormat,
        paths: tuple[str, ...],
        discovery_interval_ms: int | None = None,
    ) -> None:
        self.stream_format = stream_format
        self.paths = paths
        #: set by ``monitor_continuously``; discovering new files is not implemented yet
        self.discovery_interval_ms = discovery_interval_ms
        self.boundedness = (
            Boundedness.BOUNDED
            if discovery_interval_ms is None
            else Boundedness.CONTINUOUS_UNBOUNDED
        )

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> FileSourceBuilder:
        """Start building a source that reads ``paths`` (files or directories) record by record."""
        if not paths:
            raise UsageError(
                "FileSource.for_record_stream_format needs at least one path",
                remedy="pass the files or directories to read after the format",
            )
        return FileSourceBuilder(stream_format, tuple(str(p) for p in paths))

    def create_reader(self, ctx: ReaderContext) -> FileSourceReader:
        if ctx.restored_state:
            files = _restore_files(ctx.restored_state, ctx)
        else:
            files = [
                [index, url, 0]
                for index, url in enumerate(enumerate_files(self.paths))
                if index % ctx.parallelism == ctx.subtask_index
            ]
        continuous = self.boundedness is Boundedness.CONTINUOUS_UNBOUNDED
        return FileSourceReader(ctx, files, self.stream_format, continuous=continuous)

    def get_boundedness(self) -> Boundedness:
        return self.boundedness

    def __repr__(self) -> str:
        return f"FileSource({self.stream_format!r}, {list(self.paths)!r})"


class FileSourceBuilder:
    """Configures a :class:`FileSource`; bounded ("static file set") unless told otherwise."""

    def __init__(self, stream_format: StreamFormat, paths: tuple[str, ...]) -> None:
        self._format = stream_format
        self._paths = paths
        self._discovery_interval_ms: int | None = None

    def monitor_continuously(self, discovery_interval: Any) -> FileSourceBuilder:
        """Make the source unbounded, looking for new files every ``discovery_interval``.

        Accepted and recorded; the discovery of new files itself is not implemented yet, so such
        a source reads the files present at start and then stays idle without ending.
        """
        millis = _to_millis(discovery_interval)
        if millis <= 0:
            raise UsageError(
                f"monitor_continuously: discovery interval must be positive, got {millis} ms",
                remedy="pass e.g. Duration.of_seconds(10)",
            )
        self._discovery_interval_ms = millis
        return self

    def process_static_file_set(self) -> FileSourceBuilder:
        """Read the files present at start, then end (the default)."""
        self._discovery_interval_ms = None
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._discovery_interval_ms)
