"""Starting a Spark driver for ``flinkpy run --runner spark`` and waiting for it.

The client side of the runner: write the driver's spec, start ``python -m flinkpy.spark.driver``
(its log in ``<home>/log/spark-<job_id>.log``; the job's printed output on our stdout when
attached, in ``<home>/log/spark-<job_id>.out`` when detached), wait until the driver has
accepted the job (translated it and checked a restore) or refused it, then — attached — until
it ends. The outcome comes back as the same ``SubmittedJob`` flinkpy's own engine gives.
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
    spark_conf: dict[str, str] | None = None,
    job_stdout: Any = None,
    on_submit: Callable[[str, str], None] | None = None,
) -> list[SubmittedJob]:
    """Run JOB.py on Spark under a supervising driver; returns the job (final unless detached)."""
    import os

    home.ensure()
    job_id = uuid.uuid4().hex
    spec = {
        "job_id": job_id, "home": str(home.path), "job_file": os.path.abspath(path), "args": list(args),
        "config": dict(config), "parallelism": parallelism, "savepoint_path": savepoint_path,
        "spark_conf": dict(spark_conf or {}),
    }
    spec_path = registry.jobs_dir(home.path) / f"{job_id}.spec"
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps(spec))
    log_path = home.log_dir / f"spark-{job_id}.log"
    out_path = home.log_dir / f"spark-{job_id}.out"
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON") or sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with open(log_path, "ab", buffering=0) as log, open(out_path, "ab", buffering=0) as out:
        stdout: Any = out if detached else (job_stdout if job_stdout is not None else None)
        proc = subprocess.Popen(
            module_command("flinkpy.spark.driver", str(spec_path)),
            stdin=subprocess.DEVNULL, stdout=stdout, stderr=log, env=env, start_new_session=detached, close_fds=True,
        )
    record = _wait_accepted(home, job_id, proc, log_path)
    name = record.get("name") or "Flink Streaming Job"
    if on_submit:
        on_submit(job_id, name)
    if detached:
        return [SubmittedJob(job_id, name, "RUNNING")]
    try:
        proc.wait()
    except KeyboardInterrupt:
        proc.terminate()  # the driver cancels the query and exits
        proc.wait()
        raise
    final = registry.read_record(home.path, job_id) or record
    if final.get("error"):  # refused after acceptance: the executors cannot run the job
        raise _refusal(final["error"])
    result = ((final.get("final") or {}).get("execution-result") or {}).get("job-execution-result") or {}
    state = {"SUCCEEDED": "FINISHED", "CANCELED": "CANCELED"}.get(result.get("application-status", ""), "FAILED")
    failure = result.get("failure-cause")
    if failure is None and state == "FAILED":
        failure = {"class": "DriverLost", "message": f"the Spark driver exited with status {proc.returncode}; see {log_path}",
                   "stack-trace": "", "task": "Spark driver"}
    return [SubmittedJob(job_id, name, state, result.get("net-runtime"), False, failure)]


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
