"""`flinkpy jobmanager`: the JobManager of a cluster across hosts, on this host.

As Flink's ``jobmanager.sh``: the JobManager alone, in this host's cluster home; TaskManagers on
other hosts join it with 'flinkpy taskmanager start --jobmanager HOST:PORT'.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from commands.context import cluster_home, load_cli_config
from commands.options import Dynamic, JsonFlag
from commands.output import emit_json, out, progress
from commands.session import session

app = typer.Typer(help="Run the JobManager of a cluster across hosts on this host (like Flink's jobmanager.sh).", no_args_is_help=True)


@app.command("start")
def start(
    rest_port: Annotated[Optional[int], typer.Option("--rest-port", min=0, max=65535, metavar="PORT", help="Port of the REST API; default: rest.port (8081); 0 picks a free port.", show_default=False)] = None,
    dynamic: Dynamic = None,
    json_: JsonFlag = False,
) -> None:
    """Start a JobManager in the background, without TaskManagers.

    It listens where Flink's keys say: the RPC endpoint TaskManagers register with at
    jobmanager.rpc.address and jobmanager.rpc.port (binding jobmanager.bind-host when set, e.g.
    0.0.0.0), the REST API at rest.address and rest.port (binding rest.bind-address). Everything
    unset is loopback, so other hosts reach the JobManager only when these keys say so. Prints
    the REST address and the RPC address to give 'flinkpy taskmanager start --jobmanager' on the
    other hosts, which also need the cluster's secret: the file 'secret' in this cluster home.
    'flinkpy cluster stop' stops the JobManager and shuts its TaskManagers down; every other
    command finds it through the cluster home as usual. Exits 9 when a cluster already runs in
    this home or an address cannot be bound.

    Examples:

    \b
        flinkpy jobmanager start -D jobmanager.rpc.address=10.0.0.5 \\
            -D jobmanager.rpc.port=6123
        flinkpy jobmanager start -D jobmanager.rpc.address=10.0.0.5 \\
            -D jobmanager.bind-host=0.0.0.0 --json
    """
    config = load_cli_config(dynamic, starts_processes=True)
    from flinkpy.cluster.local import rpc_address, start_jobmanager

    home = cluster_home()
    with progress("Starting JobManager..."):
        info = start_jobmanager(home, rest_port=rest_port if rest_port is not None else config.get("rest.port"), config=config)
    rpc = rpc_address(home)
    if session.json:
        emit_json(dict(info.to_dict(), rpc_address=rpc, secret_file=str(home.path / "secret")))
        return
    out().print(f"JobManager started (pid {info.jobmanager_pid}). REST address: {info.rest_address}", markup=False)
    out().print(f"TaskManagers join with: flinkpy taskmanager start --jobmanager {rpc} --secret-file PATH "
                f"(a copy of {home.path / 'secret'}, mode 0600)", markup=False)
