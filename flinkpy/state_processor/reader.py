"""Reading a savepoint or a retained checkpoint: keyed state by uid, state name and key; operator state.

:class:`SavepointReader` opens a snapshot's `_metadata` (validated and its seal checked, as every
reader does) and decodes its state files through the same reader ``flinkpy state analyze`` uses
(:class:`flinkpy.checkpoint.analysis.StateFileReader`): each file is checked against the size
and sha256 its handle records as it is read, and decoded with the restricted unpickler (plain
values and flinkpy's own types) unless ``trusted=True``. Files are read one at a time and keyed
state is streamed frame by frame, so memory holds one frame of one file, not the snapshot.

An operator is named by its uid, or, for one that had none, by the operator id the snapshot
records (``flinkpy checkpoint inspect`` lists both).

>>> import tempfile
>>> from flinkpy.state_processor import SavepointWriter
>>> path = tempfile.mkdtemp() + "/sp"
>>> _ = (SavepointWriter.new_savepoint(max_parallelism=128)
...      .bootstrap_keyed_state("sums", "sum", [("even", 2), ("odd", 1)]).write(path))
>>> reader = SavepointReader.read(path)
>>> [(op.uid, [s.name for s in op.states]) for op in reader.operators]
[('sums', ['sum'])]
>>> sorted(reader.read_keyed_state("sums", "sum")), reader.keyed_value("sums", "sum", "odd")
([('even', 2), ('odd', 1)], 1)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from flinkpy.checkpoint.analysis import StateFileReader
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.errors import NotFoundError, UsageError
from flinkpy.state import canonical
from flinkpy.state.incremental import is_incremental, read_keyed_state
from flinkpy.state.key_groups import assign_to_key_group

#: (state name, key group, [(key, value), ...]) as flinkpy.state.canonical frames them
Frame = tuple[str, int, list[tuple[Any, Any]]]


@dataclass(frozen=True)
class StateInfo:
    """One state of an operator, as `_metadata` records it."""

    name: str
    #: value, list, map, reducing, aggregating (keyed); list, union, broadcast, sink (operator state)
    kind: str
    keyed: bool
    #: the engine's own state (timers, window contents): its name starts with "_"
    internal: bool
    #: keys of keyed state, items of operator state, summed over the subtasks (None: not recorded)
    entries: int | None


@dataclass(frozen=True)
class OperatorInfo:
    """One operator of a snapshot: its identity and the states it holds."""

    operator_id: str
    uid: str | None
    name: str
    parallelism: int
    max_parallelism: int
    states: tuple[StateInfo, ...]
    #: a source's positions (they are copied as they are by a rewrite)
    has_source_offsets: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "operator_id": self.operator_id, "uid": self.uid, "name": self.name, "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism, "has_source_offsets": self.has_source_offsets,
            "states": [{"name": s.name, "kind": s.kind, "keyed": s.keyed, "internal": s.internal, "entries": s.entries} for s in self.states],
        }


def find_operator(metadata: Mapping[str, Any], ident: str, where: str) -> dict[str, Any]:
    """The operator of ``metadata`` whose uid (first) or operator id is ``ident``; NotFoundError
    (exit 4) listing the snapshot's operators otherwise."""
    operators = metadata["operators"]
    for op in operators:
        if op.get("uid") == ident:
            return op
    for op in operators:
        if op["operator_id"] == ident:
            return op
    raise unknown_operator(operators, ident, where)


def unknown_operator(operators: list[Mapping[str, Any]], ident: str, where: str) -> NotFoundError:
    """The error for a uid none of ``operators`` has: it lists theirs."""
    known = ", ".join(op.get("uid") or f"(no uid, id {op['operator_id']})" for op in operators) or "none"
    return NotFoundError(f"no operator with uid {ident!r} in the snapshot at {where} (its operators: {known})",
                         remedy="name an operator by its uid, or by the operator id 'flinkpy checkpoint inspect' shows")


def operator_info(op: Mapping[str, Any]) -> OperatorInfo:
    """What `_metadata` says of one operator's states (summed over its subtasks, first seen first)."""
    states: dict[tuple[str, bool], list[Any]] = {}
    for sub in sorted(op["subtasks"], key=lambda s: s["subtask"]):
        for keyed, field in ((True, "keyed_state"), (False, "operator_state")):
            for name, desc in ((sub.get(field) or {}).get("states") or {}).items():
                entry = states.setdefault((name, keyed), [desc["kind"], 0])
                entry[1] = None if entry[1] is None or "entries" not in desc else entry[1] + desc["entries"]
    return OperatorInfo(
        operator_id=op["operator_id"], uid=op.get("uid"), name=op["name"], parallelism=op["parallelism"],
        max_parallelism=op["max_parallelism"],
        states=tuple(StateInfo(name, kind, keyed, name.startswith("_"), entries) for (name, keyed), (kind, entries) in states.items()),
        has_source_offsets=any(s.get("source_offsets") is not None for s in op["subtasks"]),
    )


class SavepointReader:
    """The state of one savepoint or retained checkpoint, read offline (no cluster).

    Build it with :meth:`read`. ``operators`` lists what the snapshot holds; the ``read_*``
    methods decode it. Nothing is cached: each call reads the files it needs again.
    """

    def __init__(self, storage: CheckpointStorage, path: str, metadata: dict[str, Any], *, trusted: bool, command: str) -> None:
        self.storage = storage
        #: the snapshot's directory URL
        self.path = path
        #: its validated `_metadata` document
        self.metadata = metadata
        self.files = StateFileReader(storage, path, trusted=trusted, command=command)

    @classmethod
    def read(cls, path: str, *, trusted: bool = False, storage_options: Mapping[str, Any] | None = None,
             command: str = "flinkpy.state_processor") -> SavepointReader:
        """Open the savepoint or checkpoint at ``path`` (its directory or `_metadata`, any fsspec URL).

        ``NotFoundError`` (exit 4) when there is no complete snapshot there,
        ``CorruptCheckpointError`` (exit 9) when its `_metadata` is damaged. ``trusted`` decodes
        state with Python's own unpickler (the job's classes; only for snapshots you trust).
        """
        storage = CheckpointStorage(path, storage_options=storage_options)
        directory, _ = storage.locate(path)
        return cls(storage, directory, storage.read_metadata(path), trusted=trusted, command=command)

    # ----------------------------------------------------------------- what it holds

    @property
    def max_parallelism(self) -> int:
        return int(self.metadata["max_parallelism"])

    @property
    def operators(self) -> list[OperatorInfo]:
        return [operator_info(op) for op in self.metadata["operators"]]

    def operator(self, ident: str) -> dict[str, Any]:
        """The `_metadata` entry of the operator with uid (or operator id) ``ident``."""
        return find_operator(self.metadata, ident, self.path)

    # ----------------------------------------------------------------- keyed state

    def read_keyed_state(self, uid: str, state: str) -> Iterator[tuple[Any, Any]]:
        """Every ``(key, value)`` of keyed state ``state`` of operator ``uid``: subtasks in order,
        key groups as stored. A list state's value is its list, a map state's its dict; a state
        with a time-to-live holds what the backend stores (values with their timestamps)."""
        op = self.operator(uid)
        self._check_keyed_state(op, state)
        for _sub, handle in keyed_handles(op):
            with self.keyed_frames(handle) as (_states, frames):
                for name, _kg, entries in frames:
                    if name == state:
                        yield from entries

    def keyed_value(self, uid: str, state: str, key: Any) -> Any:
        """The value of ``key`` in keyed state ``state`` of operator ``uid`` (None: the key has
        none). Reads only the file holding the key's key group."""
        op = self.operator(uid)
        self._check_keyed_state(op, state)
        group = assign_to_key_group(key, op["max_parallelism"])
        for _sub, handle in keyed_handles(op):
            first, last = handle["key_groups"]
            if not first <= group <= last:
                continue
            with self.keyed_frames(handle) as (_states, frames):
                for name, kg, entries in frames:
                    if name == state and kg == group:
                        for k, v in entries:
                            if k == key:
                                return v
        return None

    def _check_keyed_state(self, op: Mapping[str, Any], state: str) -> None:
        info = operator_info(op)
        names = [s.name for s in info.states if s.keyed]
        if state not in names:
            raise NotFoundError(
                f"operator {op['name']!r} (uid {op.get('uid') or op['operator_id']}) has no keyed state {state!r} "
                f"in the snapshot at {self.path} (its keyed states: {', '.join(names) or 'none'})",
                remedy="name one of its keyed states",
            )

    @contextlib.contextmanager
    def keyed_frames(self, handle: Mapping[str, Any]) -> Iterator[tuple[dict[str, dict[str, Any]], Iterator[Frame]]]:
        """Open one keyed-state file: its states (name -> kind and TTL) and an iterator over its
        frames, decoded as they are read. A full snapshot's file is fetched to a local file first
        (checked against its handle) and streamed from there; an incremental checkpoint's store
        is read out whole."""
        if is_incremental(handle):
            with self.files.decoding(handle):
                doc = read_keyed_state(self.storage, self.path, handle, restricted=not self.files.trusted)
            states, frames = canonical.document_frames(doc)
            yield states, frames
            return
        fd, local = tempfile.mkstemp(prefix="flinkpy-state-")
        os.close(fd)
        try:
            self.storage.fetch_state(self.path, handle, local)
            with open(local, "rb") as f:
                with self.files.decoding(handle):
                    states, frames = canonical.read_frames(f, self.files.unpickle)
                yield states, self._decoded(handle, frames)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(local)

    def _decoded(self, handle: Mapping[str, Any], frames: Iterator[Frame]) -> Iterator[Frame]:
        with self.files.decoding(handle):
            yield from frames

    # ----------------------------------------------------------------- operator state

    def read_list_state(self, uid: str, state: str) -> list[Any]:
        """The items of operator list state ``state`` of ``uid``: every subtask's, in subtask order
        (what a restore splits over the new subtasks)."""
        return self._list_items(uid, state, "split")

    def read_union_state(self, uid: str, state: str) -> list[Any]:
        """The items of union list state ``state`` of ``uid``, every subtask's in subtask order
        (what every new subtask gets whole on restore)."""
        return self._list_items(uid, state, "union")

    def read_broadcast_state(self, uid: str, state: str) -> dict[Any, Any]:
        """The broadcast state ``state`` of ``uid``: the copy of its first subtask that has one
        (every copy is equal; a restore takes them by position)."""
        for _sub, entry in self._operator_states(uid, state, "broadcast"):
            return dict(entry["items"])
        return {}

    def _list_items(self, uid: str, state: str, mode: str) -> list[Any]:
        items: list[Any] = []
        for _sub, entry in self._operator_states(uid, state, mode):
            items.extend(entry["items"])
        return items

    def _operator_states(self, uid: str, state: str, mode: str) -> Iterator[tuple[int, dict[str, Any]]]:
        from flinkpy.state.operator import kind_of

        op = self.operator(uid)
        found = False
        for sub in sorted(op["subtasks"], key=lambda s: s["subtask"]):
            handle = sub.get("operator_state")
            if not handle or state not in (handle.get("states") or {}):
                continue
            entry = ((self.load_operator_state(handle).get("functions") or {}).get("states") or {}).get(state)
            if entry is None:
                continue
            if entry["mode"] != mode:
                raise UsageError(
                    f"operator state {state!r} of {op['name']!r} is {kind_of(entry['mode'])} state, not {kind_of(mode)} state",
                    remedy=f"read it with read_{'list' if entry['mode'] == 'split' else entry['mode']}_state",
                )
            found = True
            yield sub["subtask"], entry
        if not found:
            names = sorted({n for s in op["subtasks"] for n in ((s.get("operator_state") or {}).get("states") or {})})
            raise NotFoundError(
                f"operator {op['name']!r} (uid {op.get('uid') or op['operator_id']}) has no operator state {state!r} "
                f"in the snapshot at {self.path} (its operator states: {', '.join(names) or 'none'})",
                remedy="name one of its operator states",
            )

    def load_operator_state(self, handle: Mapping[str, Any]) -> dict[str, Any]:
        """The decoded operator-state file of one subtask: ``{"functions": {"states": {name:
        {"mode", "items"}}}, "sink": ..., "async": ...}`` (each part only when it has state)."""
        state = self.files.load(handle)
        return state if isinstance(state, dict) else {}


def keyed_handles(op: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(subtask, keyed-state handle) of an operator's subtasks that have one, in subtask order."""
    return [(s["subtask"], s["keyed_state"]) for s in sorted(op["subtasks"], key=lambda s: s["subtask"]) if s.get("keyed_state")]
