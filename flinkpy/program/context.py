"""Where ``env.execute()`` sends a job: the execution context the program runs in.

``flinkpy run`` and ``flinkpy info`` set it before running a job file; a job file started with
plain ``python`` gets the default context (an embedded cluster, unless ``FLINKPY_JOBMANAGER``
names one). Configuration from ``-D``/flinkpy.yaml travels here too.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any, Iterator


@dataclass
class SubmittedJob:
    job_id: str
    name: str
    state: str
    net_runtime_ms: int | None = None
    embedded: bool = False
    failure: dict[str, Any] | None = None
    #: the program cancelled the job itself (it closed its execute_and_collect iterator, or had
    #: the records it asked for): a CANCELED job that is not a failure of the run
    cancelled_by_program: bool = False


@dataclass
class ExecutionContext:
    #: "execute" (submit or run embedded) or "plan" (capture the plan, run nothing)
    mode: str = "execute"
    address: str | None = None
    token: str | None = None
    parallelism: int | None = None
    detached: bool = False
    config: dict[str, str] = field(default_factory=dict)
    #: where printed job output goes in an embedded cluster: None = our stdout, or a file/fd
    job_stdout: Any = None
    #: say on stderr that an embedded cluster is started (the CLI does; plain python does not)
    announce: bool = False
    python_path: list[str] = field(default_factory=list)
    submitted: list[SubmittedJob] = field(default_factory=list)
    on_submit: Any = None
    #: an attached run: called with one line per failure, restart or wait of the job, as it happens
    on_event: Any = None
    #: --debug: a failed task's whole traceback, flinkpy's own frames included
    debug: bool = False
    #: start from this savepoint or retained checkpoint (path or URL of it or of its _metadata)
    savepoint_path: str | None = None
    allow_non_restored_state: bool = False
    #: high availability: finds the leader's REST address (the client follows a failover)
    leader: Any = None
    #: when a list: execute() runs nothing and appends (environment, job name) — how the Spark
    #: runner gets a job's StreamGraph (flinkpy.spark.capture)
    capture: list | None = None
    #: SIGINT/SIGTERM during an attached execute(): print the line and exit 130/143 (``python
    #: JOB.py``); False: raise :class:`~flinkpy.errors.Interrupted` to the caller (the CLI)
    exit_on_interrupt: bool = False


_stack: list[ExecutionContext] = []


def current_context() -> ExecutionContext:
    if _stack:
        return _stack[-1]
    # `python JOB.py`: says on stderr when it starts an embedded cluster, as `flinkpy run` does
    return ExecutionContext(address=os.environ.get("FLINKPY_JOBMANAGER") or None, announce=True, exit_on_interrupt=True)


@contextlib.contextmanager
def execution_context(ctx: ExecutionContext) -> Iterator[ExecutionContext]:
    _stack.append(ctx)
    try:
        yield ctx
    finally:
        _stack.remove(ctx)


class PlanCaptured(Exception):
    """Raised by execute() in plan mode: carries the plan out of the user's program."""

    def __init__(self, plan: dict[str, Any]):
        super().__init__("plan captured")
        self.plan = plan
