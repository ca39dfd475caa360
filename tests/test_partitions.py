"""Network partitions a cluster across hosts must survive, with hosts made of network namespaces
(tests/netns.py): the JobManager on one host, a TaskManager on each of two others, the
verification job writing through its two-phase-commit sink, and ``flinkpy verify`` as the
checker (nothing lost, nothing twice).

Skipped with the reason where namespaces cannot be made (not root); never on CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

import netns
from conftest import ROOT, wait_for

EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.skipif(netns.required() is not None, reason=str(netns.required()))


class Drill:
    """A cluster of three namespace hosts: ``jm``, ``tm1`` and ``tm2``."""

    def __init__(self, hosts: netns.Hosts, base: Path) -> None:
        self.hosts, self.base = hosts, base
        self.jm_home = base / "jm"
        self.rpc = ""

    def cli(self, host: str, *args: str, home: Path | None = None, timeout: float = 90, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(os.environ, FLINKPY_HOME=str(home or self.jm_home), FLINKPY_JOBMANAGER="", FLINKPY_CLUSTER_SECRET="",
                   PYTHONPATH=str(ROOT))
        res = self.hosts.run(host, [sys.executable, "-m", "commands.main", *args], capture_output=True, text=True, env=env,
                             cwd=str(ROOT), timeout=timeout)
        if check:
            assert res.returncode == 0, f"flinkpy {' '.join(args)} on {host} exited {res.returncode}: {res.stderr}"
        return res

    def json(self, host: str, *args: str, **kw: Any) -> Any:
        return json.loads(self.cli(host, *args, "--json", **kw).stdout)

    def taskmanagers(self) -> dict[str, dict[str, Any]]:
        return {tm["id"]: tm for tm in self.json("jm", "cluster", "status")["taskmanagers"]}


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[Drill]:
    with netns.hosts("jm", "tm1", "tm2") as hosts:
        d = Drill(hosts, tmp_path)
        jm = hosts["jm"]
        started = d.json("jm", "jobmanager", "start", "--rest-port", "0", "-D", f"jobmanager.rpc.address={jm.address}",
                         "-D", "heartbeat.interval=300ms", "-D", "heartbeat.timeout=2s")
        d.rpc = started["rpc_address"]
        try:
            secret = tmp_path / "secret"
            shutil.copyfile(d.jm_home / "secret", secret)
            secret.chmod(0o600)
            for name in ("tm1", "tm2"):
                d.json(name, "taskmanager", "start", "--jobmanager", d.rpc, "--slots", "2", "--id", name, "--secret-file", str(secret),
                       "-D", "heartbeat.interval=300ms", home=tmp_path / name)
            yield d
        finally:
            for name in ("jm", "tm1", "tm2"):
                hosts.heal(name)
            d.cli("jm", "cluster", "stop", "--timeout", "10s", check=False)
            for name in ("tm1", "tm2"):
                d.cli(name, "taskmanager", "stop", home=tmp_path / name, check=False)


@pytest.mark.timeout(150)
def test_a_taskmanager_cut_off_from_the_jobmanager_is_replaced_and_fenced_when_it_heals(drill: Drill, tmp_path: Path) -> None:
    """The TaskManager running the job's tasks loses its link: after heartbeat.timeout the
    JobManager declares it lost and restarts the job on the other one, whose checkpoints
    complete; when the link heals, the cut-off TaskManager's stale tasks are dropped (their
    checkpoints were never acknowledged, their transactions never committed), it registers
    again with every slot free, and the job's committed output is exactly once."""
    keys, per_key = 4, 4000
    out = tmp_path / "out"
    res = drill.cli("jm", "run", "--json", "-d", "-p", "2", "-D", "execution.checkpointing.interval=300ms",
                    "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.attempts=5",
                    "-D", "restart-strategy.fixed-delay.delay=200ms",
                    str(EXAMPLES / "verification_job.py"), "--keys", str(keys), "--per-key", str(per_key), "--rate", "1000",
                    "--out", str(out))
    jid = json.loads(res.stdout)["jobs"][0]["jid"]

    def job() -> dict[str, Any]:
        return drill.json("jm", "job", "show", jid)

    def placed(j: dict[str, Any]) -> set[str]:
        """The TaskManagers running the job's subtasks."""
        return {s["taskmanager-id"] for v in j["vertices"] for s in v["subtasks"] if s["status"] == "RUNNING"}

    running = wait_for(lambda: (j := job())["state"] == "RUNNING" and j["tasks"]["running"] == j["tasks"]["total"] and j,
                       timeout=30, message="the job running")
    busy = sorted(placed(running))[0]
    other = "tm2" if busy == "tm1" else "tm1"
    before = running["restarts"]
    drill.hosts.cut(busy)
    wait_for(lambda: busy not in drill.taskmanagers(), timeout=20, message=f"{busy} declared lost")
    wait_for(lambda: (j := job())["restarts"] > before and j["tasks"]["running"] == j["tasks"]["total"] and placed(j) == {other},
             timeout=30, message=f"the job running again on {other}", describe=lambda: (job(), drill.taskmanagers()))
    drill.hosts.heal(busy)
    wait_for(lambda: busy in (tms := drill.taskmanagers()) and tms[busy]["freeSlots"] == tms[busy]["slotsNumber"],
             timeout=30, message=f"{busy} registered again with fresh slots")
    final = wait_for(lambda: (j := job())["state"] in ("FINISHED", "FAILED", "CANCELED") and j, timeout=60, message="the job finished")
    assert final["state"] == "FINISHED", final
    verdict = drill.cli("jm", "verify", str(out), "--keys", str(keys), "--per-key", str(per_key), "--json", check=False)
    report = json.loads(verdict.stdout)
    assert (report["lost"], report["duplicated"], report["mismatched"]) == (0, 0, 0), report
    assert verdict.returncode == 0
