"""Local clusters: a JobManager and TaskManagers as background processes on this machine.

A cluster lives in its *home* (``$FLINKPY_HOME`` or ``~/.flinkpy``)::

    secret              the cluster's secret and REST token (mode 0600)
    flinkpy.yaml        configuration (optional)
    cluster.json        what is running: REST address, pids (with their start times), command
                        lines and restarts, the supervisor
    jobmanager.json     the JobManager's endpoints, written by it once it listens
    hosted/             taskmanager-<id>.json: TaskManagers 'taskmanager start' runs here for a
                        JobManager on another host
    log/                jobmanager.log, taskmanager-<id>.log, taskmanager-<id>.out (printed output),
                        supervisor.log

Every cluster has a supervisor process that starts dead TaskManagers (and, with high
availability, JobManagers) again. The embedded cluster that ``env.execute()`` starts when no
cluster is configured is the same processes in a temporary home, stopped when the job ends
(Flink's MiniCluster, with real processes) — or by its supervisor when the client is gone.

Modules: :mod:`~flinkpy.cluster.home` (the home and ``cluster.json``),
:mod:`~flinkpy.cluster.spawning` (starting and reaping processes), :mod:`~flinkpy.cluster.local`
(start, find, stop, the embedded cluster), :mod:`~flinkpy.cluster.ha` (several JobManagers
under ZooKeeper), :mod:`~flinkpy.cluster.hosts` (one host's TaskManagers of a cluster across
hosts, and the secret they share), :mod:`~flinkpy.cluster.supervision` (when a dead process is started again:
pure) and :mod:`~flinkpy.cluster.supervisor` (the supervisor process). The last two share the first two and never import each other's private names.
"""

from flinkpy.cluster.home import ClusterHome, ClusterInfo, ProcessInfo, write_record
from flinkpy.cluster.local import EmbeddedCluster, add_taskmanager, find_cluster, rest_client_for, start_cluster, stop_cluster

__all__ = [
    "ClusterHome",
    "ClusterInfo",
    "EmbeddedCluster",
    "ProcessInfo",
    "add_taskmanager",
    "find_cluster",
    "rest_client_for",
    "start_cluster",
    "stop_cluster",
    "write_record",
]
