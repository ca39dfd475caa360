"""``Client``: the one way to drive flinkpy, whichever runner serves a job.

A job runs either on a flinkpy cluster (its JobManager's REST API) or under a Spark driver
(``--runner spark``), which registers itself in the cluster home and answers the same REST
paths for its one job. ``Client`` hides the difference: every job operation goes to the
endpoint that serves the job (its Spark driver when one is registered, else the cluster), so
callers never choose. Operations that follow an asynchronous request to its end (savepoints,
stop-with-savepoint, checkpoints) take a :class:`~flinkpy.client.operations.Deadline` shared by
their steps.

Which cluster: an explicit ``address`` (``HOST:PORT`` or a URL) names one JobManager and
nothing else; without one, the cluster running in the cluster home (``$FLINKPY_HOME`` or
``~/.flinkpy``) and the Spark jobs registered there. :meth:`Client.from_environment` adds
``$FLINKPY_JOBMANAGER`` between the two, the CLI's rule.

>>> Client("127.0.0.1:8081", token="t").cluster.address
'http://127.0.0.1:8081'
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from flinkpy.client import operations
from flinkpy.client.operations import Deadline
from flinkpy.network.rest_client import JsonObject, JsonScalar, RestClient
from flinkpy.errors import ClusterUnreachableError, ConflictError, NotFoundError

if TYPE_CHECKING:
    from flinkpy.program.context import SubmittedJob
    from flinkpy.cluster import ClusterHome

#: names the JobManager to talk to when no address is given explicitly
JOBMANAGER_ENV = "FLINKPY_JOBMANAGER"
LOCAL, SPARK = "local", "spark"


class Client:
    """Jobs, savepoints, checkpoints, restart strategies and faults of one cluster home."""

    def __init__(self, address: str | None = None, *, home: ClusterHome | str | Path | None = None, token: str | None = None) -> None:
        self.address = address or None
        self._home_arg = home
        self._home: ClusterHome | None = None
        self._token = token
        self._cluster: RestClient | None = None

    @classmethod
    def from_environment(cls, address: str | None = None) -> Client:
        """``address`` if given, else ``$FLINKPY_JOBMANAGER``, else the cluster home's cluster."""
        return cls(address or os.environ.get(JOBMANAGER_ENV) or None)

    # ----------------------------------------------------------------- where requests go

    @property
    def home(self) -> ClusterHome:
        if self._home is None:
            from flinkpy.cluster import ClusterHome

            self._home = ClusterHome.resolve(self._home_arg)
        return self._home

    @property
    def token(self) -> str | None:
        """The cluster's token from the home; None when there is none on this machine (the
        server then answers 401 with its remedy)."""
        if self._token is None:
            try:
                self._token = self.home.token()
            except (OSError, LookupError):
                return None
        return self._token

    @property
    def cluster(self) -> RestClient:
        """The JobManager's REST client; ``ClusterUnreachableError`` when no cluster runs."""
        if self._cluster is None:
            self._cluster = self._connect()
        return self._cluster

    def _connect(self) -> RestClient:
        if self.address:
            return RestClient(self.address, self.token)
        from flinkpy.cluster import find_cluster, rest_client_for

        info = find_cluster(self.home)
        if info is None:
            raise ClusterUnreachableError(
                "no cluster is running",
                remedy="start one with 'flinkpy cluster start', or pass -m HOST:PORT",
            )
        return rest_client_for(info, self.token)

    def spark_record(self, job_id: str) -> JsonObject | None:
        """The Spark driver's record of ``job_id`` in the cluster home; None when the job is
        not a Spark job registered there (or an address names one JobManager)."""
        if self.address:
            return None
        from flinkpy.spark.control_registry import read_record

        return read_record(self.home.path, job_id)

    def runner_of(self, job_id: str) -> str:
        """"spark" for a Spark job registered in the home, "local" (flinkpy's engine) otherwise."""
        return SPARK if self.spark_record(job_id) is not None else LOCAL

    def endpoint(self, job_id: str) -> RestClient:
        """Whoever serves ``job_id``: its Spark driver (or, once it has ended, its record), else
        the cluster."""
        if not self.address:
            from flinkpy.spark.control_registry import driver_client

            found = driver_client(self.home.path, job_id, self.token)
            if found is not None:
                return found
        return self.cluster

    # ----------------------------------------------------------------- the cluster

    def overview(self) -> JsonObject:
        return self.cluster.overview()

    def taskmanagers(self) -> list[JsonObject]:
        return self.cluster.taskmanagers()

    def log(self, component: str, *, stdout: bool = False, lines: int = 100) -> str:
        return self.cluster.log(component, stdout=stdout, lines=lines)

    def log_files(self, component: str) -> list[JsonObject]:
        """A process's log and stdout files, rotated ones included, with their sizes."""
        return self.cluster.log_files(component)

    def stream_log(self, component: str, *, stdout: bool = False, lines: int = 100, follow: bool = False) -> Iterator[bytes]:
        """A log's tail (and with ``follow`` what is appended) in chunks, as the JobManager streams it."""
        return self.cluster.stream_log(component, stdout=stdout, lines=lines, follow=follow)

    # ----------------------------------------------------------------- jobs

    def run(self, path: str, args: Sequence[str] = (), **options: Any) -> list[SubmittedJob]:
        """Run JOB.py, submitting what its ``env.execute()`` builds to this client's cluster (an
        embedded one when none runs), or to Spark with ``execution.runner: spark`` in
        ``overrides`` or the configuration. ``options`` are those of
        :func:`flinkpy.client.program.run_program` (parallelism, detached, overrides,
        savepoint_path, ...); returns the submitted jobs, with their final state unless detached."""
        from flinkpy.client.program import run_program

        return run_program(path, list(args), address=self.address, home=self.home, **options)

    def list_jobs(self) -> list[JsonObject]:
        """The cluster's jobs ("runner": "local") and the Spark jobs of the home ("runner":
        "spark"); no cluster is fine when there are Spark jobs."""
        spark: list[JsonObject] = []
        if not self.address:
            from flinkpy.spark.control_registry import list_records, overview_entry

            spark = [overview_entry(r) for r in list_records(self.home.path)]
        try:
            jobs = [dict(j, runner=j.get("runner", LOCAL)) for j in self.cluster.jobs_overview()]
        except ClusterUnreachableError:
            if not spark:
                raise
            jobs = []
        return jobs + spark

    def job(self, job_id: str) -> JsonObject:
        return self.endpoint(job_id).job(job_id)

    def job_exceptions(self, job_id: str) -> JsonObject:
        return self.endpoint(job_id).job_exceptions(job_id)

    def cancel(self, job_id: str) -> None:
        self.endpoint(job_id).cancel_job(job_id)

    # ----------------------------------------------------------------- checkpoints

    def checkpoints(self, job_id: str, history: int | None = None) -> JsonObject:
        return self.endpoint(job_id).checkpoints(job_id, history)

    def trigger_checkpoint(self, job_id: str, wait_s: float = 0.0) -> int:
        """Trigger a checkpoint on the cluster now; its id. While as many checkpoints as
        allowed are in progress it waits its turn, up to ``wait_s``."""
        return self.cluster.trigger_checkpoint(job_id, wait_s)

    def wait_for_checkpoint(self, job_id: str, checkpoint_id: int, deadline: Deadline, timeout: str) -> JsonObject:
        return operations.wait_for_checkpoint(self.cluster, job_id, checkpoint_id, deadline, timeout)

    # ----------------------------------------------------------------- savepoints and stop

    def trigger_savepoint(
        self,
        job_id: str,
        target_dir: str | None = None,
        *,
        format_type: str = "CANONICAL",
        deadline: Deadline,
        if_busy: str = "fail",
        on_busy: Callable[[], None] | None = None,
        trigger: str | None = None,
    ) -> str:
        """Ask for a savepoint; its request id. ``if_busy="wait"``: while another savepoint
        of the job is in progress, ask again until the deadline (``on_busy`` once). A relative
        ``target_dir`` is resolved here, against this process's working directory."""
        target_dir = _resolved(target_dir)
        end = self.endpoint(job_id)
        return operations.request_operation(
            end, job_id, lambda: end.trigger_savepoint(job_id, target_dir, format_type=format_type, trigger=trigger),
            if_busy=if_busy, deadline=deadline, on_busy=on_busy,
        )

    def stop_with_savepoint(self, job_id: str, target_dir: str | None = None, *, drain: bool = False, deadline: Deadline,
                            trigger: str | None = None) -> str:
        """Ask for a final savepoint after which the job finishes; the request id."""
        target_dir = _resolved(target_dir)
        end = self.endpoint(job_id)
        return operations.request_operation(end, job_id, lambda: end.stop_with_savepoint(job_id, target_dir, drain=drain, trigger=trigger),
                                            if_busy="fail", deadline=deadline)

    def savepoint_status(self, job_id: str, request_id: str) -> JsonObject:
        """The operation document as the endpoint returned it (see :meth:`savepoint_location`)."""
        return self.endpoint(job_id).savepoint_status(job_id, request_id)

    @staticmethod
    def savepoint_location(doc: JsonObject, job_id: str, request_id: str) -> str | None:
        """The location in a status document; None in progress; ``SavepointFailedError``."""
        return operations.operation_result(doc, job_id, request_id)

    def wait_for_savepoint(self, job_id: str, request_id: str, deadline: Deadline, what: str = "savepoint") -> str:
        """The savepoint's location once the operation completed."""
        return operations.wait_for_savepoint(self.endpoint(job_id), job_id, request_id, deadline, what)

    def wait_until_finished(self, job_id: str, deadline: Deadline, location: str) -> str:
        """After a stop: the job's final state (FINISHED), or the error for any other end."""
        return operations.wait_until_finished(self.endpoint(job_id), job_id, deadline, location)

    def restored_from(self, job_id: str) -> str | None:
        """The savepoint or checkpoint path the job was last restored from, if any."""
        try:
            doc = self.checkpoints(job_id)
        except NotFoundError:
            return None
        restored = ((doc or {}).get("latest") or {}).get("restored") or {}
        return restored.get("external_path")

    def protected_snapshots(self, job_id: str) -> list[str]:
        """What retention must not dispose of for this job: the snapshot it was last restored
        from, the one it was started from and, while it has not ended, the one a restart would
        restore from now (a job that ended restarts no more: its final savepoint is pruned as
        any other, kept while it is the job's newest)."""
        try:
            doc = self.job(job_id)
        except NotFoundError:
            return []
        savepoints = doc.get("savepoints") or {}
        found = [self.restored_from(job_id), savepoints.get("started-from")]
        if doc.get("state") not in ("FINISHED", "CANCELED", "FAILED"):
            found.append(savepoints.get("restore-point"))
        return [str(p) for p in found if p]

    def prune_savepoints(self, job_id: str, location: str, keep: int) -> list[str]:
        """Retention after a savepoint at ``location``: dispose of the job's older savepoints
        in the same directory beyond the newest ``keep``, never one it depends on."""
        from flinkpy.client.savepoints import prune_savepoints

        return prune_savepoints(location, job_id, keep, self.protected_snapshots(job_id))

    # ----------------------------------------------------------------- restart strategies

    def restart_strategy(self, job_id: str) -> JsonObject:
        return self.endpoint(job_id).restart_strategy(job_id)

    def set_restart_strategy(self, job_id: str, config: Mapping[str, str]) -> JsonObject:
        """Give the job (on the cluster) the strategy of ``config``'s restart-strategy.* keys."""
        return self.cluster.set_restart_strategy(job_id, config)

    # ----------------------------------------------------------------- faults

    def inject_job_fault(self, job_id: str, kind: str, **params: JsonScalar) -> JsonObject:
        """A fault aimed at the job's tasks (or a Spark job's workers); its journal entry."""
        return self.endpoint(job_id).inject_job_fault(job_id, kind, **params)

    def inject_cluster_fault(self, kind: str, **params: JsonScalar) -> JsonObject:
        """A fault aimed at the cluster (a TaskManager, the storage); its journal entry."""
        return self.cluster.inject_cluster_fault(kind, **params)

    def fault_history(self, job_id: str) -> JsonObject:
        return self.endpoint(job_id).fault_history(job_id)

    def require_spark_job(self, job_id: str, kind: str) -> None:
        """Refuse a Spark-only fault for a job that is not a Spark job of this home."""
        if self.spark_record(job_id) is None:
            raise NotFoundError(f"no Spark job {job_id} is registered in this cluster home: {kind} applies to jobs run with --runner spark",
                                remedy="see 'flinkpy list -a'; on flinkpy's engine use kill-taskmanager or kill-task")

    def kill_jobmanager(self, *, force: bool = False) -> JsonObject:
        """SIGKILL the home's (leading) JobManager; returns ``{"what", "pid", ...}`` of it.

        Without high availability its jobs are lost with it: refused unless ``force``.
        """
        from flinkpy.cluster import find_cluster

        cluster = find_cluster(self.home)
        if cluster is None:
            raise ClusterUnreachableError("no cluster is running in this home", remedy="start one with 'flinkpy cluster start'")
        if cluster.ha is not None:
            if cluster.leader is None:
                raise ClusterUnreachableError("no JobManager leads this cluster right now", remedy="see 'flinkpy cluster status'")
            target = {"what": "JobManager", "id": cluster.leader["id"], "pid": int(cluster.leader["pid"]), "epoch": cluster.leader["epoch"]}
            os.kill(target["pid"], signal.SIGKILL)
            return target
        if not force:
            raise ConflictError(
                f"killing the JobManager (pid {cluster.jobmanager_pid}) loses every job of the cluster: it has no high availability",
                remedy="pass --yes to kill it anyway, or start the cluster with --ha zookeeper",
            )
        os.kill(cluster.jobmanager_pid, signal.SIGKILL)
        return {"what": "JobManager", "pid": cluster.jobmanager_pid}


def _resolved(target_dir: str | None) -> str | None:
    """A savepoint directory as the cluster must get it (see flinkpy.checkpoint.targets)."""
    if not target_dir:
        return None
    from flinkpy.checkpoint.targets import resolve_target  # not at import: the CLI starts faster without fsspec

    return resolve_target(target_dir)
