"""`flinkpy spark`: run a Spark standalone cluster on this machine for `flinkpy run --runner spark`.

Like Spark's start-master.sh and start-worker.sh, on loopback: the master and workers are the
Spark that PySpark installs, started as background processes whose record, logs and work
directories live in the cluster home ($FLINKPY_HOME/spark-standalone), where 'stop' and
'status' find them again.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Annotated, Callable, Iterator, Optional

import typer
from rich.table import Table

from commands.context import cluster_home
from commands.options import JsonFlag, duration_seconds
from commands.output import emit_json, err, out, status
from commands.session import session

app = typer.Typer(
    help="Run a Spark standalone cluster (a master and workers) on this machine for --runner spark.",
    no_args_is_help=True,
)


@contextlib.contextmanager
def _progress(first: str) -> Iterator[Optional[Callable[[str], None]]]:
    """A spinner whose text follows the start-up, only when a person watches stderr."""
    if sys.stderr.isatty() and not session.debug:
        with err().status(first) as spinner:
            yield lambda message: spinner.update(message)
    else:
        yield None


@app.command("start")
def start(
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, metavar="N", help="Workers to start, each a separate process.")] = 2,
    cores: Annotated[int, typer.Option("--cores", min=1, metavar="C", help="Cores each worker offers to executors.")] = 1,
    memory: Annotated[str, typer.Option("--memory", metavar="M", help="Memory each worker offers to executors, in Spark's syntax (1g, 512m); an executor takes 1g unless spark.executor.memory says otherwise.")] = "1g",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, metavar="P", help="The master's port; 0 picks a free one.")] = 0,
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for the master and every worker to be ready.")] = "2min",
    json_: JsonFlag = False,
) -> None:
    """Start a Spark standalone master and N workers in the background, on 127.0.0.1.

    Runs the Spark distribution that PySpark installs (its spark-class, with JAVA_HOME or the
    java on the PATH), one process per master and worker, with logs in
    $FLINKPY_HOME/spark-standalone/log and the workers' directories (executors' output) in
    $FLINKPY_HOME/spark-standalone/work. The processes outlive the command; it returns once the
    master accepts connections and every worker has registered with it, and prints the master
    URL to give to 'flinkpy run --runner spark --spark-master'. Ports not given are chosen free.

    Exit status: 0 when the cluster is ready; 9 when a cluster already runs in this home or the
    port is taken; 8 when PySpark or Java is missing; 6 when it is not ready within --timeout.

    Examples:

    \b
        flinkpy spark start
        flinkpy spark start --workers 2 --cores 1 --memory 1g
        flinkpy run --runner spark \\
            --spark-master "$(flinkpy spark start --json | jq -r .master_url)" \\
            examples/word_count.py
    """
    from flinkpy.spark.standalone import start_standalone

    timeout_s = duration_seconds(timeout, "--timeout", positive=True)
    with _progress("Starting a Spark standalone cluster...") as say:
        info = start_standalone(cluster_home(), workers=workers, cores=cores, memory=memory, port=port,
                                timeout_s=timeout_s, on_progress=say)
    if session.json:
        emit_json(info.to_dict())
        return
    status(f"Started the Spark master (pid {info.master.pid}); log: {info.master.log}")
    for w in info.workers:
        status(f"Started Spark worker {w.index} (pid {w.pid}, {w.cores} core(s), {w.memory}); log: {w.log}")
    out().print(f"Spark {info.version} standalone cluster is ready: {len(info.workers)} worker(s). Master: {info.master_url}", markup=False)
    out().print(f"Web UI: {info.web_ui}", markup=False)


@app.command("stop")
def stop(
    timeout: Annotated[str, typer.Option("--timeout", metavar="DURATION", help="How long to wait for the processes to exit after SIGTERM before killing them.")] = "10s",
    json_: JsonFlag = False,
) -> None:
    """Stop the Spark standalone cluster of the cluster home: master, workers and their executors.

    Sends SIGTERM to the master's and each worker's process group, waits up to --timeout, then
    kills what is left, executors and their Python workers included. Logs are kept. Stopping when
    no cluster runs is not an error (exit 0), so scripts can call it unconditionally. Jobs whose
    drivers still run against the cluster lose their executors and fail.

    Exit status: 0.

    Examples:

    \b
        flinkpy spark stop
        flinkpy spark stop --timeout 2s --json
    """
    from flinkpy.spark.standalone import stop_standalone

    timeout_s = duration_seconds(timeout, "--timeout")
    stopped = stop_standalone(cluster_home(), timeout_s)
    if session.json:
        emit_json({"stopped": [{"role": p.role, "index": p.index, "pid": p.pid} for p in stopped]})
        return
    if not stopped:
        out().print("No Spark standalone cluster is running.")
        return
    for p in stopped:
        what = "the Spark master" if p.role == "master" else f"Spark worker {p.index}"
        out().print(f"Stopped {what} (pid {p.pid}).", markup=False)


@app.command("status")
def spark_status(json_: JsonFlag = False) -> None:
    """Show the Spark standalone cluster of the cluster home: master, workers, applications.

    A worker's state is the master's view of it (ALIVE, DEAD, ...; '-' when it has not
    registered); 'gone' when its process no longer runs (with --json: "alive": false, and
    "state": "LOST" while the master still counts it ALIVE). Applications are the Spark jobs running on the
    cluster (a flinkpy job on Spark is one application). With --json, "master_url" is the URL for
    --spark-master and "alive_workers" counts the registered live workers.

    Exit status: 0 when the cluster runs; 3 when no cluster runs in this home.

    Examples:

    \b
        flinkpy spark status
        flinkpy spark status --json | jq -r .master_url
    """
    from flinkpy.spark.standalone import standalone_status

    info = standalone_status(cluster_home())
    if session.json:
        emit_json(info.to_dict())
        return
    console = out()
    table = Table(title=f"Spark standalone cluster {info.master_url}", title_justify="left")
    for column in ("Role", "PID", "Address", "State", "Cores", "Memory"):
        table.add_column(column, no_wrap=True)
    for p in (info.master, *info.workers):
        role = "master" if p.role == "master" else f"worker {p.index}"
        state = (p.state or "-") if p.alive else "gone"
        table.add_row(role, str(p.pid), f"127.0.0.1:{p.port}", state, str(p.cores) if p.role == "worker" else "", p.memory)
    console.print(table)
    console.print(f"Web UI: {info.web_ui}", markup=False)
    alive = sum(1 for w in info.workers if w.state == "ALIVE")
    console.print(f"Master {info.master_state or 'NOT answering'}; {alive}/{len(info.workers)} worker(s) alive; "
                  f"{len(info.applications)} application(s) running; Spark {info.version}", markup=False)
    for a in info.applications:
        console.print(f"  {a['id']}  {a['name']}  ({a['cores']} core(s), {a['state']})", markup=False)
    console.print(f"Logs: {info.home / 'spark-standalone' / 'log'}", markup=False)
