"""A TaskManager finding its JobManager: at start, after the JobManager dropped it, and (with
high availability) whenever the leader changes.

The JobManager publishes its RPC endpoint in the cluster home (``jobmanager.json``) once it
listens. A TaskManager started again while the JobManager is itself being started again (after a
crash, by the supervisor) finds the old one's address there, or none: it waits for an address
that answers, and after :data:`JOBMANAGER_WAIT_S` says so in one line and exits, instead of dying
of the refused connection with a traceback.
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from flinkpy.errors import ExitCode
from flinkpy.network.auth import AuthenticationFailed

if TYPE_CHECKING:
    from flinkpy.taskmanager.process import TaskManager

log = logging.getLogger("flinkpy.taskmanager")

T = TypeVar("T")

#: a TaskManager's exit code when the JobManager refuses its secret
CONFIGURATION_EXIT = ExitCode.CONFIGURATION

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
        except AuthenticationFailed as e:
            # waiting does not mend a wrong secret: say so at once
            print(f"flinkpy-taskmanager: the JobManager at {host}:{port} refused TaskManager {tm_id}: {e}", file=sys.stderr)
            sys.exit(CONFIGURATION_EXIT)
        except ssl.SSLError as e:
            if not isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
                # nor does it mend a certificate one side does not trust (security.ssl.internal.*)
                print(f"flinkpy-taskmanager: TLS with the JobManager at {host}:{port} failed for TaskManager {tm_id}: {e}; "
                      "check security.ssl.internal.keystore and .truststore on both hosts", file=sys.stderr)
                sys.exit(CONFIGURATION_EXIT)
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
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


def serve_and_rejoin(tm: TaskManager, logs: tuple[str, str], jobmanager: Callable[[], tuple[str, int]]) -> None:
    """Standalone: serve the JobManager until it says Shutdown. When it closes our connection
    instead — it declared us lost, e.g. after we were paused past ``heartbeat.timeout``, and
    failed our tasks — drop every task and register again with fresh slots, as long as the
    JobManager is there; when it is gone, stop (a TaskManager never outlives its cluster)."""
    while True:
        tm.register(*logs)
        tm.serve(follow_leader=True)  # on a closed connection: tasks killed, returns
        if tm.stopping:
            return
        try:
            host, port = jobmanager()
            tm.attach(tm.dial(host, port, timeout=5.0))
        except (OSError, ValueError, KeyError) as e:
            log.info("the JobManager is gone (%s); stopping TaskManager %s", e, tm.tm_id)
            tm.shutdown()
            return
        log.warning("the JobManager dropped TaskManager %s; its tasks are gone, registering again", tm.tm_id)


def published_jobmanager(home: Path) -> tuple[str, int]:
    """The JobManager's RPC endpoint as it published it in the home (KeyError/ValueError/OSError when it did not)."""
    info = json.loads((home / "jobmanager.json").read_text())
    return info["rpc_host"], int(info["rpc_port"])


def follow_leaders(tm: TaskManager, ha_config: dict[str, Any], logs: tuple[str, str]) -> None:
    """High availability: register with whichever JobManager ZooKeeper names the leader; when
    the leader changes (or its connection closes), drop everything and register with the next.
    A leader that is replaced while we are still connected is cut off at once (fencing)."""
    from flinkpy.ha.services import HaConfig, LeaderFollower, ZooKeeperHa

    ha = ZooKeeperHa(HaConfig.from_dict(ha_config)).start_patiently(f"TaskManager {tm.tm_id}")
    follower = LeaderFollower(ha)

    def cut_off_stale(info: dict[str, Any] | None) -> None:
        if tm.jm is not None and (info is None or info.get("epoch") != tm.epoch):
            log.warning("leader changed (epoch %s -> %s): leaving the old one", tm.epoch, (info or {}).get("epoch"))
            tm.jm.close()

    ha.watch_leader(cut_off_stale)
    while not tm.stopping:
        leader = follower.wait_for(lambda info: info is not None, timeout_s=1.0)
        if leader is None:
            continue
        try:
            tm.connect_to_leader(leader)
        except OSError as e:
            log.warning("cannot reach the leader %s (epoch %s): %s", leader.get("id"), leader.get("epoch"), e)
            follower.wait_for(lambda info, e=leader.get("epoch"): info is None or info.get("epoch") != e, timeout_s=0.2)
            continue
        tm.register(*logs)
        log.info("following leader %s (epoch %s)", leader.get("id"), leader.get("epoch"))
        tm.serve(follow_leader=True)
        # the same leader may still be there (a broken connection): retry after a short pause,
        # sooner when a new leader is published
        follower.wait_for(lambda info, e=leader.get("epoch"): info is None or info.get("epoch") != e, timeout_s=0.2)
    ha.stop()
