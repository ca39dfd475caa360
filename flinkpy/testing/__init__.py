"""flinkpy.testing: run a user function on the engine's operators, with a manual clock, in a test.

:class:`OperatorHarness` runs what a job would run for a function — a (keyed) process function,
a window, a two-input or broadcast function — as local subtasks with real state backends, timers
and snapshots. :func:`assert_restore_equivalent` replays a script with a snapshot and a restore
(also at other parallelisms) in between, and fails where the output differs from a run without.
"""

from __future__ import annotations

from flinkpy.testing.equivalence import RestoreDivergence, assert_restore_equivalent
from flinkpy.testing.harness import OperatorHarness
from flinkpy.testing.records import Element, ProcessingTime, Snapshot, Step, StepOutput, StreamRecord, Watermark

__all__ = [
    "Element",
    "OperatorHarness",
    "ProcessingTime",
    "RestoreDivergence",
    "Snapshot",
    "Step",
    "StepOutput",
    "StreamRecord",
    "Watermark",
    "assert_restore_equivalent",
]
