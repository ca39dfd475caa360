"""The JobManager's REST API: JSON over HTTP, the CLI's only door into a cluster.

Every request carries the cluster's token (``Authorization: Bearer ...``): submitting a job means
running its code, and reading logs means reading its output. Paths and JSON field names follow
Flink's REST API where Flink has one.

    GET   /overview                       cluster overview
    GET   /taskmanagers                   registered TaskManagers
    GET   /taskmanagers/<id>/log|stdout   a TaskManager's log or printed output (?lines=N&follow=true)
    GET   /jobmanager/log                 the JobManager's log (?lines=N&follow=true), streamed
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
    GET   /metrics, .../metrics           live metrics (Prometheus; Flink's shapes): metrics_view
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from flinkpy import __version__, logfiles
from flinkpy.clock import now_ms
from flinkpy.errors import (ClusterUnreachableError, ConfigurationError, ConflictError, FlinkpyError, InvalidProgramError, NotFoundError,
                            OperationTimeoutError, storage_credentials_error)
from flinkpy.jobmanager import metrics_view
from flinkpy.jobmanager.dispatcher import Dispatcher
from flinkpy.jobmanager.rest_params import load_json, query_number
from flinkpy.network.http_limits import HttpLimits, LimitedHTTPServer, LimitedRequestHandler
from flinkpy.processes import running

log = logging.getLogger("flinkpy.rest")


class RestServer:
    def __init__(self, dispatcher: Dispatcher, token: str, host: str, port: int, jobmanager_log: str = "", limits: HttpLimits | None = None):
        self.dispatcher = dispatcher
        self.token = token
        self.jobmanager_log = jobmanager_log
        self.limits = limits or HttpLimits()
        server = self

        class Handler(LimitedRequestHandler):
            # per recv and send; the watchdog bounds a whole request's arrival
            timeout = self.limits.read_timeout_s

            def handle_one_request(self) -> None:
                server.httpd.watchdog.arm(self.connection)
                try:
                    super().handle_one_request()
                finally:
                    server.httpd.watchdog.disarm(self.connection)

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("%s %s", self.address_string(), fmt % args)

            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_POST(self) -> None:
                server._handle(self, "POST")

            def do_PATCH(self) -> None:
                server._handle(self, "PATCH")

            def do_DELETE(self) -> None:
                server._handle(self, "DELETE")

            def do_PUT(self) -> None:
                server._handle(self, "PUT")

        self.httpd = LimitedHTTPServer((host, port), Handler, self.limits)
        self.address = self.httpd.server_address

    def serve_in_background(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, name="rest", daemon=True).start()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- routing -----------------------------------------------------------------------------

    def _routes(self) -> list[tuple[str, str, Callable[..., Any]]]:
        return [
            ("GET", r"/overview", self.overview),
            ("GET", r"/config", self.config),
            ("GET", r"/taskmanagers", self.taskmanagers),
            ("GET", r"/taskmanagers/(?P<tm>[^/]+)/(?P<kind>log|stdout)", self.tm_log),
            ("GET", r"/jobmanager/log", self.jm_log),
            ("GET", r"/jobs/overview", self.jobs_overview),
            ("GET", r"/jobs", self.jobs_overview),
            ("POST", r"/jobs", self.submit),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})", self.job),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/plan", self.plan),
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
            ("POST", r"/jobs/(?P<jid>[0-9a-f]{32})/stop", self.stop_job),
            ("PUT", r"/jobs/(?P<jid>[0-9a-f]{32})/restart-strategy", self.put_restart_strategy),
            ("POST", r"/jobs/(?P<jid>[0-9a-f]{32})/faults", self.inject_fault),
            ("GET", r"/jobs/(?P<jid>[0-9a-f]{32})/faults", self.fault_history),
            ("POST", r"/cluster/faults", self.inject_fault),
            ("GET", r"/cluster/faults", self.fault_history),
            *metrics_view.routes(self.dispatcher),
        ]

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        h.close_connection = True  # one request per connection: see flinkpy.network.http_limits
        try:
            # who asks comes first: an unauthenticated peer's body is never read
            auth = h.headers.get("Authorization", "")
            if not hmac.compare_digest(auth.encode(), f"Bearer {self.token}".encode()):
                self._send(h, 401, {"errors": ["missing or wrong cluster token"], "kind": "Authentication",
                                    "remedy": "use the token in the cluster's home (FLINKPY_HOME)"})
                return
            body = self._body(h)
            if body is None:
                return
            h.server.watchdog.disarm(h.connection)  # type: ignore[attr-defined]  # a long poll may follow
            path = url.path.rstrip("/") or "/"
            standby = self.dispatcher.standby_message()
            if standby is not None and path not in ("/config", "/jobmanager/log"):
                # a standby JobManager (HA) knows no jobs: send the client to the leader
                self._send(h, 503, {"errors": [standby], "kind": "Standby",
                                    "remedy": "the CLI finds the leader through ZooKeeper; retry in a moment"})
                return
            for m, pattern, fn in self._routes():
                match = re.fullmatch(pattern, path)
                if match and m == method:
                    result = fn(query=query, body=body, **match.groupdict())
                    if isinstance(result, tuple):
                        status, payload = result
                    else:
                        status, payload = 200, result
                    self._send(h, status, payload)
                    return
            if any(re.fullmatch(p, path) for _, p, _ in self._routes()):
                self._send(h, 405, {"errors": [f"{method} is not allowed on {path}"], "kind": "MethodNotAllowed"})
            elif re.fullmatch(r"/jobs/[^/]+(/.*)?", path):
                self._send(h, 404, {"errors": [f"job {path.split('/')[2]} not found"], "kind": "NotFound",
                                    "remedy": "list jobs with 'flinkpy list -a'"})
            else:
                self._send(h, 404, {"errors": [f"no such endpoint: {path}"], "kind": "NotFound"})
        except FlinkpyError as e:
            status = (404 if isinstance(e, NotFoundError) else 409 if isinstance(e, ConflictError)
                      else 422 if isinstance(e, ConfigurationError) else 503 if isinstance(e, ClusterUnreachableError)
                      else 504 if isinstance(e, OperationTimeoutError) else 400)
            self._send(h, status, {"errors": [e.message], "remedy": e.remedy, "kind": type(e).__name__})
        except Exception as e:  # noqa: BLE001
            missing_credentials = storage_credentials_error(e)
            if missing_credentials is not None:
                self._send(h, 422, {"errors": [missing_credentials.message], "remedy": missing_credentials.remedy, "kind": "ConfigurationError"})
                return
            log.exception("REST %s %s failed", method, h.path)
            self._send(h, 500, {"errors": [f"internal error: {e}"], "kind": "Internal"})

    def _body(self, h: BaseHTTPRequestHandler) -> bytes | None:
        """The request's body; None when it was refused (answered and the connection closed)."""
        limit = self.limits.max_content_length
        if h.headers.get("Transfer-Encoding"):
            self._send(h, 411, {"errors": ["chunked request bodies are not accepted"], "kind": "LengthRequired",
                                "remedy": "send the body with a Content-Length"})
            return None
        try:
            length = int(h.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._send(h, 400, {"errors": [f"invalid Content-Length {h.headers.get('Content-Length')!r}"], "kind": "BadRequest"})
            return None
        if length > limit:
            self._send(h, 413, {"errors": [f"the request body of {length} bytes is larger than the REST server accepts ({limit} bytes)"],
                                "kind": "RequestEntityTooLarge",
                                "remedy": "raise rest.server.max-content-length in the JobManager's flinkpy.yaml if the request is legitimate"})
            return None
        try:
            body = h.rfile.read(length) if length else b""
        except OSError:  # the read timeout, or the watchdog closed a request that came too slowly
            body = b""
        if len(body) < length:
            return None
        return body

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        if isinstance(payload, LogStream):
            payload.send(h)
            return
        if isinstance(payload, str):
            data, ctype = payload.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json"
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(data)))
            if h.close_connection:
                h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(data)
        except OSError:  # the client went away, or stopped reading past the timeout
            h.close_connection = True

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

    def config(self, **_: Any) -> dict[str, Any]:
        # the body limit: a client checks a job's submission (with its Python files) against it
        return {"flinkpy-version": __version__, "timezone-name": "UTC", "rest-server-max-content-length": self.limits.max_content_length}

    def taskmanagers(self, **_: Any) -> dict[str, Any]:
        import time

        d = self.dispatcher
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
                        }
                        for vid, v in g.vertices.items()
                    ],
                    "plan": _plan(g),
                    "failover-strategy": g.failover,
                    "restart-strategy": g.strategy.describe() if g.strategy is not None else {"type": "none"},
                    "events": list(g.events),
                    "metrics": metrics_view.job_figures(d.job(jid), now_ms()),
                }
            )
            return summary

    def plan(self, jid: str, **_: Any) -> dict[str, Any]:
        with self.dispatcher.lock:
            return {"plan": _plan(self.dispatcher.job(jid).graph)}

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
        raise NotFoundError(f"checkpoint {cid} of job {jid} is not known", remedy="see 'flinkpy checkpoint list JOB_ID'")

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

    @staticmethod
    def _json(body: bytes) -> dict[str, Any]:
        doc = load_json(body or b"{}", "the request body")
        if not isinstance(doc, dict):
            raise InvalidProgramError("the request body must be a JSON object")
        return doc

    def trigger_savepoint(self, jid: str, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        doc = self._json(body)
        tid = self.dispatcher.checkpoints.trigger_savepoint(
            jid, doc.get("target-directory"), stop=bool(doc.get("cancel-job")), fmt=str(doc.get("formatType") or "canonical")
        )
        return 202, {"request-id": tid}

    def stop_job(self, jid: str, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        doc = self._json(body)
        tid = self.dispatcher.checkpoints.trigger_savepoint(
            jid, doc.get("targetDirectory"), stop=True, drain=bool(doc.get("drain")), fmt=str(doc.get("formatType") or "canonical")
        )
        return 202, {"request-id": tid}

    def savepoint_status(self, jid: str, tid: str, **_: Any) -> dict[str, Any]:
        return self.dispatcher.checkpoints.savepoint_status(jid, tid)

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
        doc = self._json(body)
        kind = str(doc.pop("kind", ""))
        return 202, self.dispatcher.faults.inject(jid, kind, doc)

    def fault_history(self, jid: str | None = None, **_: Any) -> dict[str, Any]:
        return {"jid": jid, "faults": self.dispatcher.faults.history(jid)}

    def patch_job(self, jid: str, query: dict[str, str], **_: Any) -> tuple[int, dict[str, Any]]:
        mode = query.get("mode", "cancel")
        if mode != "cancel":
            raise InvalidProgramError(f"unsupported mode {mode!r}", remedy="use mode=cancel")
        self.dispatcher.cancel(jid)
        return 202, {}


class LogStream:
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
