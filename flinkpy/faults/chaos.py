"""The chaos schedule: random faults at random moments, the same for the same seed.

Pure: no clock, no cluster. The ``flinkpy fault chaos`` command walks the schedule, waiting
for each fault's moment, and resolves ``pick`` to a live target with
:func:`flinkpy.faults.choose` (targets depend on the cluster at that moment; the choice among
them does not).

>>> a = plan(seed=7, duration_s=10, every_s=2, kinds=["kill-task", "raise"])
>>> a == plan(seed=7, duration_s=10, every_s=2, kinds=["kill-task", "raise"])
True
>>> [int(f.at_s // 2) for f in a]
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Sequence

#: what chaos injects when --faults is not given
DEFAULT_KINDS = ("kill-task", "kill-taskmanager", "raise", "fail-checkpoint", "pause-task")
CHAOS_KINDS = (
    "kill-task",
    "kill-taskmanager",
    "raise",
    "fail-checkpoint",
    "pause-task",
    "pause-taskmanager",
    "network-delay",
    "network-drop",
    "kill-executor",
)
#: the kinds that reach a Spark job (a Python worker, an executor JVM), and its default
SPARK_KINDS = ("kill-task", "kill-executor")


@dataclass(frozen=True)
class PlannedFault:
    #: seconds after the start of the chaos run
    at_s: float
    kind: str
    #: in [0, 1): which of the live candidates (sorted) to hit
    pick: float
    #: raise: records before the exception; fail-checkpoint: checkpoints to decline
    count: int
    #: pause-*: seconds to stay stopped
    pause_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(seed: int, duration_s: float, every_s: float, kinds: Sequence[str]) -> list[PlannedFault]:
    """One fault in each ``every_s`` slot of ``duration_s``, at a random moment within the slot.

    Pauses end within their slot (at most ``every_s`` minus a margin), so paused processes are
    always resumed before the run's end.
    """
    if every_s <= 0 or duration_s <= 0:
        raise ValueError("duration and interval must be positive")
    unknown = [k for k in kinds if k not in CHAOS_KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown chaos fault kind(s) {unknown or kinds!r}; choose from {', '.join(CHAOS_KINDS)}")
    rng = random.Random(seed)
    out = []
    slots = int(duration_s // every_s)
    for i in range(slots):
        # the moment leaves a fifth of the slot free, so a fault never lands on the next slot's
        at = i * every_s + rng.uniform(0, every_s * 0.8)
        kind = kinds[rng.randrange(len(kinds))]
        pick = rng.random()
        count = rng.randint(1, 3) if kind == "fail-checkpoint" else rng.randint(0, 5000)
        pause = round(rng.uniform(0.1, 0.5) * every_s, 2)
        out.append(PlannedFault(round(at, 3), kind, pick, count, pause))
    return out
