"""The canonical keyed-state file, written and read as a stream.

A full snapshot of keyed state (every savepoint, and every checkpoint that is not incremental)
is stored in one backend-independent encoding, so that a snapshot of either backend restores
into either backend at any parallelism. The document it encodes is the one described in
flinkpy.state.backend; the file holds it as a sequence of pickles (protocol 5), so that neither
the writer nor the reader ever holds a whole subtask's state in memory — state larger than
memory lives in the RocksDB backend, and its savepoints must not need it in memory::

    header  {"version": 1, "framed": True, "states": {name: {"kind": k[, "ttl_ms": t]}}}
    frame   (name, key_group, [(key, value), ...])      at most FRAME_ENTRIES keys
    ...
    end     None

Frames of one state and key group may repeat (a large key group is cut into several); a key
appears in one frame only (a map state's key with all its entries). The end marker tells a
complete file from a truncated one. A file with a single pickle is read as a whole document
(the encoding before framing, and any non-keyed state file).

>>> import io
>>> out = io.BytesIO()
>>> w = FrameWriter(out, {"count": {"kind": "value"}})
>>> w.add("count", 7, "a", 1); w.add("count", 7, "b", 2); w.add("count", 9, "c", 3)
>>> w.close()
{'count': 3}
>>> loads(out.getvalue())["states"]["count"]["key_groups"]
{7: {'a': 1, 'b': 2}, 9: {'c': 3}}
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterator, Mapping
from typing import IO, Any, Callable

from flinkpy.errors import FlinkpyError
from flinkpy.state.backend import SNAPSHOT_VERSION, check_snapshot_version

#: keys per frame: bounds what the writer buffers and the reader holds at once
FRAME_ENTRIES = 4096

#: (state name, key group, [(key, value), ...])
Frame = tuple[str, int, list[tuple[Any, Any]]]


class FrameWriter:
    """Writes a canonical file: ``add`` keys in any order of states and key groups (consecutive
    keys of one state and key group share a frame), then ``close``."""

    def __init__(self, out: IO[bytes], states: Mapping[str, Mapping[str, Any]]) -> None:
        self._out = out
        self._pickler = pickle.Pickler(out, protocol=5)
        self._pickler.dump({"version": SNAPSHOT_VERSION, "framed": True, "states": {n: dict(s) for n, s in states.items()}})
        self._pickler.clear_memo()
        self._counts = {name: 0 for name in states}
        self._current: tuple[str, int] | None = None
        self._entries: list[tuple[Any, Any]] = []

    def add(self, name: str, key_group: int, key: Any, value: Any) -> None:
        if self._current != (name, key_group) or len(self._entries) >= FRAME_ENTRIES:
            self._flush()
            self._current = (name, key_group)
        self._entries.append((key, value))
        self._counts[name] += 1

    def _flush(self) -> None:
        if self._entries:
            name, kg = self._current  # type: ignore[misc]
            self._pickler.dump((name, kg, self._entries))
            self._pickler.clear_memo()  # frames share nothing: the memo would grow with the file
            self._entries = []

    def close(self) -> dict[str, int]:
        """Write the last frame and the end marker; return the number of keys of each state."""
        self._flush()
        self._pickler.dump(None)
        return dict(self._counts)


def read_frames(f: IO[bytes], unpickle: Callable[[IO[bytes]], Any] = pickle.load) -> tuple[dict[str, dict[str, Any]], Iterator[Frame]]:
    """The states (name → kind and TTL) of a canonical file and an iterator over its frames.

    A whole-document file gives its key groups as one frame each. A framed file that ends before
    its end marker raises ``FlinkpyError`` when the iterator reaches the cut. ``unpickle``
    decodes each pickle (as in :func:`load`).
    """
    first = unpickle(f)
    if not (isinstance(first, dict) and first.get("framed")):
        return document_frames(first)
    check_snapshot_version(first)
    return {n: dict(s) for n, s in first["states"].items()}, _frames(f, unpickle)


def _frames(f: IO[bytes], unpickle: Callable[[IO[bytes]], Any] = pickle.load) -> Iterator[Frame]:
    while (frame := _next_frame(f, unpickle)) is not None:
        yield frame


def _next_frame(f: IO[bytes], unpickle: Callable[[IO[bytes]], Any] = pickle.load) -> Frame | None:
    try:
        return unpickle(f)  # one unpickler per frame: no memo carried over
    except (EOFError, pickle.UnpicklingError):
        raise FlinkpyError(
            "the keyed state file is cut short or damaged (it ends before its end marker)",
            remedy="restore from another checkpoint or savepoint (flinkpy checkpoint list)",
        ) from None


def document_frames(doc: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], Iterator[Frame]]:
    """The states and frames of a canonical document held in memory."""
    check_snapshot_version(doc)
    states = {name: {k: v for k, v in entry.items() if k != "key_groups"} for name, entry in doc["states"].items()}

    def frames() -> Iterator[Frame]:
        for name, entry in doc["states"].items():
            for kg, m in entry["key_groups"].items():
                if m:
                    yield name, int(kg), list(m.items())

    return states, frames()


def load(f: IO[bytes], unpickle: Callable[[IO[bytes]], Any] = pickle.load) -> Any:
    """What a state file holds: a keyed-state file as its canonical document (whichever
    encoding), any other state file as the object it pickled. ``unpickle`` decodes each
    pickle (``flinkpy.state.safe_pickle.load`` to refuse classes that could run code)."""
    first = unpickle(f)
    if not (isinstance(first, dict) and first.get("framed")):
        return first
    check_snapshot_version(first)
    states: dict[str, dict[str, Any]] = {n: dict(s, key_groups={}) for n, s in first["states"].items()}
    for name, kg, entries in _frames(f, unpickle):
        groups = states[name]["key_groups"]
        group = groups.get(kg)
        if group is None:
            group = groups[kg] = {}
        group.update(entries)
    return {"version": first["version"], "states": states}


def loads(data: bytes, unpickle: Callable[[IO[bytes]], Any] = pickle.load) -> Any:
    return load(io.BytesIO(data), unpickle)


def write_document(out: IO[bytes], doc: Mapping[str, Any]) -> dict[str, int]:
    """Write a canonical document held in memory as a canonical file; return each state's key count."""
    states, frames = document_frames(doc)
    writer = FrameWriter(out, states)
    for name, kg, entries in frames:
        for key, value in entries:
            writer.add(name, kg, key, value)
    return writer.close()
