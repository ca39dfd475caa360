"""Starting and finding a high-availability cluster: several JobManagers (one leads, the others
stand by) and TaskManagers that follow whichever leads, coordinated through ZooKeeper.

Used by :mod:`flinkpy.cluster.local` (``start_cluster`` with ``high-availability.type: zookeeper``,
``find_cluster``) and the CLI; the processes themselves are
:mod:`flinkpy.jobmanager.process` and :mod:`flinkpy.taskmanager.process` with ``--ha``.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from typing import Any, Callable

from flinkpy.cluster.home import ClusterHome, ClusterInfo, ProcessInfo, alive, read_record, record_lock, write_record
from flinkpy.addresses import ClusterAddresses
from flinkpy.cluster.spawning import cluster_addresses, jobmanager_address_argv, open_private, spawn, taskmanager_address_argv
from flinkpy.errors import ClusterUnreachableError, FlinkpyError, OperationTimeoutError
from flinkpy.ha.services import HaConfig, ZooKeeperHa
from flinkpy.processes import create_time, log_tail, module_command


def current_leader(ha: dict[str, Any], timeout_s: float = 3.0) -> dict[str, Any] | None:
    """The leader ZooKeeper names right now (None when none, or ZooKeeper does not answer)."""
    cfg = HaConfig.from_dict({**ha, "connection_timeout_s": timeout_s})
    try:
        client = ZooKeeperHa(cfg, client=True).start()
    except FlinkpyError:
        return None
    try:
        return client.leader()
    finally:
        client.stop()


def session_of(ha: dict[str, Any]) -> dict[str, Any] | None:
    """What a fresh ZooKeeper session sees: its state and the quorum's answer (None: unreachable)."""
    cfg = HaConfig.from_dict({**ha, "connection_timeout_s": 3.0})
    try:
        client = ZooKeeperHa(cfg, client=True).start()
    except FlinkpyError:
        return None
    try:
        return client.session_info()
    finally:
        client.stop()


class ZooKeeperDown(ClusterUnreachableError):
    """No leader can be found because ZooKeeper itself does not answer (no failover to wait for)."""


def leader_resolver(ha: dict[str, Any]) -> Callable[[], str | None]:
    """For RestClient: the leader's REST address (None while an election runs), from one
    ZooKeeper session opened on first use; raises :class:`ZooKeeperDown` when ZooKeeper does
    not answer, so that a client stops waiting for a failover that cannot happen."""
    holder: dict[str, ZooKeeperHa] = {}

    def resolve() -> str | None:
        try:
            if "zk" not in holder:
                holder["zk"] = ZooKeeperHa(HaConfig.from_dict({**ha, "connection_timeout_s": 3.0}), client=True).start()
            leader = holder["zk"].leader()
        except ClusterUnreachableError:
            raise ZooKeeperDown(
                f"no JobManager can lead: ZooKeeper at {ha['quorum']} does not answer",
                remedy="start ZooKeeper again ('flinkpy zookeeper start' or its service); the JobManagers elect a leader when it is back",
            ) from None
        except Exception:  # noqa: BLE001 - kazoo's connection errors
            raise ZooKeeperDown(
                f"no JobManager can lead: ZooKeeper at {ha['quorum']} does not answer",
                remedy="start ZooKeeper again ('flinkpy zookeeper start' or its service); the JobManagers elect a leader when it is back",
            ) from None
        return leader["rest_address"] if leader else None

    return resolve


def spawn_jobmanager(home: ClusterHome, ha: HaConfig, jm_id: str, *, rest_port: int, addresses: ClusterAddresses, heartbeat_timeout_ms: int) -> ProcessInfo:
    log_path = home.log_dir / f"jobmanager-{jm_id}.log"
    argv = module_command("flinkpy.jobmanager.process", "--home", str(home.path), "--id", jm_id,
                          "--rest-port", str(rest_port), *jobmanager_address_argv(addresses),
                          "--heartbeat-timeout-ms", str(heartbeat_timeout_ms), "--ha", json.dumps(ha.to_dict()))
    proc = spawn(argv, log_path, None, detach=True, extra_env={"PYTHONUNBUFFERED": "1"})
    return ProcessInfo(jm_id, proc.pid, create_time(proc.pid), str(log_path), argv=argv)


def spawn_taskmanager(home: ClusterHome, ha: HaConfig, tm_id: str, *, slots: int, heartbeat_interval_ms: int, addresses: ClusterAddresses) -> ProcessInfo:
    log_path = home.log_dir / f"taskmanager-{tm_id}.log"
    out_path = home.log_dir / f"taskmanager-{tm_id}.out"
    argv = module_command("flinkpy.taskmanager.process", "--home", str(home.path), "--id", tm_id,
                          "--slots", str(slots), "--heartbeat-interval-ms", str(heartbeat_interval_ms), "--ha", json.dumps(ha.to_dict()),
                          *taskmanager_address_argv(addresses.taskmanager))
    with open_private(out_path) as out:
        proc = spawn(argv, log_path, out, detach=True, extra_env={"FLINKPY_STDOUT_FILE": str(out_path), "PYTHONUNBUFFERED": "1"})
    return ProcessInfo(tm_id, proc.pid, create_time(proc.pid), str(log_path), str(out_path), argv)


def wait_for_leader(zk: ZooKeeperHa, token: str, taskmanagers: int, procs: list[ProcessInfo], timeout_s: float) -> dict[str, Any]:
    """Until a leader is published and ``taskmanagers`` have registered with it."""
    from flinkpy.network.rest_client import RestClient
    from pathlib import Path

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader = zk.leader()
        if leader is not None:
            try:
                if RestClient(leader["rest_address"], token, timeout_s=2).overview()["taskmanagers"] >= taskmanagers:
                    return leader
            except FlinkpyError:
                pass
        dead = [p for p in procs if not alive(p)]
        if dead:
            raise FlinkpyError(
                f"{dead[0].id} exited during start-up: {log_tail(Path(dead[0].log_path), 3)}", remedy=f"see {dead[0].log_path}"
            )
        time.sleep(0.02)
    raise OperationTimeoutError(
        f"no leader with {taskmanagers} TaskManager(s) within {timeout_s:.0f}s", remedy=f"see the logs in {procs[0].log_path.rsplit('/', 1)[0]}"
    )


def launch_ha(
    home: ClusterHome,
    ha: HaConfig,
    *,
    jobmanagers: int,
    taskmanagers: int,
    slots: int,
    rest_port: int,
    addresses: ClusterAddresses,
    heartbeat_interval_ms: int,
    heartbeat_timeout_ms: int,
    timeout_s: float,
) -> ClusterInfo:

    home.ensure()
    shutil.rmtree(home.path / "jobmanagers", ignore_errors=True)
    zk = ZooKeeperHa(ha, client=True).start()  # fails early, with a remedy, when ZooKeeper is not there
    started: list[ProcessInfo] = []
    try:
        jms = []
        for i in range(jobmanagers):
            port = rest_port + i if rest_port else 0
            # like the REST port, a fixed RPC port goes up by one for each further JobManager
            rpc = replace(addresses.rpc, port=addresses.rpc.port + i if addresses.rpc.port else 0)
            jms.append(spawn_jobmanager(home, ha, f"jm-{i + 1}", rest_port=port, addresses=replace(addresses, rpc=rpc),
                                        heartbeat_timeout_ms=heartbeat_timeout_ms))
        started += jms
        tms = [spawn_taskmanager(home, ha, f"tm-{i + 1}", slots=slots, heartbeat_interval_ms=heartbeat_interval_ms, addresses=addresses) for i in range(taskmanagers)]
        started += tms
        leader = wait_for_leader(zk, home.token(), taskmanagers, started, timeout_s)
    except BaseException:
        import os
        import signal

        for p in started:
            if alive(p):
                os.kill(p.pid, signal.SIGKILL)
        raise
    finally:
        zk.stop()
    first = next(jm for jm in jms if jm.id == leader["id"])
    return ClusterInfo(
        home=home.path, rest_address=leader["rest_address"], jobmanager_pid=first.pid, jobmanager=first,
        taskmanagers=tms, started=time.time(), jobmanagers=jms, ha=ha.to_dict(), leader=leader,
    )


def _any_rpc_port(addresses: ClusterAddresses) -> ClusterAddresses:
    """A JobManager added to a running cluster takes any free RPC port: the configured one is taken."""
    return replace(addresses, rpc=replace(addresses.rpc, port=0))


def add_jobmanager(home: ClusterHome, config: Any = None, timeout_s: float = 30.0) -> ProcessInfo:
    """Start one more JobManager for the HA cluster in ``home``: it joins as a standby."""
    from flinkpy.errors import ClusterUnreachableError, UsageError
    from pathlib import Path

    info = read_record(home)
    if info is None:
        raise ClusterUnreachableError(f"no cluster is running in {home.path}", remedy="start one with 'flinkpy cluster start'")
    if info.ha is None:
        raise UsageError("this cluster has no high availability: it runs exactly one JobManager",
                         remedy="start the cluster with --ha zookeeper to add standby JobManagers")
    taken = {jm.id for jm in info.jobmanagers}
    n = 1
    while f"jm-{n}" in taken:
        n += 1
    ha = HaConfig.from_dict(info.ha)
    timeout_ms = int(config.get("heartbeat.timeout")) if config is not None else 50000
    jm = spawn_jobmanager(home, ha, f"jm-{n}", rest_port=0, addresses=_any_rpc_port(cluster_addresses(config)),
                          heartbeat_timeout_ms=timeout_ms)
    ready = home.path / "jobmanagers" / f"{jm.id}.json"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if json.loads(ready.read_text()).get("pid") == jm.pid:
                break
        except (FileNotFoundError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise OperationTimeoutError(f"JobManager {jm.id} did not start within {timeout_s:.0f}s: {log_tail(Path(jm.log_path), 3)}", remedy=f"see {jm.log_path}")
        time.sleep(0.01)
    with record_lock(home):
        current = read_record(home) or info  # the supervisor may have changed it meanwhile
        current.jobmanagers.append(jm)
        write_record(home, current)
    return jm
