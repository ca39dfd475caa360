"""Standalone local clusters: start, find and stop a JobManager and TaskManagers in a home, and the
embedded cluster of ``env.execute()`` (see the package docstring for the home's layout).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable

from flinkpy.cluster.home import (ClusterHome, ClusterInfo, ProcessInfo, alive, as_home, processes_started_in, read_record, record_lock,
                                  write_record)
from flinkpy.addresses import ClusterAddresses
from flinkpy.cluster.spawning import cluster_addresses, jobmanager_address_argv, open_private, spawn, taskmanager_address_argv, wait_gone
from flinkpy.cluster.supervision import RestartPolicy, policies_from_config
from flinkpy.errors import ClusterUnreachableError, ConflictError, FlinkpyError, OperationTimeoutError
from flinkpy.processes import CANNOT_BIND_EXIT, create_time, log_tail, module_command, process_tree


def _wait_for_jobmanager(home: ClusterHome, proc: subprocess.Popen, log_path: Path, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    path = home.path / "jobmanager.json"
    while time.monotonic() < deadline:
        try:
            info = json.loads(path.read_text())
            if info.get("pid") == proc.pid:
                return info
        except (FileNotFoundError, ValueError):
            pass
        if proc.poll() is not None:
            if proc.returncode == CANNOT_BIND_EXIT:
                raise ConflictError(f"the JobManager could not start: {log_tail(log_path, 1)}",
                                    remedy="stop what listens there, or choose another address or port with the keys the message names (or --rest-port)")
            raise FlinkpyError(
                f"the JobManager exited during start-up (code {proc.returncode}): {log_tail(log_path, 3)}",
                remedy=f"see {log_path}",
            )
        time.sleep(0.01)
    raise OperationTimeoutError(f"the JobManager did not become ready within {timeout_s:.0f}s", remedy=f"see {log_path}")


def _wait_for_taskmanagers(rest_address: str, token: str, n: int, procs: list[subprocess.Popen], logs: list[Path], timeout_s: float) -> None:
    from flinkpy.network.rest_client import RestClient

    client = RestClient(rest_address, token, timeout_s=5)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if client.overview()["taskmanagers"] >= n:
            return
        for proc, log in zip(procs, logs):
            if proc.poll() is not None:
                raise FlinkpyError(f"a TaskManager exited during start-up (code {proc.returncode}): {log_tail(log, 3)}", remedy=f"see {log}")
        time.sleep(0.01)
    raise OperationTimeoutError(f"{n} TaskManager(s) did not register within {timeout_s:.0f}s", remedy=f"see the logs in {logs[0].parent}")


def _launch(
    home: ClusterHome,
    *,
    taskmanagers: int,
    slots: int,
    rest_port: int,
    addresses: ClusterAddresses,
    heartbeat_interval_ms: int,
    heartbeat_timeout_ms: int,
    detach: bool,
    tm_stdout: "IO[Any] | int | None",
    timeout_s: float,
    place: Callable[[str, list[str]], list[str]] = lambda process_id, argv: argv,
) -> tuple[ClusterInfo, list[subprocess.Popen]]:
    """Start the JobManager and ``taskmanagers`` TaskManagers; ``place(id, argv)`` is the
    command that runs process ``id`` where it lives (a drill cluster's namespace host)."""
    home.ensure()
    try:
        (home.path / "jobmanager.json").unlink()
    except FileNotFoundError:
        pass
    jm_log = home.log_dir / "jobmanager.log"
    env = {"PYTHONUNBUFFERED": "1"}
    jm_argv = place("jobmanager", module_command("flinkpy.jobmanager.process", "--home", str(home.path), "--rest-port", str(rest_port),
                                                 *jobmanager_address_argv(addresses), "--heartbeat-timeout-ms", str(heartbeat_timeout_ms)))
    jm = spawn(jm_argv, jm_log, None, detach=detach, extra_env=env)
    procs = [jm]
    tm_infos: list[ProcessInfo] = []
    tm_logs: list[Path] = []
    try:
        # TaskManagers start while the JobManager boots; they wait for jobmanager.json themselves
        for i in range(taskmanagers):
            tm_id = f"tm-{i + 1}"
            log_path = home.log_dir / f"taskmanager-{tm_id}.log"
            out_path = home.log_dir / f"taskmanager-{tm_id}.out"
            out_file: Any = tm_stdout
            opened = None
            if tm_stdout is None:
                opened = open_private(out_path)
                out_file = opened
            tm_argv = place(tm_id, module_command("flinkpy.taskmanager.process", "--home", str(home.path), "--id", tm_id, "--slots", str(slots),
                                                  "--heartbeat-interval-ms", str(heartbeat_interval_ms), *taskmanager_address_argv(addresses.taskmanager)))
            tm = spawn(
                tm_argv,
                log_path, out_file, detach=detach,
                extra_env={"FLINKPY_STDOUT_FILE": str(out_path) if tm_stdout is None else ""},
            )
            if opened is not None:
                opened.close()
            procs.append(tm)
            tm_logs.append(log_path)
            tm_infos.append(ProcessInfo(tm_id, tm.pid, create_time(tm.pid), str(log_path), str(out_path) if tm_stdout is None else "", tm_argv))
        info = _wait_for_jobmanager(home, jm, jm_log, timeout_s)
        _wait_for_taskmanagers(info["rest_address"], home.token(), taskmanagers, procs[1:], tm_logs, timeout_s)
    except BaseException:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        raise
    cluster = ClusterInfo(
        home=home.path,
        rest_address=info["rest_address"],
        jobmanager_pid=jm.pid,
        jobmanager=ProcessInfo("jobmanager", jm.pid, create_time(jm.pid), str(jm_log), argv=jm_argv),
        taskmanagers=tm_infos,
        started=time.time(),
    )
    return cluster, procs


def start_cluster(home: "ClusterHome | str | Path", *, taskmanagers: int = 1, slots: int = 1, rest_port: int = 8081, config: Any = None, timeout_s: float = 30.0, jobmanagers: int = 1) -> ClusterInfo:
    """Start a background cluster in ``home``; returns once every TaskManager has registered
    (with high availability in ``config``: once a leader is elected and they registered with it)."""
    home = as_home(home)
    running = find_cluster(home)
    if running is not None:
        raise ConflictError(
            f"a cluster is already running in {home.path} (REST {running.rest_address})",
            remedy="stop it with 'flinkpy cluster stop', or use another FLINKPY_HOME",
        )

    def cfg(key: str, default: Any) -> Any:
        return config.get(key) if config is not None else default

    from flinkpy.ha.services import HaConfig

    ha = HaConfig.from_config(config, default_storage_dir=str(home.path / "ha")) if config is not None else None
    if ha is None and jobmanagers > 1:
        from flinkpy.errors import UsageError

        raise UsageError(
            f"{jobmanagers} JobManagers need high availability: only one of them can lead",
            remedy="add --ha zookeeper --zookeeper-quorum HOST:PORT (see 'flinkpy zookeeper start')",
        )
    if ha is not None:
        from flinkpy.cluster.ha import launch_ha

        cluster = launch_ha(
            home, ha, jobmanagers=jobmanagers, taskmanagers=taskmanagers, slots=slots, rest_port=rest_port,
            addresses=cluster_addresses(config),
            heartbeat_interval_ms=int(cfg("heartbeat.interval", 10000)),
            heartbeat_timeout_ms=int(cfg("heartbeat.timeout", 50000)), timeout_s=timeout_s,
        )
        cluster.supervisor = start_supervisor(home, policies_from_config(config), ha=True)
        write_record(home, cluster)
        return cluster
    cluster, _ = _launch(
        home,
        taskmanagers=taskmanagers,
        slots=slots,
        rest_port=rest_port,
        addresses=cluster_addresses(config),
        heartbeat_interval_ms=int(cfg("heartbeat.interval", 10000)),
        heartbeat_timeout_ms=int(cfg("heartbeat.timeout", 50000)),
        detach=True,
        tm_stdout=None,
        timeout_s=timeout_s,
    )
    cluster.supervisor = start_supervisor(home, policies_from_config(config), ha=False)
    write_record(home, cluster)
    return cluster


def start_jobmanager(home: "ClusterHome | str | Path", *, rest_port: int = 8081, config: Any = None, timeout_s: float = 30.0) -> ClusterInfo:
    """Start the JobManager of a cluster across hosts in ``home``, with no TaskManagers: they
    start on their hosts (:func:`flinkpy.cluster.hosts.start_taskmanager`) and register with
    it. Returns once it listens; ``cluster stop`` stops it and shuts its TaskManagers down."""
    home = as_home(home)
    running = find_cluster(home)
    if running is not None:
        raise ConflictError(f"a cluster is already running in {home.path} (REST {running.rest_address})",
                            remedy="stop it with 'flinkpy cluster stop', or use another FLINKPY_HOME")
    cluster, _ = _launch(
        home, taskmanagers=0, slots=1, rest_port=rest_port, addresses=cluster_addresses(config),
        heartbeat_interval_ms=int(config.get("heartbeat.interval")) if config is not None else 10000,
        heartbeat_timeout_ms=int(config.get("heartbeat.timeout")) if config is not None else 50000,
        detach=True, tm_stdout=None, timeout_s=timeout_s,
    )
    cluster.supervisor = start_supervisor(home, policies_from_config(config), ha=False)
    write_record(home, cluster)
    return cluster


def rpc_address(home: "ClusterHome | str | Path") -> str | None:
    """``HOST:PORT`` of the JobManager's RPC endpoint as it published it in ``home`` (what
    ``taskmanager start --jobmanager`` takes), or None when none is published."""
    try:
        info = json.loads((as_home(home).path / "jobmanager.json").read_text())
        return f"{info['rpc_host']}:{info['rpc_port']}"
    except (OSError, ValueError, KeyError):
        return None


def start_supervisor(home: ClusterHome, policies: dict[str, RestartPolicy], *, ha: bool, client_pid: int | None = None,
                     stdout: "IO[Any] | int | None" = None) -> ProcessInfo:
    """Start the cluster's supervisor (:mod:`flinkpy.cluster.supervisor`). With ``client_pid``
    (an embedded cluster) it also stops the cluster and removes its home when that process is
    gone; ``stdout`` is where TaskManagers it starts again print (the embedded job's output)."""
    argv = module_command("flinkpy.cluster.supervisor", "--home", str(home.path),
                          "--policies", json.dumps({kind: p.to_dict() for kind, p in policies.items()}))
    if ha:
        argv.append("--ha")
    if client_pid is not None:
        argv += ["--client-pid", str(client_pid), "--client-started", repr(create_time(client_pid)), "--remove-home"]
    log_path = home.log_dir / "supervisor.log"
    proc = spawn(argv, log_path, stdout if stdout is not None else subprocess.DEVNULL, detach=True, extra_env={"PYTHONUNBUFFERED": "1"})
    return ProcessInfo("supervisor", proc.pid, create_time(proc.pid), str(log_path), argv=argv)


def _stop_supervisor(info: ClusterInfo, timeout_s: float = 5.0) -> None:
    """Stop the supervisor before the processes, so that it starts none of them again."""
    import psutil

    sup = info.supervisor
    if sup is None or not alive(sup):
        return
    try:
        os.kill(sup.pid, signal.SIGTERM)
        proc = psutil.Process(sup.pid)
    except (ProcessLookupError, psutil.Error):
        return
    for p in wait_gone([proc], timeout_s):
        try:
            p.kill()
        except psutil.Error:
            pass
    wait_gone([proc], timeout_s)
    try:
        os.waitpid(sup.pid, os.WNOHANG)  # our child when this process started the cluster: no zombie
    except ChildProcessError:
        pass


def _drain_supervisor(home: ClusterHome, sup: ProcessInfo, timeout_s: float = 5.0) -> None:
    """An embedded cluster's supervisor: tell it (SIGTERM) to restart nothing more, and wait
    until it says so (``supervisor.draining``: the record is final). It stays to end the
    cluster's processes should this client die before they are gone."""
    from flinkpy.cluster.supervisor import DRAINING, READY

    deadline = time.monotonic() + timeout_s
    # right after its start it may not handle SIGTERM yet (and would die of it)
    while not (home.path / READY).exists() and alive(sup) and time.monotonic() < deadline:
        time.sleep(0.01)
    if not alive(sup):
        return
    try:
        os.kill(sup.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    while not (home.path / DRAINING).exists() and alive(sup):
        if time.monotonic() > deadline:
            # a supervisor that does not answer must not start anything again meanwhile
            try:
                os.kill(sup.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        time.sleep(0.01)


def add_taskmanager(home: "ClusterHome | str | Path", *, slots: int = 1, config: Any = None, timeout_s: float = 30.0) -> ProcessInfo:
    """Start one more TaskManager for the cluster running in ``home`` (to add capacity, or to
    replace a lost one a job is waiting for); returns once it has registered."""
    from flinkpy.network.rest_client import RestClient

    home = as_home(home)
    info = find_cluster(home)
    if info is None:
        raise ClusterUnreachableError(
            f"no cluster is running in {home.path}", remedy="start one with 'flinkpy cluster start'"
        )
    taken = {tm.id for tm in info.taskmanagers}
    n = len(taken) + 1
    while f"tm-{n}" in taken:
        n += 1
    tm_id = f"tm-{n}"
    log_path = home.log_dir / f"taskmanager-{tm_id}.log"
    out_path = home.log_dir / f"taskmanager-{tm_id}.out"
    interval = int(config.get("heartbeat.interval")) if config is not None else 10000
    rest = RestClient(info.rest_address, home.token(), timeout_s=5)
    before = rest.overview()["taskmanagers"]
    argv = module_command("flinkpy.taskmanager.process", "--home", str(home.path), "--id", tm_id,
                          "--slots", str(slots), "--heartbeat-interval-ms", str(interval),
                          *taskmanager_address_argv(cluster_addresses(config).taskmanager))
    with open_private(out_path) as out_file:
        proc = spawn(
            argv,
            log_path, out_file, detach=True, extra_env={"FLINKPY_STDOUT_FILE": str(out_path), "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + timeout_s
    while not any(tm["id"] == tm_id for tm in rest.taskmanagers()):
        if proc.poll() is not None:
            raise FlinkpyError(f"TaskManager {tm_id} exited during start-up (code {proc.returncode}): {log_tail(log_path, 3)}", remedy=f"see {log_path}")
        if time.monotonic() > deadline:
            raise OperationTimeoutError(f"TaskManager {tm_id} did not register within {timeout_s:.0f}s", remedy=f"see {log_path}")
        time.sleep(0.01)
    del before
    tm = ProcessInfo(tm_id, proc.pid, create_time(proc.pid), str(log_path), str(out_path), argv)
    with record_lock(home):
        current = read_record(home) or info  # the supervisor may have changed it meanwhile
        current.taskmanagers.append(tm)
        write_record(home, current)
    return tm


def find_cluster(home: "ClusterHome | str | Path") -> ClusterInfo | None:
    """The cluster running in ``home``, or None (no record, or its JobManager is gone).

    With high availability the cluster runs while any of its JobManagers does, and its REST
    address is the leader's, looked up in ZooKeeper (the recorded one if ZooKeeper cannot say).
    """
    info = read_record(as_home(home))
    if info is None:
        return None
    if info.ha is None:
        return info if alive(info.jobmanager) else None
    living = [jm for jm in info.jobmanagers if alive(jm)]
    if not living and not any(alive(tm) for tm in info.taskmanagers):
        return None
    from flinkpy.cluster.ha import current_leader

    info.leader = current_leader(info.ha)
    if info.leader is not None:
        info.rest_address = info.leader["rest_address"]
        info.jobmanager_pid = int(info.leader["pid"])
        info.jobmanager = next((jm for jm in info.jobmanagers if jm.id == info.leader["id"]), info.jobmanager)
    return info


def rest_client_for(info: ClusterInfo, token: str | None, timeout_s: float = 10) -> Any:
    """A REST client of the cluster; with high availability it follows the leader."""
    from flinkpy.network.rest_client import RestClient

    if info.ha is None:
        return RestClient(info.rest_address, token, timeout_s=timeout_s)
    from flinkpy.cluster.ha import leader_resolver

    return RestClient(info.rest_address, token, timeout_s=timeout_s, leader=leader_resolver(info.ha))


def stop_cluster(home: "ClusterHome | str | Path", timeout_s: float = 30.0) -> list[ProcessInfo]:
    """Stop the cluster in ``home`` and every process it started (tasks included). Idempotent."""
    import psutil

    home = as_home(home)
    info = read_record(home)
    if info is None:
        return _stop_orphans(home, timeout_s)
    _stop_supervisor(info)
    info = read_record(home) or info  # what the supervisor started last is in the record
    procs = [p for p in [*info.taskmanagers, *(info.jobmanagers or [info.jobmanager])] if alive(p)]
    tree = process_tree(p.pid for p in procs)
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    survivors = wait_gone(tree, timeout_s)
    for p in survivors:
        try:
            p.kill()
        except psutil.Error:
            pass
    wait_gone(survivors, 5)
    for name in ("cluster.json", "jobmanager.json"):
        try:
            (home.path / name).unlink()
        except FileNotFoundError:
            pass
    if info.ha is not None:
        shutil.rmtree(home.path / "jobmanagers", ignore_errors=True)
    if info.hosts is not None:  # a drill cluster: its namespace hosts go with it
        from flinkpy.cluster.netns import Hosts

        Hosts.attach(info.hosts).close()
    return procs


def _stop_orphans(home: ClusterHome, timeout_s: float) -> list[ProcessInfo]:
    """The processes of a cluster whose record is gone with its home (deleted under a running
    cluster) found by their command lines, stopped like a recorded cluster's."""
    import psutil

    if home.path.is_dir():
        return []  # a home without a record: no cluster was started in it, or it was stopped
    found = processes_started_in(home)
    tree = process_tree(pi.pid for pi, _ in found)
    for _, p in found:
        try:
            p.terminate()
        except psutil.Error:
            pass
    for p in wait_gone(tree, timeout_s):
        try:
            p.kill()
        except psutil.Error:
            pass
    return [pi for pi, _ in found]


def _stdout_fd() -> int | None:
    """Where the job's printed output goes: this process's standard output. In a notebook
    ``sys.stdout`` is not a file (no descriptor): then the interpreter's own, else inherited."""
    for stream in (sys.stdout, sys.__stdout__):
        try:
            return stream.fileno()  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
            continue
    return None


class EmbeddedCluster:
    """A cluster for one job: real JobManager and TaskManager processes in a temporary home.

    ``job_stdout`` takes what the jobs print (the TaskManagers' standard output); by default
    this process's standard output, which must then be a real file.

    >>> import subprocess
    >>> with EmbeddedCluster(slots=1, job_stdout=subprocess.DEVNULL) as c:
    ...     c.rest_address                     # doctest: +ELLIPSIS
    'http://127.0.0.1:...'
    """

    def __init__(self, *, slots: int, taskmanagers: int = 1, job_stdout: "IO[Any] | int | None" = None, timeout_s: float = 30.0,
                 restart_policies: dict[str, RestartPolicy] | None = None):
        self.slots = slots
        self.restart_policies = restart_policies if restart_policies is not None else policies_from_config(None)
        self.taskmanagers = taskmanagers
        self.job_stdout = job_stdout
        self.timeout_s = timeout_s
        self.home = ClusterHome(Path(tempfile.mkdtemp(prefix="flinkpy-embedded-")))
        self._procs: list[subprocess.Popen] = []
        self.info: ClusterInfo | None = None

    @property
    def rest_address(self) -> str:
        assert self.info is not None
        return self.info.rest_address

    def token(self) -> str:
        return self.home.token()

    def __enter__(self) -> "EmbeddedCluster":
        stdout: Any = self.job_stdout if self.job_stdout is not None else _stdout_fd()
        try:
            self.info, self._procs = _launch(
                self.home,
                taskmanagers=self.taskmanagers,
                slots=self.slots,
                rest_port=0,
                addresses=cluster_addresses(None),
                heartbeat_interval_ms=1000,
                heartbeat_timeout_ms=30000,
                # a session of its own: the terminal's Ctrl-C (or a SIGTERM to the client's process
                # group) reaches only the client, which cancels the job and stops the cluster in order
                detach=True,
                tm_stdout=stdout,
                timeout_s=self.timeout_s,
            )
            # the supervisor restarts lost TaskManagers, and ends the cluster if we die (even by SIGKILL)
            self.info.supervisor = start_supervisor(self.home, self.restart_policies, ha=False, client_pid=os.getpid(), stdout=stdout)
            write_record(self.home, self.info)
        except BaseException:
            for p in self._procs:
                if p.poll() is None:
                    p.kill()
            shutil.rmtree(self.home.path, ignore_errors=True)
            raise
        return self

    def logs(self) -> str:
        return "\n".join(log_tail(p, 40) for p in sorted(self.home.log_dir.glob("*.log")))

    def __exit__(self, *exc: Any) -> None:
        import psutil

        supervisor = self.info.supervisor if self.info is not None else None
        if supervisor is not None:
            _drain_supervisor(self.home, supervisor)
        record = read_record(self.home)
        # the record holds what runs now: our own children, and those the supervisor started
        # again. Each process is told once: a second SIGTERM is a second stop to carry out
        current = [*record.taskmanagers, record.jobmanager] if record is not None else []
        pids = list(dict.fromkeys([*(p.pid for p in current if alive(p)), *(p.pid for p in reversed(self._procs) if p.poll() is None)]))
        tree = process_tree(pids)
        for pid in pids:  # TaskManagers first, then the JobManager
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        survivors = wait_gone(tree, 10)
        for p in survivors:
            try:
                p.kill()
            except psutil.Error:
                pass
        for p in self._procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if supervisor is not None:
            _stop_supervisor(self.info)  # it leaves once the processes are gone: reaped here
        if os.environ.get("FLINKPY_KEEP_EMBEDDED_HOME"):
            print(f"flinkpy: embedded cluster home kept at {self.home.path}", file=sys.stderr)
        else:
            shutil.rmtree(self.home.path, ignore_errors=True)
