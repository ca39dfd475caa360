"""Executes a JobGraph: submit it to a cluster, or run it on an embedded one, and wait."""

from __future__ import annotations

import json
import sys
from typing import Any

from flinkpy.program.archive import PythonArchive
from flinkpy.program.context import PlanCaptured, SubmittedJob, current_context
from flinkpy.client.shipping import check_submission_size, document_entry, job_archive
from flinkpy.client.job_client import JobClient, JobExecutionResult
from flinkpy.client.interrupts import stop_requests
from flinkpy.client.restore_plan import missing_uid_warning
from flinkpy.client.tracebacks import user_first
from flinkpy.errors import FlinkpyError, Interrupted, InvalidProgramError, JobCanceledError, JobExecutionError, UsageError
from flinkpy.graph.job_graph import JobGraph


def _document(job: JobGraph, python_path: list[str], restore: list[Any] | None = None, archive: PythonArchive | None = None) -> bytes:
    doc = job.serialize()
    doc["python_path"] = python_path  # where the files were on this machine: for the record
    if restore is not None:
        doc["restore"] = restore
    if archive is not None:
        doc["python_archive"] = document_entry(archive)  # what the TaskManagers import
    return json.dumps(doc).encode()


def result_or_raise(job_id: str, name: str, result: dict[str, Any]) -> JobExecutionResult:
    status = result.get("application-status")
    if status == "SUCCEEDED":
        return JobExecutionResult(job_id, int(result.get("net-runtime", 0)), name)
    if status == "CANCELED":
        raise JobCanceledError(f"job {job_id} ({name}) was canceled", remedy="run it again if that was not intended")
    cause = result.get("failure-cause") or {}
    where = f" in {cause['task']}" if cause.get("task") else ""
    raise JobExecutionError(
        f"job {job_id} ({name}) failed{where}: {cause.get('class', 'Exception')}: {cause.get('message', '')}".rstrip(": "),
        job_id=job_id,
        remedy=f"see 'flinkpy job exceptions {job_id}'",
        details=cause.get("stack-trace"),
    )


def _restore_point(job: JobGraph, path: str, allow_non_restored: bool) -> list[Any]:
    """Read a savepoint's metadata and check it fits the job; returns [directory, metadata]."""
    from flinkpy.checkpoint.restore import channel_state_conflict, unmatched_state
    from flinkpy.checkpoint.storage import CheckpointStorage

    storage = CheckpointStorage(path)
    directory, _ = storage.locate(path)
    metadata = storage.read_metadata(path)
    moved = metadata.get("moved") if metadata.get("runner") == "spark" else {}
    if moved is None or (moved and moved.get("refused")):
        # a Spark savepoint carries the engine's layout of its state unless some could not move
        reasons = "; ".join(f"operator {r['operator']!r}: {r['reason']}" for r in (moved or {}).get("refused", []))
        raise InvalidProgramError(
            f"{directory} is a savepoint of a Spark job whose state the engine cannot take: "
            + (reasons or "it was written before Spark savepoints carried the engine's layout"),
            remedy="restore it with --runner spark",
        )
    ids = {op_id: (v, i) for v in job.vertices.values() for i, op_id in enumerate(v.operator_ids)}
    dropped = unmatched_state(metadata, set(ids))
    if dropped and not allow_non_restored:
        names = ", ".join(f"{op.get('name')!r} (uid {op.get('uid') or op['operator_id']})" for op in dropped)
        raise InvalidProgramError(
            f"the snapshot at {path} has state for operators this job does not have: {names}",
            remedy="restore into a program with those uids, or pass -n/--allowNonRestoredState to drop that state",
        )
    for op in metadata.get("operators", []):
        match = ids.get(op["operator_id"])
        if match is None:
            continue
        vertex, position = match
        keyed = any(s.get("keyed_state") for s in op.get("subtasks", []))
        if keyed and op.get("max_parallelism") != vertex.max_parallelism:
            raise InvalidProgramError(
                f"operator {op.get('name')!r} was snapshotted with max parallelism {op.get('max_parallelism')} "
                f"but the job now has {vertex.max_parallelism}: its keyed state cannot be redistributed",
                remedy="keep pipeline.max-parallelism (or set_max_parallelism) as it was when the job first started",
            )
        if not vertex.uids[position] and (op.get("subtasks") and any(s.get("keyed_state") or s.get("operator_state") or s.get("source_offsets") for s in op["subtasks"])):
            print(f"flinkpy: warning: {missing_uid_warning(str(op.get('name')), op['operator_id'])}", file=sys.stderr)
    conflict = channel_state_conflict(metadata, [(v.name, list(v.operator_ids), v.parallelism) for v in job.vertices.values()])
    if conflict:
        raise InvalidProgramError(
            f"unaligned checkpoint {metadata.get('checkpoint_id')} at {directory} holds in-flight data that only "
            f"the same job at the same parallelism can take back: {conflict}",
            remedy="restore it unchanged, then take a savepoint (savepoints are aligned) and rescale from that",
        )
    for op in dropped:
        print(f"flinkpy: warning: dropping the state of {op.get('name')!r} (uid {op.get('uid') or op['operator_id']}): no operator of this job claims it", file=sys.stderr)
    print(f"flinkpy: restoring from {metadata.get('kind', 'checkpoint')} {metadata.get('checkpoint_id')} at {directory}", file=sys.stderr)
    return [directory, metadata]


def _state_backend(config: dict[str, str]) -> dict[str, Any]:
    """Where the job's keyed state lives and how it is checkpointed, as the job would run."""
    return {
        "type": config.get("state.backend.type", "hashmap"),
        "incremental": config.get("execution.checkpointing.incremental", "false").lower() == "true",
    }


class StartedJob:
    """A submitted job, and the embedded cluster started for it (None on a running cluster),
    which :meth:`stop` stops once the job is no longer needed."""

    def __init__(self, rest: Any, job_id: str, name: str, cluster: Any = None, announce: bool = False) -> None:
        self.rest = rest
        self.job_id = job_id
        self.name = name
        self.cluster = cluster
        self._announce = announce

    @property
    def embedded(self) -> bool:
        return self.cluster is not None

    def stop(self) -> None:
        cluster, self.cluster = self.cluster, None
        if cluster is None:
            return
        if self._announce:
            print("flinkpy: stopping the embedded local cluster", file=sys.stderr, flush=True)
        cluster.__exit__(None, None, None)


def start_job_graph(job: JobGraph, *, need_cluster: bool = False) -> StartedJob:
    """Submit ``job`` to the cluster of the execution context, or to an embedded local cluster
    started for it (``need_cluster``: refuse instead); returns without waiting for the job."""
    from flinkpy.connectors.guarantees import check_sinks, job_guarantees

    ctx = current_context()
    guarantees = job_guarantees(job)
    check_sinks(job)
    if ctx.mode == "plan":
        raise PlanCaptured({**job.plan(), "state_backend": _state_backend(job.config), "guarantees": guarantees})
    for warning in guarantees["warnings"]:
        print(f"flinkpy: warning: {warning}", file=sys.stderr, flush=True)
    if need_cluster and not ctx.address:
        raise UsageError(
            "detached execution needs a running cluster, but none is configured",
            remedy="start one with 'flinkpy cluster start' (or pass -m HOST:PORT), or run attached",
        )
    restore = _restore_point(job, ctx.savepoint_path, ctx.allow_non_restored_state) if ctx.savepoint_path else None
    from flinkpy.network.rest_client import RestClient
    from flinkpy.program.python_files import KEY, import_roots

    # the job's directory, then what it added with add_python_file (python.files): shipped
    job_dirs = ctx.python_path or [p for p in sys.path[:1] if p]
    archive = job_archive(job_dirs, job.config or {})
    payload = _document(job, job_dirs + import_roots((job.config or {}).get(KEY)), restore, archive)
    cluster = None
    if ctx.address:
        rest = RestClient(ctx.address, ctx.token or _token_for(ctx.address), leader=ctx.leader)
    else:
        from flinkpy.cluster import EmbeddedCluster

        slots = max(v.parallelism for v in job.vertices.values())
        if ctx.announce:
            print(f"flinkpy: no cluster is running; starting an embedded local cluster ({slots} slot(s)) for this job", file=sys.stderr, flush=True)
        from flinkpy.cluster.supervision import policies_from_config
        from flinkpy.config import load_config

        # -D resourcemanager.taskmanager-restart.* apply to the embedded cluster's supervisor too
        policies = policies_from_config(load_config(env={}, overrides=dict(ctx.config or {})))
        cluster = EmbeddedCluster(slots=slots, job_stdout=ctx.job_stdout, restart_policies=policies).__enter__()
        rest = RestClient(cluster.rest_address, cluster.token())
    started = StartedJob(rest, "", job.job_name, cluster, ctx.announce)
    try:
        check_submission_size(rest, len(payload), archive, job.job_name)
        started.job_id = rest.submit_job(payload)
    except BaseException:
        started.stop()
        raise
    if ctx.on_submit:
        ctx.on_submit(started.job_id, job.job_name)
    return started


def execute_job_graph(job: JobGraph, *, detached: bool) -> Any:
    """Submit ``job`` (see :func:`start_job_graph`); attached, wait for its end.

    SIGINT or SIGTERM meanwhile (:mod:`flinkpy.client.interrupts`): on the embedded cluster the
    job is cancelled and the cluster stopped; on a running cluster the job keeps running and
    the client leaves, saying how to cancel it (as Flink's client does, unless
    execution.shutdown-on-attached-exit). Either way :class:`~flinkpy.errors.Interrupted` says
    which; ``python JOB.py`` then exits 130 or 143 with that line.
    """
    ctx = current_context()
    detached = detached or ctx.detached
    try:
        with stop_requests() as stop:
            started = start_job_graph(job, need_cluster=detached)
            if detached:
                ctx.submitted.append(_detached_submission(started.rest, started.job_id, job.job_name))
                return JobClient(started.rest, started.job_id, job.job_name)
            try:
                return _wait(ctx, started.rest, started.job_id, job.job_name, embedded=started.embedded)
            except Interrupted as e:
                stop.disarm()
                raise _carry_out(started, e.signum, ctx) from None
            finally:
                stop.disarm()
                started.stop()
    except Interrupted as e:
        if ctx.exit_on_interrupt:  # `python JOB.py`: the line and the code, no traceback
            print(f"flinkpy: {e.message}", file=sys.stderr, flush=True)
            raise SystemExit(e.exit_code) from None
        raise


def _carry_out(started: StartedJob, signum: int, ctx: Any) -> Interrupted:
    """What a stop signal asks of an attached run: cancel the job on the embedded cluster
    (which the caller then stops); leave it running on a cluster that outlives us, unless
    execution.shutdown-on-attached-exit says to cancel it there too."""
    word = Interrupted(signum).message
    job_id = started.job_id
    cancel = started.embedded or str((ctx.config or {}).get("execution.shutdown-on-attached-exit", "false")).lower() == "true"
    if not cancel:
        return Interrupted(signum, f"{word}: job {job_id} keeps running on the cluster at {started.rest.address} "
                                   f"(cancel it with 'flinkpy cancel {job_id}')")
    try:
        started.rest.cancel_job(job_id)
        started.rest.wait_for_job(job_id, 10)
    except FlinkpyError as e:
        where = "embedded cluster stopped" if started.embedded else f"check it with 'flinkpy list' ({e.message})"
        return Interrupted(signum, f"{word}: cancelling job {job_id} failed; {where}")
    if started.embedded:
        return Interrupted(signum, f"{word}: job {job_id} cancelled, embedded cluster stopped")
    return Interrupted(signum, f"{word}: job {job_id} cancelled")


def _detached_submission(rest: Any, job_id: str, name: str) -> SubmittedJob:
    """A job submitted without waiting for it: its state right after submission (CREATED while
    it waits for slots; FAILED, with the cause, when the cluster could not schedule it)."""
    try:
        state = rest.job(job_id).get("state", "RUNNING")
        if state != "FAILED":
            return SubmittedJob(job_id, name, state)
        result = rest.wait_for_job(job_id, 10)
    except Exception:  # noqa: BLE001 - the submission stands; the state is a courtesy
        return SubmittedJob(job_id, name, "RUNNING")
    return SubmittedJob(job_id, name, "FAILED", result.get("net-runtime"), False, result.get("failure-cause"))


def _wait(ctx: Any, rest: Any, job_id: str, name: str, *, embedded: bool) -> JobExecutionResult:
    stop_watching = None
    if ctx.on_event is not None:
        from flinkpy.client.job_events import watch_job

        stop_watching = watch_job(rest, job_id, ctx.on_event, embedded=embedded)
    try:
        result = rest.wait_for_job(job_id, None)
    finally:
        if stop_watching is not None:
            stop_watching()
    state = {"SUCCEEDED": "FINISHED", "FAILED": "FAILED", "CANCELED": "CANCELED"}.get(result.get("application-status", ""), "FAILED")
    ctx.submitted.append(SubmittedJob(job_id, name, state, result.get("net-runtime"), embedded, result.get("failure-cause")))
    if state == "FAILED" and embedded:
        cause = result.get("failure-cause") or {}
        if cause.get("stack-trace"):
            # the cluster goes with this process: its exceptions cannot be asked for later
            trace = cause["stack-trace"] if ctx.debug else user_first(cause["stack-trace"])
            print(f"Job {job_id} failed in {cause.get('task')}:\n{trace}", file=sys.stderr, end="", flush=True)
    return result_or_raise(job_id, name, result)


def _token_for(address: str) -> str | None:
    """The token of the cluster in FLINKPY_HOME (the usual case: CLI and cluster on one host)."""
    from flinkpy.cluster import ClusterHome

    try:
        return ClusterHome.resolve().token()
    except LookupError:
        return None
