"""The JobManager's REST API: JSON over HTTP, the CLI's only door into a cluster.

Every request carries the cluster's token (``Authorization: Bearer ...``): submitting a job means
running its code, and reading logs means reading its output. Paths and JSON field names follow
Flink's REST API where Flink has one.

    GET   /overview                       cluster overview
    GET   /taskmanagers                   registered TaskManagers
    GET   /taskmanagers/<id>/log|stdout   a TaskManager's log or printed output (?lines=N&follow=true)
    GET   /jobmanager/log                 the JobManager's log (?lines=N&follow=true), streamed
    GET   /taskmanagers/<id>/logs         a TaskManager's files (.log, .out, rotated ones) and sizes
    GET   /jobmanager/logs                the JobManager's files and sizes
    GET   /jobs/overview                  all jobs
    POST  /jobs                           submit (JSON: meta + payloads) -> {"jobid"}
    GET   /jobs/<id>                      job details with vertices
    GET   /jobs/<id>/plan                 the job's plan
    GET   /jobs/<id>/exceptions           root exception and history
    GET   /jobs/<id>/execution-result     long poll (?timeout=seconds) until the job is terminal
    PATCH /jobs/<id>?mode=cancel          cancel
    POST  /jobs/<id>/faults               inject a fault into a job's task ({"kind", ...}; flinkpy.faults)
    GET   /jobs/<id>/faults               the job's fault journal
    POST  /cluster/faults                 inject a fault into a TaskManager or the checkpoint storage
    GET   /cluster/faults                 the cluster's fault journal
    GET   /jobs/<id>/savepoints/schedule  the job's periodic savepoints and savepoint history
    PUT   /jobs/<id>/savepoints/schedule  set them ({"interval": ms or null, "max-count", "max-age": ms})
    GET   /metrics, .../metrics           live metrics (Prometheus; Flink's shapes): metrics_view
"""

from __future__ import annotations

import base64
import json
import ssl
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

from flinkpy import __version__, logfiles
from flinkpy.clock import now_ms
from flinkpy.errors import ConflictError, InvalidProgramError, NotFoundError
from flinkpy.jobmanager import metrics_view
from flinkpy.jobmanager.dispatcher import Dispatcher
from flinkpy.network.http_limits import HttpLimits
from flinkpy.network.rest_server import RestEndpoint, Route, StreamedAnswer
from flinkpy.network.rest_params import load_json, query_number
from flinkpy.processes import running


class RestServer(RestEndpoint):
    """The JobManager's endpoint: the routes below over its :class:`Dispatcher`."""

    def __init__(self, dispatcher: Dispatcher, token: str, host: str, port: int, jobmanager_log: str = "", limits: HttpLimits | None = None,
                 tls: ssl.SSLContext | None = None):
        self.dispatcher = dispatcher
        self.jobmanager_log = jobmanager_log
        super().__init__(token, host, port, limits, tls)

    def standby_message(self) -> str | None:
        return self.dispatcher.standby_message()

    def routes(self) -> list[Route]:
        return [
            ("GET", r"/overview", self.overview),
            ("GET", r"/config", self.config),
            ("GET", r"/taskmanagers", self.taskmanagers),
            ("GET", r"/taskmanagers/(?P<tm>[^/]+)/(?P<kind>log|stdout)", self.tm_log),
            ("GET", r"/jobmanager/log", self.jm_log),
            ("GET", r"/taskmanagers/(?P<tm>[^/]+)/logs", self.tm_log_files),
            ("GET", r"/jobmanager/logs", self.jm_log_files),
            ("GET", r"/jobs/overview", self.jobs_overview),
            ("GET", r"/jobs", self.jobs_overview),
            ("POST", r"/jobs", self.submit),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})", self.job),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/plan", self.plan),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/submission", self.submission),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/resource-requirements", self.resource_requirements),
            ("PUT", r"/jobs/(?P<jid>[0-9a-f]{32})/resource-requirements", self.rescale),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/exceptions", self.exceptions),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/execution-result", self.execution_result),
            ("PATCH", r"/jobs/(?P<jid>[0-9a-f]{32})", self.patch_job),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/checkpoints", self.checkpoints),
            ("POST", r"/jobs/(?P<jid>[0-9a-f]{32})/checkpoints", self.trigger_checkpoint),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/checkpoints/details/(?P<cid>[0-9]+)", self.checkpoint_details),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/checkpoints/config", self.checkpoint_config),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/restart-strategy", self.get_restart_strategy),
            ("POST", r"/jobs/(?P<jid>[0-9a-f]{32})/savepoints", self.trigger_savepoint),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/savepoints/(?P<tid>[0-9a-f]{32})", self.savepoint_status),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/savepoints/schedule", self.savepoint_schedule),
            ("PUT", r"/jobs/(?P<jid>[0-9a-f]{32})/savepoints/schedule", self.set_savepoint_schedule),
            ("POST", r"/jobs/(?P<jid>[0-9a-f]{32})/stop", self.stop_job),
            ("PUT", r"/jobs/(?P<jid>[0-9a-f]{32})/restart-strategy", self.put_restart_strategy),
            ("POST", r"/jobs/(?P<jid>[0-9a-f]{32})/faults", self.inject_fault),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/faults", self.fault_history),
            ("POST", r"/cluster/faults", self.inject_fault),
            ("GET", r"/cluster/faults", self.fault_history),
            *metrics_view.routes(self.dispatcher),
        ]

    # -- handlers ----------------------------------------------------------------------------

    def overview(self, **_: Any) -> dict[str, Any]:
        d = self.dispatcher
        with d.lock:
            states = [j.graph.state for j in d.jobs.values()]
            return {
                "flinkpy-version": __version__,
                "taskmanagers": len(d.taskmanagers),
                "slots-total": d.slots.total,
                "slots-available": d.slots.available,
                "jobs-running": sum(s not in ("FINISHED", "FAILED", "CANCELED") for s in states),
                "jobs-finished": states.count("FINISHED"),
                "jobs-cancelled": states.count("CANCELED"),
                "jobs-failed": states.count("FAILED"),
                "jobs-lost": len(d.lost),
            }

    def taskmanagers(self, **_: Any) -> dict[str, Any]:
        import time

        d = self.dispatcher
        now = now_ms()
        with d.lock:
            return {
                "taskmanagers": [
                    {
                        "id": tm.tm_id,
                        "pid": tm.pid,
                        "host": tm.host,
                        "slotsNumber": tm.slots,
                        "freeSlots": d.slots.free(tm.tm_id),
                        "timeSinceLastHeartbeat": int((time.monotonic() - tm.last_heartbeat) * 1000),
                        **metrics_view.taskmanager_health(d, tm, now),
                        "logPath": tm.log_path,
                        "stdoutPath": tm.stdout_path,
                        "metrics": d.metrics.taskmanager(tm.tm_id),
                    }
                    for tm in d.taskmanagers.values()
                ]
            }

    def tm_log(self, query: dict[str, str], tm: str, kind: str, **_: Any) -> LogStream:
        d = self.dispatcher
        with d.lock:
            rec = d.taskmanagers.get(tm)
        if rec is None:
            raise NotFoundError(f"TaskManager {tm} is not registered", remedy="see 'flinkpy cluster status' for the ids")

        def alive() -> bool:  # a follower stops when the TaskManager is gone
            with d.lock:
                return d.taskmanagers.get(tm) is rec and running(rec.pid, 0)

        return LogStream(rec.stdout_path if kind == "stdout" else rec.log_path, query, alive)

    def jm_log(self, query: dict[str, str], **_: Any) -> LogStream:
        return LogStream(self.jobmanager_log, query, lambda: True)

    def tm_log_files(self, tm: str, **_: Any) -> dict[str, Any]:
        """Flink's ``{"logs": [{"name", "size", "mtime"}]}``: the TaskManager's .log and .out
        with their rotated files (and each one's path)."""
        with self.dispatcher.lock:
            rec = self.dispatcher.taskmanagers.get(tm)
        if rec is None:
            raise NotFoundError(f"TaskManager {tm} is not registered", remedy="see 'flinkpy cluster status' for the ids")
        return {"logs": [f for path in (rec.log_path, rec.stdout_path) if path for f in logfiles.files_of(path)]}

    def jm_log_files(self, **_: Any) -> dict[str, Any]:
        return {"logs": logfiles.files_of(self.jobmanager_log) if self.jobmanager_log else []}

    def jobs_overview(self, **_: Any) -> dict[str, Any]:
        d = self.dispatcher
        with d.lock:
            return {"jobs": [*(job.summary() for job in d.lost.values()), *(self._job_summary(jid, rec.graph) for jid, rec in d.jobs.items())]}

    @staticmethod
    def _job_summary(jid: str, g: Any) -> dict[str, Any]:
        start = g.timestamps.get("CREATED", 0)
        end = g.timestamps.get(g.state, -1) if g.is_terminal() else -1
        return {
            "jid": jid,
            "name": g.name,
            "state": g.state,
            "start-time": start,
            "end-time": end,
            "duration": (end if end > 0 else now_ms()) - start,
            "last-modification": max(g.timestamps.values()),
            "tasks": {k.lower(): v for k, v in g.task_counts().items()} | {"total": len(g.executions)},
            "restarts": g.restarts,
        }

    def submit(self, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        document = load_json(body, "the submitted job graph")
        jid = self.dispatcher.submit(document)
        return 202, {"jobid": jid}

    def job(self, jid: str, **_: Any) -> dict[str, Any]:
        d = self.dispatcher
        with d.lock:
            if jid in d.lost:
                return {**d.lost[jid].summary(), "vertices": [], "events": []}
            g = d.job(jid).graph
            summary = self._job_summary(jid, g)
            summary.update(
                {
                    "now": now_ms(),
                    "timestamps": dict(g.timestamps),
                    "vertices": [
                        {
                            "id": vid,
                            "name": v["name"],
                            "parallelism": v["parallelism"],
                            "maxParallelism": v["max_parallelism"],
                            "status": g.vertex_status(vid),
                            "tasks": g.task_counts(vid),
                            "metrics": metrics_view.vertex_summary(d, jid, g, vid),
                            "subtasks": metrics_view.subtask_rows(d, jid, g, vid),
                            # a Kafka source's offsets and lag per partition (empty for others)
                            "partitions": metrics_view.vertex_partitions(d, jid, g, vid),
                        }
                        for vid, v in g.vertices.items()
                    ],
                    "plan": _plan(g),
                    "failover-strategy": g.failover,
                    "restart-strategy": g.strategy.describe() if g.strategy is not None else {"type": "none"},
                    "events": list(g.events),
                    "rescales": list(g.rescales),
                    "savepoints": d.checkpoints.savepoints(jid),
                    "metrics": metrics_view.job_figures(d.job(jid), now_ms()),
                }
            )
            return summary

    def plan(self, jid: str, **_: Any) -> dict[str, Any]:
        with self.dispatcher.lock:
            return {"plan": _plan(self.dispatcher.job(jid).graph)}

    def resource_requirements(self, jid: str, **_: Any) -> dict[str, Any]:
        """Each vertex's parallelism, in the shape of Flink's adaptive scheduler endpoint."""
        with self.dispatcher.lock:
            g = self.dispatcher.job(jid).graph
            return {str(vid): {"parallelism": {"lowerBound": 1, "upperBound": v["parallelism"]}} for vid, v in g.vertices.items()}

    def rescale(self, jid: str, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        """Rescale in place: ``{"<vertex>": {"parallelism": {"upperBound": N}}}`` as Flink's
        adaptive scheduler takes it (a vertex by id, name or an operator's uid), and flinkpy's
        ``{"parallelism": N}`` for every vertex."""
        doc = self.json_body(body)
        try:
            parallelism = int(doc.pop("parallelism")) if "parallelism" in doc else None
            per_vertex = {str(k): int(v["parallelism"]["upperBound"]) for k, v in doc.items()}
        except (TypeError, KeyError, ValueError) as e:
            raise InvalidProgramError(f"malformed resource requirements: {e}",
                                      remedy='send {"<vertex>": {"parallelism": {"upperBound": N}}} or {"parallelism": N}') from None
        return 202, self.dispatcher.rescale(jid, parallelism=parallelism, per_vertex=per_vertex)

    def submission(self, jid: str, **_: Any) -> dict[str, Any]:
        """The job's submission document, its Python files inline: POSTed to /jobs again (with
        a "restore" point) it runs the same program; an upgrade keeps it to roll back to."""
        from flinkpy.jobmanager.artifacts import DOCUMENT_KEY

        d = self.dispatcher
        with d.lock:
            rec = d.job(jid)
            doc = dict(rec.submission)
            if rec.graph.is_terminal():
                raise ConflictError(f"job {jid} is {rec.graph.state}: its submission is no longer kept",
                                    remedy="ask for it while the job runs")
        spec = doc.get(DOCUMENT_KEY)
        if spec:
            try:
                data = d.artifacts.read(jid, str(spec["sha256"]))
            except (OSError, ValueError) as e:
                raise ConflictError(f"the Python files archive of job {jid} cannot be read: {e}",
                                    remedy="see the JobManager's log") from None
            doc[DOCUMENT_KEY] = {**spec, "data": base64.b64encode(data).decode("ascii")}
        return doc

    def exceptions(self, jid: str, **_: Any) -> dict[str, Any]:
        with self.dispatcher.lock:
            g = self.dispatcher.job(jid).graph
            root = g.root_exception
            return {
                "root-exception": root["stacktrace"] if root else None,
                "timestamp": root["timestamp"] if root else None,
                "exceptionHistory": {"entries": list(reversed(g.exceptions)), "truncated": False},
            }

    def execution_result(self, jid: str, query: dict[str, str], **_: Any) -> dict[str, Any]:
        timeout = query_number(query, "timeout", 0.0, high=60.0)
        g = self.dispatcher.wait_for_terminal(jid, timeout)
        with self.dispatcher.lock:
            if not g.is_terminal():
                return {"status": {"id": "IN_PROGRESS"}}
            status = {"FINISHED": "SUCCEEDED", "FAILED": "FAILED", "CANCELED": "CANCELED"}[g.state]
            result: dict[str, Any] = {
                "id": jid,
                "application-status": status,
                "net-runtime": g.timestamps[g.state] - g.timestamps.get("RUNNING", g.timestamps["CREATED"]),
                "accumulator-results": {},
            }
            if g.root_exception:
                result["failure-cause"] = {
                    "class": g.root_exception["exceptionName"],
                    "message": g.root_exception["message"],
                    "stack-trace": g.root_exception["stacktrace"],
                    "task": g.root_exception["taskName"],
                }
            return {"status": {"id": "COMPLETED"}, "job-execution-result": result}

    def checkpoints(self, jid: str, query: dict[str, str], **_: Any) -> dict[str, Any]:
        from flinkpy.jobmanager.checkpoint_stats import checkpoint_stats

        with self.dispatcher.lock:
            cp = _checkpointing(self, jid)
            return checkpoint_stats(cp.coordinator, now_ms(), history_size=query_number(query, "history", 10, integer=True))

    def checkpoint_details(self, jid: str, cid: str, **_: Any) -> dict[str, Any]:
        from flinkpy.jobmanager.checkpoint_stats import checkpoint_detail

        with self.dispatcher.lock:
            coord = _checkpointing(self, jid).coordinator
            for record in [*coord.pending.values(), *coord.history]:
                if record.checkpoint_id == int(cid):
                    return checkpoint_detail(record, now_ms())
        raise NotFoundError(f"checkpoint {cid} of job {jid} is not known", remedy=f"see 'flinkpy checkpoint list {jid}'")

    def checkpoint_config(self, jid: str, **_: Any) -> dict[str, Any]:
        with self.dispatcher.lock:
            cp = _checkpointing(self, jid)
            o = cp.options
            return {
                "mode": o.mode.lower(),
                "interval": o.interval_ms if o.interval_ms is not None else 0x7FFFFFFFFFFFFFFF,
                "timeout": o.timeout_ms,
                "min_pause": o.min_pause_ms,
                "max_concurrent": o.max_concurrent,
                "tolerable_failed_checkpoints": o.tolerable_failures,
                "num_retained": o.retained,
                "externalization": {"enabled": True, "delete_on_cancellation": not o.retain_on_cancellation},
                "checkpoint_storage": cp.checkpoint_dir,
            }

    def trigger_checkpoint(self, jid: str, query: dict[str, str], **_: Any) -> tuple[int, dict[str, Any]]:
        # ?timeout=S: a long poll that waits for a free checkpoint slot (a manual trigger queues)
        wait_s = query_number(query, "timeout", 0.0, high=3600.0)
        cid = self.dispatcher.checkpoints.trigger_checkpoint(jid, wait_s=wait_s)
        return 202, {"checkpoint_id": cid, "request-id": str(cid)}

    def trigger_savepoint(self, jid: str, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        doc = self.json_body(body)
        tid = self.dispatcher.checkpoints.trigger_savepoint(
            jid, doc.get("target-directory"), stop=bool(doc.get("cancel-job")), fmt=str(doc.get("formatType") or "canonical"),
            trigger=doc.get("trigger"),
        )
        return 202, {"request-id": tid}

    def stop_job(self, jid: str, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        doc = self.json_body(body)
        tid = self.dispatcher.checkpoints.trigger_savepoint(
            jid, doc.get("targetDirectory"), stop=True, drain=bool(doc.get("drain")), fmt=str(doc.get("formatType") or "canonical"),
            trigger=doc.get("trigger"),
        )
        return 202, {"request-id": tid}

    def savepoint_status(self, jid: str, tid: str, **_: Any) -> dict[str, Any]:
        return self.dispatcher.checkpoints.savepoint_status(jid, tid)

    def savepoint_schedule(self, jid: str, **_: Any) -> dict[str, Any]:
        return self.dispatcher.checkpoints.savepoints(jid)

    def set_savepoint_schedule(self, jid: str, body: bytes, **_: Any) -> dict[str, Any]:
        doc = self.json_body(body)

        def bound(key: str, low: int) -> int | None:
            value = doc.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidProgramError(f"{key}: {value!r} is not an integer >= {low}",
                                          remedy='send {"interval": MS or null, "max-count": N, "max-age": MS}')
            return value

        if "interval" not in doc:
            raise InvalidProgramError("no interval given", remedy='send {"interval": MS} (null: no periodic savepoints)')
        return self.dispatcher.checkpoints.schedule(jid, interval_ms=bound("interval", 0), max_count=bound("max-count", 1),
                                                    max_age_ms=bound("max-age", 1))

    def get_restart_strategy(self, jid: str, **_: Any) -> dict[str, Any]:
        return self.dispatcher.restarts.strategy(jid)

    def put_restart_strategy(self, jid: str, body: bytes, **_: Any) -> dict[str, Any]:
        doc = load_json(body or b"{}", "the request body")
        try:
            config = {str(k): str(v) for k, v in doc["config"].items()}
        except (TypeError, KeyError, AttributeError) as e:
            raise InvalidProgramError(f"the body must be JSON {{\"config\": {{key: value}}}}: {e}") from e
        return self.dispatcher.restarts.set_strategy(jid, config)

    def inject_fault(self, body: bytes, jid: str | None = None, **_: Any) -> tuple[int, dict[str, Any]]:
        doc = self.json_body(body)
        kind = str(doc.pop("kind", ""))
        return 202, self.dispatcher.faults.inject(jid, kind, doc)

    def fault_history(self, jid: str | None = None, **_: Any) -> dict[str, Any]:
        return {"jid": jid, "faults": self.dispatcher.faults.history(jid)}

    def patch_job(self, jid: str, query: dict[str, str], **_: Any) -> tuple[int, dict[str, Any]]:
        mode = query.get("mode", "cancel")
        if mode != "cancel":
            raise InvalidProgramError(f"unsupported mode {mode!r}", remedy="use mode=cancel")
        retain = query.get("retain-latest-checkpoint", "false").lower()
        if retain not in ("true", "false"):
            raise InvalidProgramError(f"retain-latest-checkpoint={retain!r} is not true or false", remedy="use true or false")
        self.dispatcher.cancel(jid, retain_latest_checkpoint=retain == "true")
        return 202, {}


class LogStream(StreamedAnswer):
    """A log route's answer: the file's last ``lines`` lines, then with ``follow=true`` what is
    appended, streamed in chunks (HTTP chunked encoding) straight from the file: the
    JobManager holds one chunk of it at a time, never the file."""

    def __init__(self, path: str, query: dict[str, str], alive: Callable[[], bool]) -> None:
        self.lines = query_number(query, "lines", 100, integer=True)
        self.path, self.alive = path, alive
        self.follow = query.get("follow", "false").lower() in ("1", "true", "yes")

    def send(self, h: BaseHTTPRequestHandler) -> None:
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/plain; charset=utf-8")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            first = logfiles.tail(self.path, self.lines) if self.path else b""
            chunks = _chain(first, logfiles.follow(self.path, alive=self.alive, peer=h.connection)) if self.follow and self.path else (first,)
            for chunk in chunks:
                if chunk:
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            h.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away (Ctrl-C on a follower)
            h.close_connection = True


def _chain(first: bytes, rest: Any) -> Any:
    yield first
    yield from rest


def _checkpointing(server: RestServer, jid: str) -> Any:
    return server.dispatcher.job(jid).checkpointing


def _plan(g: Any) -> dict[str, Any]:
    return {
        "jid": g.job_id,
        "name": g.name,
        "nodes": [
            {
                "id": vid,
                "description": v["name"],
                "parallelism": v["parallelism"],
                "inputs": [
                    {"id": e["source"], "ship_strategy": e["partitioner"], "exchange": "pipelined_bounded"}
                    for e in g.edges
                    if e["target"] == vid
                ],
            }
            for vid, v in g.vertices.items()
        ],
    }
