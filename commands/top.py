"""`flinkpy top`: a live dashboard of one running job, refreshed every second.

One frame is three REST reads — the job (its vertices' live figures), its checkpoint
statistics and the TaskManagers — built into one document (:func:`frame`), which ``--json``
prints and :func:`render` draws. The live view reads keys in cbreak mode only when stdin is a
terminal, and restores the terminal however it ends.
"""

from __future__ import annotations

import contextlib
import select
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any, Iterator, Optional

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from commands.context import client
from commands.live import fmt_count, lag_table, vertex_row, vertex_table
from commands.options import JobManager, JsonFlag, duration_seconds
from commands.output import emit_json, fmt_duration, fmt_size, out
from commands.session import session

if TYPE_CHECKING:
    from flinkpy.client.client import Client
    from flinkpy.network.rest_client import JsonObject

app = typer.Typer()

TERMINAL_STATES = frozenset({"FINISHED", "CANCELED", "FAILED"})


def pick_job(c: Client, job_id: str | None) -> str:
    """``job_id``, or the one job that is not terminal; an error naming them when there are
    several, or saying so when there is none."""
    from flinkpy.errors import NotFoundError, UsageError

    if job_id:
        return job_id
    running = [j for j in c.list_jobs() if j.get("state") not in TERMINAL_STATES]
    if not running:
        raise NotFoundError("no job is running on this cluster", remedy="start one with 'flinkpy run -d JOB.py', or name a job: flinkpy top JOB_ID")
    if len(running) > 1:
        listed = ", ".join(f"{j.get('jid')} ({j.get('name', '')})" for j in running)
        raise UsageError(f"{len(running)} jobs are running: {listed}", remedy="name one: flinkpy top JOB_ID")
    return str(running[0]["jid"])


def frame(c: Client, job_id: str) -> dict[str, Any]:
    """One frame's data: the job, its vertices' live figures, checkpoints, TaskManagers."""
    job = c.job(job_id)
    now = int(job.get("now") or time.time() * 1000)
    try:
        stats = c.checkpoints(job_id)
    except Exception:  # noqa: BLE001 - a job without checkpoint statistics (a Spark job) still shows
        stats = {}
    latest = (stats.get("latest") or {}).get("completed") or {}
    try:
        tms = c.taskmanagers()
    except Exception:  # noqa: BLE001 - the cluster's TaskManagers are extra information
        tms = []
    return {
        "jid": job.get("jid", job_id),
        "name": job.get("name", ""),
        "state": job.get("state", "?"),
        "duration": job.get("duration"),
        "now": now,
        "restarts": job.get("restarts", 0),
        "metrics": job.get("metrics") or {},
        "vertices": [vertex_row(v, now) for v in job.get("vertices", [])],
        "checkpoints": {
            "in_progress": (stats.get("counts") or {}).get("in_progress", 0),
            "completed": (stats.get("counts") or {}).get("completed", 0),
            "failed": (stats.get("counts") or {}).get("failed", 0),
            "last": {k: latest.get(k) for k in ("id", "end_to_end_duration", "state_size", "alignment_duration_max")} if latest else None,
        },
        "taskmanagers": [
            {
                "id": tm.get("id"),
                "state": tm.get("state", "RUNNING"),
                # the figures below are the last ones reported: stale when it stopped reporting
                "stale": bool(tm.get("metricsStale")),
                "metrics_age_ms": tm.get("metricsAge"),
                "cpu_percent": (tm.get("metrics") or {}).get("Status.ProcessTree.CPU.Usage"),
                "rss_bytes": (tm.get("metrics") or {}).get("Status.ProcessTree.Memory.RSS"),
                "tasks": (tm.get("metrics") or {}).get("numRunningTasks"),
                "slots": tm.get("slotsNumber"),
                "free_slots": tm.get("freeSlots"),
            }
            for tm in tms
        ],
        "_job": job,
    }


def render(doc: dict[str, Any], *, per_partition: bool = False) -> Group:
    """The frame for people: a header, the vertices, the sources' consumer lag (by partition
    with ``per_partition``), checkpoints, the TaskManagers."""
    head = Text(f"{doc['name']} ({doc['jid']})  {doc['state']}  up {fmt_duration(doc.get('duration'))}  "
                f"restarts {doc.get('restarts', 0)}")
    cp = doc["checkpoints"]
    last = cp.get("last")
    cp_line = f"Checkpoints: {cp['in_progress']} in progress, {cp['completed']} completed, {cp['failed']} failed"
    if last:
        cp_line += (f"; last #{last.get('id')}: {fmt_duration(last.get('end_to_end_duration'))}, "
                    f"{fmt_size(int(last.get('state_size') or 0))}, alignment {last.get('alignment_duration_max', 0)} ms")
    tms = Table(title="TaskManagers", title_justify="left")
    for column in ("TaskManager", "State", "CPU", "RSS", "Tasks", "Free slots"):
        tms.add_column(column, justify="left" if column in ("TaskManager", "State") else "right")
    for tm in doc["taskmanagers"]:
        cpu = tm.get("cpu_percent")
        rss = tm.get("rss_bytes")
        state = str(tm.get("state", "RUNNING"))
        if state != "RUNNING" and tm.get("metrics_age_ms") is not None:
            state += f" {fmt_duration(tm['metrics_age_ms'])}"  # silent for that long
        if tm.get("stale"):
            cpu = rss = None  # its last figures, not its figures now
        tms.add_row(str(tm.get("id")), state, "-" if cpu is None else f"{cpu:.0f}%", "-" if rss is None else fmt_size(int(rss)),
                    fmt_count(tm.get("tasks")) if tm.get("tasks") is not None else "-",
                    f"{tm.get('free_slots', '-')}/{tm.get('slots', '-')}")
    parts: list[Any] = [head, vertex_table(doc["_job"])]
    lag = lag_table(doc["_job"], per_partition=per_partition)
    if lag is not None:
        parts.append(lag)
    parts += [Text(cp_line), tms]
    if sys.stdin.isatty():
        parts.append(Text("q quits", style="dim"))
    return Group(*parts)


@contextlib.contextmanager
def _keys() -> Iterator[Any]:
    """stdin in cbreak mode (keys without Enter, no echo) while a person watches; restored after."""
    if not sys.stdin.isatty():
        yield None
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield sys.stdin
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _wait_for_quit(keys: Any, seconds: float) -> bool:
    """Wait up to ``seconds``; True when the user pressed q."""
    if keys is None:
        time.sleep(seconds)
        return False
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([keys], [], [], left)
        if readable and keys.read(1) in ("q", "Q"):
            return True
    return False


@app.command("top")
def top(
    job_id: Annotated[Optional[str], typer.Argument(metavar="JOB_ID", help="The job to watch; default: the one running job.", show_default=False)] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit (for scripts and logs).")] = False,
    partitions: Annotated[bool, typer.Option("--partitions", help="Show a Kafka source's consumer lag by partition, one row each (offset, committed offset, lag).")] = False,
    interval: Annotated[str, typer.Option("--interval", metavar="DURATION", help="Time between two frames, e.g. 1s or 500 ms.")] = "1s",
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Watch a running job: throughput, back-pressure, checkpoints and TaskManagers, live.

    Shows one row per vertex with its records in and out, their rates per second (sums over
    its subtasks), busy and back-pressured time (busyTimeMsPerSecond and
    backPressuredTimeMsPerSecond as percentages, of its busiest and of its most back-pressured
    subtask, as Flink's web UI shows them) and how far its output watermark lags behind the
    wall clock; each source's consumer lag (pendingRecords: the records behind the end of
    its Kafka partitions) with each partition's lag where they fit in 80 columns (--partitions:
    a row per partition with its offsets); the checkpoints in progress and the last
    completed one (duration, size, alignment); the restarts; and each TaskManager's state, CPU
    and resident memory (its process tree). The figures are those the tasks report every
    metrics.fetcher.update-interval (TaskManagers every second); figures older than two report
    intervals and a second are stale: a TaskManager that stopped reporting (paused, hung, cut off) shows
    UNRESPONSIVE with how long it has been silent and no CPU or memory, and its subtasks are
    left out of their vertex's rates (the vertex is marked *). In --json the last figures stay,
    with "state", "stale" and "metrics_age_ms" beside them. Refreshes every second until q (or Ctrl-C); when stdout
    is not a terminal, prints one frame after the other instead; --once prints one frame,
    --json one JSON document (and implies --once). Without JOB_ID, the one running job: exit 4
    when none runs, 2 (naming them) when several do.

    Examples:

    \b
        flinkpy top
        flinkpy top 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        flinkpy top --json | jq '.vertices[] | {name, "records-in-per-second"}'
        flinkpy top --once --partitions
    """
    every = max(0.2, duration_seconds(interval, "--interval", positive=True))
    c = client(jobmanager)
    jid = pick_job(c, job_id)
    if session.json:
        doc = frame(c, jid)
        doc.pop("_job")
        emit_json(doc)
        return
    console = out()
    if once:
        console.print(render(frame(c, jid), per_partition=partitions))
        return
    if not sys.stdout.isatty():  # a log: one frame after the other
        with _keys() as keys:
            while True:
                console.print(render(frame(c, jid), per_partition=partitions))
                sys.stdout.flush()
                if _wait_for_quit(keys, every):
                    return
    from rich.live import Live

    with _keys() as keys, Live(render(frame(c, jid), per_partition=partitions), console=console, auto_refresh=False, screen=False) as live:
        while not _wait_for_quit(keys, every):
            live.update(render(frame(c, jid), per_partition=partitions), refresh=True)
