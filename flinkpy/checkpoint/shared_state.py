"""Shared state of incremental checkpoints: which checkpoint references which file, and when a
file may go.

An incremental checkpoint uploads only the store files created since the checkpoint its task
built on; the files it keeps from earlier checkpoints it *references*. Those files live under
``<dir>/<job-id>/shared/`` and belong to no single checkpoint, so deleting a checkpoint's
directory never deletes them. The registry counts, per file, the retained checkpoints that
reference it; a file is deleted exactly when the last of them is discarded.

Why a file is never deleted while something may still reference it: a task builds checkpoint
*N* on the checkpoint that was the newest completed one when *N* was triggered (the barrier
carries its id), so *N* references only files of that checkpoint. That checkpoint is retained
until a newer one completes; when *N* completes, its references are registered *before* the
checkpoints it subsumes are released, so a file both reference survives. Files of a checkpoint
that never completes (declined, expired, acknowledged too late) are not registered by anyone
and are deleted unless a registered checkpoint references them.

A pure bookkeeping object: no I/O; the JobManager carries out the deletions it returns.

>>> r = SharedStateRegistry()
>>> r.register(1, ["s/a", "s/b"])
>>> r.register(2, ["s/b", "s/c"])
>>> r.release(1)
['s/a']
>>> r.unregistered(["s/b", "s/d"])
['s/d']
>>> r.release(2)
['s/b', 's/c']
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping


class SharedStateRegistry:
    """Reference counts of shared files by checkpoint id."""

    def __init__(self) -> None:
        self._files_of: dict[int, frozenset[str]] = {}
        self._count: dict[str, int] = {}

    def register(self, checkpoint_id: int, files: Iterable[str]) -> None:
        """Checkpoint ``checkpoint_id`` completed (or was adopted) and references ``files``."""
        if checkpoint_id in self._files_of:
            return
        mine = frozenset(files)
        self._files_of[checkpoint_id] = mine
        for f in mine:
            self._count[f] = self._count.get(f, 0) + 1

    def release(self, checkpoint_id: int) -> list[str]:
        """Checkpoint ``checkpoint_id`` is discarded: the files no retained checkpoint references now."""
        mine = self._files_of.pop(checkpoint_id, frozenset())
        gone = []
        for f in mine:
            left = self._count[f] - 1
            if left:
                self._count[f] = left
            else:
                del self._count[f]
                gone.append(f)
        return sorted(gone)

    def unregistered(self, files: Iterable[str]) -> list[str]:
        """Those of ``files`` that no registered checkpoint references (a failed checkpoint's uploads)."""
        return sorted({f for f in files if f not in self._count})

    def files(self) -> frozenset[str]:
        """Every file some registered checkpoint references."""
        return frozenset(self._count)


# -- what the state handles of a checkpoint reference ------------------------------------------


def shared_files(states: Mapping[Any, Any]) -> Iterator[str]:
    """Every shared file URL in acknowledged task states ({task: {"state": [operator entries]}})."""
    for ack in states.values():
        entries = ack.get("state") if isinstance(ack, Mapping) else ack
        for entry in entries or ():
            if isinstance(entry, Mapping):
                yield from handle_shared_files(entry.get("keyed_state"))


def handle_shared_files(handle: Mapping[str, Any] | None) -> Iterator[str]:
    """The shared file URLs one keyed-state handle references (none for a full snapshot)."""
    if handle:
        for f in handle.get("shared") or ():
            yield f["url"]


def metadata_shared_files(doc: Mapping[str, Any]) -> Iterator[str]:
    """Every shared file URL a `_metadata` document references."""
    for op in doc.get("operators", []):
        for sub in op.get("subtasks", []):
            yield from handle_shared_files(sub.get("keyed_state"))
