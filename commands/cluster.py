"""`flinkpy cluster`: start, stop and look at a standalone cluster on this machine.

The cluster's processes and token live in the cluster home ($FLINKPY_HOME or ~/.flinkpy), so
every later command finds the cluster without being told its address.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.table import Table

from commands.context import client, cluster_home, load_cli_config, token_of
from commands.output import emit_json, out, progress, status
from commands.options import Dynamic, JobManager, JsonFlag, Wide, duration_seconds
from commands.session import session
from commands.tables import Column, render
from flinkpy.config import parse_override
from flinkpy.errors import ClusterUnreachableError, UsageError

if TYPE_CHECKING:
    from flinkpy.cluster import ClusterInfo, ProcessInfo

app = typer.Typer(help="Start, stop and inspect a standalone flinkpy cluster on this machine.", no_args_is_help=True)


def _process_dict(proc: ProcessInfo) -> dict[str, object]:
    return {"id": proc.id, "pid": proc.pid, "log": str(getattr(proc, "log_path", "") or "")}


@app.command("start")
def start(
    taskmanagers: Annotated[int, typer.Option("--taskmanagers", min=1, metavar="N", help="Number of TaskManager processes to start.")] = 1,
    slots: Annotated[Optional[int], typer.Option("--slots", min=1, metavar="N", help="Slots per TaskManager; default: taskmanager.numberOfTaskSlots (1).", show_default=False)] = None,
    rest_port: Annotated[Optional[int], typer.Option("--rest-port", min=0, max=65535, metavar="PORT", help="Port of the REST API; default: rest.port (8081); 0 picks a free port. With several JobManagers the next ones take the next ports.", show_default=False)] = None,
    ha: Annotated[Optional[str], typer.Option("--ha", metavar="none|zookeeper", help="High availability; default: high-availability.type (none).", show_default=False)] = None,
    quorum: Annotated[Optional[str], typer.Option("--zookeeper-quorum", metavar="HOST:PORT[,...]", help="ZooKeeper servers (high-availability.zookeeper.quorum); see 'flinkpy zookeeper start'.", show_default=False)] = None,
    jobmanagers: Annotated[int, typer.Option("--jobmanagers", min=1, metavar="N", help="JobManagers to start: one leads, the others stand by (needs --ha zookeeper).")] = 1,
    hosts: Annotated[Optional[int], typer.Option("--hosts", min=2, metavar="N", help="A drill cluster (root only): N hosts made of network namespaces, the JobManager on one and a TaskManager on each other (--taskmanagers is N-1), to rehearse partitions with 'flinkpy fault partition'.", show_default=False)] = None,
    dynamic: Dynamic = None,
    json_: JsonFlag = False,
) -> None:
    """Start a JobManager and TaskManagers in the background.

    The processes outlive the command; their pids, logs and the cluster's token are kept in
    the cluster home ($FLINKPY_HOME or ~/.flinkpy), where 'flinkpy cluster stop' and every
    other command find them. Starting a second cluster in the same home exits 9.

    With --ha zookeeper (or high-availability.type: zookeeper in flinkpy.yaml, with Flink's
    high-availability.* keys) the JobManagers elect a leader through ZooKeeper; when it dies a
    standby takes over and recovers every running job from its latest checkpoint, with the same
    job id, and the TaskManagers follow the new leader. Every command finds the leader through
    ZooKeeper by itself.

    A supervisor process (one per cluster) starts a TaskManager that dies again, under the
    same id and log files, after a backoff (resourcemanager.taskmanager-restart.*: enabled,
    backoff.initial 1 s doubling to backoff.max 1 min, reset after a run of
    backoff.reset-threshold, given up after max-attempts restarts in a row), so a job that lost
    slots runs again without 'cluster add-taskmanager'. It starts a dead JobManager again too
    (high-availability.jobmanager-restart.enabled): with high availability as a standby;
    without, as a fresh JobManager at the same REST address, without the jobs the old one ran
    (resume them with 'flinkpy run --from-latest DIR'), and the TaskManagers register with it.
    'cluster status' shows each process's restarts and the supervisor.

    Examples:

    \b
        flinkpy cluster start
        flinkpy cluster start --taskmanagers 2 --slots 4
        FLINKPY_HOME=/tmp/c1 flinkpy cluster start --rest-port 0 --json \\
            | jq -r .rest_address
        sudo flinkpy cluster start --hosts 3 --slots 2
        flinkpy zookeeper start && flinkpy cluster start --ha zookeeper \\
            --zookeeper-quorum 127.0.0.1:2181 --jobmanagers 2 --taskmanagers 2
    """
    extra = list(dynamic or [])
    if ha is not None:
        extra.append(f"high-availability.type={ha}")
    if quorum is not None:
        extra.append(f"high-availability.zookeeper.quorum={quorum}")
    config = load_cli_config(extra, starts_processes=True)
    from flinkpy.cluster import start_cluster

    home = cluster_home()
    if hosts is not None:
        from flinkpy.cluster.drill import start_drill_cluster

        with progress(f"Starting a drill cluster on {hosts} namespace hosts..."):
            info = start_drill_cluster(home, hosts=hosts, slots=slots if slots is not None else config.get("taskmanager.numberOfTaskSlots"),
                                       rest_port=rest_port if rest_port is not None else config.get("rest.port"), config=config)
    else:
        with progress("Starting cluster..."):
            info = start_cluster(
                home,
                taskmanagers=taskmanagers,
                slots=slots if slots is not None else config.get("taskmanager.numberOfTaskSlots"),
                rest_port=rest_port if rest_port is not None else config.get("rest.port"),
                config=config,
                jobmanagers=jobmanagers,
            )
    if session.json:
        emit_json(info.to_dict())
        return
    if info.ha is not None:
        for jm in info.jobmanagers:
            role = "leader" if info.leader and jm.id == info.leader.get("id") else "standby"
            status(f"Starting JobManager {jm.id} (pid {jm.pid}): {role}.")
    else:
        status(f"Starting JobManager (pid {info.jobmanager_pid}).")
    for tm in info.taskmanagers:
        status(f"Starting TaskManager {tm.id} (pid {tm.pid}).")
    for host in (info.hosts or {}).get("hosts", []):
        status(f"Host {host['name']}: {host['address']}.")
    out().print(f"Cluster started. REST address: {info.rest_address}", markup=False)


@app.command("add-taskmanager")
def add_taskmanager(
    slots: Annotated[Optional[int], typer.Option("--slots", min=1, metavar="N", help="Slots of the new TaskManager; default: as many as the cluster's TaskManagers have (else taskmanager.numberOfTaskSlots).", show_default=False)] = None,
    dynamic: Dynamic = None,
    json_: JsonFlag = False,
) -> None:
    """Start one more TaskManager for the running cluster.

    Adds capacity. A TaskManager that dies is started again by the cluster's supervisor; this
    replaces one by hand when restarts are off or the supervisor gave up on it: a job whose
    restart waits for slots ('flinkpy job show' says so in its history) continues as soon as
    the new TaskManager has registered. Prints the new TaskManager's id and pid. It gets as many
    slots as the cluster's TaskManagers have (as 'cluster start --slots' gave them), unless
    --slots or -D taskmanager.numberOfTaskSlots says otherwise.

    Examples:

    \b
        flinkpy cluster add-taskmanager
        flinkpy cluster add-taskmanager --slots 4 --json
    """
    config = load_cli_config(dynamic, starts_processes=True)
    from flinkpy.cluster import add_taskmanager as start_one

    if slots is None:
        explicit = any(parse_override(item)[0] == "taskmanager.numberOfTaskSlots" for item in dynamic or [])
        slots = None if explicit else _slots_per_taskmanager()
    with progress("Starting a TaskManager..."):
        tm = start_one(cluster_home(), slots=slots if slots is not None else config.get("taskmanager.numberOfTaskSlots"), config=config)
    if session.json:
        emit_json(tm.to_dict())
        return
    out().print(f"TaskManager {tm.id} started (pid {tm.pid}) and registered.", markup=False)


def _slots_per_taskmanager() -> int | None:
    """The slots of the running cluster's TaskManagers (the most common figure), or None."""
    from collections import Counter

    try:
        counts = Counter(int(tm["slotsNumber"]) for tm in client(None).taskmanagers() if tm.get("slotsNumber"))
    except ClusterUnreachableError:
        return None  # add_taskmanager says that the cluster is not running
    return counts.most_common(1)[0][0] if counts else None


@app.command("add-jobmanager")
def add_jobmanager(dynamic: Dynamic = None, json_: JsonFlag = False) -> None:
    """Start one more JobManager for the running high-availability cluster: a standby.

    Replaces a JobManager that died (after a failover the cluster has one standby fewer), or
    adds one. It joins the leader election and takes over when the leader is lost.

    Examples:

    \b
        flinkpy cluster add-jobmanager
        flinkpy cluster add-jobmanager --json
    """
    config = load_cli_config(dynamic, starts_processes=True)
    from flinkpy.cluster.ha import add_jobmanager as start_one

    with progress("Starting a JobManager..."):
        jm = start_one(cluster_home(), config=config)
    if session.json:
        emit_json(jm.to_dict())
        return
    out().print(f"JobManager {jm.id} started (pid {jm.pid}) as a standby.", markup=False)


@app.command("stop")
def stop(
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for a graceful shutdown before killing the processes (Flink duration syntax).")] = "30s",
    json_: JsonFlag = False,
) -> None:
    """Stop the cluster running in the cluster home.

    Stops the supervisor first (so that nothing is started again), then asks the JobManager
    and the TaskManagers to shut down, waits up to --timeout, and kills what is left. Running jobs are cancelled. Stopping when no cluster runs is not an error
    (exit 0), so scripts can call it unconditionally.

    Examples:

    \b
        flinkpy cluster stop
        flinkpy cluster stop --timeout 5s --json
    """
    timeout_s = duration_seconds(timeout, "--timeout")
    from flinkpy.cluster import stop_cluster

    with progress("Stopping cluster..."):
        stopped = stop_cluster(cluster_home(), timeout_s)
    if session.json:
        emit_json({"stopped": [_process_dict(p) for p in stopped]})
        return
    if not stopped:
        out().print("No cluster is running.")
        return
    for proc in stopped:
        out().print(f"Stopped {proc.id} (pid {proc.pid}).", markup=False)


@app.command("status")
def cluster_status(wide: Wide = False, json_: JsonFlag = False) -> None:
    """Show the running cluster: its supervisor, JobManager, TaskManagers, slots and jobs.

    Each TaskManager's row says its state (RUNNING, or UNRESPONSIVE once it has sent no
    report for two report intervals and a second: paused, hung or cut off; after heartbeat.timeout it is
    lost and its tasks fail over) and how often the supervisor started it again after it died.

    With high availability: which JobManager leads (and its epoch), the standbys, and the state
    of the ZooKeeper session.

    Exits 3 when no cluster runs in the cluster home, so 'flinkpy cluster status' doubles as
    a health check.

    Examples:

    \b
        flinkpy cluster status
        flinkpy cluster status --json | jq '.overview["slots-available"]'
    """
    from flinkpy.cluster import find_cluster

    home = cluster_home()
    info = find_cluster(home)
    if info is None:
        raise ClusterUnreachableError("no cluster is running", remedy="start one with 'flinkpy cluster start'")
    from flinkpy.cluster import rest_client_for

    if info.ha is not None and info.leader is None:
        _no_leader(info)
    rest = rest_client_for(info, token_of(home))
    overview, tms = rest.overview(), rest.taskmanagers()
    zookeeper = None
    if info.ha is not None:
        from flinkpy.cluster.ha import session_of

        zookeeper = session_of(info.ha)
    if session.json:
        doc = {"cluster": info.to_dict(), "overview": overview, "taskmanagers": tms}
        if zookeeper is not None:
            doc["zookeeper"] = zookeeper
        emit_json(doc)
        return
    console = out()
    doc = info.to_dict()
    supervisor = doc.get("supervisor")
    if supervisor is not None:
        state = f"pid {supervisor['pid']}" if supervisor.get("alive") else "not running: dead processes are not started again"
        console.print(f"Supervisor: {state} (log {supervisor['log']})", markup=False)
    if info.ha is None:
        restarted = info.jobmanager.restarts
        console.print(f"JobManager: pid {info.jobmanager_pid}, REST address {info.rest_address}"
                      + (f", restarted {restarted} time(s)" if restarted else ""), markup=False)
    else:
        ha_doc = info.to_dict()["high_availability"]
        leader = ha_doc["leader"]
        console.print(
            f"High availability: ZooKeeper {ha_doc['zookeeper']} ({zookeeper['state'] if zookeeper else 'unreachable'}), "
            f"cluster id {ha_doc['cluster_id']}, "
            + (f"leader {leader['id']} (epoch {leader['epoch']}) at {leader['rest_address']}" if leader else "no leader elected"),
            markup=False,
        )
        jm_table = Table(title="JobManagers", title_justify="left")
        for column in ("ID", "PID", "Role", "Alive"):
            jm_table.add_column(column)
        for jm in ha_doc["jobmanagers"]:
            jm_table.add_row(jm["id"], str(jm["pid"]), jm["role"] if jm["alive"] else "-", "yes" if jm["alive"] else "no")
        console.print(jm_table)
    console.print(
        f"Slots: {overview.get('slots-available', '?')} of {overview.get('slots-total', '?')} available; "
        f"jobs: {overview.get('jobs-running', 0)} running, {overview.get('jobs-finished', 0)} finished, "
        f"{overview.get('jobs-cancelled', 0)} cancelled, {overview.get('jobs-failed', 0)} failed"
        + (f", {overview['jobs-lost']} LOST when the JobManager died (see 'flinkpy list -a')" if overview.get("jobs-lost") else ""),
        markup=False,
    )
    restarts = {tm.id: tm.restarts for tm in info.taskmanagers}
    columns = [Column("ID"), Column("PID"), Column("State"), Column("Host", drop=2), Column("Slots", justify="right"),
               Column("Free", justify="right"), Column("Restarts", justify="right", drop=1),
               Column("Last heartbeat", justify="right", drop=3)]
    # State: RUNNING, or UNRESPONSIVE while it sends no reports (paused, hung) before heartbeat.timeout
    rows = [[str(tm.get("id")), str(tm.get("pid")), str(tm.get("state", "RUNNING")), str(tm.get("host", "")),
             str(tm.get("slotsNumber", "?")), str(tm.get("freeSlots", "?")), str(restarts.get(str(tm.get("id")), 0)),
             f"{tm.get('timeSinceLastHeartbeat', '?')} ms ago"]
            for tm in tms]
    render(console, columns, rows, title="TaskManagers", wide=wide)


def _no_leader(info: ClusterInfo) -> None:
    """HA cluster with no leader right now: show what is known, then exit 3."""
    from flinkpy.cluster.ha import session_of

    zookeeper = session_of(info.ha)
    ha_doc = info.to_dict()["high_availability"]
    where = "no leader is elected right now" if zookeeper else f"ZooKeeper at {ha_doc['zookeeper']} does not answer"
    if session.json:
        emit_json({"cluster": info.to_dict(), "zookeeper": zookeeper, "overview": None, "taskmanagers": None})
    else:
        alive = ", ".join(f"{jm['id']} (pid {jm['pid']})" for jm in ha_doc["jobmanagers"] if jm["alive"]) or "none"
        out().print(f"High availability: {where}. JobManagers running: {alive}.", markup=False)
    raise ClusterUnreachableError(
        f"no JobManager leads the cluster: {where}",
        remedy="wait for the election to finish (about the ZooKeeper session timeout)" if zookeeper
        else "start ZooKeeper again ('flinkpy zookeeper start' or its service): the JobManagers elect a leader when it is back",
    )


@app.command("logs")
def logs(
    component: Annotated[Optional[str], typer.Argument(metavar="[jobmanager|TM_ID]", help="Whose log: 'jobmanager' (the default) or a TaskManager ID (see 'flinkpy cluster status'); with --list, default: every process.", show_default=False)] = None,
    stdout: Annotated[bool, typer.Option("--stdout", help="Show the process's stdout (what jobs print) instead of its log.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the process's files (.log, .out and the rotated ones) with their sizes instead of showing one.")] = False,
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, metavar="LINES", help="Number of lines from the end.")] = 100,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing what is appended, like tail -f, until Ctrl-C or the process ends.")] = False,
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Show the end of a cluster process's log or stdout, or follow it.

    In a background cluster, what a job's functions print goes to the stdout of the
    TaskManager that runs the task: read it with --stdout. The JobManager streams the file
    (it never loads it whole); with --follow it goes on streaming what is appended, across
    rotations, until Ctrl-C (exit 0) or until the TaskManager ends. The files rotate by size
    (log.file.max-size, log.file.max-backups): the rotated ones are FILE.1, FILE.2, ... in
    the cluster home's log directory. --list shows those files with their sizes (of every
    process, or of the one named) and their total. --follow cannot be combined with --json.

    Examples:

    \b
        flinkpy cluster logs
        flinkpy cluster logs tm-1 --stdout -n 20
        flinkpy cluster logs tm-1 --stdout --follow
        flinkpy cluster logs --list
    """
    if list_:
        _list_log_files(component, jobmanager)
        return
    component = component or "jobmanager"
    if follow and session.json:
        raise UsageError("--follow streams text and cannot be combined with --json", remedy="drop one of them")
    if session.json:
        text = client(jobmanager).log(component, stdout=stdout, lines=lines)
        emit_json({"component": component, "stream": "stdout" if stdout else "log", "lines": text.splitlines()})
        return
    import codecs

    sink = out().file
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode  # a character may span two chunks
    chunks = client(jobmanager).stream_log(component, stdout=stdout, lines=lines, follow=follow)
    try:
        for chunk in chunks:
            sink.write(decode(chunk))
            sink.flush()
    except KeyboardInterrupt:
        if not follow:
            raise
        chunks.close()  # closes the connection: the JobManager stops streaming


def _list_log_files(component: str | None, jobmanager: str | None) -> None:
    """'logs --list': the files of one process, or of every process, with sizes and a total."""
    from commands.output import fmt_size

    c = client(jobmanager)
    components = [component] if component else ["jobmanager", *sorted(str(tm["id"]) for tm in c.taskmanagers())]
    files = [{"component": who, **f} for who in components for f in c.log_files(who)]
    total = sum(int(f["size"]) for f in files)
    if session.json:
        emit_json({"files": files, "total_size": total})
        return
    import os

    # the directory once above the table, not folded into every row (mtime is in --json)
    directories = {os.path.dirname(str(f.get("path", ""))) for f in files}
    common = directories.pop() if len(directories) == 1 else None
    columns = [Column("Process"), Column("File"), Column("Size", justify="right")]
    rows = [[f["component"], f["name"] if common is not None else f.get("path", f["name"]), fmt_size(int(f["size"]))] for f in files]
    console = out()
    if common:
        console.print(f"In {common}:", markup=False, soft_wrap=True)
    render(console, columns, rows, title="Log files")
    console.print(f"Total: {fmt_size(total)} in {len(files)} file(s)", markup=False)
