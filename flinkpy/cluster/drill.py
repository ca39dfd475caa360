"""A drill cluster: a local cluster whose JobManager and TaskManagers each live on a host of
their own, made of a network namespace (:mod:`flinkpy.cluster.netns`), so that an operator can
rehearse a network partition on one machine before production does it for them.

``flinkpy cluster start --hosts N`` makes N hosts on a private bridge — ``jobmanager`` and
``tm-1`` ... ``tm-(N-1)``, one TaskManager each — and starts the processes there through
``ip netns exec``; the JobManager listens on its host's address, which this machine (the CLI)
reaches through the bridge. ``flinkpy fault partition A B --for 30s`` cuts the link between two
hosts (packets dropped, as in a real partition: connections time out, nothing is refused) and
heals it afterwards; ``flinkpy cluster stop`` removes the hosts with the processes.

Needs root and iproute2 (``ip``, ``tc``); refused with the reason elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flinkpy.cluster.home import ClusterHome, ClusterInfo, as_home, read_record, write_record
from flinkpy.cluster.local import _launch, find_cluster, start_supervisor
from flinkpy.cluster.netns import Hosts, unavailable
from flinkpy.cluster.spawning import cluster_addresses
from flinkpy.cluster.supervision import policies_from_config
from flinkpy.errors import ClusterUnreachableError, ConfigurationError, ConflictError, UsageError

#: the JobManager's host in a drill cluster (the TaskManagers' hosts are named by their ids)
JOBMANAGER_HOST = "jobmanager"


@dataclass(frozen=True)
class Partition:
    """A link cut between two hosts of a drill cluster."""

    a: str
    b: str
    a_address: str
    b_address: str

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": [self.a, self.b], "addresses": [self.a_address, self.b_address]}


def start_drill_cluster(home: "ClusterHome | str | Path", *, hosts: int, slots: int, rest_port: int, config: Any,
                        timeout_s: float = 60.0) -> ClusterInfo:
    """Start a cluster of ``hosts`` namespace hosts: the JobManager on one, a TaskManager on each
    of the others. ``ConfigurationError`` where namespaces cannot be made (not root)."""
    home = as_home(home)
    if hosts < 2:
        raise UsageError(f"--hosts {hosts}: a drill cluster needs a host for the JobManager and at least one for a TaskManager",
                         remedy="give --hosts 2 or more")
    reason = unavailable()
    if reason is not None:
        raise ConfigurationError(f"a drill cluster's hosts are network namespaces, which cannot be made here: {reason}",
                                 remedy="run 'flinkpy cluster start --hosts N' as root on Linux with iproute2, or start without --hosts")
    if config is not None and config.get("high-availability.type") not in (None, "NONE", "none"):
        raise UsageError("--hosts and high availability together are not offered", remedy="start the drill cluster without --ha")
    running = find_cluster(home)
    if running is not None:
        raise ConflictError(f"a cluster is already running in {home.path} (REST {running.rest_address})",
                            remedy="stop it with 'flinkpy cluster stop', or use another FLINKPY_HOME")
    made = Hosts(gateway=True)
    try:
        made.add(JOBMANAGER_HOST)
        for i in range(1, hosts):
            made.add(f"tm-{i}")
        address = made[JOBMANAGER_HOST].address
        # the JobManager listens on its host's address; each TaskManager learns its own from its
        # connection to the JobManager (taskmanager.host unset)
        placed = (config.with_overrides({"jobmanager.rpc.address": address, "rest.address": address})
                  if config is not None else None)
        addresses = cluster_addresses(placed)
        if placed is None:
            from flinkpy.addresses import resolve

            addresses = resolve({"jobmanager.rpc.address": address, "rest.address": address}.get)
        cluster, _ = _launch(
            home, taskmanagers=hosts - 1, slots=slots, rest_port=rest_port, addresses=addresses,
            heartbeat_interval_ms=int(config.get("heartbeat.interval")) if config is not None else 10000,
            heartbeat_timeout_ms=int(config.get("heartbeat.timeout")) if config is not None else 50000,
            detach=True, tm_stdout=None, timeout_s=timeout_s,
            place=lambda process_id, argv: made[process_id].command(*argv),
        )
    except BaseException:
        made.close()
        raise
    cluster.hosts = made.record()
    cluster.supervisor = start_supervisor(home, policies_from_config(config), ha=False)
    write_record(home, cluster)
    return cluster


def drill_hosts(home: "ClusterHome | str | Path") -> Hosts:
    """The hosts of the drill cluster running in ``home``; an error saying what to start when
    there is none."""
    info = read_record(as_home(home))
    if info is None or find_cluster(home) is None:
        raise ClusterUnreachableError(f"no cluster is running in {as_home(home).path}",
                                      remedy="start a drill cluster with 'flinkpy cluster start --hosts 3'")
    if info.hosts is None:
        raise UsageError("the cluster was not started with --hosts: its processes share one network, which cannot be partitioned",
                         remedy="start a drill cluster with 'flinkpy cluster start --hosts 3' to rehearse partitions")
    return Hosts.attach(info.hosts)


def partition(home: "ClusterHome | str | Path", a: str, b: str) -> Partition:
    """Cut the link between hosts ``a`` and ``b`` of the drill cluster in ``home``."""
    hosts = drill_hosts(home)
    for name in (a, b):
        if name not in hosts.hosts:
            raise UsageError(f"no host {name!r} in the drill cluster", remedy=f"name two of: {', '.join(hosts.hosts)}")
    if a == b:
        raise UsageError(f"a host cannot be cut off from itself ({a})", remedy="name two different hosts")
    hosts.partition(a, b)
    return Partition(a, b, hosts[a].address, hosts[b].address)


def heal(home: "ClusterHome | str | Path") -> list[str]:
    """Undo every partition and throttle between the drill cluster's hosts; their names."""
    hosts = drill_hosts(home)
    for name in hosts.hosts:
        hosts.unthrottle(name)
        hosts.heal(name)
    return list(hosts.hosts)


def heal_later(home: "ClusterHome | str | Path", cut: Partition, after_s: float) -> int:
    """Start a detached process that heals ``cut`` after ``after_s`` seconds; its pid."""
    import subprocess

    from flinkpy.processes import module_command

    argv = module_command("flinkpy.cluster.drill", "--home", str(as_home(home).path), "--heal-after", repr(after_s), cut.a, cut.b)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)
    return proc.pid


def main(argv: list[str] | None = None) -> None:
    """The healer of one partition: wait, then rejoin the two hosts (if the cluster still runs)."""
    import argparse
    import time

    ap = argparse.ArgumentParser(prog="flinkpy-drill-healer")
    ap.add_argument("--home", required=True)
    ap.add_argument("--heal-after", type=float, required=True)
    ap.add_argument("a")
    ap.add_argument("b")
    args = ap.parse_args(argv)
    time.sleep(args.heal_after)
    try:
        drill_hosts(args.home).rejoin(args.a, args.b)
    except Exception:  # noqa: BLE001 - the cluster (and its hosts) stopped meanwhile: nothing to heal
        pass


if __name__ == "__main__":
    main()
