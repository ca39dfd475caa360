"""The job's final checkpoint: the one taken after every source's input has ended.

A bounded task does not finish at the end of its input: it ends its operators, sends
END_OF_DATA and waits. Once every source subtask has said that its input ended, the coordinator
triggers one more checkpoint, whose barriers follow the end of data in every channel; sinks
pre-commit the rest of their output in it and commit it when it completes, and only then do
the tasks finish. So no task commits anything that a completed checkpoint does not cover: a
failure anywhere before the end restores a checkpoint and replays, and one after it restores
the final checkpoint, whose sources have nothing left to read (Flink's checkpoints after tasks
finished, FLIP-147, in its simplest form: no task finishes before the final checkpoint).

A pure state machine, driven by :class:`~flinkpy.jobmanager.checkpoint_coordinator.CheckpointCoordinator`.

>>> f = FinalCheckpoint([(1, 0), (1, 1)])
>>> f.source_ended((1, 0)); f.due
False
>>> f.source_ended((1, 1)); f.due
True
>>> f.triggered(7); f.due, f.ended(7, completed=False), f.due, f.retrying
(False, False, True, True)
>>> f.restarting([(1, 1)]); f.due
False
>>> f.source_ended((1, 1)); f.triggered(8); f.ended(8, completed=True), f.completed, f.due
(True, True, False)
>>> f.restarting([(1, 1)]); f.completed
True
"""

from __future__ import annotations

from typing import Iterable

TaskKey = tuple[int, int]


class FinalCheckpoint:
    """Which sources' inputs ended, and where the final checkpoint stands."""

    def __init__(self, sources: Iterable[TaskKey]):
        self.sources: frozenset[TaskKey] = frozenset(tuple(s) for s in sources)  # type: ignore[misc]
        self.ended_sources: set[TaskKey] = set()
        #: the id of the final checkpoint in flight (None: none is)
        self.pending: int | None = None
        #: a final checkpoint completed: the tasks finish, nothing more is triggered
        self.completed = False
        #: a final checkpoint failed: the next is taken when a periodic one would be (the first
        #: is taken as soon as no other checkpoint is in the way)
        self.retrying = False

    @property
    def due(self) -> bool:
        """Every source's input ended, and no final checkpoint is in flight or completed."""
        return bool(self.sources) and self.ended_sources >= self.sources and self.pending is None and not self.completed

    def source_ended(self, task: TaskKey) -> None:
        if tuple(task) in self.sources:
            self.ended_sources.add(tuple(task))  # type: ignore[arg-type]

    def triggered(self, checkpoint_id: int) -> None:
        self.pending = checkpoint_id

    def ended(self, checkpoint_id: int, *, completed: bool) -> bool:
        """Checkpoint ``checkpoint_id`` completed or failed; True when it was the final one and
        completed (the tasks may finish). A failed final checkpoint is due again."""
        if checkpoint_id != self.pending:
            return False
        self.pending = None
        self.completed = completed
        self.retrying = not completed
        return completed

    def restarting(self, tasks: Iterable[TaskKey]) -> None:
        """Tasks restart. Before the final checkpoint completed, their sources read again (from
        a checkpoint) and will say so again. After it, they restore the final checkpoint, which
        left them nothing to do: they finish at once, without waiting for another (the others
        may have finished already), and ``completed`` stays."""
        if self.completed:
            return
        for task in tasks:
            self.ended_sources.discard(tuple(task))  # type: ignore[arg-type]
        self.pending = None
        self.retrying = False
