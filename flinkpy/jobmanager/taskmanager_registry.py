"""The TaskManagers registered with this JobManager: their connections, slots and heartbeats.

The registry is bookkeeping only: it records who registered, offers their slots to the
``SlotPool``, notes heartbeats, says which TaskManagers have gone silent for longer than
``heartbeat.timeout``, and sends control messages to them. What a lost TaskManager means for the
jobs is the Dispatcher's business. Callers hold the JobManager's lock.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from flinkpy.clock import now_ms
from flinkpy.jobmanager.slot_pool import SlotPool
from flinkpy.network.connection import Connection
from flinkpy.protocol import Message
from flinkpy.protocol.messages import RegisterTaskManager

log = logging.getLogger("flinkpy.jobmanager")


@dataclass
class TaskManagerRecord:
    """One registered TaskManager: how to reach it and what it offers."""

    tm_id: str
    conn: Connection
    pid: int
    host: str
    slots: int
    log_path: str
    stdout_path: str
    #: monotonic time of the last heartbeat (or of the registration)
    last_heartbeat: float = field(default_factory=time.monotonic)
    #: when it registered (the JobManager's clock): the age of its figures before its first report
    registered_ms: int = field(default_factory=now_ms)


class TaskManagerRegistry:
    """TaskManagers by id, the slots they offer, and their heartbeats."""

    def __init__(self, heartbeat_timeout_s: float) -> None:
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.taskmanagers: dict[str, TaskManagerRecord] = {}
        self.slots = SlotPool()

    def add(self, conn: Connection, info: RegisterTaskManager) -> TaskManagerRecord:
        """Record a TaskManager that registered (``info`` is its registration message)."""
        rec = TaskManagerRecord(
            tm_id=info.tm_id,
            conn=conn,
            pid=info.pid,
            host=info.host,
            slots=int(info.slots),
            log_path=info.log_path,
            stdout_path=info.stdout_path,
        )
        self.taskmanagers[rec.tm_id] = rec
        self.slots.add_taskmanager(rec.tm_id, rec.slots)
        return rec

    def heartbeat(self, tm_id: str) -> None:
        rec = self.taskmanagers.get(tm_id)
        if rec is not None:
            rec.last_heartbeat = time.monotonic()

    def late(self) -> list[str]:
        """TaskManagers silent for longer than the heartbeat timeout."""
        now = time.monotonic()
        return [tm for tm, rec in self.taskmanagers.items() if now - rec.last_heartbeat > self.heartbeat_timeout_s]

    def remove(self, tm_id: str, conn: Connection | None = None) -> TaskManagerRecord | None:
        """Forget a lost TaskManager and its slots; its connection is closed, so that a
        TaskManager declared lost (frozen past the heartbeat timeout, say) finds it closed when it
        wakes up, drops its stale tasks (fencing) and registers again on a new connection. With
        ``conn``, only the registration made over that connection is forgotten: the end of an old
        connection must not remove the TaskManager that registered again since."""
        rec = self.taskmanagers.get(tm_id)
        if rec is None or (conn is not None and rec.conn is not conn):
            return None
        del self.taskmanagers[tm_id]
        if rec is not None:
            rec.conn.close()
            self.slots.remove_taskmanager(tm_id)
        return rec

    def send(self, tm_id: str | None, message: Message) -> None:
        """Send a control message to a TaskManager; one that is gone (or going) is skipped:
        its loss reaches the jobs through ``taskmanager_lost``."""
        rec = self.taskmanagers.get(tm_id) if tm_id else None
        if rec is None:
            return
        try:
            rec.conn.send(message)
        except OSError as e:
            log.warning("sending %s to TaskManager %s failed: %s", message.wire_name, tm_id, e)
