"""A REST endpoint with no routes: the JSON-over-HTTP server every flinkpy control endpoint is.

What it does is the same for the JobManager (:mod:`flinkpy.jobmanager.rest`) and a Spark
driver's control endpoint (:mod:`flinkpy.spark.control`): check the cluster's bearer token
before a body is read, bound what a client may send (:mod:`flinkpy.network.http_limits`), find
the route for a method and path, and turn a handler's answer or exception into a status and a
JSON document (``{"errors", "remedy", "kind"}`` on failure). A subclass supplies the routes
(:meth:`RestEndpoint.routes`) and, where it can be a standby, :meth:`RestEndpoint.standby_message`.

A handler takes keyword arguments (``query``, ``body`` and the route's named groups) and returns
a JSON-able value (status 200), a ``(status, value)`` pair, a ``str`` (sent as text) or a
:class:`StreamedAnswer` that writes its own response.
"""

from __future__ import annotations

import abc
import hmac
import json
import logging
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from flinkpy import __version__
from flinkpy.errors import (ClusterUnreachableError, ConfigurationError, ConflictError, FlinkpyError, InvalidProgramError, NotFoundError,
                            OperationTimeoutError, storage_credentials_error)
from flinkpy.network.http_limits import HttpLimits, LimitedHTTPServer, LimitedRequestHandler
from flinkpy.network.rest_params import load_json

log = logging.getLogger("flinkpy.rest")

#: (method, path pattern, handler); the pattern's named groups become keyword arguments
Route = tuple[str, str, Callable[..., Any]]


class StreamedAnswer(abc.ABC):
    """An answer that writes its own response (a followed log, chunk by chunk)."""

    @abc.abstractmethod
    def send(self, h: BaseHTTPRequestHandler) -> None: ...


class RestEndpoint:
    """The server without routes; bind to port 0 for an ephemeral port (see ``address``)."""

    def __init__(self, token: str, host: str, port: int, limits: HttpLimits | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.token = token
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
                server.handle(self, "GET")

            def do_POST(self) -> None:
                server.handle(self, "POST")

            def do_PATCH(self) -> None:
                server.handle(self, "PATCH")

            def do_DELETE(self) -> None:
                server.handle(self, "DELETE")

            def do_PUT(self) -> None:
                server.handle(self, "PUT")

        self.httpd = LimitedHTTPServer((host, port), Handler, self.limits, tls)
        self.address = self.httpd.server_address

    def serve_in_background(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, name="rest", daemon=True).start()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- what a subclass supplies ----------------------------------------------------------------

    def routes(self) -> list[Route]:
        """The endpoint's routes; the base has none."""
        return []

    def standby_message(self) -> str | None:
        """Why this endpoint serves no jobs right now (an HA standby), or None when it does."""
        return None

    # -- shared handlers ---------------------------------------------------------------------------

    def config(self, **_: Any) -> dict[str, Any]:
        # the body limit: a client checks a job's submission (with its Python files) against it
        return {"flinkpy-version": __version__, "timezone-name": "UTC", "rest-server-max-content-length": self.limits.max_content_length}

    @staticmethod
    def json_body(body: bytes) -> dict[str, Any]:
        """A request body that must be a JSON object (an empty body is ``{}``)."""
        doc = load_json(body or b"{}", "the request body")
        if not isinstance(doc, dict):
            raise InvalidProgramError("the request body must be a JSON object")
        return doc

    # -- serving one request -----------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        h.close_connection = True  # one request per connection: see flinkpy.network.http_limits
        try:
            # who asks comes first: an unauthenticated peer's body is never read
            auth = h.headers.get("Authorization", "")
            if not hmac.compare_digest(auth.encode(), f"Bearer {self.token}".encode()):
                h.close_connection = True
                self.send(h, 401, {"errors": ["missing or wrong cluster token"], "kind": "Authentication",
                                   "remedy": "use the token in the cluster's home (FLINKPY_HOME)"})
                return
            body = self._body(h)
            if body is None:
                return
            h.server.watchdog.disarm(h.connection)  # type: ignore[attr-defined]  # a long poll may follow
            path = url.path.rstrip("/") or "/"
            standby = self.standby_message()
            if standby is not None and path not in ("/config", "/jobmanager/log"):
                # a standby JobManager (HA) knows no jobs: send the client to the leader
                self.send(h, 503, {"errors": [standby], "kind": "Standby",
                                   "remedy": "the CLI finds the leader through ZooKeeper; retry in a moment"})
                return
            routes = self.routes()
            for m, pattern, fn in routes:
                match = re.fullmatch(pattern, path)
                if match and m == method:
                    result = fn(query=query, body=body, **match.groupdict())
                    if isinstance(result, tuple):
                        status, payload = result
                    else:
                        status, payload = 200, result
                    self.send(h, status, payload)
                    return
            if any(re.fullmatch(p, path) for _, p, _ in routes):
                self.send(h, 405, {"errors": [f"{method} is not allowed on {path}"], "kind": "MethodNotAllowed"})
            elif re.fullmatch(r"/jobs/[^/]+(/.*)?", path):
                self.send(h, 404, {"errors": [f"job {path.split('/')[2]} not found"], "kind": "NotFound",
                                   "remedy": "list jobs with 'flinkpy list -a'"})
            else:
                self.send(h, 404, {"errors": [f"no such endpoint: {path}"], "kind": "NotFound"})
        except FlinkpyError as e:
            status = (404 if isinstance(e, NotFoundError) else 409 if isinstance(e, ConflictError)
                      else 422 if isinstance(e, ConfigurationError) else 503 if isinstance(e, ClusterUnreachableError)
                      else 504 if isinstance(e, OperationTimeoutError) else 400)
            self.send(h, status, {"errors": [e.message], "remedy": e.remedy, "kind": type(e).__name__})
        except Exception as e:  # noqa: BLE001
            missing_credentials = storage_credentials_error(e)
            if missing_credentials is not None:
                self.send(h, 422, {"errors": [missing_credentials.message], "remedy": missing_credentials.remedy, "kind": "ConfigurationError"})
                return
            log.exception("REST %s %s failed", method, h.path)
            self.send(h, 500, {"errors": [f"internal error: {e}"], "kind": "Internal"})

    def _body(self, h: BaseHTTPRequestHandler) -> bytes | None:
        """The request's body; None when it was refused (answered and the connection closed)."""
        limit = self.limits.max_content_length
        if h.headers.get("Transfer-Encoding"):
            h.close_connection = True
            self.send(h, 411, {"errors": ["chunked request bodies are not accepted"], "kind": "LengthRequired",
                               "remedy": "send the body with a Content-Length"})
            return None
        try:
            length = int(h.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            h.close_connection = True
            self.send(h, 400, {"errors": [f"invalid Content-Length {h.headers.get('Content-Length')!r}"], "kind": "BadRequest"})
            return None
        if length > limit:
            h.close_connection = True
            self.send(h, 413, {"errors": [f"the request body of {length} bytes is larger than the REST server accepts ({limit} bytes)"],
                               "kind": "RequestEntityTooLarge",
                               "remedy": "raise rest.server.max-content-length in the JobManager's flinkpy.yaml if the request is legitimate"})
            return None
        try:
            body = h.rfile.read(length) if length else b""
        except OSError:  # the read timeout, or the watchdog closed a request that came too slowly
            body = b""
        if len(body) < length:
            h.close_connection = True
            return None
        return body

    @staticmethod
    def send(h: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        if isinstance(payload, StreamedAnswer):
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
