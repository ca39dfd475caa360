"""A JobManager's side of high availability: contending for leadership, taking over the jobs,
and keeping in ZooKeeper (and the HA storage directory) what the next leader will need.

Lifecycle of a JobManager started with ``high-availability.type: zookeeper``:

1. It serves REST and RPC at once, as a *standby*: job requests are refused with the leader's
   address (the CLI looks the leader up in ZooKeeper, so operators rarely see this).
2. It joins the election. Elected, it takes the next *epoch* (the fencing token of its term),
   recovers every job listed in ZooKeeper — same job id, restored from the job's latest completed
   checkpoint, with its checkpoint, exception and restart history — and then publishes itself as
   the leader. TaskManagers follow the published leader and register with its epoch.
3. If its ZooKeeper session is suspended or lost, it stops leading at once: it re-executes
   itself, coming back as a fresh standby (its TaskManagers see the connection close and cancel
   their tasks; the next leader restarts them). Its ZooKeeper writes are fenced besides (see
   :mod:`flinkpy.ha.services`), so a JobManager that has not noticed yet cannot write either.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from flinkpy.clock import now_ms
from flinkpy.ha.services import FencedError, ZooKeeperHa
from flinkpy.processes import module_command

if TYPE_CHECKING:
    from flinkpy.jobmanager.checkpointing import JobCheckpointing
    from flinkpy.jobmanager.dispatcher import Dispatcher, JobRecord
    from flinkpy.jobmanager.execution_graph import ExecutionGraph

log = logging.getLogger("flinkpy.jobmanager.leadership")

#: how often changed job histories are written to the HA storage directory
HISTORY_INTERVAL_S = 0.3
#: how long a new leader waits for TaskManagers to offer the slots a recovered job needs
RECOVERY_SLOT_WAIT_S = 60.0


class JobHa:
    """The HA hooks of one job's checkpointing (called from the dispatcher's threads)."""

    def __init__(self, leadership: Leadership, job_id: str) -> None:
        self._l = leadership
        self.job_id = job_id

    def reserve(self, checkpoint_id: int) -> bool:
        try:
            self._l.ha.reserve_checkpoint_id(self.job_id, checkpoint_id)
            return True
        except Exception as e:  # noqa: BLE001 - fenced or ZooKeeper unreachable: do not trigger
            log.warning("not triggering checkpoint %d of job %s: %s", checkpoint_id, self.job_id, e)
            return False

    def completed(self, checkpoint_id: int, directory: str, retained: int) -> None:
        """Raises when the pointer cannot be written: the checkpoint then counts as failed."""
        self._l.ha.add_checkpoint(self.job_id, checkpoint_id, directory, retained)


class Leadership:
    def __init__(self, dispatcher: Dispatcher, ha: ZooKeeperHa, jm_id: str, info: dict[str, Any]) -> None:
        self.dispatcher = dispatcher
        self.ha = ha
        self.jm_id = jm_id
        self.info = info  # this JobManager's addresses, published when it leads
        self._saved: dict[str, tuple[Any, ...]] = {}
        self.recovering: set[str] = set()
        #: set before a clean stop closes the session: losing it then is no reason to restart
        self.stopping = False

    # -- the dispatcher's hooks ----------------------------------------------------------------

    def standby_message(self) -> str:
        leader = None
        try:
            leader = self.ha.leader()
        except Exception:  # noqa: BLE001
            pass
        where = f"; the leader is {leader['id']} at {leader['rest_address']}" if leader else "; no leader is elected right now"
        return f"JobManager {self.jm_id} is a standby{where}"

    def for_job(self, job_id: str) -> JobHa:
        return JobHa(self, job_id)

    def job_submitted(self, job_id: str, document: dict[str, Any]) -> None:
        try:
            self.ha.put_job(job_id, document)
        except FencedError as e:
            from flinkpy.errors import ConflictError

            raise ConflictError(str(e), remedy="submit again: the CLI finds the new leader") from None

    def job_terminated(self, job_id: str) -> None:
        def remove() -> None:
            try:
                self._save_history(job_id)
                self.ha.remove_job(job_id)
            except Exception as e:  # noqa: BLE001
                log.warning("could not remove job %s from ZooKeeper: %s", job_id, e)

        threading.Thread(target=remove, name="ha-remove-job", daemon=True).start()

    @staticmethod
    def apply_history(graph: ExecutionGraph, checkpointing: JobCheckpointing, history: bytes) -> None:
        """Carry a recovered job's history over from the previous leader (Flink starts afresh)."""
        doc = pickle.loads(history)
        g = doc["graph"]
        graph.exceptions = g["exceptions"]
        graph.root_exception = g["root_exception"]
        graph.restarts = g["restarts"]
        graph.events = g["events"]
        graph.timestamps["CREATED"] = g["created"]
        c = doc["checkpoints"]
        cc = checkpointing.coordinator
        for name in ("num_restored", "num_completed", "num_failed", "latest_completed_checkpoint", "latest_savepoint", "latest_failed", "summary"):
            setattr(cc, name, c[name])
        cc._records.update(c["records"])
        cc.next_id = max(cc.next_id, c["next_id"])
        if "savepoints" in doc:  # the schedule as last set, the savepoint history and the start point
            checkpointing.history = doc["savepoints"]

    # -- histories ------------------------------------------------------------------------------

    def _history(self, rec: JobRecord) -> tuple[tuple[Any, ...], bytes]:
        from flinkpy.jobmanager.checkpoint_coordinator import PendingCheckpoint

        g, cc = rec.graph, rec.checkpointing.coordinator
        h = rec.checkpointing.history
        fingerprint = (len(g.events), len(g.exceptions), g.restarts, cc.num_completed, cc.num_failed, cc.num_restored, g.state,
                       h.schedule, len(h.entries), h.disposed)
        doc = {
            "graph": {"exceptions": g.exceptions, "root_exception": g.root_exception, "restarts": g.restarts,
                      "events": g.events, "created": g.timestamps.get("CREATED")},
            "checkpoints": {
                "num_restored": cc.num_restored, "num_completed": cc.num_completed, "num_failed": cc.num_failed,
                "latest_completed_checkpoint": cc.latest_completed_checkpoint, "latest_savepoint": cc.latest_savepoint,
                "latest_failed": cc.latest_failed, "summary": cc.summary, "next_id": cc.next_id,
                "records": {k: r for k, r in cc._records.items() if not isinstance(r, PendingCheckpoint)},
            },
            "savepoints": h,
        }
        return fingerprint, pickle.dumps(doc, protocol=5)

    def _save_history(self, job_id: str) -> None:
        d = self.dispatcher
        with d.lock:
            rec = d.jobs.get(job_id)
            if rec is None:
                return
            fingerprint, data = self._history(rec)
        if self._saved.get(job_id) != fingerprint:
            self.ha.save_history(job_id, data)
            self._saved[job_id] = fingerprint

    def _history_loop(self) -> None:
        while True:
            time.sleep(HISTORY_INTERVAL_S)
            with self.dispatcher.lock:
                running = [j for j, r in self.dispatcher.jobs.items() if not r.graph.is_terminal()]
            for job_id in running:
                try:
                    self._save_history(job_id)
                except Exception as e:  # noqa: BLE001
                    log.warning("could not save the history of job %s: %s", job_id, e)

    # -- leadership -----------------------------------------------------------------------------

    def contend(self) -> None:
        """Join the election (in a thread); lead when elected; never return while leading."""
        self.ha.on_session_change(self._on_session)
        threading.Thread(target=self._elect, name="ha-election", daemon=True).start()

    def _elect(self) -> None:
        while not self.stopping:
            try:
                self.ha.run_election(self.jm_id, self._lead)
            except Exception as e:  # noqa: BLE001 - ZooKeeper away while waiting: contend again
                if self.stopping:
                    return
                log.warning("leader election interrupted (%s: %s); contending again", type(e).__name__, e)
                time.sleep(0.2)

    def _on_session(self, state: str) -> None:
        if state in ("SUSPENDED", "LOST") and self.dispatcher.leader_epoch is not None and not self.stopping:
            log.error("ZooKeeper session %s: JobManager %s stops leading (epoch %s) and restarts as a standby",
                      state, self.jm_id, self.dispatcher.leader_epoch)
            revoke()

    def _lead(self) -> None:
        try:
            self._take_over()
        except Exception:  # noqa: BLE001 - half a takeover is no leadership: start afresh
            log.exception("taking over as leader failed; JobManager %s restarts as a standby", self.jm_id)
            revoke()
        threading.Event().wait()  # leadership lasts as long as this process does

    def _take_over(self) -> None:
        epoch = self.ha.next_epoch()
        log.info("JobManager %s was granted leadership (epoch %d)", self.jm_id, epoch)
        job_ids = self.ha.job_ids()
        self.recovering.update(job_ids)  # asked about before they are back: "recovering", not 404
        self.dispatcher.leader_epoch = epoch
        self.ha.publish_leader({**self.info, "id": self.jm_id, "epoch": epoch, "since": time.time()})
        print(f"JobManager {self.jm_id} is the leader (epoch {epoch})", file=sys.stderr, flush=True)
        threading.Thread(target=self._history_loop, name="ha-history", daemon=True).start()
        for job_id in job_ids:
            threading.Thread(target=self._recover, args=(job_id,), name=f"ha-recover-{job_id[:8]}", daemon=True).start()

    def _recover(self, job_id: str) -> None:
        from flinkpy.checkpoint.storage import CheckpointStorage

        d = self.dispatcher
        try:
            document = self.ha.get_job(job_id)
            latest = self.ha.latest_checkpoint(job_id)
            if latest is not None:
                checkpoint_id, directory = latest
                document["restore"] = [directory, CheckpointStorage(directory).read_metadata(directory)]
                log.info("recovering job %s from checkpoint %d at %s", job_id, checkpoint_id, directory)
            else:
                log.info("recovering job %s: no completed checkpoint, it starts from the beginning", job_id)
            history = self.ha.load_history(job_id)
            needed = max(int(v["parallelism"]) for v in document["meta"]["vertices"])
            deadline = time.monotonic() + RECOVERY_SLOT_WAIT_S
            while time.monotonic() < deadline:
                with d.lock:
                    if d.slots.available >= needed:
                        break
                time.sleep(0.01)
            d.submit(document, job_id=job_id, history=history)
            with d.lock:
                rec = d.jobs[job_id]
                rec.graph.events.append({"timestamp": now_ms(), "type": "recovered-by-leader",
                                         "jobmanager": self.jm_id, "epoch": d.leader_epoch})
                d.changed.notify_all()
        except Exception:  # noqa: BLE001 - one job's recovery must not stop the others
            log.exception("could not recover job %s", job_id)
        finally:
            self.recovering.discard(job_id)


    def stop(self) -> None:
        """A clean stop: give up the session (and so the leadership) without restarting."""
        self.stopping = True
        self.ha.stop()


def revoke() -> None:
    """Stop leading now: replace this process by a fresh standby JobManager (same arguments)."""
    sys.stderr.flush()
    command = module_command("flinkpy.jobmanager.process", *sys.argv[1:])
    os.execv(command[0], command)
