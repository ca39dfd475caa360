"""The REST client: the CLI's only door into a running JobManager.

Plain ``urllib`` keeps the client dependency-free and importable in any process. Every HTTP
failure is translated into flinkpy's exception hierarchy here, once, so that callers (and the
CLI's exit codes) never see a socket error or a status number.

>>> RestClient("127.0.0.1:8081", token=None).address
'http://127.0.0.1:8081'
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Iterator, Mapping

from flinkpy.errors import (
    AuthenticationError,
    ClusterUnreachableError,
    ConfigurationError,
    ConflictError,
    FlinkpyError,
    NotFoundError,
    OperationTimeoutError,
    UsageError,
)
from flinkpy.network.tls import rest_client_context

#: a JSON object as the REST API sends it: Flink's field names, values as JSON decodes them
JsonObject = dict[str, Any]
#: a value of a request's parameter (a fault's, a query's)
JsonScalar = str | int | float | bool | None

_STATUS_ERRORS: dict[int, type[FlinkpyError]] = {
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    # a body over rest.server.max-content-length (a job submission with large Python files)
    413: ConfigurationError,
    422: ConfigurationError,
    # a standby JobManager, or a new leader still recovering the job (high availability)
    503: ClusterUnreachableError,
    # the JobManager waited as long as the request asked (a long poll that ran out)
    504: OperationTimeoutError,
}

_DEFAULT_REMEDIES: dict[type[FlinkpyError], str] = {
    AuthenticationError: "use the token in the cluster's home (FLINKPY_HOME) that started the cluster",
    NotFoundError: "list jobs with 'flinkpy list -a'",
    ConflictError: "check the job's state with 'flinkpy job show JOB_ID'",
}


def normalize_address(address: str) -> str:
    """Accept ``HOST:PORT`` (Flink's -m syntax) as well as a full ``http://`` URL."""
    address = address.strip().rstrip("/")
    if "://" not in address:
        address = "http://" + address
    return address


class RestClient:
    """Typed calls to one JobManager's REST API, authenticated with the cluster's token."""

    def __init__(self, address: str, token: str | None, timeout_s: float = 10, *, leader: Callable[[], str | None] | None = None, failover_wait_s: float = 60.0,
                 tls: ssl.SSLContext | None = None) -> None:
        self.address = normalize_address(address)
        self.token = token
        self.timeout_s = timeout_s
        #: high availability: looks up the current leader's REST address (in ZooKeeper). When
        #: the JobManager stops answering, or answers that it is a standby or still recovering
        #: the job, the client follows the leader for up to ``failover_wait_s``.
        self.leader = leader
        self.failover_wait_s = failover_wait_s
        # No proxies: HTTP(S)_PROXY from the environment would route the cluster's token
        # (and loopback traffic) through a third party.
        # HTTPS (a JobManager with security.ssl.rest.enabled publishes an https:// address): the
        # given context, else one from the security.ssl.rest.* keys of the environment
        if tls is None and self.address.startswith("https://"):
            tls = default_rest_context()
        self.tls = tls
        handlers: list[Any] = [urllib.request.ProxyHandler({})]
        if tls is not None:
            handlers.append(urllib.request.HTTPSHandler(context=tls))
        self._opener = urllib.request.build_opener(*handlers)

    # ------------------------------------------------------------------ generic request

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, JsonScalar] | None = None,
        body: bytes | JsonObject | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request; returns parsed JSON, or text for ``text/plain`` answers."""
        kw = {"params": params, "body": body, "timeout": timeout}
        if self.leader is None:
            return self._request_once(method, path, **kw)
        deadline = time.monotonic() + self.failover_wait_s
        while True:
            try:
                return self._request_once(method, path, **kw)
            except ClusterUnreachableError:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(0.05)
            found = self.leader()  # raises when ZooKeeper itself is down: nothing to wait for
            if found:
                self.address = normalize_address(found)

    def _request_once(self, method: str, path: str, *, params: Mapping[str, JsonScalar] | None, body: bytes | JsonObject | None, timeout: float | None) -> Any:
        url = self.address + path
        if params:
            url += "?" + urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        headers = {"Accept": "application/json"}
        data: bytes | None = None
        if isinstance(body, dict):
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif body is not None:
            data = body
            headers["Content-Type"] = "application/octet-stream"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, method=method.upper(), headers=headers)
        try:
            with self._opener.open(req, timeout=timeout or self.timeout_s) as resp:
                return _decode(resp.read(), resp.headers.get_content_type())
        except urllib.error.HTTPError as exc:
            raise self._http_error(method, path, exc) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLError):
                raise self._tls_failed(exc.reason) from None
            raise self._unreachable(exc.reason) from None
        except (TimeoutError, socket.timeout, ConnectionError) as exc:
            raise self._unreachable(exc) from None

    def _tls_failed(self, reason: ssl.SSLError) -> ConfigurationError:
        """No retry mends a certificate: a configuration error, not an unreachable cluster."""
        if isinstance(reason, ssl.SSLCertVerificationError):
            what, remedy = (f"presented a certificate this client does not trust ({reason.verify_message})",
                            "set security.ssl.rest.truststore to the PEM file of the CA that signed the JobManager's certificate")
        else:
            what, remedy = (f"and this client could not agree on TLS ({reason.reason or reason})",
                            "check security.ssl.rest.* here and on the JobManager (https:// needs security.ssl.rest.enabled there)")
        return ConfigurationError(f"the JobManager at {self.address} {what}", remedy=remedy)

    def _unreachable(self, reason: object) -> ClusterUnreachableError:
        if isinstance(reason, (TimeoutError, socket.timeout)):
            what = "did not answer in time"
        elif isinstance(reason, ConnectionRefusedError):
            what = "refused the connection"
        else:
            what = f"cannot be reached ({reason})"
        return ClusterUnreachableError(
            f"the JobManager at {self.address} {what}",
            remedy="check that the cluster is running with 'flinkpy cluster status', or pass the right -m HOST:PORT",
        )

    def _http_error(self, method: str, path: str, exc: urllib.error.HTTPError) -> FlinkpyError:
        raw = exc.read() if exc.fp is not None else b""
        message, remedy = f"{method.upper()} {path} failed with HTTP {exc.code}", None
        try:
            doc = json.loads(raw.decode() or "{}")
        except (ValueError, UnicodeDecodeError):
            doc = {}
        if isinstance(doc, dict):
            errors = doc.get("errors") or []
            if errors:
                message = "; ".join(str(e) for e in errors)
            remedy = doc.get("remedy")
        cls = _STATUS_ERRORS.get(exc.code, FlinkpyError)
        if exc.code == 400 and isinstance(doc, dict) and doc.get("kind") == "UsageError":
            cls = UsageError  # a request the server refused as asked wrongly (a rescale beyond max parallelism)
        return cls(message, remedy=remedy or _DEFAULT_REMEDIES.get(cls))

    # ------------------------------------------------------------------ cluster

    def overview(self) -> JsonObject:
        return self.request("GET", "/overview")

    def taskmanagers(self) -> list[JsonObject]:
        return self.request("GET", "/taskmanagers").get("taskmanagers", [])

    def log(self, component: str, stdout: bool = False, lines: int = 100) -> str:
        """The tail of the JobManager's (``component="jobmanager"``) or a TaskManager's log."""
        text = self.request("GET", _log_path(component, stdout), params={"lines": lines})
        return text if isinstance(text, str) else json.dumps(text)

    def log_files(self, component: str) -> list[JsonObject]:
        """The files of the JobManager (``component="jobmanager"``) or a TaskManager: its log
        and stdout with their rotated files, ``{"name", "size", "mtime", "path"}`` each."""
        where = "/jobmanager/logs" if component == "jobmanager" else f"/taskmanagers/{urllib.parse.quote(component, safe='')}/logs"
        return self.request("GET", where).get("logs", [])

    def stream_log(self, component: str, *, stdout: bool = False, lines: int = 100, follow: bool = False) -> Iterator[bytes]:
        """The tail of a log as the server streams it, chunk by chunk; with ``follow``, then what
        is appended, until the process ends or the caller stops iterating (the connection closes)."""
        url = self.address + _log_path(component, stdout) + "?" + urllib.parse.urlencode({"lines": lines, "follow": str(follow).lower()})
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        req = urllib.request.Request(url, method="GET", headers=headers)
        try:
            # a follower may wait long for the next line: no read timeout then
            resp = self._opener.open(req, timeout=None if follow else self.timeout_s)
        except urllib.error.HTTPError as exc:
            raise self._http_error("GET", _log_path(component, stdout), exc) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLError):
                raise self._tls_failed(exc.reason) from None
            raise self._unreachable(exc.reason) from None
        except (TimeoutError, socket.timeout, ConnectionError) as exc:
            raise self._unreachable(exc) from None
        with resp:
            while True:
                try:
                    chunk = resp.read1(65536)
                except (http.client.IncompleteRead, ConnectionError):
                    return  # the JobManager went away mid-stream: the log ends there
                if not chunk:
                    return
                yield chunk

    # ------------------------------------------------------------------ jobs

    def jobs_overview(self) -> list[JsonObject]:
        return self.request("GET", "/jobs/overview").get("jobs", [])

    def job(self, jid: str) -> JsonObject:
        return self.request("GET", f"/jobs/{_quote(jid)}")

    def job_exceptions(self, jid: str) -> JsonObject:
        return self.request("GET", f"/jobs/{_quote(jid)}/exceptions")

    def execution_result(self, jid: str, timeout_s: float) -> JsonObject:
        """One long poll: the server answers when the job ends or after ``timeout_s``."""
        return self.request(
            "GET",
            f"/jobs/{_quote(jid)}/execution-result",
            params={"timeout": timeout_s},
            timeout=timeout_s + self.timeout_s,
        )

    def wait_for_job(self, jid: str, timeout_s: float | None = None, *, poll_s: float = 30) -> JsonObject:
        """Block until the job is globally terminal; returns its ``job-execution-result``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic()))
            doc = self.execution_result(jid, wait)
            if doc.get("status", {}).get("id") == "COMPLETED":
                return doc.get("job-execution-result", {})
            if deadline is not None and time.monotonic() >= deadline:
                raise OperationTimeoutError(
                    f"job {jid} did not finish within {timeout_s:g} s",
                    remedy="wait longer, or check it with 'flinkpy job show'",
                )

    def cancel_job(self, jid: str, *, retain_latest_checkpoint: bool = False) -> None:
        params: dict[str, JsonScalar] = {"mode": "cancel"}
        if retain_latest_checkpoint:
            params["retain-latest-checkpoint"] = "true"
        self.request("PATCH", f"/jobs/{_quote(jid)}", params=params)

    def rescale(self, jid: str, *, parallelism: int | None = None, per_vertex: Mapping[str, int] | None = None) -> JsonObject:
        """Restart the job in place at a new parallelism from its latest checkpoint."""
        body: dict[str, Any] = {k: {"parallelism": {"lowerBound": 1, "upperBound": n}} for k, n in (per_vertex or {}).items()}
        if parallelism is not None:
            body["parallelism"] = parallelism
        return self.request("PUT", f"/jobs/{_quote(jid)}/resource-requirements", body=body)

    def job_submission(self, jid: str) -> JsonObject:
        """The running job's submission document, its Python files inline (to submit it again)."""
        return self.request("GET", f"/jobs/{_quote(jid)}/submission")

    def submit_document(self, document: JsonObject) -> str:
        """Submit a job graph document (one :meth:`job_submission` returned, say); its job id."""
        import json

        return self.submit_job(json.dumps(document).encode())

    def submit_job(self, payload: bytes) -> str:
        return self.request("POST", "/jobs", body=payload)["jobid"]

    # ------------------------------------------------------------------ checkpoints

    def checkpoints(self, jid: str, history: int | None = None) -> JsonObject:
        """Flink's checkpoint statistics: counts, the latest ones and the newest ``history``."""
        params = None if history is None else {"history": history}
        return self.request("GET", f"/jobs/{_quote(jid)}/checkpoints", params=params)

    def checkpoint_config(self, jid: str) -> JsonObject:
        return self.request("GET", f"/jobs/{_quote(jid)}/checkpoints/config")

    def checkpoint_details(self, jid: str, checkpoint_id: int) -> JsonObject:
        return self.request("GET", f"/jobs/{_quote(jid)}/checkpoints/details/{checkpoint_id}")

    def trigger_checkpoint(self, jid: str, wait_s: float = 0.0) -> int:
        """Ask for a checkpoint now; its id (follow it with :meth:`checkpoint_details`). With
        ``wait_s`` the request waits up to that long for its turn when as many checkpoints as
        allowed are in progress (else that is a ``ConflictError`` at once)."""
        params = {"timeout": wait_s} if wait_s > 0 else None
        doc = self.request("POST", f"/jobs/{_quote(jid)}/checkpoints", params=params, timeout=wait_s + self.timeout_s)
        return int(doc["checkpoint_id"])

    # ------------------------------------------------------------------ savepoints and stop

    def trigger_savepoint(self, jid: str, target_dir: str | None, *, format_type: str = "CANONICAL", trigger: str | None = None) -> str:
        """Ask for a savepoint; the request id of the asynchronous operation. ``trigger``
        (manual or upgrade) is what the job's savepoint history records."""
        body: JsonObject = {"target-directory": target_dir, "formatType": format_type, "cancel-job": False}
        if trigger:
            body["trigger"] = trigger
        return str(self.request("POST", f"/jobs/{_quote(jid)}/savepoints", body=body)["request-id"])

    def stop_with_savepoint(self, jid: str, target_dir: str | None, *, drain: bool = False, trigger: str | None = None) -> str:
        """Ask for a final savepoint after which the job finishes; the request id. ``trigger``:
        stop or upgrade."""
        body: JsonObject = {"targetDirectory": target_dir, "drain": drain}
        if trigger:
            body["trigger"] = trigger
        return str(self.request("POST", f"/jobs/{_quote(jid)}/stop", body=body)["request-id"])

    def savepoint_schedule(self, jid: str) -> JsonObject:
        """The job's periodic savepoints and savepoint history."""
        return self.request("GET", f"/jobs/{_quote(jid)}/savepoints/schedule")

    def set_savepoint_schedule(self, jid: str, interval_ms: int | None, *, max_count: int | None = None,
                               max_age_ms: int | None = None) -> JsonObject:
        """Take a savepoint of the job every ``interval_ms`` from now on (None: stop); the
        retention bounds left None stay as they were."""
        body = {"interval": interval_ms, "max-count": max_count, "max-age": max_age_ms}
        return self.request("PUT", f"/jobs/{_quote(jid)}/savepoints/schedule", body=body)

    def savepoint_status(self, jid: str, request_id: str) -> JsonObject:
        """The operation document of a savepoint or stop request: ``{"status": {"id"}, "operation"}``."""
        return self.request("GET", f"/jobs/{_quote(jid)}/savepoints/{_quote(request_id)}")

    # ------------------------------------------------------------------ restart strategies

    def restart_strategy(self, jid: str) -> JsonObject:
        return self.request("GET", f"/jobs/{_quote(jid)}/restart-strategy")

    def set_restart_strategy(self, jid: str, config: Mapping[str, str]) -> JsonObject:
        """Replace the job's restart strategy with the one ``config`` (restart-strategy.* keys) gives."""
        return self.request("PUT", f"/jobs/{_quote(jid)}/restart-strategy", body={"config": dict(config)})

    # ------------------------------------------------------------------ faults

    def inject_job_fault(self, jid: str, kind: str, **params: JsonScalar) -> JsonObject:
        """Inject a fault into one job's tasks (None parameters are left out); its journal entry."""
        body = {"kind": kind, **{k: v for k, v in params.items() if v is not None}}
        return self.request("POST", f"/jobs/{_quote(jid)}/faults", body=body)

    def inject_cluster_fault(self, kind: str, **params: JsonScalar) -> JsonObject:
        """Inject a fault into the cluster (TaskManagers, storage); its journal entry."""
        body = {"kind": kind, **{k: v for k, v in params.items() if v is not None}}
        return self.request("POST", "/cluster/faults", body=body)

    def fault_history(self, jid: str) -> JsonObject:
        """The job's fault journal: ``{"jid", "faults": [...]}``."""
        return self.request("GET", f"/jobs/{_quote(jid)}/faults")


def _log_path(component: str, stdout: bool) -> str:
    stream = "stdout" if stdout else "log"
    if component == "jobmanager":
        return f"/jobmanager/{stream}"
    return f"/taskmanagers/{urllib.parse.quote(component, safe='')}/{stream}"


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _decode(raw: bytes, content_type: str) -> Any:
    if content_type == "application/json" or (content_type != "text/plain" and raw[:1] in (b"{", b"[")):
        return json.loads(raw.decode() or "null") if raw else {}
    return raw.decode("utf-8", errors="replace")



def default_rest_context() -> ssl.SSLContext:
    """The HTTPS context of a client given none: from the ``security.ssl.rest.*`` keys of the
    cluster home's ``flinkpy.yaml`` and the environment (``FLINKPY_SECURITY_SSL_REST_TRUSTSTORE``)."""
    from flinkpy.config import default_home, load_config

    return rest_client_context(load_config(default_home()))
