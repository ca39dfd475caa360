"""Jobs a JobManager without high availability lost when it died: a record of each running job.

Without high availability a JobManager keeps its jobs in memory only; when it is killed, the
supervisor starts a fresh one and the jobs were gone without a word where operators look. So the
JobManager writes one small file per job it accepts (``<home>/jobs/<job id>.json``: name, start,
checkpoint directory) and removes it when the job ends. A JobManager that starts and finds such
files knows those jobs were running when its predecessor died: it lists them as LOST (``list
-a``, ``job show``, ``cluster status``) with their latest completed checkpoint, which is what
``flinkpy run -s`` (or ``--from-latest``) resumes them from. A clean stop of the JobManager
removes the files: jobs stopped with their cluster are not lost.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("flinkpy.jobmanager")

LOST = "LOST"


@dataclass(frozen=True)
class LostJob:
    """A job that was running when the previous JobManager died."""

    job_id: str
    name: str
    start_ms: int
    lost_ms: int
    checkpoint_dir: str
    #: the newest completed checkpoint of the job (None when it took none)
    latest_checkpoint: str | None

    def remedy(self) -> str:
        if self.latest_checkpoint:
            return f"resume it with 'flinkpy run -s {self.latest_checkpoint} JOB.py'"
        return "it completed no checkpoint: run it again from the start"

    def summary(self) -> dict[str, Any]:
        """The job as the REST API lists it (Flink's job overview fields, state LOST)."""
        return {
            "jid": self.job_id,
            "name": self.name,
            "state": LOST,
            "start-time": self.start_ms,
            "end-time": self.lost_ms,
            "duration": self.lost_ms - self.start_ms,
            "last-modification": self.lost_ms,
            "tasks": {"total": 0},
            "restarts": 0,
            "latest-checkpoint": self.latest_checkpoint,
            "lost-reason": "the JobManager that ran it died (no high availability)",
            "remedy": self.remedy(),
        }


class JobJournal:
    """The files in ``directory`` that name the jobs a JobManager runs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.recorded: set[str] = set()

    def _path(self, job_id: str) -> Path:
        return self.directory / f"{job_id}.json"

    def record(self, job_id: str, name: str, start_ms: int, checkpoint_dir: str) -> None:
        self.directory.mkdir(mode=0o700, exist_ok=True)
        tmp = self.directory / f".{job_id}.tmp"
        tmp.write_text(json.dumps({"jid": job_id, "name": name, "start-time": start_ms, "checkpoint-dir": checkpoint_dir}))
        os.replace(tmp, self._path(job_id))
        self.recorded.add(job_id)

    def forget(self, job_id: str) -> None:
        self.recorded.discard(job_id)
        try:
            self._path(job_id).unlink()
        except FileNotFoundError:
            pass

    def clear(self) -> None:
        """A clean stop: the running jobs end with the cluster, none is lost."""
        for job_id in list(self.recorded):
            self.forget(job_id)

    def lost(self, now_ms: int) -> list[LostJob]:
        """The jobs a JobManager that died left recorded (they stay recorded until a clean stop,
        so a JobManager started after this one reports them too)."""
        from flinkpy.checkpoint.storage import CheckpointStorage

        found = []
        for path in sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []:
            try:
                doc = json.loads(path.read_text())
                job_id, checkpoint_dir = doc["jid"], doc["checkpoint-dir"]
            except (OSError, ValueError, KeyError):
                continue
            latest = None
            try:
                storage = CheckpointStorage(checkpoint_dir)
                ids = storage.list_checkpoints(job_id)
                latest = storage.checkpoint_dir(job_id, max(ids)) if ids else None
            except Exception as e:  # noqa: BLE001 - an unreadable directory: lost without a checkpoint to name
                log.warning("job %s: its checkpoints in %s cannot be listed: %s", job_id, checkpoint_dir, e)
            job = LostJob(job_id, str(doc.get("name", "")), int(doc.get("start-time", now_ms)), now_ms, checkpoint_dir, latest)
            self.recorded.add(job_id)
            log.warning("job %s (%s) was running when the previous JobManager died: LOST; %s", job_id, job.name, job.remedy())
            found.append(job)
        return found
