"""The REST views of the metric store, in Flink's shapes, and the Prometheus endpoint.

    GET /jobs/<id>/metrics[?get=a,b]                         job figures (uptime, numRestarts, ...)
    GET /jobs/<id>/vertices/<vid>/metrics[?get=0.numRecordsIn] one vertex's figures by subtask
    GET /jobs/<id>/vertices/<vid>/subtasks/metrics?get=..&agg=..  aggregated over subtasks
    GET /taskmanagers/<id>/metrics[?get=...]                 a TaskManager's figures
    GET /metrics                                             everything, for Prometheus

As in Flink, the first four answer a list of ``{"id": name, "value": "..."}`` (without ``get``:
the names available, ``[{"id": name}]``); values are strings there, as Flink's are. Every
function is called with the Dispatcher's lock free and takes it itself.

Figures older than two report intervals and a second are stale (``flinkpy.metrics.store.stale``): a
paused or hung TaskManager sends nothing, and its last rates and CPU must not pass for current.
Readers of ``GET /jobs/<id>`` get each subtask's ``metrics-age``/``metrics-stale`` and each
vertex's ``stale-subtasks`` (its rates aggregate only the fresh subtasks); ``GET /taskmanagers``
gives each TaskManager's ``state`` (RUNNING, or UNRESPONSIVE while its reports are stale);
``GET /metrics`` leaves stale series out, so that Prometheus marks them stale itself.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Iterator

from flinkpy.clock import now_ms
from flinkpy.errors import NotFoundError
from flinkpy.metrics import names
from flinkpy.metrics.prometheus import Sample, exposition
from flinkpy.metrics.store import TASKMANAGER_REPORT_INTERVAL_MS, aggregate, stale

if TYPE_CHECKING:
    from flinkpy.jobmanager.dispatcher import Dispatcher, JobRecord
    from flinkpy.jobmanager.taskmanager_registry import TaskManagerRecord

#: a TaskManager's state while its reports arrive, and once they have stopped (it has not yet
#: missed heartbeat.timeout, after which it is lost and no longer listed)
RUNNING, UNRESPONSIVE = "RUNNING", "UNRESPONSIVE"


def job_figures(rec: JobRecord, now: int) -> dict[str, float]:
    """The job's own figures: uptime, restarts and the last checkpoint (Flink's job scope)."""
    from flinkpy.jobmanager.checkpoint_stats import checkpoint_detail

    g = rec.graph
    running_since = g.timestamps.get("RUNNING")
    uptime = now - running_since if running_since is not None and g.state == "RUNNING" else 0
    cc = rec.checkpointing.coordinator
    last = checkpoint_detail(cc.latest_completed_checkpoint, now) if cc.latest_completed_checkpoint else None
    return {
        names.UPTIME: uptime,
        names.NUM_RESTARTS: g.restarts,
        names.IN_PROGRESS_CHECKPOINTS: len(cc.pending),
        names.COMPLETED_CHECKPOINTS: cc.num_completed,
        names.FAILED_CHECKPOINTS: cc.num_failed,
        names.LAST_CHECKPOINT_DURATION: last["end_to_end_duration"] if last else -1,
        names.LAST_CHECKPOINT_SIZE: last["state_size"] if last else -1,
        names.LAST_CHECKPOINT_ALIGNMENT: last["alignment_duration_max"] if last else -1,
        names.LAST_CHECKPOINT_ALIGNMENT_BUFFERED: last["alignment_buffered"] if last else -1,
    }


def vertex_figures(d: Dispatcher, jid: str, vid: int) -> dict[str, float]:
    """One vertex's live figures, aggregated over its subtasks (empty before the first report)."""
    return aggregate(d.metrics.subtasks(jid, vid).values())


def _interval_ms(d: Dispatcher, jid: str) -> int:
    """How often the job's tasks report (metrics.fetcher.update-interval)."""
    rec = d.jobs.get(jid)
    return rec.options.task.metrics_interval_ms if rec is not None else 1000


def _live(d: Dispatcher, jid: str, g: Any, vid: int) -> list[tuple[Any, dict[str, float], int | None]]:
    """(execution, its current attempt's latest figures, their age in ms or None) for each
    subtask of a vertex."""
    reports = {s: r for (v, s), r in d.metrics.subtask_reports(jid).items() if v == vid}
    now = now_ms()
    rows = []
    for e in g.executions.values():
        if e.vertex_id != vid:
            continue
        report = reports.get(e.subtask)
        if report is not None and report.attempt == e.attempt:
            rows.append((e, report.figures, max(0, now - report.received)))
        else:
            rows.append((e, {}, None))
    return rows


def _is_stale(e: Any, age: int | None, interval_ms: int) -> bool:
    """A running subtask whose last report is too old (``stale``; a finished one reports
    no more, and its last figures are its final ones)."""
    return age is not None and e.state == "RUNNING" and stale(0, age, interval_ms)


def _records(e: Any, figures: dict[str, float]) -> tuple[int, int]:
    """An execution's records in and out: live while it runs, its final totals once it ended."""
    return (max(e.records_in, int(figures.get(names.NUM_RECORDS_IN, 0))),
            max(e.records_out, int(figures.get(names.NUM_RECORDS_OUT, 0))))


def vertex_summary(d: Dispatcher, jid: str, g: Any, vid: int) -> dict[str, Any]:
    """The ``metrics`` of a vertex in ``GET /jobs/<id>`` (Flink's keys), plus its live figures
    by Flink's metric names (aggregated over the subtasks). Lock held."""
    rows = _live(d, jid, g, vid)
    interval = _interval_ms(d, jid)
    records = [_records(e, f) for e, f, _ in rows]
    done = all(e.state == "FINISHED" for e, _, _ in rows)
    stale_rows = [e for e, _, age in rows if _is_stale(e, age, interval)]
    # the rates of a subtask that stopped reporting are not its rates now: left out
    live = aggregate(f for e, f, age in rows if f and not _is_stale(e, age, interval))
    return {
        "read-records": sum(r[0] for r in records),
        "read-records-complete": done,
        "write-records": sum(r[1] for r in records),
        "write-records-complete": done,
        "accumulated-busy-time": live.get(names.ACCUMULATED_BUSY, 0),
        "accumulated-idle-time": live.get(names.ACCUMULATED_IDLE, 0),
        "accumulated-backpressured-time": live.get(names.ACCUMULATED_BACK_PRESSURED, 0),
        "stale-subtasks": len(stale_rows),
        **live,
    }


#: the scope a Kafka source's per-partition figures are reported under (Flink's)
KAFKA_READER_GROUP = "KafkaSourceReader"
#: the figures of one partition, by Flink's names
PARTITION_FIGURES = ("currentOffset", "committedOffset", "pendingRecords")


def source_partitions(user_by_subtask: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A source's figures per partition, from its subtasks' user metrics (``user_by_subtask``:
    subtask -> its current attempt's report): one row ``{"topic", "partition", "subtask",
    "currentOffset", "committedOffset", "pendingRecords"}`` per partition, sorted by topic and
    partition; empty for a vertex that reads no Kafka partitions.

    >>> m = lambda name, v: {"scope": ["KafkaSourceReader", "topic", "t", "partition", "1"], "name": name,
    ...                      "variables": {"<topic>": "t", "<partition>": "1"}, "value": v}
    >>> source_partitions({0: [m("currentOffset", 5), m("pendingRecords", 7)]})
    [{'topic': 't', 'partition': 1, 'subtask': 0, 'currentOffset': 5, 'pendingRecords': 7}]
    """
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for subtask, user in sorted(user_by_subtask.items()):
        for m in user:
            variables = m.get("variables") or {}
            if KAFKA_READER_GROUP not in (m.get("scope") or []) or m.get("name") not in PARTITION_FIGURES:
                continue
            topic, partition = variables.get("<topic>"), variables.get("<partition>")
            if topic is None or not str(partition).isdigit():
                continue
            row = rows.setdefault((str(topic), int(partition)), {"topic": str(topic), "partition": int(partition), "subtask": subtask})
            row[str(m["name"])] = m.get("value")
    return [rows[k] for k in sorted(rows)]


def vertex_partitions(d: Dispatcher, jid: str, g: Any, vid: int) -> list[dict[str, Any]]:
    """The ``partitions`` of a source vertex in ``GET /jobs/<id>``: each Kafka partition's
    offsets and lag, from the current attempts' reports. Lock held."""
    attempts = {e.subtask: e.attempt for e in g.executions.values() if e.vertex_id == vid}
    user = {s: r.user for (v, s), r in d.metrics.subtask_reports(jid).items() if v == vid and attempts.get(s) == r.attempt}
    return source_partitions(user)


def subtask_rows(d: Dispatcher, jid: str, g: Any, vid: int) -> list[dict[str, Any]]:
    """The ``subtasks`` of a vertex in ``GET /jobs/<id>``, with live records. Lock held."""
    out = []
    interval = _interval_ms(d, jid)
    for e, figures, age in _live(d, jid, g, vid):
        records_in, records_out = _records(e, figures)
        out.append({"subtask": e.subtask, "status": e.state, "attempt": e.attempt, "taskmanager-id": e.tm_id, "pid": e.pid,
                    "timestamps": dict(e.timestamps), "read-records": records_in, "write-records": records_out,
                    "metrics": {**e.metrics, **figures}, "metrics-age": age, "metrics-stale": _is_stale(e, age, interval)})
    return out


def taskmanager_health(d: Dispatcher, tm: TaskManagerRecord, now: int) -> dict[str, Any]:
    """A TaskManager's state and the age of its figures (since its registration before its
    first report), for ``GET /taskmanagers``. Lock held."""
    report = d.metrics.taskmanager_report(tm.tm_id)
    age = max(0, now - (report.received if report is not None else tm.registered_ms))
    silent = stale(0, age, TASKMANAGER_REPORT_INTERVAL_MS)
    return {"state": UNRESPONSIVE if silent else RUNNING, "metricsAge": age, "metricsStale": silent and report is not None}


def routes(d: Dispatcher) -> list[tuple[str, str, Callable[..., Any]]]:
    """The REST routes of this module (``flinkpy.jobmanager.rest`` adds them to its own)."""
    jid = r"/jobs/(?P<jid>[0-9a-f]{32})"
    return [
        ("GET", r"/metrics", functools.partial(prometheus, d)),
        ("GET", jid + r"/metrics", functools.partial(job_metrics, d)),
        ("GET", jid + r"/vertices/(?P<vid>[0-9]+)/metrics", functools.partial(vertex_metrics, d)),
        ("GET", jid + r"/vertices/(?P<vid>[0-9]+)/subtasks/metrics", functools.partial(subtasks_metrics, d)),
        ("GET", r"/taskmanagers/(?P<tm>[^/]+)/metrics", functools.partial(taskmanager_metrics, d)),
    ]


def _answer(figures: dict[str, Any], query: dict[str, str]) -> list[dict[str, Any]]:
    wanted = [n for n in (query.get("get") or "").split(",") if n]
    if not wanted:
        return [{"id": name} for name in figures]
    return [{"id": name, "value": str(figures[name])} for name in wanted if name in figures]


def _job(d: Dispatcher, jid: str) -> JobRecord:
    with d.lock:
        return d.job(jid)


def job_metrics(d: Dispatcher, jid: str, query: dict[str, str], **_: Any) -> list[dict[str, Any]]:
    with d.lock:
        figures = job_figures(d.job(jid), now_ms())
    return _answer(figures, query)


def vertex_metrics(d: Dispatcher, jid: str, vid: str, query: dict[str, str], **_: Any) -> list[dict[str, Any]]:
    rec = _job(d, jid)
    if int(vid) not in rec.graph.vertices:
        raise NotFoundError(f"job {jid} has no vertex {vid}", remedy=f"see 'flinkpy job show {jid}' for its vertices")
    figures: dict[str, Any] = {}
    for (v, s), report in sorted(d.metrics.subtask_reports(jid).items()):
        if v != int(vid):
            continue
        figures.update({f"{s}.{name}": value for name, value in report.figures.items()})
        for m in report.user:  # Flink's "<subtask>.<operator>.<group>.<name>"
            identifier = ".".join([str(s), str(m.get("operator")), *m.get("scope", []), str(m.get("name"))])
            value = m.get("value")
            if isinstance(value, dict):
                figures.update({f"{identifier}.{part}": x for part, x in value.items()})
            else:
                figures[identifier] = value
    return _answer(figures, query)


def subtasks_metrics(d: Dispatcher, jid: str, vid: str, query: dict[str, str], **_: Any) -> list[dict[str, Any]]:
    rec = _job(d, jid)
    if int(vid) not in rec.graph.vertices:
        raise NotFoundError(f"job {jid} has no vertex {vid}", remedy=f"see 'flinkpy job show {jid}' for its vertices")
    per_subtask = list(d.metrics.subtasks(jid, int(vid)).values())
    available = sorted({n for f in per_subtask for n in f})
    wanted = [n for n in (query.get("get") or "").split(",") if n]
    if not wanted:
        return [{"id": n} for n in available]
    aggs = [a for a in (query.get("agg") or "min,max,avg,sum").split(",") if a in ("min", "max", "avg", "sum")]
    out = []
    for name in wanted:
        values = [f[name] for f in per_subtask if name in f]
        if not values:
            continue
        all_aggs = {"min": min(values), "max": max(values), "avg": sum(values) / len(values), "sum": sum(values)}
        out.append({"id": name, **{a: all_aggs[a] for a in aggs}})
    return out


def taskmanager_metrics(d: Dispatcher, tm: str, query: dict[str, str], **_: Any) -> list[dict[str, Any]]:
    with d.lock:
        if tm not in d.taskmanagers:
            raise NotFoundError(f"TaskManager {tm} is not registered", remedy="see 'flinkpy cluster status' for the ids")
    return _answer(d.metrics.taskmanager(tm), query)


# -- Prometheus --------------------------------------------------------------------------------


def _samples(d: Dispatcher) -> Iterator[Sample]:
    """Every current figure; stale ones (see the module's doc) are left out, so that the
    series ends in Prometheus rather than repeating a paused process's last value."""
    now = now_ms()
    with d.lock:
        jobs = [(jid, rec) for jid, rec in d.jobs.items()]
        tms = [(tm.tm_id, tm.host) for tm in d.taskmanagers.values()]
        job_rows = []
        for jid, rec in jobs:
            g = rec.graph
            executions = {(e.vertex_id, e.subtask): e for e in g.executions.values()}
            job_rows.append((jid, g.name, g.state, job_figures(rec, now), dict(g.vertices), executions,
                             rec.options.task.metrics_interval_ms))
    for tm_id, host in tms:
        report = d.metrics.taskmanager_report(tm_id)
        if report is None or stale(report.received, now, TASKMANAGER_REPORT_INTERVAL_MS):
            continue
        for name, value in report.figures.items():
            yield "taskmanager", name, {"tm_id": tm_id, "host": host}, value
    for jid, job_name, state, figures, vertices, executions, interval in job_rows:
        job_labels = {"job_id": jid, "job_name": job_name}
        for name, value in figures.items():
            yield "jobmanager_job", name, job_labels, value
        if state in ("FINISHED", "FAILED", "CANCELED"):
            continue  # a finished job's task figures are history, not live series
        for (vid, subtask), report in sorted(d.metrics.subtask_reports(jid).items()):
            ex = executions.get((vid, subtask))
            if ex is not None and ex.attempt != report.attempt:
                continue  # a failed attempt's last figures; the new attempt has not reported yet
            if stale(report.received, now, interval):
                continue
            labels = {**job_labels, "task_id": str(vid), "task_name": vertices.get(vid, {}).get("name", str(vid)),
                      "subtask_index": str(subtask), "task_attempt_num": str(report.attempt),
                      "tm_id": (ex.tm_id if ex is not None else None) or ""}
            for name, value in report.figures.items():
                yield "taskmanager_job_task", name, labels, value
            for m in report.user:
                yield from _user_samples(labels, m)


def _user_samples(task_labels: dict[str, str], m: dict[str, Any]) -> Iterator[Sample]:
    """A user metric in Flink's operator scope; key/value groups become labels."""
    labels = {**task_labels, "operator_name": str(m.get("operator", ""))}
    labels.update({k.strip("<>"): str(v) for k, v in (m.get("variables") or {}).items() if k != "<operator_name>"})
    scope = "_".join(["taskmanager_job_task_operator", *m.get("logical_scope", [])])
    value = m.get("value")
    if isinstance(value, dict):
        for part, v in value.items():
            yield scope, f"{m['name']}_{part}", labels, v
    else:
        yield scope, str(m["name"]), labels, value


def prometheus(d: Dispatcher, **_: Any) -> str:
    """``GET /metrics``: every live figure of the cluster in Prometheus' text format."""
    return exposition(_samples(d))
