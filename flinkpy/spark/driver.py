"""The Spark driver process: one flinkpy job on Spark Structured Streaming, supervised.

``flinkpy run --runner spark JOB.py`` starts ``python -m flinkpy.spark.driver SPEC.json``. The
driver runs the job file up to ``execute()``, translates the captured graph into a Spark plan
(refusing what does not translate before anything starts), registers itself in the cluster
home, serves its control endpoint, then owns a SparkSession and the StreamingQuery:

- the query's checkpoint location is ``<execution.checkpointing.dir>/<job_id>/spark``; the
  checkpoint interval is the trigger interval (bounded jobs run with Trigger.AvailableNow);
- when the query fails, the job's restart strategy decides whether and when it starts again
  from that checkpoint location; each failure goes to the exception history;
- cancel, stop-with-savepoint and savepoints arrive on the control endpoint and are carried
  out here, between micro-batches; ``kill-task`` SIGKILLs a Spark Python worker of the job,
  ``kill-executor`` an executor JVM of its application (on a cluster);
- on a cluster master the job's code is shipped to the executors and their Python checked
  before the query starts (:mod:`flinkpy.spark.shipping`); a ``spark://`` master that does not
  answer refuses the job before anything starts.

Exit status: 0 FINISHED, 5 FAILED, 10 CANCELED, 7 the job could not be translated or restored,
3 the master does not answer, 8 Spark or the executors cannot run the job.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from flinkpy.clock import now_ms
from flinkpy.errors import ConflictError, ExitCode, FlinkpyError, NotFoundError
from flinkpy.faults import FaultRecord, journal_view
from flinkpy.signals import StopSignals
from flinkpy.spark import control_registry as registry
from flinkpy.spark import restore, state_reading
from flinkpy.spark import supervisor_snapshots as snapshots
from flinkpy.spark.supervisor import GiveUp, SparkJobSupervisor
from flinkpy.units import parse_duration_ms

log = logging.getLogger("flinkpy.spark.driver")

#: how long the executors may take to run their first task (the application waits for free
#: cores and memory on the cluster meanwhile)
EXECUTOR_CHECK_TIMEOUT_S = 180.0
#: how long a savepoint waits for the running micro-batch to end before stopping the query
#: anyway (an unfinished batch is replayed from its offsets: the copy stays consistent)
BATCH_BOUNDARY_WAIT_S = 2.0


def parse_spark_conf(items: list[str] | str | None) -> dict[str, str]:
    """``["k=v", ...]`` or ``"k=v,k=v"`` to a dict; a malformed pair is a usage error.

    >>> parse_spark_conf("spark.sql.shuffle.partitions=4, spark.executor.memory=1g")
    {'spark.sql.shuffle.partitions': '4', 'spark.executor.memory': '1g'}
    """
    from flinkpy.errors import UsageError

    if isinstance(items, str):
        items = [p for p in items.split(",") if p.strip()]
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"malformed Spark setting {item!r}", remedy="write it as key=value, e.g. spark.sql.shuffle.partitions=4")
        out[key.strip()] = value.strip()
    return out


def failure_cause(exc: BaseException) -> dict[str, Any]:
    """A Spark or Python failure as an exception-history cause; names the user's Python
    exception (``ValueError: ...``) when a Python worker's traceback is inside."""
    text = str(exc)
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    java = getattr(exc, "getStackTrace", None)
    if callable(java):
        try:
            trace = f"{trace}\nJVM stack trace:\n{java()}"
        except Exception:  # noqa: BLE001
            pass
    name, message = type(exc).__name__, text.strip().splitlines()[0] if text.strip() else ""
    import re

    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Fault)): (.+)$", line)
        if m and "Py4J" not in m.group(1) and not m.group(1).startswith(("org.", "java.", "py4j.", "pyspark.")):
            name, message = m.group(1), m.group(2).strip()
    if "Python worker exited unexpectedly" in text:
        name, message = "PythonWorkerCrashed", "a Spark Python worker exited unexpectedly (crashed or killed)"
    return {"class": name, "message": message[:2000], "stack-trace": trace}


class SparkDriver:
    """Runs one job: see the module docstring. Methods called by the control endpoint are
    thread-safe; everything that touches Spark runs on the driver's main thread."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from flinkpy.cluster import ClusterHome
        from flinkpy.processes import create_time

        self.spec = spec
        self.home = ClusterHome(Path(spec["home"]))
        self.job_id: str = spec["job_id"]
        self.name: str = spec.get("name") or "Flink Streaming Job"
        self.config: dict[str, str] = dict(spec.get("config") or {})
        self.lock = threading.Condition()
        self.commands: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.supervisor = SparkJobSupervisor(self.job_id, self.name, None, now_ms=now_ms())
        self.savepoints: dict[str, dict[str, Any]] = {}
        self.faults: list[FaultRecord] = []
        self.restored: dict[str, Any] | None = None
        self.busy_savepoint: str | None = None
        self.control_address: str | None = None
        self.query: Any = None
        self.spark: Any = None
        self.plan: Any = None
        self.error: dict[str, Any] | None = None
        checkpoint_dir = self.config.get("execution.checkpointing.dir") or str(self.home.path / "checkpoints")
        self.checkpoint_dir = checkpoint_dir
        self.location = snapshots.checkpoint_location(checkpoint_dir, self.job_id)
        #: the query's name, by which its exactly-once sinks fence (a resumed job keeps its predecessor's)
        self.query_name = restore.query_name_of(self.job_id)
        self.savepoint_dir = self.config.get("execution.checkpointing.savepoint-dir") or f"{checkpoint_dir.rstrip('/')}/savepoints"
        self.spark_conf = parse_spark_conf(self.config.get("spark.conf")) | dict(spec.get("spark_conf") or {})
        self.master = self.config.get("spark.master") or "local[2]"
        self.parallelism = int(spec.get("parallelism") or self.config.get("parallelism.default") or 1)
        self.shuffle_partitions = int(self.spark_conf.get("spark.sql.shuffle.partitions") or self.parallelism)
        self.pid, self.create_time = os.getpid(), create_time(os.getpid())
        self.submitted = False
        #: Spark's id of this job's application (its executors carry it in their command line)
        self.application_id: str | None = None
        #: what the executors answered to the check before the query started (see shipping)
        self.executors: list[dict[str, Any]] = []
        self.ship_dir = registry.jobs_dir(self.home.path) / f"{self.job_id}.pyfiles"
        #: how many times the job file calls execute() (this driver runs the call ``spec["job_index"]``)
        self.job_count: int | None = None

    # ------------------------------------------------------------------ registry

    def record(self) -> dict[str, Any]:
        with self.lock:
            sup = self.supervisor
            rec: dict[str, Any] = {
                "jid": self.job_id, "name": sup.name, "runner": "spark", "state": sup.state, "pid": self.pid,
                "create_time": self.create_time, "control": self.control_address, "start-time": sup.timestamps["CREATED"],
                "master": self.master, "checkpoint_location": self.location, "submitted": self.submitted,
                "summary": sup.summary(now_ms()), "error": self.error, "application_id": self.application_id,
                "executors": self.executors, "job_count": self.job_count,
            }
            if sup.is_terminal():
                rec["final"] = {"job": self._job_document_locked(), "exceptions": sup.exceptions_document(),
                                "execution-result": sup.execution_result(), "checkpoints": self._checkpoints_locked(10),
                                "restart-strategy": sup.restart_strategy(),
                                "faults": {"jid": self.job_id, "faults": journal_view(self.faults, sup.state, sup.restarts)},
                                # a stop-with-savepoint's status, for a client that asks after the driver exited
                                **{f"savepoints/{tid}": d for tid, d in self.savepoints.items()}}
            return rec

    def publish(self) -> None:
        registry.write_record(self.home.path, self.record())

    # ------------------------------------------------------------------ control endpoint verbs

    def standby_message(self) -> str | None:
        return None

    def summary(self) -> dict[str, Any]:
        with self.lock:
            return self.supervisor.summary(now_ms())

    def _job_document_locked(self) -> dict[str, Any]:
        sup = self.supervisor
        doc = sup.summary(now_ms())
        doc.update({
            "now": now_ms(), "timestamps": dict(sup.timestamps), "runner": "spark",
            "vertices": [{"id": 1, "name": f"Spark query ({self.master})", "parallelism": self.shuffle_partitions,
                          "maxParallelism": self.shuffle_partitions, "status": sup.state,
                          "tasks": {sup.state: 1}, "metrics": {}, "subtasks": []}],
            "plan": self._plan_dict(), "failover-strategy": "full", "restart-strategy": sup.restart_strategy(),
            "events": list(sup.events), "spark": {"master": self.master, "checkpoint_location": self.location,
                                                   "shuffle_partitions": self.shuffle_partitions, "attempt": sup.attempt,
                                                   "application_id": self.application_id, "query": self.query_name},
        })
        return doc

    def _plan_dict(self) -> dict[str, Any]:
        try:
            return self.plan.to_dict() if self.plan is not None else {}
        except Exception as e:  # noqa: BLE001
            return {"error": str(e)}

    def job_document(self) -> dict[str, Any]:
        with self.lock:
            return self._job_document_locked()

    def exceptions_document(self) -> dict[str, Any]:
        with self.lock:
            return self.supervisor.exceptions_document()

    def wait_result(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while not self.supervisor.is_terminal() and time.monotonic() < deadline:
                self.lock.wait(max(0.0, deadline - time.monotonic()))
            return self.supervisor.execution_result()

    def request_cancel(self) -> None:
        with self.lock:
            if self.supervisor.is_terminal():
                raise ConflictError(f"job {self.job_id} is {self.supervisor.state}: nothing to cancel", remedy="see 'flinkpy list -a'")
        self.commands.put(("cancel",))

    def _checkpoints_locked(self, history: int) -> dict[str, Any]:
        return snapshots.checkpoint_stats(self.location, restored=self.restored, history=history)

    def checkpoints(self, history: int) -> dict[str, Any]:
        return snapshots.checkpoint_stats(self.location, restored=self.restored, history=history)

    def checkpoint_config(self) -> dict[str, Any]:
        interval = self.config.get("execution.checkpointing.interval")
        return {"mode": "exactly_once", "interval": parse_duration_ms(interval) if interval else 0x7FFFFFFFFFFFFFFF,
                "checkpoint_storage": self.location, "runner": "spark"}

    def request_savepoint(self, target_dir: str | None, *, stop: bool) -> str:
        with self.lock:
            if self.supervisor.state != "RUNNING":
                raise ConflictError(f"job {self.job_id} is {self.supervisor.state}, not RUNNING: no savepoint can be taken",
                                    remedy="savepoints are taken of running jobs; see 'flinkpy list -a'")
            if self.busy_savepoint is not None:
                raise ConflictError(f"a savepoint of job {self.job_id} is already in progress ({self.busy_savepoint})",
                                    remedy="wait for it ('flinkpy savepoint status')")
            tid = uuid.uuid4().hex
            self.busy_savepoint = tid
            self.savepoints[tid] = {"status": {"id": "IN_PROGRESS"}}
        self.commands.put(("savepoint", tid, target_dir or self.savepoint_dir, stop))
        return tid

    def savepoint_status(self, trigger_id: str) -> dict[str, Any]:
        with self.lock:
            doc = self.savepoints.get(trigger_id)
        if doc is None:
            raise NotFoundError(f"no savepoint {trigger_id} of job {self.job_id}", remedy="use the id 'flinkpy savepoint trigger --detached' printed")
        return doc

    def restart_strategy(self) -> dict[str, Any]:
        with self.lock:
            return self.supervisor.restart_strategy()

    def fault_history(self) -> list[dict[str, Any]]:
        with self.lock:
            return journal_view(self.faults, self.supervisor.state, self.supervisor.restarts)

    def fault(self, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        """kill-task: SIGKILL (or TERM) one busy Spark Python worker of this job; kill-executor:
        SIGKILL one executor JVM of its application (see :mod:`flinkpy.spark.faults`)."""
        from flinkpy.errors import ConfigurationError
        from flinkpy.spark import faults

        handler = faults.HANDLERS.get(kind)
        if handler is None:
            raise ConfigurationError(f"{kind!r} is not a fault a Spark job supports",
                                     remedy="use kill-task (a Spark Python worker) or kill-executor (an executor JVM)")
        with self.lock:
            if self.supervisor.state != "RUNNING":
                raise ConflictError(f"job {self.job_id} is {self.supervisor.state}, not RUNNING", remedy="wait for it to run")
        return handler(self, params)

    def journal(self, kind: str, target: dict[str, Any], **note: Any) -> dict[str, Any]:
        """Record a fault about to be carried out: in the job's fault journal and its history."""
        from flinkpy import faults as f

        with self.lock:
            entry = f.FaultRecord.injected(now_ms(), kind, target, self.supervisor.state, self.supervisor.restarts,
                                           signal=note.pop("signal", "KILL"))
            f.record(self.faults, entry)
            self.supervisor.note(now_ms(), "fault", fault=kind, **note)
        return entry.to_json()

    # ------------------------------------------------------------------ the job's life

    def prepare(self) -> None:
        """Capture and translate the job, check a restore: everything that can refuse the job
        before Spark starts. Raises FlinkpyError."""
        from flinkpy.common.restart_backoff import strategy_from_config

        from flinkpy.spark.standalone import check_master

        check_master(self.master)
        plan, name, job_config, self.job_count = _load_plan(self.spec, self.config)
        self.plan = plan
        self.config.update(job_config)
        self.parallelism = int(job_config.get("parallelism.default") or self.spec.get("parallelism")
                               or self.config.get("parallelism.default") or 1)
        self.shuffle_partitions = int(self.spark_conf.get("spark.sql.shuffle.partitions") or self.parallelism)
        with self.lock:
            self.name = self.supervisor.name = name
            interval = self.config.get("execution.checkpointing.interval")
            self.supervisor.strategy = strategy_from_config(
                {k: v for k, v in self.config.items() if k.startswith("restart-strategy.")}, checkpointing_enabled=bool(interval))
        if self.spec.get("savepoint_path"):
            start = restore.start_from(self.spec["savepoint_path"], plan=plan, location=self.location, home=self.home.path,
                                       shuffle_partitions=self.shuffle_partitions,
                                       allow_non_restored_state=bool(self.spec.get("allow_non_restored_state")),
                                       claim_mode=self.config.get("execution.state-recovery.claim-mode"))
            self.restored, self.query_name = start.restored, start.query_name or self.query_name
            self.supervisor.note(now_ms(), "restored", **start.note)
        restore.keep_query_name(self.location, self.query_name)

    def start_session(self) -> None:
        from flinkpy.spark.session import spark_session

        self.spark = spark_session(
            self.master, {"spark.sql.shuffle.partitions": str(self.shuffle_partitions), **self.spark_conf},
            app_name=f"flinkpy {self.name} {self.job_id}", log_level=os.environ.get("FLINKPY_SPARK_LOG_LEVEL", "WARN"),
        )
        sc = self.spark.sparkContext
        self.application_id = sc.applicationId
        self.publish()
        from flinkpy.spark import shipping

        if shipping.ships(self.master):
            from flinkpy.program.python_files import KEY, entries

            files = shipping.prepare(self.ship_dir, job_file=self.spec["job_file"], python_file_entries=entries(self.config.get(KEY)))
            shipping.ship(sc, files)
            log.info("job %s: shipped flinkpy.zip, %s to the executors of %s", self.job_id, ", ".join(p.name for p in files),
                     self.application_id)
            self.executors = shipping.check_executors(sc, shipping.executor_modules(self.config), timeout_s=EXECUTOR_CHECK_TIMEOUT_S,
                                                      master=self.master)
            self.publish()

    def _start_query(self) -> Any:
        interval = self.config.get("execution.checkpointing.interval")
        return self.plan.start(self.spark, checkpoint_location=self.location,
                               trigger_interval_ms=parse_duration_ms(interval) if interval else None,
                               query_name=self.query_name)

    def supervise(self) -> None:
        """Start the query and keep it going as the restart strategy allows."""
        while True:
            with self.lock:
                if self.supervisor.is_terminal():
                    return
            try:
                query = self._start_query()
            except Exception as e:  # noqa: BLE001 - a failure to start counts like a failure
                if self._on_failure(e):
                    continue
                return
            with self.lock:
                self.query = query
                self.supervisor.started(now_ms())
                self.lock.notify_all()
            log.info("job %s: query started (attempt %d)", self.job_id, self.supervisor.attempt)
            self.publish()
            outcome = self._watch(query)
            if outcome == "restart":
                continue
            return

    def _on_failure(self, exc: BaseException) -> bool:
        """Record a failure; wait out the backoff. True to start again."""
        cause = failure_cause(exc)
        log.error("job %s: query failed: %s: %s", self.job_id, cause["class"], cause["message"])
        with self.lock:
            action = self.supervisor.failed(now_ms(), cause)
            self.lock.notify_all()
        self.publish()
        if isinstance(action, GiveUp):
            return False
        while now_ms() < action.at_ms:
            try:
                command = self.commands.get(timeout=max(0.0, (action.at_ms - now_ms()) / 1000))
            except queue.Empty:
                break
            if command[0] == "cancel":
                with self.lock:
                    self.supervisor.cancel(now_ms())
                    self.lock.notify_all()
                return False
            self._refuse_savepoint(command, "the job is restarting")
        return True

    def _refuse_savepoint(self, command: tuple[Any, ...], why: str) -> None:
        if command[0] == "savepoint":
            self._finish_savepoint(command[1], None, f"savepoint of job {self.job_id} aborted: {why}")

    def _watch(self, query: Any) -> str:
        """Wait for the query to end or for a command; returns "restart" or "done"."""
        while True:
            try:
                ended = query.awaitTermination(0.2)
            except Exception as e:  # noqa: BLE001 - StreamingQueryException and friends
                return "restart" if self._on_failure(e) else "done"
            if ended:
                with self.lock:
                    self.supervisor.finished(now_ms())
                    self.lock.notify_all()
                return "done"
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                continue
            if command[0] == "cancel":
                with self.lock:
                    self.supervisor.cancel(now_ms())
                self._stop(query)
                with self.lock:
                    self.supervisor.canceled(now_ms())
                    self.lock.notify_all()
                return "done"
            if command[0] == "savepoint":
                _, tid, target, stop = command
                # after a savepoint the query starts again from the same checkpoint location
                # (not a restart: nothing failed); after stop-with-savepoint the job is done
                done = self._savepoint(query, tid, target, stop)
                return "done" if done and stop else "restart"

    def _stop(self, query: Any) -> None:
        """Stop the query; a micro-batch the stop interrupts ends quietly (sinks.QueryStopped)."""
        sink_driver = getattr(self.plan, "sink_driver", None)
        if sink_driver is not None:
            sink_driver.stopping.set()
        query.stop()

    def _savepoint(self, query: Any, tid: str, target: str, stop: bool) -> bool:
        """Stop at a batch boundary, copy the checkpoint location, then (unless stop) go on."""
        trigger = now_ms()
        deadline = time.monotonic() + BATCH_BOUNDARY_WAIT_S
        while time.monotonic() < deadline:
            try:
                if not query.status.get("isTriggerActive"):
                    break
            except Exception:  # noqa: BLE001
                break
            time.sleep(0.02)
        self._stop(query)
        try:
            failure = query.exception()
        except Exception:  # noqa: BLE001
            failure = None
        try:
            doc = snapshots.savepoint_metadata(self.location, job_id=self.job_id, job_name=self.name, trigger_ms=trigger,
                                               parallelism=self.parallelism, master=self.master, key_groups=self.plan.key_groups)
            location = snapshots.write_savepoint(self.location, target, doc, job_id=self.job_id,
                                                 engine=lambda url: state_reading.move_out(self.spark, self.plan, self.location, doc, url))
        except Exception as e:  # noqa: BLE001
            self._finish_savepoint(tid, None, f"{type(e).__name__}: {e}")
            if failure is not None:
                self._on_failure(failure)
            return False
        self._finish_savepoint(tid, location, None)
        with self.lock:
            self.supervisor.note(now_ms(), "savepoint", location=location, batch=doc["spark"]["batch_id"], stop=stop)
            if stop:
                self.supervisor.finished(now_ms())
            self.lock.notify_all()
        log.info("job %s: savepoint %s written (batch %s)", self.job_id, location, doc["spark"]["batch_id"])
        return True

    def _finish_savepoint(self, tid: str, location: str | None, failure: str | None) -> None:
        with self.lock:
            op: dict[str, Any] = {"location": location} if location else {
                "failure-cause": {"class": "SavepointFailed", "stack-trace": failure or ""}}
            self.savepoints[tid] = {"status": {"id": "COMPLETED"}, "operation": op}
            self.busy_savepoint = None
        self.publish()

    def shutdown(self) -> None:
        with self.lock:
            pending = [tid for tid, d in self.savepoints.items() if d["status"]["id"] != "COMPLETED"]
        for tid in pending:
            self._finish_savepoint(tid, None, "the job ended before the savepoint was taken")
        try:
            if self.query is not None and self.query.isActive:
                self._stop(self.query)
        except Exception:  # noqa: BLE001
            pass


def _load_plan(spec: dict[str, Any], config: dict[str, str]) -> tuple[Any, str, dict[str, str], int]:
    """(SparkPlan, job name, the job's own settings, how many jobs the file has) of the job of
    the file's ``execute()`` call number ``spec["job_index"]`` (from 0).

    A file that calls ``execute()`` several times runs its jobs one after the other, as on the
    engine: a driver each (:mod:`flinkpy.spark.control_launch`), each driver running the file
    again to capture its own. Every job is translated here, so the first driver refuses a file
    with any job Spark cannot run, before anything starts."""
    from flinkpy.errors import InvalidProgramError
    from flinkpy.spark.capture import capture_job
    from flinkpy.spark.plan import translate

    jobs = capture_job(spec["job_file"], list(spec.get("args") or []), config=config, parallelism=spec.get("parallelism"))
    if not jobs:
        raise InvalidProgramError(f"the job program {spec['job_file']} did not call execute()",
                                  remedy="build the pipeline and call env.execute()")
    index = int(spec.get("job_index") or 0)
    expected = spec.get("job_count")
    if expected is not None and int(expected) != len(jobs):
        raise InvalidProgramError(f"the job program {spec['job_file']} calls execute() {len(jobs)} times now, {expected} times when "
                                  "its first job started: its jobs cannot be told apart",
                                  remedy="make the program call execute() the same number of times on every run")
    if len(jobs) > 1 and spec.get("savepoint_path"):
        raise InvalidProgramError(f"the job program {spec['job_file']} calls execute() {len(jobs)} times, and a savepoint is the state "
                                  "of one Spark query: it cannot restore several",
                                  remedy="restore the job from a file with one execute(), or run the file without -s")
    plans = [translate(job.env, job_name=job.job_name) for job in jobs]
    job = jobs[index]
    # the environment carries the configuration and what the program set itself
    # (enable_checkpointing, set_restart_strategy, set_parallelism)
    settings = dict(job.settings)
    settings["parallelism.default"] = str(job.parallelism)
    return plans[index], job.job_name, settings, len(jobs)


def _error_doc(e: BaseException) -> dict[str, Any]:
    if isinstance(e, FlinkpyError):
        return {"kind": type(e).__name__, "message": e.message, "remedy": e.remedy, "exit_code": e.exit_code, "details": e.details}
    return {"kind": type(e).__name__, "message": f"{type(e).__name__}: {e}", "remedy": None, "exit_code": ExitCode.INTERNAL,
            "details": "".join(traceback.format_exception(type(e), e, e.__traceback__))}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from flinkpy.spark.sinks import QuietStops

    logging.getLogger("py4j.clientserver").addFilter(QuietStops())
    driver = SparkDriver(spec)
    driver.publish()

    # Ctrl-C on an attached run reaches the driver too. The handlers only note the signal: a
    # Queue.put inside one could wait for the queue's lock, held by the very get it interrupted
    StopSignals(signal.SIGTERM, signal.SIGINT).on_stop(lambda _: driver.commands.put(("cancel",)), name="cancel-on-signal")
    try:
        driver.prepare()
    except BaseException as e:  # noqa: BLE001 - refused before the job started
        driver.error = _error_doc(e)
        with driver.lock:
            driver.supervisor.failed(now_ms(), {"class": type(e).__name__, "message": getattr(e, "message", str(e)),
                                                "stack-trace": driver.error.get("details") or ""})
        driver.publish()
        return driver.error["exit_code"] if isinstance(e, FlinkpyError) else ExitCode.INTERNAL
    from flinkpy.spark.control import ControlServer

    server = ControlServer(driver, driver.home.token())
    server.serve_in_background()
    driver.control_address = f"{server.address[0]}:{server.address[1]}"
    driver.submitted = True
    driver.publish()
    try:
        try:
            driver.start_session()
        except FlinkpyError as e:  # Spark or the executors cannot run the job: refused before the query started
            log.error("job %s: %s (%s)", driver.job_id, e.message, e.remedy)
            driver.error = _error_doc(e)
            with driver.lock:
                driver.supervisor.strategy = None
                driver.supervisor.failed(now_ms(), {"class": type(e).__name__, "message": e.message, "stack-trace": ""})
        else:
            driver.supervise()
    except BaseException as e:  # noqa: BLE001 - the session itself failed
        log.exception("job %s: the Spark driver failed", driver.job_id)
        with driver.lock:
            driver.supervisor.strategy = None  # the session is gone: nothing to restart in
            driver.supervisor.failed(now_ms(), failure_cause(e))
    finally:
        driver.shutdown()
        driver.publish()
        server.shutdown()
    state = driver.supervisor.state
    try:
        if driver.spark is not None:
            driver.spark.stop()
    except Exception:  # noqa: BLE001
        pass
    import shutil

    shutil.rmtree(driver.ship_dir, ignore_errors=True)
    if driver.error is not None:
        return int(driver.error["exit_code"])
    return {"FINISHED": 0, "CANCELED": ExitCode.JOB_CANCELED}.get(state, ExitCode.JOB_FAILED)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
