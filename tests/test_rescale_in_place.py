"""`flinkpy job rescale`: a running job restarted in place at a new parallelism from its latest
checkpoint, without a savepoint or a resubmission.

The ExecutionGraph's part is tested as the pure state machine it is (events in, actions out, no
clock); the target parallelism's refusals with no cluster at all. The CLI test runs on one
cluster for the module: the paced even/odd sum of ``test_upgrade`` (slow while its ``slow`` file
exists) goes 2 -> 3 -> 1 and must still end with the sums of 1..N computed in closed form.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import module_cluster, run_cli, wait_for
from flinkpy.errors import ConflictError, ExitCode, UsageError
from flinkpy.jobmanager.execution_graph import Cancel, ExecutionGraph, Failover, Rescaled, Restart
from flinkpy.jobmanager.rescaling import target_parallelism
from test_upgrade import PROGRAM

pytestmark = pytest.mark.timeout(120)

COUNT = 120_000
EXPECTED = {"even": sum(range(2, COUNT + 1, 2)), "odd": sum(range(1, COUNT + 1, 2))}


# --------------------------------------------------------------------------- no cluster


def graph(p: int = 2) -> ExecutionGraph:
    meta = {"name": "job", "vertices": [
        {"id": 1, "name": "Source: numbers", "parallelism": p, "max_parallelism": 128, "is_source": True},
        {"id": 2, "name": "running sums", "parallelism": p, "max_parallelism": 128, "is_source": False, "uids": ["sums"]},
    ], "edges": [{"id": 1, "source": 1, "target": 2, "partitioner": "HASH"}]}
    g = ExecutionGraph("0" * 32, meta, now_ms=1000)
    g.schedule({i: f"tm-{i % 2 + 1}" for i in range(g.required_slots)}, now_ms=1010)
    for ex in g.executions.values():
        g.on_task_state(ex.exec_id, "RUNNING", None, now_ms=1030)
    return g


def test_the_graph_stops_every_task_then_redeploys_at_the_new_parallelism_without_counting_a_restart() -> None:
    g = graph(2)
    old_ids = {ex.exec_id for ex in g.executions.values()}
    actions = g.rescale({1: 3, 2: 3}, checkpoint_id=7, now_ms=2000)
    assert isinstance(actions[0], Failover) and sum(isinstance(a, Cancel) for a in actions) == 4
    assert g.state == "RESTARTING" and g.due_restarts(2001) == []  # old tasks still stopping
    for ex in list(g.executions.values()):
        g.on_task_state(ex.exec_id, "CANCELED", None, now_ms=2010)
    rescaled, restart = g.due_restarts(2020)
    assert isinstance(rescaled, Rescaled) and isinstance(restart, Restart) and rescaled.freed == ()
    assert len(restart.keys) == 6 and set(restart.keys) == set(g.executions)
    g.restart(restart.keys, {2: "tm-1"}, now_ms=2030)
    assert g.state == "RUNNING" and g.restarts == 0 and g.required_slots == 3
    assert not old_ids & {ex.exec_id for ex in g.executions.values()}  # no old report can pass for a new task
    assert g.rescales == [{"timestamp": 2030, "checkpoint_id": 7, "duration_ms": 30,
                           "from": {"Source: numbers": 2, "running sums": 2}, "to": {"Source: numbers": 3, "running sums": 3}}]
    # down to one: the slots of subtasks 1 and 2 go back to their TaskManagers
    g.rescale({1: 1, 2: 1}, checkpoint_id=9, now_ms=3000)
    for ex in list(g.executions.values()):
        g.on_task_state(ex.exec_id, "CANCELED", None, now_ms=3010)
    rescaled, restart = g.due_restarts(3020)
    assert sorted(rescaled.freed) == ["tm-1", "tm-2"] and len(restart.keys) == 2


def test_target_parallelism_refuses_what_cannot_be_rescaled() -> None:
    g = graph(2)
    with pytest.raises(UsageError, match="max parallelism is 128"):
        target_parallelism(g.vertices, g.edges, parallelism=129, per_vertex={})
    with pytest.raises(UsageError, match="no vertex 'nope'"):
        target_parallelism(g.vertices, g.edges, parallelism=None, per_vertex={"nope": 2})
    with pytest.raises(ConflictError, match="already runs"):
        target_parallelism(g.vertices, g.edges, parallelism=2, per_vertex={})
    forward = [{"id": 1, "source": 1, "target": 2, "partitioner": "FORWARD"}]
    with pytest.raises(UsageError, match="forwards to"):
        target_parallelism(g.vertices, forward, parallelism=None, per_vertex={"sums": 3})
    capped = {**g.vertices, 1: {**g.vertices[1], "max_allowed_parallelism": 1}}
    assert target_parallelism(capped, g.edges, parallelism=4, per_vertex={}) == {1: 1, 2: 4}


# --------------------------------------------------------------------------- a real cluster


@pytest.fixture(scope="module")
def rescale_cluster(tmp_path_factory: pytest.TempPathFactory):
    with module_cluster(tmp_path_factory, "rescale", taskmanagers=2, slots=2) as home:
        yield home


def job_doc(jid: str) -> dict:
    res = run_cli("job", "show", "--json", jid)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_rescale_2_3_1_in_place_keeps_the_job_and_its_state_exactly_once(rescale_cluster: Path, tmp_path: Path) -> None:
    program = tmp_path / "sums.py"
    program.write_text(textwrap.dedent(PROGRAM))
    out = tmp_path / "out"
    out.mkdir()
    (out / "slow").touch()
    res = run_cli("run", "--json", "-d", "-p", "2", str(program), str(COUNT), str(out), "v1", "sums", "ok", timeout=60)
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    wait_for(lambda: job_doc(jid)["state"] == "RUNNING", timeout=30, interval=0.1, message=f"job {jid} running")

    up = run_cli("job", "rescale", "--json", "-p", "3", jid, timeout=60)  # triggers a checkpoint when there is none yet
    assert up.returncode == 0, up.stderr
    assert set(json.loads(up.stdout)["parallelism"].values()) == {3}
    down = run_cli("job", "rescale", "--vertex", "sums=1", "--vertex", "numbers=1", jid, timeout=60)
    assert down.returncode == 0, down.stderr
    assert "rescaled from checkpoint" in down.stdout
    too_many = run_cli("job", "rescale", "-p", "129", jid)
    assert too_many.returncode == ExitCode.USAGE and "max parallelism" in too_many.stderr

    doc = job_doc(jid)
    assert [v["parallelism"] for v in doc["vertices"]] == [1, 1] and doc["restarts"] == 0
    assert [set(r["to"].values()) for r in doc["rescales"]] == [{3}, {1}]
    assert doc["rescales"][1]["checkpoint_id"] > doc["rescales"][0]["checkpoint_id"]
    (out / "slow").unlink()
    wait_for(lambda: job_doc(jid)["state"] == "FINISHED", timeout=60, interval=0.1, message=f"job {jid} to finish")
    sums: dict[str, int] = {}
    for path in out.glob("v1-*.json"):
        for key, value in json.loads(path.read_text()).items():
            sums[key] = max(sums.get(key, 0), value)
    assert sums == EXPECTED
    # no savepoint was written on the way
    assert not list((rescale_cluster / "checkpoints").rglob("savepoint-*"))


@pytest.mark.timeout(30)
def test_the_jobmanager_refuses_to_rescale_from_an_unaligned_checkpoint_with_data_in_flight() -> None:
    from test_dispatcher import add_taskmanager, job_document

    from flinkpy.jobmanager.dispatcher import Dispatcher

    d = Dispatcher(checkpoint_dir="memory://rescale-test")
    try:
        tms = [add_taskmanager(d, f"tm-{i}", 2)[0] for i in (1, 2)]
        document = job_document(2)
        vertices = document["meta"]["vertices"]
        # in-flight buffers of an unaligned checkpoint belong to channels of this parallelism only
        operators = [{"operator_id": oid, "uid": None, "name": v["name"], "parallelism": v["parallelism"], "max_parallelism": v["max_parallelism"],
                      "subtasks": [{"subtask": i, **({"channel_state": {"path": f"ch-{i}"}} if head else {})} for i in range(v["parallelism"])]}
                     for v in vertices for head, oid in zip([True, *[False] * len(v["operator_ids"])], v["operator_ids"])]
        metadata = {"kind": "checkpoint", "checkpoint_id": 4, "job_id": "f" * 32, "operators": operators}
        jid = d.submit({**document, "restore": ["memory://rescale-test/old/chk-4", metadata]})
        with d.lock:
            executions = list(d.jobs[jid].graph.executions.values())
        for ex in executions:
            d.on_task_state(jid, ex.exec_id, "RUNNING", None, ex.tm_id)
        with pytest.raises(ConflictError, match="unaligned and holds in-flight data") as refused:
            d.rescale(jid, parallelism=3)
        assert "savepoint" in (refused.value.remedy or "")
        with d.lock:
            assert d.jobs[jid].graph.state == "RUNNING" and d.jobs[jid].graph.rescales == []
    finally:
        for conn in tms:
            conn.close()
