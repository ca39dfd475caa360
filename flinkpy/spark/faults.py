"""Faults a Spark job takes (``flinkpy fault kill-task | kill-executor`` on a Spark job).

kill-task SIGKILLs (or TERMs) a Spark Python worker that is running a task of the job — under
the driver's JVM (``local[N]``) or under an executor of its application on this machine — the
crash a Python UDF or data source worker has; kill-executor SIGKILLs one executor JVM of the
application, which Spark answers by failing its tasks and asking the cluster for another.
Either is journaled by the driver before the signal goes out.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any, Callable

from flinkpy.errors import ConflictError, NotFoundError

if TYPE_CHECKING:
    from flinkpy.spark.driver import SparkDriver

log = logging.getLogger("flinkpy.spark.faults")


def kill_task(driver: SparkDriver, params: dict[str, Any]) -> dict[str, Any]:
    """Signal one busy Spark Python worker of ``driver``'s job; the journal entry."""
    from flinkpy import faults as f

    workers = busy(python_workers(driver.pid, driver.application_id))
    if not workers:
        raise ConflictError(f"no Spark Python worker of job {driver.job_id} is running Python code right now",
                            remedy="retry while a micro-batch runs (an idle worker's death fails nothing)")
    pid = workers[0] if params.get("pick") is None else f.choose(workers, float(params["pick"]))
    sig = signal.SIGTERM if str(params.get("signal", "KILL")).upper() == "TERM" else signal.SIGKILL
    entry = driver.journal("kill-task", {"what": "Spark Python worker", "pid": pid, "under": owner(pid)},
                           signal=params.get("signal", "KILL"), pid=pid)
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
    log.warning("fault kill-task: sent %s to Spark Python worker pid %d of job %s", sig.name, pid, driver.job_id)
    return entry


def kill_executor(driver: SparkDriver, params: dict[str, Any]) -> dict[str, Any]:
    """SIGKILL one executor JVM of ``driver``'s application (``params["executor"]``: its id);
    the journal entry."""
    from flinkpy import faults as f
    from flinkpy.spark.standalone import executor_id, executors

    if driver.application_id is None or driver.master.startswith("local"):
        raise ConflictError(f"job {driver.job_id} runs on {driver.master}, which has no separate executor processes",
                            remedy="kill-executor needs a cluster master (flinkpy spark start; --spark-master spark://...); use kill-task")
    found = {executor_id(p): p for p in executors(driver.application_id)}
    found.pop(None, None)
    wanted = params.get("executor")
    if wanted is not None:
        if str(wanted) not in found:
            raise NotFoundError(f"no executor {wanted} of job {driver.job_id} (Spark application {driver.application_id}) runs on this machine",
                                remedy=f"executors here: {', '.join(sorted(found)) or 'none'}")
        chosen = str(wanted)
    elif not found:
        raise ConflictError(f"no executor of job {driver.job_id} (Spark application {driver.application_id}) runs on this machine",
                            remedy="retry once the application has executors (a lost one is relaunched by its worker)")
    else:
        chosen = sorted(found)[0] if params.get("pick") is None else f.choose(list(found), float(params["pick"]))
    proc = found[chosen]
    entry = driver.journal("kill-executor", {"what": "Spark executor", "executor-id": chosen, "pid": proc.pid,
                                             "application-id": driver.application_id}, pid=proc.pid, executor=chosen)
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    log.warning("fault kill-executor: SIGKILL to executor %s (pid %d) of job %s, application %s",
                chosen, proc.pid, driver.job_id, driver.application_id)
    return entry


#: the Spark runner's faults, by kind: those of the registry (flinkpy.faults.kinds) a Spark job takes
HANDLERS: dict[str, Callable[[SparkDriver, dict[str, Any]], dict[str, Any]]] = {"kill-task": kill_task, "kill-executor": kill_executor}


def python_workers(driver_pid: int, application_id: str | None = None) -> list[int]:
    """Pids of the Spark Python workers of this job: processes of ``pyspark.daemon`` forked by
    the daemon (the daemon itself only forks, it runs no task), under the driver's JVM and, on
    a cluster, under the executors of its application that run on this machine."""
    import psutil

    roots = [driver_pid]
    if application_id:
        from flinkpy.spark.standalone import executors

        roots += [p.pid for p in executors(application_id)]
    tree = []
    for root in roots:
        try:
            tree += psutil.Process(root).children(recursive=True)
        except psutil.Error:
            continue
    out = []
    for p in tree:
        try:
            if "pyspark.daemon" in " ".join(p.cmdline()) and "pyspark.daemon" in " ".join(p.parent().cmdline()) \
                    and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            continue
    return sorted(out)


def owner(pid: int) -> str:
    """Whose Python worker ``pid`` is: "executor N" (a cluster's executor JVM) or "driver"."""
    import psutil

    from flinkpy.spark.standalone import EXECUTOR_MARK, executor_id

    try:
        for parent in psutil.Process(pid).parents():
            if any(EXECUTOR_MARK in part for part in parent.cmdline()):
                return f"executor {executor_id(parent)}"
    except psutil.Error:
        pass
    return "driver"


def busy(pids: list[int], sample_s: float = 0.1, share: float = 0.25) -> list[int]:
    """The workers among ``pids`` that spent at least ``share`` of ``sample_s`` on a CPU: those
    running a task (an idle worker waits on its socket; killing it fails no task)."""
    import psutil

    def cpu(pid: int) -> float:
        try:
            t = psutil.Process(pid).cpu_times()
            return t.user + t.system
        except psutil.Error:
            return -1.0

    before = {pid: cpu(pid) for pid in pids}
    time.sleep(sample_s)
    return [pid for pid in pids if before[pid] >= 0 and cpu(pid) - before[pid] >= share * sample_s]
