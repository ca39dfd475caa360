"""The Spark driver's control endpoint: the JobManager's REST paths for one job.

It is flinkpy's REST endpoint (:mod:`flinkpy.network.rest_server`: the same token check,
routing, error documents and status codes) with the routes of one job's lifecycle pointed at
the driver, so the CLI's commands (list, job show/exceptions, cancel, stop, savepoint
trigger/status, checkpoint list, fault kill-task) work on a Spark job through the same
``RestClient`` calls. The driver object
implements the handlers' verbs; this module only maps requests onto them.
"""

from __future__ import annotations

from typing import Any, Protocol

from flinkpy.errors import InvalidProgramError, NotFoundError
from flinkpy.network.rest_server import RestEndpoint, Route
from flinkpy.network.rest_params import query_number

_JID = r"(?P<jid>[0-9a-f]{32})"


class ControlledJob(Protocol):
    """What the driver offers its control endpoint (all thread-safe)."""

    job_id: str

    def standby_message(self) -> str | None: ...
    def job_document(self) -> dict[str, Any]: ...
    def summary(self) -> dict[str, Any]: ...
    def exceptions_document(self) -> dict[str, Any]: ...
    def wait_result(self, timeout_s: float) -> dict[str, Any]: ...
    def request_cancel(self) -> None: ...
    def checkpoints(self, history: int) -> dict[str, Any]: ...
    def checkpoint_config(self) -> dict[str, Any]: ...
    def request_savepoint(self, target_dir: str | None, *, stop: bool) -> str: ...
    def savepoint_status(self, trigger_id: str) -> dict[str, Any]: ...
    def restart_strategy(self) -> dict[str, Any]: ...
    def fault(self, kind: str, params: dict[str, Any]) -> dict[str, Any]: ...
    def fault_history(self) -> list[dict[str, Any]]: ...


class ControlServer(RestEndpoint):
    """The REST endpoint serving one Spark job; bind it to loopback with port 0."""

    def __init__(self, job: ControlledJob, token: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.job = job
        super().__init__(token, host, port)

    def standby_message(self) -> str | None:
        return self.job.standby_message()

    def routes(self) -> list[Route]:
        return [
            ("GET", r"/overview", self._overview),
            ("GET", r"/config", self.config),
            ("GET", r"/jobs/overview", self._jobs),
            ("GET", r"/jobs", self._jobs),
            ("GET", rf"/jobs/{_JID}", self._mine(lambda **_: self.job.job_document())),
            ("GET", rf"/jobs/{_JID}/exceptions", self._mine(lambda **_: self.job.exceptions_document())),
            ("GET", rf"/jobs/{_JID}/execution-result", self._mine(self._result)),
            ("PATCH", rf"/jobs/{_JID}", self._mine(self._patch)),
            ("GET", rf"/jobs/{_JID}/checkpoints", self._mine(lambda query, **_: self.job.checkpoints(query_number(query, "history", 10, integer=True)))),
            ("GET", rf"/jobs/{_JID}/checkpoints/config", self._mine(lambda **_: self.job.checkpoint_config())),
            ("POST", rf"/jobs/{_JID}/savepoints", self._mine(self._savepoint)),
            ("GET", rf"/jobs/{_JID}/savepoints/(?P<tid>[0-9a-f]{{32}})", self._mine(lambda tid, **_: self.job.savepoint_status(tid))),
            ("POST", rf"/jobs/{_JID}/stop", self._mine(self._stop)),
            ("GET", rf"/jobs/{_JID}/restart-strategy", self._mine(lambda **_: self.job.restart_strategy())),
            ("POST", rf"/jobs/{_JID}/faults", self._mine(self._fault)),
            ("GET", rf"/jobs/{_JID}/faults", self._mine(lambda jid, **_: {"jid": jid, "faults": self.job.fault_history()})),
        ]

    def _mine(self, handler: Any) -> Any:
        def checked(jid: str, **kw: Any) -> Any:
            if jid != self.job.job_id:
                raise NotFoundError(f"job {jid} not found: this is the Spark driver of job {self.job.job_id}",
                                    remedy="list jobs with 'flinkpy list -a'")
            return handler(jid=jid, **kw)

        return checked

    def _overview(self, **_: Any) -> dict[str, Any]:
        state = self.job.summary()["state"]
        return {"taskmanagers": 0, "slots-total": 0, "slots-available": 0, "runner": "spark",
                "jobs-running": int(state not in ("FINISHED", "FAILED", "CANCELED")),
                "jobs-finished": int(state == "FINISHED"), "jobs-cancelled": int(state == "CANCELED"),
                "jobs-failed": int(state == "FAILED")}

    def _jobs(self, **_: Any) -> dict[str, Any]:
        return {"jobs": [self.job.summary()]}

    def _result(self, query: dict[str, str], **_: Any) -> dict[str, Any]:
        return self.job.wait_result(query_number(query, "timeout", 0.0, high=60.0))

    def _patch(self, query: dict[str, str], **_: Any) -> tuple[int, dict[str, Any]]:
        mode = query.get("mode", "cancel")
        if mode != "cancel":
            raise InvalidProgramError(f"unsupported mode {mode!r}", remedy="use mode=cancel")
        self.job.request_cancel()
        return 202, {}

    def _savepoint(self, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        doc = self.json_body(body)
        return 202, {"request-id": self.job.request_savepoint(doc.get("target-directory"), stop=bool(doc.get("cancel-job")))}

    def _stop(self, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        doc = self.json_body(body)
        return 202, {"request-id": self.job.request_savepoint(doc.get("targetDirectory"), stop=True)}

    def _fault(self, body: bytes, **_: Any) -> tuple[int, dict[str, Any]]:
        doc = self.json_body(body)
        kind = str(doc.pop("kind", ""))
        return 202, self.job.fault(kind, doc)
