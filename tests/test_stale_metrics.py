"""A paused TaskManager's last figures are not shown as current (issue 37, §4).

Before, `flinkpy top`, `job show` and `GET /metrics` went on showing a SIGSTOPped TaskManager's
last rates and CPU as if they were live, 34 s after its last report. Now figures older than two
report intervals and a second are stale: `top` and `cluster status` show the TaskManager
UNRESPONSIVE (`top` with no CPU or memory), `job show` marks the subtasks and leaves them out of
the rates, and Prometheus no longer gets their series; when the TaskManager resumes, all of it
is live again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, running_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

JOB = """
import time
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource


def slow(n):
    time.sleep(0.001)


env = StreamExecutionEnvironment.get_execution_environment()
env.from_source(NumberSequenceSource(1, 10**9), WatermarkStrategy.no_watermarks(), "numbers").add_sink(slow)
env.execute("stale-metrics")
"""


def cli_json(*args: str) -> Any:
    res = run_cli(*args, "--json")
    assert res.returncode == 0, f"flinkpy {' '.join(args)} exited {res.returncode}: {res.stderr}"
    return json.loads(res.stdout)


def prometheus(home: Path) -> str:
    from flinkpy.cluster import ClusterHome
    from flinkpy.network.rest_client import RestClient

    address = json.loads((home / "jobmanager.json").read_text())["rest_address"]
    return RestClient(address, ClusterHome(home).token()).request("GET", "/metrics")


def test_a_paused_taskmanager_is_unresponsive_and_its_figures_stale(flinkpy_home: Path, tmp_path: Path) -> None:
    job = tmp_path / "endless.py"
    job.write_text(JOB)
    # one slot each: the job's two subtasks run on both TaskManagers; reports every 200 ms
    with running_cluster(flinkpy_home, taskmanagers=2, slots=1):
        res = run_cli("run", "-d", "-p", "2", "-D", "metrics.fetcher.update-interval=200ms", str(job))
        assert res.returncode == 0, res.stderr
        jid = res.stdout.strip().split()[-1]

        def live() -> Any:
            doc = cli_json("job", "show", jid)
            subtasks = [s for v in doc["vertices"] for s in v["subtasks"]]
            reporting = all(s["status"] == "RUNNING" and s["metrics-age"] is not None for s in subtasks)
            return doc if reporting and all(not s["metrics-stale"] for s in subtasks) else None

        doc = wait_for(live, 60, message="both subtasks reporting")
        on_tm1 = [s["subtask"] for v in doc["vertices"] for s in v["subtasks"] if s["taskmanager-id"] == "tm-1"]
        assert on_tm1, doc["vertices"]
        assert 'tm_id="tm-1"' in prometheus(flinkpy_home)

        cli_json("fault", "pause-taskmanager", "tm-1", "--for", "15s")

        def unresponsive() -> Any:
            frame = cli_json("top", jid)
            tm = next(t for t in frame["taskmanagers"] if t["id"] == "tm-1")
            return frame if tm["state"] == "UNRESPONSIVE" and tm["stale"] else None

        frame = wait_for(unresponsive, 10, interval=0.2, message="tm-1 UNRESPONSIVE in top")
        tm2 = next(t for t in frame["taskmanagers"] if t["id"] == "tm-2")
        assert tm2["state"] == "RUNNING" and not tm2["stale"]
        assert frame["vertices"][0]["stale-subtasks"] == len(on_tm1)

        shown = cli_json("job", "show", jid)
        stale = {s["subtask"] for v in shown["vertices"] for s in v["subtasks"] if s["metrics-stale"]}
        assert stale == set(on_tm1)
        # Prometheus: tm-1's series are gone, tm-2's are there
        text = prometheus(flinkpy_home)
        assert 'flinkpy_taskmanager_Status_ProcessTree_CPU_Usage{host="127.0.0.1",tm_id="tm-1"}' not in text
        assert 'tm_id="tm-1"' not in text
        assert 'tm_id="tm-2"' in text
        # for people: the state instead of CPU and memory, and the rates' footnote
        table = run_cli("top", jid, "--once", env={"COLUMNS": "80"})
        assert table.returncode == 0, table.stderr
        row = next(line for line in table.stdout.splitlines() if "tm-1" in line)
        assert "UNRESPONSIVE" in row and "%" not in row, table.stdout
        assert "stopped reporting" in table.stdout and "left out of the rates" in table.stdout
        status = run_cli("cluster", "status", env={"COLUMNS": "80"})
        assert status.returncode == 0, status.stderr
        assert "UNRESPONSIVE" in next(line for line in status.stdout.splitlines() if "tm-1" in line), status.stdout

        # the pause ends: live again
        wait_for(lambda: all(t["state"] == "RUNNING" and not t["stale"] for t in cli_json("top", jid)["taskmanagers"]),
                 30, interval=0.2, message="tm-1 RUNNING again")
        wait_for(lambda: 'tm_id="tm-1"' in prometheus(flinkpy_home), 10, message="tm-1's series back in /metrics")
        run_cli("cancel", jid)
