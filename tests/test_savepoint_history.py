"""Periodic savepoints, the savepoint history of a job and its retention, and `savepoint prune`
against the snapshots running jobs depend on.

The history's decisions (when a savepoint is due, which periodic ones retention disposes of) are
tested as the pure state machine they are. The cluster test runs the paced even/odd sum of
``test_upgrade`` on a cluster of its own: job 1 takes two manual savepoints and is cancelled;
job 2 starts from the older one, rescales in place (so it restores from a checkpoint of its own
since), and `savepoint prune --keep 1` must still keep the savepoint job 2 was started from. Then
the JobManager takes periodic savepoints of job 2 and keeps the newest two on disk, and a stop
with savepoint ends its history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import module_cluster, run_cli, wait_for
from flinkpy.client import Client
from flinkpy.client.operations import Deadline
from flinkpy.errors import ConfigurationError
from flinkpy.jobmanager.job_options import JobOptions
from flinkpy.jobmanager.savepoint_history import SavepointEntry, SavepointHistory, SavepointSchedule, SavepointTrigger
from test_upgrade import PROGRAM

pytestmark = pytest.mark.timeout(120)

COUNT = 10_000_000  # never ends within the test: it is stopped

PERIODIC, MANUAL = SavepointTrigger.PERIODIC, SavepointTrigger.MANUAL


# --------------------------------------------------------------------------- no cluster


def entry(n: int, trigger: SavepointTrigger = PERIODIC) -> SavepointEntry:
    return SavepointEntry(n, f"file:///sp/savepoint-{n}", n * 1000, trigger)


def test_retention_disposes_of_periodic_savepoints_by_count_and_age_but_never_a_protected_or_the_newest() -> None:
    h = SavepointHistory(SavepointSchedule(interval_ms=None, max_count=2, max_age_ms=3500), now_ms=0)
    for n, trigger in [(1, PERIODIC), (2, MANUAL), (3, PERIODIC), (4, PERIODIC), (5, PERIODIC)]:
        h.completed(entry(n, trigger))
    # by count: 1 and 3 are beyond the newest two periodic ones; 3 is what a restart would restore from
    assert h.expired(5000, protected=["file:///sp/savepoint-3/_metadata"]) == [entry(1)]
    # by age (3.5 s): 3 and 4 are older, the manual one too, but it is the operator's
    assert h.expired(8000, protected=[]) == [entry(4), entry(3)]
    assert [e.checkpoint_id for e in h.entries] == [2, 5] and h.disposed == 3
    # the newest savepoint of the job stays, however old
    assert h.expired(100_000, protected=[]) == [] and h.to_json()["history"][0]["checkpoint_id"] == 5


def test_the_period_counts_from_the_schedule_then_from_each_trigger_and_can_be_turned_off() -> None:
    h = SavepointHistory(SavepointSchedule(interval_ms=None, max_count=10, max_age_ms=1000), now_ms=0)
    assert not h.due(10**9) and h.next_ms() is None
    h.reschedule(500, interval_ms=1000, max_count=3)
    assert not h.due(1499) and h.due(1500) and h.schedule == SavepointSchedule(1000, 3, 1000)
    h.triggered(1600)
    assert h.next_ms() == 2600 and not h.due(2599)
    h.reschedule(2000, interval_ms=None)
    assert not h.due(10**9) and h.schedule.max_count == 3


def test_the_configuration_keys_give_the_schedule_and_bad_values_name_their_key() -> None:
    opts = JobOptions.parse({"execution.checkpointing.savepoint.interval": "1 h",
                             "execution.checkpointing.savepoint.history.max-count": "3"}, "ckpts")
    assert opts.savepoint_schedule == SavepointSchedule(3_600_000, 3, 86_400_000)
    assert JobOptions.parse({}, "ckpts").savepoint_schedule.interval_ms is None
    with pytest.raises(ConfigurationError, match="savepoint.history.max-count"):
        JobOptions.parse({"execution.checkpointing.savepoint.history.max-count": "0"}, "ckpts")


def test_the_schedule_history_and_start_point_travel_to_the_next_leader_with_the_job_history() -> None:
    """What a leader saves of a job (Leadership._history) and a new leader applies."""
    from flinkpy.jobmanager.checkpointing import JobCheckpointing
    from flinkpy.jobmanager.dispatcher import JobRecord
    from flinkpy.jobmanager.execution_graph import ExecutionGraph
    from flinkpy.jobmanager.leadership import Leadership

    meta = {"name": "job", "vertices": [{"id": 1, "name": "Source: numbers", "parallelism": 1, "max_parallelism": 128, "is_source": True}],
            "edges": []}

    def record() -> JobRecord:
        options = JobOptions.parse({}, "ckpts")
        graph = ExecutionGraph("0" * 32, meta, now_ms=1000)
        return JobRecord(graph, {}, [], options, JobCheckpointing(graph, options.checkpointing, "ckpts", "sps", options.savepoint_schedule))

    old = record()
    old.checkpointing.history.reschedule(2000, interval_ms=60_000, max_count=3)
    old.checkpointing.history.completed(entry(7))
    old.checkpointing.history.started_from = "file:///sp/savepoint-1"
    _, saved = Leadership._history(None, old)  # type: ignore[arg-type]
    new = record()
    Leadership.apply_history(new.graph, new.checkpointing, saved)
    h = new.checkpointing.history
    assert (h.schedule, h.entries, h.started_from, h.next_ms()) == (SavepointSchedule(60_000, 3, 86_400_000), [entry(7)],
                                                                  "file:///sp/savepoint-1", 62_000)


# --------------------------------------------------------------------------- against a cluster


@pytest.fixture(scope="module")
def history_cluster(tmp_path_factory: pytest.TempPathFactory):
    with module_cluster(tmp_path_factory, "sphistory", taskmanagers=2, slots=2) as home:
        yield home


def cli_json(*args: str) -> dict:
    res = run_cli(*args, "--json")
    assert res.returncode == 0, f"flinkpy {' '.join(args)}: {res.stderr}"
    return json.loads(res.stdout)


# What the test only needs done goes through the client library in this process (each CLI call
# costs a Python start); what it tests goes through the CLI.


def client() -> Client:
    return Client.from_environment()


def job(jid: str) -> dict:
    return client().job(jid)


def restored(jid: str) -> str:
    return ((client().checkpoints(jid).get("latest") or {}).get("restored") or {}).get("external_path") or ""


def completed_checkpoints(jid: str) -> int:
    return int(client().checkpoints(jid)["counts"]["completed"])


def savepoint(jid: str, target: Path | None = None, *, stop: bool = False) -> str:
    c, deadline = client(), Deadline(60)
    request = (c.stop_with_savepoint(jid, None, deadline=deadline) if stop
               else c.trigger_savepoint(jid, str(target), deadline=deadline))
    return c.wait_for_savepoint(jid, request, deadline)


def savepoints_on_disk(directory: Path, jid: str) -> set[str]:
    found = set()
    for meta in directory.glob("*/_metadata"):
        doc = json.loads(meta.read_text())
        if doc["kind"] == "savepoint" and doc["job_id"] == jid:
            found.add(meta.parent.name)
    return found


def start(tmp_path: Path, *flags: str, checkpointed: bool = True) -> str:
    program = tmp_path / "sums.py"
    program.write_text(PROGRAM)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "slow").touch()
    res = run_cli("run", "--json", "-d", *flags, str(program), str(COUNT), str(out), "v1", "sums", "ok")
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    if not checkpointed:
        return jid
    wait_for(lambda: completed_checkpoints(jid) >= 1, timeout=30, interval=0.05,
             message=f"a checkpoint of job {jid}")
    return jid


def test_prune_keeps_the_start_savepoint_and_the_jobmanager_keeps_a_bounded_periodic_history(
        history_cluster: Path, tmp_path: Path) -> None:
    sp_dir = tmp_path / "savepoints"
    first = start(tmp_path, "-D", "execution.checkpointing.savepoint.interval=1h", checkpointed=False)
    assert job(first)["savepoints"]["schedule"]["interval"] == 3_600_000  # the configuration key acts
    older = savepoint(first, sp_dir)
    savepoint(first, sp_dir)
    client().cancel(first)
    assert [e["trigger"] for e in job(first)["savepoints"]["history"]] == ["manual", "manual"]

    second = start(tmp_path, "-s", older, "-D", f"execution.checkpointing.savepoint-dir={sp_dir}",
                   "-D", "execution.checkpointing.savepoint.history.max-count=2")
    assert job(second)["savepoints"]["started-from"].rstrip("/").endswith(Path(older).name)
    client().cluster.rescale(second, parallelism=2, per_vertex={})
    wait_for(lambda: "chk-" in restored(second), timeout=30, interval=0.05, message=f"job {second} restored from a checkpoint of its own")
    # job 2 no longer restores from the savepoint it started from, but it was started from it
    pruned = cli_json("savepoint", "prune", str(sp_dir), "--keep", "1")
    assert not [s for s in pruned["savepoints"] if s["dispose"]], pruned
    assert Path(older).name in savepoints_on_disk(sp_dir, first)

    sched = cli_json("savepoint", "schedule", second, "--every", "300ms")
    assert sched["schedule"]["interval"] == 300 and sched["schedule"]["max-count"] == 2
    wait_for(lambda: job(second)["savepoints"]["disposed"] >= 2, timeout=40, interval=0.05,
             message=f"periodic savepoints of job {second} taken and disposed of")
    assert client().cluster.set_savepoint_schedule(second, None)["schedule"]["interval"] is None  # what --off sends

    def settled() -> bool:  # a periodic savepoint in flight when it was turned off lands, then retention
        history = job(second)["savepoints"]["history"]
        return savepoints_on_disk(sp_dir, second) == {Path(e["location"]).name for e in history}

    wait_for(settled, timeout=20, interval=0.05, message="the savepoints on disk are the history's")
    history = job(second)["savepoints"]["history"]
    assert [e["trigger"] for e in history] == ["periodic", "periodic"]
    assert Path(older).name in savepoints_on_disk(sp_dir, first)  # never the one it started from
    shown = run_cli("job", "show", second)
    assert "Savepoint history" in shown.stdout and "periodic" in shown.stdout and "Periodic savepoints: off" in shown.stdout

    savepoint(second, stop=True)
    assert job(second)["savepoints"]["history"][0]["trigger"] == "stop"

