"""A cluster's life through the `flinkpy` command, as an operator lives it.

One cluster per test (started with ``cluster start --rest-port 0`` in a fresh FLINKPY_HOME)
carries a whole scenario: start, submit, list, inspect, cancel, logs, stop. Every ``--json``
invocation must print exactly one JSON document on stdout.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from conftest import tree_of, wait_for
from flinkpy.errors import ExitCode

LONG_JOB = """
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource

env = StreamExecutionEnvironment.get_execution_environment()
ds = env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
ds.map(lambda n: (n % 10, n)).key_by(lambda t: t[0]).sum(1).add_sink(lambda x: None)
env.execute("long")
"""

PRINT_JOB = """
from flinkpy.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([f"line-{i}" for i in range(20)]).map(lambda s: "printed " + s).print()
env.execute("printer")
"""

JOB_ID = re.compile(r"Job has been submitted with JobID ([0-9a-f]{32})")


def json_of(res: subprocess.CompletedProcess) -> object:
    """The one JSON document of a --json invocation (json.loads fails on anything extra)."""
    assert res.returncode == 0, f"exit {res.returncode}: {res.stderr}"
    return json.loads(res.stdout)


def one_line_error(res: subprocess.CompletedProcess, code: int) -> str:
    assert res.returncode == code, f"expected exit {code}, got {res.returncode}: {res.stderr}"
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


@pytest.fixture
def job_files(tmp_path: Path) -> dict[str, Path]:
    files = {"long": tmp_path / "long.py", "print": tmp_path / "print.py"}
    files["long"].write_text(LONG_JOB)
    files["print"].write_text(PRINT_JOB)
    return files


@pytest.mark.timeout(110)
def test_cluster_lifecycle(flinkpy_home: Path, cli, job_files: dict[str, Path]) -> None:
    res = cli("cluster", "start", "--taskmanagers", "2", "--slots", "2", "--rest-port", "0")
    assert res.returncode == 0, res.stderr
    address = re.search(r"REST address: (http://127\.0\.0\.1:\d+)", res.stdout)
    assert address, res.stdout
    try:
        # ready when start returns: the status right after sees every TaskManager and slot
        st = json_of(cli("cluster", "status", "--json"))
        assert st["overview"]["taskmanagers"] == 2 and st["overview"]["slots-total"] == 4
        assert st["cluster"]["rest_address"] == address.group(1) and len(st["taskmanagers"]) == 2
        pids = [st["cluster"]["jobmanager"]["pid"], *(tm["pid"] for tm in st["cluster"]["taskmanagers"])]

        assert "already running" in one_line_error(cli("cluster", "start", "--rest-port", "0"), ExitCode.CONFLICT)

        # submit detached: returns at once with Flink's line on stderr and the bare id on
        # stdout, so that jid=$(flinkpy run -d ...) works
        res = cli("run", "-d", "-p", "2", str(job_files["long"]), timeout=30)
        assert res.returncode == 0, res.stderr
        found = JOB_ID.search(res.stderr)
        assert found, res.stdout + res.stderr
        jid = found.group(1)
        assert res.stdout == jid + "\n", res.stdout
        # the job table at 80 columns: every line fits, no column squeezed to an ellipsis
        listed = cli("list", env={"COLUMNS": "80"})
        assert listed.returncode == 0 and jid in listed.stdout, listed.stderr
        assert max(map(len, listed.stdout.splitlines())) <= 80 and "…" not in listed.stdout, listed.stdout

        def state() -> str:
            return json_of(cli("job", "show", jid, "--json"))["state"]

        wait_for(lambda: state() == "RUNNING", 20, message="the job RUNNING")
        listed = cli("list")
        assert listed.returncode == 0 and jid in listed.stdout and "RUNNING" in listed.stdout
        jobs = json_of(cli("list", "--json"))["jobs"]
        assert [(j["jid"], j["state"]) for j in jobs] == [(jid, "RUNNING")]
        shown = json_of(cli("job", "show", jid, "--json"))
        assert shown["vertices"] and all(v["parallelism"] == 2 for v in shown["vertices"])

        plan = json_of(cli("info", "--json", "-p", "3", str(job_files["long"])))
        chains = [n["operators"] for n in plan["nodes"]]
        assert len(chains) == 2 and any(len(c) >= 2 for c in chains), plan
        assert all(n["parallelism"] == 3 for n in plan["nodes"])
        assert any(p["ship_strategy"] == "HASH" for n in plan["nodes"] for p in n["predecessors"])

        # job wait: for runbooks between steps
        waited = cli("job", "wait", jid, "--timeout", "30s")
        assert waited.returncode == 0 and waited.stdout == f"Job {jid} is RUNNING.\n", waited.stderr
        assert "within 1s" in one_line_error(cli("job", "wait", jid, "--state", "finished", "--timeout", "1s"), ExitCode.TIMEOUT)

        res = cli("cancel", jid)
        assert res.returncode == 0, res.stderr
        wait_for(lambda: state() == "CANCELED", 20, message="the job CANCELED")
        assert json_of(cli("job", "wait", jid, "--state", "terminal", "--json"))["state"] == "CANCELED"
        assert "ended CANCELED" in one_line_error(cli("job", "wait", jid), ExitCode.CONFLICT)
        assert "CANCELED" in one_line_error(cli("cancel", jid), ExitCode.CONFLICT)
        assert "not found" in one_line_error(cli("cancel", "0123456789abcdef0123456789abcdef"), ExitCode.NOT_FOUND)
        assert "not found" in one_line_error(cli("job", "show", "f" * 32), ExitCode.NOT_FOUND)
        assert json_of(cli("list", "--json")) == {"jobs": []}
        assert [j["state"] for j in json_of(cli("list", "-a", "--json"))["jobs"]] == ["CANCELED"]

        # attached and bounded: what the job prints lands in the TaskManagers' stdout
        res = cli("run", "-p", "2", str(job_files["print"]), timeout=60)
        assert res.returncode == 0, res.stderr
        printed = ""
        for tm in ("tm-1", "tm-2"):
            printed += cli("cluster", "logs", tm, "--stdout", "-n", "1000").stdout
            doc = json_of(cli("cluster", "logs", tm, "--stdout", "--json"))
            assert doc["stream"] == "stdout"
        assert sorted(re.findall(r"printed line-(\d+)", printed), key=int) == [str(i) for i in range(20)]
        assert "tm-9" in one_line_error(cli("cluster", "logs", "tm-9"), ExitCode.NOT_FOUND)
        # a TaskManager added without --slots gets as many as the cluster's others (2, not 1)
        added = json_of(cli("cluster", "add-taskmanager", "--json"))
        slots = {tm["id"]: tm["slotsNumber"] for tm in json_of(cli("cluster", "status", "--json"))["taskmanagers"]}
        assert slots[added["id"]] == 2, slots
        # stop with a job running: its task processes must end too
        res = cli("run", "-d", "-p", "2", str(job_files["long"]), timeout=30)
        assert res.returncode == 0, res.stderr
        jid = JOB_ID.search(res.stdout + res.stderr).group(1)

        def task_pids() -> list[int]:
            subtasks = [s for v in json_of(cli("job", "show", jid, "--json"))["vertices"] for s in v["subtasks"]]
            return [s["pid"] for s in subtasks] if all(s.get("pid") and s["status"] == "RUNNING" for s in subtasks) else []

        tasks = wait_for(task_pids, 20, message="4 running task processes")
        assert len(tasks) == 4
        every = tree_of(pids) + tree_of(tasks)
    finally:
        res = cli("cluster", "stop")
    assert res.returncode == 0, res.stderr
    assert "Stopped jobmanager" in res.stdout
    _, alive = psutil.wait_procs(every, timeout=10)
    assert not alive, f"left behind: {alive}"
    assert not any(p.is_running() for p in every)
    assert json_of(cli("cluster", "stop", "--json")) == {"stopped": []}
    assert cli("cluster", "stop").returncode == 0
    one_line_error(cli("list"), ExitCode.UNREACHABLE)
    one_line_error(cli("cluster", "status"), ExitCode.UNREACHABLE)


@pytest.mark.timeout(90)
def test_rest_needs_the_token_and_slots_are_checked(cluster, flinkpy_home: Path, cli, job_files: dict[str, Path]) -> None:
    # without the token: 401, and nothing is submitted
    for method, path, body in [("GET", "/overview", None), ("POST", "/jobs", b'{"meta": {}, "payloads": {}}'), ("GET", "/jobs/overview", None)]:
        req = urllib.request.Request(cluster.rest_address + path, data=body, method=method, headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 401, (method, path)
    wrong = urllib.request.Request(cluster.rest_address + "/jobs/overview", headers={"Authorization": "Bearer " + "0" * 64})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(wrong, timeout=10)
    assert err.value.code == 401
    assert json_of(cli("list", "-a", "--json")) == {"jobs": []}

    # more parallelism than slots: the job fails (exit 5) and the message says why
    res = cli("run", "-p", "8", str(job_files["long"]), timeout=60)
    assert res.returncode == ExitCode.JOB_FAILED, res.stderr
    assert "Traceback" not in res.stderr
    jobs = json_of(cli("list", "-a", "--json"))["jobs"]
    assert [j["state"] for j in jobs] == ["FAILED"]
    root = json_of(cli("job", "exceptions", jobs[0]["jid"], "--json"))
    assert "slot" in json.dumps(root).lower()
    assert "slot" in res.stderr.lower(), f"the error does not say the cluster lacks slots: {res.stderr}"


@pytest.mark.timeout(60)
def test_json_documents_are_alone_on_stdout(cluster, cli, job_files: dict[str, Path]) -> None:
    for args in (
        ["cluster", "status", "--json"],
        ["list", "--json"],
        ["list", "-a", "--json"],
        ["info", "--json", str(job_files["print"])],
        ["cluster", "logs", "--json"],
        ["run", "--json", "-p", "1", str(job_files["print"])],
    ):
        res = cli(*args, timeout=60)
        doc = json_of(res)  # json.loads rejects anything printed beside the document
        assert isinstance(doc, dict), args
    ran = json_of(cli("run", "--json", "-d", "-p", "1", str(job_files["long"])))
    jid = ran["jobs"][0]["jid"]
    assert re.fullmatch(r"[0-9a-f]{32}", jid)
    assert json_of(cli("cancel", "--json", jid))["jid"] == jid
    failed = cli("cancel", "--json", "0" * 32)
    assert failed.returncode == ExitCode.NOT_FOUND
    assert json.loads(failed.stdout)["error"]["exit_code"] == ExitCode.NOT_FOUND
