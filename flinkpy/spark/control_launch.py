"""Starting a Spark driver for ``flinkpy run --runner spark`` and waiting for it.

The client side of the runner: write the driver's spec, start ``python -m flinkpy.spark.driver``
(its log in ``<home>/log/spark-<job_id>.log``; the job's printed output on our stdout when
attached, in ``<home>/log/spark-<job_id>.out`` when detached), wait until the driver has
accepted the job (translated it and checked a restore) or refused it, then — attached — until
it ends. The outcome comes back as the same ``SubmittedJob`` flinkpy's own engine gives; a file
that calls ``execute()`` several times gets a driver per job.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Any, Callable

from flinkpy import errors
from flinkpy.processes import module_command
from flinkpy.program.context import SubmittedJob
from flinkpy.spark import control_registry as registry

#: how long the driver may take to run the job file and translate it
ACCEPT_TIMEOUT_S = 120.0


def _refusal(error: dict[str, Any]) -> errors.FlinkpyError:
    """The driver's refusal as the error the CLI reports (same class, message, remedy)."""
    cls = getattr(errors, str(error.get("kind") or ""), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.FlinkpyError)) or cls is errors.FlinkpyError:
        cls = next((c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.FlinkpyError)
                    and c.exit_code == error.get("exit_code") and c is not errors.FlinkpyError), errors.FlinkpyError)
    exc = cls(str(error.get("message")), remedy=error.get("remedy"), details=error.get("details"))
    return exc


def run_on_spark(
    path: str,
    args: list[str],
    *,
    home: Any,
    config: dict[str, str],
    parallelism: int | None,
    detached: bool,
    savepoint_path: str | None = None,
    allow_non_restored_state: bool = False,
    spark_conf: dict[str, str] | None = None,
    job_stdout: Any = None,
    on_submit: Callable[[str, str], None] | None = None,
) -> list[SubmittedJob]:
    """Run JOB.py on Spark under supervising drivers; returns its jobs (final unless detached).

    A file that calls ``execute()`` several times has as many jobs, each with its own id, driver
    and query, as on the engine: attached, one after the other, the next once the one before
    finished (a job that fails or is cancelled ends the program there, as its ``execute()``
    raising does on the engine); detached, all submitted at once. The first driver says how
    many there are once it has captured the file and translated every job. ``allow_non_restored_state``
    (``-n``) lets the state of operators the program no longer has stay behind when the state of an
    engine snapshot moves to Spark; the driver refuses it with a Spark savepoint, which restores its
    query's state whole."""
    launch = _Launch(path, args, home=home, config=config, parallelism=parallelism, detached=detached, savepoint_path=savepoint_path,
                     allow_non_restored_state=allow_non_restored_state, spark_conf=spark_conf, job_stdout=job_stdout)
    submitted: list[SubmittedJob] = []
    count: int | None = None
    index = 0
    while count is None or index < count:
        job_id, name, proc, record = launch.start(index, count)
        if count is None:
            count = int(record.get("job_count") or 1)
        if on_submit:
            on_submit(job_id, name)
        index += 1
        if detached:
            submitted.append(SubmittedJob(job_id, name, "RUNNING"))
            continue
        job = launch.wait(job_id, name, proc, record)
        submitted.append(job)
        if job.state != "FINISHED":
            break
    return submitted


class _Launch:
    """Starts the driver of each job of one job file (see :func:`run_on_spark`)."""

    def __init__(self, path: str, args: list[str], *, home: Any, config: dict[str, str], parallelism: int | None, detached: bool,
                 savepoint_path: str | None, allow_non_restored_state: bool, spark_conf: dict[str, str] | None, job_stdout: Any) -> None:
        import os

        home.ensure()
        self.home = home
        self.detached = detached
        self.job_stdout = job_stdout
        self.spec = {
            "home": str(home.path), "job_file": os.path.abspath(path), "args": list(args), "config": dict(config),
            "parallelism": parallelism, "savepoint_path": savepoint_path, "allow_non_restored_state": allow_non_restored_state,
            "spark_conf": dict(spark_conf or {}),
        }

    def start(self, index: int, count: int | None) -> tuple[str, str, subprocess.Popen, dict[str, Any]]:
        """Start the driver of the file's job ``index``; return once it accepted the job."""
        import os

        job_id = uuid.uuid4().hex
        spec = dict(self.spec, job_id=job_id, job_index=index, job_count=count)
        spec_path = registry.jobs_dir(self.home.path) / f"{job_id}.spec"
        spec_path.parent.mkdir(parents=True, exist_ok=True)
        spec_path.write_text(json.dumps(spec))
        log_path = self.home.log_dir / f"spark-{job_id}.log"
        out_path = self.home.log_dir / f"spark-{job_id}.out"
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON") or sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        with open(log_path, "ab", buffering=0) as log, open(out_path, "ab", buffering=0) as out:
            stdout: Any = out if self.detached else (self.job_stdout if self.job_stdout is not None else None)
            proc = subprocess.Popen(
                module_command("flinkpy.spark.driver", str(spec_path)),
                stdin=subprocess.DEVNULL, stdout=stdout, stderr=log, env=env, start_new_session=self.detached, close_fds=True,
            )
        record = _wait_accepted(self.home, job_id, proc, log_path)
        return job_id, record.get("name") or "Flink Streaming Job", proc, record

    def wait(self, job_id: str, name: str, proc: subprocess.Popen, record: dict[str, Any]) -> SubmittedJob:
        """Wait for an attached job's driver to end; the job's outcome."""
        try:
            proc.wait()
        except KeyboardInterrupt:
            proc.terminate()  # the driver cancels the query and exits
            proc.wait()
            raise
        final = registry.read_record(self.home.path, job_id) or record
        if final.get("error"):  # refused after acceptance: the executors cannot run the job
            raise _refusal(final["error"])
        result = ((final.get("final") or {}).get("execution-result") or {}).get("job-execution-result") or {}
        state = {"SUCCEEDED": "FINISHED", "CANCELED": "CANCELED"}.get(result.get("application-status", ""), "FAILED")
        failure = result.get("failure-cause")
        if failure is None and state == "FAILED":
            log_path = self.home.log_dir / f"spark-{job_id}.log"
            failure = {"class": "DriverLost", "message": f"the Spark driver exited with status {proc.returncode}; see {log_path}",
                       "stack-trace": "", "task": "Spark driver"}
        return SubmittedJob(job_id, name, state, result.get("net-runtime"), False, failure)


def _wait_accepted(home: Any, job_id: str, proc: subprocess.Popen, log_path: Any) -> dict[str, Any]:
    deadline = time.monotonic() + ACCEPT_TIMEOUT_S
    while True:
        record = registry.read_record(home.path, job_id)
        if record is not None and record.get("error"):
            proc.wait()
            raise _refusal(record["error"])
        if record is not None and record.get("submitted"):
            return record
        if proc.poll() is not None:
            record = registry.read_record(home.path, job_id)
            if record is not None and record.get("error"):
                raise _refusal(record["error"])
            raise errors.FlinkpyError(f"the Spark driver of job {job_id} exited during start-up (status {proc.returncode})",
                                      remedy=f"see {log_path}")
        if time.monotonic() > deadline:
            proc.kill()
            raise errors.OperationTimeoutError(f"the Spark driver of job {job_id} did not accept the job within {ACCEPT_TIMEOUT_S:.0f}s",
                                               remedy=f"see {log_path}")
        time.sleep(0.02)
