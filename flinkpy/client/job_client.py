"""JobClient and JobExecutionResult, as PyFlink's ``execute_async()`` / ``execute()`` return them."""

from __future__ import annotations

from typing import Any


class JobExecutionResult:
    def __init__(self, job_id: str, net_runtime_ms: int, job_name: str = ""):
        self._job_id = job_id
        self._net_runtime = net_runtime_ms
        self._job_name = job_name

    def get_job_id(self) -> str:
        return self._job_id

    def get_net_runtime(self) -> int:
        return self._net_runtime

    def get_accumulator_result(self, accumulator_name: str) -> Any:
        return None

    def get_all_accumulator_results(self) -> dict[str, Any]:
        return {}

    def is_job_execution_result(self) -> bool:
        return True

    def get_job_execution_result(self) -> "JobExecutionResult":
        return self

    def __repr__(self) -> str:
        return f"JobExecutionResult(job_id={self._job_id}, net_runtime={self._net_runtime} ms)"


class JobClient:
    """A handle on a submitted job (detached execution)."""

    def __init__(self, rest: Any, job_id: str, job_name: str = ""):
        self._rest = rest
        self._job_id = job_id
        self._job_name = job_name

    def get_job_id(self) -> str:
        return self._job_id

    def get_job_status(self) -> str:
        return self._rest.job(self._job_id)["state"]

    def cancel(self) -> None:
        self._rest.cancel_job(self._job_id)

    def get_job_execution_result(self, timeout_s: float | None = None) -> JobExecutionResult:
        from flinkpy.client.executor import result_or_raise

        doc = self._rest.wait_for_job(self._job_id, timeout_s)
        return result_or_raise(self._job_id, self._job_name, doc)
