"""A TaskManager's copies of its jobs' artifacts (Flink's BlobCache): the job's Python files,
fetched from the JobManager once per job, unpacked into the TaskManager's working directory and
put on the ``sys.path`` of every task of the job it runs.

The working directory is ``<home>/taskmanagers/<tm id>``; it starts empty (a TaskManager started
again after a crash fetches afresh) and is removed when the TaskManager stops. A job's copy goes
when the JobManager says the job ended (:class:`~flinkpy.protocol.deployment.ReleaseJob`).

Fetching fails with :class:`ArtifactUnavailableError`, naming the job and what went wrong (no
such archive at the JobManager, a damaged one, an unreachable JobManager): the TaskManager
reports the task FAILED with that message instead of starting a task that cannot import its
functions.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import socket
import ssl
import threading
from pathlib import Path

from flinkpy.errors import FlinkpyError
from flinkpy.network.connection import connect
from flinkpy.program.archive import unpack
from flinkpy.protocol import ProtocolError
from flinkpy.protocol.deployment import ArtifactChunk, ArtifactUnavailable, FetchArtifact, JobArtifact, TaskDeploymentDescriptor

log = logging.getLogger("flinkpy.taskmanager")

#: the longest a fetch may wait for the JobManager's next chunk
FETCH_TIMEOUT_S = 60.0


class ArtifactUnavailableError(FlinkpyError):
    """A job's artifact could not be fetched or unpacked: its tasks cannot start here."""


def fetch(address: tuple[str, int], secret: bytes, job_id: str, artifact: JobArtifact, tls: ssl.SSLContext | None = None) -> bytes:
    """The artifact's bytes from the JobManager at ``address``, on a connection of its own
    (inside TLS when ``tls``, the internal client context, is given)."""
    try:
        conn = connect(address[0], address[1], secret, timeout=10.0, tls=tls)
    except OSError as e:
        raise ArtifactUnavailableError(f"cannot reach the JobManager at {address[0]}:{address[1]} to fetch the Python files of job {job_id}: {e}") from None
    parts: list[bytes] = []
    try:
        conn.sock.settimeout(FETCH_TIMEOUT_S)
        conn.send(FetchArtifact(job_id=job_id, sha256=artifact.sha256))
        while True:
            msg = conn.recv()
            if isinstance(msg, ArtifactUnavailable):
                raise ArtifactUnavailableError(msg.reason)
            if not isinstance(msg, ArtifactChunk):
                raise ArtifactUnavailableError(f"the JobManager ended the transfer of job {job_id}'s Python files after {sum(map(len, parts))} bytes")
            parts.append(msg.data)
            if msg.last:
                return b"".join(parts)
    except (OSError, ProtocolError) as e:
        raise ArtifactUnavailableError(f"fetching the Python files of job {job_id} from the JobManager failed: {e}") from None
    finally:
        conn.close()


class JobArtifacts:
    """The unpacked artifacts of the jobs this TaskManager runs tasks of."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        shutil.rmtree(directory, ignore_errors=True)  # left by an earlier TaskManager of this id
        self._lock = threading.Lock()
        #: job id -> (sha256, the sys.path entries of its unpacked archive)
        self._unpacked: dict[str, tuple[str, list[str]]] = {}

    def prepare(self, descriptor: TaskDeploymentDescriptor, address: tuple[str, int], secret: bytes,
                tls: ssl.SSLContext | None = None) -> TaskDeploymentDescriptor:
        """``descriptor`` with the import roots of its job's unpacked artifact as its
        ``python_path`` (fetched from the JobManager at ``address`` unless this TaskManager
        has it already); unchanged for a job without one. The client's own paths are not kept:
        a task imports what was shipped, or fails here, never a stale file that happens to
        lie at the same path."""
        artifact = descriptor.artifact
        if artifact is None:
            return descriptor
        job_id = descriptor.job_id
        with self._lock:
            known = self._unpacked.get(job_id)
            if known is None or known[0] != artifact.sha256:
                data = fetch(address, secret, job_id, artifact, tls)
                dest = self.directory / job_id / artifact.sha256[:16]
                shutil.rmtree(dest, ignore_errors=True)
                try:
                    roots = unpack(data, dest, artifact.sha256)
                except (FlinkpyError, OSError) as e:
                    raise ArtifactUnavailableError(f"the Python files of job {job_id} cannot be used: {e}") from None
                known = self._unpacked[job_id] = (artifact.sha256, roots)
                log.info("job %s: fetched and unpacked its Python files (%d bytes) into %s", job_id, len(data), dest)
        return dataclasses.replace(descriptor, python_path=list(known[1]))

    def release(self, job_id: str) -> None:
        """The job ended: remove its unpacked files."""
        with self._lock:
            self._unpacked.pop(job_id, None)
            shutil.rmtree(self.directory / job_id, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            self._unpacked.clear()
            shutil.rmtree(self.directory, ignore_errors=True)


def peer_address(sock: socket.socket) -> tuple[str, int]:
    """The JobManager's RPC address, as the TaskManager's control connection reaches it."""
    host, port = sock.getpeername()[:2]
    return host, int(port)
