"""``flinkpy.client.Client`` against a real cluster: the typed calls the CLI stands on.

One cluster (2 TaskManagers x 2 slots) serves the whole module; each test submits its own
endless even/odd job (checkpoints every 100 ms) with ``Client.run``, drives it through the
client library in this process, and cancels it before it ends, so no task outlives its test. Waiting
is ``wait_for`` with deadlines, or the client's own ``Deadline``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from conftest import module_cluster, wait_for
from flinkpy.checkpoint.retention import dispose
from flinkpy.client.chaos import ChaosEvent, run_chaos
from flinkpy.client.client import Client
from flinkpy.client.operations import Deadline
from flinkpy.errors import ConflictError, NotFoundError, OperationTimeoutError, UsageError
from flinkpy.faults.chaos import PlannedFault, kinds_for
from flinkpy.common.restart_backoff import strategy_from_config
from test_recovery import ENDLESS_EVEN_ODD, ENDLESS_N

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {
    "execution.checkpointing.interval": "100ms",
    "restart-strategy.type": "fixed-delay",
    "restart-strategy.fixed-delay.attempts": "1000",
    "restart-strategy.fixed-delay.delay": "0s",
    "execution.checkpointing.tolerable-failed-checkpoints": "1000",
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with module_cluster(tmp_path_factory, "client-home") as path:
        yield path


@pytest.fixture
def client(home: Path) -> Client:
    return Client(home=home)


def running(client: Client, jid: str) -> bool:
    job = client.job(jid)
    subtasks = [s for v in job["vertices"] for s in v["subtasks"]]
    return job["state"] == "RUNNING" and all(s["status"] == "RUNNING" and s["pid"] for s in subtasks)


@pytest.fixture
def job(client: Client, tmp_path: Path) -> Iterator[str]:
    """An endless job submitted through the client, RUNNING with a completed checkpoint;
    cancelled (and ended) afterwards."""
    program = tmp_path / "endless.py"
    program.write_text(ENDLESS_EVEN_ODD % ENDLESS_N)
    (submitted,) = client.run(str(program), detached=True, overrides=OVERRIDES)
    jid = submitted.job_id
    wait_for(lambda: running(client, jid), timeout=30, message=f"job {jid} RUNNING")
    wait_for(lambda: client.checkpoints(jid)["counts"]["completed"] >= 1, timeout=30, message="a completed checkpoint")
    yield jid
    if client.job(jid)["state"] not in ("FINISHED", "FAILED", "CANCELED"):
        client.cancel(jid)
    wait_for(lambda: client.job(jid)["state"] in ("FINISHED", "FAILED", "CANCELED"), timeout=30, message=f"job {jid} to end")


def test_jobs_checkpoints_and_restart_strategies(client: Client, job: str) -> None:
    assert client.runner_of(job) == "local"
    assert client.endpoint(job) is client.cluster
    listed = {j["jid"]: j for j in client.list_jobs()}
    assert listed[job]["runner"] == "local" and listed[job]["state"] == "RUNNING"
    assert client.overview()["taskmanagers"] == 2 and len(client.taskmanagers()) == 2
    assert "root-exception" in client.job_exceptions(job)

    def trigger() -> int | None:
        try:
            return client.trigger_checkpoint(job)
        except ConflictError:  # a periodic checkpoint is in progress (at most one at a time)
            return None

    cid = wait_for(trigger, timeout=10, message="a checkpoint trigger accepted")
    detail = client.wait_for_checkpoint(job, cid, Deadline(30), "30s")
    assert detail["status"] == "COMPLETED" and detail["id"] == cid
    assert detail["external_path"].endswith(f"/chk-{cid}/_metadata")
    assert client.checkpoints(job, history=5)["counts"]["completed"] >= 2

    strategy = strategy_from_config({"restart-strategy.type": "failure-rate"}, checkpointing_enabled=True)
    answer = client.set_restart_strategy(job, strategy.to_config())
    assert answer["restart-strategy"]["type"] == "failure-rate"
    shown = client.restart_strategy(job)
    assert shown["restart-strategy"]["type"] == "failure-rate" and len(shown["history"]) == 1


def test_savepoints_retention_stop_and_dispose(client: Client, job: str, tmp_path: Path) -> None:
    target = tmp_path / "savepoints"
    locations = []
    for _ in range(3):
        request = client.trigger_savepoint(job, str(target), deadline=Deadline(60))
        locations.append(client.wait_for_savepoint(job, request, Deadline(60)))
        status = client.savepoint_status(job, request)
        assert client.savepoint_location(status, job, request) == locations[-1]
    assert client.restored_from(job) is None
    # keep the newest one: the two older ones go, exactly those
    assert sorted(client.prune_savepoints(job, locations[-1], keep=1)) == sorted(locations[:2])
    assert [p.name for p in target.iterdir()] == [Path(locations[-1]).name]

    request = client.stop_with_savepoint(job, str(target), deadline=Deadline(60))
    final = client.wait_for_savepoint(job, request, Deadline(60), what="stop-with-savepoint")
    assert client.wait_until_finished(job, Deadline(60), final) == "FINISHED"
    with pytest.raises(ConflictError, match="not RUNNING"):
        client.trigger_savepoint(job, str(target), deadline=Deadline(5))

    done = dispose(final)
    assert done.kind == "savepoint" and done.job_id == job and done.files_deleted >= 1
    assert not Path(final).exists()
    with pytest.raises(NotFoundError):
        dispose(final)


def test_faults_are_journaled_and_chaos_runs_its_schedule(client: Client, job: str) -> None:
    entry = client.inject_job_fault(job, "fail-checkpoint", count=1)
    assert entry["kind"] == "fail-checkpoint" and entry["state-before"] == "RUNNING"
    with pytest.raises(NotFoundError):
        client.inject_cluster_fault("kill-taskmanager", taskmanager="tm-none")
    with pytest.raises(NotFoundError, match="no Spark job"):
        client.require_spark_job(job, "kill-executor")
    with pytest.raises(UsageError, match="kill-executor applies to Spark jobs"):
        kinds_for(job, client.spark_record(job) is not None, ["kill-executor"])

    # two faults a second apart: a declined checkpoint (tolerated), then an exception in user
    # code (a restart); both journaled
    schedule = [PlannedFault(0.0, "fail-checkpoint", 0.6, 1, 0.1), PlannedFault(1.0, "raise", 0.3, 10, 0.1)]
    events: list[ChaosEvent] = []
    summary = run_chaos(client, job, schedule, seed=1, duration_s=1.5, on_event=events.append)
    assert [(e.what, e.kind) for e in events] == [("injected", "fail-checkpoint"), ("injected", "raise")], events
    assert [f["kind"] for f in summary.injected] == ["fail-checkpoint", "raise"] and not summary.skipped
    assert summary.to_dict()["jid"] == job and summary.to_dict()["planned"] == 2 and not summary.interrupted
    wait_for(lambda: client.job(job)["restarts"] >= 1 and running(client, job), timeout=30, message="a restart after the raise")
    journal = client.fault_history(job)["faults"]
    assert [f["kind"] for f in journal] == ["fail-checkpoint", "fail-checkpoint", "raise"]


def test_errors_and_deadlines(client: Client, job: str, home: Path) -> None:
    with pytest.raises(NotFoundError):
        client.job("0" * 32)
    assert client.runner_of("0" * 32) == "local"
    request = client.trigger_savepoint(job, None, deadline=Deadline(30))
    # a deadline already passed: the first answer decides; in progress means a timeout
    try:
        location = client.wait_for_savepoint(job, request, Deadline(0))
    except OperationTimeoutError as timeout:
        assert f"savepoint status {job} {request}" in (timeout.remedy or "")
        location = client.wait_for_savepoint(job, request, Deadline(60))
    assert Path(location, "_metadata").is_file()
    # an address names one JobManager and nothing else; the cluster home's token still applies
    by_address = Client(client.cluster.address, home=home)
    assert by_address.job(job)["jid"] == job and by_address.spark_record(job) is None
    with pytest.raises(ConflictError, match="no high availability"):
        client.kill_jobmanager()
