"""The `_metadata` document: what a completed checkpoint or savepoint holds, as versioned JSON.

`_metadata` is the commit point of a checkpoint: it is written last, and a directory without
it is not a checkpoint. It is plain JSON so that a person can read it with `jq` and so that a
later flinkpy can refuse, with a clear message, a version it does not understand. Every state
file is referred to by a *handle* — a path relative to the checkpoint directory, its size and
its sha256 — so a checkpoint (and above all a savepoint) can be moved as a whole and still be
checked file by file before anything is restored from it.

Wire format (version 1)::

    {"format": "flinkpy-checkpoint", "version": 1,
     "job_id": "...", "job_name": "...", "checkpoint_id": 5, "kind": "checkpoint",
     "savepoint_format": null, "trigger_timestamp": 1700000000000,
     "completion_timestamp": 1700000000420, "mode": "EXACTLY_ONCE", "max_parallelism": 128,
     "operators": [{"operator_id": "...", "uid": "sums", "name": "running sums",
                    "vertex_id": 2, "parallelism": 2, "max_parallelism": 128,
                    "subtasks": [{"subtask": 0, "keyed_state": {...}, "operator_state": null,
                                  "source_offsets": null}]}]}

A keyed-state handle adds ``key_groups`` ([first, last], inclusive) and ``states``
({name: {"kind", "entries"[, "ttl_ms"]}}, ``ttl_ms`` for a state with a time-to-live); an
operator-state handle adds ``states`` only.

The document seals itself: ``metadata_checksum`` is the sha256 of the document without that
field, in canonical JSON (sorted keys, no spaces), so that a changed byte anywhere in what it
says — a source offset, a key-group range, a file's recorded checksum — is refused by every
reader instead of restoring wrong state. It hashes the parsed document, not the bytes, so
`jq` can still pretty-print a copy without breaking it. A `_metadata` written before the seal
existed (no such field) is still read, with a warning that its integrity cannot be checked.

>>> h = {"path": "op-0.keyed", "size": 3, "checksum": "sha256:" + "0" * 64}
>>> doc = new_metadata(job_id="j1", job_name="sums", checkpoint_id=1,
...     trigger_timestamp=10, completion_timestamp=12, operators=[new_operator(
...         operator_id="op", uid="sums", name="running sums", vertex_id=1, parallelism=1,
...         max_parallelism=128, subtasks=[new_subtask(0, keyed_state=keyed_state(
...             h, (0, 127), {"total": {"kind": "value", "entries": 2}}))])])
>>> validate(doc, "example")["checkpoint_id"]
1
>>> summarize(doc)["total_size"], summarize(doc)["files"]
(3, 1)
>>> sealed = seal(doc); check_seal(sealed, "example")
True
>>> sealed["operators"][0]["subtasks"][0]["keyed_state"]["size"] = 2
>>> check_seal(sealed, "example/_metadata")
Traceback (most recent call last):
...
flinkpy.checkpoint.metadata.CorruptCheckpointError: example/_metadata: metadata_checksum: the document does not match its checksum: it was changed or damaged after it was written (restore from an older checkpoint or a savepoint; this one cannot be used)
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Iterable, Iterator, Mapping

from flinkpy.errors import ExitCode, FlinkpyError

FORMAT = "flinkpy-checkpoint"
VERSION = 1
METADATA_FILE = "_metadata"
#: the document's own checksum (see the module's docstring)
CHECKSUM_FIELD = "metadata_checksum"

KINDS = ("checkpoint", "savepoint")
SAVEPOINT_FORMATS = (None, "canonical", "native")
MODES = ("EXACTLY_ONCE", "AT_LEAST_ONCE")
KEYED_STATE_KINDS = ("value", "list", "map", "reducing", "aggregating")
OPERATOR_STATE_KINDS = ("list", "union", "broadcast", "source", "sink")

_CHECKSUM = re.compile(r"^sha256:[0-9a-f]{64}$")


class CorruptCheckpointError(FlinkpyError):
    """A checkpoint exists but cannot be restored: bad `_metadata`, a missing or damaged file.

    Exit code 9 (``ExitCode.CONFLICT``, "the thing is in the wrong state"): the path names a
    checkpoint, but one that is not in a restorable state. A path with no checkpoint at all is
    a ``NotFoundError`` (exit 4) instead, so scripts can tell "nothing there" from "broken".

    ``path`` is the file at fault and ``problem`` what is wrong with it; the message is both.
    """

    exit_code = ExitCode.CONFLICT

    def __init__(self, path: str, problem: str, *, remedy: str | None = None):
        super().__init__(
            f"{path}: {problem}",
            remedy=remedy or "restore from an older checkpoint or a savepoint; this one cannot be used",
        )
        self.path = path
        self.problem = problem


# --------------------------------------------------------------------------- builders


def new_metadata(
    *,
    job_id: str,
    job_name: str,
    checkpoint_id: int,
    trigger_timestamp: int,
    completion_timestamp: int,
    operators: list[dict[str, Any]],
    kind: str = "checkpoint",
    savepoint_format: str | None = None,
    mode: str = "EXACTLY_ONCE",
    max_parallelism: int = 128,
) -> dict[str, Any]:
    """The `_metadata` document of a completed checkpoint or savepoint (not yet validated)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "job_id": job_id,
        "job_name": job_name,
        "checkpoint_id": checkpoint_id,
        "kind": kind,
        "savepoint_format": savepoint_format,
        "trigger_timestamp": trigger_timestamp,
        "completion_timestamp": completion_timestamp,
        "mode": mode,
        "max_parallelism": max_parallelism,
        "operators": operators,
    }


def new_operator(
    *,
    operator_id: str,
    uid: str | None,
    name: str,
    vertex_id: int,
    parallelism: int,
    max_parallelism: int,
    subtasks: list[dict[str, Any]],
) -> dict[str, Any]:
    """One operator's entry: its identity (uid wins on restore) and its subtasks' state."""
    return {
        "operator_id": operator_id,
        "uid": uid,
        "name": name,
        "vertex_id": vertex_id,
        "parallelism": parallelism,
        "max_parallelism": max_parallelism,
        "subtasks": subtasks,
    }


def new_subtask(
    subtask: int,
    *,
    keyed_state: dict[str, Any] | None = None,
    operator_state: dict[str, Any] | None = None,
    source_offsets: Any = None,
) -> dict[str, Any]:
    """One subtask's entry; ``source_offsets`` is any JSON value a source reader gave."""
    return {"subtask": subtask, "keyed_state": keyed_state, "operator_state": operator_state, "source_offsets": source_offsets}


def keyed_state(handle: Mapping[str, Any], key_groups: tuple[int, int] | list[int], states: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A keyed-state handle: a file handle (from ``write_state``) plus its key-group range."""
    return {**handle, "key_groups": [int(key_groups[0]), int(key_groups[1])], "states": {k: dict(v) for k, v in states.items()}}


def operator_state(handle: Mapping[str, Any], states: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """An operator-state handle: a file handle (from ``write_state``) plus the states in it."""
    return {**handle, "states": {k: dict(v) for k, v in states.items()}}


# --------------------------------------------------------------------------- validation


class _Invalid(Exception):
    """The first problem found, with the field it is in."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}" if field else problem)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _need(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in doc:
        raise _Invalid(where, f"missing field '{key}'")
    return doc[key]


def _int(doc: Mapping[str, Any], key: str, where: str, *, low: int = 0) -> int:
    value = _need(doc, key, where)
    if not _is_int(value) or value < low:
        raise _Invalid(_join(where, key), f"expected an integer >= {low}, got {value!r}")
    return value


def _str(doc: Mapping[str, Any], key: str, where: str, *, nullable: bool = False) -> str | None:
    value = _need(doc, key, where)
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not value:
        raise _Invalid(_join(where, key), f"expected a non-empty string, got {value!r}")
    return value


def _one_of(doc: Mapping[str, Any], key: str, where: str, allowed: Iterable[Any]) -> Any:
    value = _need(doc, key, where)
    allowed = tuple(allowed)
    if value not in allowed:
        names = ", ".join("null" if a is None else str(a) for a in allowed)
        raise _Invalid(_join(where, key), f"expected one of {names}, got {value!r}")
    return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _check_states(states: Any, where: str, kinds: tuple[str, ...], *, incremental: bool = False) -> None:
    if not isinstance(states, dict):
        raise _Invalid(where, f"expected an object of state names, got {type(states).__name__}")
    for name, desc in states.items():
        at = f"{where}[{name!r}]"
        if not isinstance(desc, dict):
            raise _Invalid(at, f"expected an object with kind and entries, got {desc!r}")
        _one_of(desc, "kind", at, kinds)
        if "entries" in desc or not incremental:  # a native (incremental) snapshot does not count them
            _int(desc, "entries", at)


def _check_handle(handle: Any, where: str) -> None:
    if not isinstance(handle, dict):
        raise _Invalid(where, f"expected a state handle object or null, got {type(handle).__name__}")
    path = _str(handle, "path", where)
    assert path is not None
    # Relative paths keep a checkpoint relocatable; refusing '..' keeps a restore inside it.
    if path.startswith("/") or "://" in path or ".." in path.split("/"):
        raise _Invalid(_join(where, "path"), f"expected a path relative to the checkpoint directory, got {path!r}")
    _int(handle, "size", where)
    checksum = _need(handle, "checksum", where)
    if not isinstance(checksum, str) or not _CHECKSUM.match(checksum):
        raise _Invalid(_join(where, "checksum"), f"expected 'sha256:' and 64 hex digits, got {checksum!r}")


def _check_shared(shared: Any, where: str) -> None:
    """The shared files an incremental keyed-state handle references (absent for full snapshots)."""
    if shared is None:
        return
    if not isinstance(shared, list):
        raise _Invalid(where, f"expected a list of shared file handles, got {type(shared).__name__}")
    for i, f in enumerate(shared):
        at = f"{where}[{i}]"
        if not isinstance(f, dict):
            raise _Invalid(at, f"expected a shared file handle, got {type(f).__name__}")
        url = _str(f, "url", at)
        assert url is not None
        _str(f, "file", at)
        _int(f, "size", at)
        _int(f, "checkpoint_id", at)
        checksum = _need(f, "checksum", at)
        if not isinstance(checksum, str) or not _CHECKSUM.match(checksum):
            raise _Invalid(_join(at, "checksum"), f"expected 'sha256:' and 64 hex digits, got {checksum!r}")


def _check_subtask(sub: Any, where: str, parallelism: int, max_parallelism: int) -> int:
    if not isinstance(sub, dict):
        raise _Invalid(where, f"expected an object, got {type(sub).__name__}")
    index = _int(sub, "subtask", where)
    if index >= parallelism:
        raise _Invalid(_join(where, "subtask"), f"subtask {index} is out of range for parallelism {parallelism}")
    keyed = _need(sub, "keyed_state", where)
    if keyed is not None:
        at = _join(where, "keyed_state")
        _check_handle(keyed, at)
        groups = _need(keyed, "key_groups", at)
        if (
            not isinstance(groups, list)
            or len(groups) != 2
            or not all(_is_int(g) for g in groups)
            or not 0 <= groups[0] <= groups[1] < max_parallelism
        ):
            raise _Invalid(
                _join(at, "key_groups"),
                f"expected [first, last] with 0 <= first <= last < max parallelism {max_parallelism}, got {groups!r}",
            )
        _check_states(_need(keyed, "states", at), _join(at, "states"), KEYED_STATE_KINDS, incremental="shared" in keyed)
        _check_shared(keyed.get("shared"), _join(at, "shared"))
    op_state = _need(sub, "operator_state", where)
    if op_state is not None:
        at = _join(where, "operator_state")
        _check_handle(op_state, at)
        _check_states(_need(op_state, "states", at), _join(at, "states"), OPERATOR_STATE_KINDS)
    _need(sub, "source_offsets", where)  # any JSON value
    channels = sub.get("channel_state")
    if channels is not None:  # an unaligned checkpoint's in-flight buffers
        at = _join(where, "channel_state")
        _check_handle(channels, at)
        _int(channels, "input_bytes", at)
        _int(channels, "output_bytes", at)
    return index


def _check(doc: Any) -> None:
    if not isinstance(doc, dict):
        raise _Invalid("", f"expected a JSON object, got {type(doc).__name__}")
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise _Invalid("format", f"not a flinkpy checkpoint (expected '{FORMAT}', got {fmt!r})")
    version = _need(doc, "version", "")
    if not _is_int(version) or version < 1:
        raise _Invalid("version", f"expected a positive integer, got {version!r}")
    if version > VERSION:
        raise _Invalid("version", f"written by a newer flinkpy (format version {version}; this one reads up to {VERSION})")
    _str(doc, "job_id", "")
    _need(doc, "job_name", "")
    if not isinstance(doc["job_name"], str):
        raise _Invalid("job_name", f"expected a string, got {doc['job_name']!r}")
    _int(doc, "checkpoint_id", "")
    kind = _one_of(doc, "kind", "", KINDS)
    savepoint_format = _one_of(doc, "savepoint_format", "", SAVEPOINT_FORMATS)
    if kind == "savepoint" and savepoint_format is None:
        raise _Invalid("savepoint_format", "a savepoint needs 'canonical' or 'native', got null")
    _int(doc, "trigger_timestamp", "")
    completed = _int(doc, "completion_timestamp", "")
    if completed < doc["trigger_timestamp"]:
        raise _Invalid("completion_timestamp", f"{completed} is before trigger_timestamp {doc['trigger_timestamp']}")
    _one_of(doc, "mode", "", MODES)
    if "alignment" in doc:  # absent in documents of older flinkpy: aligned
        _one_of(doc, "alignment", "", ("aligned", "unaligned"))
    _int(doc, "max_parallelism", "", low=1)
    operators = _need(doc, "operators", "")
    if not isinstance(operators, list):
        raise _Invalid("operators", f"expected a list, got {type(operators).__name__}")
    seen_ids: set[str] = set()
    for i, op in enumerate(operators):
        where = f"operators[{i}]"
        if not isinstance(op, dict):
            raise _Invalid(where, f"expected an object, got {type(op).__name__}")
        op_id = _str(op, "operator_id", where)
        if op_id in seen_ids:
            raise _Invalid(_join(where, "operator_id"), f"operator {op_id!r} appears twice")
        seen_ids.add(op_id)  # type: ignore[arg-type]
        _str(op, "uid", where, nullable=True)
        if not isinstance(_need(op, "name", where), str):
            raise _Invalid(_join(where, "name"), f"expected a string, got {op['name']!r}")
        _int(op, "vertex_id", where)
        parallelism = _int(op, "parallelism", where, low=1)
        max_par = _int(op, "max_parallelism", where, low=1)
        if parallelism > max_par:
            raise _Invalid(_join(where, "parallelism"), f"{parallelism} exceeds max_parallelism {max_par}")
        subtasks = _need(op, "subtasks", where)
        if not isinstance(subtasks, list):
            raise _Invalid(_join(where, "subtasks"), f"expected a list, got {type(subtasks).__name__}")
        seen: set[int] = set()
        for j, sub in enumerate(subtasks):
            index = _check_subtask(sub, f"{where}.subtasks[{j}]", parallelism, max_par)
            if index in seen:
                raise _Invalid(f"{where}.subtasks[{j}].subtask", f"subtask {index} appears twice")
            seen.add(index)


def validate(doc: Any, where: str) -> dict[str, Any]:
    """Return ``doc`` if it is a valid `_metadata` document; raise naming ``where`` and the first problem.

    ``where`` is the path or URL the document came from, so the error says which file is bad.

    >>> validate({"format": "flinkpy-checkpoint", "version": 9}, "/ckpt/chk-3/_metadata")
    Traceback (most recent call last):
    ...
    flinkpy.checkpoint.metadata.CorruptCheckpointError: /ckpt/chk-3/_metadata: version: written by a newer flinkpy (format version 9; this one reads up to 1) (restore from an older checkpoint or a savepoint; this one cannot be used)
    """
    try:
        _check(doc)
    except _Invalid as exc:
        raise CorruptCheckpointError(where, str(exc)) from None
    return doc


# --------------------------------------------------------------------------- the seal


def document_checksum(doc: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of ``doc`` without its ``metadata_checksum``, in canonical JSON."""
    body = {k: v for k, v in doc.items() if k != CHECKSUM_FIELD}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def seal(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with its ``metadata_checksum`` (re)computed: the last step before writing it."""
    body = {k: v for k, v in doc.items() if k != CHECKSUM_FIELD}
    return {**body, CHECKSUM_FIELD: document_checksum(body)}


def check_seal(doc: Any, where: str) -> bool:
    """True when ``doc`` carries a checksum that matches it, False when it carries none (written
    by a flinkpy before the seal); ``CorruptCheckpointError`` naming ``where`` when it differs."""
    if not isinstance(doc, dict) or CHECKSUM_FIELD not in doc:
        return False
    recorded = doc[CHECKSUM_FIELD]
    if not isinstance(recorded, str) or not _CHECKSUM.match(recorded):
        raise CorruptCheckpointError(where, f"{CHECKSUM_FIELD}: expected 'sha256:' and 64 hex digits, got {recorded!r}")
    if recorded != document_checksum(doc):
        raise CorruptCheckpointError(
            where, f"{CHECKSUM_FIELD}: the document does not match its checksum: it was changed or damaged after it was written"
        )
    return True


def unsealed_warning(where: str) -> str:
    """The warning a reader gives for a `_metadata` without a checksum (read all the same)."""
    return (f"{where} has no {CHECKSUM_FIELD} (written by an older flinkpy): "
            "its integrity cannot be checked; take a new savepoint to get a sealed one")


# --------------------------------------------------------------------------- reading it


def handles(doc: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any], str, dict[str, Any]]]:
    """Every state handle of a (valid) document: (operator, subtask, "keyed"|"operator", handle)."""
    for op in doc["operators"]:
        for sub in op["subtasks"]:
            if sub.get("keyed_state") is not None:
                yield op, sub, "keyed", sub["keyed_state"]
            if sub.get("operator_state") is not None:
                yield op, sub, "operator", sub["operator_state"]
            if sub.get("channel_state"):
                yield op, sub, "channel", sub["channel_state"]


def summarize(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Totals of a (valid) document, for `flinkpy checkpoint inspect`.

    Sizes count each handle; ``total_size`` and ``files`` count each distinct file once (two
    handles could share a file). ``key_group_ranges`` lists the keyed-state size of every
    key-group range, per operator, in key-group order.
    """
    files: dict[str, int] = {}
    shared: dict[str, int] = {}
    new_shared: dict[str, int] = {}
    operators = []
    ranges = []
    for op in doc["operators"]:
        op_size = 0
        op_files: set[str] = set()
        subtasks = []
        for sub in sorted(op["subtasks"], key=lambda s: s["subtask"]):
            keyed, op_state = sub.get("keyed_state"), sub.get("operator_state")
            channels = sub.get("channel_state") or None
            keyed_size = keyed["size"] if keyed else 0
            op_state_size = op_state["size"] if op_state else 0
            channel_size = channels["size"] if channels else 0
            for handle in (keyed, op_state, channels):
                if handle:
                    files[handle["path"]] = handle["size"]
                    op_files.add(handle["path"])
            for f in (keyed or {}).get("shared") or ():
                shared[f["url"]] = f["size"]
                if f["checkpoint_id"] == doc.get("checkpoint_id"):
                    new_shared[f["url"]] = f["size"]
                keyed_size += f["size"]
            subtasks.append(
                {
                    "subtask": sub["subtask"],
                    "size": keyed_size + op_state_size + channel_size,
                    "keyed_state_size": keyed_size,
                    "operator_state_size": op_state_size,
                    "channel_state_size": channel_size,
                    "in_flight_input_bytes": channels["input_bytes"] if channels else 0,
                    "in_flight_output_bytes": channels["output_bytes"] if channels else 0,
                    "key_groups": list(keyed["key_groups"]) if keyed else None,
                }
            )
            if keyed:
                ranges.append({"operator_id": op["operator_id"], "uid": op["uid"], "key_groups": list(keyed["key_groups"]), "size": keyed_size})
            op_size += keyed_size + op_state_size + channel_size
        operators.append(
            {
                "operator_id": op["operator_id"],
                "uid": op["uid"],
                "name": op["name"],
                "parallelism": op["parallelism"],
                "size": op_size,
                "files": len(op_files),
                "subtasks": subtasks,
            }
        )
    ranges.sort(key=lambda r: (r["operator_id"], r["key_groups"][0]))
    private = sum(files.values())
    in_flight = [(s["in_flight_input_bytes"], s["in_flight_output_bytes"]) for o in operators for s in o["subtasks"]]
    return {
        "alignment": doc.get("alignment", "aligned"),
        "in_flight_input_bytes": sum(i for i, _ in in_flight),
        "in_flight_output_bytes": sum(o for _, o in in_flight),
        "total_size": private + sum(shared.values()),
        "files": len(files) + len(shared),
        "incremental": bool(shared),
        #: what this checkpoint uploaded (its own files and the shared files it added) ...
        "incremental_size": private + sum(new_shared.values()),
        #: ... and everything it needs to be restored (its files and every shared file it references)
        "full_size": private + sum(shared.values()),
        "shared_files": len(shared),
        "operators": operators,
        "key_group_ranges": ranges,
    }
