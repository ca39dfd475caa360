"""Snapshot analysis: what a checkpoint's or savepoint's state holds, by operator, state and key group.

The read side of a state processor: :func:`analyze` opens every state file of a completed
checkpoint or savepoint (any fsspec URL; its directory or its `_metadata`) and reports

- per operator (name, uid, operator id) and per keyed state name: keys, entries and bytes, in
  total and per key group (the unit that moves when a job is rescaled), and per subtask;
- operator (non-keyed) state per operator, subtask and state name: entries and bytes;
- the N largest keys, by bytes, across every operator and state;
- skew figures per operator (see below).

It is what ``flinkpy state analyze PATH`` prints; :func:`to_dataframe` turns the result into a
pandas DataFrame (one row per operator, state and key group) for the user's own analysis.

Two engines compute it. ``local``, this module, reads the state files one at a time in this
process. ``spark`` (:mod:`flinkpy.spark.analysis`) reads them in Spark tasks, one row per key, and
aggregates with Spark, for snapshots too large for one process; its
``read_keyed_state(spark, path)`` returns that DataFrame of keys for the user's own queries.
Both feed the same :func:`build_report`, so they give the same report. The Python API that
chooses between them is :func:`flinkpy.client.analysis.analyze`: this module sits with the
checkpoints it reads, below the Spark runner, and so never imports it.

**What the numbers mean.**

``bytes`` of one key of one state is ``len(pickle.dumps((key, value), protocol=5))``: the size
of that key's entry pickled on its own, the way the heap backend writes it (pickle, protocol 5).
It is the entry's share of the snapshot, not an exact slice of the file: a state file is one
pickle of all key groups, which shares a frame and memoises repeated objects, so the sum of
``bytes`` is usually a little more than the file size (about a dozen bytes of pickle framing per
key), and less when many entries refer to one shared object. ``bytes`` of a key group, a state,
a subtask or an operator is the sum over its keys; operator state is measured the same way, as
the pickled size of each state's list of items (a sink's state as the pickled size of the
sink's snapshot). ``file_bytes`` are the sizes of the files themselves, from `_metadata`.

``keys`` counts distinct keys (a key with state in two states counts once per state, and once
in the operator's total); ``entries`` counts what the state holds: 1 per key for value,
reducing and aggregating state, the number of elements for list state, the number of mapped
keys for map state, the number of items for operator list state. The engine's own states are
listed too, flagged ``internal`` (their names start with ``_``): timers (``_timers.event``,
``_timers.processing``, counted per user key, one entry per timer, each timer pickled on its own)
and the window operator's contents and trigger state.

**Skew** (per operator with keyed state; a figure of 1.0 means perfectly even):

- ``key_group_max_to_mean``: the largest key group's bytes divided by the mean over *all*
  ``max_parallelism`` key groups of the operator, empty ones included — since state is moved and
  spread by key group, no parallelism can balance the operator better than this figure allows;
- ``subtask_max_to_mean``: the largest subtask's keyed bytes divided by the mean over the
  operator's subtasks (those without keyed state count as 0): the imbalance of this snapshot's
  parallelism;
- ``largest_key_share``: the bytes of the largest key (summed over the operator's states) as a
  fraction of the operator's keyed bytes (``largest_key_bytes``) — a hot key shows here.

Every file is verified first, as ``flinkpy checkpoint verify`` does (sizes and sha256 checksums
recorded in `_metadata`, through ``CheckpointStorage.verify``), and read through
``CheckpointStorage.read_state``, which checks them again as it reads: a missing or half-written
checkpoint is refused before any state is decoded — ``NotFoundError`` (exit 4) when there is no
`_metadata` (nothing there, or a checkpoint that was never completed), ``CorruptCheckpointError``
(exit 9) when `_metadata` or a state file is damaged or missing.

State files are Python pickles, and a pickle names the code that rebuilds its objects. So
by default they are decoded with :mod:`flinkpy.state.safe_pickle`, which loads plain Python
values and flinkpy's own value types and refuses anything else by name (exit 8): analysing a
snapshot copied from elsewhere runs none of its code. ``trusted=True`` (``--trusted``) decodes
with Python's own unpickler, for state that holds the job's own classes (importable through
``PYTHONPATH``): only for snapshots you trust.

>>> import tempfile
>>> from flinkpy.checkpoint import CheckpointStorage, keyed_state, new_metadata, new_operator, new_subtask
>>> from flinkpy.state.heap import HeapKeyedStateBackend
>>> from flinkpy.datastream.state import ListStateDescriptor
>>> backend = HeapKeyedStateBackend(128, range(0, 128))
>>> events = backend.get_partitioned_state(ListStateDescriptor("events", None))
>>> for key, n in [("hot", 40), ("cold", 1)]:
...     backend.set_current_key(key)
...     events.add_all(range(n))
>>> frozen = backend.snapshot_sync()
>>> storage = CheckpointStorage(tempfile.mkdtemp())
>>> handle = storage.write_state("job", 1, "sums-0-keyed", frozen.serialize())
>>> op = new_operator(operator_id="sums", uid="sums", name="sums", vertex_id=1, parallelism=1,
...     max_parallelism=128, subtasks=[new_subtask(0, keyed_state=keyed_state(handle, (0, 127), frozen.summary()))])
>>> _ = storage.write_metadata("job", 1, new_metadata(job_id="job", job_name="demo", checkpoint_id=1,
...     trigger_timestamp=1, completion_timestamp=2, operators=[op]))
>>> result = analyze(storage.checkpoint_dir("job", 1), top=1)
>>> [(s["name"], s["keys"], s["entries"]) for s in result["operators"][0]["states"]]
[('events', 2, 41)]
>>> result["top_keys"][0]["key"], result["top_keys"][0]["entries"]
("'hot'", 40)
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from flinkpy.checkpoint.metadata import CorruptCheckpointError
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.errors import ConfigurationError, UsageError
from flinkpy.state import canonical
from flinkpy.state.heap import SNAPSHOT_VERSION
from flinkpy.state.heap import TIMER_EVENT_TABLE as TIMERS_EVENT, TIMER_PROCESSING_TABLE as TIMERS_PROCESSING
from flinkpy.state.operator import kind_of as operator_state_kind

#: key reprs longer than this are cut (with "...") in the top-keys list
KEY_REPR_LIMIT = 80
#: columns of :func:`to_dataframe`, in order
COLUMNS = ("operator", "state", "key_group", "keys", "entries", "bytes", "kind", "subtask", "operator_id", "uid")

_PROTOCOL = 5
_TIMER_STATES = frozenset({TIMERS_EVENT, TIMERS_PROCESSING})


def analyze(
    path: str,
    *,
    top: int = 10,
    storage_options: Mapping[str, Any] | None = None,
    trusted: bool = False,
) -> dict[str, Any]:
    """Analyze the checkpoint or savepoint at ``path`` (its directory or `_metadata`, any fsspec URL).

    Returns a plain, JSON-serializable dict::

        {"path", "metadata_path", "engine", "job_id", "job_name", "checkpoint_id", "kind",
         "savepoint_format", "max_parallelism", "files_checked", "bytes_checked",
         "totals": {"keys", "entries", "bytes", "file_bytes", "operator_state_bytes", "operator_state_file_bytes"},
         "operators": [{"operator_id", "uid", "name", "parallelism", "max_parallelism",
                        "keys", "entries", "bytes", "file_bytes",
                        "states": [{"name", "kind", "internal", "keys", "entries", "bytes", "key_groups", "max_key_group_bytes"}],
                        "key_groups": [{"state", "kind", "key_group", "subtask", "keys", "entries", "bytes"}],
                        "subtasks": [{"subtask", "key_groups", "keys", "entries", "bytes", "file_bytes",
                                      "operator_state_bytes", "operator_state_file_bytes"}],
                        "operator_state": [{"subtask", "name", "kind", "entries", "bytes"}],
                        "operator_state_bytes", "operator_state_file_bytes",
                        "skew": {"key_group_max_bytes", "key_group_mean_bytes", "key_group_max_to_mean",
                                 "subtask_max_bytes", "subtask_mean_bytes", "subtask_max_to_mean",
                                 "largest_key_bytes", "largest_key_share"} or None}],
         "top_keys": [{"operator", "uid", "operator_id", "state", "kind", "key", "key_group",
                       "subtask", "entries", "bytes"}]}

    (the module docstring defines keys, entries, bytes and the skew figures). ``key_groups`` of a
    state counts its non-empty key groups; of a subtask it is its ``[first, last]`` range.
    ``top`` is how many keys ``top_keys`` lists (largest first, ties in the order the snapshot
    holds them; 0 for none).

    This is the ``local`` engine: it reads the files one at a time in this process
    (:func:`flinkpy.client.analysis.analyze` offers Spark's too).
    """
    if top < 0:
        raise UsageError(f"top must be 0 or more, got {top}")
    storage = CheckpointStorage(path, storage_options=storage_options)
    report = storage.verify(path)  # NotFoundError (exit 4) when there is no complete checkpoint
    if not report.restorable:
        raise not_restorable(report)
    doc = report.metadata
    assert doc is not None
    reader = StateFileReader(storage, report.path, trusted=trusted)
    top_heap: list[tuple[int, int, dict[str, Any]]] = []
    order = itertools.count()
    facts = [_scan_operator(op, reader, top, top_heap, order) for op in doc["operators"]]
    top_keys = [row for _, _, row in sorted(top_heap, key=lambda t: (-t[0], -t[1]))]
    return build_report(report, facts, top_keys, engine="local")


def key_group_rows(result: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """One dict per operator, keyed state and non-empty key group of an :func:`analyze` result,
    with the :data:`COLUMNS` as keys (``operator`` is the operator's name)."""
    for op in result["operators"]:
        for row in op["key_groups"]:
            yield {
                "operator": op["name"],
                "state": row["state"],
                "key_group": row["key_group"],
                "keys": row["keys"],
                "entries": row["entries"],
                "bytes": row["bytes"],
                "kind": row["kind"],
                "subtask": row["subtask"],
                "operator_id": op["operator_id"],
                "uid": op["uid"],
            }


def to_dataframe(result: Mapping[str, Any]) -> Any:
    """The keyed state of an :func:`analyze` result as a pandas DataFrame, one row per key group.

    Columns: operator, state, key_group, keys, entries, bytes, then kind, subtask, operator_id,
    uid. pandas is not a dependency of flinkpy: without it this raises ``ConfigurationError``
    saying to ``pip install pandas``. For example::

        df = to_dataframe(analyze("s3://bucket/savepoints/savepoint-3f2a9c-1b2c3d4e5f60"))
        df.groupby(["operator", "state"])["bytes"].sum()

    For a Spark DataFrame with one row per key instead, see
    ``flinkpy.spark.analysis.read_keyed_state``.
    """
    try:
        import pandas as pd
    except ImportError:
        raise ConfigurationError(
            "to_dataframe needs pandas, which is not installed",
            remedy="run 'pip install pandas', which flinkpy does not depend on; or use key_group_rows(result), the same rows as dicts",
        ) from None
    return pd.DataFrame(list(key_group_rows(result)), columns=list(COLUMNS))


# --------------------------------------------------------------------------- reading (both engines)


class StateFileReader:
    """Reads and decodes the state files of one checkpoint, one at a time (none is kept, so
    memory holds one subtask's state at most). Picklable: Spark tasks use it too.

    ``command`` names the command a refused file is to be given ``--trusted`` again (errors say
    what to run); the state processor reads through this class as well."""

    def __init__(self, storage: CheckpointStorage, dir_url: str, *, trusted: bool = False, command: str = "flinkpy state analyze"):
        self.storage = storage
        self.dir_url = dir_url
        #: decode with pickle's own unpickler (any class) instead of flinkpy.state.safe_pickle
        self.trusted = trusted
        self.command = command

    def url(self, handle: Mapping[str, Any]) -> str:
        return f"{self.dir_url.rstrip('/')}/{handle['path']}"

    def load(self, handle: Mapping[str, Any]) -> Any:
        from flinkpy.state.incremental import is_incremental, read_keyed_state

        with self.decoding(handle):
            if is_incremental(handle):  # native store files: read out key group by key group
                return read_keyed_state(self.storage, self.dir_url, handle, restricted=not self.trusted)
            data = self.storage.read_state(self.dir_url, handle)  # checks size and checksum again
            # a keyed-state file's document, or an operator-state object
            return canonical.loads(data, self.unpickle)

    @property
    def unpickle(self) -> Any:
        """The function that decodes one pickle: restricted unless ``trusted``."""
        from flinkpy.state import safe_pickle

        return pickle.load if self.trusted else safe_pickle.load

    @contextlib.contextmanager
    def decoding(self, handle: Mapping[str, Any]) -> Iterator[None]:
        """Around decoding the file of ``handle``: a refused class, a class that cannot be
        imported and a file that does not decode become errors that name the file and the remedy."""
        from flinkpy.state import safe_pickle

        try:
            yield
        except safe_pickle.UntrustedClassError as exc:
            raise ConfigurationError(
                f"{self.url(handle)}: {exc.message}; {self.command} does not load it, because unpickling "
                "a class runs code the file names",
                remedy=f"if you trust this snapshot, run '{self.command}' again with --trusted (and the job's modules on PYTHONPATH)",
            ) from None
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(
                f"{self.url(handle)}: its state holds objects whose class cannot be imported here: {exc}",
                remedy=f"put the directory of the job's modules on PYTHONPATH and run '{self.command}' again",
            ) from None
        except Exception as exc:  # noqa: BLE001 - a file that matched its checksum but does not decode
            raise CorruptCheckpointError(self.url(handle), f"not a flinkpy state file: {type(exc).__name__}: {exc}") from None


def not_restorable(report: Any) -> CorruptCheckpointError:
    """The error for a ``VerifyReport`` with problems: the one problem, or the first five."""
    remedy = f"run 'flinkpy checkpoint verify {report.path}' for the details; analyze a complete checkpoint or savepoint"
    if len(report.problems) == 1:
        p = report.problems[0]
        return CorruptCheckpointError(p.path, p.problem, remedy=remedy)
    listed = "; ".join(str(p) for p in report.problems[:5]) + ("; ..." if len(report.problems) > 5 else "")
    return CorruptCheckpointError(report.path, f"{len(report.problems)} problems: {listed}", remedy=remedy)


def keyed_entries(snapshot: Any, url: str) -> Iterator[tuple[str, str, int | None, Any, int, int]]:
    """``(state, kind, key_group, key, entries, bytes)`` for every key of every state of one
    keyed-state file, in the file's order: states as stored, key groups ascending, keys as
    stored. Each state first yields ``(state, kind, None, None, 0, 0)``, so a state without
    keys is still seen. ``url`` names the file in errors.
    """
    for name, kind, kg, mapping in key_group_maps(snapshot, url):
        if kg is None:
            yield name, kind, None, None, 0, 0
            continue
        for key, (n, size) in _per_key(name, kind, mapping):
            yield name, kind, kg, key, n, size


def keyed_values(snapshot: Any, url: str) -> Iterator[tuple[str, str, int | None, Any, Any]]:
    """``(state, kind, key_group, key, value)`` for every key of every state of one keyed-state
    file, in :func:`keyed_entries`' order (each state first as ``(state, kind, None, None,
    None)``). A timer table's key is the user key, and its value the dict of that key's timers
    (``(key, namespace, timestamp) -> payload``), so that timers compare per key."""
    for name, kind, kg, mapping in key_group_maps(snapshot, url):
        if kg is None:
            yield name, kind, None, None, None
        elif name in _TIMER_STATES:
            per_key: dict[Any, dict[Any, Any]] = {}
            for timer, value in mapping.items():
                per_key.setdefault(timer[0] if isinstance(timer, tuple) and timer else timer, {})[timer] = value
            for key, timers in per_key.items():
                yield name, kind, kg, key, timers
        else:
            for key, value in mapping.items():
                yield name, kind, kg, key, value


def key_group_maps(snapshot: Any, url: str) -> Iterator[tuple[str, str, int | None, Mapping[Any, Any]]]:
    """``(state, kind, key_group, {key: value})`` of each non-empty key group of each state of a
    decoded keyed-state file, key groups ascending; each state first as ``(state, kind, None,
    {})``. Refuses (``CorruptCheckpointError``) a snapshot version this flinkpy does not read."""
    if not isinstance(snapshot, dict) or snapshot.get("version") != SNAPSHOT_VERSION:
        version = snapshot.get("version") if isinstance(snapshot, dict) else None
        raise CorruptCheckpointError(
            url,
            f"keyed state snapshot has version {version!r}; this flinkpy reads version {SNAPSHOT_VERSION}",
            remedy="analyze with the flinkpy version that wrote the snapshot",
        )
    for name, entry in snapshot["states"].items():
        kind = entry["kind"]
        yield name, kind, None, {}
        for kg, mapping in sorted(entry["key_groups"].items(), key=lambda item: int(item[0])):
            if mapping:
                yield name, kind, int(kg), mapping


def operator_states(state: Any) -> Iterator[tuple[str, str, int, int]]:
    """(name, kind, entries, bytes) of each state in an operator-state file (see task.checkpointing)."""
    for name, kind, items in operator_state_values(state):
        yield name, kind, (len(items) if hasattr(items, "__len__") else 1), _size(items)


def operator_state_values(state: Any) -> Iterator[tuple[str, str, Any]]:
    """(name, kind, items) of each state in a decoded operator-state file: a list state's items,
    a sink's snapshot (kind ``sink``), an async operator's requests in flight."""
    if not isinstance(state, dict):
        return
    for name, s in (state.get("functions") or {}).get("states", {}).items():
        yield name, operator_state_kind(s.get("mode")), s.get("items", [])
    if "sink" in state:
        yield "sink", "sink", state["sink"]
    if "async" in state:  # an async wait operator's requests in flight
        yield "async-requests", "list", state["async"]


def _size(obj: Any) -> int:
    return len(pickle.dumps(obj, protocol=_PROTOCOL))


def _entries(kind: str, value: Any) -> int:
    if kind in ("list", "map"):
        try:
            return len(value)
        except TypeError:
            return 1
    return 1


def _per_key(name: str, kind: str, mapping: Mapping[Any, Any]) -> Iterator[tuple[Any, tuple[int, int]]]:
    """(key, (entries, bytes)) of each key of one key group of one state.

    Timer tables are keyed by ``(key, namespace, timestamp)`` (see ``flinkpy.task.timers``):
    their entries are counted per user key, one per timer, each timer pickled on its own.
    """
    if name not in _TIMER_STATES:
        for key, value in mapping.items():
            yield key, (_entries(kind, value), _size((key, value)))
        return
    per_key: dict[Any, tuple[int, int]] = {}
    for timer, value in mapping.items():
        key = timer[0] if isinstance(timer, tuple) and timer else timer
        entries, size = per_key.get(key, (0, 0))
        per_key[key] = (entries + 1, size + _size((timer, value)))
    yield from per_key.items()


def key_repr(key: Any) -> str:
    """``repr(key)``, cut to :data:`KEY_REPR_LIMIT` characters (see :func:`cut_repr`)."""
    return cut_repr(repr(key))


def cut_repr(text: str) -> str:
    """A key's repr as the top-keys list shows it: at most :data:`KEY_REPR_LIMIT` characters, "..." ending a cut one."""
    return text if len(text) <= KEY_REPR_LIMIT else text[: KEY_REPR_LIMIT - 3] + "..."


def _ratio(value: float, mean: float) -> float:
    return round(value / mean, 3) if mean else 0.0


# --------------------------------------------------------------------------- facts -> report (both engines)


@dataclass
class OperatorFacts:
    """What an engine measured of one operator's state files; :func:`build_report` derives
    every total and figure of the report from these (and `_metadata`), the same way for both
    engines."""

    #: keyed state name -> kind, in order of first appearance (subtasks ascending, file order)
    declared: dict[str, str] = field(default_factory=dict)
    #: {state, kind, key_group, subtask, keys, entries, bytes} per state and non-empty key group
    key_groups: list[dict[str, Any]] = field(default_factory=list)
    #: subtask -> (distinct keys over all states, bytes of its largest key summed over the states)
    subtask_keys: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: {subtask, name, kind, entries, bytes} per operator state, subtasks ascending, file order
    operator_state: list[dict[str, Any]] = field(default_factory=list)


def build_report(report: Any, facts: list[OperatorFacts], top_keys: list[dict[str, Any]], *, engine: str) -> dict[str, Any]:
    """The :func:`analyze` result from a verified checkpoint (``VerifyReport``), one
    :class:`OperatorFacts` per operator of its `_metadata` (in order), and the top keys."""
    doc = report.metadata
    operators = [_operator_report(op, f) for op, f in zip(doc["operators"], facts, strict=True)]
    return {
        "path": report.path,
        "metadata_path": report.metadata_path,
        "engine": engine,
        "job_id": doc["job_id"],
        "job_name": doc["job_name"],
        "checkpoint_id": doc["checkpoint_id"],
        "kind": doc["kind"],
        "savepoint_format": doc.get("savepoint_format"),
        "max_parallelism": doc["max_parallelism"],
        "files_checked": report.files_checked,
        "bytes_checked": report.bytes_checked,
        "totals": {
            "keys": sum(o["keys"] for o in operators),
            "entries": sum(o["entries"] for o in operators),
            "bytes": sum(o["bytes"] for o in operators),
            "file_bytes": sum(o["file_bytes"] for o in operators),
            "operator_state_bytes": sum(o["operator_state_bytes"] for o in operators),
            "operator_state_file_bytes": sum(o["operator_state_file_bytes"] for o in operators),
        },
        "operators": operators,
        "top_keys": top_keys,
    }


def _operator_report(op: Mapping[str, Any], facts: OperatorFacts) -> dict[str, Any]:
    states = {
        name: {"name": name, "kind": kind, "internal": name.startswith("_"), "keys": 0, "entries": 0, "bytes": 0, "key_groups": 0, "max_key_group_bytes": 0}
        for name, kind in facts.declared.items()
    }
    per_subtask: dict[int, list[int]] = {}
    per_group: dict[int, int] = {}
    for r in facts.key_groups:
        st = states[r["state"]]
        st["keys"] += r["keys"]
        st["entries"] += r["entries"]
        st["bytes"] += r["bytes"]
        st["key_groups"] += 1
        st["max_key_group_bytes"] = max(st["max_key_group_bytes"], r["bytes"])
        sums = per_subtask.setdefault(r["subtask"], [0, 0])
        sums[0] += r["entries"]
        sums[1] += r["bytes"]
        per_group[r["key_group"]] = per_group.get(r["key_group"], 0) + r["bytes"]
    op_state_bytes: dict[int, int] = {}
    for r in facts.operator_state:
        op_state_bytes[r["subtask"]] = op_state_bytes.get(r["subtask"], 0) + r["bytes"]
    subtasks = []
    file_paths: dict[str, int] = {}
    op_file_paths: dict[str, int] = {}
    for sub in sorted(op["subtasks"], key=lambda s: s["subtask"]):
        index = sub["subtask"]
        keyed, op_handle = sub.get("keyed_state"), sub.get("operator_state")
        if keyed:
            file_paths[keyed["path"]] = keyed["size"]
        if op_handle:
            op_file_paths[op_handle["path"]] = op_handle["size"]
        entries, size = per_subtask.get(index, (0, 0))
        subtasks.append({
            "subtask": index,
            "key_groups": list(keyed["key_groups"]) if keyed else None,
            "keys": facts.subtask_keys.get(index, (0, 0))[0] if keyed else 0,
            "entries": entries,
            "bytes": size,
            "file_bytes": keyed["size"] if keyed else 0,
            "operator_state_bytes": op_state_bytes.get(index, 0),
            "operator_state_file_bytes": op_handle["size"] if op_handle else 0,
        })
    keyed_bytes = sum(s["bytes"] for s in subtasks)
    result = {
        "operator_id": op["operator_id"],
        "uid": op["uid"],
        "name": op["name"],
        "parallelism": op["parallelism"],
        "max_parallelism": op["max_parallelism"],
        "keys": sum(s["keys"] for s in subtasks),
        "entries": sum(s["entries"] for s in subtasks),
        "bytes": keyed_bytes,
        "file_bytes": sum(file_paths.values()),
        "states": list(states.values()),
        "key_groups": sorted(facts.key_groups, key=lambda r: (r["key_group"], r["state"])),
        "subtasks": subtasks,
        "operator_state": list(facts.operator_state),
        "operator_state_bytes": sum(s["operator_state_bytes"] for s in subtasks),
        "operator_state_file_bytes": sum(op_file_paths.values()),
        "skew": None,
    }
    if file_paths:
        largest_key = max((largest for _, largest in facts.subtask_keys.values()), default=0)
        kg_max = max(per_group.values(), default=0)
        kg_mean = keyed_bytes / op["max_parallelism"]
        st_max = max(s["bytes"] for s in subtasks)
        st_mean = keyed_bytes / max(op["parallelism"], len(subtasks))
        result["skew"] = {
            "key_group_max_bytes": kg_max,
            "key_group_mean_bytes": round(kg_mean, 3),
            "key_group_max_to_mean": _ratio(kg_max, kg_mean),
            "subtask_max_bytes": st_max,
            "subtask_mean_bytes": round(st_mean, 3),
            "subtask_max_to_mean": _ratio(st_max, st_mean),
            "largest_key_bytes": largest_key,
            "largest_key_share": round(largest_key / keyed_bytes, 4) if keyed_bytes else 0.0,
        }
    return result


# --------------------------------------------------------------------------- the local engine


def _scan_operator(
    op: Mapping[str, Any],
    reader: StateFileReader,
    top: int,
    top_heap: list[tuple[int, int, dict[str, Any]]],
    order: Iterator[int],
) -> OperatorFacts:
    facts = OperatorFacts()
    for sub in sorted(op["subtasks"], key=lambda s: s["subtask"]):
        index = sub["subtask"]
        keyed, op_handle = sub.get("keyed_state"), sub.get("operator_state")
        if keyed:
            #: (state, key group) -> its row; key group -> {key: its bytes over every state}
            rows: dict[tuple[str, int], dict[str, Any]] = {}
            group_keys: dict[int, dict[Any, int]] = {}
            for name, kind, kg, key, n, size in keyed_entries(reader.load(keyed), reader.url(keyed)):
                if kg is None:
                    facts.declared.setdefault(name, kind)
                    continue
                row = rows.get((name, kg))
                if row is None:
                    row = rows[(name, kg)] = {"state": name, "kind": kind, "key_group": kg, "subtask": index, "keys": 0, "entries": 0, "bytes": 0}
                row["keys"] += 1
                row["entries"] += n
                row["bytes"] += size
                keys_here = group_keys.setdefault(kg, {})
                keys_here[key] = keys_here.get(key, 0) + size
                if top and (len(top_heap) < top or size > top_heap[0][0]):
                    # Ties keep the key seen first: the sequence number breaks them.
                    item = (size, -next(order), {
                        "operator": op["name"], "uid": op["uid"], "operator_id": op["operator_id"],
                        "state": name, "kind": kind, "key": key_repr(key), "key_group": kg,
                        "subtask": index, "entries": n, "bytes": size,
                    })
                    if len(top_heap) < top:
                        heapq.heappush(top_heap, item)
                    else:
                        heapq.heapreplace(top_heap, item)
            facts.key_groups.extend(rows.values())
            facts.subtask_keys[index] = (
                sum(len(k) for k in group_keys.values()),
                max((max(k.values()) for k in group_keys.values() if k), default=0),
            )
        if op_handle:
            for name, kind, entries, size in operator_states(reader.load(op_handle)):
                facts.operator_state.append({"subtask": index, "name": name, "kind": kind, "entries": entries, "bytes": size})
    return facts
