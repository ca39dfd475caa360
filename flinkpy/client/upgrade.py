"""The decisions of ``flinkpy upgrade``: a pure state machine of typed steps and events.

An upgrade replaces a running job by a new program while keeping its state, as Flink's
Kubernetes operator does: ``savepoint`` (stop with a savepoint, start the new program from
it), ``last-state`` (cancel keeping the latest checkpoint, start from that) or ``stateless``
(cancel, start fresh). :class:`Upgrade` decides; it never talks to a cluster, reads no clock and
touches no file. The runner (:mod:`flinkpy.client.upgrade_runner`) asks :meth:`Upgrade.action`
what to do, does it, and feeds back what happened as an event through :meth:`Upgrade.on`. The
whole state is a JSON document (:meth:`Upgrade.to_dict`), written to the upgrade's journal
after every step, so that an upgrade killed half way continues where it stopped.

>>> spec = UpgradeSpec(job_id="j1", program="v2.py", mode=UpgradeMode.SAVEPOINT, ready_timeout_ms=60_000)
>>> up = Upgrade(spec)
>>> up.action()
Inspect(job_id='j1')
>>> up.on(JobInspected(state="RUNNING", checkpoint=CheckpointRef("/c/chk-3", 3, 1_000), now_ms=2_000))
>>> up.action()
CheckPlan(snapshot='/c/chk-3', runner=<Runner.ENGINE: 'engine'>)
>>> up.on(PlanChecked(problems=()))
>>> up.action()
StopWithSavepoint(job_id='j1', request_id=None)
>>> up.on(SavepointTaken("/sp/savepoint-1"))
>>> up.action()
SubmitNew(restore='/sp/savepoint-1', allow_non_restored_state=False, after_ms=None, runner=<Runner.ENGINE: 'engine'>)

With ``UpgradeSpec.runner`` the new program starts on the other runner (flinkpy's engine or
Spark): the plan is then the runner-move plan, and a Spark job's last state (its query's
checkpoint location, which only that query reads) is never restored from: see :class:`Runner`.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Union


class UpgradeMode(enum.Enum):
    """How the state travels from the old job to the new one (the operator's upgrade modes)."""

    SAVEPOINT = "savepoint"
    LAST_STATE = "last-state"
    STATELESS = "stateless"


class Runner(enum.Enum):
    """Who runs a job: flinkpy's engine (a JobManager's job) or Spark (a driver the CLI launched).

    A job moves between them through a snapshot in the engine's layout: an engine savepoint or
    retained checkpoint moves to Spark; a Spark savepoint carries the engine's layout of its
    state. A Spark job's checkpoint location is no such snapshot, so a Spark job moves (or
    upgrades) by savepoint only."""

    ENGINE = "engine"
    SPARK = "spark"


class Phase(enum.Enum):
    """Where an upgrade stands; the last four are its ends."""

    INSPECT = "inspect"
    TAKE_SAVEPOINT = "take-savepoint"  # a savepoint to check the plan against (no checkpoint yet)
    CHECK_PLAN = "check-plan"
    STOP = "stop"
    CANCEL = "cancel"
    SUBMIT = "submit"
    HEALTH = "health"
    DISPOSE = "dispose"
    ROLLBACK_CANCEL = "rollback-cancel"
    ROLLBACK_SUBMIT = "rollback-submit"
    DONE = "done"
    REFUSED = "refused"
    UNHEALTHY = "unhealthy"
    ROLLED_BACK = "rolled-back"


ENDS = (Phase.DONE, Phase.REFUSED, Phase.UNHEALTHY, Phase.ROLLED_BACK)


class Refusal(enum.Enum):
    """Why an upgrade stopped before or while replacing the job (what the CLI maps to exit codes)."""

    NOT_RUNNING = "not-running"  # nothing to upgrade, or no state to take
    PLAN = "plan"  # savepoint plan's checks refused the new program
    SAVEPOINT_FAILED = "savepoint-failed"  # and no fallback: the old job keeps running
    MODE = "mode"  # the mode cannot carry this job's state to the runner asked for (nothing stopped)


@dataclass(frozen=True)
class UpgradeSpec:
    """What the operator asked for."""

    job_id: str
    program: str
    mode: UpgradeMode
    ready_timeout_ms: int
    args: tuple[str, ...] = ()
    parallelism: int | None = None
    allow_non_restored_state: bool = False
    fallback: bool = True
    max_checkpoint_age_ms: int | None = None
    rollback_on_failure: bool = False
    savepoint_dir: str | None = None
    #: the runner the new job runs on; None: the old job's own
    runner: Runner | None = None
    #: configuration for the new job (-D, --spark-master), as ``flinkpy run`` takes it
    overrides: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "mode": self.mode.value, "args": list(self.args),
                "runner": self.runner.value if self.runner else None, "overrides": [list(kv) for kv in self.overrides]}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> UpgradeSpec:
        return cls(**{**doc, "mode": UpgradeMode(doc["mode"]), "args": tuple(doc.get("args") or ()),
                      "runner": Runner(doc["runner"]) if doc.get("runner") else None,
                      "overrides": tuple((str(k), str(v)) for k, v in doc.get("overrides") or ())})


@dataclass(frozen=True)
class CheckpointRef:
    """A completed checkpoint of the old job: where it is, its id, when it completed."""

    path: str
    checkpoint_id: int
    completed_ms: int


# --------------------------------------------------------------------------- actions (what to do)


@dataclass(frozen=True)
class Inspect:
    """Read the old job's state, its latest checkpoint and its submission (to roll back to)."""

    job_id: str


@dataclass(frozen=True)
class TakeSavepoint:
    """Trigger a savepoint of the running old job (it keeps running): the plan is checked on it."""

    job_id: str


@dataclass(frozen=True)
class CheckPlan:
    """Run `savepoint plan`'s checks of the new program against ``snapshot``, for ``runner`` (the
    runner-move plan, ``savepoint plan --runner``, when the job changes runner)."""

    snapshot: str
    runner: Runner = Runner.ENGINE


@dataclass(frozen=True)
class StopWithSavepoint:
    """Stop the old job with a final savepoint; ``request_id`` set: it was asked for already."""

    job_id: str
    request_id: str | None


@dataclass(frozen=True)
class CancelJob:
    """Cancel a job; ``retain_latest_checkpoint``: keep its newest checkpoint whatever its
    retention setting (last-state restores from it)."""

    job_id: str
    retain_latest_checkpoint: bool


@dataclass(frozen=True)
class SubmitNew:
    """Run the new program on ``runner``, restored from ``restore`` (None: fresh). ``after_ms`` set:
    an earlier attempt may have submitted it already (a job started after then is adopted, not doubled)."""

    restore: str | None
    allow_non_restored_state: bool
    after_ms: int | None
    runner: Runner = Runner.ENGINE


@dataclass(frozen=True)
class CheckHealth:
    """Observe the new job once (the runner waits a poll interval between two)."""

    job_id: str


@dataclass(frozen=True)
class DisposeCheckpoint:
    """The old job's checkpoint kept for last-state is no longer needed: delete it."""

    path: str


@dataclass(frozen=True)
class ResubmitOld:
    """Submit the old job's own submission again on its own ``runner``, from the same snapshot (rollback)."""

    restore: str | None
    after_ms: int | None
    runner: Runner = Runner.ENGINE


@dataclass(frozen=True)
class Finish:
    """Nothing more to do: the upgrade ended in ``phase``."""

    phase: Phase


Action = Union[Inspect, TakeSavepoint, CheckPlan, StopWithSavepoint, CancelJob, SubmitNew, CheckHealth, DisposeCheckpoint, ResubmitOld, Finish]


# --------------------------------------------------------------------------- events (what happened)


@dataclass(frozen=True)
class JobInspected:
    state: str
    checkpoint: CheckpointRef | None
    now_ms: int
    deletes_checkpoints_on_cancel: bool = True
    #: who runs the old job (a Spark job's "checkpoint" is its query's checkpoint location)
    runner: Runner = Runner.ENGINE


@dataclass(frozen=True)
class PlanChecked:
    problems: tuple[str, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class StopRequested:
    request_id: str


@dataclass(frozen=True)
class SavepointTaken:
    path: str


@dataclass(frozen=True)
class SavepointFailed:
    reason: str


@dataclass(frozen=True)
class JobCancelled:
    """The job is cancelled; ``latest_checkpoint``: the newest one it kept (last-state);
    ``state``: how it ended (FINISHED: its input ended on its own before the cancel reached it)."""

    latest_checkpoint: str | None
    state: str = "CANCELED"


@dataclass(frozen=True)
class SubmitStarted:
    """The runner is about to submit (journaled first: a re-run adopts rather than doubles)."""

    now_ms: int


@dataclass(frozen=True)
class Submitted:
    job_id: str
    now_ms: int


@dataclass(frozen=True)
class SubmitFailed:
    reason: str


@dataclass(frozen=True)
class HealthObserved:
    """The new job as seen once: its state, restarts, completed checkpoints, and when."""

    state: str
    restarts: int
    completed_checkpoints: int
    now_ms: int
    root_cause: str | None = None


@dataclass(frozen=True)
class Disposed:
    pass


Event = Union[JobInspected, PlanChecked, StopRequested, SavepointTaken, SavepointFailed, JobCancelled, SubmitStarted,
              Submitted, SubmitFailed, HealthObserved, Disposed]

_TERMINAL = ("FINISHED", "CANCELED", "FAILED")


# --------------------------------------------------------------------------- the machine


@dataclass
class Upgrade:
    """One upgrade's decisions; everything it knows is in its fields (see :meth:`to_dict`)."""

    spec: UpgradeSpec
    phase: Phase = Phase.INSPECT
    #: the mode actually used: a fallback may change it (savepoint -> last-state and back)
    mode: UpgradeMode | None = None
    #: the lines the operator is told about decisions (fallbacks, warnings), in order
    notes: list[str] = field(default_factory=list)
    checkpoint: CheckpointRef | None = None
    deletes_checkpoints_on_cancel: bool = True
    #: what the plan was checked against (a checkpoint, or a savepoint taken for it)
    plan_snapshot: str | None = None
    stop_request_id: str | None = None
    #: what the new job starts from (and a rollback returns to); None: fresh
    snapshot: str | None = None
    submit_started_ms: int | None = None
    new_job_id: str | None = None
    health_started_ms: int | None = None
    rollback_job_id: str | None = None
    #: why the upgrade ended other than DONE (one line, naming the cause)
    reason: str | None = None
    refusal: Refusal | None = None
    problems: list[str] = field(default_factory=list)
    #: who runs the old job, and who runs the new one (known once the old job is inspected)
    from_runner: Runner | None = None
    to_runner: Runner | None = None

    def __post_init__(self) -> None:
        if self.mode is None:
            self.mode = self.spec.mode

    # -- what to do ------------------------------------------------------------------------

    def action(self) -> Action:
        s, p = self.spec, self.phase
        if p is Phase.INSPECT:
            return Inspect(s.job_id)
        if p is Phase.TAKE_SAVEPOINT:
            return TakeSavepoint(s.job_id)
        if p is Phase.CHECK_PLAN:
            assert self.plan_snapshot is not None
            return CheckPlan(self.plan_snapshot, self._to)
        if p is Phase.STOP:
            return StopWithSavepoint(s.job_id, self.stop_request_id)
        if p is Phase.CANCEL:
            return CancelJob(s.job_id, retain_latest_checkpoint=self.mode is UpgradeMode.LAST_STATE)
        if p is Phase.SUBMIT:
            return SubmitNew(self.snapshot, s.allow_non_restored_state, self.submit_started_ms, self._to)
        if p is Phase.HEALTH:
            assert self.new_job_id is not None
            return CheckHealth(self.new_job_id)
        if p is Phase.DISPOSE:
            assert self.checkpoint is not None and self.snapshot is not None
            return DisposeCheckpoint(self.snapshot)
        if p is Phase.ROLLBACK_CANCEL:
            assert self.new_job_id is not None
            return CancelJob(self.new_job_id, retain_latest_checkpoint=False)
        if p is Phase.ROLLBACK_SUBMIT:
            return ResubmitOld(self.snapshot, self.submit_started_ms, self.from_runner or Runner.ENGINE)
        return Finish(p)

    @property
    def _to(self) -> Runner:
        return self.to_runner or Runner.ENGINE

    @property
    def moves(self) -> bool:
        """Whether the new job runs on another runner than the old one."""
        return self.from_runner is not None and self.from_runner is not self.to_runner

    # -- what happened ---------------------------------------------------------------------

    def on(self, event: Event) -> None:
        handler = _HANDLERS.get((self.phase, type(event)))
        if handler is None:
            raise ValueError(f"upgrade in phase {self.phase.value} cannot take {type(event).__name__}")
        handler(self, event)

    def _inspected(self, e: JobInspected) -> None:
        s = self.spec
        self.from_runner, self.to_runner = e.runner, s.runner or e.runner
        if e.runner is Runner.SPARK:  # its checkpoint location restores that query only: no last state to carry
            if e.state not in ("FINISHED", "CANCELED") and self.mode is UpgradeMode.LAST_STATE:
                return self._refuse(Refusal.MODE, f"--mode last-state cannot carry Spark job {s.job_id}'s state: its last state is its "
                                    "query's checkpoint location, which no new job (on Spark or the engine) restores from")
            if e.state not in ("FINISHED", "CANCELED", "RUNNING") and self.mode is UpgradeMode.SAVEPOINT:
                return self._refuse(Refusal.NOT_RUNNING, f"job {s.job_id} is {e.state}, so no savepoint can be taken, and a Spark "
                                    "job's state moves by savepoint only")
            e = dataclasses.replace(e, checkpoint=None)
        self.checkpoint, self.deletes_checkpoints_on_cancel = e.checkpoint, e.deletes_checkpoints_on_cancel
        if e.state in ("FINISHED", "CANCELED") or (e.state == "FAILED" and self.mode is not UpgradeMode.LAST_STATE and not s.fallback):
            return self._refuse(Refusal.NOT_RUNNING, f"job {s.job_id} is {e.state}: there is no running job to upgrade")
        running = e.state == "RUNNING"
        if self.mode is UpgradeMode.STATELESS:
            self.phase = Phase.CANCEL
            return
        if self.mode is UpgradeMode.SAVEPOINT and not running:
            if not s.fallback:
                return self._refuse(Refusal.NOT_RUNNING, f"job {s.job_id} is {e.state}, so no savepoint can be taken, and --no-fallback forbids last-state")
            self.mode = UpgradeMode.LAST_STATE
            self.notes.append(f"job {s.job_id} is {e.state}: no savepoint can be taken; falling back to last-state")
        if self.mode is UpgradeMode.LAST_STATE:
            age = None if e.checkpoint is None else e.now_ms - e.checkpoint.completed_ms
            too_old = age is not None and s.max_checkpoint_age_ms is not None and age > s.max_checkpoint_age_ms
            if (e.checkpoint is None or too_old) and running and s.mode is UpgradeMode.LAST_STATE:
                self.mode = UpgradeMode.SAVEPOINT
                self.notes.append(
                    f"job {s.job_id} has no completed checkpoint: taking a savepoint instead" if e.checkpoint is None else
                    f"the latest checkpoint ({e.checkpoint.checkpoint_id}) is {age / 1000:.0f} s old, older than "
                    f"--max-checkpoint-age: taking a savepoint instead")
            elif e.checkpoint is None:
                return self._refuse(Refusal.NOT_RUNNING, f"job {s.job_id} is {e.state} and has no completed checkpoint to restore from")
        if e.checkpoint is not None:  # the job's operators and state, as the final snapshot will have them
            self.plan_snapshot = e.checkpoint.path
            self.phase = Phase.CHECK_PLAN
        else:  # nothing to check the plan against yet: a savepoint, the job running on
            self.phase = Phase.TAKE_SAVEPOINT

    def _plan_snapshot_taken(self, e: SavepointTaken) -> None:
        self.plan_snapshot = e.path
        self.notes.append(f"took savepoint {e.path} to check the new program against")
        self.phase = Phase.CHECK_PLAN

    def _plan_snapshot_failed(self, e: SavepointFailed) -> None:
        self._refuse(Refusal.SAVEPOINT_FAILED, f"the savepoint to check the new program against failed: {e.reason}")

    def _plan_checked(self, e: PlanChecked) -> None:
        self.notes.extend(f"warning: {w}" for w in e.warnings)
        if e.problems:
            self.problems = list(e.problems)
            return self._refuse(Refusal.PLAN, f"the new program cannot be restored from the job's state: {e.problems[0]}")
        self.phase = Phase.STOP if self.mode is UpgradeMode.SAVEPOINT else Phase.CANCEL

    def _stop_requested(self, e: StopRequested) -> None:
        self.stop_request_id = e.request_id

    def _stopped(self, e: SavepointTaken) -> None:
        self.snapshot = e.path
        self.phase = Phase.SUBMIT

    def _stop_failed(self, e: SavepointFailed) -> None:
        self.stop_request_id = None
        if self.spec.fallback and self.checkpoint is not None:
            self.mode = UpgradeMode.LAST_STATE
            self.notes.append(f"stop-with-savepoint failed ({e.reason}); falling back to last-state")
            self.phase = Phase.CANCEL
            return
        self._refuse(Refusal.SAVEPOINT_FAILED, f"stop-with-savepoint of job {self.spec.job_id} failed: {e.reason}; the job keeps running")

    def _cancelled(self, e: JobCancelled) -> None:
        if e.state == "FINISHED" and self.mode is not UpgradeMode.STATELESS:
            # its checkpoints went with it, and its output is complete: nothing to carry over
            return self._refuse(Refusal.NOT_RUNNING, f"job {self.spec.job_id} finished on its own during the upgrade "
                                "(its input ended): there is no state to carry over; run the new program as a new job")
        if self.mode is UpgradeMode.LAST_STATE:
            self.snapshot = e.latest_checkpoint or (self.checkpoint.path if self.checkpoint else None)
        self.phase = Phase.SUBMIT

    def _submit_started(self, e: SubmitStarted) -> None:
        self.submit_started_ms = e.now_ms

    def _submitted(self, e: Submitted) -> None:
        self.new_job_id, self.health_started_ms = e.job_id, e.now_ms
        self.submit_started_ms = None
        self.phase = Phase.HEALTH

    def _submit_failed(self, e: SubmitFailed) -> None:
        self.submit_started_ms = None
        self._unhealthy(f"the new program could not be submitted: {e.reason}", job_exists=False)

    def _observed(self, e: HealthObserved) -> None:
        if e.state == "FINISHED" or (e.state == "RUNNING" and e.restarts == 0 and e.completed_checkpoints > 0):
            keep = self.mode is UpgradeMode.LAST_STATE and self.deletes_checkpoints_on_cancel and self.snapshot is not None
            self.phase = Phase.DISPOSE if keep else Phase.DONE
            return
        started = self.health_started_ms if self.health_started_ms is not None else e.now_ms
        cause = f": {e.root_cause}" if e.root_cause else ""
        if e.restarts > 0:
            return self._unhealthy(f"new job {self.new_job_id} restarted {e.restarts} time(s){cause}")
        if e.state in _TERMINAL:
            return self._unhealthy(f"new job {self.new_job_id} is {e.state}{cause}", job_exists=False)
        if e.now_ms - started > self.spec.ready_timeout_ms:
            what = "running with a completed checkpoint" if e.state == "RUNNING" else f"RUNNING (it is {e.state})"
            return self._unhealthy(f"new job {self.new_job_id} was not {what} within --ready-timeout{cause}")

    def _disposed(self, e: Disposed) -> None:
        self.phase = Phase.DONE

    def _unhealthy(self, reason: str, *, job_exists: bool = True) -> None:
        self.reason = reason
        if not self.spec.rollback_on_failure:
            self.phase = Phase.UNHEALTHY
        elif job_exists and self.new_job_id is not None:
            self.phase = Phase.ROLLBACK_CANCEL
        else:
            self.phase = Phase.ROLLBACK_SUBMIT

    def _rollback_cancelled(self, e: JobCancelled) -> None:
        self.phase = Phase.ROLLBACK_SUBMIT

    def _rolled_back(self, e: Submitted) -> None:
        self.rollback_job_id = e.job_id
        self.submit_started_ms = None
        self.phase = Phase.ROLLED_BACK

    def _refuse(self, refusal: Refusal, reason: str) -> None:
        self.refusal, self.reason, self.phase = refusal, reason, Phase.REFUSED

    # -- the journal's document ------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        doc.update(spec=self.spec.to_dict(), phase=self.phase.value, mode=self.mode.value if self.mode else None,
                   checkpoint=dataclasses.asdict(self.checkpoint) if self.checkpoint else None,
                   refusal=self.refusal.value if self.refusal else None,
                   from_runner=self.from_runner.value if self.from_runner else None,
                   to_runner=self.to_runner.value if self.to_runner else None)
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Upgrade:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in doc.items() if k in known}
        values.update(
            spec=UpgradeSpec.from_dict(doc["spec"]), phase=Phase(doc["phase"]),
            mode=UpgradeMode(doc["mode"]) if doc.get("mode") else None,
            checkpoint=CheckpointRef(**doc["checkpoint"]) if doc.get("checkpoint") else None,
            refusal=Refusal(doc["refusal"]) if doc.get("refusal") else None,
            from_runner=Runner(doc["from_runner"]) if doc.get("from_runner") else None,
            to_runner=Runner(doc["to_runner"]) if doc.get("to_runner") else None,
        )
        return cls(**values)


_HANDLERS: dict[tuple[Phase, type], Any] = {
    (Phase.INSPECT, JobInspected): Upgrade._inspected,
    (Phase.TAKE_SAVEPOINT, SavepointTaken): Upgrade._plan_snapshot_taken,
    (Phase.TAKE_SAVEPOINT, SavepointFailed): Upgrade._plan_snapshot_failed,
    (Phase.CHECK_PLAN, PlanChecked): Upgrade._plan_checked,
    (Phase.STOP, StopRequested): Upgrade._stop_requested,
    (Phase.STOP, SavepointTaken): Upgrade._stopped,
    (Phase.STOP, SavepointFailed): Upgrade._stop_failed,
    (Phase.CANCEL, JobCancelled): Upgrade._cancelled,
    (Phase.SUBMIT, SubmitStarted): Upgrade._submit_started,
    (Phase.SUBMIT, Submitted): Upgrade._submitted,
    (Phase.SUBMIT, SubmitFailed): Upgrade._submit_failed,
    (Phase.HEALTH, HealthObserved): Upgrade._observed,
    (Phase.DISPOSE, Disposed): Upgrade._disposed,
    (Phase.ROLLBACK_CANCEL, JobCancelled): Upgrade._rollback_cancelled,
    (Phase.ROLLBACK_SUBMIT, SubmitStarted): Upgrade._submit_started,
    (Phase.ROLLBACK_SUBMIT, Submitted): Upgrade._rolled_back,
}
