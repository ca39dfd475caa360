"""The registry of fault kinds: one :class:`FaultKind` per kind ``flinkpy fault`` injects.

Each kind names what it hits (:class:`FaultTarget`, which also says where the request goes),
the parameters its journal entry keeps, and the runners that take it. Chaos draws from
:data:`CHAOS`: the kinds by name, and two presets of ``network`` (``network-delay``,
``network-drop``) under the names ``--faults`` takes. Everything else (the JobManager's
checks, the chaos schedule, the Spark driver) reads this table instead of lists of its own.

>>> KINDS["network"].target, KINDS["network"].endpoint
(<FaultTarget.TASK: 'task'>, 'job')
>>> [c.name for c in CHAOS if c.kind == "network"]
['network-delay', 'network-drop']
>>> kinds_of(FaultTarget.TASKMANAGER, FaultTarget.STORAGE)
('kill-taskmanager', 'pause-taskmanager', 'storage-outage')
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class FaultTarget(enum.Enum):
    """What a fault hits."""

    #: one task (subtask) of a job, or a Spark Python worker running one
    TASK = "task"
    #: a TaskManager process, with all its tasks
    TASKMANAGER = "taskmanager"
    #: the checkpoint storage
    STORAGE = "storage"
    #: an executor JVM of a Spark application
    SPARK_EXECUTOR = "spark-executor"
    #: the (leading) JobManager
    JOBMANAGER = "jobmanager"
    #: the network between two hosts of a drill cluster (``cluster start --hosts N``)
    LINK = "link"

    @property
    def endpoint(self) -> str:
        """Where the request goes: ``job`` (POST /jobs/<jid>/faults), ``cluster`` (POST
        /cluster/faults) or ``client`` (the CLI acts itself, through the home's pid record or the
        drill cluster's hosts)."""
        if self in (FaultTarget.TASKMANAGER, FaultTarget.STORAGE):
            return "cluster"
        return "client" if self in (FaultTarget.JOBMANAGER, FaultTarget.LINK) else "job"


class Runner(enum.Enum):
    """The runners a job may run on (``flinkpy run --runner``)."""

    FLINKPY = "flinkpy"
    SPARK = "spark"


@dataclass(frozen=True)
class FaultKind:
    #: the name the CLI, REST and the journal use
    name: str
    target: FaultTarget
    #: the request parameters its journal entry keeps
    params: tuple[str, ...]
    #: the runners whose jobs take it
    runners: frozenset[Runner]

    @property
    def endpoint(self) -> str:
        return self.target.endpoint


_FLINKPY = frozenset({Runner.FLINKPY})

#: every fault kind, in the order help texts and messages list them
KINDS: dict[str, FaultKind] = {k.name: k for k in (
    FaultKind("kill-task", FaultTarget.TASK, ("signal",), frozenset(Runner)),
    FaultKind("pause-task", FaultTarget.TASK, ("seconds",), _FLINKPY),
    FaultKind("raise", FaultTarget.TASK, ("after",), _FLINKPY),
    FaultKind("fail-checkpoint", FaultTarget.TASK, ("count",), _FLINKPY),
    # slows (delay_ms for seconds) or breaks (drop) one task's output channels
    FaultKind("network", FaultTarget.TASK, ("delay_ms", "seconds", "drop"), _FLINKPY),
    FaultKind("kill-taskmanager", FaultTarget.TASKMANAGER, (), _FLINKPY),
    FaultKind("pause-taskmanager", FaultTarget.TASKMANAGER, ("seconds",), _FLINKPY),
    FaultKind("storage-outage", FaultTarget.STORAGE, ("seconds",), _FLINKPY),
    FaultKind("kill-executor", FaultTarget.SPARK_EXECUTOR, ("executor",), frozenset({Runner.SPARK})),
    FaultKind("kill-jobmanager", FaultTarget.JOBMANAGER, (), _FLINKPY),
    FaultKind("partition", FaultTarget.LINK, ("seconds",), _FLINKPY),
)}


def kinds_of(*targets: FaultTarget, runner: Runner = Runner.FLINKPY) -> tuple[str, ...]:
    """The names of the kinds aimed at ``targets`` that ``runner``'s jobs take, in registry order."""
    return tuple(k.name for k in KINDS.values() if k.target in targets and runner in k.runners)


@dataclass(frozen=True)
class ChaosKind:
    """A kind chaos may draw (``--faults`` NAME), with the parameters it injects it with."""

    #: the name ``flinkpy fault chaos --faults`` takes
    name: str
    #: the registry kind it injects
    kind: str
    #: drawn when ``--faults`` is not given, on the runners its kind supports
    default: bool = False
    #: the schedule's number ``pick`` chooses the target (else the JobManager's first running one)
    pick: bool = True
    #: fixed parameters of the request (a preset of its kind)
    preset: dict[str, Any] = field(default_factory=dict)
    #: request parameters drawn by the schedule: (parameter, PlannedFault field)
    drawn: tuple[tuple[str, str], ...] = ()

    @property
    def runners(self) -> frozenset[Runner]:
        return KINDS[self.kind].runners


#: what chaos may inject, in the order ``--help`` lists them
CHAOS: tuple[ChaosKind, ...] = (
    ChaosKind("kill-task", "kill-task", default=True),
    ChaosKind("kill-taskmanager", "kill-taskmanager", default=True),
    ChaosKind("raise", "raise", default=True, drawn=(("after", "count"),)),
    ChaosKind("fail-checkpoint", "fail-checkpoint", default=True, pick=False, drawn=(("count", "count"),)),
    ChaosKind("pause-task", "pause-task", default=True, drawn=(("seconds", "pause_s"),)),
    ChaosKind("pause-taskmanager", "pause-taskmanager", drawn=(("seconds", "pause_s"),)),
    ChaosKind("network-delay", "network", preset={"delay_ms": 200}, drawn=(("seconds", "pause_s"),)),
    ChaosKind("network-drop", "network", preset={"drop": True}),
    ChaosKind("kill-executor", "kill-executor", default=True),
)
CHAOS_BY_NAME: dict[str, ChaosKind] = {c.name: c for c in CHAOS}


def chaos_kinds(runner: Runner | None = None, *, default: bool = False) -> tuple[str, ...]:
    """The chaos names ``runner``'s jobs take (any runner's when None); with ``default``, those
    drawn when ``--faults`` is not given."""
    return tuple(c.name for c in CHAOS if (runner is None or runner in c.runners) and (c.default or not default))
