"""Shared test kit: real processes on loopback port 0, polls with deadlines, leak checks.

- ``wait_for(predicate, timeout)``: the one place tests poll; it fails with a message when the
  deadline passes (never a bare sleep to "let things settle").
- ``flinkpy_home``: a fresh cluster home per test, exported as FLINKPY_HOME.
- ``cluster``: a background cluster (2 TaskManagers x 2 slots) started through the CLI's own
  ``start_cluster`` and stopped afterwards, with a check that no process of it is left behind.
- ``cli(*args)``: runs the ``flinkpy`` command as a subprocess (the way operators run it).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil
import pytest

from flinkpy.processes import process_tree

#: real PostgreSQL, Redis and ZooKeeper servers (fixtures ``postgres``, ``redis_server``, ``zookeeper``)
#: and a Spark standalone cluster per module (``spark_cluster``)
pytest_plugins = ["servers", "kafka_servers", "rabbitmq_server", "zookeeper", "backends", "spark_standalone"]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# Spark's JVMs here live for one small job each: the optimising JIT compiler (C2) spends more CPU
# on them than it saves, and on two cores that CPU is taken from the other lane. Stopping at the
# first tier made `flinkpy run --runner spark examples/word_count.py` take 48-51 s instead of 73 s
# on the loaded CI-sized machine. A test that sets its own value keeps it; flinkpy passes none.
_QUICK_JVM = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options {_QUICK_JVM} "
                      f"--conf spark.executor.extraJavaOptions={_QUICK_JVM} pyspark-shell")
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", _QUICK_JVM)  # a standalone cluster's master and workers


def poll(predicate: Callable[[], Any], timeout: float, interval: float = 0.02) -> Any:
    """Call ``predicate`` until it returns a truthy value or ``timeout`` passes; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last or time.monotonic() >= deadline:
            return last
        time.sleep(interval)


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02, message: str = "", describe: Callable[[], Any] | None = None) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail the test at the deadline
    (saying what ``describe()`` returns then, when given)."""
    last = poll(predicate, timeout, interval)
    if last:
        return last
    detail = f"; {describe()!r}" if describe is not None else ""
    pytest.fail(f"timed out after {timeout}s waiting for {message or predicate!r} (last value: {last!r}{detail})")


def flinkpy_processes() -> list[psutil.Process]:
    """Every flinkpy JobManager/TaskManager/launcher/task process on this machine."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        # task processes are forked by the zygote and carry its command line
        if any(m in cmd for m in ("flinkpy.jobmanager.process", "flinkpy.taskmanager.process", "flinkpy.task.process", "flinkpy.taskmanager.zygote", "flinkpy.cluster.supervisor")):
            found.append(p)
    return found


def descendants_of_home(home: Path) -> list[psutil.Process]:
    out = []
    for p in flinkpy_processes():
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if str(home) in cmd:
            out.append(p)
            try:
                out += p.children(recursive=True)
            except psutil.Error:
                pass
    return out


@pytest.fixture
def flinkpy_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("FLINKPY_HOME", str(home))
    monkeypatch.delenv("FLINKPY_JOBMANAGER", raising=False)
    return home


@pytest.fixture
def cluster(flinkpy_home: Path):
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster

    home = ClusterHome(flinkpy_home)
    info = start_cluster(home, taskmanagers=2, slots=2, rest_port=0)
    pids = [info.jobmanager_pid] + [tm.pid for tm in info.taskmanagers]
    try:
        yield info
    finally:
        with all_gone_after(pids):
            stop_cluster(home, timeout_s=10)


#: the processes ``pids`` and all their descendants (those still alive)
tree_of = process_tree


@contextlib.contextmanager
def all_gone_after(pids: list[int], timeout: float = 10):
    """Around a cluster stop: every process of ``pids`` and their descendants (taken before the
    stop) must have ended within ``timeout`` after it."""
    tree = tree_of(pids)
    yield
    _, alive = psutil.wait_procs(tree, timeout=timeout)
    assert not alive, f"processes left behind after cluster stop: {alive}"


@contextlib.contextmanager
def running_cluster(home_path: Path, *, taskmanagers: int = 1, slots: int = 1, config: str = "") -> Iterator[Any]:
    """A cluster started in ``home_path`` (with ``config`` as its flinkpy.yaml), stopped at the
    end with none of its processes left behind; yields its ClusterInfo."""
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster

    if config:
        (home_path / "flinkpy.yaml").write_text(config)
    home = ClusterHome(home_path)
    info = start_cluster(home, taskmanagers=taskmanagers, slots=slots, rest_port=0)
    try:
        yield info
    finally:
        with all_gone_after([info.jobmanager_pid, *(tm.pid for tm in info.taskmanagers)]):
            stop_cluster(home, timeout_s=10)


@contextlib.contextmanager
def module_cluster(tmp_path_factory: pytest.TempPathFactory, name: str, *, taskmanagers: int = 2, slots: int = 2) -> Iterator[Path]:
    """For a module-scoped fixture: a cluster in a home of its own, which FLINKPY_HOME names
    while the module runs; yields the home's path."""
    path = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLINKPY_HOME", str(path))
        mp.delenv("FLINKPY_JOBMANAGER", raising=False)
        with running_cluster(path, taskmanagers=taskmanagers, slots=slots):
            yield path


def checkpoint_past(checkpoints: Path | str, job_id: str, limit: int, *, source_uid: str = "numbers") -> bool:
    """Whether the newest readable completed checkpoint of ``job_id`` under ``checkpoints`` has
    every subtask of its NumberSequenceSource ``source_uid`` past ``limit`` (each remaining
    range starts after it): its state then covers every number up to ``limit``. Poll it with
    ``wait_for``."""
    from flinkpy.checkpoint import CheckpointStorage
    from flinkpy.errors import FlinkpyError

    storage = CheckpointStorage(str(checkpoints))
    for cid in reversed(storage.list_checkpoints(job_id)):
        try:
            doc = storage.read_metadata(storage.checkpoint_dir(job_id, cid))
        except FlinkpyError:  # discarded while we read it: a newer one exists
            continue
        source = next(op for op in doc["operators"] if op["uid"] == source_uid)
        offsets = [s["source_offsets"] for s in source["subtasks"]]
        return bool(offsets) and all(o and all(int(a) > limit for a, b in o["ranges"] if int(a) < int(b)) for o in offsets)
    return False


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "commands.main", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=str(ROOT),
        stdin=subprocess.DEVNULL if input is None else None,
        input=input,
    )


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess]:
    return run_cli


def run_cli_in(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``flinkpy ARGS`` in the home ``home``, with none of this process's FLINKPY_ variables and
    no colour (``env`` adds to that): what the CLI does on a machine that knows nothing else."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLINKPY_")}
    environ.update({"FLINKPY_HOME": str(home), "NO_COLOR": "1"}, **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "commands.main", *args],
        capture_output=True, text=True, env=environ, stdin=subprocess.DEVNULL, timeout=60,
    )


def one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The one line a refused command prints (``flinkpy: error: ...``, no traceback), once it
    exited with ``code``."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flinkpy: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def cli_json(*args: str, **kw: Any) -> Any:
    res = run_cli(*args, "--json", **kw) if "--" not in args else run_cli(*args, **kw)
    assert res.returncode == 0, f"flinkpy {' '.join(args)} exited {res.returncode}: {res.stderr}"
    return json.loads(res.stdout)


@pytest.fixture(scope="session", autouse=True)
def _session_tmpdir(tmp_path_factory: pytest.TempPathFactory):
    """Temporary files of this session (embedded cluster homes included, also those of CLI
    subprocesses, which inherit TMPDIR) live under its base temp, so the leak check can tell
    this session's processes from other sessions' on the same machine."""
    import tempfile

    tmp = tmp_path_factory.getbasetemp() / "tmp"
    tmp.mkdir(exist_ok=True)
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None
    yield
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
    tempfile.tempdir = None


@pytest.fixture(autouse=True)
def _no_leaked_processes(tmp_path_factory: pytest.TempPathFactory):
    """conftest's leak check, narrowed to this pytest session's processes.

    Other sessions on the machine run clusters too: this test must neither blame nor kill them.
    Ours are those whose command line, or an ancestor's, names this session's temp directory
    (every cluster home lives there) or that descend from this process.
    """
    base = str(tmp_path_factory.getbasetemp())
    # a process that existed before the test is not its leak, even when it was not recognisable
    # as ours yet (a module fixture's supervisor between its fork and its exec)
    started = time.time()
    before = {p.pid for p in flinkpy_processes()}
    yield

    def ours(p: psutil.Process) -> bool:
        try:
            chain = [p, *p.parents()]
            return any(q.pid == os.getpid() or base in " ".join(q.cmdline()) for q in chain)
        except psutil.Error:
            return False

    def replacement(p: psutil.Process) -> bool:
        """A TaskManager (or its zygote) that a module cluster's supervisor, older than the test,
        started in place of one the test killed: the cluster's, stopped with it."""
        try:
            chain = [p, *p.parents()]
            # the TaskManager itself, or its zygote (a TaskManager's child); not its tasks
            for q, parent in list(zip(chain, chain[1:]))[:2]:
                if "flinkpy.taskmanager.process" in " ".join(q.cmdline()):
                    return parent.pid in before
            return False
        except psutil.Error:
            return False

    def leaked() -> list[psutil.Process]:
        out = []
        for p in flinkpy_processes():
            try:
                if (p.pid not in before and p.create_time() >= started - 0.05 and ours(p) and p.is_running()
                        and p.status() != psutil.STATUS_ZOMBIE and not replacement(p)):
                    out.append(p)
            except psutil.Error:
                pass
        return out

    poll = 0.05
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and leaked():
        time.sleep(poll)
    left = leaked()
    described = [(p.pid, _cmdline(p)) for p in left]
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert not left, f"test leaked engine processes: {described}"


def _cmdline(p: psutil.Process) -> list[str] | str:
    try:
        return p.cmdline()
    except psutil.Error as e:  # gone (or a zombie) since it was seen
        return f"({type(e).__name__})"


