"""Is the checkpoint directory writable? Asked once, when a job is submitted.

A job whose checkpoint storage refuses writes runs, fails its first checkpoint, restarts and
fails again: from the outside, a silent loop. Writing (and deleting) one small file under the
job's directory at submission turns that into one clear configuration error (exit 8) before
anything runs. The file goes where the job's checkpoints will go, through the same fsspec file
system, so a wrong scheme, a missing bucket, a path under a regular file or missing
permissions all show up here.

>>> check_writable("memory://probe-example", "3f2a9c0e")
>>> check_writable("/dev/null/checkpoints", "3f2a9c0e")
Traceback (most recent call last):
...
flinkpy.errors.ConfigurationError: the checkpoint directory /dev/null/checkpoints is not writable: ...
"""

from __future__ import annotations

import posixpath
import uuid

from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.errors import ConfigurationError

KEY = "execution.checkpointing.dir"


def check_writable(base_url: str, job_id: str) -> None:
    """Write and delete a probe file under ``<base_url>/<job_id>``; ``ConfigurationError`` naming
    the directory and the cause when that fails."""
    storage = CheckpointStorage(base_url)
    job_dir = storage.job_dir(job_id)
    try:
        fs, path = storage.filesystem(job_dir)
        fs.makedirs(path, exist_ok=True)
        probe = posixpath.join(path, f".write-probe-{uuid.uuid4().hex}")
        fs.pipe_file(probe, b"flinkpy")
        fs.rm_file(probe)
    except Exception as exc:  # noqa: BLE001 - any file system's refusal (OSError, botocore, ...) is the answer
        cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise ConfigurationError(
            f"the checkpoint directory {base_url} is not writable: {cause}",
            remedy=f"set {KEY} to a directory (or fsspec URL) the JobManager and the TaskManagers can write, "
            "or fix its permissions or credentials",
        ) from None
