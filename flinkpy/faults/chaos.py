"""The chaos schedule: random faults at random moments, the same for the same seed.

Pure: no clock, no cluster. :mod:`flinkpy.client.chaos` walks the schedule, waiting
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

from flinkpy.faults.kinds import CHAOS_BY_NAME, KINDS, Runner, chaos_kinds

#: what chaos injects when --faults is not given
DEFAULT_KINDS = chaos_kinds(Runner.FLINKPY, default=True)
#: every name --faults takes (network-delay and network-drop are presets of the kind network)
CHAOS_KINDS = chaos_kinds()
#: the kinds that reach a Spark job (a Python worker, an executor JVM), and its default
SPARK_KINDS = chaos_kinds(Runner.SPARK)


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


def kinds_for(job_id: str, on_spark: bool, requested: Sequence[str] | None) -> list[str]:
    """The kinds a chaos run on ``job_id`` draws from: ``requested``, or the default of the
    job's runner. A kind the runner cannot take is refused (``UsageError``): a Spark job takes
    only :data:`SPARK_KINDS`, and kill-executor needs a Spark job."""
    from flinkpy.errors import UsageError

    runner = Runner.SPARK if on_spark else Runner.FLINKPY
    kinds = list(requested) if requested else list(chaos_kinds(runner, default=True))
    taken = chaos_kinds(runner)
    other = [k for k in kinds if k not in taken and (on_spark or k in CHAOS_BY_NAME)]
    if on_spark and other:
        raise UsageError(f"job {job_id} runs on Spark, where {', '.join(other)} cannot be injected",
                         remedy=f"choose from {', '.join(SPARK_KINDS)}")
    if other:
        raise UsageError(f"{', '.join(other)} applies to Spark jobs; job {job_id} is not one registered in this cluster home",
                         remedy="use kill-taskmanager to lose a machine's worth of tasks on flinkpy's engine")
    return kinds


def fault_request(planned: PlannedFault) -> tuple[str, dict[str, Any]]:
    """Where a planned fault goes ("cluster" or "job") and the request's body.

    >>> fault_request(PlannedFault(1.0, "network-drop", 0.5, 3, 0.2))
    ('job', {'kind': 'network', 'pick': 0.5, 'drop': True})
    """
    chaos = CHAOS_BY_NAME[planned.kind]
    body: dict[str, Any] = {"kind": chaos.kind}
    if chaos.pick:
        body["pick"] = planned.pick
    body.update(chaos.preset)
    body.update((param, getattr(planned, source)) for param, source in chaos.drawn)
    return ("cluster" if KINDS[chaos.kind].endpoint == "cluster" else "job"), body
