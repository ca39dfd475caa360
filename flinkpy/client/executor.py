"""Executes a JobGraph: submit it to a cluster, or run it on an embedded one, and wait."""

from __future__ import annotations

import json
import sys
from typing import Any

from flinkpy.client.context import PlanCaptured, SubmittedJob, current_context
from flinkpy.client.job_client import JobClient, JobExecutionResult
from flinkpy.errors import JobCanceledError, JobExecutionError, UsageError
from flinkpy.graph.job_graph import JobGraph


def _document(job: JobGraph, python_path: list[str]) -> bytes:
    doc = job.serialize()
    doc["python_path"] = python_path
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


def execute_job_graph(job: JobGraph, *, detached: bool) -> Any:
    ctx = current_context()
    if ctx.mode == "plan":
        raise PlanCaptured(job.plan())
    payload = _document(job, ctx.python_path or [p for p in sys.path[:1] if p])
    detached = detached or ctx.detached
    if ctx.address:
        from flinkpy.client.rest import RestClient

        rest = RestClient(ctx.address, ctx.token or _token_for(ctx.address))
        job_id = rest.submit_job(payload)
        if ctx.on_submit:
            ctx.on_submit(job_id, job.job_name)
        if detached:
            ctx.submitted.append(SubmittedJob(job_id, job.job_name, "RUNNING"))
            return JobClient(rest, job_id, job.job_name)
        return _wait(ctx, rest, job_id, job.job_name, embedded=False)
    if detached:
        raise UsageError(
            "detached execution needs a running cluster, but none is configured",
            remedy="start one with 'flinkpy cluster start' (or pass -m HOST:PORT), or run attached",
        )
    from flinkpy.client.rest import RestClient
    from flinkpy.cluster import EmbeddedCluster

    slots = max(v.parallelism for v in job.vertices.values())
    if ctx.announce:
        print(f"flinkpy: no cluster is running; starting an embedded local cluster ({slots} slot(s)) for this job", file=sys.stderr, flush=True)
    with EmbeddedCluster(slots=slots, job_stdout=ctx.job_stdout) as cluster:
        rest = RestClient(cluster.rest_address, cluster.token())
        job_id = rest.submit_job(payload)
        if ctx.on_submit:
            ctx.on_submit(job_id, job.job_name)
        try:
            return _wait(ctx, rest, job_id, job.job_name, embedded=True)
        finally:
            if ctx.announce:
                print("flinkpy: stopping the embedded local cluster", file=sys.stderr, flush=True)


def _wait(ctx: Any, rest: Any, job_id: str, name: str, *, embedded: bool) -> JobExecutionResult:
    try:
        result = rest.wait_for_job(job_id, None)
    except KeyboardInterrupt:
        try:
            rest.cancel_job(job_id)
        finally:
            raise
    state = {"SUCCEEDED": "FINISHED", "FAILED": "FAILED", "CANCELED": "CANCELED"}.get(result.get("application-status", ""), "FAILED")
    ctx.submitted.append(SubmittedJob(job_id, name, state, result.get("net-runtime"), embedded, result.get("failure-cause")))
    if state == "FAILED" and embedded:
        cause = result.get("failure-cause") or {}
        if cause.get("stack-trace"):
            print(f"Job {job_id} failed in {cause.get('task')}:\n{cause['stack-trace']}", file=sys.stderr, end="", flush=True)
    return result_or_raise(job_id, name, result)


def _token_for(address: str) -> str | None:
    """The token of the cluster in FLINKPY_HOME (the usual case: CLI and cluster on one host)."""
    from flinkpy.cluster import ClusterHome

    try:
        return ClusterHome.resolve().token()
    except LookupError:
        return None
