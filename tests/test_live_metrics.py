"""Live metrics on a real cluster: tasks report while they run, and three readers see the same
figures — ``flinkpy job show``, ``flinkpy top`` and the Prometheus endpoint (scraped by a real
Prometheus server).

One cluster and one unbounded job serve the whole module: a fast source whose Map counts with
user metrics, into a sink that takes ~2 ms per record, so the source is back-pressured and the
sink busy, visibly, within seconds.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import module_cluster, run_cli, wait_for

JOB = """
import time
from flinkpy.common import WatermarkStrategy
from flinkpy.common.watermark_strategy import TimestampAssigner
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.datastream.functions import MapFunction


class Now(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return int(time.time() * 1000)


class Parse(MapFunction):
    def open(self, ctx):
        group = ctx.get_metrics_group().add_group("parser")
        self.seen = group.counter("seen")
        self.events = group.meter("events", 10)
        self.sizes = group.add_group("topic", "orders").distribution("size")
        self.last = 0
        group.gauge("last", lambda: self.last)

    def map(self, n):
        self.seen.inc()
        self.events.mark_event()
        self.sizes.update(n % 10)
        self.last = n
        return n


def slow(n):
    time.sleep(0.002)


env = StreamExecutionEnvironment.get_execution_environment()
strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Now())
ds = env.from_source(NumberSequenceSource(1, 10**9), strategy, "numbers")
ds.map(Parse()).rebalance().add_sink(slow).set_parallelism(1)
env.execute("live-metrics")
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with module_cluster(tmp_path_factory, "metrics-home") as path:
        yield path


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, env={"FLINKPY_HOME": str(home)})


def cli_json(home: Path, *args: str) -> Any:
    res = cli(home, *args, "--json")
    assert res.returncode == 0, f"flinkpy {' '.join(args)} exited {res.returncode}: {res.stderr}"
    return json.loads(res.stdout)


def rest(home: Path) -> Any:
    from flinkpy.cluster import ClusterHome
    from flinkpy.network.rest_client import RestClient

    h = ClusterHome(home)
    return RestClient(json.loads((home / "jobmanager.json").read_text())["rest_address"], h.token())


@pytest.fixture(scope="module")
def job(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("metrics-job") / "live.py"
    path.write_text(JOB)
    res = cli(home, "run", "-d", "-p", "2", str(path))
    assert res.returncode == 0, res.stderr
    jid = wait_for(lambda: next((j["jid"] for j in rest(home).jobs_overview() if j["state"] == "RUNNING"), None), 30,
                   message="the job running")
    yield jid
    rest(home).cancel_job(jid)
    wait_for(lambda: rest(home).job(jid)["state"] == "CANCELED", 30, message="the job canceled")


def vertices(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"].split(" ")[0].rstrip(":"): v for v in doc["vertices"]}


@pytest.mark.timeout(90)
def test_job_show_reports_records_while_an_unbounded_job_runs(home: Path, job: str) -> None:
    def live() -> Any:
        doc = cli_json(home, "job", "show", job)
        v = vertices(doc)
        return doc if doc["state"] == "RUNNING" and v["Sink"]["metrics"]["read-records"] > 0 else None

    doc = wait_for(live, 30, message="records read by the running sink")
    source, sink = vertices(doc)["Source"], vertices(doc)["Sink"]
    assert source["metrics"]["write-records"] >= sink["metrics"]["read-records"] > 0
    assert all(s["status"] == "RUNNING" for s in sink["subtasks"])
    assert sum(s["read-records"] for s in sink["subtasks"]) == sink["metrics"]["read-records"]
    assert doc["metrics"]["uptime"] > 0 and doc["metrics"]["numRestarts"] == 0
    table = cli(home, "job", "show", job)
    assert table.returncode == 0 and "Records (live" in table.stdout and "Backpr." in table.stdout
    assert all(len(line) <= 80 for line in table.stdout.splitlines() if "┃" in line or "│" in line)


@pytest.mark.timeout(150)
def test_back_pressure_busy_time_pool_usage_and_watermarks(home: Path, job: str) -> None:
    def settled() -> Any:
        v = vertices(rest(home).job(job))
        src, sink = v["Source"]["metrics"], v["Sink"]["metrics"]
        ok = (src.get("backPressuredTimeMsPerSecond", 0) >= 500 and sink.get("busyTimeMsPerSecond", 0) >= 500
              and src.get("buffers.outPoolUsage", 0) > 0.5 and src.get("currentOutputWatermark", -(2**63)) > 0)
        return (src, sink) if ok else None

    src, sink = wait_for(settled, 40, message="a back-pressured source and a busy sink")
    for v in rest(home).job(job)["vertices"]:
        for s in v["subtasks"]:  # each subtask's second is busy, idle or back-pressured
            m = s["metrics"]
            assert m["busyTimeMsPerSecond"] + m["idleTimeMsPerSecond"] + m["backPressuredTimeMsPerSecond"] == 1000, m
    # the sink's event time moves once the watermark gets through the records queued before it
    # (up to 8 buffers of ~1000 records at 2 ms each: seconds of back-pressure)
    sink_wm = wait_for(lambda: vertices(rest(home).job(job))["Sink"]["metrics"]["currentInputWatermark"] > 0, 60,
                       message="the sink's input watermark")
    assert sink_wm
    per_subtask = rest(home).request("GET", f"/jobs/{job}/vertices/{vertices(rest(home).job(job))['Source']['id']}/metrics",
                                     params={"get": "0.numRecordsIn,1.numRecordsOut,0.backPressuredTimeMsPerSecond"})
    assert {m["id"] for m in per_subtask} == {"0.numRecordsIn", "1.numRecordsOut", "0.backPressuredTimeMsPerSecond"}
    agg = rest(home).request("GET", f"/jobs/{job}/vertices/{vertices(rest(home).job(job))['Source']['id']}/subtasks/metrics",
                             params={"get": "numRecordsOut", "agg": "sum,max"})
    assert agg[0]["id"] == "numRecordsOut" and agg[0]["sum"] >= agg[0]["max"] > 0


@pytest.mark.timeout(60)
def test_user_metrics_are_reported_with_the_task(home: Path, job: str) -> None:
    source_id = vertices(rest(home).job(job))["Source"]["id"]
    names = "0.Map.parser.seen,0.Map.parser.last,0.Map.parser.events.rate,0.Map.parser.topic.orders.size.max"

    def reported() -> Any:
        got = {m["id"]: float(m["value"]) for m in rest(home).request(
            "GET", f"/jobs/{job}/vertices/{source_id}/metrics", params={"get": names})}
        return got if len(got) == 4 and got["0.Map.parser.seen"] > 0 and got["0.Map.parser.events.rate"] > 0 else None

    got = wait_for(reported, 30, message="the user's metrics reported")
    assert got["0.Map.parser.topic.orders.size.max"] == 9
    assert got["0.Map.parser.last"] > 0


@pytest.mark.timeout(60)
def test_taskmanagers_report_cpu_and_memory(home: Path, job: str) -> None:
    def reported() -> Any:
        tms = rest(home).taskmanagers()
        memory = all((tm.get("metrics") or {}).get("Status.ProcessTree.Memory.RSS", 0) > 10 << 20 for tm in tms)
        # CPU usage is a rate between two samples: the first report of a TaskManager has none yet
        cpu = any((tm.get("metrics") or {}).get("Status.ProcessTree.CPU.Usage", 0) > 0 for tm in tms)
        return tms if memory and cpu else None

    tms = wait_for(reported, 30, message="TaskManager memory and CPU reported")
    assert sum(tm["metrics"]["numRunningTasks"] for tm in tms) == 3


@pytest.mark.timeout(60)
def test_top_once_and_json(home: Path, job: str) -> None:
    doc = wait_for(lambda: (d := cli_json(home, "top")) and d["vertices"][0]["records-out"] > 0 and d, 30,
                   message="top --json with records")
    assert doc["jid"] == job and doc["state"] == "RUNNING"
    assert {v["name"].split(":")[0] for v in doc["vertices"]} == {"Source", "Sink"}
    assert len(doc["taskmanagers"]) == 2 and all(tm["rss_bytes"] for tm in doc["taskmanagers"])
    frame = cli(home, "top", "--once")
    assert frame.returncode == 0, frame.stderr
    assert "live-metrics" in frame.stdout and "TaskManagers" in frame.stdout and "Checkpoints:" in frame.stdout
    assert max(len(line) for line in frame.stdout.splitlines()) <= 80


@pytest.mark.timeout(60)
def test_prometheus_endpoint_needs_the_token(home: Path, job: str) -> None:
    address = json.loads((home / "jobmanager.json").read_text())["rest_address"]
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(f"{address}/metrics", timeout=10)
    assert denied.value.code == 401
    text = rest(home).request("GET", "/metrics")
    assert f'flinkpy_taskmanager_job_task_numRecordsIn{{job_id="{job}"' in text
    assert "# TYPE flinkpy_jobmanager_job_uptime gauge" in text
    assert 'flinkpy_taskmanager_job_task_operator_parser_topic_size_count{' in text and 'topic="orders"' in text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(120)
def test_prometheus_scrapes_what_the_rest_api_reports(home: Path, job: str, tmp_path: Path) -> None:
    binary = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if binary is None:
        pytest.skip("no prometheus binary (Debian package 'prometheus'; tests/run installs it)")
    from flinkpy.cluster import ClusterHome

    address = urllib.parse.urlparse(json.loads((home / "jobmanager.json").read_text())["rest_address"])
    token = tmp_path / "token"
    token.write_text(ClusterHome(home).token())
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: flinkpy\n"
        f"    authorization: {{credentials_file: {token}}}\n"
        f"    static_configs: [{{targets: ['{address.netloc}']}}]\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"),
    )
    try:
        def query(expr: str) -> list[dict[str, Any]]:
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    return json.loads(r.read())["data"]["result"]
            except OSError:
                return []

        up = wait_for(lambda: query('up{job="flinkpy"} == 1'), 60, message="Prometheus scraped the JobManager",
                      describe=lambda: (tmp_path / "prometheus.log").read_text()[-2000:])
        assert up
        series = wait_for(lambda: query(f'flinkpy_taskmanager_job_task_numRecordsOut{{job_id="{job}"}} > 0'), 30,
                          message="records out scraped")
        assert {s["metric"]["task_name"] for s in series} == {"Source: numbers -> Map"}
        assert {s["metric"]["subtask_index"] for s in series} == {"0", "1"}
        # the scraped figure trails the REST API's by at most a scrape and a report interval
        scraped = sum(float(s["value"][1]) for s in series)
        source = vertices(rest(home).job(job))["Source"]["metrics"]["write-records"]
        assert 0 < scraped <= source
        restarts = query(f'flinkpy_jobmanager_job_numRestarts{{job_id="{job}",job_name="live-metrics"}}')
        assert [float(r["value"][1]) for r in restarts] == [float(rest(home).job(job)["metrics"]["numRestarts"])]
        cpu = query("flinkpy_taskmanager_Status_ProcessTree_Memory_RSS")
        assert {c["metric"]["tm_id"] for c in cpu} == {tm["id"] for tm in rest(home).taskmanagers()}
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.timeout(90)
def test_top_picks_the_one_running_job_or_lists_them(home: Path, job: str, tmp_path: Path) -> None:
    from flinkpy.errors import ExitCode

    second = tmp_path / "quiet.py"
    second.write_text(JOB.replace("live-metrics", "quiet"))
    res = cli(home, "run", "-d", "-p", "1", "-D", "metrics.enabled=false", str(second))
    assert res.returncode == 0, res.stderr
    quiet = wait_for(lambda: next((j["jid"] for j in rest(home).jobs_overview() if j["name"] == "quiet" and j["state"] == "RUNNING"), None),
                     30, message="the second job running")
    try:
        several = cli(home, "top", "--once")
        assert several.returncode == ExitCode.USAGE
        assert job in several.stderr and quiet in several.stderr and "flinkpy top JOB_ID" in several.stderr
        # metrics.enabled=false: its tasks report nothing while they run
        wait_for(lambda: all(s["status"] == "RUNNING" for v in rest(home).job(quiet)["vertices"] for s in v["subtasks"]), 20)
        shown = cli_json(home, "top", quiet)
        assert all(v["records-in"] == 0 and v["records-out"] == 0 for v in shown["vertices"])
    finally:
        rest(home).cancel_job(quiet)
        wait_for(lambda: rest(home).job(quiet)["state"] == "CANCELED", 30)


@pytest.mark.timeout(60)
def test_top_on_a_terminal_refreshes_until_q(home: Path, job: str) -> None:
    import os
    import pty
    import select
    import sys
    import time

    from conftest import ROOT

    master, slave = pty.openpty()
    env = {**os.environ, "FLINKPY_HOME": str(home), "COLUMNS": "100", "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "commands.main", "top", job, "--interval", "500ms"],
                            stdin=slave, stdout=slave, stderr=slave, cwd=str(ROOT), env=env, start_new_session=True)
    os.close(slave)
    seen = b""

    def read_some() -> bytes:
        nonlocal seen
        readable, _, _ = select.select([master], [], [], 0.2)
        if readable:
            try:
                seen += os.read(master, 65536)
            except OSError:
                pass
        return seen

    try:
        # two frames: the dashboard refreshes by itself
        wait_for(lambda: read_some().count(b"TaskManagers") >= 2, 30, message="two frames of top on a terminal",
                 describe=lambda: seen[-500:])
        assert b"q quits" in seen
        os.write(master, b"q")
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            read_some()
        assert proc.poll() == 0, seen[-500:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
