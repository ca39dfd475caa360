"""The Dispatcher and its components, driven without processes: TaskManagers are the far ends of
socket pairs, so what the JobManager sends them (registrations, deployments) is read back as
the typed messages that would cross a real connection."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from flinkpy.errors import ConfigurationError
from flinkpy.jobmanager.dispatcher import Dispatcher
from flinkpy.network.connection import Connection
from flinkpy.protocol.deployment import DeployTask
from flinkpy.protocol.messages import Registered, RegisterTaskManager


def job_document(parallelism: int, **settings: str) -> dict[str, Any]:
    """A real submission document (what the client posts), from a small DataStream program."""
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.from_collection([1, 2, 3]).map(lambda x: x + 1).add_sink(lambda v: None)
    job = env._job_graph("dispatcher-test")
    job.config.update(settings)
    return job.serialize()


@pytest.fixture
def dispatcher() -> Iterator[Dispatcher]:
    d = Dispatcher(checkpoint_dir="memory://dispatcher-test")
    yield d
    for rec in list(d.taskmanagers.values()):
        rec.conn.close()


def add_taskmanager(d: Dispatcher, tm_id: str, slots: int) -> tuple[Connection, list[Any]]:
    """Register a TaskManager: its end of the connection, and what it received before the
    registration answer (jobs waiting for slots are deployed on it first)."""
    left, right = socket.socketpair()
    tm_side = Connection(right)
    d.register_taskmanager(Connection(left), RegisterTaskManager(tm_id=tm_id, pid=1, host="127.0.0.1", slots=slots))
    early: list[Any] = []
    while not isinstance(message := tm_side.recv(), Registered):
        early.append(message)
    return tm_side, early


def deployed(tm_side: Connection, count: int) -> list[DeployTask]:
    messages = [tm_side.recv() for _ in range(count)]
    assert all(isinstance(m, DeployTask) for m in messages), messages
    return messages  # type: ignore[return-value]


@pytest.mark.timeout(30)
def test_a_job_deploys_with_the_task_options_parsed_at_submission(dispatcher: Dispatcher) -> None:
    tm, _ = add_taskmanager(dispatcher, "tm-1", 2)
    jid = dispatcher.submit(job_document(2, **{"taskmanager.memory.segment-size": "64 kb", "$job.region": "eu"}))
    deploys = deployed(tm, 2)
    assert {m.descriptor.job_id for m in deploys} == {jid}
    assert {m.descriptor.config.segment_size for m in deploys} == {64 * 1024}
    assert all(m.descriptor.job_parameters == {"region": "eu"} for m in deploys)
    assert dispatcher.slots.available == 0
    tm.close()


@pytest.mark.timeout(30)
def test_a_job_waits_for_held_slots_and_deploys_when_a_taskmanager_joins(dispatcher: Dispatcher) -> None:
    tm1, _ = add_taskmanager(dispatcher, "tm-1", 1)
    first = dispatcher.submit(job_document(1))
    deployed(tm1, 1)
    second = dispatcher.submit(job_document(1, **{"slot.request.timeout": "1 min"}))
    with dispatcher.lock:
        assert second in dispatcher.scheduler.waiting
        assert dispatcher.job(second).graph.events[-1]["type"] == "waiting-for-resources"
    tm2, early = add_taskmanager(dispatcher, "tm-2", 1)
    (deploy,) = early
    assert isinstance(deploy, DeployTask)
    assert deploy.descriptor.job_id == second and second not in dispatcher.scheduler.waiting
    assert dispatcher.job(first).graph.state != "FAILED"
    tm1.close()
    tm2.close()


@pytest.mark.timeout(30)
def test_a_job_that_needs_more_slots_than_the_cluster_has_fails_at_once(dispatcher: Dispatcher) -> None:
    tm, _ = add_taskmanager(dispatcher, "tm-1", 1)
    jid = dispatcher.submit(job_document(2))
    graph = dispatcher.job(jid).graph
    assert graph.state == "FAILED"
    assert "could not schedule" in (graph.root_exception or {}).get("message", str(graph.exceptions))
    assert jid not in dispatcher.scheduler.waiting
    tm.close()


def test_a_bad_setting_refuses_the_submission_before_anything_runs(dispatcher: Dispatcher) -> None:
    with pytest.raises(ConfigurationError, match="execution.buffer-timeout.interval"):
        dispatcher.submit(job_document(1, **{"execution.buffer-timeout.interval": "soon"}))
    assert dispatcher.jobs == {}
