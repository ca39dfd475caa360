"""Where Spark drivers register in the cluster home, and how the CLI finds them.

Each driver keeps one record, ``<home>/spark-jobs/<job_id>.json``, replaced atomically as the
job moves: its id and name, the driver's pid and start time (so a reused pid is not mistaken
for it), the state, the control endpoint's address, and, once the job has ended, the final
documents (job, exceptions, checkpoints) so that ``flinkpy list -a`` and ``flinkpy job
exceptions`` still answer after the driver has exited. A record whose driver died without
saying so (SIGKILL) reads as FAILED.

The control endpoint speaks the JobManager's REST paths with the cluster's token, so the CLI
reaches a Spark job through the same ``RestClient`` it uses for a cluster: ``driver_client``
returns one that answers from the record once the driver is gone.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from flinkpy.files import write_json_atomically
from flinkpy.network.rest_client import RestClient
from flinkpy.errors import ClusterUnreachableError, ConflictError, NotFoundError
from flinkpy.processes import running

JOBS_DIR = "spark-jobs"
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")


def jobs_dir(home: Any) -> Path:
    return Path(os.fspath(home)) / JOBS_DIR


def record_path(home: Any, job_id: str) -> Path:
    return jobs_dir(home) / f"{job_id}.json"


def write_record(home: Any, record: Mapping[str, Any]) -> None:
    path = record_path(home, str(record["jid"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(path, record)


def read_record(home: Any, job_id: str) -> dict[str, Any] | None:
    """The job's record with its state as it is now (FAILED if its driver vanished), or None."""
    if not _JOB_ID.match(job_id):
        return None
    try:
        record = json.loads(record_path(home, job_id).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return _settled(record)


def _settled(record: dict[str, Any]) -> dict[str, Any]:
    record["alive"] = running(int(record.get("pid") or 0), float(record.get("create_time") or 0))
    if not record["alive"] and record.get("state") not in ("FINISHED", "FAILED", "CANCELED"):
        record["state"] = "FAILED"
        record["lost"] = True
    return record


def list_records(home: Any) -> list[dict[str, Any]]:
    """Every Spark job registered in ``home``."""
    out = []
    try:
        names = sorted(os.listdir(jobs_dir(home)))
    except FileNotFoundError:
        return []
    for name in names:
        if name.endswith(".json"):
            rec = read_record(home, name[: -len(".json")])
            if rec is not None:
                out.append(rec)
    return out


def overview_entry(record: Mapping[str, Any]) -> dict[str, Any]:
    """The job as ``/jobs/overview`` lists it (with "runner": "spark")."""
    doc = dict(record.get("summary") or {})
    doc.update({"jid": record["jid"], "name": record.get("name", ""), "state": record["state"], "runner": "spark"})
    doc.setdefault("start-time", record.get("start-time", 0))
    doc.setdefault("restarts", 0)
    return doc


class DriverClient(RestClient):
    """A RestClient for one Spark driver's control endpoint; answers read-only requests from
    the driver's record when the driver has ended (or died), and refuses changes then."""

    def __init__(self, home: Any, record: dict[str, Any], token: str | None, timeout_s: float = 10) -> None:
        super().__init__(record.get("control") or "127.0.0.1:1", token, timeout_s)
        self.home = home
        self.record = record

    def request(self, method: str, path: str, **kw: Any) -> Any:
        if self._live():
            try:
                return super().request(method, path, **kw)
            except ClusterUnreachableError:
                fresh = read_record(self.home, self.record["jid"])
                if fresh is None:
                    raise
                self.record = fresh
                if self._live():
                    raise
                # it ended while we asked: answer from what it left
        return self._offline(method, path, kw)

    def _live(self) -> bool:
        """The driver serves requests: alive, listening, and its job not over (a driver that
        has ended its job is shutting down; its final record answers instead)."""
        rec = self.record
        return bool(rec.get("alive") and rec.get("control") and not rec.get("final"))

    def _offline(self, method: str, path: str, kw: dict[str, Any]) -> Any:
        rec = self.record
        jid = rec["jid"]
        documents = rec.get("final") or {}
        if method.upper() != "GET":
            raise ConflictError(
                f"Spark job {jid} is {rec['state']}" + (" (its driver process is gone)" if rec.get("lost") else ""),
                remedy="only running jobs can be changed; see 'flinkpy list -a'",
            )
        tail = path[len(f"/jobs/{jid}"):] if path.startswith(f"/jobs/{jid}") else None
        if tail == "":
            return dict(documents.get("job") or overview_entry(rec), state=rec["state"])
        if tail == "/execution-result":
            result = documents.get("execution-result")
            if result is None:  # died without a word
                result = {"status": {"id": "COMPLETED"}, "job-execution-result": {
                    "id": jid, "application-status": "FAILED", "net-runtime": 0,
                    "failure-cause": {"class": "DriverLost", "message": f"the Spark driver (pid {rec.get('pid')}) of job {jid} is gone",
                                      "stack-trace": "", "task": "Spark driver"}}}
            return result
        if tail is not None and tail.lstrip("/") in documents:
            return documents[tail.lstrip("/")]
        if tail == "/checkpoints" and rec.get("checkpoint_location"):
            # died without a word (SIGKILL): its retained checkpoint, which 'run -s' resumes
            from flinkpy.spark.supervisor_snapshots import checkpoint_stats

            return checkpoint_stats(rec["checkpoint_location"], restored=None, history=int((kw.get("params") or {}).get("history") or 10))
        raise NotFoundError(f"{path} of Spark job {jid} is not available after the job ended", remedy=f"see 'flinkpy job show {jid}'")


def driver_client(home: Any, job_id: str, token: str | None) -> DriverClient | None:
    """A client for Spark job ``job_id`` registered in ``home``; None when there is none."""
    record = read_record(home, job_id)
    return DriverClient(home, record, token) if record is not None else None
