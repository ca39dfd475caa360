"""The recovery proof: jobs crash at named points and still end with exactly the right state.

Each job runs on a real background cluster started *in the test*, after the crash points are
put in the environment (``FLINKPY_FAULT_POINTS``, inherited by TaskManagers and their forked
tasks: see :mod:`flinkpy.task.fault_points`). A matching task SIGKILLs itself, the JobManager
restarts its region from the latest completed checkpoint, and the restarted attempt (attempt 1)
runs through.

Results come back through ``execute_and_collect()``: its sink appends across attempts, so a key's
*last* output is its final state. Expected values are computed here, independently: closed
formulas for the even/odd sums, a ``Counter`` for word counts, plain arithmetic for distinct
counts. Job details (restarts, exception history, restored checkpoint) are read through the
CLI, as an operator reads them.

For the TaskManager failures, an endless job's retained checkpoints are checked instead: every
checkpoint, also those taken after the recovery, must be a consistent cut (the keyed sums
equal, exactly, the sums of the integers the sources emitted before their positions).
"""

from __future__ import annotations

import json
import os
import random
import signal
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

import psutil
import pytest

from conftest import all_gone_after, cli_json, flinkpy_processes, wait_for
from flinkpy.common import RestartStrategies, Types, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, MapFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.datastream.state import MapStateDescriptor, ValueStateDescriptor
from flinkpy.state import canonical

FAULT_ENV = "FLINKPY_FAULT_POINTS"

#: the even/odd job reads 1..N: long enough (a few hundred ms at least) for checkpoint 2 at 100 ms
N = 600_000


# -- kit -------------------------------------------------------------------------------------


@pytest.fixture
def start(flinkpy_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterable[Callable[..., Any]]:
    """``start(faults=[...], taskmanagers=1, slots=2, config={...})`` starts a background cluster
    in this test's home with ``faults`` in its processes' environment, and points jobs and the
    CLI at it (``FLINKPY_JOBMANAGER``). At teardown it is stopped and no process of it may stay."""
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster
    from flinkpy.config import load_config

    home = ClusterHome(flinkpy_home)
    started: list[Any] = []

    def _start(*, faults: list[dict] | None = None, taskmanagers: int = 1, slots: int = 2, config: dict[str, str] | None = None) -> Any:
        if faults:
            print(f"{FAULT_ENV}={json.dumps(faults)}")
            monkeypatch.setenv(FAULT_ENV, json.dumps(faults))
        info = start_cluster(home, taskmanagers=taskmanagers, slots=slots, rest_port=0, config=load_config(env={}, overrides=config or {}))
        started.append(info)
        monkeypatch.setenv("FLINKPY_JOBMANAGER", info.rest_address)
        return info

    yield _start
    for info in started:
        with all_gone_after([info.jobmanager_pid] + [tm.pid for tm in info.taskmanagers]):
            stop_cluster(home, timeout_s=10)


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED") or random.randrange(2**32))
    print(f"{name}: seed {seed} (rerun with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


def vertex_id(env: StreamExecutionEnvironment, name: str) -> int:
    """The JobGraph vertex whose chain contains the operator ``name`` (fault points name vertices)."""
    nodes = json.loads(env.get_execution_plan())["nodes"]
    (vid,) = [n["id"] for n in nodes if name in n["operators"]]
    return vid


def last_per_key(records: Iterable[tuple]) -> dict[Any, Any]:
    """The final state per key: the sink appended every attempt's output, the latest wins."""
    last: dict[Any, Any] = {}
    for key, value in records:
        last[key] = value
    return last


def only_job() -> dict[str, Any]:
    (job,) = cli_json("list", "-a")["jobs"]
    return job


def job_show(jid: str) -> dict[str, Any]:
    return cli_json("job", "show", jid)


def exception_entries(jid: str) -> list[dict[str, Any]]:
    return cli_json("job", "exceptions", jid)["exceptionHistory"]["entries"]


def checkpoints(jid: str) -> dict[str, Any]:
    return cli_json("checkpoint", "list", jid)


def assert_recovered(jid: str, *, cause: str) -> dict[str, Any]:
    """The job FINISHED after at least one restart, and its history has the failure, restarted."""
    job = job_show(jid)
    assert job["state"] == "FINISHED", job["state"]
    assert job["restarts"] >= 1, f"the fault never fired: {job['events']}"
    entries = exception_entries(jid)
    assert any(cause in e["message"] and e["restarted"] for e in entries), entries
    assert any(e["type"] == "restarted" for e in job["events"]), job["events"]
    return job


# -- jobs ------------------------------------------------------------------------------------


def parity(n: int) -> tuple[str, int]:
    return ("even" if n % 2 == 0 else "odd", n)


def first(pair: tuple) -> Any:
    return pair[0]


def expected_sums(n: int) -> dict[str, int]:
    """Closed forms: 2 + 4 + ... + 2m = m(m+1); 1 + 3 + ... + (2k-1) = k^2."""
    m, k = n // 2, (n + 1) // 2
    return {"even": m * (m + 1), "odd": k * k}


def even_odd_env(n: int, *, fn: Any = parity) -> tuple[StreamExecutionEnvironment, Any]:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    numbers = env.from_source(NumberSequenceSource(1, n), WatermarkStrategy.no_watermarks(), "numbers")
    sums = numbers.map(fn).name("pair").key_by(first).sum(1).name("sums")
    return env, sums


# -- 1. exactly-once state after crashes -------------------------------------------------------


@pytest.mark.timeout(40)
@pytest.mark.parametrize(
    "point, vertex, subtask, checkpoint, restored",
    [
        # before the first checkpoint: the region starts over from nothing
        ("running", "numbers", 1, None, None),
        # the keyed task holds a channel back, waiting for the other barrier of checkpoint 2
        ("alignment", "sums", 0, 2, 1),
        # a source writes its offsets of checkpoint 2
        ("upload", "numbers", 0, 2, 1),
        # checkpoint 2 is complete, and the keyed task dies as it hears so
        ("after-complete", "sums", 1, 2, 2),
    ],
)
def test_even_odd_sums_are_exact_after_a_crash(start, point: str, vertex: str, subtask: int, checkpoint: int | None, restored: int | None) -> None:
    env, sums = even_odd_env(N)
    rule: dict[str, Any] = {"point": point, "vertex": vertex_id(env, vertex), "subtask": subtask}
    if checkpoint is not None:
        rule["checkpoint"] = checkpoint
    start(faults=[rule])

    assert last_per_key(sums.execute_and_collect("even-odd")) == expected_sums(N)

    jid = only_job()["jid"]
    job = assert_recovered(jid, cause="SIGKILL")
    # the injected crash is the only failure (see test_word_count_is_exact_after_a_crash for the
    # engine bug that sometimes adds a second one near the end of input)
    assert job["restarts"] == 1, [e["message"] for e in exception_entries(jid)]
    stats = checkpoints(jid)
    got = stats["latest"]["restored"]
    if point == "after-complete":
        # the keyed task may acknowledge checkpoint 3 (its barrier comes with the data) before it
        # reads the notification of 2 (a control message) and dies: then 3 is the latest
        assert got is not None and got["id"] >= restored, f"restored from {got}, expected checkpoint {restored} or later"
    else:
        assert (got["id"] if got else None) == restored, f"restored from {got}, expected checkpoint {restored}"


WORDS = "to be or not that is the question whether tis nobler in mind suffer slings arrows of outrageous fortune".split()


def split_words(line: str) -> list[tuple[str, int]]:
    return [(w, 1) for w in line.split()]


@pytest.mark.timeout(40)
def test_word_count_is_exact_after_a_crash(start) -> None:
    rng = seeded("word count")
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) for _ in range(40_000)]
    expected = Counter(w for line in lines for w in line.split())

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    counts = env.from_collection(lines).flat_map(split_words).name("split").key_by(first).sum(1).name("count")
    # the counting subtask 2 dies while checkpoint 1 is written: restored from nothing, or...
    # after checkpoint 1 completed: restored from it. Either way the counts must be exact.
    start(faults=[{"point": "after-complete", "vertex": vertex_id(env, "count"), "subtask": 1, "checkpoint": 1}])

    assert last_per_key(counts.execute_and_collect("word count")) == dict(expected)
    jid = only_job()["jid"]
    job = assert_recovered(jid, cause="SIGKILL")
    # the injected crash is the only failure. (Engine bug seen here: a consumer aligning a barrier
    # holds its blocked channel's END_OF_PARTITION, then takes that channel's EOF for a broken
    # producer — "closed before the end of its partition" — and the job restarts a second time.)
    assert job["restarts"] == 1, [e["message"] for e in exception_entries(jid)]
    assert checkpoints(jid)["latest"]["restored"]["id"] == 1


# -- 2. at-least-once: nothing lost ----------------------------------------------------------


class DistinctCount(KeyedProcessFunction):
    """Per key, how many *different* numbers it saw: replays (at-least-once) do not inflate it,
    a lost record lowers it."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_map_state(MapStateDescriptor("seen", Types.LONG(), Types.BOOLEAN()))
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        key, n = value
        if not self.seen.contains(n):
            self.seen.put(n, True)
            self.count.update((self.count.value() or 0) + 1)
        yield (key, self.count.value())


def residue(n: int) -> tuple[int, int]:
    return (n % 8, n)


@pytest.mark.timeout(40)
def test_at_least_once_loses_no_record_after_a_crash(start) -> None:
    # long enough that a checkpoint completes well before the input ends, however fast the machine
    n = 600_000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.get_checkpoint_config().set_checkpointing_mode("AT_LEAST_ONCE")
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    numbers = env.from_source(NumberSequenceSource(1, n), WatermarkStrategy.no_watermarks(), "numbers")
    distinct = numbers.map(residue).name("residue").key_by(first).process(DistinctCount()).name("distinct")
    start(faults=[{"point": "after-complete", "vertex": vertex_id(env, "distinct"), "subtask": 0, "checkpoint": 1}])

    got = last_per_key(distinct.execute_and_collect("distinct"))
    assert got == {r: len(range(r or 8, n + 1, 8)) for r in range(8)}
    assert sum(got.values()) == n
    jid = only_job()["jid"]
    assert_recovered(jid, cause="SIGKILL")
    assert job_show(jid)["restarts"] >= 1


# -- 3. a user function that fails on its first attempt only ---------------------------------


class CursedOnce(MapFunction):
    """Raises at record K on attempt 0; the restarted attempt reads it fine."""

    K = 123_457

    def open(self, runtime_context):
        self.attempt = runtime_context.get_attempt_number()

    def map(self, n):
        if self.attempt == 0 and n == self.K:
            raise ValueError(f"record {n} is cursed on attempt 0")
        return parity(n)


@pytest.mark.timeout(40)
def test_user_function_failing_once_restarts_and_finishes_exactly(start) -> None:
    start()
    env, sums = even_odd_env(N, fn=CursedOnce())
    assert last_per_key(sums.execute_and_collect("cursed once")) == expected_sums(N)
    jid = only_job()["jid"]
    job = assert_recovered(jid, cause=f"record {CursedOnce.K} is cursed on attempt 0")
    assert job["restarts"] == 1, job["events"]
    (entry,) = [e for e in exception_entries(jid) if "cursed" in e["message"]]
    assert entry["attempt"] == 0 and "ValueError" in entry["exceptionName"] and "in map" in entry["stacktrace"], entry


# -- 4. TaskManager failures -----------------------------------------------------------------

ENDLESS_EVEN_ODD = textwrap.dedent(
    """
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    numbers = env.from_source(NumberSequenceSource(1, %d), WatermarkStrategy.no_watermarks(), "numbers")
    (numbers.map(lambda n: ("even" if n %% 2 == 0 else "odd", n)).name("pair")
        .key_by(lambda pair: pair[0])
        .sum(1).uid("sums").name("sums")
        .add_sink(lambda value: None).name("discard"))
    env.execute("endless even-odd")
    """
)
ENDLESS_N = 10**12

ENDLESS_FLAGS = (
    "-D", "execution.checkpointing.interval=100ms",
    "-D", "execution.checkpointing.num-retained=1000",
    "-D", "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION",
    "-D", "restart-strategy.type=fixed-delay",
    "-D", "restart-strategy.fixed-delay.attempts=3",
    "-D", "restart-strategy.fixed-delay.delay=0s",
)


def _sum_range(a: int, b: int, par: int) -> int:
    """Sum of the integers in [a, b) with n % 2 == par."""
    lo = a if a % 2 == par else a + 1
    if lo >= b:
        return 0
    hi = b - 1 if (b - 1) % 2 == par else b - 2
    return (lo + hi) * ((hi - lo) // 2 + 1) // 2


def assert_consistent_cut(directory: Path) -> None:
    """The keyed sums in the checkpoint equal the sums of the integers before the sources'
    recorded positions (1..N minus every range still unread)."""
    meta = json.loads((directory / "_metadata").read_text())
    want = {"even": _sum_range(1, ENDLESS_N + 1, 0), "odd": _sum_range(1, ENDLESS_N + 1, 1)}
    (source,) = [op for op in meta["operators"] if op["name"] == "numbers"]
    for sub in source["subtasks"]:
        for a, b in sub["source_offsets"]["ranges"]:
            want["even"] -= _sum_range(a, b, 0)
            want["odd"] -= _sum_range(a, b, 1)
    have = {"even": 0, "odd": 0}
    (sums,) = [op for op in meta["operators"] if op["uid"] == "sums"]
    for sub in sums["subtasks"]:
        if sub["keyed_state"] is not None:
            snapshot = canonical.loads((directory / sub["keyed_state"]["path"]).read_bytes())
            for groups in snapshot["states"]["_reduce"]["key_groups"].values():
                for key, value in groups.items():
                    have[key] += value[1]
    assert have == want, f"checkpoint {directory.name} is not a consistent cut"


def submit_endless(cli, tmp_path: Path) -> str:
    job = tmp_path / "endless_even_odd.py"
    job.write_text(ENDLESS_EVEN_ODD % ENDLESS_N)
    res = cli("run", "-d", "-p", "2", *ENDLESS_FLAGS, "--json", str(job))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def subtasks(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for v in job["vertices"] for s in v["subtasks"]]


def all_running(jid: str) -> dict[str, Any] | None:
    job = job_show(jid)
    ok = job["state"] == "RUNNING" and all(s["status"] == "RUNNING" and s["pid"] for s in subtasks(job))
    return job if ok else None


def completed(jid: str) -> int:
    return checkpoints(jid)["counts"]["completed"]


def taskmanager_pids() -> dict[str, int]:
    status = cli_json("cluster", "status")
    return {tm["id"]: tm["pid"] for tm in status["cluster"]["taskmanagers"]}


def tasks_of(tm_pid: int) -> list[psutil.Process]:
    """Task processes forked by that TaskManager's zygote (alive ones, zombies excluded)."""
    try:
        procs = psutil.Process(tm_pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.ppid() != tm_pid:
                out.append(p)
        except psutil.Error:
            pass
    return out


def recovered_on(jid: str, survivor: str, restarts: int = 1) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        job = all_running(jid)
        if job is None or job["restarts"] < restarts:
            return None
        return job if all(s["taskmanager-id"] == survivor for s in subtasks(job)) else None

    return check


def cancel_and_check_cuts(cli, jid: str, home: Path, after_restore: int) -> None:
    """Cancel; every retained checkpoint (``after_restore`` of them after the recovery) must be a
    consistent cut."""
    assert cli("cancel", jid).returncode == 0
    wait_for(lambda: job_show(jid)["state"] == "CANCELED", timeout=15, message=f"job {jid} CANCELED")
    # completed checkpoints only: a checkpoint aborted by the failover has no _metadata
    found = sorted((m.parent for m in (home / "checkpoints").glob(f"{jid}/chk-*/_metadata")), key=lambda p: int(p.name.split("-")[1]))
    assert len(found) >= after_restore + 1, found
    for directory in found:
        assert_consistent_cut(directory)


@pytest.mark.timeout(60)
def test_killed_taskmanager_job_recovers_on_the_survivor(cluster, cli, flinkpy_home: Path, tmp_path: Path) -> None:
    jid = submit_endless(cli, tmp_path)
    job = wait_for(lambda: all_running(jid), timeout=20, message="every subtask RUNNING")
    wait_for(lambda: completed(jid) >= 2, timeout=20, message="2 completed checkpoints")
    tms = taskmanager_pids()
    victim = next(s["taskmanager-id"] for s in subtasks(job) if s["subtask"] == 0)
    survivor = next(tm for tm in tms if tm != victim)
    assert {s["taskmanager-id"] for s in subtasks(job)} == {victim, survivor}, "p=2 spreads over both TaskManagers"
    orphans = tasks_of(tms[victim])
    assert orphans, f"no task process under {victim}"

    os.kill(tms[victim], signal.SIGKILL)
    killed_at = time.monotonic()
    job = wait_for(recovered_on(jid, survivor), timeout=20, message=f"every subtask RUNNING again on {survivor}")
    print(f"recovered on {survivor} {time.monotonic() - killed_at:.2f}s after the kill")
    # the lost TaskManager's tasks do not outlive it
    wait_for(lambda: not [p for p in orphans if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], timeout=10, message="the lost TaskManager's tasks to exit")
    assert all(s["attempt"] >= 1 for s in subtasks(job))
    entries = exception_entries(jid)
    assert any(victim in e["message"] and e["restarted"] for e in entries), entries
    assert job_show(jid)["state"] == "RUNNING"

    stats = checkpoints(jid)
    restored = stats["latest"]["restored"]
    assert restored is not None and restored["id"] >= 1, stats["latest"]
    wait_for(lambda: completed(jid) >= restored["id"] + 3, timeout=20, message="3 checkpoints after the recovery")
    cancel_and_check_cuts(cli, jid, flinkpy_home, after_restore=3)


@pytest.mark.timeout(60)
def test_stopped_taskmanager_is_declared_lost_and_the_job_moves(start, cli, flinkpy_home: Path, tmp_path: Path) -> None:
    info = start(taskmanagers=2, slots=2, config={"heartbeat.interval": "200ms", "heartbeat.timeout": "1s"})
    jid = submit_endless(cli, tmp_path)
    job = wait_for(lambda: all_running(jid), timeout=20, message="every subtask RUNNING")
    wait_for(lambda: completed(jid) >= 1, timeout=20, message="a completed checkpoint")
    victim = next(s["taskmanager-id"] for s in subtasks(job) if s["subtask"] == 1)
    survivor = next(tm.id for tm in info.taskmanagers if tm.id != victim)
    victim_pid = next(tm.pid for tm in info.taskmanagers if tm.id == victim)

    os.kill(victim_pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        job = wait_for(recovered_on(jid, survivor), timeout=20, message=f"the job RUNNING again on {survivor}")
        took = time.monotonic() - stopped_at
        print(f"recovered on {survivor} {took:.2f}s after SIGSTOP (heartbeat.timeout 1s)")
        entries = exception_entries(jid)
        lost = [e for e in entries if e["restarted"] and "heartbeat" in e["message"]]
        assert lost, entries
        assert took < 8, f"the lost TaskManager was detected and the job moved only after {took:.1f}s"
        restarts = job["restarts"]
        pids = {s["pid"] for s in subtasks(job)}
        first_after = completed(jid)
    finally:
        os.kill(victim_pid, signal.SIGCONT)

    # the woken TaskManager must not disturb the job: checkpoints keep completing, nothing restarts
    wait_for(lambda: completed(jid) >= first_after + 3, timeout=20, message="3 checkpoints after SIGCONT")
    job = all_running(jid)
    assert job is not None and job["restarts"] == restarts and {s["pid"] for s in subtasks(job)} == pids, job and job["events"]
    assert all(s["taskmanager-id"] == survivor for s in subtasks(job))
    cancel_and_check_cuts(cli, jid, flinkpy_home, after_restore=3)
