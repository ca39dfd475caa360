"""Writing a new savepoint from an existing one (or from nothing): the edits, then one atomic write.

:class:`SavepointWriter` collects edits — remove an operator, change its uid, transform the values
of a keyed or operator state with a Python function, bootstrap keyed state for a new operator
from an iterable of ``(key, value)``, change the max parallelism — and :meth:`SavepointWriter.write`
writes them as a new savepoint directory. The source is never changed.

What is written is a savepoint like any other (``kind: savepoint``, canonical format, relative
paths, every file with its size and sha256, the `_metadata` sealed): ``flinkpy checkpoint
verify``, ``savepoint plan`` and ``run -s`` take it. It is written the way every snapshot is:
state files first, `_metadata` last, so a rewrite that fails or is killed half way leaves no
`_metadata` and is never taken for a savepoint (what it did write is removed when it fails).

An operator that no edit touches keeps its files byte for byte (copied, checked against their
checksums on the way). One whose keyed state is transformed or re-assigned to key groups is
decoded and written again, frame by frame; a retained incremental checkpoint's store is always
written out as canonical files, so the savepoint depends on nothing outside its directory.

>>> import tempfile
>>> base = tempfile.mkdtemp()
>>> _ = (SavepointWriter.new_savepoint(max_parallelism=128)
...      .bootstrap_keyed_state("counts", "count", [("a", 1), ("b", 2)]).write(base + "/sp1"))
>>> result = (SavepointWriter.from_existing_savepoint(base + "/sp1")
...      .change_operator_identifier("counts", "counter")
...      .transform_keyed_state("counter", "count", lambda key, value: value * 10)
...      .with_max_parallelism(256).write(base + "/sp2"))
>>> [(op.uid, op.action) for op in result.operators]
[('counter', 'renamed from counts, transformed, re-assigned to key groups')]
>>> from flinkpy.state_processor import SavepointReader
>>> sorted(SavepointReader.read(base + "/sp2").read_keyed_state("counter", "count"))
[('a', 10), ('b', 20)]
"""

from __future__ import annotations

import copy
import os
import pickle
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flinkpy.checkpoint.metadata import KEYED_STATE_KINDS, METADATA_FILE, new_metadata, new_operator, new_subtask
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.clock import now_ms
from flinkpy.errors import ConflictError, UsageError
from flinkpy.state.incremental import is_incremental
from flinkpy.state.key_groups import assign_to_key_group, check_max_parallelism
from flinkpy.state.operator import kind_of
from flinkpy.state_processor.keyed import KeyedSpool, regroup
from flinkpy.state_processor.reader import SavepointReader, keyed_handles, unknown_operator

#: fn(key, value) -> new value, or None to drop the key
KeyedTransform = Callable[[Any, Any], Any]
#: fn(items) -> new items: a list (list and union state) or a dict (broadcast state), per subtask
OperatorTransform = Callable[[Any], Any]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class _Bootstrap:
    state: str
    kind: str
    data: Iterable[tuple[Any, Any]]


@dataclass
class _Operator:
    """One operator of the savepoint being written and what happens to it."""

    operator_id: str
    uid: str | None
    name: str
    source: dict[str, Any] | None  # its `_metadata` entry in the source (None: bootstrapped)
    renamed_from: str | None = None
    keyed: dict[str, list[KeyedTransform]] = field(default_factory=dict)
    operator: dict[str, list[OperatorTransform]] = field(default_factory=dict)
    bootstrap: list[_Bootstrap] = field(default_factory=list)
    parallelism: int = 1


@dataclass(frozen=True)
class OperatorResult:
    """One operator of the written savepoint and what the rewrite did to it."""

    operator_id: str
    uid: str | None
    name: str
    parallelism: int
    #: "copied", or what changed: "renamed from X", "transformed", "re-assigned to key groups", "bootstrapped"
    action: str

    def to_dict(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "uid": self.uid, "name": self.name, "parallelism": self.parallelism, "action": self.action}


@dataclass(frozen=True)
class RewriteResult:
    """What :meth:`SavepointWriter.write` wrote."""

    path: str  #: the new savepoint's directory
    source: str | None  #: the snapshot it was written from (None: a new savepoint)
    job_id: str
    checkpoint_id: int
    max_parallelism: int
    operators: tuple[OperatorResult, ...]
    #: operators of the source left out: {"operator_id", "uid", "name"}
    dropped: tuple[dict[str, Any], ...]
    files_written: int
    bytes_written: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "source": self.source, "kind": "savepoint", "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id, "max_parallelism": self.max_parallelism,
            "operators": [o.to_dict() for o in self.operators], "dropped": list(self.dropped),
            "files_written": self.files_written, "bytes_written": self.bytes_written,
        }


class SavepointWriter:
    """Edits of a savepoint, written by :meth:`write`. Every edit method returns the writer, so
    edits chain; an edit that names an operator the savepoint does not have fails at once."""

    def __init__(self, reader: SavepointReader | None, *, max_parallelism: int) -> None:
        self._reader = reader
        self._source_max = max_parallelism
        self._max_parallelism = max_parallelism
        self._operators: list[_Operator] = []
        self._dropped: list[dict[str, Any]] = []
        if reader is not None:
            for op in reader.metadata["operators"]:
                self._operators.append(_Operator(op["operator_id"], op.get("uid"), op["name"], op, parallelism=op["parallelism"]))

    @classmethod
    def from_existing_savepoint(cls, path: str, *, trusted: bool = False, storage_options: Mapping[str, Any] | None = None,
                                command: str = "flinkpy.state_processor") -> SavepointWriter:
        """Edits of the savepoint or retained checkpoint at ``path`` (any fsspec URL). ``trusted``:
        decode state with Python's own unpickler (the job's classes), for snapshots you trust."""
        reader = SavepointReader.read(path, trusted=trusted, storage_options=storage_options, command=command)
        if reader.metadata.get("runner") is not None:
            raise ConflictError(
                f"{reader.path} is a savepoint of the {reader.metadata['runner']} runner: its state is that runner's own "
                "files, which the state processor does not rewrite",
                remedy="rewrite a savepoint of flinkpy's engine",
            )
        channel = [op["name"] for op in reader.metadata["operators"] if any(s.get("channel_state") for s in op["subtasks"])]
        if channel:
            raise ConflictError(
                f"{reader.path} is an unaligned checkpoint: it holds in-flight data of {', '.join(channel)}, which only "
                "the same job at the same parallelism can take back, so it cannot be rewritten",
                remedy="restore it unchanged, take a savepoint (savepoints are aligned), and rewrite that",
            )
        return cls(reader, max_parallelism=reader.max_parallelism)

    @classmethod
    def new_savepoint(cls, *, max_parallelism: int = 128) -> SavepointWriter:
        """An empty savepoint, for operators bootstrapped with :meth:`bootstrap_keyed_state`."""
        check_max_parallelism(max_parallelism)
        return cls(None, max_parallelism=max_parallelism)

    # ----------------------------------------------------------------- edits

    def _find(self, ident: str) -> _Operator:
        """The operator (as edited so far) whose uid, or else operator id, is ``ident``."""
        by_uid = [op for op in self._operators if op.uid == ident] or [op for op in self._operators if op.operator_id == ident]
        if by_uid:
            return by_uid[0]
        current = [{"uid": op.uid, "operator_id": op.operator_id} for op in self._operators]
        raise unknown_operator(current, ident, self._reader.path if self._reader else "the new savepoint")

    def remove_operator(self, uid: str) -> SavepointWriter:
        """Leave the state of operator ``uid`` (or operator id) out of the new savepoint."""
        op = self._find(uid)
        self._operators.remove(op)
        self._dropped.append({"operator_id": op.operator_id, "uid": op.uid, "name": op.name})
        return self

    def change_operator_identifier(self, uid: str, new_uid: str) -> SavepointWriter:
        """Give operator ``uid`` (or an operator without uid, by its operator id) the uid
        ``new_uid``: a job whose operator now has that uid restores the state."""
        if not new_uid or not isinstance(new_uid, str):
            raise UsageError(f"the new uid of {uid!r} is empty", remedy="give a non-empty uid")
        op = self._find(uid)
        for other in self._operators:
            if other is not op and new_uid in (other.uid, other.operator_id):
                raise ConflictError(f"uid {new_uid!r} is already the uid of operator {other.name!r} in the savepoint",
                                    remedy="choose another uid, or remove that operator first")
        op.renamed_from = op.renamed_from or op.uid or op.operator_id
        op.uid = op.operator_id = new_uid
        return self

    def transform_keyed_state(self, uid: str, state: str, function: KeyedTransform) -> SavepointWriter:
        """Replace each value of keyed state ``state`` of ``uid`` by ``function(key, value)``
        (None drops the key). A list state's value is its list, a map state's its dict."""
        op = self._find(uid)
        if op.source is None or state not in _keyed_state_names(op.source):
            raise UsageError(f"operator {op.name!r} has no keyed state {state!r} to transform",
                             remedy=f"name one of its keyed states: {', '.join(_keyed_state_names(op.source or {})) or 'none'}")
        op.keyed.setdefault(state, []).append(function)
        return self

    def transform_operator_state(self, uid: str, state: str, function: OperatorTransform) -> SavepointWriter:
        """Replace each subtask's items of operator state ``state`` of ``uid`` by ``function(items)``:
        a list for list and union state, a dict for broadcast state."""
        op = self._find(uid)
        names = _operator_state_names(op.source or {})
        if state not in names:
            raise UsageError(f"operator {op.name!r} has no operator state {state!r} to transform",
                             remedy=f"name one of its operator states: {', '.join(names) or 'none'}")
        op.operator.setdefault(state, []).append(function)
        return self

    def bootstrap_keyed_state(self, uid: str, state: str, data: Iterable[tuple[Any, Any]], *, kind: str = "value",
                              name: str | None = None, parallelism: int = 1) -> SavepointWriter:
        """Keyed state ``state`` (of ``kind``: value, list or map) for the operator with uid
        ``uid`` — a new operator unless an earlier call bootstrapped it — from ``(key, value)``
        pairs, each key once. The job's operator with that uid, keyed by the same keys, finds the
        state under ``state`` when it restores. ``data`` is read when the savepoint is written."""
        if kind not in ("value", "list", "map"):
            raise UsageError(f"cannot bootstrap {kind!r} state", remedy="bootstrap value, list or map state")
        if parallelism < 1:
            raise UsageError(f"parallelism must be 1 or more, got {parallelism}")
        op = next((o for o in self._operators if o.source is None and uid == o.uid), None)
        if op is None:
            if any(uid in (o.uid, o.operator_id) for o in self._operators):
                raise ConflictError(f"the savepoint already has an operator with uid {uid!r}",
                                    remedy="bootstrap a new uid, or remove that operator first")
            op = _Operator(uid, uid, name or uid, None, parallelism=parallelism)
            self._operators.append(op)
        if any(b.state == state for b in op.bootstrap):
            raise UsageError(f"state {state!r} of {uid!r} is bootstrapped twice", remedy="bootstrap each state once")
        op.bootstrap.append(_Bootstrap(state, kind, data))
        return self

    def with_max_parallelism(self, max_parallelism: int) -> SavepointWriter:
        """Write the savepoint for ``max_parallelism``: every key is re-assigned to its key group
        at the new max parallelism (a job restores it only with that max parallelism)."""
        check_max_parallelism(max_parallelism)
        self._max_parallelism = max_parallelism
        return self

    # ----------------------------------------------------------------- writing

    def write(self, path: str, *, storage_options: Mapping[str, Any] | None = None) -> RewriteResult:
        """Write the new savepoint at ``path`` (a directory that must not exist yet, any fsspec URL).

        ``ConflictError`` (exit 9) when something is at ``path`` already. On any failure what was
        written is removed, and no `_metadata` was ever there."""
        maxp = self._max_parallelism
        for op in self._operators:
            if op.parallelism > maxp:
                raise UsageError(f"operator {op.name!r} has parallelism {op.parallelism}, above the max parallelism {maxp}",
                                 remedy="choose a max parallelism at least as large as every operator's parallelism")
        target = CheckpointStorage(path, storage_options=storage_options)
        directory = target.base_url
        fs, fs_path = target.filesystem(directory)
        if fs.exists(fs_path):
            if fs.isdir(fs_path) and not fs.exists(f"{fs_path.rstrip('/')}/{METADATA_FILE}") and fs.ls(fs_path):
                raise ConflictError(f"{directory} already exists and holds no {METADATA_FILE}: the files of a rewrite that was interrupted",
                                    remedy=f"remove {directory} and run the rewrite again")
            raise ConflictError(f"{directory} already exists", remedy="write the new savepoint to a path that does not exist yet")
        job = _Job(self, target, directory)
        try:
            doc = job.run()
            target.write_metadata_in(directory, doc)  # the commit point, last
        except BaseException:
            target.discard_path(directory)
            raise
        return job.result(doc)


def _keyed_state_names(op: Mapping[str, Any]) -> list[str]:
    return sorted({n for s in op.get("subtasks", []) for n in ((s.get("keyed_state") or {}).get("states") or {})})


def _operator_state_names(op: Mapping[str, Any]) -> list[str]:
    return sorted({n for s in op.get("subtasks", []) for n in ((s.get("operator_state") or {}).get("states") or {})})


class _Job:
    """One :meth:`SavepointWriter.write`: the files of every operator, then the document."""

    def __init__(self, writer: SavepointWriter, target: CheckpointStorage, directory: str) -> None:
        self.w = writer
        self.reader = writer._reader
        self.target = target
        self.directory = directory
        self.names: set[str] = set()
        self.files = 0
        self.bytes = 0
        self.results: list[OperatorResult] = []

    def _name(self, operator_id: str, subtask: int, suffix: str) -> str:
        """A file name no other file of the new savepoint has."""
        base = f"{_UNSAFE.sub('_', operator_id)}-{subtask}-{suffix}"
        name, n = base, 1
        while name in self.names:
            n += 1
            name = f"{base}.{n}"
        self.names.add(name)
        return name

    def _wrote(self, handle: dict[str, Any]) -> dict[str, Any]:
        self.files += 1
        self.bytes += handle["size"]
        return handle

    def run(self) -> dict[str, Any]:
        operators = []
        vertex = max((op.source["vertex_id"] for op in self.w._operators if op.source), default=0)
        for op in self.w._operators:
            if op.source is None:
                vertex += 1
                operators.append(self._bootstrapped(op, vertex))
            else:
                operators.append(self._existing(op))
        src = self.reader.metadata if self.reader else None
        now = now_ms()
        doc = new_metadata(
            job_id=src["job_id"] if src else uuid.uuid4().hex,
            job_name=src["job_name"] if src else "bootstrapped savepoint",
            checkpoint_id=src["checkpoint_id"] if src else 0,
            trigger_timestamp=now, completion_timestamp=now, operators=operators, kind="savepoint",
            savepoint_format="canonical", mode=src["mode"] if src else "EXACTLY_ONCE", max_parallelism=self.w._max_parallelism,
        )
        if src is not None:
            doc["rewritten_from"] = self.reader.path
        return doc

    def result(self, doc: dict[str, Any]) -> RewriteResult:
        return RewriteResult(
            path=self.directory, source=self.reader.path if self.reader else None, job_id=doc["job_id"],
            checkpoint_id=doc["checkpoint_id"], max_parallelism=doc["max_parallelism"], operators=tuple(self.results),
            dropped=tuple(self.w._dropped), files_written=self.files, bytes_written=self.bytes,
        )

    # ----------------------------------------------------------------- an operator of the source

    def _existing(self, op: _Operator) -> dict[str, Any]:
        src = op.source
        assert src is not None and self.reader is not None
        maxp = self.w._max_parallelism
        handles = keyed_handles(src)
        rekey = bool(handles) and src["max_parallelism"] != maxp
        reencode = rekey or bool(op.keyed) or any(is_incremental(h) for _, h in handles)
        subtasks = {s["subtask"]: s for s in src["subtasks"]}
        keyed_out: dict[int, dict[str, Any]] = {}
        if handles and reencode:
            keyed_out = self._reencode_keyed(op, handles)
        elif handles:
            keyed_out = {i: {**self._copy(op, h, i, "keyed"), "key_groups": list(h["key_groups"]), "states": copy.deepcopy(h["states"])}
                         for i, h in handles}
        out_subtasks = []
        for index in sorted(set(subtasks) | set(keyed_out)):
            sub = subtasks.get(index, {})
            op_handle = sub.get("operator_state")
            if op_handle is not None:
                op_handle = self._operator_state(op, op_handle, index)
            out_subtasks.append(new_subtask(index, keyed_state=keyed_out.get(index), operator_state=op_handle,
                                            source_offsets=copy.deepcopy(sub.get("source_offsets"))))
        changes = [f"renamed from {op.renamed_from}"] if op.renamed_from else []
        if op.keyed or op.operator:
            changes.append("transformed")
        if rekey:
            changes.append("re-assigned to key groups")
        self.results.append(OperatorResult(op.operator_id, op.uid, op.name, src["parallelism"], ", ".join(changes) or "copied"))
        return new_operator(operator_id=op.operator_id, uid=op.uid, name=op.name, vertex_id=src["vertex_id"],
                            parallelism=src["parallelism"], max_parallelism=maxp,
                            subtasks=out_subtasks)

    def _copy(self, op: _Operator, handle: Mapping[str, Any], subtask: int, suffix: str) -> dict[str, Any]:
        """Copy one state file byte for byte (streamed through a local file, checked on the way)."""
        assert self.reader is not None
        fd, local = tempfile.mkstemp(prefix="flinkpy-copy-")
        os.close(fd)
        try:
            self.reader.storage.fetch_state(self.reader.path, handle, local)
            written, _ = self.target.write_state_stream(self.directory, self._name(op.operator_id, subtask, suffix),
                                                        lambda out: _copy_file(local, out))
        finally:
            os.unlink(local)
        return self._wrote(written)

    def _reencode_keyed(self, op: _Operator, handles: list[tuple[int, dict[str, Any]]]) -> dict[int, dict[str, Any]]:
        assert op.source is not None and self.reader is not None
        old_max, new_max = op.source["max_parallelism"], self.w._max_parallelism
        declared: dict[str, dict[str, Any]] = {}
        for _, h in handles:  # every state any subtask declares, first seen first
            for name, desc in h["states"].items():
                declared.setdefault(name, {"kind": desc["kind"]})
        spool = KeyedSpool(declared, parallelism=op.source["parallelism"], max_parallelism=new_max)
        try:
            for _, handle in handles:
                with self.reader.keyed_frames(handle) as (states, frames):
                    for name, desc in states.items():  # a TTL travels with its state
                        if "ttl_ms" in desc and "ttl_ms" not in spool.states.get(name, {}):
                            spool.states.setdefault(name, {"kind": desc["kind"]})["ttl_ms"] = desc["ttl_ms"]
                    for name, kg, entries in frames:
                        functions = op.keyed.get(name, ())
                        for key, value in entries:
                            if functions:  # (a timer's value is None: only a transform's None drops)
                                for fn in functions:
                                    value = fn(key, value)
                                    if value is None:
                                        break
                                if value is None:
                                    continue
                            spool.add(name, regroup(name, key, kg, old_max=old_max, new_max=new_max), key, value)
            return self._upload(op, spool)
        finally:
            spool.discard()

    def _upload(self, op: _Operator, spool: KeyedSpool) -> dict[int, dict[str, Any]]:
        out = {}
        for i, (groups, local, summary) in enumerate(spool.close()):
            handle, _ = self.target.write_state_stream(self.directory, self._name(op.operator_id, i, "keyed"),
                                                      lambda f, path=local: _copy_file(path, f))
            self._wrote(handle)
            out[i] = {**handle, "key_groups": [groups.start, groups.stop - 1], "states": summary}
        return out

    def _operator_state(self, op: _Operator, handle: Mapping[str, Any], subtask: int) -> dict[str, Any]:
        if not any(name in (handle.get("states") or {}) for name in op.operator):
            return {**self._copy(op, handle, subtask, "operator"), "states": copy.deepcopy(handle["states"])}
        assert self.reader is not None
        state = self.reader.load_operator_state(handle)
        summary = copy.deepcopy(handle["states"])
        for name, functions in op.operator.items():
            entry = ((state.get("functions") or {}).get("states") or {}).get(name)
            if entry is None:
                continue
            items = entry["items"]
            for fn in functions:
                items = fn(list(items) if entry["mode"] != "broadcast" else dict(items))
            if entry["mode"] == "broadcast" and not isinstance(items, Mapping):
                raise UsageError(f"the transform of broadcast state {name!r} of {op.name!r} returned {type(items).__name__}, not a dict")
            entry["items"] = dict(items) if entry["mode"] == "broadcast" else list(items)
            summary[name] = {"kind": kind_of(entry["mode"]), "entries": len(entry["items"])}
        written = self.target.write_state_in(self.directory, self._name(op.operator_id, subtask, "operator"),
                                             pickle.dumps(state, protocol=5))
        return {**self._wrote(written), "states": summary}

    # ----------------------------------------------------------------- a bootstrapped operator

    def _bootstrapped(self, op: _Operator, vertex_id: int) -> dict[str, Any]:
        maxp = self.w._max_parallelism
        spool = KeyedSpool({b.state: {"kind": b.kind} for b in op.bootstrap}, parallelism=op.parallelism, max_parallelism=maxp)
        try:
            for b in op.bootstrap:
                seen: set[Any] = set()
                for pair in b.data:
                    key, value = _pair(pair, op, b)
                    if key in seen:
                        raise UsageError(f"key {key!r} appears twice in the data bootstrapped into state {b.state!r} of {op.uid!r}",
                                         remedy="give each key once")
                    seen.add(key)
                    spool.add(b.state, assign_to_key_group(key, maxp), key, _value(value, op, b))
            keyed = self._upload(op, spool)
        finally:
            spool.discard()
        self.results.append(OperatorResult(op.operator_id, op.uid, op.name, op.parallelism, "bootstrapped"))
        return new_operator(operator_id=op.operator_id, uid=op.uid, name=op.name, vertex_id=vertex_id, parallelism=op.parallelism,
                            max_parallelism=maxp, subtasks=[new_subtask(i, keyed_state=keyed[i]) for i in range(op.parallelism)])


def _pair(pair: Any, op: _Operator, b: _Bootstrap) -> tuple[Any, Any]:
    try:
        key, value = pair
    except (TypeError, ValueError):
        raise UsageError(f"the data bootstrapped into state {b.state!r} of {op.uid!r} holds {pair!r}, not a (key, value) pair",
                         remedy="give an iterable of (key, value) pairs") from None
    if value is None:
        raise UsageError(f"key {key!r} of state {b.state!r} of {op.uid!r} has the value None, which is no state",
                         remedy="leave the key out instead")
    return key, value


def _value(value: Any, op: _Operator, b: _Bootstrap) -> Any:
    """A bootstrapped value in the form the backends store: a list state's list, a map state's dict."""
    assert b.kind in KEYED_STATE_KINDS
    if b.kind == "list":
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
            raise UsageError(f"the value of list state {b.state!r} of {op.uid!r} must be a list, got {type(value).__name__}")
        return list(value)
    if b.kind == "map":
        if not isinstance(value, Mapping):
            raise UsageError(f"the value of map state {b.state!r} of {op.uid!r} must be a dict, got {type(value).__name__}")
        return dict(value)
    return value


def _copy_file(local: str, out: Any) -> None:
    with open(local, "rb") as f:
        shutil.copyfileobj(f, out)
