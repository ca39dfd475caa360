"""A TaskManager finding its JobManager (without high availability) at start.

The JobManager publishes its RPC endpoint in the cluster home (``jobmanager.json``) once it
listens. A TaskManager started again while the JobManager is itself being started again (after a
crash, by the supervisor) finds the old one's address there, or none: it waits for an address
that answers, and after :data:`JOBMANAGER_WAIT_S` says so in one line and exits, instead of dying
of the refused connection with a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar

log = logging.getLogger("flinkpy.taskmanager")

T = TypeVar("T")

#: how long a TaskManager waits for its JobManager to answer
JOBMANAGER_WAIT_S = 60.0


def when_the_jobmanager_answers(address: Callable[[], tuple[str, int]], connect: Callable[[str, int], T], tm_id: str) -> T:
    """``connect(host, port)`` to the JobManager ``address()`` names, until one answers."""
    deadline = time.monotonic() + JOBMANAGER_WAIT_S
    waiting_logged = False
    while True:
        host, port = address()
        try:
            return connect(host, port)
        except OSError as e:
            if time.monotonic() >= deadline:
                print(f"flinkpy-taskmanager: the JobManager at {host}:{port} did not answer within {JOBMANAGER_WAIT_S:.0f} s ({e})",
                      file=sys.stderr)
                sys.exit(3)
            if not waiting_logged:
                log.info("TaskManager %s: the JobManager at %s:%s does not answer (%s); waiting for it", tm_id, host, port, e)
                waiting_logged = True
            time.sleep(0.2)


def wait_for_jobmanager(home: Path, timeout_s: float = JOBMANAGER_WAIT_S) -> tuple[str, int]:
    """The RPC endpoint the JobManager published in ``home``, once it is there."""
    path = home / "jobmanager.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            info = json.loads(path.read_text())
            return info["rpc_host"], int(info["rpc_port"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            time.sleep(0.01)
    print(f"flinkpy-taskmanager: no JobManager published its address in {path} within {timeout_s:.0f} s", file=sys.stderr)
    sys.exit(3)
