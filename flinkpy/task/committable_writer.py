"""The writer half of a sink committed by one task (see :mod:`flinkpy.graph.committers`).

A ``sink_writer`` operator runs the sink's writers like any sink, but commits nothing: before
the task forwards barrier *n* it asks its writer for the committables of what was written since
barrier *n-1* (``prepare_commit``) and emits them as records, so they reach the committer ahead
of barrier *n* and are in the committer's snapshot of checkpoint *n*. The writer snapshots no
state: a restore (at any parallelism) starts writers afresh, and what they wrote after the
restored checkpoint is the committer's to clean up. (State a checkpoint does hold for it, from
a version of the sink whose writers committed themselves, reaches the writer as its restored
state, to hand over as committables.) At the end of the input the last
committables go out before the end of the partition; the committer commits them at its own end.
"""

from __future__ import annotations

from flinkpy.task.operators import SinkOperator


class CommittableWriterOperator(SinkOperator):
    """A sink's writer whose committables are its output (the committer's input)."""

    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        committables = self.writer.prepare_commit(checkpoint_id)
        if committables:
            self.output.process(list(committables), None)

    def end_input(self) -> None:
        # no fencing question here: committing is the committer's, which asks at its own end
        committables = self.writer.prepare_commit(None)
        if committables:
            self.output.process(list(committables), None)
