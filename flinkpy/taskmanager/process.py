"""The TaskManager process: offers slots to the JobManager and runs each task in a subprocess.

It registers with the JobManager over an authenticated control connection, heartbeats, and for
every deployed task starts ``python -m flinkpy.task.process`` with a socketpair as the task's
control channel. It forwards the task's reports (listening, running, finished, failed) and
reports the final state only once the task process has exited, so a FINISHED task has released
everything. Task processes are forked by the TaskManager's launcher (``zygote.py``), which has the
engine already imported, so a task starts in milliseconds. A task process that dies without a report — SIGKILL, segfault, out of memory — is
reported FAILED with its exit status, at once (its control socket closes).

When the JobManager connection closes the TaskManager kills its tasks; it registers again when
the JobManager is still there (it declared this TaskManager lost, after a pause past the
heartbeat timeout, say) and exits when it is gone: no orphans.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flinkpy.addresses import LOOPBACK, Endpoint
from flinkpy.config import load_config
from flinkpy.checkpoint.writability import check_writable
from flinkpy.errors import ConfigurationError, FlinkpyError
from flinkpy.logfiles import rotate_process_output
from flinkpy.network.auth import read_secret
from flinkpy.network.connection import Connection, connect
from flinkpy.network.tls import client_context, internal_files
from flinkpy.protocol import HandlerTable, Message, ProtocolError
from flinkpy.protocol.deployment import DeployTask, ReleaseJob, TaskDeploymentDescriptor, TlsFiles
from flinkpy.protocol.messages import (
    CancelTask,
    CheckpointAck,
    CheckpointDecline,
    ConnectTask,
    FinalCommitRequest,
    FromTask,
    Heartbeat,
    KillTask,
    KillTaskManager,
    PauseTask,
    PauseTaskManager,
    ProbeStorage,
    Refused,
    Registered,
    RegisterTaskManager,
    Shutdown,
    StorageOutage,
    StorageProbed,
    TaskControl,
    TaskFailed,
    TaskFinished,
    TaskListening,
    TaskEndOfData,
    TaskMetrics,
    TaskRunning,
    TaskStateChanged,
    ToTask,
)
from flinkpy.signals import StopSignals
from flinkpy.taskmanager.artifacts import ArtifactUnavailableError, JobArtifacts, peer_address
from flinkpy.taskmanager.launcher import ForkedProcess, LauncherFailed, TaskLauncher
from flinkpy.taskmanager.rejoin import follow_leaders, published_jobmanager, serve_and_rejoin, wait_for_jobmanager, when_the_jobmanager_answers
from flinkpy.taskmanager.resources import ResourceReporter

log = logging.getLogger("flinkpy.taskmanager")


@dataclass
class TaskHandle:
    job_id: str
    exec_id: str
    proc: ForkedProcess
    ctrl: Connection
    #: the task's last word: ("FINISHED", metrics) or ("FAILED", failure info)
    final: tuple[str, dict[str, Any]] | None = None
    cancel_requested: bool = False
    #: we escalated a cancel to SIGKILL (so a SIGKILL exit is ours, not a crash)
    killed_by_us: bool = False
    started: float = field(default_factory=time.monotonic)

    @property
    def key(self) -> tuple[str, str]:
        """Execution ids are unique within a job only: tasks are keyed by (job, execution)."""
        return (self.job_id, self.exec_id)


class TaskManager:
    """One worker: its slots, its task processes, and its connection to the JobManager."""

    def __init__(self, tm_id: str, slots: int, home: Path, jm_host: str, jm_port: int, secret: bytes, data: Endpoint, heartbeat_s: float,
                 tls: TlsFiles | None = None):
        self.tm_id = tm_id
        self.slots = slots
        self.home = home
        self.secret = secret
        #: internal TLS (security.ssl.internal.*): the files, handed to every task, and the
        #: context of this TaskManager's own connections to the JobManager
        self.tls = tls
        self.tls_client = client_context(tls, "security.ssl.internal") if tls is not None else None
        #: where the tasks' data channels listen (taskmanager.host, .bind-host, .data.port)
        self.configured_data = data
        self.data = data
        self.heartbeat_s = heartbeat_s
        self.launcher = TaskLauncher()
        #: the jobs' Python files, fetched from the JobManager once per job (the working directory)
        self.artifacts = JobArtifacts(home / "taskmanagers" / tm_id)
        self.jm: Connection | None = None
        if jm_host:
            self.attach(self.dial(jm_host, jm_port, timeout=10.0))
        #: high availability: the leadership term of the JobManager we are registered with
        self.epoch: int | None = None
        self.tasks: dict[tuple[str, str], TaskHandle] = {}
        self.lock = threading.Lock()
        self.stopping = False
        #: an injected storage outage's end (epoch s): handed to tasks deployed before it ends
        self.storage_outage_until = 0.0
        #: the JobManager's messages; a handler returning True ends ``serve``
        self.handlers = HandlerTable(
            f"TaskManager {tm_id}",
            {
                DeployTask: lambda m: self.deploy(m.descriptor),
                ConnectTask: lambda m: self._to_task((m.job_id, m.exec_id), m),
                CancelTask: lambda m: self.cancel((m.job_id, m.exec_id)),
                ToTask: lambda m: self._to_task((m.job_id, m.exec_id), m.message),
                KillTaskManager: self._kill_self,
                PauseTaskManager: self._pause_self,
                StorageOutage: self._storage_outage,
                ProbeStorage: self._probe_storage,
                KillTask: self._kill_task,
                PauseTask: self._pause_task,
                Registered: self._registered,
                Refused: self._refused,
                Shutdown: self._shutdown_requested,
                ReleaseJob: lambda m: self.artifacts.release(m.job_id),
            },
        )

    def connect_to_leader(self, leader: dict[str, Any]) -> None:
        """High availability: connect to the JobManager ZooKeeper names as the leader."""
        self.attach(self.dial(leader["rpc_host"], int(leader["rpc_port"]), timeout=10.0))
        self.epoch = int(leader["epoch"])

    def dial(self, host: str, port: int, timeout: float) -> Connection:
        """A control connection to the JobManager at ``host:port`` (with internal TLS when on)."""
        return connect(host, port, self.secret, timeout=timeout, tls=self.tls_client)

    def attach(self, jm: Connection) -> None:
        """Talk to the JobManager over ``jm``; an address the configuration leaves unset is the
        one this connection leaves from: the interface that reaches the cluster."""
        self.jm = jm
        self.data = self.configured_data.with_local_address(jm.sock.getsockname()[0])

    @property
    def host(self) -> str:
        """The address this TaskManager gives the JobManager and its tasks' consumers."""
        return self.data.advertised or LOOPBACK

    def disconnect(self) -> None:
        """High availability: the leader is gone (or changed). Kill every task at once — the next
        leader restarts them from the latest checkpoint — and wait until they are gone, so that
        none of their reports reaches the next leader."""
        jm, self.jm = self.jm, None
        if jm is not None:
            jm.close()
        with self.lock:
            handles = list(self.tasks.values())
        for h in handles:
            h.cancel_requested = True
            h.killed_by_us = True
            try:
                h.proc.kill()
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with self.lock:
                if not self.tasks:
                    return
            time.sleep(0.005)
        log.warning("tasks still alive 10 s after the leader was lost: %s", list(self.tasks))

    def register(self, log_path: str, stdout_path: str) -> None:
        assert self.jm is not None
        self.jm.send(
            RegisterTaskManager(
                tm_id=self.tm_id,
                pid=os.getpid(),
                host=self.host,
                slots=self.slots,
                log_path=log_path,
                stdout_path=stdout_path,
                epoch=self.epoch,
            )
        )

    def serve(self, *, follow_leader: bool = False) -> None:
        """Handle the JobManager's messages until its connection closes; then stop (or, with
        ``follow_leader``, return so the caller can connect to the next leader)."""
        jm = self.jm
        assert jm is not None
        threading.Thread(target=self._heartbeat, args=(jm,), name="heartbeat", daemon=True).start()
        ResourceReporter(self.tm_id, self._pids, lambda: len(self.tasks)).start(jm.send, lambda: not self.stopping and self.jm is jm)
        while True:
            try:
                msg = jm.recv()
            except ProtocolError as e:
                log.error("ignored a message from the JobManager: %s", e)
                continue
            except OSError:
                msg = None
            if msg is None:
                if follow_leader:
                    log.warning("connection to the JobManager (epoch %s) closed; killing the tasks deployed over it", self.epoch)
                    self.disconnect()
                    return
                log.info("JobManager connection closed; stopping TaskManager %s", self.tm_id)
                self.shutdown()
                return
            try:
                if self.handlers(msg):
                    return
            except Exception:  # noqa: BLE001 - one bad message must not kill the TaskManager
                log.exception("handling %s failed", msg.wire_name)

    def _registered(self, msg: Registered) -> None:
        log.info("registered at the JobManager as %s with %d slots", self.tm_id, self.slots)
        print(f"TaskManager {self.tm_id} registered", file=sys.stderr, flush=True)

    def _probe_storage(self, msg: ProbeStorage) -> None:
        """Write and delete a file where the job's checkpoints go, off the JobManager's thread
        (a hung mount must not stop heartbeats), and say whether that worked."""

        def probe() -> None:
            try:
                check_writable(msg.url, msg.job_id)
                error = ""
            except ConfigurationError as e:
                error = e.message
            if not error and msg.marker and not os.path.exists(msg.marker):
                error = (f"it does not see the file {msg.marker} the JobManager wrote there: "
                         "that directory is not the JobManager's (not shared with its host)")
            jm = self.jm
            if jm is not None:
                try:
                    jm.send(StorageProbed(probe_id=msg.probe_id, tm_id=self.tm_id, error=error))
                except OSError:
                    pass

        threading.Thread(target=probe, name="probe-storage", daemon=True).start()

    def _refused(self, msg: Refused) -> None:
        log.warning("the JobManager refused the registration: %s", msg.reason)
        if self.jm is not None:
            self.jm.close()

    def _shutdown_requested(self, msg: Shutdown) -> bool:
        self.shutdown()
        self.stopping = True
        return True

    def _heartbeat(self, jm: Connection) -> None:
        while not self.stopping and self.jm is jm:
            try:
                with self.lock:
                    running = len(self.tasks)
                jm.send(Heartbeat(tm_id=self.tm_id, tasks=running))
            except OSError:
                return
            time.sleep(self.heartbeat_s)

    # -- tasks -------------------------------------------------------------------------------

    def deploy(self, descriptor: TaskDeploymentDescriptor) -> None:
        exec_id = descriptor.exec_id
        try:
            jm = self.jm
            if jm is None:
                return  # between leaders: the next one deploys again
            descriptor = self.artifacts.prepare(descriptor, peer_address(jm.sock), self.secret, self.tls_client)
        except (ArtifactUnavailableError, OSError) as e:
            # no task process: one could not import the job's functions; the cause is the failure
            log.error("cannot deploy %s of job %s: %s", exec_id, descriptor.job_id, e)
            self._send_jm(TaskStateChanged(job_id=descriptor.job_id, exec_id=exec_id, state="FAILED", tm_id=self.tm_id, info={
                "exception": "flinkpy.ArtifactUnavailable", "message": f"{e} (on TaskManager {self.tm_id})",
                "stacktrace": f"ArtifactUnavailable: {e}\n", "task": descriptor.describe()}))
            return
        parent, child = socket.socketpair()
        try:
            proc = self.launcher.spawn(child)
        except LauncherFailed as e:
            log.warning("%s; restarting the launcher", e)
            self.launcher.close()
            self.launcher = TaskLauncher()
            proc = self.launcher.spawn(child)
        child.close()
        ctrl = Connection(parent)
        handle = TaskHandle(descriptor.job_id, exec_id, proc, ctrl)
        with self.lock:
            self.tasks[handle.key] = handle
        outage = self.storage_outage_until if self.storage_outage_until > time.time() else 0.0
        ctrl.send(DeployTask(dataclasses.replace(descriptor, secret=self.secret, host=self.host, bind_host=self.data.bind or self.host,
                                                 data_port=self.data.port, storage_outage_until=outage, tls=self.tls)))
        threading.Thread(target=self._supervise, args=(handle,), name=f"task-{exec_id}", daemon=True).start()
        log.info("deployed %s (pid %d)", exec_id, proc.pid)

    def _send_jm(self, msg: Message) -> None:
        jm = self.jm
        if jm is None:
            return  # between leaders: old tasks' news must not reach the next one
        try:
            jm.send(msg)
        except OSError:
            pass

    def _report(self, handle: TaskHandle, state: str, info: dict[str, Any] | None = None) -> None:
        self._send_jm(TaskStateChanged(job_id=handle.job_id, exec_id=handle.exec_id, state=state, info=info, tm_id=self.tm_id))

    def _task_handlers(self, handle: TaskHandle) -> HandlerTable:
        """What a task process reports, and what the TaskManager does with it."""
        forward = functools.partial(self._forward_from_task, handle)
        return HandlerTable(
            f"TaskManager {self.tm_id} (reports of task {handle.exec_id})",
            {
                TaskListening: forward,
                CheckpointAck: forward,
                CheckpointDecline: forward,
                TaskMetrics: forward,
                FinalCommitRequest: forward,
                TaskEndOfData: forward,
                TaskRunning: lambda m: self._report(handle, "RUNNING"),
                TaskFinished: functools.partial(self._task_finished, handle),
                TaskFailed: functools.partial(self._task_failed, handle),
            },
        )

    def _pids(self) -> list[int]:
        """This TaskManager's process tree: itself, its task launcher, its task processes."""
        with self.lock:
            tasks = [h.proc.pid for h in self.tasks.values()]
        return [os.getpid(), self.launcher.proc.pid, *tasks]

    def _forward_from_task(self, handle: TaskHandle, msg: TaskListening | CheckpointAck | CheckpointDecline | TaskMetrics | FinalCommitRequest | TaskEndOfData) -> None:
        self._send_jm(FromTask(job_id=handle.job_id, exec_id=handle.exec_id, message=msg))

    def _task_finished(self, handle: TaskHandle, msg: TaskFinished) -> None:
        handle.final = ("FINISHED", msg.metrics)

    def _task_failed(self, handle: TaskHandle, msg: TaskFailed) -> None:
        # report at once: the process's exit closes its channels, and the consumers'
        # "producer failed" errors must not reach the JobManager before the real cause
        handle.final = ("FAILED", msg.info())
        self._report(handle, "FAILED", msg.info())

    def _supervise(self, handle: TaskHandle) -> None:
        """Pass the task's reports on until its process ends, then report how it ended."""
        handlers = self._task_handlers(handle)
        while True:
            try:
                msg = handle.ctrl.recv()
            except ProtocolError as e:
                log.error("ignored a message from task %s: %s", handle.exec_id, e)
                continue
            except OSError:
                msg = None
            if msg is None:
                break
            try:
                handlers(msg)
            except ProtocolError as e:
                log.error("ignored a message from task %s: %s", handle.exec_id, e)
        self._report_exit(handle)

    def _report_exit(self, handle: TaskHandle) -> None:
        code = handle.proc.wait()
        handle.ctrl.close()
        with self.lock:
            self.tasks.pop(handle.key, None)
        if handle.final is not None and handle.final[0] == "FINISHED" and code == 0:
            self._report(handle, "FINISHED", handle.final[1])
        elif handle.final is not None and handle.final[0] == "FAILED":
            pass  # reported when the task said so
        elif handle.cancel_requested and not (code == -signal.SIGKILL and not handle.killed_by_us):
            self._report(handle, "CANCELED")
        else:
            # it died by itself — or was killed from outside while a cancel was on its way
            how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
            self._report(
                handle,
                "FAILED",
                {
                    "exception": "flinkpy.TaskProcessExited",
                    "message": f"the task process (pid {handle.proc.pid}) {how} on TaskManager {self.tm_id}",
                    "stacktrace": f"TaskProcessExited: the task process (pid {handle.proc.pid}) {how}\n",
                },
            )

    def _to_task(self, key: tuple[str, str], msg: TaskControl | ConnectTask) -> None:
        with self.lock:
            handle = self.tasks.get(key)
        if handle is not None:
            try:
                handle.ctrl.send(msg)
            except OSError:
                pass

    # -- injected faults (`flinkpy fault ...`; the JobManager validated the target) ----------

    def _kill_self(self, msg: KillTaskManager) -> None:
        log.warning("injecting fault kill-self: signal %s", msg.signal)
        os.kill(os.getpid(), signal.Signals[f"SIG{msg.signal}"])

    def _pause_self(self, msg: PauseTaskManager) -> None:
        log.warning("injecting fault pause-self: %s s", msg.seconds)
        _pause_by_helper(os.getpid(), msg.seconds)

    def _storage_outage(self, msg: StorageOutage) -> None:
        from flinkpy.checkpoint.storage import set_outage

        log.warning("injecting fault storage-outage: until %s", msg.until)
        self.storage_outage_until = msg.until
        set_outage(self.storage_outage_until)
        with self.lock:
            keys = list(self.tasks)
        for key in keys:
            self._to_task(key, StorageOutage(until=self.storage_outage_until))

    def _running_task(self, action: str, job_id: str, exec_id: str) -> TaskHandle | None:
        """The task a fault is aimed at, if its process still runs here."""
        with self.lock:
            handle = self.tasks.get((job_id, exec_id))
        if handle is None or handle.proc.poll() is not None:
            log.warning("fault %s: task %s of job %s is not running here", action, exec_id, job_id)
            return None
        return handle

    def _kill_task(self, msg: KillTask) -> None:
        log.warning("injecting fault kill-task: %s", msg)
        handle = self._running_task("kill-task", msg.job_id, msg.exec_id)
        if handle is not None:
            os.kill(handle.proc.pid, signal.Signals[f"SIG{msg.signal}"])

    def _pause_task(self, msg: PauseTask) -> None:
        log.warning("injecting fault pause-task: %s", msg)
        handle = self._running_task("pause-task", msg.job_id, msg.exec_id)
        if handle is None:
            return
        pid = handle.proc.pid
        os.kill(pid, signal.SIGSTOP)
        # a timer of ours resumes it: we are not the process being stopped
        timer = threading.Timer(msg.seconds, _resume, args=(pid,))
        timer.daemon = True
        timer.start()

    def cancel(self, key: tuple[str, str]) -> None:
        with self.lock:
            handle = self.tasks.get(key)
        if handle is None:
            return
        handle.cancel_requested = True
        _terminate(handle)

    def shutdown(self) -> None:
        self.stopping = True
        with self.lock:
            handles = list(self.tasks.values())
        for h in handles:
            h.cancel_requested = True
            _terminate(h)


def _resume(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # it was killed while stopped


def _pause_by_helper(pid: int, seconds: float) -> None:
    """SIGSTOP ``pid`` (ourselves) and SIGCONT it ``seconds`` later, from another process.

    A stopped process cannot wake itself, and a timer thread of ours stops with us. So a tiny
    shell in a new session sends both signals: it outlives our stop by construction, and it
    exits by itself right after the SIGCONT. A thread of ours reaps it once we run again.
    """
    helper = subprocess.Popen(
        ["sh", "-c", f"kill -STOP {pid}; sleep {seconds:.3f}; kill -CONT {pid}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    threading.Thread(target=helper.wait, name="pause-helper-reaper", daemon=True).start()


def _terminate(handle: TaskHandle, grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after a grace period, without blocking the caller."""
    proc = handle.proc
    if proc.poll() is not None:
        return
    try:
        proc.terminate()
    except ProcessLookupError:
        return

    def reaper() -> None:
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            handle.killed_by_us = True
            proc.kill()

    threading.Thread(target=reaper, daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="flinkpy-taskmanager")
    ap.add_argument("--home", required=True)
    ap.add_argument("--id", required=True)
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--jobmanager", help="HOST:PORT of the JobManager's RPC endpoint (default: read from the home)")
    ap.add_argument("--host", help="the address given to the JobManager and other TaskManagers (taskmanager.host); "
                    "default: the local address of the connection to the JobManager")
    ap.add_argument("--bind-host", help="where the data channels listen (taskmanager.bind-host); default: --host")
    ap.add_argument("--data-port", type=int, default=0, help="first port of the data channels (taskmanager.data.port); 0: any")
    ap.add_argument("--heartbeat-interval-ms", type=int, default=10000)
    ap.add_argument("--ha", help="high availability: the HaConfig as JSON; the TaskManager follows the leader in ZooKeeper")
    args = ap.parse_args(argv)
    home = Path(args.home)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s")
    try:
        secret = read_secret(home / "secret").encode()
        config = load_config(home)  # log.file.*: from the home's flinkpy.yaml and the environment
        tls = internal_files(config)
        if tls is not None:
            client_context(tls, "security.ssl.internal")  # unreadable files: refused before anything starts
    except FlinkpyError as e:
        print(f"flinkpy-taskmanager: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    rotate_process_output(max_bytes=config.get("log.file.max-size"), backups=config.get("log.file.max-backups"))
    data = Endpoint(args.host, args.bind_host, args.data_port)
    if args.ha:
        tm = TaskManager(args.id, args.slots, home, "", 0, secret, data, args.heartbeat_interval_ms / 1000.0, tls)
    else:
        fixed = args.jobmanager.rsplit(":", 1) if args.jobmanager else None
        tm = when_the_jobmanager_answers(lambda: (fixed[0], int(fixed[1])) if fixed else wait_for_jobmanager(home),
                                         lambda host, port: TaskManager(args.id, args.slots, home, host, port, secret, data,
                                                                        args.heartbeat_interval_ms / 1000.0, tls), args.id)

    def exit_when_tasks_are_gone() -> None:
        """Give canceled tasks a moment to end (their supervisors report them), then exit."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with tm.lock:
                if not tm.tasks:
                    break
            time.sleep(0.02)
        tm.artifacts.close()
        os._exit(0)

    def stop(signum: int) -> None:
        log.info("TaskManager %s stopping (signal %d)", tm.tm_id, signum)
        tm.shutdown()
        exit_when_tasks_are_gone()

    # the handler only notes SIGTERM; a thread of its own stops us, with every lock free (a
    # handler that stopped us itself could land inside a lock the main thread holds, or inside
    # its own first run when a second SIGTERM follows, and hang there)
    StopSignals(signal.SIGTERM).on_stop(stop, name="stop-on-sigterm")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logs = (os.environ.get("FLINKPY_LOG_FILE", ""), os.environ.get("FLINKPY_STDOUT_FILE", ""))
    if args.ha:
        follow_leaders(tm, json.loads(args.ha), logs)
    else:
        fixed = args.jobmanager.rsplit(":", 1) if args.jobmanager else None
        serve_and_rejoin(tm, logs, lambda: (fixed[0], int(fixed[1])) if fixed else published_jobmanager(home))
    exit_when_tasks_are_gone()


if __name__ == "__main__":
    main()
