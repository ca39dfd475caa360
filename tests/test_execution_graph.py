"""The ExecutionGraph as a pure state machine: scripted events in, actions out, time injected.

No process, socket or clock: every scenario is a list of events with explicit ``now_ms``.
Also checks the channel distribution (``producers_of``/``consumers_of``) the graph relies on.
"""

from __future__ import annotations

import itertools

import pytest

from flinkpy.graph.job_graph import consumers_of, producers_of
from flinkpy.graph.stream_graph import FORWARD, REBALANCE, RESCALE
from flinkpy.jobmanager.execution_graph import Cancel, Deploy, ExecutionGraph, JobTerminated, SendConnect

pytestmark = pytest.mark.timeout(10)

JOB = "0" * 32


def meta(source_p: int = 2, sink_p: int = 2, partitioner: str = REBALANCE) -> dict:
    """Two vertices, source -> sink, as the JobManager receives them."""
    return {
        "name": "job",
        "vertices": [
            {"id": 1, "name": "Source: numbers", "parallelism": source_p, "max_parallelism": 128},
            {"id": 2, "name": "Sink: out", "parallelism": sink_p, "max_parallelism": 128},
        ],
        "edges": [{"id": 1, "source": 1, "target": 2, "partitioner": partitioner}],
    }


def scheduled(source_p: int = 2, sink_p: int = 2) -> tuple[ExecutionGraph, list]:
    g = ExecutionGraph(JOB, meta(source_p, sink_p), now_ms=1000)
    slots = {i: f"tm-{i % 2 + 1}" for i in range(g.required_slots)}
    return g, g.schedule(slots, now_ms=1010)


def running(source_p: int = 2, sink_p: int = 2) -> ExecutionGraph:
    g, _ = scheduled(source_p, sink_p)
    for n, ex in enumerate(list(g.executions.values())):
        g.on_listening(ex.exec_id, "127.0.0.1", 40000 + n, now_ms=1020)
    for ex in g.executions.values():
        g.on_task_state(ex.exec_id, "RUNNING", None, now_ms=1030)
    return g


def exec_id(g: ExecutionGraph, vertex: int, subtask: int) -> str:
    return g.executions[(vertex, subtask)].exec_id


def test_schedule_deploys_every_subtask_on_its_slot() -> None:
    g, actions = scheduled(source_p=3, sink_p=2)
    assert g.state == "RUNNING" and g.timestamps == {"CREATED": 1000, "RUNNING": 1010}
    assert g.required_slots == 3
    deployed = {(a.execution.vertex_id, a.execution.subtask) for a in actions if isinstance(a, Deploy)}
    assert deployed == set(g.executions) and len(actions) == 5
    for (vid, sub), ex in g.executions.items():
        assert ex.state == "DEPLOYING" and ex.tm_id == f"tm-{sub % 2 + 1}"
    # scheduling twice does nothing
    assert g.schedule({0: "tm-1", 1: "tm-1", 2: "tm-1"}, now_ms=1100) == []


def test_connect_only_once_every_task_listens() -> None:
    g, _ = scheduled()
    ids = [ex.exec_id for ex in g.executions.values()]
    for n, eid in enumerate(ids[:-1]):
        assert g.on_listening(eid, "127.0.0.1", 41000 + n, now_ms=1020) == []
    # a sink has no listener (port None): it is listening all the same, but is nobody's peer
    actions = g.on_listening(ids[-1], "127.0.0.1", None, now_ms=1021)
    assert all(isinstance(a, SendConnect) for a in actions)
    assert {a.execution.exec_id for a in actions} == set(ids)
    peers = actions[0].peers
    assert peers == {f"{ex.vertex_id}:{ex.subtask}": ex.address for ex in g.executions.values() if ex.address[1]}
    assert f"{g.executions[(2, 1)].vertex_id}:1" not in peers
    # a duplicate 'listening' is ignored: no second round of connects
    assert g.on_listening(ids[0], "127.0.0.1", 41000, now_ms=1022) == []


def test_all_finished_terminates_finished() -> None:
    g = running()
    *first, last = list(g.executions.values())
    for ex in first:
        assert g.on_task_state(ex.exec_id, "FINISHED", {"records_in": 5, "records_out": 5}, now_ms=2000) == []
    assert g.state == "RUNNING"
    assert g.on_task_state(last.exec_id, "FINISHED", None, now_ms=2001) == [JobTerminated("FINISHED")]
    assert g.state == "FINISHED" and g.timestamps["FINISHED"] == 2001
    assert first[0].records_in == 5 and g.vertex_status(1) == "FINISHED"


def test_one_failure_fails_the_job_after_canceling_the_others() -> None:
    g = running()
    failing = exec_id(g, 2, 1)
    actions = g.on_task_state(failing, "FAILED", {"exception": "ValueError", "message": "boom", "stacktrace": "tb"}, now_ms=3000)
    assert g.state == "FAILING"
    canceled = {a.execution.exec_id for a in actions if isinstance(a, Cancel)}
    assert canceled == {ex.exec_id for ex in g.executions.values()} - {failing}
    assert not any(isinstance(a, JobTerminated) for a in actions)
    root = g.root_exception
    assert root["exceptionName"] == "ValueError" and root["message"] == "boom"
    assert root["taskName"] == "Sink: out (2/2)" and root["timestamp"] == 3000 and root["taskManagerId"] == "tm-2"
    # a second failure while FAILING is recorded in the history but is not the root cause
    second = exec_id(g, 1, 0)
    assert g.on_task_state(second, "FAILED", {"exception": "OSError", "message": "later"}, now_ms=3001) == []
    assert g.root_exception is root and len(g.exceptions) == 2
    others = [ex for ex in g.executions.values() if ex.state == "CANCELING"]
    for ex in others[:-1]:
        assert g.on_task_state(ex.exec_id, "CANCELED", None, now_ms=3002) == []
    assert g.on_task_state(others[-1].exec_id, "CANCELED", None, now_ms=3003) == [JobTerminated("FAILED")]
    assert g.state == "FAILED" and g.is_terminal()
    # cancel after the end: nothing
    assert g.cancel(now_ms=3004) == []


def test_cancel_moves_through_cancelling_to_canceled() -> None:
    g = running()
    actions = g.cancel(now_ms=4000)
    assert g.state == "CANCELLING" and g.timestamps["CANCELLING"] == 4000
    assert {a.execution.exec_id for a in actions} == {ex.exec_id for ex in g.executions.values()}
    assert g.cancel(now_ms=4001) == []  # a second request while cancelling is a no-op
    ids = [ex.exec_id for ex in g.executions.values()]
    for eid in ids[:-1]:
        assert g.on_task_state(eid, "CANCELED", None, now_ms=4002) == []
    assert g.on_task_state(ids[-1], "CANCELED", None, now_ms=4003) == [JobTerminated("CANCELED")]
    assert g.state == "CANCELED" and g.root_exception is None


def test_cancel_while_deploying_and_a_finished_task_counts_as_terminal() -> None:
    g, _ = scheduled()
    g.on_task_state(exec_id(g, 1, 0), "FINISHED", None, now_ms=1500)
    actions = g.cancel(now_ms=1600)
    assert len([a for a in actions if isinstance(a, Cancel)]) == 3
    for ex in list(g.executions.values()):
        if ex.state == "CANCELING":
            last = g.on_task_state(ex.exec_id, "CANCELED", None, now_ms=1700)
    assert last == [JobTerminated("CANCELED")]


def test_taskmanager_lost_fails_its_executions() -> None:
    g = running()
    actions = g.on_taskmanager_lost("tm-1", "TaskManager tm-1 disconnected", now_ms=5000)
    lost = {ex.exec_id for ex in g.executions.values() if ex.tm_id == "tm-1"}
    assert lost and all(g.by_exec_id(e).state == "FAILED" for e in lost)
    assert g.state == "FAILING"
    assert g.root_exception["exceptionName"] == "flinkpy.TaskManagerLost"
    assert "tm-1" in g.root_exception["message"] and g.root_exception["taskManagerId"] == "tm-1"
    survivors = {ex.exec_id for ex in g.executions.values() if ex.tm_id == "tm-2"}
    canceled = {a.execution.exec_id for a in actions if isinstance(a, Cancel)}
    # the survivors are canceled (a Cancel addressed to the lost TaskManager is dropped by the dispatcher)
    assert survivors <= canceled
    assert all(g.by_exec_id(e).state == "CANCELING" for e in survivors)
    for eid in survivors:
        out = g.on_task_state(eid, "CANCELED", None, now_ms=5001)
    assert out == [JobTerminated("FAILED")] and g.state == "FAILED"
    # the TaskManager's late reports (and a second 'lost') change nothing
    assert g.on_taskmanager_lost("tm-1", "again", now_ms=5002) == []
    assert g.on_task_state(next(iter(lost)), "FINISHED", None, now_ms=5003) == []
    assert g.by_exec_id(next(iter(lost))).state == "FAILED"


def test_late_duplicate_and_unknown_reports_are_ignored() -> None:
    g = running()
    eid = exec_id(g, 1, 0)
    g.on_task_state(eid, "FINISHED", None, now_ms=6000)
    assert g.on_task_state(eid, "FINISHED", None, now_ms=6001) == []  # duplicate
    assert g.on_task_state(eid, "FAILED", {"message": "late"}, now_ms=6002) == []  # late, after terminal
    assert g.executions[(1, 0)].state == "FINISHED" and g.exceptions == [] and g.state == "RUNNING"
    # a report for another attempt of the same subtask, or an unknown vertex
    assert g.on_task_state("1_1_7", "FAILED", {"message": "old attempt"}, now_ms=6003) == []
    assert g.on_task_state("9_0_0", "FAILED", {"message": "stranger"}, now_ms=6004) == []
    assert g.on_listening("1_1_7", "127.0.0.1", 1, now_ms=6005) == []
    assert g.state == "RUNNING" and g.exceptions == []
    # and nothing at all once the job is terminal
    for ex in g.executions.values():
        g.on_task_state(ex.exec_id, "FINISHED", None, now_ms=6006)
    assert g.state == "FINISHED"
    assert g.on_task_state(eid, "RUNNING", None, now_ms=6007) == [] and g.state == "FINISHED"


def test_fail_before_running_records_the_slot_shortage() -> None:
    g = ExecutionGraph(JOB, meta(8, 8), now_ms=1)
    assert g.fail_before_running("the job needs 8 slot(s) but the cluster has 4 free", now_ms=2) == [JobTerminated("FAILED")]
    assert g.state == "FAILED" and "slot" in g.root_exception["message"]
    assert all(ex.state == "CANCELED" for ex in g.executions.values())


def test_inputs_and_outputs_follow_the_distribution() -> None:
    g = ExecutionGraph(JOB, meta(4, 2, RESCALE), now_ms=0)
    src = g.executions[(1, 3)]
    assert g.outputs_of(src)[0]["consumers"] == consumers_of(RESCALE, 4, 2, 3) == [1]
    assert g.inputs_of(g.executions[(2, 1)])[0]["producers"] == [2, 3]
    assert g.inputs_of(src) == [] and g.outputs_of(g.executions[(2, 0)]) == []


PAIRS = [(u, d) for u in range(1, 13) for d in range(1, 13)]


@pytest.mark.parametrize("partitioner", [FORWARD, RESCALE, REBALANCE])
def test_producers_and_consumers_are_inverse(partitioner: str) -> None:
    for up, down in PAIRS:
        if partitioner == FORWARD and up != down:
            continue
        edges_from_producers = {(p, c) for p in range(up) for c in consumers_of(partitioner, up, down, p)}
        edges_from_consumers = {(p, c) for c in range(down) for p in producers_of(partitioner, up, down, c)}
        assert edges_from_producers == edges_from_consumers, (partitioner, up, down)
        # every subtask has at least one partner, and channel lists have no duplicates
        for p in range(up):
            cs = consumers_of(partitioner, up, down, p)
            assert cs and len(cs) == len(set(cs)) and all(0 <= c < down for c in cs), (partitioner, up, down, p)
        for c in range(down):
            ps = producers_of(partitioner, up, down, c)
            assert ps and len(ps) == len(set(ps)) and all(0 <= p < up for p in ps), (partitioner, up, down, c)


def test_rescale_is_local_and_balanced() -> None:
    for up, down in itertools.product(range(1, 13), repeat=2):
        fan_out = [len(consumers_of(RESCALE, up, down, p)) for p in range(up)]
        fan_in = [len(producers_of(RESCALE, up, down, c)) for c in range(down)]
        if up >= down:
            assert max(fan_out) == 1 and max(fan_in) - min(fan_in) <= 1, (up, down)
        else:
            assert max(fan_in) == 1 and max(fan_out) - min(fan_out) <= 1, (up, down)


def _with_strategy(strategy, failover: str = "region") -> ExecutionGraph:
    g = ExecutionGraph(JOB, meta(), now_ms=1000, strategy=strategy, failover=failover)
    g.schedule({0: "tm-1", 1: "tm-2"}, now_ms=1001)
    for ex in list(g.executions.values()):
        g.on_listening(ex.exec_id, "127.0.0.1", 5000, now_ms=1002)
        g.on_task_state(ex.exec_id, "RUNNING", None, now_ms=1003)
    return g


def test_a_restartable_failure_restarts_the_region_after_the_backoff() -> None:
    from flinkpy.jobmanager.execution_graph import Failover, Restart
    from flinkpy.common.restart_backoff import FixedDelay

    g = _with_strategy(FixedDelay(attempts=1, delay_ms=100))
    failed = exec_id(g, 1, 0)
    actions = g.on_task_state(failed, "FAILED", {"exception": "ValueError", "message": "boom"}, now_ms=2000)
    assert isinstance(actions[0], Failover) and len(actions[0].keys) == 4  # one region: source -> sink
    assert {a.execution.exec_id for a in actions if isinstance(a, Cancel)} == {ex.exec_id for ex in g.executions.values()} - {failed}
    assert g.state == "RESTARTING" and g.exceptions[-1]["restarted"] is True
    for ex in g.executions.values():
        g.on_task_state(ex.exec_id, "CANCELED", None, now_ms=2010)
    assert g.state == "RESTARTING", "a pending restart keeps the job from terminating"
    assert g.due_restarts(2050) == []  # the backoff has not passed
    (restart,) = g.due_restarts(2100)
    assert isinstance(restart, Restart)
    deploys = g.restart(restart.keys, {}, now_ms=2101)
    assert len(deploys) == 4 and all(d.execution.attempt == 1 for d in deploys)
    assert g.state == "RUNNING" and g.restarts == 1
    # the second failure exceeds the strategy: the job fails
    ex = next(iter(g.executions.values()))
    g.on_task_state(ex.exec_id, "FAILED", {"exception": "ValueError", "message": "again"}, now_ms=3000)
    assert g.state == "FAILING"


def test_the_killed_producer_is_the_root_cause_even_when_its_consumer_reports_first() -> None:
    """A SIGKILLed source: its consumer's connection reset often reaches the JobManager before
    the TaskManager's report of the dead process; the root cause is the kill either way."""
    from flinkpy.common.restart_backoff import FixedDelay

    g = _with_strategy(FixedDelay(attempts=3, delay_ms=100))
    g.on_task_state(exec_id(g, 2, 0), "FAILED", {"exception": "ConnectionResetError", "message": "[Errno 104] Connection reset by peer"}, now_ms=2000)
    assert g.root_exception["exceptionName"] == "ConnectionResetError"
    kill = {"exception": "flinkpy.TaskProcessExited", "message": "the task process (pid 4242) was killed by signal SIGKILL on TaskManager tm-1"}
    g.on_task_state(exec_id(g, 1, 0), "FAILED", kill, now_ms=2005)
    assert g.root_exception["exceptionName"] == "flinkpy.TaskProcessExited" and "SIGKILL" in g.root_exception["message"]
    assert [e for e in g.events if e["type"] == "restarting"][-1]["cause"].startswith("flinkpy.TaskProcessExited")
    # both stay in the history; a later consequence does not displace the cause
    g.on_task_state(exec_id(g, 2, 1), "FAILED", {"exception": "BrokenPipeError", "message": "broken pipe"}, now_ms=2006)
    assert "SIGKILL" in g.root_exception["message"] and len(g.exceptions) == 3


def test_a_global_failure_restarts_every_task_when_the_strategy_allows() -> None:
    from flinkpy.jobmanager.execution_graph import Failover
    from flinkpy.common.restart_backoff import FixedDelay, NoRestart

    g = _with_strategy(FixedDelay(attempts=3, delay_ms=0))
    actions = g.fail_global("flinkpy.CheckpointException", "too many failed checkpoints", now_ms=2000)
    assert isinstance(actions[0], Failover) and g.state == "RESTARTING"
    g2 = _with_strategy(NoRestart())
    g2.fail_global("flinkpy.CheckpointException", "too many failed checkpoints", now_ms=2000)
    assert g2.state == "FAILING" and g2.root_exception["message"] == "too many failed checkpoints"


def test_a_restart_waiting_for_slots_past_slot_request_timeout_is_a_failed_attempt() -> None:
    """Flink's slot.request.timeout bounds a restart that waits for slots: the wait then counts
    as a failure for the restart strategy, which backs off and waits again, or fails the job."""
    from flinkpy.jobmanager.execution_graph import Restart
    from flinkpy.common.restart_backoff import FixedDelay

    g = _with_strategy(FixedDelay(attempts=2, delay_ms=100))
    g.on_task_state(exec_id(g, 1, 0), "FAILED", {"exception": "flinkpy.TaskManagerLost", "message": "gone"}, now_ms=2000)
    for ex in g.executions.values():
        g.on_task_state(ex.exec_id, "CANCELED", None, now_ms=2010)

    def wait_at(now: int) -> list:
        (restart,) = g.due_restarts(now)
        assert isinstance(restart, Restart)
        return g.waiting_for_slots(restart.keys, "no free slot", now, timeout_ms=1000)

    assert wait_at(2100) == [] and wait_at(2300) == []  # waiting, within the timeout
    assert g.state == "RESTARTING" and sum(e["type"] == "waiting-for-resources" for e in g.events) == 1
    assert wait_at(3100) == []  # timed out: failure 2 of 2 allowed, the restart backs off again
    assert g.state == "RESTARTING" and g.root_exception["exceptionName"] == "flinkpy.NoResourceAvailableException"
    assert "slot.request.timeout (1000 ms)" in g.root_exception["message"] and g.root_exception["restarted"]
    assert g.due_restarts(3150) == []  # its backoff (100 ms) has not passed
    assert wait_at(3200) == []
    actions = wait_at(4300)  # timed out again: the strategy gives up
    assert g.state == "FAILED" and actions == [JobTerminated("FAILED")]
    assert g.events[-1] == {"timestamp": 4300, "type": "failed", "reason": "the restart strategy gave up"}
