"""`flinkpy restart-strategy`: see and change a running job's restart strategy, or explain one offline.

``show`` and ``set`` talk to a cluster (REST); ``explain`` needs none: it replays a strategy
(``flinkpy.common.restart_backoff``) against a sequence of failures and prints the
schedule. The flags of ``set`` and ``explain`` are the same and map one to one to Flink's
``restart-strategy.*`` keys; flags left out take Flink's defaults.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from commands.options import JobManager, JsonFlag
from commands.output import emit_json, fmt_duration, fmt_time, out
from commands.session import session
from flinkpy.config import SCHEMA
from flinkpy.units import format_duration_ms, parse_duration_ms
from flinkpy.errors import UsageError
from flinkpy.common.restart_backoff import (
    ALLOWED_TYPES,
    PREFIX,
    TYPE_ALIASES,
    TYPE_KEY,
    RestartBackoffTimeStrategy,
    explain as explain_schedule,
    format_description,
    format_value,
    strategy_from_config,
)

app = typer.Typer(
    help="Show and change a job's restart strategy; explain a strategy's schedule offline.",
    no_args_is_help=True,
)

JobId = Annotated[str, typer.Argument(metavar="JOB_ID", help="ID of the job (see 'flinkpy list').", show_default=False)]
TypeArg = Annotated[
    str,
    typer.Argument(
        metavar="TYPE",
        help="none (or off, disable), fixed-delay, failure-rate or exponential-delay.",
        show_default=False,
    ),
]
Attempts = Annotated[Optional[str], typer.Option("--attempts", metavar="N", help="fixed-delay: restarts before the job fails (default 1).")]
Delay = Annotated[Optional[str], typer.Option("--delay", metavar="DURATION", help="fixed-delay, failure-rate: wait before each restart (default 1 s).")]
MaxFailures = Annotated[Optional[str], typer.Option("--max-failures", metavar="N", help="failure-rate: failures tolerated per interval (default 1).")]
Interval = Annotated[Optional[str], typer.Option("--interval", metavar="DURATION", help="failure-rate: the sliding window failures are counted in (default 1 min).")]
InitialBackoff = Annotated[Optional[str], typer.Option("--initial-backoff", metavar="DURATION", help="exponential-delay: first delay, and delay after a reset (default 1 s).")]
MaxBackoff = Annotated[Optional[str], typer.Option("--max-backoff", metavar="DURATION", help="exponential-delay: longest delay (default 1 min).")]
Multiplier = Annotated[Optional[str], typer.Option("--multiplier", metavar="FACTOR", help="exponential-delay: growth of the delay per failure, >= 1 (default 1.5).")]
ResetThreshold = Annotated[Optional[str], typer.Option("--reset-threshold", metavar="DURATION", help="exponential-delay: time without failures that resets delay and attempts (default 1 h).")]
Jitter = Annotated[Optional[str], typer.Option("--jitter", metavar="FACTOR", help="exponential-delay: random spread of each delay, 0 to 1 (default 0.1).")]
AttemptsBeforeReset = Annotated[Optional[str], typer.Option("--attempts-before-reset", metavar="N", help="exponential-delay: restarts without a reset before the job fails (default unlimited, 2147483647).")]

#: flag -> {strategy type: the key suffix it sets}
_FLAGS: dict[str, dict[str, str]] = {
    "--attempts": {"fixed-delay": "attempts"},
    "--delay": {"fixed-delay": "delay", "failure-rate": "delay"},
    "--max-failures": {"failure-rate": "max-failures-per-interval"},
    "--interval": {"failure-rate": "failure-rate-interval"},
    "--initial-backoff": {"exponential-delay": "initial-backoff"},
    "--max-backoff": {"exponential-delay": "max-backoff"},
    "--multiplier": {"exponential-delay": "backoff-multiplier"},
    "--reset-threshold": {"exponential-delay": "reset-backoff-threshold"},
    "--jitter": {"exponential-delay": "jitter-factor"},
    "--attempts-before-reset": {"exponential-delay": "attempts-before-reset-backoff"},
}


def build_strategy(type_: str, flags: dict[str, str | None]) -> RestartBackoffTimeStrategy:
    """The strategy TYPE and the given flags describe; exit 2 for bad flags, 8 for bad combinations."""
    kind = TYPE_ALIASES.get(type_.strip().lower())
    if kind is None:
        raise UsageError(f"unknown restart strategy type {type_!r}", remedy=f"use one of {ALLOWED_TYPES}")
    config: dict[str, str] = {TYPE_KEY: kind}
    for flag, raw in flags.items():
        if raw is None:
            continue
        suffix = _FLAGS[flag].get(kind)
        if suffix is None:
            own = [f for f, kinds in _FLAGS.items() if kind in kinds]
            raise UsageError(
                f"{flag} does not apply to restart strategy {kind}",
                remedy=f"options of {kind}: {', '.join(own)}" if own else f"{kind} takes no options",
            )
        key = f"{PREFIX}{kind}.{suffix}"
        option = SCHEMA[key]
        try:
            value = option.type.parse(raw)
        except ValueError:
            raise UsageError(f"invalid value {raw!r} for {flag}", remedy=f"use {option.type.allowed}") from None
        config[key] = option.type.format(value)
    # Cross-field checks (initial backoff above the maximum, ...) raise ConfigurationError: exit 8.
    return strategy_from_config(config, checkpointing_enabled=False)


def _side(value: Any) -> str:
    if isinstance(value, dict):
        return format_description(value)
    return "-" if value is None else str(value)


# --------------------------------------------------------------------------- cluster commands


@app.command("show")
def show(job_id: JobId, jobmanager: JobManager = None, json_: JsonFlag = False) -> None:
    """Show a job's restart strategy, its parameters, its restarts so far and its changes.

    Prints the strategy in effect (the one that will handle the job's next failure) with each
    of its parameters, how many times the job has restarted, the failures that currently count
    towards giving up (when the JobManager reports them), and the history of changes made
    with 'flinkpy restart-strategy set'. The JSON document is the JobManager's answer:
    {"jid", "restart-strategy": {"type", ...}, "restarts", "history": [{"timestamp", "from",
    "to"}]}; durations in it are milliseconds, and a count of 2147483647 (Flink's no-limit)
    is printed as "unlimited" but kept as the number in JSON.

    Exit status: 0 on success; 3 when no cluster answers; 4 when there is no such job.

    Examples:

    \b
        flinkpy restart-strategy show 5a7c9e1f0b2d4c6e8a1b3c5d7e9f0a2b
        flinkpy restart-strategy show --json JOB_ID | jq .restarts
    """
    from commands.context import client

    doc = client(jobmanager).restart_strategy(job_id)
    if session.json:
        emit_json(doc)
        return
    console = out()
    strategy = doc.get("restart-strategy") or {}
    console.print(f"Job {doc.get('jid', job_id)}", markup=False)
    console.print(f"  Restart strategy: {strategy.get('type', '?')}", markup=False)
    for name, value in strategy.items():
        if name != "type":
            console.print(f"    {name}: {format_value(name, value)}", markup=False)
    console.print(f"  Restarts: {doc.get('restarts', 0)}", markup=False)
    for field in ("counted-failures", "failures"):
        if field in doc:
            console.print(f"  Failures counted: {doc[field]}", markup=False)
            break
    history = doc.get("history") or []
    if history:
        console.print("  Changes:", markup=False)
        for entry in history:
            console.print(f"    {fmt_time(entry.get('timestamp'))}  {_side(entry.get('from'))} -> {_side(entry.get('to'))}", markup=False)


@app.command("set")
def set_(
    job_id: JobId,
    type_: TypeArg,
    attempts: Attempts = None,
    delay: Delay = None,
    max_failures: MaxFailures = None,
    interval: Interval = None,
    initial_backoff: InitialBackoff = None,
    max_backoff: MaxBackoff = None,
    multiplier: Multiplier = None,
    reset_threshold: ResetThreshold = None,
    jitter: Jitter = None,
    attempts_before_reset: AttemptsBeforeReset = None,
    jobmanager: JobManager = None,
    json_: JsonFlag = False,
) -> None:
    """Change the restart strategy of a running job, from its next failure on.

    TYPE is none (also off, disable), fixed-delay (--attempts, --delay), failure-rate
    (--max-failures, --interval, --delay) or exponential-delay (--initial-backoff,
    --max-backoff, --multiplier, --reset-threshold, --jitter, --attempts-before-reset).
    Options left out take Flink's defaults, not the job's current values. The strategy is
    checked locally before anything is sent, then sent to the JobManager as Flink's
    restart-strategy.* keys; the change is recorded in the job's history (see 'flinkpy
    restart-strategy show'). Durations use Flink's syntax: 500ms, 10s, 5min, 1h.

    Exit status: 0 on success; 2 for an unknown TYPE, a bad option value or an option of
    another strategy; 8 for values that do not fit together (an initial backoff above the
    maximum); 3 when no cluster answers; 4 when there is no such job.

    Examples:

    \b
        flinkpy restart-strategy set JOB_ID fixed-delay --attempts 3 --delay 10s
        flinkpy restart-strategy set JOB_ID failure-rate --max-failures 3 \\
            --interval 5min --delay 10s
        flinkpy restart-strategy set JOB_ID exponential-delay \\
            --initial-backoff 1s --max-backoff 1min
        flinkpy restart-strategy set JOB_ID none
    """
    strategy = build_strategy(
        type_,
        {
            "--attempts": attempts, "--delay": delay, "--max-failures": max_failures, "--interval": interval,
            "--initial-backoff": initial_backoff, "--max-backoff": max_backoff, "--multiplier": multiplier,
            "--reset-threshold": reset_threshold, "--jitter": jitter, "--attempts-before-reset": attempts_before_reset,
        },
    )
    from commands.context import client

    # The full key set, defaults included, so the job gets exactly this strategy whatever
    # the cluster's own configuration says.
    doc = client(jobmanager).set_restart_strategy(job_id, strategy.to_config())
    if session.json:
        emit_json(doc)
        return
    described = (doc or {}).get("restart-strategy") if isinstance(doc, dict) else None
    out().print(f"Restart strategy of job {job_id} set to {format_description(described or strategy.describe())}", markup=False)


# --------------------------------------------------------------------------- offline


@app.command("explain")
def explain(
    type_: TypeArg,
    attempts: Attempts = None,
    delay: Delay = None,
    max_failures: MaxFailures = None,
    interval: Interval = None,
    initial_backoff: InitialBackoff = None,
    max_backoff: MaxBackoff = None,
    multiplier: Multiplier = None,
    reset_threshold: ResetThreshold = None,
    jitter: Jitter = None,
    attempts_before_reset: AttemptsBeforeReset = None,
    failures: Annotated[int, typer.Option("--failures", min=1, metavar="N", help="How many failures to replay (the schedule stops earlier if the job gives up).")] = 10,
    every: Annotated[str, typer.Option("--every", metavar="DURATION", help="Time the job runs after each restart before it fails again.")] = "0ms",
    json_: JsonFlag = False,
) -> None:
    """Show the schedule a restart strategy would follow for a series of failures (offline).

    Replays N failures (--failures, default 10). Timing assumption: the first failure happens
    at 0, and each next failure happens --every (default 0: right away) after the previous
    restart, so failure k+1 comes delay(k) + every after failure k. The timing matters for
    failure-rate (failures inside the sliding interval are counted) and exponential-delay (a
    gap of at least --reset-threshold resets the delay and the attempts); fixed-delay only
    counts failures.

    One row per failure: its number, when it happens, restart or give up, the delay before the
    restart, the jitter range the real delay is drawn from (exponential-delay; the schedule
    itself uses the delay before jitter, so it is deterministic), when the restart happens and
    how many failures count towards giving up. The schedule ends at the give-up point.

    With --json, prints one document: {"strategy", "config", "failures", "every_ms",
    "assumption", "schedule": [{"attempt", "failure_ms", "restart", "delay_ms",
    "jitter_min_ms", "jitter_max_ms", "restart_at_ms", "counted_failures", "gives_up"}],
    "gives_up_at"}.

    Exit status: 0 on success; 2 for an unknown TYPE, a bad option value or an option of
    another strategy; 8 for values that do not fit together.

    Examples:

    \b
        flinkpy restart-strategy explain fixed-delay --attempts 3 --delay 10s
        flinkpy restart-strategy explain failure-rate --max-failures 3 \\
            --interval 5min --every 1min
        flinkpy restart-strategy explain exponential-delay --failures 20
        flinkpy restart-strategy explain exponential-delay --json \\
            | jq .gives_up_at
    """
    strategy = build_strategy(
        type_,
        {
            "--attempts": attempts, "--delay": delay, "--max-failures": max_failures, "--interval": interval,
            "--initial-backoff": initial_backoff, "--max-backoff": max_backoff, "--multiplier": multiplier,
            "--reset-threshold": reset_threshold, "--jitter": jitter, "--attempts-before-reset": attempts_before_reset,
        },
    )
    try:
        every_ms = parse_duration_ms(every)
    except ValueError:
        raise UsageError(f"invalid value {every!r} for --every", remedy="use a duration such as 0ms, 30s, 5min") from None
    rows = explain_schedule(strategy, failures, every_ms=every_ms)
    gives_up_at = next((r["attempt"] for r in rows if r["gives_up"]), None)
    assumption = f"first failure at 0; each next failure {format_duration_ms(every_ms)} after the previous restart"
    if session.json:
        emit_json(
            {
                "strategy": strategy.describe(),
                "config": strategy.to_config(),
                "failures": failures,
                "every_ms": every_ms,
                "assumption": assumption,
                "schedule": rows,
                "gives_up_at": gives_up_at,
            }
        )
        return
    console = out()
    console.print(f"Strategy: {format_description(strategy.describe())}", markup=False)
    console.print(f"Assuming: {assumption}", markup=False)
    table = Table()
    for column in ("Failure", "At", "Outcome", "Delay", "Jitter range", "Restart at", "Counted"):
        table.add_column(column, justify="left" if column in ("Outcome", "Jitter range") else "right")
    for r in rows:
        jittered = r["restart"] and r["jitter_min_ms"] != r["jitter_max_ms"]
        table.add_row(
            str(r["attempt"]),
            fmt_duration(r["failure_ms"]),
            "restart" if r["restart"] else "give up",
            fmt_duration(r["delay_ms"]) if r["restart"] else "-",
            f"{fmt_duration(r['jitter_min_ms'])} .. {fmt_duration(r['jitter_max_ms'])}" if jittered else "-",
            fmt_duration(r["restart_at_ms"]) if r["restart"] else "-",
            str(r["counted_failures"]),
        )
    console.print(table)
    if gives_up_at is None:
        console.print(f"Still restarting after {failures} failure(s).", markup=False)
    else:
        console.print(f"Gives up at failure {gives_up_at}: the job fails.", markup=False)
