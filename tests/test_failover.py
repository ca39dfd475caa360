"""Restart and failover strategies on real jobs, in real processes.

Restart strategies decide *whether and when* a failed job restarts (they are unit-tested with a
manual clock in test_restart_strategies.py); here they meet real failures: a user function that
raises on chosen attempts, a strategy changed on a running job with ``flinkpy restart-strategy
set``. Failover strategies decide *what* restarts: with ``region`` only the failed task's
pipelined region (a connected component of the job graph), with ``full`` every task. Which
processes were restarted is read from the task pids in ``flinkpy job show``.

Failures are triggered without sleeping: by attempt number, or by a file the test creates when
it wants the running job to fail (a test-controlled trigger, like a named fault point).
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_json, wait_for
from flinkpy.common import RestartStrategies, WatermarkStrategy
from flinkpy.datastream import MapFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.errors import JobExecutionError
from test_recovery import all_running, expected_sums, first, job_show, last_per_key, only_job, parity, start, subtasks  # noqa: F401

N = 100_000


class FailOnAttempts(MapFunction):
    """Raises at record K on each attempt listed in ``attempts``."""

    K = 4_321

    def __init__(self, attempts: tuple[int, ...]):
        self.attempts = attempts

    def open(self, runtime_context):
        self.attempt = runtime_context.get_attempt_number()

    def map(self, n):
        if n == self.K and self.attempt in self.attempts:
            raise ValueError(f"record {n} is cursed on attempt {self.attempt}")
        return parity(n)


def even_odd(restart: Any, fails_on: tuple[int, ...]) -> Any:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(restart)
    numbers = env.from_source(NumberSequenceSource(1, N), WatermarkStrategy.no_watermarks(), "numbers")
    return numbers.map(FailOnAttempts(fails_on)).name("cursed map").key_by(first).sum(1).name("sums")


# -- restart strategies ------------------------------------------------------------------------


@pytest.mark.timeout(40)
def test_fixed_delay_gives_up_on_the_failure_after_its_attempts(start) -> None:
    start()
    sums = even_odd(RestartStrategies.fixed_delay_restart(2, 0), fails_on=(0, 1, 2))
    with pytest.raises(JobExecutionError) as info:
        list(sums.execute_and_collect("gives up"))  # raises once the records are read
    # the job's cause is the user's exception of the third failure, not a consequence of it
    assert "ValueError: record 4321 is cursed on attempt 2" in info.value.message, info.value.message
    assert "cursed map" in info.value.message
    job = only_job()
    assert job["state"] == "FAILED" and job["restarts"] == 2, job
    doc = cli_json("job", "exceptions", job["jid"])
    assert "record 4321 is cursed on attempt 2" in doc["root-exception"]
    cursed = [e for e in doc["exceptionHistory"]["entries"] if "cursed" in e["message"]]
    # newest first: the third failure was not restarted, the two before it were
    assert [(e["attempt"], e["restarted"]) for e in cursed] == [(2, False), (1, True), (0, True)], cursed
    assert job_show(job["jid"])["events"][-1]["reason"] == "the restart strategy gave up"


@pytest.mark.timeout(40)
def test_failure_rate_counts_only_failures_inside_its_interval(start) -> None:
    start()
    # two failures, at least 300 ms apart (the restart delay): never two within 100 ms
    spaced = even_odd(RestartStrategies.failure_rate_restart(1, 100, 300), fails_on=(0, 1))
    assert last_per_key(spaced.execute_and_collect("spaced failures")) == expected_sums(N)
    (job,) = cli_json("list", "-a")["jobs"]
    assert job["state"] == "FINISHED" and job["restarts"] == 2, cli_json("job", "exceptions", job["jid"])["exceptionHistory"]

    # the same two failures inside a one-minute interval: the second one is one too many
    crowded = even_odd(RestartStrategies.failure_rate_restart(1, 60_000, 0), fails_on=(0, 1))
    with pytest.raises(JobExecutionError) as info:
        list(crowded.execute_and_collect("crowded failures"))
    assert "record 4321 is cursed on attempt 1" in info.value.message, info.value.message
    (job,) = [j for j in cli_json("list", "-a")["jobs"] if j["name"] == "crowded failures"]
    assert job["state"] == "FAILED" and job["restarts"] == 1, job


TRIGGERED_JOB = textwrap.dedent(
    """
    import os
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import MapFunction, StreamExecutionEnvironment
    from flinkpy.datastream.connectors import NumberSequenceSource

    TRIGGER = %r


    class FailWhenTriggered(MapFunction):
        # the first attempt raises once the test has created the trigger file
        def open(self, runtime_context):
            self.armed = runtime_context.get_attempt_number() == 0

        def map(self, n):
            if self.armed and n %% 512 == 0 and os.path.exists(TRIGGER):
                raise RuntimeError("the test pulled the trigger")
            return n


    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    numbers = env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
    numbers.map(FailWhenTriggered()).name("triggered map").add_sink(lambda n: None).name("discard")
    env.execute("triggered")
    """
)


@pytest.mark.timeout(60)
def test_restart_strategy_set_on_a_running_job_handles_its_next_failure(start, cli, tmp_path: Path) -> None:
    start()
    trigger = tmp_path / "trigger"
    job_file = tmp_path / "triggered.py"
    job_file.write_text(TRIGGERED_JOB % str(trigger))
    res = cli("run", "-d", "-D", "restart-strategy.type=none", "--json", str(job_file))
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    wait_for(lambda: all_running(jid), timeout=20, message="the job RUNNING")
    assert cli_json("restart-strategy", "show", jid)["restart-strategy"] == {"type": "none"}

    res = cli("restart-strategy", "set", jid, "fixed-delay", "--attempts", "5", "--delay", "0s")
    assert res.returncode == 0, res.stderr
    shown = cli_json("restart-strategy", "show", jid)
    assert shown["restart-strategy"] == {"type": "fixed-delay", "attempts": 5, "delay": 0}, shown
    (change,) = shown["history"]
    assert change["from"] == {"type": "none"} and change["to"]["type"] == "fixed-delay", change
    text = cli("restart-strategy", "show", jid)
    assert text.returncode == 0 and "fixed-delay" in text.stdout and "attempts: 5" in text.stdout, text.stdout

    # under the old strategy (none) this failure would fail the job; the new one restarts it
    trigger.touch()
    job = wait_for(lambda: (j := all_running(jid)) and j["restarts"] >= 1 and j, timeout=20, message="the job restarted and RUNNING")
    assert job["restarts"] == 1 and all(s["attempt"] == 1 for s in subtasks(job)), job["events"]
    entries = cli_json("job", "exceptions", jid)["exceptionHistory"]["entries"]
    assert any("the test pulled the trigger" in e["message"] and e["restarted"] for e in entries), entries
    assert cli_json("restart-strategy", "show", jid)["restarts"] == 1

    # `flinkpy list` shows the restart count, in its table and in its JSON
    (listed,) = cli_json("list")["jobs"]
    assert listed["jid"] == jid and listed["restarts"] == 1
    table = cli("list", env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert table.returncode == 0 and "Restarts" in table.stdout, table.stdout
    (row,) = [line for line in table.stdout.splitlines() if jid in line]
    assert [cell.strip() for cell in row.strip("│ ").split("│")][-1] == "1", row
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: job_show(jid)["state"] == "CANCELED", timeout=15, message="the job CANCELED")


# -- failover strategies -----------------------------------------------------------------------

TWO_PIPELINES = textwrap.dedent(
    """
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.disable_operator_chaining()
    for name in ("a", "b"):
        numbers = env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), f"numbers {name}")
        numbers.map(lambda n: n + 1).name(f"map {name}").add_sink(lambda n: None).name(f"sink {name}")
    env.execute("two pipelines")
    """
)


def pids_by_pipeline(job: dict[str, Any]) -> dict[str, dict[tuple[str, int], int]]:
    out: dict[str, dict[tuple[str, int], int]] = {"a": {}, "b": {}}
    for v in job["vertices"]:
        pipeline = v["name"].rsplit(" ", 1)[-1]
        for s in v["subtasks"]:
            out[pipeline][(v["name"], s["subtask"])] = s["pid"]
    return out


def run_two_pipelines(cli, tmp_path: Path, *flags: str) -> tuple[str, dict[str, Any]]:
    job_file = tmp_path / "two_pipelines.py"
    job_file.write_text(TWO_PIPELINES)
    res = cli(
        "run", "-d",
        "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.delay=0s",
        *flags, "--json", str(job_file),
    )
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    job = wait_for(lambda: all_running(jid), timeout=20, message="every subtask RUNNING")
    assert len(subtasks(job)) == 12 and len({s["pid"] for s in subtasks(job)}) == 12, subtasks(job)
    return jid, job


def kill_map_a(job: dict[str, Any]) -> int:
    (victim,) = [s["pid"] for v in job["vertices"] if v["name"] == "map a" for s in v["subtasks"] if s["subtask"] == 1]
    os.kill(victim, signal.SIGKILL)
    return victim


def restarted(jid: str):
    def check() -> dict[str, Any] | None:
        job = all_running(jid)
        return job if job is not None and job["restarts"] >= 1 else None

    return check


@pytest.mark.timeout(60)
def test_region_failover_restarts_only_the_failed_pipeline(start, cli, tmp_path: Path) -> None:
    start(taskmanagers=1, slots=2)
    jid, before = run_two_pipelines(cli, tmp_path)
    assert before["failover-strategy"] == "region"
    old = pids_by_pipeline(before)
    victim = kill_map_a(before)

    after = wait_for(restarted(jid), timeout=20, message="pipeline a RUNNING again")
    new = pids_by_pipeline(after)
    assert new["b"] == old["b"], "region failover restarted pipeline b, which did not fail"
    assert not set(new["a"].values()) & set(old["a"].values()), f"every task of pipeline a restarts (killed {victim})"
    for v in after["vertices"]:
        attempts = {s["attempt"] for s in v["subtasks"]}
        assert attempts == ({1} if v["name"].endswith(" a") else {0}), (v["name"], attempts)
    assert after["restarts"] == 1
    (event,) = [e for e in after["events"] if e["type"] == "restarting"]
    assert event["failover"] == "region" and event["tasks"] == 6, event
    # b never stopped: its processes are the same, alive, and still reading
    for pid in old["b"].values():
        os.kill(pid, 0)
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: job_show(jid)["state"] == "CANCELED", timeout=15, message="the job CANCELED")


@pytest.mark.timeout(60)
def test_full_failover_restarts_every_task(start, cli, tmp_path: Path) -> None:
    start(taskmanagers=1, slots=2)
    jid, before = run_two_pipelines(cli, tmp_path, "-D", "jobmanager.execution.failover-strategy=full")
    assert before["failover-strategy"] == "full"
    old = {s["pid"] for s in subtasks(before)}
    kill_map_a(before)

    after = wait_for(restarted(jid), timeout=20, message="every task RUNNING again")
    new = {s["pid"] for s in subtasks(after)}
    assert not new & old, "full failover restarts every task"
    assert {s["attempt"] for s in subtasks(after)} == {1}
    (event,) = [e for e in after["events"] if e["type"] == "restarting"]
    assert event["failover"] == "full" and event["tasks"] == 12, event
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: job_show(jid)["state"] == "CANCELED", timeout=15, message="the job CANCELED")
