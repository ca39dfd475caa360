"""The supervisor process of a local cluster: ``python -m flinkpy.cluster.supervisor --home DIR``.

One per cluster, started by ``flinkpy cluster start`` and by the embedded cluster once their
processes run. It watches every process in the home's record (``cluster.json``) — also those
``cluster add-taskmanager`` and ``add-jobmanager`` start later — and starts a dead one again,
under the same id, command line and log files, when :class:`~flinkpy.cluster.supervision.Supervision`
says so; the record keeps the new pid and the count of restarts. ``cluster stop`` stops the
supervisor first (SIGTERM: it exits at once and restarts nothing more), then the processes.

With ``--client-pid`` (the embedded cluster of ``flinkpy run`` / ``python JOB.py``) it also
watches the client: when the client is gone — even SIGKILLed, when nothing of it could clean up —
it stops every process of the cluster (tasks and launchers included) and removes the temporary
home with its secret. The client stops its cluster with SIGTERM to the supervisor too, but then
the supervisor does not leave at once: it restarts nothing more, says so (``supervisor.draining``
in the home), and watches until the cluster's processes have ended — ending them itself if the
client dies meanwhile, so that a process the client was waiting for is never left behind.

Decisions are in :mod:`~flinkpy.cluster.supervision`; this module only looks at processes,
starts them and writes the record.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from flinkpy.cluster.home import ClusterHome, ClusterInfo, ProcessInfo, alive, processes_started_in, read_record, record_lock, write_record
from flinkpy.cluster.spawning import open_private, spawn, wait_gone
from flinkpy.cluster.supervision import Action, ClusterLost, GiveUp, RestartPolicy, Respawn, Supervision, Waiting
from flinkpy.processes import create_time, process_tree, running
from flinkpy.signals import StopSignals

log = logging.getLogger("flinkpy.supervisor")

#: the file the supervisor creates in the home once its SIGTERM handler is in place (a SIGTERM
#: before would end it at once, and with it the watch over an embedded cluster's client)
READY = "supervisor.ready"
#: the file an embedded cluster's supervisor creates in the home once it restarts nothing more
DRAINING = "supervisor.draining"

#: how often processes are looked at: a restart's backoff is measured from the death noticed here
POLL_S = 0.1


def supervised_processes(info: ClusterInfo) -> dict[str, tuple[str, ProcessInfo]]:
    """Every process of the record by id, with its kind."""
    procs: dict[str, tuple[str, ProcessInfo]] = {tm.id: ("taskmanager", tm) for tm in info.taskmanagers}
    for jm in info.jobmanagers if info.ha is not None else [info.jobmanager]:
        procs[jm.id] = ("jobmanager", jm)
    return procs


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def pin_rest_port(argv: list[str], rest_address: str) -> list[str]:
    """``argv`` with its ``--rest-port`` set to the port of ``rest_address``.

    >>> pin_rest_port(["jm", "--rest-port", "0", "--home", "h"], "http://127.0.0.1:40123")
    ['jm', '--rest-port', '40123', '--home', 'h']
    """
    port = rest_address.rstrip("/").rsplit(":", 1)[-1]
    out = list(argv)
    if "--rest-port" in out and port.isdigit():
        out[out.index("--rest-port") + 1] = port
    return out


class Supervisor:
    """The I/O around :class:`Supervision`: polls the record's processes, carries out its actions."""

    def __init__(self, home: ClusterHome, policies: dict[str, RestartPolicy], ha: bool, client: tuple[int, float] | None, remove_home: bool,
                 stop: StopSignals | None = None):
        self.home = home
        # a background cluster's lone JobManager is started again (fresh); an embedded one's is not
        self.state = Supervision(policies, ha=ha, restart_lone_jobmanager=not ha and client is None)
        self.client = client
        self.remove_home = remove_home
        #: SIGTERM: restart nothing more (noted by the handler, acted on by the loop)
        self.stop = stop
        #: pid and start time of each process as last seen, to tell a restart by someone else
        self.seen: dict[str, tuple[int, float]] = {}
        #: the record's processes as last read (to stop them when the record is gone with the home)
        self.known: list[ProcessInfo] = []

    @property
    def stopping(self) -> bool:
        return self.stop is not None and self.stop.requested

    def run(self) -> None:
        while not self.stopping:
            self._reap_children()
            if self._client_gone():
                self.stop_cluster()
                return
            if not self.home.path.is_dir():
                # deleted under a running cluster: no command could find (or stop) it any more
                log.warning("the cluster home %s is gone: stopping the cluster", self.home.path)
                self.stop_cluster()
                return
            if not self._step():
                return
            if self.stop is not None:
                self.stop.wait(POLL_S)
            else:
                time.sleep(POLL_S)
        if self.client is not None:
            self.drain()

    def _client_gone(self) -> bool:
        if self.client is None or running(*self.client):
            return False
        log.warning("the client (pid %d) of this embedded cluster is gone: stopping the cluster", self.client[0])
        return True

    def drain(self) -> None:
        """An embedded cluster's client stops its cluster: restart nothing more, and say so
        (``supervisor.draining`` in the home: the record is final), then watch until every
        process of the cluster has ended — and end them all if the client dies first (killed
        while it waited for them), so that nothing outlives it whatever the path."""
        with record_lock(self.home):
            info = read_record(self.home)
            try:
                (self.home.path / DRAINING).touch()
            except OSError:
                pass
        procs = [p for _, p in supervised_processes(info).values()] if info is not None else []
        tree = process_tree(p.pid for p in procs if alive(p))
        log.info("the client stops the cluster: restarting nothing more, watching %d process(es) until they end", len(tree))
        while True:
            self._reap_children()
            if not wait_gone(tree, 0):
                return
            if self._client_gone():
                self.stop_cluster(tree)
                return
            time.sleep(POLL_S)

    def _step(self) -> bool:
        """One look at the processes; False when there is nothing left to supervise."""
        with record_lock(self.home):
            info = read_record(self.home)
            if info is None:
                # no record: the cluster was stopped (or not written yet, right after start)
                return self.client is not None or not self.seen
            procs = supervised_processes(info)
            self.known = [p for _, p in procs.values()]
            now = _now_ms()
            for gone in set(self.seen) - set(procs):
                self.state.forget(gone)
                self.seen.pop(gone)
            actions: list[Action] = []
            for proc_id, (kind, proc) in procs.items():
                ident = (proc.pid, proc.create_time)
                if self.seen.get(proc_id) != ident:
                    self.seen[proc_id] = ident
                    self.state.started(proc_id, kind, now)
                if not alive(proc):
                    actions += self.state.exited(proc_id, now)
            actions += self.state.due(now)
            changed = False
            for action in actions:
                changed |= self._perform(action, info, procs)
            if changed:  # also when stopping: a process we started must be in the record
                write_record(self.home, info)
        if self.state.lost and self.client is None:
            log.info("nothing left to supervise")
            return False
        return True

    def _perform(self, action: Action, info: ClusterInfo, procs: dict[str, tuple[str, ProcessInfo]]) -> bool:
        """Carry out one decision; True when the record changed."""
        if isinstance(action, Waiting):
            kind, proc = procs[action.proc_id]
            log.warning("%s %s (pid %d) died: starting it again in %d ms (restart %d in a row)",
                        kind, action.proc_id, proc.pid, action.backoff_ms, action.attempt)
        elif isinstance(action, GiveUp):
            log.error("%s is not started again: %s", action.proc_id, action.reason)
        elif isinstance(action, ClusterLost):
            log.warning("%s; TaskManagers are not restarted", action.reason)
        elif isinstance(action, Respawn) and not self.stopping:
            kind, proc = procs[action.proc_id]
            if kind == "jobmanager" and info.ha is None:
                # the new JobManager answers where the old one did: the record's REST address
                # (a port chosen as 0 at start would otherwise change) stays true
                proc.argv = pin_rest_port(proc.argv, info.rest_address)
                log.warning("jobmanager %s started again without high availability: the jobs it ran are gone "
                            "(resume them from their checkpoints: flinkpy run --from-latest DIR)", proc.id)
            return self._respawn(kind, proc)
        return False

    def _respawn(self, kind: str, proc: ProcessInfo) -> bool:
        if not proc.argv:
            log.error("%s %s has no recorded command line: cannot start it again", kind, proc.id)
            return False
        out: Any = None
        opened = None
        if kind == "taskmanager":
            # what jobs print: the TaskManager's .out file, or (embedded) our own stdout
            opened = open_private(proc.stdout_path) if proc.stdout_path else None
            out = opened if opened is not None else sys.stdout.fileno()
        env = {"PYTHONUNBUFFERED": "1"}
        if kind == "taskmanager":
            env["FLINKPY_STDOUT_FILE"] = proc.stdout_path
        try:
            child = spawn(proc.argv, Path(proc.log_path), out, detach=True, extra_env=env)
        except OSError as e:
            log.error("starting %s %s again failed: %s", kind, proc.id, e)
            # as if it had started and died at once: the next look backs off again (or gives up)
            self.state.started(proc.id, kind, _now_ms())
            return False
        finally:
            if opened is not None:
                opened.close()
        proc.pid, proc.create_time = child.pid, create_time(child.pid)
        proc.restarts += 1
        self.seen[proc.id] = (proc.pid, proc.create_time)
        self.state.started(proc.id, kind, _now_ms())
        log.info("started %s %s again (pid %d, restart %d)", kind, proc.id, child.pid, proc.restarts)
        return True

    @staticmethod
    def _reap_children() -> None:
        """Processes we started and that died are our zombies until we wait for them."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def stop_cluster(self, known: list[Any] | None = None) -> None:
        """The client of an embedded cluster is gone, or the home is: stop every process (with
        ``known``, the processes taken before), then remove the home."""
        import psutil

        info = read_record(self.home) if self.home.path.is_dir() else None
        if info is not None:
            procs = [p for _, p in supervised_processes(info).values()]
        else:
            # the home is gone with the record: what was last seen, and whatever else was started
            # in that home (it may have gone before this supervisor read the record even once)
            procs = self.known + [p for p, _ in processes_started_in(self.home) if p.pid != os.getpid()]
        tree = process_tree(p.pid for p in procs if alive(p)) + list(known or [])
        for p in tree:
            try:
                p.kill()  # nobody waits for a graceful end: the job's client is gone
            except psutil.Error:
                pass
        wait_gone(tree, 10)
        self._reap_children()
        if self.remove_home:
            shutil.rmtree(self.home.path, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="flinkpy-supervisor")
    ap.add_argument("--home", required=True)
    ap.add_argument("--policies", required=True, help="the RestartPolicy of each process kind, as JSON")
    ap.add_argument("--ha", action="store_true", help="JobManagers have standbys: a dead one is started again")
    ap.add_argument("--client-pid", type=int, help="an embedded cluster's client: when it is gone, stop the cluster")
    ap.add_argument("--client-started", type=float, default=0.0, help="the client's start time (pids are reused)")
    ap.add_argument("--remove-home", action="store_true", help="remove the home once the cluster is stopped (embedded)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    policies = {kind: RestartPolicy(**p) for kind, p in json.loads(args.policies).items()}
    client = (args.client_pid, args.client_started) if args.client_pid else None
    # SIGTERM is `cluster stop` (or the embedded cluster's own end): stop restarting, touch nothing
    stop = StopSignals(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sup = Supervisor(ClusterHome(Path(args.home)), policies, args.ha, client, args.remove_home, stop)
    try:
        (sup.home.path / READY).touch()
    except OSError:
        pass
    log.info("supervising the cluster in %s (pid %d)", args.home, os.getpid())
    sup.run()
    log.info("supervisor stops")


if __name__ == "__main__":
    main()
