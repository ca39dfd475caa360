"""The wall clock, read in the one unit the engine records times in: epoch milliseconds.

Pure state machines (the CheckpointCoordinator, the ExecutionGraph, the restart strategies) never
call it: their callers read it once per event and pass the value in, so tests drive them with a
manual clock. This is the one place the JobManager and the runners read real time from.

>>> now_ms() > 1_600_000_000_000
True
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch (wall clock: timestamps shown to people and kept in history)."""
    return int(time.time() * 1000)
