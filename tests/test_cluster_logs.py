"""`flinkpy cluster logs` streams and follows a process's files; the processes rotate them by size.

Found by the fault drill (issue #19): the JobManager read a whole log file into memory to serve
its last lines, there was no way to follow a log, and `.out`/`.log` grew without bound.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, run_cli, running_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

MAX = 64 * 1024


@pytest.fixture
def small_logs_cluster(flinkpy_home: Path):
    """One TaskManager whose .log/.out rotate at 64 KiB, keeping 2 rotated files."""
    with running_cluster(flinkpy_home, config="log.file.max-size: 64 kb\nlog.file.max-backups: 2\n") as info:
        yield info


def _follower(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "commands.main", "cluster", "logs", *args], cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class Lines:
    """What a follower printed so far, read without blocking past a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.text = proc, ""
        os.set_blocking(proc.stdout.fileno(), False)  # type: ignore[union-attr]

    def __call__(self) -> str:
        try:
            chunk = self.proc.stdout.read()  # type: ignore[union-attr]
        except (BlockingIOError, TypeError):
            chunk = None
        self.text += chunk or ""
        return self.text


def test_tail_of_a_huge_file_is_served_without_loading_it(small_logs_cluster) -> None:
    out = Path(small_logs_cluster.taskmanagers[0].stdout_path)
    jm = psutil.Process(small_logs_cluster.jobmanager_pid)
    line = b"x" * 99 + b"\n"
    with open(out, "ab") as f:
        block = line * 10_000  # ~1 MB
        for _ in range(200):
            f.write(block)
        f.write(b"second to last\nthe very last line\n")
    rss_before = jm.memory_info().rss
    started = time.monotonic()
    res = run_cli("cluster", "logs", "tm-1", "--stdout", "-n", "2")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "second to last\nthe very last line\n"
    assert time.monotonic() - started < 10
    assert jm.memory_info().rss - rss_before < 30 << 20, "the JobManager loaded the 200 MB file to serve 2 lines"


def test_follow_streams_appends_across_a_rotation_and_stops_cleanly_on_ctrl_c(small_logs_cluster) -> None:
    out = Path(small_logs_cluster.taskmanagers[0].stdout_path)
    with open(out, "ab") as f:
        f.write(b"before\n")
    follower = _follower("tm-1", "--stdout", "-n", "1", "--follow")
    seen = Lines(follower)
    wait_for(lambda: "before\n" in seen(), timeout=20, message="the tail")
    with open(out, "ab") as f:
        f.write(b"appended 1\n")
    wait_for(lambda: "appended 1\n" in seen(), timeout=10, message="an appended line")
    # a rotation as the TaskManager does it: the file moves to .1 and a new one starts
    os.replace(out, f"{out}.1")
    with open(out, "ab") as f:
        f.write(b"after rotation\n")
    wait_for(lambda: "after rotation\n" in seen(), timeout=10, message="a line of the new file")
    follower.send_signal(signal.SIGINT)
    assert follower.wait(timeout=10) == 0
    assert "Traceback" not in follower.stderr.read()  # type: ignore[union-attr]


def test_follow_ends_when_the_taskmanager_ends(small_logs_cluster) -> None:
    follower = _follower("tm-1", "--follow")
    seen = Lines(follower)
    wait_for(lambda: seen() != "" or follower.poll() is not None, timeout=20, message="the log's tail")
    os.kill(small_logs_cluster.taskmanagers[0].pid, signal.SIGKILL)
    assert follower.wait(timeout=10) == 0


def test_the_taskmanager_rotates_what_jobs_print(small_logs_cluster, tmp_path: Path) -> None:
    job = tmp_path / "chatty.py"
    job.write_text(textwrap.dedent("""
        from flinkpy.datastream import StreamExecutionEnvironment

        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_collection([f"line {i:06d} " + "y" * 60 for i in range(6000)]).print()
        env.execute("chatty")
    """))
    res = run_cli("run", str(job), timeout=90)
    assert res.returncode == 0, res.stderr
    out = Path(small_logs_cluster.taskmanagers[0].stdout_path)
    last = "line 005999 " + "y" * 60
    wait_for(lambda: last in out.read_text(), timeout=20, message="the job's last line in the .out")
    files = sorted(p.name for p in out.parent.glob(out.name + "*"))
    assert files == [out.name, f"{out.name}.1", f"{out.name}.2"], files  # 6000 lines ≈ 440 KB: rotated, 2 kept
    for name in files:
        assert (out.parent / name).stat().st_size <= MAX
    res = run_cli("cluster", "logs", "tm-1", "--stdout", "-n", "1")
    assert res.stdout.strip().endswith(last)
    # --list: every file of every process with its size (the rotated ones too), and the total
    listed = run_cli("cluster", "logs", "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    sizes = {f["name"]: f["size"] for f in doc["files"]}
    # the .out is what the job wrote: it no longer changes
    assert {n: sizes[n] for n in files} == {n: (out.parent / n).stat().st_size for n in files}
    assert {f["component"] for f in doc["files"]} == {"jobmanager", "tm-1"}
    assert "jobmanager.log" in sizes and doc["total_size"] == sum(sizes.values())
    table = run_cli("cluster", "logs", "--list", "tm-1", env={"COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    assert f"In {out.parent}:" in table.stdout and all(len(line) <= 80 for line in table.stdout.splitlines()), table.stdout
    row = next(line for line in table.stdout.splitlines() if f"{out.name}.1 " in line)
    assert "KiB" in row and "tm-1" in row, table.stdout
