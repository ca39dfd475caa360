"""A real Spark standalone cluster for a test module (fixture ``spark_cluster``).

Started through the CLI as users start it — ``flinkpy spark start --workers 2 --cores 1
--memory 1g`` in a temporary cluster home: a master and two workers, separate JVMs from PySpark's
own Spark distribution, on loopback with free ports — once per test module (a cluster takes
10-30 s to start on two cores). Teardown kills the drivers of jobs still running, runs
``flinkpy spark stop`` and fails if any master, worker or executor process of it is left::

    def test_on_a_cluster(spark_cluster):
        res = spark_cluster.cli("run", "--runner", "spark", "--spark-master", spark_cluster.master_url, "job.py")

``cli`` runs the installed ``flinkpy`` command in the cluster's home (FLINKPY_HOME), with the
executors' Python (PYSPARK_PYTHON) this interpreter, optionally from another directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from conftest import tree_of

ROOT = Path(__file__).resolve().parent.parent
FLINKPY = str(Path(sys.executable).with_name("flinkpy"))


@dataclass
class SparkCluster:
    home: Path
    master_url: str
    env: dict[str, str]
    #: master's and workers' pids, in this order
    pids: list[int]

    def cli(self, *args: str, timeout: float = 120, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """The installed `flinkpy` command in this cluster's home, from ``cwd`` (default: the repository)."""
        return subprocess.run([FLINKPY, *args], capture_output=True, text=True, timeout=timeout, cwd=str(cwd or ROOT),
                              env={**os.environ, **self.env, **(env or {})}, stdin=subprocess.DEVNULL)

    def json(self, *args: str, timeout: float = 120) -> dict:
        """``cli`` with --json (before the job file for run), exit 0 required; the document."""
        res = self.cli(*(("run", "--json", *args[1:]) if args[0] == "run" else (*args, "--json")), timeout=timeout)
        assert res.returncode == 0, f"flinkpy {' '.join(args)} exited {res.returncode}: {res.stderr[-3000:]}"
        return json.loads(res.stdout)


def cluster_processes(home: Path) -> list[psutil.Process]:
    """Spark master, worker and executor JVMs of this home (executors run in its work directory)."""
    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if "org.apache.spark.deploy" in cmd or "CoarseGrainedExecutorBackend" in cmd:
            if str(home) in cmd or str(home) in (p.info.get("cwd") or ""):
                found.append(p)
    return found


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("pyspark", reason="PySpark is not installed")
    home = tmp_path_factory.mktemp("spark-cluster-home")
    env = {"FLINKPY_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "FLINKPY_JOBMANAGER": ""}
    started = time.monotonic()
    res = subprocess.run([FLINKPY, "spark", "start", "--workers", "2", "--cores", "1", "--memory", "1g", "--json"],
                         capture_output=True, text=True, timeout=200, env={**os.environ, **env}, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    print(f"Spark standalone cluster ready in {time.monotonic() - started:.1f}s: {doc['master_url']}")
    cluster = SparkCluster(home, doc["master_url"], env, [doc["master"]["pid"]] + [w["pid"] for w in doc["workers"]])
    try:
        yield cluster
    finally:
        # drivers still running (a failed test) end first: they would hold executors
        for rec in (home / "spark-jobs").glob("*[0-9a-f].json"):
            for p in tree_of([int(json.loads(rec.read_text())["pid"])]):
                try:
                    p.kill()
                except psutil.Error:
                    pass
        tree = tree_of(cluster.pids) + cluster_processes(home)
        stop = cluster.cli("spark", "stop", "--json", timeout=60)
        assert stop.returncode == 0, stop.stderr
        assert {p["role"] for p in json.loads(stop.stdout)["stopped"]} == {"master", "worker"}
        _, alive = psutil.wait_procs(tree, timeout=15)
        assert not alive, f"processes left behind after 'flinkpy spark stop': {alive}"
        assert not cluster_processes(home)
