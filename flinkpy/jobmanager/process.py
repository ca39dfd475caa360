"""The JobManager process: ``python -m flinkpy.jobmanager.process --home DIR``.

Listens for TaskManagers on an authenticated RPC port and for clients on the REST port, then
publishes both in ``<home>/jobmanager.json`` (written atomically): the readiness signal that
``flinkpy cluster start``, the embedded cluster and TaskManagers wait for.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import Any

from flinkpy.addresses import url_host
from flinkpy.clock import now_ms
from flinkpy.config import load_config
from flinkpy.errors import FlinkpyError
from flinkpy.files import write_json_atomically
from flinkpy.jobmanager.artifacts import ArtifactStore
from flinkpy.jobmanager.dispatcher import Dispatcher
from flinkpy.jobmanager.job_journal import JobJournal
from flinkpy.jobmanager.rest import RestServer
from flinkpy.logfiles import rotate_process_output
from flinkpy.processes import CANNOT_BIND_EXIT
from flinkpy.network import auth
from flinkpy.network.auth import read_secret
from flinkpy.network.http_limits import HttpLimits
from flinkpy.network.connection import Connection, handshake, listen
from flinkpy.network.tls import internal_files, rest_files, server_context
from flinkpy.protocol import HandlerTable, ProtocolError
from flinkpy.protocol.deployment import FetchArtifact
from flinkpy.protocol.messages import (
    FinalCommitRequest,
    FromTask,
    Heartbeat,
    RegisterTaskManager,
    Shutdown,
    StorageProbed,
    TaskListening,
    TaskManagerMetrics,
    TaskMetrics,
    TaskStateChanged,
    ToTask,
)
from flinkpy.signals import StopSignals

log = logging.getLogger("flinkpy.jobmanager")


def _taskmanager_handlers(dispatcher: Dispatcher, conn: Connection, registered: list[str]) -> HandlerTable:
    """What a TaskManager sends the JobManager, and where it goes (``registered`` receives the
    TaskManager's id once it registered)."""

    def register(m: RegisterTaskManager) -> None:
        registered.append(m.tm_id)
        dispatcher.register_taskmanager(conn, m)

    def from_task(m: FromTask) -> None:
        event = m.message
        if isinstance(event, TaskListening):
            dispatcher.on_listening(m.job_id, m.exec_id, event.host, event.port, event.pid)
        elif isinstance(event, TaskMetrics):
            dispatcher.metrics.on_task(m.job_id, m.exec_id, event.timestamp, event.figures, event.user, now_ms())
        elif isinstance(event, FinalCommitRequest):
            # answered on the connection it came on: a stale attempt's TaskManager is no longer
            # the one the execution graph names
            conn.send(ToTask(job_id=m.job_id, exec_id=m.exec_id, message=dispatcher.final_commit(m.job_id, m.exec_id)))
        else:
            dispatcher.on_task_event(m.job_id, m.exec_id, event)

    return HandlerTable(
        "the JobManager",
        {
            RegisterTaskManager: register,
            Heartbeat: lambda m: dispatcher.heartbeat(m.tm_id),
            FromTask: from_task,
            TaskManagerMetrics: lambda m: dispatcher.metrics.on_taskmanager(m.tm_id, m.timestamp, m.figures, now_ms()),
            TaskStateChanged: lambda m: dispatcher.on_task_state(m.job_id, m.exec_id, m.state, m.info, m.tm_id),
            # on a connection of the TaskManager's own, so the download holds up no control message
            FetchArtifact: lambda m: dispatcher.artifacts.serve(conn, m),
            StorageProbed: dispatcher.storage_probes.answered,
        },
    )


def _serve_taskmanager(dispatcher: Dispatcher, conn: Connection) -> None:
    registered: list[str] = []
    handlers = _taskmanager_handlers(dispatcher, conn, registered)
    try:
        while True:
            try:
                msg = conn.recv()
                if msg is None:
                    break
                handlers(msg)
            except ProtocolError as e:
                log.error("ignored a message from TaskManager %s: %s", registered[-1] if registered else None, e)
    except OSError as e:
        log.warning("connection to TaskManager %s broke: %s", registered[-1] if registered else None, e)
    finally:
        conn.close()
        tm_id = registered[-1] if registered else None
        if tm_id is not None:
            dispatcher.taskmanager_lost(tm_id, f"TaskManager {tm_id} disconnected (process ended or connection lost)", conn)


def _accept_loop(listener: Any, secret: bytes, dispatcher: Dispatcher, tls: ssl.SSLContext | None) -> None:
    """Accept TaskManagers; each handshake runs in its own thread, so a silent or hostile
    client cannot hold up the registration of real TaskManagers."""
    while True:
        try:
            sock, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_authenticate_and_serve, args=(sock, secret, dispatcher, tls), name="tm-conn", daemon=True).start()


def _authenticate_and_serve(sock: Any, secret: bytes, dispatcher: Dispatcher, tls: ssl.SSLContext | None) -> None:
    try:
        conn = handshake(sock, secret, tls=tls)
    except auth.AuthenticationFailed as e:
        log.warning("refused an RPC connection: %s", e)
        return
    except (ssl.SSLError, OSError) as e:  # no trusted certificate (internal TLS), or gone mid-handshake
        log.warning("refused an RPC connection: TLS handshake failed: %s", e)
        return
    _serve_taskmanager(dispatcher, conn)


def _heartbeat_monitor(dispatcher: Dispatcher, interval_s: float) -> None:
    while True:
        time.sleep(interval_s)
        dispatcher.check_heartbeats()


def _checkpoint_timer(dispatcher: Dispatcher, resolution_s: float = 0.01) -> None:
    """Ticks the jobs: due restarts, periodic checkpoint triggers and checkpoint timeouts."""
    while True:
        time.sleep(resolution_s)
        try:
            dispatcher.tick()
        except Exception:  # noqa: BLE001 - the timer must survive a bad job
            log.exception("checkpoint timer")


def _artifact_store(home: Path, ha: str | None) -> ArtifactStore:
    """Where the jobs' shipped files live: with HA in its storage, where the next leader finds
    them; else in the home, emptied now (a JobManager without HA starts without jobs)."""
    if ha:
        from flinkpy.ha.services import HaConfig

        cfg = HaConfig.from_dict(json.loads(ha))
        return ArtifactStore("/".join([cfg.storage_dir.rstrip("/"), cfg.cluster_id, "blobs"]))
    return ArtifactStore(str(home / "blobs"), fresh=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="flinkpy-jobmanager")
    ap.add_argument("--home", required=True)
    ap.add_argument("--rest-address", default="127.0.0.1", help="the REST address published for clients (rest.address)")
    ap.add_argument("--rest-bind-address", help="where the REST server listens (rest.bind-address); default: --rest-address")
    ap.add_argument("--rest-port", type=int, default=8081)
    ap.add_argument("--rpc-address", default="127.0.0.1", help="the RPC address published for TaskManagers (jobmanager.rpc.address)")
    ap.add_argument("--rpc-bind-host", help="where the RPC endpoint listens (jobmanager.bind-host); default: --rpc-address")
    ap.add_argument("--rpc-port", type=int, default=0, help="the RPC port (jobmanager.rpc.port); 0: any free port")
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=50000)
    ap.add_argument("--id", default="jobmanager", help="this JobManager's id (several run with high availability)")
    ap.add_argument("--ha", help="high availability: the HaConfig as JSON (ZooKeeper quorum, paths, storage)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s")
    home = Path(args.home)
    try:
        secret_text = read_secret(home / "secret")
        # rest.server.* limits: from the home's flinkpy.yaml and the environment
        config = load_config(home)
        limits = HttpLimits.from_config(config)
        # TLS (security.ssl.*): files that cannot be used are refused before anything listens
        internal = internal_files(config)
        rpc_tls = server_context(internal, "security.ssl.internal") if internal is not None else None
        rest_files_ = rest_files(config, server=True)
        rest_tls = server_context(rest_files_, "security.ssl.rest") if rest_files_ is not None else None
    except FlinkpyError as e:
        print(f"flinkpy-jobmanager: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    rotate_process_output(max_bytes=config.get("log.file.max-size"), backups=config.get("log.file.max-backups"))
    dispatcher = Dispatcher(heartbeat_timeout_s=args.heartbeat_timeout_ms / 1000.0, checkpoint_dir=str(home / "checkpoints"),
                            artifacts=_artifact_store(home, args.ha))
    rest_bind = args.rest_bind_address or args.rest_address
    rpc_bind = args.rpc_bind_host or args.rpc_address
    try:
        rest = RestServer(dispatcher, secret_text, rest_bind, args.rest_port, os.environ.get("FLINKPY_LOG_FILE", ""), limits, rest_tls)
    except OSError as e:
        print(f"flinkpy-jobmanager: cannot bind the REST endpoint {rest_bind}:{args.rest_port} (rest.bind-address, rest.port): {e.strerror}",
              file=sys.stderr)
        sys.exit(CANNOT_BIND_EXIT)
    try:
        rpc = listen(rpc_bind, args.rpc_port)
    except OSError as e:
        print(f"flinkpy-jobmanager: cannot bind the RPC endpoint {rpc_bind}:{args.rpc_port} (jobmanager.bind-host, jobmanager.rpc.port): {e.strerror}",
              file=sys.stderr)
        sys.exit(CANNOT_BIND_EXIT)
    threading.Thread(target=_accept_loop, args=(rpc, secret_text.encode(), dispatcher, rpc_tls), name="rpc-accept", daemon=True).start()
    threading.Thread(target=_heartbeat_monitor, args=(dispatcher, min(5.0, args.heartbeat_timeout_ms / 4000.0)), name="heartbeat-monitor", daemon=True).start()
    threading.Thread(target=_checkpoint_timer, args=(dispatcher,), name="checkpoint-timer", daemon=True).start()
    rest.serve_in_background()
    rest_port = rest.address[1]
    info = {
        "pid": os.getpid(),
        # the advertised address, not the bound one: 0.0.0.0 is no address to connect to
        "rest_address": f"{'https' if rest_tls is not None else 'http'}://{url_host(args.rest_address)}:{rest_port}",
        "rest_port": rest_port,
        "rpc_host": args.rpc_address,
        "rpc_port": rpc.getsockname()[1],
    }
    if args.ha:
        # high availability: readiness is per JobManager; who leads is published in ZooKeeper
        from flinkpy.ha.services import HaConfig, ZooKeeperHa
        from flinkpy.jobmanager.leadership import Leadership

        info["id"] = args.id
        published = home / "jobmanagers" / f"{args.id}.json"
        published.parent.mkdir(exist_ok=True)
        ha = ZooKeeperHa(HaConfig.from_dict(json.loads(args.ha))).start_patiently(f"JobManager {args.id}")
        dispatcher.ha = Leadership(dispatcher, ha, args.id, info)
    else:
        published = home / "jobmanager.json"
        dispatcher.journal = JobJournal(home / "jobs")
        with dispatcher.lock:
            dispatcher.lost = {job.job_id: job for job in dispatcher.journal.lost(now_ms())}
    write_json_atomically(published, info)
    log.info("JobManager %s ready: REST %s, RPC %s:%d", args.id, info["rest_address"], info["rpc_host"], info["rpc_port"])
    print(f"JobManager ready. REST address: {info['rest_address']}", file=sys.stderr, flush=True)
    if dispatcher.ha is not None:
        dispatcher.ha.contend()

    # the handlers only note the signal (one that set an Event could hang on the Event's lock,
    # held by the very wait it interrupted); the main thread stops once woken
    stop = StopSignals(signal.SIGTERM, signal.SIGINT)
    while not stop.wait():
        pass
    log.info("JobManager stopping")
    with dispatcher.lock:
        # with high availability the TaskManagers outlive a JobManager: they follow the next leader
        for tm in list(dispatcher.taskmanagers.values()) if dispatcher.ha is None else []:
            try:
                tm.conn.send(Shutdown())
            except OSError:
                pass
    try:
        published.unlink()
    except FileNotFoundError:
        pass
    if dispatcher.ha is not None:
        dispatcher.ha.stop()  # a clean stop hands leadership over at once
    if dispatcher.journal is not None:
        dispatcher.journal.clear()  # the jobs end with their cluster: none is lost
    os._exit(0)


if __name__ == "__main__":
    main()
