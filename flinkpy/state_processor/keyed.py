"""Re-encoding one operator's keyed state: transformed, re-assigned to key groups, split by subtask.

A :class:`KeyedSpool` takes ``(state, key group, key, value)`` entries in any order and writes
one canonical keyed-state file (flinkpy.state.canonical) per subtask of the operator's new
parallelism, each to a local temporary file first, so nothing is held in memory but one frame
per file. :func:`regroup` decides each key's key group when the max parallelism changes: the
key group of the key, or of the user key a timer belongs to — and it refuses an entry that is
filed under a key group its key does not hash to (the sliced windows keep per-key-group timers
that way), since such an entry cannot be moved to "its" new key group.

>>> kg = assign_to_key_group("user-7", 128)
>>> regroup("_timers.event", ("user-7", None, 100), kg, old_max=128, new_max=256) == assign_to_key_group("user-7", 256)
True
>>> regroup("count", "user-7", (kg + 1) % 128, old_max=128, new_max=256)
Traceback (most recent call last):
...
flinkpy.state_processor.keyed.KeyGroupBoundError: state 'count' holds an entry of key group ... that belongs to the key group rather than to a key ...
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import IO, Any

from flinkpy.errors import UsageError
from flinkpy.state.canonical import FrameWriter
from flinkpy.state.heap import TIMER_EVENT_TABLE, TIMER_PROCESSING_TABLE
from flinkpy.state.key_groups import (
    assign_to_key_group,
    compute_operator_index_for_key_group,
    key_group_range_for_operator,
)

_TIMER_TABLES = frozenset({TIMER_EVENT_TABLE, TIMER_PROCESSING_TABLE})


@functools.lru_cache(maxsize=1)
def _group_keys() -> frozenset[Any]:
    """The engine's keys that stand for a key group, not a key (imported when first needed: the
    window operators are a heavy import this module otherwise does without)."""
    from flinkpy.task.window_slicing import GROUP_TIMER_KEY

    return frozenset({GROUP_TIMER_KEY})


class KeyGroupBoundError(UsageError):
    """An entry is bound to its key group rather than to its key: it cannot be re-assigned."""


def user_key(state: str, key: Any) -> Any:
    """The key an entry belongs to: a timer table's entries are ``(key, namespace, timestamp)``."""
    if state in _TIMER_TABLES and isinstance(key, tuple) and key:
        return key[0]
    return key


def regroup(state: str, key: Any, key_group: int, *, old_max: int, new_max: int) -> int:
    """The key group of an entry at max parallelism ``new_max`` (it was in ``key_group`` at ``old_max``)."""
    if old_max == new_max:
        return key_group
    owner = user_key(state, key)
    if owner in _group_keys() or assign_to_key_group(owner, old_max) != key_group:
        raise KeyGroupBoundError(
            f"state {state!r} holds an entry of key group {key_group} that belongs to the key group rather than to "
            f"a key ({owner!r}; the sliced windows' per-key-group timers are such state), so it cannot be moved "
            "to another max parallelism",
            remedy="change the max parallelism from a savepoint taken when such operators hold no state, or drop that operator",
        )
    return assign_to_key_group(owner, new_max)


class KeyedSpool:
    """One canonical keyed-state file per new subtask, spooled to local files.

    ``states`` is every state the files declare (name -> {"kind"[, "ttl_ms"]}); a subtask with no
    key of a state still declares it, so a restore knows the state.
    """

    def __init__(self, states: Mapping[str, Mapping[str, Any]], *, parallelism: int, max_parallelism: int) -> None:
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.states = {n: dict(s) for n, s in states.items()}
        self._dir = tempfile.mkdtemp(prefix="flinkpy-rewrite-")
        self._files: list[IO[bytes]] = []
        self._writers: list[FrameWriter] = []
        for i in range(parallelism):
            f = open(os.path.join(self._dir, f"{i}.keyed"), "wb")
            self._files.append(f)
            self._writers.append(FrameWriter(f, self.states))
        self.counts: list[dict[str, int]] = []

    def add(self, state: str, key_group: int, key: Any, value: Any) -> None:
        subtask = compute_operator_index_for_key_group(self.max_parallelism, self.parallelism, key_group)
        self._writers[subtask].add(state, key_group, key, value)

    def close(self) -> list[tuple[range, str, dict[str, dict[str, Any]]]]:
        """Finish every file; return (key-group range, local file, its states summary) per subtask."""
        out = []
        for i, (writer, f) in enumerate(zip(self._writers, self._files)):
            counts = writer.close()
            f.close()
            summary = {name: {"kind": desc["kind"], "entries": counts.get(name, 0)} for name, desc in self.states.items()}
            out.append((key_group_range_for_operator(self.max_parallelism, self.parallelism, i), f.name, summary))
        return out

    def discard(self) -> None:
        for f in self._files:
            f.close()
        shutil.rmtree(self._dir, ignore_errors=True)
