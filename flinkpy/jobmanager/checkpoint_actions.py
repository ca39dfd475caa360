"""What the checkpoint coordinator asks its I/O layer to do: the actions that come out of
:class:`~flinkpy.jobmanager.checkpoint_coordinator.CheckpointCoordinator`'s events (trigger
checkpoint N at the sources, write its metadata, notify, abort, discard files, fail the job).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flinkpy.jobmanager.checkpoint_coordinator import PendingCheckpoint

TaskKey = tuple[int, int]  # (vertex id, subtask index)


@dataclass(frozen=True)
class TriggerAtSources:
    """Send 'start checkpoint N' to these source subtasks (they inject barrier N)."""

    checkpoint_id: int
    timestamp: int
    kind: str
    mode: str
    sources: list[TaskKey]
    #: the job's final checkpoint (its barrier is aligned)
    final: bool = False


@dataclass(frozen=True)
class Finalize:
    """Every task acknowledged: write ``_metadata``, then call ``finalized`` or ``finalize_failed``."""

    checkpoint: PendingCheckpoint


@dataclass(frozen=True)
class NotifyComplete:
    checkpoint_id: int
    #: the job's final checkpoint completed: the tasks may finish
    final: bool = False


@dataclass(frozen=True)
class Abort:
    """Tell the tasks to drop checkpoint N (release alignment, delete their partial uploads)."""

    checkpoint_id: int
    reason: str


@dataclass(frozen=True)
class Discard:
    """Delete the files of checkpoint N: its directory, or only partial files when path is None;
    and the shared files (incremental checkpoints) no retained checkpoint references any more.

    ``foreign`` marks a claimed checkpoint of another job: its directory is ``external_path``."""

    checkpoint_id: int
    external_path: str | None
    shared: tuple[str, ...] = ()
    foreign: bool = False


@dataclass(frozen=True)
class SweepShared:
    """The job ended: delete every file under its ``shared/`` directory except ``keep`` (uploads
    of tasks killed mid-checkpoint that no checkpoint ever registered)."""

    keep: frozenset[str]


@dataclass(frozen=True)
class FailJob:
    reason: str


Action = TriggerAtSources | Finalize | NotifyComplete | Abort | Discard | SweepShared | FailJob
