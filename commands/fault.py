"""`flinkpy fault`: inject faults through the cluster, and read the fault journal.

Every fault travels the way a real one would be noticed: the CLI asks the JobManager (REST
``/jobs/<jid>/faults``, ``/cluster/faults``), which checks the target, journals the fault in the
job's record and tells the TaskManager hosting the target to carry it out (a signal to a task
process, a SIGSTOP/SIGCONT, an exception armed inside an operator, declined snapshots, failing
storage writes, delayed or dropped data channels). Only ``kill-jobmanager`` acts from here, through the cluster home's pid record (with high availability: the leader ZooKeeper names):
nothing else is left to ask; and ``partition``, which cuts links between the namespace hosts of
a drill cluster (``cluster start --hosts N``) that the cluster's processes live on. Random choices (which subtask, which TaskManager, chaos) come from
``--seed``, printed when it was not given so that a run can be repeated.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from commands.context import client
from commands.options import JobManager, JsonFlag, Wide, duration_seconds
from commands.output import emit_json, info, out, status
from commands.session import session
from commands.tables import Column, render
from flinkpy.errors import UsageError
from flinkpy.faults import SIGNALS
from flinkpy.faults.chaos import CHAOS_KINDS, DEFAULT_KINDS, SPARK_KINDS

if TYPE_CHECKING:
    from flinkpy.network.rest_client import JsonObject, JsonScalar

app = typer.Typer(
    help="Inject faults (killed or paused tasks and TaskManagers, exceptions, failed checkpoints, storage outages, slow or broken data channels) through the cluster.",
    no_args_is_help=True,
)

JobId = Annotated[str, typer.Argument(metavar="JOB_ID", help="ID of the job (see 'flinkpy list').", show_default=False)]
Vertex = Annotated[Optional[str], typer.Option("--vertex", metavar="NAME|UID|ID", help="Vertex id or name, or an operator's name, uid or id; default: chosen at random.")]
Subtask = Annotated[Optional[int], typer.Option("--subtask", metavar="I", help="Subtask index (0-based); default: a running one chosen at random.")]
Seed = Annotated[Optional[int], typer.Option("--seed", metavar="S", help="Seed of the random choices; default: a new one, printed on stderr.")]
TmId = Annotated[Optional[str], typer.Argument(metavar="[TM_ID]", help="TaskManager id (see 'flinkpy cluster status'); default: one at random.", show_default=False)]
#: chaos's kinds, from the registry (flinkpy.faults.kinds)
_CHAOS_HELP = (f"Kinds to choose from: {', '.join(CHAOS_KINDS)} (Spark jobs: {' and '.join(SPARK_KINDS)} only); "
               f"default: {', '.join(DEFAULT_KINDS)} (Spark jobs: {', '.join(SPARK_KINDS)}).")
For = Annotated[str, typer.Option("--for", metavar="DURATION", help="How long, e.g. 30s, 500ms, 1m.")]


def _seconds(text: str, flag: str) -> float:
    return duration_seconds(text, flag, positive=True)


def _rng(seed: int | None) -> tuple[int, random.Random]:
    if seed is None:
        seed = random.randrange(2**31)
        status(f"seed {seed} (repeat the same choices with --seed {seed})")
    return seed, random.Random(seed)


def _pick(seed: int | None) -> tuple[float, int]:
    """The number that chooses a target among the live ones, and the seed it came from."""
    used, rng = _rng(seed)
    return rng.random(), used


def _report(entry: JsonObject, verb: str, extra: JsonObject | None = None) -> None:
    from flinkpy.faults import describe_target

    if session.json:
        emit_json(dict(entry, **(extra or {})))
        return
    info(f"{verb} {describe_target(entry['target'])}")


def _job_fault(jobmanager: str | None, job_id: str, kind: str, vertex: str | None, subtask: int | None, seed: int | None, **params: JsonScalar) -> tuple[JsonObject, int | None]:
    pick = used_seed = None
    if vertex is None or subtask is None:
        pick, used_seed = _pick(seed)
    entry = client(jobmanager).inject_job_fault(job_id, kind, vertex=vertex, subtask=subtask, pick=pick, **params)
    return entry, used_seed


@app.command("kill-task")
def kill_task(job_id: JobId, vertex: Vertex = None, subtask: Subtask = None,
              signal_: Annotated[str, typer.Option("--signal", metavar="KILL|TERM", help="The signal the task process gets.")] = "KILL",
              seed: Seed = None, jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Kill one task process of a job with a signal, through its TaskManager.

    The TaskManager reports the task FAILED ("killed by signal ..."), and the job's restart
    strategy decides what happens next. Without --vertex/--subtask a running subtask is chosen
    at random (from --seed). On a Spark job (--runner spark) one busy Spark Python worker is
    killed instead: under the driver's JVM in local[N], under the job's executors on a cluster
    (on this machine), where Spark retries the task.

    Exit status: 0 when the fault was sent; 4 for an unknown job, vertex or subtask; 9 when the
    subtask is not running.

    Examples:

    \b
        flinkpy fault kill-task JOB_ID
        flinkpy fault kill-task JOB_ID --vertex sums --subtask 1 --signal TERM
    """
    sig = signal_.upper().removeprefix("SIG")
    if sig not in SIGNALS:
        raise UsageError(f"unsupported signal {signal_!r}", remedy="use KILL or TERM")
    entry, used = _job_fault(jobmanager, job_id, "kill-task", vertex, subtask, seed, signal=sig)
    _report(entry, f"sent SIG{sig} to", {"seed": used})


@app.command("kill-executor")
def kill_executor(job_id: JobId,
                  executor: Annotated[Optional[str], typer.Option("--executor", metavar="ID", help="Spark's executor id (0, 1, ...); default: one of the job's executors on this machine, chosen from --seed.")] = None,
                  seed: Seed = None, jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Kill an executor JVM of a Spark job (SIGKILL), as a lost machine would.

    For jobs run with --runner spark on a cluster master (see 'flinkpy spark start'): the job's
    driver finds the executors of its Spark application on this machine (processes running
    CoarseGrainedExecutorBackend with the application's id) and kills one, with its Python
    workers. Spark runs the lost tasks again on the other executors and the worker starts a new
    executor; a query that fails anyway is restarted from its checkpoint by the job's restart
    strategy. The fault is journaled ('flinkpy fault history').

    Exit status: 0 when the executor was killed; 4 for an unknown job or executor id; 9 when
    the job is not running or has no executor on this machine (local[N] has none).

    Examples:

    \b
        flinkpy fault kill-executor JOB_ID
        flinkpy fault kill-executor JOB_ID --executor 1 --json
    """
    c = client(jobmanager)
    c.require_spark_job(job_id, "kill-executor")
    pick = used = None
    if executor is None:
        pick, used = _pick(seed)
    entry = c.inject_job_fault(job_id, "kill-executor", executor=executor, pick=pick)
    _report(entry, "sent SIGKILL to", {"seed": used})


@app.command("pause-task")
def pause_task(job_id: JobId, for_: For = "30s", vertex: Vertex = None, subtask: Subtask = None, seed: Seed = None,
               jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Freeze one task process (SIGSTOP) and resume it (SIGCONT) after --for.

    Its TaskManager sends both signals. A frozen task stops consuming: backpressure builds up
    behind it and checkpoints wait for it.

    Exit status: 0 when the fault was sent; 4 for an unknown target; 9 when it is not running.

    Examples:

    \b
        flinkpy fault pause-task JOB_ID --vertex sums --subtask 0 --for 5s
    """
    seconds = _seconds(for_, "--for")
    entry, used = _job_fault(jobmanager, job_id, "pause-task", vertex, subtask, seed, seconds=seconds)
    _report(entry, f"paused for {seconds:g}s", {"seed": used})


@app.command("raise")
def raise_(job_id: JobId,
           vertex: Annotated[str, typer.Option("--vertex", metavar="NAME|UID|ID", help="Vertex id or name, or the name, uid or id of the operator that raises.")],
           subtask: Subtask = None,
           after: Annotated[int, typer.Option("--after", metavar="N", min=0, help="Records the operator processes first.")] = 0,
           seed: Seed = None, jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Make an operator raise an exception at its N-th next record, as a bug in user code would.

    The exception (flinkpy.faults.InjectedFault) comes from inside the operator's processing
    call, so it is reported, restarted and recorded in the exception history like any user
    function's exception. Naming a vertex aims at its first operator after the source (or its
    head); naming an operator aims at that operator.

    Exit status: 0 when the fault was armed; 4 for an unknown target; 9 when it is not running.

    Examples:

    \b
        flinkpy fault raise JOB_ID --vertex sums --after 1000
    """
    entry, used = _job_fault(jobmanager, job_id, "raise", vertex, subtask, seed, after=after)
    _report(entry, f"armed an exception after {after} record(s) in", {"seed": used})


@app.command("fail-checkpoint")
def fail_checkpoint(job_id: JobId, count: Annotated[int, typer.Option("--count", metavar="K", min=1, help="How many next checkpoints fail.")] = 1,
                    jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Make the job's next K checkpoints fail: one of its tasks declines them.

    Whether failed checkpoints fail the job follows
    execution.checkpointing.tolerable-failed-checkpoints.

    Exit status: 0 when the fault was armed; 4 for an unknown job; 9 when no task is running.

    Examples:

    \b
        flinkpy fault fail-checkpoint JOB_ID --count 2
    """
    entry = client(jobmanager).inject_job_fault(job_id, "fail-checkpoint", count=count)
    _report(entry, f"the next {count} checkpoint(s) will be declined by")


@app.command("network")
def network(job_id: JobId,
            delay: Annotated[Optional[str], typer.Option("--delay", metavar="DURATION", help="Hold each data buffer this long before sending it, e.g. 200ms.")] = None,
            drop_connection: Annotated[bool, typer.Option("--drop-connection", help="Shut the task's output channels down abruptly.")] = False,
            for_: For = "10s", vertex: Vertex = None, subtask: Subtask = None, seed: Seed = None,
            jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Slow down or break the data channels that one task sends on.

    --delay makes the task wait DURATION before sending each data buffer, for --for: a slow
    link that backpressure and checkpoints have to live with (barriers and other control
    frames are not delayed). --drop-connection shuts the task's output connections down at
    once, as a lost link would: its consumers fail with a broken channel, and the job's restart
    strategy takes over. Only tasks with outputs qualify; without --vertex/--subtask one is
    chosen at random (from --seed). Give exactly one of --delay and --drop-connection.

    Exit status: 0 when the fault was sent; 2 without exactly one of --delay/--drop-connection;
    4 for an unknown target; 9 when it is not running or has no outputs.

    Examples:

    \b
        flinkpy fault network JOB_ID --delay 200ms --for 10s
        flinkpy fault network JOB_ID --drop-connection --vertex sequences \\
            --subtask 0
    """
    if (delay is None) == (not drop_connection):
        raise UsageError("give exactly one of --delay and --drop-connection", remedy="e.g. --delay 200ms, or --drop-connection")
    params: dict[str, JsonScalar] = {"drop": True} if drop_connection else {"delay_ms": _seconds(str(delay), "--delay") * 1000, "seconds": _seconds(for_, "--for")}
    entry, used = _job_fault(jobmanager, job_id, "network", vertex, subtask, seed, **params)
    verb = "dropped the output connections of" if drop_connection else f"delayed each buffer by {delay} for {for_} on the outputs of"
    _report(entry, verb, {"seed": used})


@app.command("kill-taskmanager")
def kill_taskmanager(tm_id: TmId = None, seed: Seed = None, jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Kill a TaskManager (SIGKILL, sent by itself on the JobManager's request), tasks and all.

    Exit status: 0 when the fault was sent; 4 for an unknown TaskManager.

    Examples:

    \b
        flinkpy fault kill-taskmanager
        flinkpy fault kill-taskmanager tm-1
    """
    used = pick = None
    if tm_id is None:
        pick, used = _pick(seed)
    entry = client(jobmanager).inject_cluster_fault("kill-taskmanager", taskmanager=tm_id, pick=pick)
    _report(entry, "killed", {"seed": used})


@app.command("pause-taskmanager")
def pause_taskmanager(tm_id: TmId = None, for_: For = "30s", seed: Seed = None, jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Freeze a TaskManager process (SIGSTOP) and resume it (SIGCONT) after --for.

    The TaskManager starts a small helper process that stops it and, after the duration,
    continues it (a stopped process cannot wake itself). Its tasks keep running, but nothing
    they report reaches the JobManager meanwhile; past heartbeat.timeout it is declared lost.

    Exit status: 0 when the fault was sent; 4 for an unknown TaskManager.

    Examples:

    \b
        flinkpy fault pause-taskmanager tm-1 --for 10s
    """
    seconds = _seconds(for_, "--for")
    used = pick = None
    if tm_id is None:
        pick, used = _pick(seed)
    entry = client(jobmanager).inject_cluster_fault("pause-taskmanager", taskmanager=tm_id, pick=pick, seconds=seconds)
    _report(entry, f"paused for {seconds:g}s", {"seed": used})


@app.command("storage-outage")
def storage_outage(for_: For = "20s", jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Make every checkpoint storage write (tasks' uploads, the JobManager's _metadata) fail for a while.

    Writes fail with an OSError until the outage ends; the checkpoints taken meanwhile fail.

    Exit status: 0 when the fault was sent.

    Examples:

    \b
        flinkpy fault storage-outage --for 20s
    """
    seconds = _seconds(for_, "--for")
    entry = client(jobmanager).inject_cluster_fault("storage-outage", seconds=seconds)
    _report(entry, f"for {seconds:g}s: write failures in")


@app.command("partition")
def partition(
    hosts: Annotated[Optional[list[str]], typer.Argument(metavar="HOST_A HOST_B", help="Two hosts of the drill cluster (see 'flinkpy cluster status'): jobmanager, tm-1, tm-2, ...", show_default=False)] = None,
    for_: For = "30s",
    heal: Annotated[bool, typer.Option("--heal", help="Heal every partition between the drill cluster's hosts now (no hosts named).")] = False,
    json_: JsonFlag = False,
) -> None:
    """Cut the network between two hosts of a drill cluster, and heal it after --for.

    Only for a cluster started with 'flinkpy cluster start --hosts N', whose JobManager and
    TaskManagers live on hosts made of network namespaces. Packets between the two hosts are
    dropped, as in a real partition: connections time out (nothing is refused), while both
    hosts keep reaching the others. A detached helper heals the link after the duration;
    --heal heals every cut at once. What to expect is in the hosts page of the documentation:
    a TaskManager cut off from the JobManager is declared lost after heartbeat.timeout, two
    TaskManagers cut off from each other fail the job's next checkpoint.

    Exit status: 0 when the link was cut (or healed); 2 for a host that is not there; 3 when no
    cluster runs; 8 where namespaces cannot be made.

    Examples:

    \b
        flinkpy fault partition jobmanager tm-1 --for 30s
        flinkpy fault partition tm-1 tm-2 --for 2m --json
        flinkpy fault partition --heal
    """
    from commands.context import cluster_home
    from flinkpy.cluster import drill

    home = cluster_home()
    if heal:
        if hosts:
            raise UsageError("--heal heals every partition: name no hosts with it", remedy="run 'flinkpy fault partition --heal'")
        healed = drill.heal(home)
        if session.json:
            emit_json({"healed": healed})
        else:
            info(f"healed every link between {', '.join(healed)}")
        return
    if not hosts or len(hosts) != 2:
        raise UsageError("name two hosts to cut apart", remedy="e.g. 'flinkpy fault partition jobmanager tm-1 --for 30s'")
    seconds = _seconds(for_, "--for")
    cut = drill.partition(home, hosts[0], hosts[1])
    healer = drill.heal_later(home, cut, seconds)
    if session.json:
        emit_json(dict(cut.to_dict(), seconds=seconds, healer_pid=healer))
        return
    info(f"cut the link between {cut.a} ({cut.a_address}) and {cut.b} ({cut.b_address}) for {seconds:g}s")


@app.command("kill-jobmanager")
def kill_jobmanager(yes: Annotated[bool, typer.Option("--yes", help="Kill it even though its jobs are lost (a cluster without high availability).")] = False,
                    json_: JsonFlag = False) -> None:
    """Kill the (leading) JobManager of the cluster in $FLINKPY_HOME (SIGKILL).

    With high availability the leader ZooKeeper names is killed: a standby takes over after
    the ZooKeeper session timeout and recovers the running jobs from their latest checkpoints;
    the TaskManagers follow it. Without high availability the jobs are lost with the
    JobManager (the supervisor starts a fresh one, and the TaskManagers register with it):
    then this refuses unless --yes is given.

    Exit status: 0 when killed; 3 when no cluster runs (or no leader is elected); 9 without
    --yes on a cluster without high availability.

    Examples:

    \b
        flinkpy fault kill-jobmanager
        flinkpy fault kill-jobmanager --yes
    """
    target = client(None).kill_jobmanager(force=yes)
    if session.json:
        emit_json({"kind": "kill-jobmanager", "target": target})
    elif "id" in target:
        info(f"killed the leading JobManager {target['id']} (pid {target['pid']}, epoch {target['epoch']}); a standby takes over")
    else:
        info(f"killed the JobManager (pid {target['pid']}); its jobs are lost")


@app.command("history")
def history(job_id: JobId, jobmanager: JobManager = None, wide: Wide = False, json_: JsonFlag = False) -> None:
    """Show the faults injected into a job: when, what, which target, job state before and after.

    Each fault's state and restarts after are the job's as the next fault found them (what
    this fault brought about); for the latest fault, the job's state now.

    Exit status: 0 on success; 4 for an unknown job.

    Examples:

    \b
        flinkpy fault history JOB_ID
    """
    from commands.output import fmt_time
    from flinkpy.faults import describe_target

    doc = client(jobmanager).fault_history(job_id)
    if session.json:
        emit_json(doc)
        return
    if not doc["faults"]:
        info(f"no faults were injected into job {job_id}")
        return
    columns = [Column("Time", drop=1), Column("Fault"), Column("Target", fold=True, min_width=20), Column("State"),
               Column("Restarts", justify="right")]
    rows = [[fmt_time(e["time"]), e["kind"], describe_target(e["target"]), f"{e['state-before']} -> {e['state-after']}",
             f"{e['restarts-before']} -> {e['restarts-after']}"] for e in doc["faults"]]
    render(out(), columns, rows, title=f"Faults injected into job {job_id}", wide=wide)


@app.command("chaos")
def chaos(job_id: JobId,
          duration: Annotated[str, typer.Option("--duration", metavar="DURATION", help="How long to inject faults.")] = "1m",
          every: Annotated[str, typer.Option("--every", metavar="DURATION", help="One fault per interval, at a random moment in it.")] = "5s",
          faults: Annotated[Optional[str], typer.Option("--faults", metavar="KIND,...", help=_CHAOS_HELP)] = None,
          seed: Seed = None, jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Inject random faults at random moments into a job, reproducibly from --seed.

    The schedule (moments, kinds, targets among the live ones) depends on the seed only; each
    fault is journaled (see 'flinkpy fault history'). A fault whose target is not running at
    its moment (the job is restarting) is skipped. kill-taskmanager and pause-taskmanager hit a
    TaskManager that runs the job's tasks; kill-taskmanager is skipped while only one
    TaskManager is left. Stops at the end or on Ctrl-C, and prints a summary: faults injected
    and skipped, restarts observed, the job's state. A Spark job (--runner spark) takes the
    kinds that reach it: kill-task (a Spark Python worker) and kill-executor (an executor JVM);
    other kinds are refused for it, and kill-executor is refused for jobs on flinkpy's engine.

    Exit status: 0 at the end; 2 for a kind the job's runner does not take; 4 for an unknown
    job; 130 on Ctrl-C (after the summary).

    Examples:

    \b
        flinkpy fault chaos JOB_ID --duration 1m --every 5s --seed 42
        flinkpy fault chaos SPARK_JOB_ID --faults kill-task,kill-executor \\
            --duration 1m --every 10s
        flinkpy fault chaos JOB_ID --faults kill-task,raise --duration 30s \\
            --every 3s
    """
    from flinkpy.client.chaos import ChaosEvent, run_chaos
    from flinkpy.faults import describe_target
    from flinkpy.faults.chaos import kinds_for, plan

    c = client(jobmanager)
    requested = [k.strip() for k in faults.split(",") if k.strip()] if faults else None
    kinds = kinds_for(job_id, c.spark_record(job_id) is not None, requested)
    used, _ = _rng(seed)
    try:
        schedule = plan(used, _seconds(duration, "--duration"), _seconds(every, "--every"), kinds)
    except ValueError as e:
        raise UsageError(str(e), remedy="see 'flinkpy fault chaos --help'") from None

    def render(event: ChaosEvent) -> None:
        if event.what == "ended":
            status(f"job {job_id} is {event.state}: chaos ends")
        elif event.what == "skipped":
            status(f"+{event.at_s:6.2f}s {event.kind}: skipped ({event.reason})")
        elif event.what == "injected" and event.entry is not None:
            status(f"+{event.at_s:6.2f}s {event.kind}: {describe_target(event.entry['target'])}")
        elif event.what == "interrupted":
            status("interrupted: chaos stops")

    summary = run_chaos(c, job_id, schedule, seed=used, duration_s=_seconds(duration, "--duration"), on_event=render)
    if session.json:
        emit_json(summary.to_dict())
    else:
        info(f"chaos on job {job_id} (seed {used}): {len(summary.injected)} fault(s) injected, {len(summary.skipped)} skipped, "
             f"{summary.restarts_observed} restart(s) observed; job {summary.state}")
    if summary.interrupted:
        raise typer.Exit(130)
