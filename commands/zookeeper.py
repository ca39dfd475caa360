"""`flinkpy zookeeper`: run a local Apache ZooKeeper (one server or an ensemble) for high availability.

Like Flink's start-zookeeper-quorum.sh, on one machine: the servers are the distribution's
ZooKeeper, started as background processes whose configuration, data and logs live in the
cluster home ($FLINKPY_HOME/zookeeper), where 'stop' and 'status' find them again.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from commands.context import cluster_home
from commands.options import JsonFlag, duration_seconds
from commands.output import emit_json, out, progress, status
from commands.session import session
from flinkpy.errors import UsageError

app = typer.Typer(
    help="Run a local ZooKeeper server or ensemble for high availability (like Flink's start-zookeeper-quorum.sh).",
    no_args_is_help=True,
)


@app.command("start")
def start(
    port: Annotated[int, typer.Option("--port", min=0, max=65535, metavar="PORT", help="Client port of the first server; an ensemble's servers use PORT, PORT+1, ...; 0 picks free ports.")] = 2181,
    servers: Annotated[int, typer.Option("--servers", min=1, max=9, metavar="N", help="1 for a standalone server, 3 (or 5) for an ensemble on loopback.")] = 1,
    tick_time: Annotated[int, typer.Option("--tick-time", min=1, metavar="MS", help="ZooKeeper's tickTime in milliseconds; session timeouts are clamped to 2..20 ticks unless set below. Lower it (e.g. 200) for fast failover tests.")] = 2000,
    min_session_timeout: Annotated[Optional[int], typer.Option("--min-session-timeout", min=1, metavar="MS", help="Shortest session timeout a client gets, in milliseconds; default: 2 ticks.", show_default=False)] = None,
    max_session_timeout: Annotated[Optional[int], typer.Option("--max-session-timeout", min=1, metavar="MS", help="Longest session timeout a client gets, in milliseconds; default: 20 ticks.", show_default=False)] = None,
    bind_address: Annotated[str, typer.Option("--bind-address", metavar="ADDR", help="Where the client ports listen: 127.0.0.1, this host's address, or 0.0.0.0 (every interface) for JobManagers and TaskManagers on other hosts.")] = "127.0.0.1",
    json_: JsonFlag = False,
) -> None:
    """Start ZooKeeper in the background, on 127.0.0.1 (or --bind-address).

    Runs the distribution's ZooKeeper (Debian's zookeeper package, or the jar named by
    FLINKPY_ZOOKEEPER_JAR) with java, one process per server, configured in
    $FLINKPY_HOME/zookeeper/<n>/zoo.cfg with its data and log next to it. The servers outlive
    the command; it returns once every server answers and an ensemble has elected its leader,
    and prints the quorum to give to --zookeeper-quorum. Data is kept across stop and start.
    Exits 9 when ZooKeeper already runs in this home or the port is taken, 4 when ZooKeeper or
    java is not installed.

    Examples:

    \b
        flinkpy zookeeper start
        flinkpy zookeeper start --servers 3 --port 2181
        flinkpy zookeeper start --port 0 --tick-time 200 --json | jq -r .quorum
        flinkpy zookeeper start --bind-address 0.0.0.0
    """
    from flinkpy.ha.zookeeper_server import start_zookeeper

    if min_session_timeout is not None and max_session_timeout is not None and min_session_timeout > max_session_timeout:
        raise UsageError("--min-session-timeout is above --max-session-timeout", remedy="give a minimum not above the maximum")
    what = "ZooKeeper server" if servers == 1 else f"a ZooKeeper ensemble of {servers} servers"
    with progress(f"Starting {what}..."):
        info = start_zookeeper(
            cluster_home(),
            port=port,
            servers=servers,
            tick_time_ms=tick_time,
            min_session_timeout_ms=min_session_timeout,
            max_session_timeout_ms=max_session_timeout,
            bind_address=bind_address,
        )
    if session.json:
        emit_json(info.to_dict())
        return
    for s in info.servers:
        status(f"Started ZooKeeper server {s.id} (pid {s.pid}, port {s.client_port}, {s.mode}); log: {s.log}")
    console = out()
    console.print(f"ZooKeeper is serving. Quorum: {info.quorum}", markup=False)
    console.print(
        f"Session timeouts: {info.min_session_timeout_ms}..{info.max_session_timeout_ms} ms (tickTime {info.tick_time_ms} ms)",
        markup=False,
    )


@app.command("stop")
def stop(
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for the servers to exit after SIGTERM before killing them (Flink duration syntax).")] = "10s",
    json_: JsonFlag = False,
) -> None:
    """Stop the ZooKeeper servers running in the cluster home.

    Sends SIGTERM, waits up to --timeout, then kills what is left. The data directories are
    kept: a later 'flinkpy zookeeper start' in the same home finds its znodes again. Stopping
    when no ZooKeeper runs is not an error (exit 0), so scripts can call it unconditionally.

    Examples:

    \b
        flinkpy zookeeper stop
        flinkpy zookeeper stop --timeout 2s --json
    """
    from flinkpy.ha.zookeeper_server import stop_zookeeper

    timeout_s = duration_seconds(timeout, "--timeout")
    with progress("Stopping ZooKeeper..."):
        stopped = stop_zookeeper(cluster_home(), timeout_s)
    if session.json:
        emit_json({"stopped": [{"id": s.id, "pid": s.pid, "address": s.address} for s in stopped]})
        return
    if not stopped:
        out().print("No ZooKeeper is running.")
        return
    for s in stopped:
        out().print(f"Stopped ZooKeeper server {s.id} (pid {s.pid}, port {s.client_port}).", markup=False)


@app.command("status")
def zookeeper_status(json_: JsonFlag = False) -> None:
    """Show the ZooKeeper servers of the cluster home: pid, port, mode, and the quorum.

    A server's mode is standalone, leader or follower as it reports it ('srvr'); '-' when
    its process is gone or it does not serve (an ensemble member without a quorum). The
    quorum line is the connect string for --zookeeper-quorum. Exits 3 when none of the
    servers runs, so 'flinkpy zookeeper status' doubles as a health check; with --json,
    "serving" says whether a server serves requests.

    Examples:

    \b
        flinkpy zookeeper status
        quorum=$(flinkpy zookeeper status --json | jq -r .quorum)
        flinkpy cluster start --ha zookeeper --zookeeper-quorum "$quorum"
    """
    from flinkpy.ha.zookeeper_server import zookeeper_status as get_status

    info = get_status(cluster_home())
    if session.json:
        emit_json(info.to_dict())
        return
    console = out()
    table = Table(title="ZooKeeper servers", title_justify="left")
    for column in ("ID", "PID", "Address", "State", "Mode"):
        table.add_column(column)
    for s in info.servers:
        table.add_row(str(s.id), str(s.pid), s.address, "running" if s.alive else "gone", s.mode or "-")
    console.print(table)
    version = next((s.version for s in info.servers if s.version), None)
    console.print(
        f"Quorum: {info.quorum}; {'serving' if info.serving else 'NOT serving'}"
        + (f"; ZooKeeper {version}" if version else "")
        + f"; tickTime {info.tick_time_ms} ms, session timeouts {info.min_session_timeout_ms}..{info.max_session_timeout_ms} ms",
        markup=False,
    )
    console.print(f"Logs: {info.home / 'zookeeper'}/<id>/zookeeper.log", markup=False)
