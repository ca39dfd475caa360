"""Can every TaskManager write the job's checkpoint directory? Asked at submission.

A ``file://`` checkpoint directory is a different directory on every host: the JobManager
writing its own proves nothing about the TaskManagers, and a TaskManager that cannot write it
fails the job's first checkpoint, and every one after it; one that writes a directory of its own
host's leaves snapshots that no other host can restore. So at submission the JobManager writes a
marker file in the job's directory and asks each registered TaskManager to write and delete a
probe file there and to find the marker (:class:`ProbeStorage`), and refuses the job (exit 8)
naming the TaskManager and its host when one cannot. Object stores
(``s3://``, ...) are one store for every host and are probed by the JobManager alone.

A TaskManager that does not answer within the probe's timeout is not held against the job
(a slow or partitioned host is the heartbeat's business), only logged.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable
from urllib.parse import urlparse

from flinkpy.checkpoint.writability import KEY
from flinkpy.errors import ConfigurationError
from flinkpy.protocol import Message
from flinkpy.protocol.messages import ProbeStorage, StorageProbed

log = logging.getLogger("flinkpy.jobmanager")

#: how long a submission waits for the TaskManagers' answers
PROBE_TIMEOUT_S = 10.0


def is_local(url: str) -> bool:
    """True for a directory on each host's own file system.

    >>> is_local("/data/checkpoints"), is_local("file:///data/cp"), is_local("s3://bucket/cp")
    (True, True, False)
    """
    return urlparse(url).scheme in ("", "file", "local")


@dataclass(frozen=True)
class ProbeTarget:
    """A TaskManager to ask: its id, its host, and how to send it a message."""

    tm_id: str
    host: str
    send: Callable[[Message], None]


@dataclass
class _Probe:
    waiting: set[str]
    errors: dict[str, str] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)


def _write_marker(url: str, job_id: str, probe_id: str) -> str:
    """Write the file the TaskManagers look for in the job's directory (which
    ``check_writable`` has just made); its local path."""
    path = urlparse(url).path if "://" in url else url
    marker = os.path.join(path, job_id, f".jobmanager-probe-{probe_id}")
    with open(marker, "wb") as f:
        f.write(b"flinkpy")
    return marker


class StorageProbes:
    """The probes in flight, answered by :meth:`answered` from the TaskManagers' connections."""

    def __init__(self, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._probes: dict[str, _Probe] = {}

    def check(self, targets: Iterable[ProbeTarget], url: str, job_id: str) -> None:
        """Ask every target whether it can write ``url``; ``ConfigurationError`` naming the
        first that cannot (the others with it). Call without the dispatcher's lock held."""
        targets = list(targets)
        if not targets:
            return
        probe_id = uuid.uuid4().hex
        probe = _Probe(waiting={t.tm_id for t in targets})
        hosts = {t.tm_id: t.host for t in targets}
        marker = _write_marker(url, job_id, probe_id)
        with self._lock:
            self._probes[probe_id] = probe
        try:
            for t in targets:
                try:
                    t.send(ProbeStorage(probe_id=probe_id, url=url, job_id=job_id, marker=marker))
                except OSError:
                    self.answered(StorageProbed(probe_id=probe_id, tm_id=t.tm_id))  # lost: the heartbeat's business
            if not probe.done.wait(self.timeout_s):
                log.warning("job %s: TaskManagers %s did not say within %.0f s whether they can write %s",
                            job_id, sorted(probe.waiting), self.timeout_s, url)
        finally:
            with self._lock:
                self._probes.pop(probe_id, None)
            try:
                os.unlink(marker)
            except OSError:
                pass
        if probe.errors:
            tm_id, error = sorted(probe.errors.items())[0]
            others = sorted(set(probe.errors) - {tm_id})
            also = f" (and {', '.join(others)})" if others else ""
            raise ConfigurationError(
                f"TaskManager {tm_id} on host {hosts[tm_id]}{also} cannot use the checkpoint directory {url}: {error}",
                remedy=f"set {KEY} to a directory every host can write (a shared mount or an object store such as s3://), "
                "or fix it on that host",
            )

    def answered(self, msg: StorageProbed) -> None:
        with self._lock:
            probe = self._probes.get(msg.probe_id)
            if probe is None:
                return  # answered after its timeout
            probe.waiting.discard(msg.tm_id)
            if msg.error:
                probe.errors[msg.tm_id] = msg.error
            if not probe.waiting:
                probe.done.set()
