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
import time
import zlib
from datetime import timedelta
from typing import Any, Callable, NamedTuple

import fsspec
from fsspec.spec import AbstractFileSystem

from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.errors import ExitCode, FlinkpyError, NotFoundError, UsageError

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
    """How a file's bytes become records: lines of text, or lines each read by a
    DeserializationSchema (:meth:`for_deserialization_schema`).

    >>> StreamFormat.text_line_format().charset_name
    'UTF-8'
    """

    #: turns each line (its bytes, without the line terminator) into a record; None: the text
    deserializer: Any = None

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

    @staticmethod
    def for_deserialization_schema(schema: Any, charset_name: str = "UTF-8") -> StreamFormat:
        """Lines, each handed to ``schema.deserialize`` as bytes (in ``charset_name``) to become a
        record; a line it returns None for is skipped (a comment, or a bad record with its
        ``ignore_parse_errors``). Files of JSON lines or CSV records, with the schemas of
        ``flinkpy.datastream.formats.json`` / ``.csv``; not in PyFlink, which reads CSV files with
        a CsvReaderFormat.

        >>> from flinkpy.common import Types
        >>> from flinkpy.datastream.formats.csv import CsvRowDeserializationSchema
        >>> StreamFormat.for_deserialization_schema(CsvRowDeserializationSchema.Builder(Types.ROW([Types.INT()])).build())
        StreamFormat.for_deserialization_schema(CsvRowDeserializationSchema(ROW(INT)), 'UTF-8')
        """
        if not callable(getattr(schema, "deserialize", None)):
            raise UsageError(f"for_deserialization_schema needs a DeserializationSchema, got {type(schema).__name__}")
        fmt = StreamFormat(charset_name)
        fmt.deserializer = schema
        return fmt

    def __repr__(self) -> str:
        if self.deserializer is not None:
            return f"StreamFormat.for_deserialization_schema({self.deserializer!r}, {self.charset_name!r})"
        return f"StreamFormat.text_line_format({self.charset_name!r})"


def _qualified(fs: AbstractFileSystem, path: str) -> str:
    """A path that reopens on the same file system in another process (local paths stay plain)."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return path if protocol in ("file", "local") else fs.unstrip_protocol(path)


def _hidden(relative: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


def enumerate_files(paths: tuple[str, ...], missing_ok: bool = False) -> list[str]:
    """The files under ``paths`` in reading order: given order, directories expanded and sorted.
    A missing path is an error, unless ``missing_ok`` (a monitored directory may appear later)."""
    files: list[str] = []
    for url in paths:
        fs, root = fsspec.core.url_to_fs(url)
        if hasattr(fs, "invalidate_cache"):
            fs.invalidate_cache()  # remote file systems cache listings: new files must show
        if not fs.exists(root):
            if missing_ok:
                continue
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


class MalformedLine(NamedTuple):
    """A line that could not be decoded: where it is, its bytes, and why.

    What a FileSource emits to the side output named with
    :meth:`FileSourceBuilder.with_malformed_line_output`."""

    path: str
    offset: int  # byte offset of the line's first byte in the file
    data: bytes
    reason: str


class MalformedLineError(FlinkpyError):
    """A line of a FileSource's input cannot be decoded with the format's charset."""

    exit_code = ExitCode.JOB_FAILED


class _LineCursor:
    """Reads lines of one file from a byte offset, a block at a time, keeping offsets exact."""

    def __init__(
        self,
        url: str,
        offset: int,
        codec: str,
        block_size: int,
        on_malformed: Callable[[MalformedLine], None] | None = None,
    ) -> None:
        fs, path = fsspec.core.url_to_fs(url)
        self._url = url
        self._file = fs.open(path, "rb")
        if offset:
            self._file.seek(offset)
        self.offset = offset  # byte offset of the next line not yet returned
        self._codec = codec
        self._block_size = block_size
        self._on_malformed = on_malformed
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
            codec = self._codec
            try:
                text = [line.decode(codec) for line in take]
            except UnicodeDecodeError:
                text = self._decode_slowly(take)
            self._next += len(take)
            self.offset += sum(map(len, take)) + len(take) - (1 if self._unterminated else 0)
            if self._has_cr:  # "\r\n" ends a line too
                text = [t[:-1] if t.endswith("\r") else t for t in text]
            out.extend(text)
        return out

    def _decode_slowly(self, take: list[bytes]) -> list[str]:
        """Decode line by line: a malformed line goes to the handler (or fails the read with
        its file and offset); the others are returned."""
        text: list[str] = []
        offset = self.offset
        for line in take:
            try:
                text.append(line.decode(self._codec))
            except UnicodeDecodeError as e:
                bad = MalformedLine(self._url, offset, line, f"not valid {self._codec} at byte {e.start} of the line: {e.reason}")
                if self._on_malformed is None:
                    raise MalformedLineError(
                        f"malformed line in {self._url} at byte offset {offset}: {bad.reason}",
                        remedy="fix or remove the line, read the file with its real charset "
                        "(text_line_format(charset_name)), or route such lines to a side output "
                        "with FileSourceBuilder.with_malformed_line_output(tag)",
                    ) from None
                self._on_malformed(bad)
            offset += len(line) + 1
        return text

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


def owner_of(url: str, parallelism: int) -> int:
    """The subtask that reads a file discovered in a monitored directory: a stable hash of its
    path (the same in every process and run), so that readers share discovered files without
    talking to each other."""
    return zlib.crc32(url.encode()) % parallelism


class FileSourceReader(SourceReader):
    """Reads its files in order; its state is ``[[file index, path, next line offset], ...]``
    plus, when monitoring, the paths it has finished (so a restart does not read them again)."""

    def __init__(
        self,
        ctx: ReaderContext,
        files: list[list[Any]],
        stream_format: StreamFormat,
        block_size: int = DEFAULT_BLOCK_SIZE,
        *,
        paths: tuple[str, ...] = (),
        discovery_interval_ms: int | None = None,
        processed: set[str] | None = None,
        malformed_tag: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ctx = ctx
        self._files = files  # still to read, the first one possibly begun
        self._codec = stream_format._codec
        self._deserializer = getattr(stream_format, "deserializer", None)
        self._block_size = block_size
        self._cursor: _LineCursor | None = None
        self._paths = paths
        self._interval_s = None if discovery_interval_ms is None else discovery_interval_ms / 1000.0
        self._processed: set[str] = set(processed or ())
        self._clock = clock
        self._next_discovery: float | None = None  # None: discover at the first poll
        self._on_malformed: Callable[[MalformedLine], None] | None = None
        if malformed_tag is not None:
            emit = ctx.side_output
            if emit is None:
                raise UsageError("this FileSource routes malformed lines to a side output, but the engine gave its reader none")
            self._on_malformed = lambda bad: emit(malformed_tag, [bad])

    @property
    def continuous(self) -> bool:
        return self._interval_s is not None

    def _discover(self) -> None:
        """Add the files that appeared in the monitored paths since the last look."""
        known = self._processed | {entry[1] for entry in self._files}
        p, me = self._ctx.parallelism, self._ctx.subtask_index
        for url in enumerate_files(self._paths, missing_ok=True):
            if url not in known and owner_of(url, p) == me:
                self._files.append([-1, url, 0])

    def poll(self, max_records: int) -> list | None:
        if self._interval_s is not None:
            now = self._clock()
            if self._next_discovery is None or now >= self._next_discovery:
                self._discover()
                self._next_discovery = now + self._interval_s
        out: list[str] = []
        while len(out) < max_records and self._files:
            if self._cursor is None:
                _, url, offset = self._files[0]
                self._cursor = _LineCursor(url, offset, self._codec, self._block_size, self._on_malformed)
            lines = self._cursor.read(max_records - len(out))
            out.extend(lines if self._deserializer is None else self._records(lines, self._files[0][1]))
            self._files[0][2] = self._cursor.offset
            if self._cursor.done:
                self._cursor.close()
                self._cursor = None
                done = self._files.pop(0)
                if self.continuous:
                    self._processed.add(done[1])
        if not out and not self._files and not self.continuous:
            return None
        return out

    def _records(self, lines: list[str], url: str) -> list:
        """The records of ``lines`` by the format's DeserializationSchema (None: skipped)."""
        deserialize, codec = self._deserializer.deserialize, self._codec
        try:
            records = [deserialize(line.encode(codec)) for line in lines]
        except FlinkpyError as e:
            raise type(e)(f"{url}: {e.message}", remedy=e.remedy) from None
        return [r for r in records if r is not None]

    def snapshot_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "subtask": self._ctx.subtask_index,
            "parallelism": self._ctx.parallelism,
            "files": [list(entry) for entry in self._files],
        }
        if self.continuous:
            state["processed"] = sorted(self._processed)
        return state

    def close(self) -> None:
        if self._cursor is not None:
            self._cursor.close()
            self._cursor = None


def _restore_files(states: list[Any], ctx: ReaderContext, continuous: bool) -> tuple[list[list[Any]], set[str]]:
    """The files a restored reader owns, and (monitoring) the paths already read.

    With every old subtask's state at hand (a full restart, possibly at another parallelism)
    the pooled files are re-split: by index for a static file set (the rule of the first
    start), by :func:`owner_of` for discovered files. Otherwise (one region restarted) the
    subtask keeps what its predecessor had.
    """
    by_subtask = {int(s["subtask"]): s for s in states}
    old_parallelism = int(next(iter(by_subtask.values()))["parallelism"])
    pooled = sorted(
        ([int(i), str(url), int(off)] for s in by_subtask.values() for i, url, off in s["files"]),
        key=lambda entry: (entry[0], entry[1]),
    )
    processed = {str(u) for s in by_subtask.values() for u in s.get("processed", [])}
    if set(by_subtask) != set(range(old_parallelism)):
        return pooled, processed
    p, me = ctx.parallelism, ctx.subtask_index

    def mine(entry: list[Any]) -> bool:
        if entry[0] >= 0 and not continuous:
            return entry[0] % p == me
        return owner_of(entry[1], p) == me

    return [e for e in pooled if mine(e)], {u for u in processed if owner_of(u, p) == me}


class FileSource(Source):
    """A source of the lines of files; build it with :meth:`for_record_stream_format`."""

    guarantee = "exactly-once"
    needs = "checkpointing; files not modified once visible (write elsewhere, then move them in)"

    def __init__(
        self,
        stream_format: StreamFormat,
        paths: tuple[str, ...],
        discovery_interval_ms: int | None = None,
        malformed_tag: str | None = None,
    ) -> None:
        self.stream_format = stream_format
        self.paths = paths
        #: set by ``monitor_continuously``: how often the paths are listed for new files
        self.discovery_interval_ms = discovery_interval_ms
        #: set by ``with_malformed_line_output``: the side output of undecodable lines
        self.malformed_tag = malformed_tag
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
        continuous = self.discovery_interval_ms is not None
        processed: set[str] = set()
        if ctx.restored_state:
            files, processed = _restore_files(ctx.restored_state, ctx, continuous)
        elif continuous:
            files = []  # the first poll discovers what is there
        else:
            files = [
                [index, url, 0]
                for index, url in enumerate(enumerate_files(self.paths))
                if index % ctx.parallelism == ctx.subtask_index
            ]
        return FileSourceReader(
            ctx,
            files,
            self.stream_format,
            paths=self.paths,
            discovery_interval_ms=self.discovery_interval_ms,
            processed=processed,
            malformed_tag=self.malformed_tag,
        )

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
        self._malformed_tag: str | None = None

    def monitor_continuously(self, discovery_interval: Any) -> FileSourceBuilder:
        """Make the source unbounded: every ``discovery_interval`` the paths are listed again
        and files not seen before are read (each by one subtask, chosen by a hash of its path).

        Files must be complete when they become visible — write them under a hidden name
        (starting with ``.`` or ``_``) or elsewhere and rename them in; a file that grows after
        it was read is not read again. The paths already read are part of the checkpoint, so
        a restored source neither skips nor repeats a file.
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

    def with_malformed_line_output(self, output_tag: Any) -> FileSourceBuilder:
        """Route lines that cannot be decoded to the side output ``output_tag`` as
        :class:`MalformedLine` records (path, byte offset, bytes, reason) instead of failing
        the job; read them with ``stream.get_side_output(output_tag)``."""
        tag_id = getattr(output_tag, "tag_id", None)
        if not tag_id:
            raise UsageError(
                f"with_malformed_line_output() needs an OutputTag, got {type(output_tag).__name__}",
                remedy="pass OutputTag('malformed')",
            )
        self._malformed_tag = tag_id
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._discovery_interval_ms, self._malformed_tag)
