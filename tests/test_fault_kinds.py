"""The registry of fault kinds (flinkpy.faults.kinds) against its users, and the journal's records.

Pure: no cluster. The cluster's behaviour with each kind is tests/test_faults.py's.
"""

from __future__ import annotations

import json

from commands.fault import app
from flinkpy import faults as f
from flinkpy.faults.chaos import CHAOS_KINDS, DEFAULT_KINDS, SPARK_KINDS, PlannedFault, fault_request, kinds_for
from flinkpy.faults.journal import FaultOutcome, FaultRecord, journal_view, record
from flinkpy.faults.kinds import CHAOS, KINDS, FaultTarget, Runner
from flinkpy.jobmanager import fault_injector
from flinkpy.spark import faults as spark_faults

#: `flinkpy fault` commands that read rather than inject
NOT_KINDS = {"history", "chaos"}


def test_every_fault_command_is_a_registry_kind() -> None:
    commands = {c.name for c in app.registered_commands} - NOT_KINDS
    assert commands == set(KINDS)
    assert KINDS["kill-executor"].target is FaultTarget.SPARK_EXECUTOR and KINDS["kill-executor"].runners == {Runner.SPARK}
    assert KINDS["kill-task"].runners == set(Runner)
    assert KINDS["storage-outage"].endpoint == "cluster" and KINDS["kill-jobmanager"].endpoint == "client"


def test_each_handler_table_covers_exactly_its_kinds() -> None:
    assert set(fault_injector._JOB_HANDLERS) == set(f.JOB_FAULTS) == {
        k.name for k in KINDS.values() if k.endpoint == "job" and Runner.FLINKPY in k.runners}
    assert set(fault_injector._CLUSTER_HANDLERS) == set(f.CLUSTER_FAULTS) == {k.name for k in KINDS.values() if k.endpoint == "cluster"}
    assert set(spark_faults.HANDLERS) == {k.name for k in KINDS.values() if Runner.SPARK in k.runners}
    # what a job fault's journal keeps, in the order its JSON has had
    assert f.JOURNALED == ("signal", "seconds", "after", "count", "delay_ms", "drop")


def test_chaos_kinds_are_registry_kinds_and_network_presets_keep_their_names() -> None:
    assert CHAOS_KINDS == ("kill-task", "kill-taskmanager", "raise", "fail-checkpoint", "pause-task", "pause-taskmanager",
                           "network-delay", "network-drop", "kill-executor")
    assert all(c.kind in KINDS for c in CHAOS)
    assert set(DEFAULT_KINDS) <= set(CHAOS_KINDS) and all(Runner.FLINKPY in KINDS[c.kind].runners for c in CHAOS if c.name in DEFAULT_KINDS)
    assert DEFAULT_KINDS == ("kill-task", "kill-taskmanager", "raise", "fail-checkpoint", "pause-task")
    assert SPARK_KINDS == ("kill-task", "kill-executor") == tuple(kinds_for("j", True, None))
    # the request each chaos kind sends, as it was before the registry
    planned = {k: fault_request(PlannedFault(1.0, k, 0.25, 2, 0.3)) for k in CHAOS_KINDS}
    assert planned == {
        "kill-task": ("job", {"kind": "kill-task", "pick": 0.25}),
        "kill-taskmanager": ("cluster", {"kind": "kill-taskmanager", "pick": 0.25}),
        "raise": ("job", {"kind": "raise", "pick": 0.25, "after": 2}),
        "fail-checkpoint": ("job", {"kind": "fail-checkpoint", "count": 2}),
        "pause-task": ("job", {"kind": "pause-task", "pick": 0.25, "seconds": 0.3}),
        "pause-taskmanager": ("cluster", {"kind": "pause-taskmanager", "pick": 0.25, "seconds": 0.3}),
        "network-delay": ("job", {"kind": "network", "pick": 0.25, "delay_ms": 200, "seconds": 0.3}),
        "network-drop": ("job", {"kind": "network", "pick": 0.25, "drop": True}),
        "kill-executor": ("job", {"kind": "kill-executor", "pick": 0.25}),
    }
    assert all(json.dumps(body) == json.dumps(planned[k][1]) for k, (_, body) in planned.items())  # key order too


def test_fault_records_keep_the_journal_json() -> None:
    journal: list[FaultRecord] = []
    first = record(journal, FaultRecord.injected(1, "network", {"vertex": 1}, "RUNNING", 0, signal=None, seconds=2.0, delay_ms=200.0))
    record(journal, FaultRecord.injected(2, "kill-task", {"vertex": 2}, "RESTARTING", 1, signal="KILL"))
    assert first.outcome is FaultOutcome.CLOSED and journal[1].outcome is FaultOutcome.OPEN
    view = journal_view(journal, "RUNNING", 2)
    assert json.dumps(view) == json.dumps([
        {"time": 1, "kind": "network", "target": {"vertex": 1}, "params": {"seconds": 2.0, "delay_ms": 200.0},
         "state-before": "RUNNING", "restarts-before": 0, "state-after": "RESTARTING", "restarts-after": 1},
        {"time": 2, "kind": "kill-task", "target": {"vertex": 2}, "params": {"signal": "KILL"},
         "state-before": "RESTARTING", "restarts-before": 1, "state-after": "RUNNING", "restarts-after": 2},
    ])
    assert journal[1].state_after is None, "showing the open fault must not close it"
    assert [FaultRecord.from_json(e.to_json()) for e in journal] == journal
    cluster = FaultRecord.injected(3, "storage-outage", {"what": "checkpoint storage"}, "-", 0, seconds=1.0)
    cluster.jobs = ["a" * 32]
    assert list(cluster.to_json())[-1] == "jobs" and FaultRecord.from_json(cluster.to_json()) == cluster
