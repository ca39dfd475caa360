"""What ``DataStream.execute_and_collect()`` returns: a running job's records as they arrive.

The job's collect sink (:mod:`flinkpy.connectors.collect`) appends pickled batches to one file
per subtask attempt; the iterator reads the complete batches written since it last looked, in
file order, and asks the JobManager for the job's state only when nothing new is there. The
job runs while the program iterates: an unbounded job's first records come back at once, and
closing the iterator (or reaching PyFlink's ``limit``) cancels the job. When the job ends, the
last records are read, then a failed or cancelled job raises as ``execute()`` does. An embedded
cluster started for the job lives as long as the iterator (or the program, if it is never
closed).
"""

from __future__ import annotations

import collections
import pickle
import shutil
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from flinkpy.client.executor import StartedJob, result_or_raise
from flinkpy.connectors.collect import CONSUMED, mark_consumed

_TERMINAL = ("FINISHED", "FAILED", "CANCELED")


class PartsTail:
    """The records of complete batches appended to the part files of a directory since the
    last :meth:`read_new` (a batch still being written is read the next time; the unfinished
    last batch of a killed attempt never is)."""

    def __init__(self, directory: str, max_records: int = 4096) -> None:
        self.directory = Path(directory)
        self.max_records = max_records
        self._offsets: dict[str, int] = {}

    def read_new(self) -> list[Any]:
        """Up to about ``max_records`` new records (whole batches); tells each writer how far
        its file has been read, which is what lets it write on (see CollectSink)."""
        out: list[Any] = []
        for part in sorted(p for p in self.directory.glob("part-*") if CONSUMED not in p.name):
            offset = self._offsets.get(part.name, 0)
            try:
                with open(part, "rb") as f:
                    f.seek(offset)
                    while len(out) < self.max_records:
                        try:
                            batch = pickle.load(f)
                        except Exception:  # noqa: BLE001 - the end, or a batch not yet whole
                            break
                        out.extend(batch)
                        offset = f.tell()
            except FileNotFoundError:
                continue
            if offset != self._offsets.get(part.name, 0):
                self._offsets[part.name] = offset
                mark_consumed(part, offset)
            if len(out) >= self.max_records:
                break
        return out


def _release(started: StartedJob, directory: str, cancel: bool) -> None:
    """Cancel the job if it still runs (its results have nowhere to go), stop its embedded
    cluster, remove the collect directory; for close() and for an iterator never closed."""
    if cancel:
        try:
            if started.rest.job(started.job_id).get("state") not in _TERMINAL:
                started.rest.cancel_job(started.job_id)
        except Exception:  # noqa: BLE001 - the cluster may be gone already
            pass
    started.stop()
    shutil.rmtree(directory, ignore_errors=True)


class CollectResultIterator:
    """The records of a running job, in a ``for`` or a ``with`` (closing cancels the job)."""

    def __init__(self, started: StartedJob, directory: str, *, poll_s: float = 0.2) -> None:
        from flinkpy.program.context import SubmittedJob, current_context

        self._started = started
        # what `flinkpy run` reports about the job: updated when it ends
        self._submitted = SubmittedJob(started.job_id, started.name, "RUNNING", embedded=started.embedded)
        current_context().submitted.append(self._submitted)
        self._embedded = started.embedded
        self._tail = PartsTail(directory)
        self._buffer: collections.deque[Any] = collections.deque()
        self._ended: dict[str, Any] | None = None
        self._closed = False
        self._poll_s = poll_s
        self._release = weakref.finalize(self, _release, started, directory, True)

    @property
    def job_id(self) -> str:
        return self._started.job_id

    def __iter__(self) -> CollectResultIterator:
        return self

    def __next__(self) -> Any:
        wait = 0.005
        while not self._buffer:
            if self._closed:
                raise StopIteration
            if self._ended is not None:
                self._finish()
            try:
                wait = self._look(wait)
            except KeyboardInterrupt:
                self.close()
                raise
        return self._buffer.popleft()

    def _look(self, wait: float) -> float:
        """Read what is new; when nothing is, see whether the job ended (then read the rest)."""
        records = self._tail.read_new()
        if records:
            self._buffer.extend(records)
            return 0.005
        rest, job_id = self._started.rest, self._started.job_id
        if rest.job(job_id).get("state") in _TERMINAL:
            self._buffer.extend(self._tail.read_new())  # what was written just before the end
            self._ended = rest.wait_for_job(job_id, 10)
            return wait
        time.sleep(wait)
        return min(wait * 2, self._poll_s)

    def _finish(self) -> None:
        """Every record is read and the job ended: release it, then raise as execute() would
        for a failed or cancelled job, else stop."""
        result, self._ended = self._ended or {}, None
        self._closed = True
        self._release.detach()
        started = self._started
        _release(started, str(self._tail.directory), False)
        cause = result.get("failure-cause") or {}
        status = result.get("application-status")
        self._submitted.state = {"SUCCEEDED": "FINISHED", "CANCELED": "CANCELED"}.get(status or "", "FAILED")
        self._submitted.net_runtime_ms = result.get("net-runtime")
        self._submitted.failure = result.get("failure-cause")
        if status == "FAILED" and self._embedded and cause.get("stack-trace"):
            # the embedded cluster's logs are gone with it: the task's traceback is shown here
            print(f"Job {started.job_id} failed in {cause.get('task')}:\n{cause['stack-trace']}", file=sys.stderr, end="", flush=True)
        result_or_raise(started.job_id, started.name, result)
        raise StopIteration

    def close(self) -> None:
        """Stop reading: the job is cancelled if it still runs, an embedded cluster stopped."""
        if not self._closed:
            self._submitted.state, self._submitted.cancelled_by_program = "CANCELED", True
        self._closed = True
        self._buffer.clear()
        self._ended = None
        self._release()

    def __enter__(self) -> CollectResultIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
