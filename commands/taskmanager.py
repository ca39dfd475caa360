"""`flinkpy taskmanager`: TaskManagers on this host for a JobManager on another one.

As Flink's ``taskmanager.sh``: a TaskManager in this host's cluster home that registers with the
JobManager at --jobmanager HOST:PORT; the cluster's secret comes as a file or in the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from commands.context import cluster_home, load_cli_config
from commands.options import Dynamic, JsonFlag, duration_seconds
from commands.output import emit_json, out, progress
from commands.session import session

app = typer.Typer(help="Run TaskManagers on this host for a JobManager on another (like Flink's taskmanager.sh).", no_args_is_help=True)


@app.command("start")
def start(
    jobmanager: Annotated[str, typer.Option("--jobmanager", metavar="HOST:PORT", help="The JobManager's RPC address and port (its jobmanager.rpc.address and jobmanager.rpc.port, printed by 'flinkpy jobmanager start').")],
    slots: Annotated[Optional[int], typer.Option("--slots", min=1, metavar="N", help="Slots of the TaskManager; default: taskmanager.numberOfTaskSlots (1).", show_default=False)] = None,
    secret_file: Annotated[Optional[Path], typer.Option("--secret-file", metavar="PATH", help="A copy of the cluster's secret (the JobManager home's 'secret', mode 0600); default: $FLINKPY_CLUSTER_SECRET, else this home's own secret.", show_default=False)] = None,
    tm_id: Annotated[Optional[str], typer.Option("--id", metavar="ID", help="The TaskManager's id; default: tm-<hostname>-<n>.", show_default=False)] = None,
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for the TaskManager to register.")] = "30s",
    dynamic: Dynamic = None,
    json_: JsonFlag = False,
) -> None:
    """Start a TaskManager in the background that registers with the JobManager at --jobmanager.

    Its data channels listen at taskmanager.host (the address it gives the JobManager and the
    other TaskManagers; default: the local address of its connection to the JobManager),
    binding taskmanager.bind-host when set, on ports from taskmanager.data.port up (default: any
    free port). The cluster's secret is kept in this host's cluster home (mode 0600), taken from
    --secret-file or $FLINKPY_CLUSTER_SECRET — never from the command line, which any local user
    can read. Returns once the JobManager has accepted it. The TaskManager stops when the
    JobManager shuts it down ('flinkpy cluster stop' on its host) or is gone, or with
    'flinkpy taskmanager stop'. Exits 8 without a secret, 6 when it does not register in time.

    Examples:

    \b
        flinkpy taskmanager start --jobmanager 10.0.0.5:6123 --slots 4 \\
            --secret-file ./secret
        FLINKPY_CLUSTER_SECRET=$(cat secret) flinkpy taskmanager start \\
            --jobmanager 10.0.0.5:6123 -D taskmanager.host=10.0.0.6
    """
    import os

    from flinkpy.addresses import parse_host_port
    from flinkpy.cluster.hosts import install_secret, start_taskmanager

    address = parse_host_port(jobmanager, what="--jobmanager")
    timeout_s = duration_seconds(timeout, "--timeout", positive=True)
    config = load_cli_config(dynamic, starts_processes=True)
    home = cluster_home()
    install_secret(home, secret_file=secret_file, environ=os.environ)
    with progress(f"Starting a TaskManager for {jobmanager}..."):
        tm = start_taskmanager(home, address, slots=slots if slots is not None else config.get("taskmanager.numberOfTaskSlots"),
                               config=config, tm_id=tm_id, timeout_s=timeout_s)
    if session.json:
        emit_json(dict(tm.to_dict(), jobmanager=jobmanager))
        return
    out().print(f"TaskManager {tm.id} started (pid {tm.pid}) and registered with {jobmanager}.", markup=False)


@app.command("stop")
def stop(
    tm_id: Annotated[Optional[str], typer.Option("--id", metavar="ID", help="Stop only this TaskManager.", show_default=False)] = None,
    json_: JsonFlag = False,
) -> None:
    """Stop the TaskManagers 'taskmanager start' runs in this host's cluster home.

    Their tasks end with them; the JobManager restarts its jobs' tasks on the TaskManagers it
    has left (its restart strategy decides). Stopping when none runs is not an error.

    Examples:

    \b
        flinkpy taskmanager stop
        flinkpy taskmanager stop --id tm-host-b-1 --json
    """
    from flinkpy.cluster.hosts import stop_taskmanagers

    stopped = stop_taskmanagers(cluster_home(), tm_id=tm_id)
    if session.json:
        emit_json({"stopped": [{"id": p.id, "pid": p.pid} for p in stopped]})
        return
    if not stopped:
        out().print("No TaskManager is running here.")
    for p in stopped:
        out().print(f"Stopped {p.id} (pid {p.pid}).", markup=False)
