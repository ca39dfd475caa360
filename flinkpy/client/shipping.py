"""What the client ships with a job to flinkpy's engine: the archive of its Python files.

Always shipped, to the embedded cluster too (one code path): the job's own directory and its
``python.files`` (``env.add_python_file``, ``--pyFiles``, ``-D python.files``) go into one
archive (:mod:`flinkpy.program.archive`) inside the submission, so the TaskManagers import the
files as they were when the job was submitted, wherever they run. The submission must fit the
JobManager's ``rest.server.max-content-length``: the client asks the JobManager for it and
refuses, naming the sizes, what went into the archive and what to raise, before sending a
body the JobManager would refuse unread.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from flinkpy.errors import ConfigurationError
from flinkpy.network.http_limits import MAX_CONTENT_LENGTH_KEY
from flinkpy.program import python_files
from flinkpy.program.archive import PythonArchive, build
from flinkpy.units import format_memory_size

#: the key of the JobManager's body limit in its GET /config answer
CONFIG_LIMIT_KEY = "rest-server-max-content-length"


def job_archive(job_dirs: list[str], config: dict[str, str]) -> PythonArchive:
    """The archive of a job: its directories (those that exist) and its ``python.files``."""
    return build([d for d in job_dirs if os.path.isdir(d)], python_files.entries(config.get(python_files.KEY)))


def document_entry(archive: PythonArchive) -> dict[str, Any]:
    """The submission document's ``python_archive``: the archive inline, with its checksum."""
    return {"sha256": archive.sha256, "size": archive.size, "data": base64.b64encode(archive.data).decode()}


def check_submission_size(rest: Any, size: int, archive: PythonArchive, job_name: str) -> None:
    """Refuse a submission of ``size`` bytes larger than the JobManager accepts."""
    try:
        limit = int(rest.request("GET", "/config").get(CONFIG_LIMIT_KEY) or 0)
    except (AttributeError, TypeError, ValueError):
        limit = 0  # a JobManager that does not say: it answers 413 itself
    if not limit or size <= limit:
        return
    raise ConfigurationError(
        f"job '{job_name}' cannot be submitted: its submission is {_mib(size)}, {_mib(archive.size)} of it the archive of its "
        f"Python files ({archive.describe()}, sent base64-encoded), and the JobManager accepts at most "
        f"{_mib(limit)} ({MAX_CONTENT_LENGTH_KEY}: {format_memory_size(limit)})",
        remedy=f"raise {MAX_CONTENT_LENGTH_KEY} in the cluster's flinkpy.yaml and restart the cluster, or ship less: "
               "add only the files the job's functions import, and keep data files out of the job's directory",
    )


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"
