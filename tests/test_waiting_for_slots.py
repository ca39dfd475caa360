"""A job that lost its only TaskManager waits for slots, says so, and resumes when one joins."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

import psutil
import pytest

from conftest import wait_for

JOB = textwrap.dedent(
    """
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(lambda n: n % 5).reduce(lambda a, b: a + b).uid("sums").add_sink(lambda v: None))
    env.execute("waits-for-slots")
    """
)


@pytest.mark.timeout(90)
def test_restart_waits_for_a_taskmanager_and_resumes_when_one_is_added(flinkpy_home: Path, cli, tmp_path: Path) -> None:
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster

    home = ClusterHome(flinkpy_home)
    info = start_cluster(home, taskmanagers=1, slots=2, rest_port=0)
    try:
        job = tmp_path / "job.py"
        job.write_text(JOB)
        res = cli("run", "-d", "-p", "2", "-D", "execution.checkpointing.interval=100ms",
                  "-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.delay=0s",
                  "-D", "restart-strategy.fixed-delay.attempts=5", "--json", str(job))
        assert res.returncode == 0, res.stderr
        jid = json.loads(res.stdout)["jobs"][0]["jid"]

        def show() -> dict:
            return json.loads(cli("job", "show", jid, "--json").stdout)

        def checkpoints() -> int:
            return json.loads(cli("checkpoint", "list", jid, "--json").stdout)["counts"]["completed"]

        wait_for(lambda: checkpoints() >= 2, timeout=30, message="two checkpoints")
        tm = psutil.Process(info.taskmanagers[0].pid)
        os.kill(tm.pid, signal.SIGKILL)
        wait_for(lambda: any(e["type"] == "waiting-for-resources" for e in show()["events"]), timeout=30,
                 message="the job to say it waits for slots")
        assert show()["state"] == "RESTARTING"
        added = cli("cluster", "add-taskmanager", "--slots", "2", "--json")
        assert added.returncode == 0, added.stderr
        new_tm = json.loads(added.stdout)["id"]
        wait_for(lambda: show()["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in show()["vertices"]),
                 timeout=30, message="the job running again")
        doc = show()
        assert doc["restarts"] >= 1
        assert {s["taskmanager-id"] for v in doc["vertices"] for s in v["subtasks"]} == {new_tm}
        restored = json.loads(cli("checkpoint", "list", jid, "--json").stdout)["latest"]["restored"]
        assert restored is not None and restored["id"] >= 2
        assert cli("cancel", jid).returncode == 0
        wait_for(lambda: show()["state"] == "CANCELED", timeout=30)
    finally:
        stop_cluster(home, timeout_s=10)
