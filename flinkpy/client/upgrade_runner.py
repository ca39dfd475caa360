"""``flinkpy upgrade``'s edge: carries out what :class:`~flinkpy.client.upgrade.Upgrade` decides.

Every action goes to the cluster through :class:`~flinkpy.client.client.Client` (stop with a
savepoint, cancel, submit, the job's state and checkpoints) or to storage (`savepoint plan`'s
checks, disposing of a checkpoint kept for last-state); what happened goes back to the machine
as an event. Before each action the machine's state is written to the upgrade's journal,
``<cluster home>/upgrades/<job id>.json`` (mode 0600: it holds the old job's submission, which is
code), together with the old job's submission document, fetched before anything stops, which a
rollback submits again. An upgrade killed half way (Ctrl-C, SIGTERM, SIGKILL) thus leaves a
journal that names the snapshot it took, and the same command run again continues from it; the
journal is removed once the upgrade has ended.

The old and the new job may run on different runners (``--runner``): what differs between the
engine and Spark is in :mod:`flinkpy.client.upgrade_moves`.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.client import upgrade as up
from flinkpy.client import upgrade_moves as moves
from flinkpy.client.operations import Deadline, job_reached
from flinkpy.clock import now_ms
from flinkpy.errors import ConflictError, FlinkpyError
from flinkpy.files import read_json, write_json_atomically

if TYPE_CHECKING:
    from flinkpy.client.client import Client

#: names the point at which the upgrade SIGKILLs itself (drills and tests of re-running): a phase,
#: killed at its start once the journal says it is next, or one of the points inside a step where
#: a kill leaves the most to recover, :data:`KILL_POINTS`
KILL_AT_ENV = "FLINKPY_UPGRADE_KILL_AT"
#: inside a step: a stop-with-savepoint asked for and journaled, not yet completed; a new (or, in a
#: rollback, the old) program submitted, and not yet journaled as submitted
KILL_POINTS = ("stop:requested", "submit:submitted", "rollback-submit:submitted")
#: how often the new job is looked at during the health check
HEALTH_POLL_S = 0.2
#: the interval the JobManager reports for a job without periodic checkpoints (Flink's Long.MAX_VALUE)
_NO_INTERVAL = 0x7FFFFFFFFFFFFFFF


#: steps before which nothing was stopped: a failure there leaves no upgrade to continue
_UNTOUCHED = (up.Phase.INSPECT, up.Phase.TAKE_SAVEPOINT, up.Phase.CHECK_PLAN)


def journal_path(home: Path, job_id: str) -> Path:
    return Path(home) / "upgrades" / f"{job_id}.json"


def _same_request(m: up.Upgrade, b: up.UpgradeSpec) -> bool:
    """Whether ``b`` asks for the upgrade ``m`` records (a re-run without -p keeps the
    parallelism the first run chose, one without --runner the runner it resolved)."""
    a = m.spec
    return ((a.program, a.args, a.mode) == (b.program, b.args, b.mode) and b.parallelism in (None, a.parallelism)
            and b.runner in (None, a.runner, m.to_runner))


def _describe(m: up.Upgrade) -> str:
    spec, runner = m.spec, m.spec.runner or m.to_runner
    return " ".join(["flinkpy upgrade", "--mode", spec.mode.value, *(["--runner", runner.value] if runner else []),
                     *(["-p", str(spec.parallelism)] if spec.parallelism else []), spec.job_id, spec.program, *spec.args])


def _restored_from(restored: str | None, snapshot: str) -> bool:
    """Whether a job restored from ``restored`` (as the JobManager spells it: a checkpoint's
    directory) started from ``snapshot`` (as the upgrade spells it: perhaps its ``_metadata``)."""
    from flinkpy.client.savepoints import snapshot_location

    return restored is not None and snapshot_location(restored) == snapshot_location(snapshot)


def _fault_point(name: str) -> None:
    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


class UpgradeRunner:
    """One upgrade against one cluster; ``on_step`` hears a line per step as it happens."""

    def __init__(self, client: Client, spec: up.UpgradeSpec, *, on_step: Callable[[str], None] = lambda line: None,
                 step_timeout_s: float = 600.0) -> None:
        self.client = client
        self.on_step = on_step
        self.step_timeout_s = step_timeout_s
        self.journal = journal_path(client.home.path, spec.job_id)
        self.steps: list[dict[str, Any]] = []
        self.resumed = False
        self._health_announced = False
        self._triggered = False
        saved = read_json(self.journal) if self.journal.exists() else None
        self.old_submission: dict[str, Any] | None = None
        if saved is not None:
            machine = up.Upgrade.from_dict(saved["upgrade"])
            if not _same_request(machine, spec):
                raise ConflictError(
                    f"an upgrade of job {spec.job_id} to {machine.spec.program} ({machine.spec.mode.value}) was interrupted "
                    f"in step {machine.phase.value}" + (f" after taking {machine.snapshot}" if machine.snapshot else ""),
                    remedy=f"continue it with '{_describe(machine)}', or remove {self.journal} once you have checked the job",
                )
            # the flags that do not change what is replaced may change on the re-run
            machine.spec = dataclasses.replace(spec, parallelism=machine.spec.parallelism, runner=machine.spec.runner)
            self.machine = machine
            self.old_submission = saved.get("old_submission")
            self.resumed = True
        else:
            kept = None if spec.parallelism else self._current_parallelism(spec.job_id)
            self.machine = up.Upgrade(dataclasses.replace(spec, parallelism=kept) if kept else spec)
            if kept:
                self._step(f"The new job keeps the job's parallelism {kept} (-p changes it)")

    def _current_parallelism(self, job_id: str) -> int | None:
        """The running job's parallelism (its widest vertex, after any rescale): what the new
        job keeps unless -p says otherwise. None when the job cannot be read (the first step
        says why)."""
        try:
            vertices = self.client.job(job_id).get("vertices") or []
        except FlinkpyError:
            return None
        return max((int(v.get("parallelism") or 0) for v in vertices), default=0) or None

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> up.Upgrade:
        m = self.machine
        if self.resumed:
            self._step(f"Continuing the interrupted upgrade of job {m.spec.job_id} at step {m.phase.value}"
                       + (f" (snapshot {m.snapshot})" if m.snapshot else ""))
        while m.phase not in up.ENDS:
            self._save()
            _fault_point(m.phase.value)
            action = m.action()
            try:
                events = self._perform(action)
            except FlinkpyError:
                if m.phase in _UNTOUCHED:  # the old job runs on as it did: nothing to continue
                    self.journal.unlink(missing_ok=True)
                raise
            for event in events:
                notes = len(m.notes)
                m.on(event)
                for note in m.notes[notes:]:
                    self._step(note)
        self._finish()
        return m

    def _save(self) -> None:
        self.journal.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomically(self.journal, {"upgrade": self.machine.to_dict(), "old_submission": self.old_submission})

    def _finish(self) -> None:
        m = self.machine
        if m.phase is up.Phase.UNHEALTHY:
            self._save()  # the new job runs on unhealthy: the snapshot and what happened stay named
            return
        self.journal.unlink(missing_ok=True)

    def _step(self, line: str) -> None:
        self.steps.append({"timestamp": now_ms(), "phase": self.machine.phase.value, "message": line})
        self.on_step(line)

    # -- the actions -----------------------------------------------------------------------

    def _perform(self, action: up.Action) -> list[up.Event]:
        handler = getattr(self, "_do_" + type(action).__name__)
        return handler(action)

    def _do_Inspect(self, a: up.Inspect) -> list[up.Event]:
        doc = self.client.job(a.job_id)
        state = str(doc.get("state"))
        runner = moves.runner_of(self.client, a.job_id)
        target = self.machine.spec.runner or runner
        self._step(f"Job {a.job_id} ({doc.get('name')}) is {state} on the {runner.value}"
                   + (f"; the new job runs on {target.value}" if target is not runner else ""))
        checkpoint = self._latest_checkpoint(a.job_id)
        if checkpoint is not None:
            self._step(f"Latest completed checkpoint: {checkpoint.checkpoint_id} at {checkpoint.path}")
        deletes = True
        try:
            config = self.client.endpoint(a.job_id).checkpoint_config(a.job_id)
            deletes = bool((config.get("externalization") or {}).get("delete_on_cancellation", True))
        except FlinkpyError:
            pass
        try:
            self.old_submission = moves.old_submission(self.client, a.job_id, runner)
        except FlinkpyError as exc:
            self.old_submission = None
            if self.machine.spec.rollback_on_failure:
                self._step(f"warning: the old job's program cannot be kept to roll back to: {exc.message}")
        return [up.JobInspected(state, checkpoint, now_ms(), deletes, runner)]

    def _latest_checkpoint(self, job_id: str) -> up.CheckpointRef | None:
        doc = self.client.checkpoints(job_id)
        latest = ((doc or {}).get("latest") or {}).get("completed")
        if not latest or not latest.get("external_path"):
            return None
        return up.CheckpointRef(str(latest["external_path"]), int(latest["id"]), int(latest.get("latest_ack_timestamp") or 0))

    def _do_TakeSavepoint(self, a: up.TakeSavepoint) -> list[up.Event]:
        from flinkpy.errors import SavepointFailedError

        self._step(f"Triggering a savepoint of job {a.job_id} to check the new program against")
        deadline = Deadline(self.step_timeout_s)
        try:
            request = self.client.trigger_savepoint(a.job_id, self.machine.spec.savepoint_dir, deadline=deadline, if_busy="wait",
                                                   trigger="upgrade")
            return [up.SavepointTaken(self.client.wait_for_savepoint(a.job_id, request, deadline))]
        except (SavepointFailedError, ConflictError) as exc:
            return [up.SavepointFailed(exc.message)]

    def _do_CheckPlan(self, a: up.CheckPlan) -> list[up.Event]:
        from flinkpy.checkpoint.metadata import CorruptCheckpointError
        from flinkpy.client.program import plan_program
        from flinkpy.client.restore_plan import compare
        from flinkpy.errors import NotFoundError

        spec = self.machine.spec
        metadata, where = self._snapshot_metadata(a.snapshot)
        if self.machine.moves or self.machine.from_runner is up.Runner.SPARK:
            self._step(f"Checking {spec.program} against {where} (savepoint plan --runner {a.runner.value})")
            if a.runner is up.Runner.ENGINE:
                self.client.cluster.overview()  # a cluster to move to, before anything stops
            for attempt in range(5):
                try:
                    problems, warnings, line = moves.plan_problems(where, spec.program, list(spec.args), runner=a.runner,
                                                                   parallelism=spec.parallelism,
                                                                   allow_non_restored_state=spec.allow_non_restored_state,
                                                                   overrides=dict(spec.overrides))
                    break
                except (NotFoundError, CorruptCheckpointError):
                    if attempt == 4:
                        raise
                    _, where = self._snapshot_metadata(where)  # a newer checkpoint subsumed it while the plan was made
            if not problems:
                self._step(line)
            return [up.PlanChecked(tuple(problems), tuple(warnings))]
        self._step(f"Checking {spec.program} against {where} (savepoint plan)")
        plan = plan_program(spec.program, list(spec.args), parallelism=spec.parallelism)
        doc = compare(metadata, plan, allow_non_restored_state=spec.allow_non_restored_state)
        if doc["restorable"]:
            restored = sum(1 for op in doc["operators"] if op["status"] == "restored")
            self._step(f"Plan: {restored} operator(s) get their state back, {len(doc['dropped'])} dropped")
        return [up.PlanChecked(tuple(doc["problems"]), tuple(doc["warnings"]))]

    def _snapshot_metadata(self, path: str) -> tuple[dict[str, Any], str]:
        """The ``_metadata`` of ``path``; when a newer checkpoint subsumed it meanwhile (the job
        keeps running), that of the job's latest: the plan needs the operators, not that file."""
        from flinkpy.checkpoint.storage import CheckpointStorage
        from flinkpy.checkpoint.metadata import CorruptCheckpointError
        from flinkpy.errors import NotFoundError

        for _ in range(5):
            try:
                return CheckpointStorage(path).read_metadata(path), path
            except (NotFoundError, CorruptCheckpointError):
                latest = self._latest_checkpoint(self.machine.spec.job_id)
                if latest is None or latest.path == path:
                    raise
                path = latest.path
        return CheckpointStorage(path).read_metadata(path), path

    def _do_StopWithSavepoint(self, a: up.StopWithSavepoint) -> list[up.Event]:
        from flinkpy.errors import SavepointFailedError

        deadline = Deadline(self.step_timeout_s)
        request = a.request_id
        try:
            if request is None:
                self._step(f"Stopping job {a.job_id} with a savepoint")
                request = self.client.stop_with_savepoint(a.job_id, self.machine.spec.savepoint_dir, deadline=deadline, trigger="upgrade")
                self.machine.on(up.StopRequested(request))
                self._save()  # before waiting: a re-run follows this very request
                _fault_point("stop:requested")
            location = self.client.wait_for_savepoint(a.job_id, request, deadline, what="stop-with-savepoint")
        except (SavepointFailedError, ConflictError) as exc:
            return [up.SavepointFailed(exc.message)]
        self._step(f"Savepoint completed. Path: {location}")
        self._wait_terminal(a.job_id, deadline)
        return [up.SavepointTaken(location)]

    def _wait_terminal(self, job_id: str, deadline: Deadline) -> str:
        from flinkpy.client.operations import wait_for_state

        doc = wait_for_state(self.client.endpoint(job_id), job_id, "TERMINAL", deadline, f"{self.step_timeout_s:.0f} s")
        return str(doc.get("state"))

    def _do_CancelJob(self, a: up.CancelJob) -> list[up.Event]:
        deadline = Deadline(self.step_timeout_s)
        keep = " keeping its latest checkpoint" if a.retain_latest_checkpoint else ""
        self._step(f"Cancelling job {a.job_id}{keep}")
        try:
            self.client.endpoint(a.job_id).cancel_job(a.job_id, retain_latest_checkpoint=a.retain_latest_checkpoint)
        except ConflictError:
            pass  # already ended (an earlier attempt cancelled it, or it failed): what counts is that it has
        state = self._wait_terminal(a.job_id, deadline)
        latest = None
        if a.retain_latest_checkpoint:
            ref = self._latest_checkpoint(a.job_id)
            latest = ref.path if ref is not None else None
            self._step(f"Job {a.job_id} is {state}; restoring from checkpoint {latest}")
        else:
            self._step(f"Job {a.job_id} is {state}")
        return [up.JobCancelled(latest, state)]

    def _adopt(self, after_ms: int | None, restore: str | None, runner: up.Runner) -> str | None:
        """A job of ``runner`` an interrupted attempt submitted already (started after ``after_ms``,
        restored from ``restore``), so that a re-run does not run the program twice."""
        if after_ms is None:
            return None
        for job in moves.live_jobs(self.client, runner):
            jid = str(job.get("jid"))
            if jid == self.machine.spec.job_id or job.get("state") in ("FINISHED", "CANCELED", "FAILED"):
                continue
            if int(job.get("start-time") or 0) < after_ms - 1000:
                continue
            if restore is not None and not _restored_from(self.client.restored_from(jid), restore):
                continue
            return jid
        return None

    def _do_SubmitNew(self, a: up.SubmitNew) -> list[up.Event]:
        spec = self.machine.spec
        adopted = self._adopt(a.after_ms, a.restore, a.runner)
        if adopted is not None:
            self._step(f"Job {adopted}, submitted by the interrupted attempt, runs the new program")
            return [up.Submitted(adopted, now_ms())]
        if a.restore is not None and self.machine.moves and self.machine.mode is up.UpgradeMode.LAST_STATE:
            why = moves.in_flight(a.restore)  # the checkpoint kept at cancel may be newer than the one planned
            if why is not None:
                return [up.SubmitFailed(why)]
        self.machine.on(up.SubmitStarted(now_ms()))
        self._save()
        where = f" from {a.restore}" if a.restore else " without state"
        self._step(f"Submitting {spec.program} to the {a.runner.value}{where}")
        try:
            jobs = self.client.run(spec.program, list(spec.args), parallelism=spec.parallelism, detached=True,
                                   overrides={**dict(spec.overrides), "execution.runner": moves.EXECUTION_RUNNER[a.runner]},
                                   savepoint_path=a.restore, allow_non_restored_state=a.allow_non_restored_state)
        except FlinkpyError as exc:
            return [up.SubmitFailed(exc.message)]
        if not jobs:
            return [up.SubmitFailed(f"{spec.program} submitted no job (it never called env.execute())")]
        _fault_point("submit:submitted")
        self._step(f"Job has been submitted with JobID {jobs[0].job_id}")
        return [up.Submitted(jobs[0].job_id, now_ms())]

    def _do_CheckHealth(self, a: up.CheckHealth) -> list[up.Event]:
        if self._health_announced:
            time.sleep(HEALTH_POLL_S)  # between two looks at the job, never before the first
        doc = self.client.job(a.job_id)
        state = str(doc.get("state"))
        restarts = int(doc.get("restarts") or 0)
        spark = self.machine.to_runner is up.Runner.SPARK
        completed = 0
        try:
            completed = (moves.spark_completed(self.client, a.job_id) if spark else
                         int(((self.client.checkpoints(a.job_id) or {}).get("counts") or {}).get("completed") or 0))
        except FlinkpyError:
            pass
        cause = self._root_cause(a.job_id) if restarts or state in ("FAILED", "FAILING", "RESTARTING") else None
        if completed == 0 and not spark and not self._triggered and not restarts and job_reached(doc, "RUNNING"):
            self._trigger_if_on_demand(a.job_id)
        what = "micro-batch(es) committed" if spark else "checkpoint(s) completed"
        if state == "FINISHED" or (state == "RUNNING" and restarts == 0 and completed > 0):
            self._step(f"Job {a.job_id} is healthy: {state}" + (f", {completed} {what}, no restart" if state == "RUNNING" else ""))
        elif not self._health_announced:
            self._health_announced = True
            self._step(f"Waiting for job {a.job_id} to run and " + ("commit a micro-batch" if spark else "complete a checkpoint")
                       + " (--ready-timeout)")
        return [up.HealthObserved(state, restarts, completed, now_ms(), cause)]

    def _trigger_if_on_demand(self, job_id: str) -> None:
        """A job without periodic checkpoints takes one when asked: the health check asks once,
        so that it too can prove it checkpoints rather than wait out --ready-timeout."""
        self._triggered = True
        try:
            if int(self.client.cluster.checkpoint_config(job_id).get("interval") or 0) < _NO_INTERVAL:
                return
            checkpoint_id = self.client.trigger_checkpoint(job_id)
        except FlinkpyError:
            return
        self._step(f"Triggered checkpoint {checkpoint_id} of job {job_id} (it has no periodic checkpoints)")

    def _root_cause(self, job_id: str) -> str | None:
        try:
            doc = self.client.job_exceptions(job_id)
        except FlinkpyError:
            return None
        entries = ((doc.get("exceptionHistory") or {}).get("entries")) or []
        if entries:
            first = entries[-1]  # newest first: the last entry is what failed first
            name, message = first.get("exceptionName"), first.get("message")
            if name or message:
                return f"{name}: {message}" if name and message else str(name or message)
        trace = (doc.get("root-exception") or "").strip().splitlines()
        return trace[-1].strip() if trace else None

    def _do_DisposeCheckpoint(self, a: up.DisposeCheckpoint) -> list[up.Event]:
        from flinkpy.checkpoint.retention import dispose

        try:
            done = dispose(a.path, force=True)
            self._step(f"Disposed of checkpoint {done.path} of the old job (kept for last-state; the new job has its own)")
        except (FlinkpyError, OSError) as exc:
            self._step(f"warning: the old job's checkpoint {a.path} was not disposed of: {exc}")
        return [up.Disposed()]

    def _do_ResubmitOld(self, a: up.ResubmitOld) -> list[up.Event]:
        reason = self.machine.reason
        self._step(f"Rolling back: {reason}")
        adopted = self._adopt(a.after_ms, a.restore, a.runner)
        if adopted is not None:
            self._step(f"Job {adopted}, submitted by the interrupted attempt, runs the old program again")
            return [up.Submitted(adopted, now_ms())]
        if self.old_submission is None:
            raise ConflictError(
                f"cannot roll back job {self.machine.spec.job_id}: its program was not kept ({reason})",
                remedy=f"resubmit the old program with 'flinkpy run -s {a.restore} OLD_JOB.py'" if a.restore else "resubmit the old program with 'flinkpy run OLD_JOB.py'",
            )
        if moves.SPARK_SPEC in self.old_submission:
            self.machine.on(up.SubmitStarted(now_ms()))
            self._save()
            jid = moves.resubmit_on_spark(self.client, self.old_submission, a.restore)
            _fault_point("rollback-submit:submitted")
            self._step(f"Resubmitted the old program to Spark as job {jid}" + (f" from {a.restore}" if a.restore else ""))
            return [up.Submitted(jid, now_ms())]
        document = dict(self.old_submission)
        if a.restore is not None:
            from flinkpy.checkpoint.storage import CheckpointStorage

            storage = CheckpointStorage(a.restore)
            directory, _ = storage.locate(a.restore)
            document["restore"] = [directory, storage.read_metadata(a.restore)]
        self.machine.on(up.SubmitStarted(now_ms()))
        self._save()
        jid = self.client.cluster.submit_document(document)
        _fault_point("rollback-submit:submitted")
        self._step(f"Resubmitted the old program as job {jid}" + (f" from {a.restore}" if a.restore else ""))
        return [up.Submitted(jid, now_ms())]

    def _do_Finish(self, a: up.Finish) -> list[up.Event]:  # pragma: no cover - the loop ends first
        return []

