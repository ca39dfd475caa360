"""What every keyed state backend shares: the current key, state registration, TTL, restore checks.

A keyed state backend holds the keyed state of one subtask, for the key groups of its range.
The heap backend (flinkpy.state.heap) keeps it in dicts; the RocksDB backend
(flinkpy.state.rocksdb) in an embedded RocksDB on local disk. Both expose the same surface, and
one conformance suite (tests/backends.py) runs the keyed-state tests against each:

- ``set_current_key(key)`` / ``set_current_key_and_group(key, kg)`` / ``clear_current_key()``,
  ``current_key``, ``current_key_group``;
- ``get_partitioned_state(descriptor)`` for value, list, map, reducing and aggregating state,
  with time-to-live (flinkpy.state.ttl) when the descriptor enables it;
- ``snapshot()`` (the canonical document), ``snapshot_sync()`` (the synchronous part of an
  asynchronous snapshot; its result has ``serialize()``, ``summary()``, ``to_dict()``, ``empty``
  and ``key_group_range``; ``write(out)`` streams it as a canonical file, flinkpy.state.canonical),
  ``restore(snapshots)`` (canonical documents, any backend, any old parallelism: only the key
  groups of this backend's range are kept), ``restore_file(f)`` (a canonical file, streamed);
- ``table(name)``, ``frozen(name)``, ``thaw(name, kg)``, ``rebind()``: the raw per-key-group
  tables the engine's fast paths (timers, keyed reduce, TTL cleanup) use;
- ``state_names()``, ``num_keys()``, ``num_entries()``, ``keys_of(name)``, ``close()``.

The canonical snapshot document, the same from every backend::

    {"version": 1, "states": {name: {"kind": k, "key_groups": {kg: {key: value}}, ["ttl_ms": t | "ttl_unknown": True]}}}

where a list state's value is the list, and a map state's value is the dict of its entries;
``ttl_ms`` is the state's time-to-live, and ``ttl_unknown`` marks a state moved from Spark,
which keeps a state declared after open() without a record of its time-to-live.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import IO, Any

from flinkpy.common.state import State, StateDescriptor
from flinkpy.errors import FlinkpyError, InvalidProgramError
from flinkpy.state.key_groups import KeyGroupAssigner, check_max_parallelism

SNAPSHOT_VERSION = 1
KINDS = ("value", "list", "map", "reducing", "aggregating")
NO_KEY: Any = object()


def no_current_key() -> FlinkpyError:
    return FlinkpyError(
        "keyed state was accessed without a current key",
        remedy="use keyed state only in functions applied after key_by(), while "
        "processing a record or a timer",
    )


def check_snapshot_version(snap: Mapping[str, Any]) -> None:
    version = snap.get("version")
    if version != SNAPSHOT_VERSION:
        raise FlinkpyError(
            f"keyed state snapshot has version {version!r}; this flinkpy reads "
            f"version {SNAPSHOT_VERSION}",
            remedy="restore with the flinkpy version that wrote the snapshot",
        )


class KeyedStateBackendBase:
    """The parts of a keyed state backend that do not depend on where the state is stored.

    Subclasses implement ``set_current_key_and_group``, ``_new_state`` (the raw state object of
    one kind) and storage; this class does key checks, registration, TTL wrapping and the checks
    of a restore.
    """

    def __init__(self, max_parallelism: int, key_group_range: range) -> None:
        check_max_parallelism(max_parallelism)
        if key_group_range.step != 1 or not (
            0 <= key_group_range.start <= key_group_range.stop <= max_parallelism
        ):
            raise FlinkpyError(
                f"key group range {key_group_range} is not a contiguous range inside "
                f"0..{max_parallelism - 1}"
            )
        self.max_parallelism = max_parallelism
        self.key_group_range = key_group_range
        self._assign = KeyGroupAssigner(max_parallelism)
        self._kinds: dict[str, str] = {}
        self._states: dict[str, Any] = {}
        self._current_key: Any = NO_KEY
        self._current_group: int | None = None
        #: state time-to-live (flinkpy.state.ttl): policies by state name, and the clock (ms)
        self._ttl: dict[str, Any] = {}
        self._wrapped: dict[str, Any] = {}
        #: TTL (ms, or None) of each state as the restored snapshots recorded it
        self._restored_ttl: dict[str, int | None] = {}
        #: restored states whose snapshot could not tell whether they have a time-to-live (moved
        #: from Spark, which keeps a state declared after open() without recording it)
        self._ttl_unknown: set[str] = set()
        #: the keyed operator whose state this is (the task sets it), for the messages
        self.operator_name: str | None = None
        self.ttl_clock: Any = lambda: int(time.time() * 1000)
        self._record_cleaners: list[Any] = []

    @property
    def kinds(self) -> dict[str, str]:
        """The kind ("value", "list", ...) of each state registered or restored, by name."""
        return dict(self._kinds)

    @property
    def ttl_states(self) -> set[str]:
        """The names of the states registered with a time-to-live."""
        return set(self._ttl)

    # -- current key --------------------------------------------------------------------
    def set_current_key(self, key: Any) -> None:
        """Make ``key`` the key that state reads and writes refer to.

        Raises if the key's group does not belong to this backend: the record was routed to
        the wrong subtask, which means the key's hash is not stable across processes.
        """
        key_group = self._assign(key)
        if key_group not in self.key_group_range:
            raise FlinkpyError(
                f"key {key!r} belongs to key group {key_group}, which is outside this "
                f"subtask's key group range {self.key_group_range.start}.."
                f"{self.key_group_range.stop - 1} (max parallelism {self.max_parallelism})",
                remedy="the key must hash identically in every process: use str, bytes, int, "
                "tuples or Rows of them, or objects that pickle deterministically",
            )
        self.set_current_key_and_group(key, key_group)

    def set_current_key_and_group(self, key: Any, key_group: int) -> None:
        raise NotImplementedError

    @property
    def current_key(self) -> Any:
        if self._current_key is NO_KEY:
            raise FlinkpyError(
                "there is no current key",
                remedy="keyed state and get_current_key() are only available while a "
                "keyed function processes a record or timer",
            )
        return self._current_key

    @property
    def current_key_group(self) -> int | None:
        return self._current_group

    # -- states -------------------------------------------------------------------------
    def _new_state(self, name: str, kind: str, descriptor: StateDescriptor) -> Any:
        raise NotImplementedError

    def get_partitioned_state(self, descriptor: StateDescriptor) -> State:
        """The state object for ``descriptor``: the same object for the same name."""
        name = descriptor.name
        kind = descriptor.kind
        if kind not in KINDS:
            raise InvalidProgramError(
                f"{type(descriptor).__name__} {name!r} is not a keyed state descriptor "
                f"this backend supports (kinds: {', '.join(KINDS)})"
            )
        known = self._kinds.get(name)
        if known is not None and known != kind:
            raise InvalidProgramError(
                f"state {name!r} is already registered as {known} state and cannot be "
                f"registered again as {kind} state",
                remedy="give each state of an operator its own name; to change a state's kind "
                "in a savepoint-restored job, use a new name",
            )
        state = self._states.get(name)
        if state is not None:
            return self._wrapped.get(name, state)  # type: ignore[no-any-return]
        ttl_config = getattr(descriptor, "ttl_config", None)
        policy = None
        if ttl_config is not None and ttl_config.is_enabled():
            from flinkpy.state.ttl import TtlPolicy

            policy = TtlPolicy.of(ttl_config)
        if name in self._restored_ttl and (self._restored_ttl[name] is None) != (policy is None):
            self._check_ttl(name, policy)
        self._kinds[name] = kind
        if policy is not None:
            self._ttl[name] = policy
        # With TTL, reducing and aggregating state are value states of (accumulator, timestamp):
        # the TTL wrapper reduces.
        raw_kind = "value" if policy is not None and kind in ("reducing", "aggregating") else kind
        state = self._new_state(name, raw_kind, descriptor)
        self._states[name] = state
        if policy is None:
            return state  # type: ignore[no-any-return]
        from flinkpy.state.ttl import IncrementalCleanup, wrap

        clock = lambda: self.ttl_clock()  # noqa: E731 - late-bound: tests inject the clock after creation
        cleaner = IncrementalCleanup(self, name, kind, policy, clock) if policy.incremental else None
        if cleaner is not None and policy.incremental_every_record:
            self._record_cleaners.append(cleaner)
        wrapped = wrap(kind, state, policy, clock, descriptor, cleaner)
        self._wrapped[name] = wrapped
        return wrapped  # type: ignore[no-any-return]

    def _check_ttl(self, name: str, policy: Any) -> None:
        if policy is not None and name in self._ttl_unknown:
            raise InvalidProgramError(
                f"{self._of_operator()}state {name!r} comes from Spark, which could not carry its time-to-live: Spark keeps a "
                "state declared after open() (a window trigger's, say) without recording whether it has one, and this job "
                "declares it with one",
                remedy="keep the job on Spark, or give the state a new name, under which it starts empty; a state the function "
                "declares in open() keeps its time-to-live when it moves",
            )
        raise InvalidProgramError(
            f"{self._of_operator()}state {name!r} was checkpointed {'with' if self._restored_ttl.get(name) else 'without'} "
            "time-to-live and is now "
            f"declared {'with' if policy else 'without'} it",
            remedy="keep the state's StateTtlConfig enabled (or disabled) as it was, or give the state a new name",
        )

    def undeclared_ttl(self) -> dict[str, dict[str, Any]]:
        """What the restored snapshots recorded of the time-to-live of each state this job has
        not declared (yet): ``{"ttl_ms": t}`` or ``{"ttl_unknown": True}``. A snapshot taken
        before a lazily declared state (a window trigger's) is asked for again keeps it, so that
        its next restore checks the declaration against what the state had."""
        out: dict[str, dict[str, Any]] = {}
        for name, ms in self._restored_ttl.items():
            if name in self._states:
                continue
            if ms is not None:
                out[name] = {"ttl_ms": ms}
            elif name in self._ttl_unknown:
                out[name] = {"ttl_unknown": True}
        return out

    def _of_operator(self) -> str:
        return f"operator {self.operator_name!r}: " if self.operator_name else ""

    def restore(self, snapshots: Iterable[Mapping[str, Any]]) -> None:
        """Load canonical documents (from either backend, any old parallelism), keeping only the
        key groups of this backend's range; several are merged (the old subtasks a new range
        overlaps)."""
        from flinkpy.state.canonical import document_frames

        for snap in snapshots:
            self.restore_frames(*document_frames(snap))

    def restore_file(self, f: IO[bytes]) -> None:
        """Load a canonical file (flinkpy.state.canonical) frame by frame: a backend that keeps
        state on disk never holds the whole file's state in memory."""
        from flinkpy.state.canonical import read_frames

        self.restore_frames(*read_frames(f))

    def restore_frames(self, states: Mapping[str, Mapping[str, Any]], frames: Iterable[tuple[str, int, list[tuple[Any, Any]]]]) -> None:
        """Load ``(state, key group, entries)`` frames of states described by ``states`` (name →
        kind and TTL), skipping key groups outside this range."""
        raise NotImplementedError

    def _check_restored(self, name: str, entry: Mapping[str, Any]) -> str:
        """Check one state of a snapshot being restored against this job; returns its kind."""
        kind = entry["kind"]
        if kind not in KINDS:
            raise FlinkpyError(f"keyed state {name!r} in snapshot has unknown kind {kind!r}")
        known = self._kinds.get(name)
        if known is not None and known != kind:
            raise InvalidProgramError(
                f"state {name!r} is {kind} state in the snapshot but {known} state "
                f"in this job",
                remedy="keep the state's kind, or give the new state another name",
            )
        self._kinds[name] = kind
        self._restored_ttl[name] = entry.get("ttl_ms")
        if entry.get("ttl_unknown") and entry.get("ttl_ms") is None:
            self._ttl_unknown.add(name)
        else:
            self._ttl_unknown.discard(name)
        if name in self._states and (entry.get("ttl_ms") is None) != (self._ttl.get(name) is None):
            self._check_ttl(name, self._ttl.get(name))
        return kind

    def keys_of(self, state_name: str) -> list[tuple[Any, int]]:
        """``(key, key group)`` of every key that has state ``state_name`` in this backend, by key
        group (what ``apply_to_keyed_state`` of the broadcast state pattern visits). A list, taken
        before the caller's first write: visiting a key may change or clear its state."""
        table = self.table(state_name)  # type: ignore[attr-defined]  # every backend has table()
        return [(key, kg) for kg in sorted(table) for key in list(table[kg])]

    def close(self) -> None:
        """Release what the backend holds outside the Python heap (nothing, by default)."""

    def _range_text(self) -> str:
        r = self.key_group_range
        return f"max_parallelism={self.max_parallelism}, key_groups={r.start}..{r.stop - 1}"
