"""A job's Python files travel with the job (``env.add_python_file``, ``--pyFiles``, the job's
own directory), as Flink ships ``python.files``: the TaskManagers import them from the archive
the client sent, never from the client's disk.

To prove it, the client's copies are gone before any task of the job starts: the job is
submitted while another job holds the cluster's only slot, its files are deleted, and only then
does it get the slot. A TaskManager killed with SIGKILL comes back and fetches the archive again;
a damaged or missing archive fails the deployment with a reason, not a traceback; a submission
over ``rest.server.max-content-length`` is refused before it is sent, with exit 8.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from flinkpy.errors import ExitCode

from conftest import ROOT, all_gone_after, run_cli, running_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

LIMIT = "64 kb"

BLOCKER = textwrap.dedent(
    """
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers").add_sink(lambda v: None)
    env.execute("holds-the-slot")
    """
)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One TaskManager with one slot (a second job waits for it), and a small body limit."""
    path = tmp_path_factory.mktemp("pyfiles")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLINKPY_HOME", str(path))
        mp.delenv("FLINKPY_JOBMANAGER", raising=False)
        with running_cluster(path, taskmanagers=1, slots=1, config=f"rest.server.max-content-length: {LIMIT}\n"):
            yield path


def _show(jid: str) -> dict[str, Any]:
    res = run_cli("job", "show", jid, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _submit(*args: str) -> str:
    res = run_cli("run", "-d", "--json", *args)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)["jobs"][0]["jid"]


def _stdout(home: Path) -> str:
    return "".join(p.read_text() for p in sorted((home / "log").glob("taskmanager-*.out")))


def _run_without_the_clients_files(tmp_path: Path, job: Path, *args: str, delete: list[Path], options: tuple[str, ...] | list[str] = (),
                                   state: str = "FINISHED", before_the_slot: Any = None) -> str:
    """Submit ``job`` (with ``args``) while a blocker holds the only slot, delete ``delete``
    (the client's copies), free the slot; returns the job's id once it reached ``state``."""
    blocker = _submit(str(_write(tmp_path / "blocker" / "blocker.py", BLOCKER)))
    wait_for(lambda: _show(blocker)["state"] == "RUNNING", timeout=30, message="the blocker running")
    jid = _submit(*options, str(job), *args)
    assert _show(jid)["state"] == "CREATED"
    for path in delete:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if before_the_slot is not None:
        before_the_slot(jid)
    assert run_cli("cancel", blocker).returncode == 0
    wait_for(lambda: _show(jid)["state"] in ("FINISHED", "FAILED", "CANCELED"), timeout=60, message=f"job {jid} to end",
             describe=lambda: _show(jid))
    assert _show(jid)["state"] == state, run_cli("job", "exceptions", jid).stdout
    return jid


JOB = """
    import sys
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    tag = sys.argv[1]
    for path in sys.argv[2:]:
        env.add_python_file(path)

    from beside import triple   # next to this job file: the job's directory ships too
    from shipped import offset  # added with add_python_file, or --pyFiles

    env.from_collection(list(range(1, 6))).map(triple).map(offset).map(lambda v: f"{tag} {v}").print()
    env.execute(tag)
    """


def _job_and_module(tmp_path: Path) -> tuple[Path, Path]:
    job = _write(tmp_path / "job" / "job.py", JOB)
    _write(tmp_path / "job" / "beside.py", "def triple(x):\n    return 3 * x\n")
    module = _write(tmp_path / "lib" / "shipped.py", "def offset(x):\n    return x + 1000\n")
    return job, module


def _printed(home: Path, tag: str) -> list[str]:
    return sorted(line for line in _stdout(home).splitlines() if line.startswith(f"{tag} "))


def test_an_added_module_and_the_jobs_own_directory_ship_with_the_job(home: Path, tmp_path: Path) -> None:
    job, module = _job_and_module(tmp_path)
    _run_without_the_clients_files(tmp_path, job, "added", str(module), delete=[job.parent, module.parent])
    assert _printed(home, "added") == sorted(f"added {3 * x + 1000}" for x in range(1, 6))


def test_pyfiles_ships_a_single_module_file(home: Path, tmp_path: Path) -> None:
    job, module = _job_and_module(tmp_path)
    _run_without_the_clients_files(tmp_path, job, "pyfs", delete=[job.parent, module.parent], options=["-pyfs", str(module)])
    assert _printed(home, "pyfs") == sorted(f"pyfs {3 * x + 1000}" for x in range(1, 6))


JOB_DIRS = """
    import sys
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    for path in sys.argv[1:]:
        env.add_python_file(path)

    from mypkg.ops import double   # a package directory
    from plain_mod import negate   # a module in a plain directory
    from zipped import square      # a module in a .zip

    env.from_collection([1, 2, 3]).map(double).map(square).map(negate).map(lambda v: f"dirs {v}").print()
    env.execute("dirs")
    """


def test_a_package_a_directory_and_a_zip_archive_ship(home: Path, tmp_path: Path) -> None:
    job = _write(tmp_path / "job" / "job.py", JOB_DIRS)
    lib = tmp_path / "lib"
    _write(lib / "mypkg" / "__init__.py", "")
    _write(lib / "mypkg" / "ops.py", "from mypkg.factor import FACTOR\n\ndef double(x):\n    return FACTOR * x\n")
    _write(lib / "mypkg" / "factor.py", "FACTOR = 2\n")
    _write(lib / "plain" / "plain_mod.py", "def negate(x):\n    return -x\n")
    with zipfile.ZipFile(lib / "deps.zip", "w") as zf:
        zf.writestr("zipped.py", "def square(x):\n    return x * x\n")
    _run_without_the_clients_files(tmp_path, job, str(lib / "mypkg"), str(lib / "plain"), str(lib / "deps.zip"),
                                   delete=[job.parent, lib])
    assert _printed(home, "dirs") == sorted(f"dirs {-(2 * x) ** 2}" for x in (1, 2, 3))


@pytest.mark.parametrize("harm", ["damaged", "missing"])
def test_a_damaged_or_missing_archive_fails_the_deployment_with_the_reason(home: Path, tmp_path: Path, harm: str) -> None:
    job, module = _job_and_module(tmp_path)

    def harm_the_archive(jid: str) -> None:
        (stored,) = (home / "blobs" / jid).glob("python-files-*.zip")
        if harm == "missing":
            stored.unlink()
        else:
            data = bytearray(stored.read_bytes())
            data[len(data) // 2] ^= 0xFF
            stored.write_bytes(bytes(data))

    jid = _run_without_the_clients_files(tmp_path, job, harm, str(module), delete=[], options=["-D", "restart-strategy.type=none"],
                                         state="FAILED", before_the_slot=harm_the_archive)
    doc = json.loads(run_cli("job", "exceptions", jid, "--json").stdout)
    (entry,) = doc["exceptionHistory"]["entries"]
    assert entry["exceptionName"] == "flinkpy.ArtifactUnavailable"
    expected = "is damaged: its SHA-256 is" if harm == "damaged" else "the JobManager has no Python files archive"
    assert expected in entry["message"] and jid in entry["message"], entry["message"]
    assert "Traceback" not in entry["stacktrace"]
    assert _printed(home, harm) == []


def test_a_submission_over_the_body_limit_is_refused_before_it_is_sent(home: Path, tmp_path: Path) -> None:
    job, module = _job_and_module(tmp_path)
    data = _write(tmp_path / "lib" / "data" / "blob.py", "")
    data.write_bytes(b"#" + os.urandom(100 << 10).hex().encode())  # incompressible enough: 200 KiB of hex
    res = run_cli("run", str(job), "big", str(module), str(data.parent))
    assert res.returncode == ExitCode.CONFIGURATION, res.stderr
    assert "cannot be submitted: its submission is" in res.stderr and str(data.parent) in res.stderr, res.stderr
    assert f"rest.server.max-content-length: {LIMIT}" in res.stderr and "raise rest.server.max-content-length" in res.stderr
    assert "Traceback" not in res.stderr
    assert all(j["name"] != "big" for j in json.loads(run_cli("list", "-a", "--json").stdout)["jobs"])


def test_the_jobmanager_refusing_a_large_body_is_a_configuration_error(home: Path) -> None:
    from flinkpy.cluster import ClusterHome, find_cluster
    from flinkpy.errors import ConfigurationError
    from flinkpy.network.rest_client import RestClient

    info = find_cluster(ClusterHome(home))
    rest = RestClient(info.rest_address, ClusterHome(home).token())
    assert rest.request("GET", "/config")["rest-server-max-content-length"] == 64 << 10
    with pytest.raises(ConfigurationError, match="larger than the REST server accepts") as raised:
        rest.submit_job(b"{" + b" " * (48 << 10) + b"}" * (20 << 10))
    assert "rest.server.max-content-length" in (raised.value.remedy or "")


JOB_GATED = """
    import os, sys, time
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    gate_file = sys.argv[1]
    env.add_python_file(sys.argv[2])
    from shipped import offset

    def through_the_gate(v):
        # the records wait here until the test opens the gate (after the TaskManager's restart)
        while not os.path.exists(gate_file):
            time.sleep(0.01)
        return f"gated {v}"

    env.from_collection(list(range(1, 6))).map(offset).map(through_the_gate).print()
    env.execute("gated")
    """


@pytest.mark.timeout(150)
def test_a_taskmanager_killed_with_sigkill_fetches_the_archive_again(flinkpy_home: Path, tmp_path: Path) -> None:
    job = _write(tmp_path / "job" / "job.py", JOB_GATED)
    module = _write(tmp_path / "lib" / "shipped.py", "def offset(x):\n    return x + 1000\n")
    gate = tmp_path / "gate"
    with running_cluster(flinkpy_home, taskmanagers=1, slots=1) as info:
        jid = _submit("-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.attempts=50",
                      "-D", "restart-strategy.fixed-delay.delay=100ms", str(job), str(gate), str(module))

        def running() -> bool:
            doc = _show(jid)
            return doc["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in doc["vertices"])

        wait_for(running, timeout=30, message="the job running")
        shutil.rmtree(job.parent)
        shutil.rmtree(module.parent)
        workdir = flinkpy_home / "taskmanagers" / info.taskmanagers[0].id
        assert (workdir / jid).is_dir()
        os.kill(info.taskmanagers[0].pid, signal.SIGKILL)
        wait_for(lambda: _show(jid)["restarts"] >= 1 and running(), timeout=60, message="the job running again on a new TaskManager",
                 describe=lambda: _show(jid))
        tm_pids = {tm["pid"] for tm in json.loads(run_cli("cluster", "status", "--json").stdout)["taskmanagers"]}
        assert info.taskmanagers[0].pid not in tm_pids
        gate.touch()
        wait_for(lambda: _show(jid)["state"] == "FINISHED", timeout=30, message="the job finished")
        assert _printed(flinkpy_home, "gated") == sorted(f"gated {x + 1000}" for x in range(1, 6))
        tm_log = (flinkpy_home / "log" / f"taskmanager-{info.taskmanagers[0].id}.log").read_text()
        assert tm_log.count(f"job {jid}: fetched and unpacked its Python files") == 2, tm_log[-3000:]
        # the job ended: its copy on the TaskManager goes too
        wait_for(lambda: not (workdir / jid).exists(), timeout=10, message="the TaskManager's copy removed")
        wait_for(lambda: not (flinkpy_home / "blobs" / jid).exists(), timeout=10, message="the JobManager's copy removed")


EMBEDDED_JOB = '''
import os, sys
from flinkpy.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.add_python_file(sys.argv[1])

from beside import triple   # next to this job file
from shipped import offset  # made importable by add_python_file

out = env.from_collection(list(range(1, 21))).map(triple).map(offset).execute_and_collect()
print("RESULT", sorted(out))
'''


def test_plain_python_on_an_embedded_cluster_ships_the_same_way(tmp_path: Path, flinkpy_home: Path) -> None:
    """``python job.py`` (an embedded cluster, whatever the order of the job's directory and
    the added file on the driver's ``sys.path``): the same archive, the same path."""
    job_dir, lib = tmp_path / "job", tmp_path / "lib"
    _write(job_dir / "job.py", EMBEDDED_JOB)
    _write(job_dir / "beside.py", "def triple(x):\n    return 3 * x\n")
    _write(lib / "shipped.py", "def offset(x):\n    return x + 1000\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # flinkpy from this tree; nothing of the job's
    done = subprocess.run([sys.executable, str(job_dir / "job.py"), str(lib / "shipped.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=100, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = sorted(3 * x + 1000 for x in range(1, 21))
    assert f"RESULT {expected}" in done.stdout, done.stdout[-2000:]


# -- the archive itself (no cluster) ------------------------------------------------------------


def test_the_archive_holds_what_was_added_and_nothing_beside_it(tmp_path: Path) -> None:
    from flinkpy.program.archive import build

    job_dir = tmp_path / "job"
    _write(job_dir / "job.py", "")
    _write(job_dir / "helpers" / "__init__.py", "")
    _write(job_dir / "data" / "big.py", "")  # not a package: a data directory stays home
    _write(job_dir / "notes.txt", "")
    _write(tmp_path / "lib" / "one.py", "")
    _write(tmp_path / "lib" / "sibling.py", "")  # beside an added module, not added itself
    _write(tmp_path / "pkg" / "__init__.py", "")
    _write(tmp_path / "pkg" / "__pycache__" / "x.pyc", "")
    archive = build([str(job_dir)], [str(tmp_path / "lib" / "one.py"), str(tmp_path / "pkg")])
    with zipfile.ZipFile(__import__("io").BytesIO(archive.data)) as zf:
        names = sorted(zf.namelist())
    assert names == ["MANIFEST.json", "files/0/one.py", "files/1/pkg/__init__.py", "job/helpers/__init__.py", "job/job.py"]
    assert archive.roots == ["job", "files/0", "files/1"]


def test_a_damaged_archive_is_refused_before_anything_is_unpacked(tmp_path: Path) -> None:
    from flinkpy.program.archive import DamagedArchiveError, build, unpack

    _write(tmp_path / "lib" / "one.py", "")
    archive = build([], [str(tmp_path / "lib" / "one.py")])
    damaged = archive.data[:-1] + bytes([archive.data[-1] ^ 1])
    with pytest.raises(DamagedArchiveError, match="is damaged: its SHA-256 is"):
        unpack(damaged, tmp_path / "out", archive.sha256)
    assert not (tmp_path / "out").exists()
    assert unpack(archive.data, tmp_path / "out", archive.sha256) == [str(tmp_path / "out" / "files/0")]


def _state(jid: str) -> str | None:
    """The job's state, or None while no JobManager answers for it (a failover)."""
    res = run_cli("job", "show", jid, "--json", timeout=90)
    return json.loads(res.stdout)["state"] if res.returncode == 0 else None


@pytest.mark.timeout(180)
def test_with_high_availability_the_next_leader_serves_the_archive_from_its_storage(zookeeper, flinkpy_home: Path, tmp_path: Path) -> None:
    """The archive is kept in high-availability.storageDir: the leader that recovers the job
    after a SIGKILL of the first one serves it to a TaskManager that never had it."""
    res = run_cli("cluster", "start", "--ha", "zookeeper", "--zookeeper-quorum", zookeeper.quorum, "--jobmanagers", "2",
                  "--taskmanagers", "1", "--slots", "1", "--rest-port", "0", "-D", "high-availability.zookeeper.client.session-timeout=2s",
                  "-D", "heartbeat.interval=500ms", "-D", "heartbeat.timeout=5s", "--json")
    assert res.returncode == 0, res.stderr
    started = json.loads(res.stdout)
    pids = [p["pid"] for p in started["high_availability"]["jobmanagers"] + started["taskmanagers"]]
    try:
        job, module = _job_and_module(tmp_path)
        blocker = _submit(str(_write(tmp_path / "blocker" / "blocker.py", BLOCKER)))
        wait_for(lambda: _state(blocker) == "RUNNING", timeout=30, message="the blocker running")
        jid = _submit(str(job), "ha", str(module))
        assert _state(jid) == "CREATED"
        assert len(list((flinkpy_home / "ha").rglob(f"blobs/{jid}/python-files-*.zip"))) == 1
        assert not (flinkpy_home / "blobs" / jid).exists()
        shutil.rmtree(job.parent)
        shutil.rmtree(module.parent)
        killed = run_cli("fault", "kill-jobmanager", "--json")
        assert killed.returncode == 0, killed.stderr
        wait_for(lambda: _state(blocker) is not None and _state(jid) is not None, timeout=60, message="both jobs recovered by the next leader")
        assert run_cli("cancel", blocker).returncode == 0
        wait_for(lambda: _state(jid) in ("FINISHED", "FAILED"), timeout=60, message="the job to end")
        assert _state(jid) == "FINISHED", run_cli("job", "exceptions", jid).stdout
        assert _printed(flinkpy_home, "ha") == sorted(f"ha {3 * x + 1000}" for x in range(1, 6))
    finally:
        with all_gone_after(pids):
            assert run_cli("cluster", "stop", "--timeout", "10s").returncode == 0


def test_the_jobmanager_keeps_a_reference_only_and_refuses_a_damaged_upload(tmp_path: Path) -> None:
    """What HA stores of a submission holds the archive's reference, not its bytes; an upload
    whose bytes do not match its checksum is refused (exit 8), and nothing is kept of it."""
    from flinkpy.client.shipping import document_entry
    from flinkpy.jobmanager.artifacts import ArtifactStore
    from flinkpy.program.archive import DamagedArchiveError, build

    _write(tmp_path / "lib" / "one.py", "")
    archive = build([], [str(tmp_path / "lib" / "one.py")])
    store = ArtifactStore(str(tmp_path / "blobs"))
    document = {"python_archive": document_entry(archive)}
    artifact = store.accept("job1", document)
    assert artifact is not None and artifact.sha256 == archive.sha256
    assert document["python_archive"] == {"sha256": archive.sha256, "size": archive.size}
    assert (tmp_path / "blobs" / "job1" / f"python-files-{archive.sha256}.zip").read_bytes() == archive.data
    assert store.accept("job1", document) == artifact  # a recovered job's document: the reference

    damaged = dict(document_entry(archive), sha256="0" * 64)
    with pytest.raises(DamagedArchiveError, match="uploaded with job job2 is damaged") as raised:
        store.accept("job2", {"python_archive": damaged})
    assert raised.value.exit_code == ExitCode.CONFIGURATION
    assert not (tmp_path / "blobs" / "job2").exists()
