"""Sources beyond the basics: a monitored directory (exactly-once across a SIGKILL and a
rescale), malformed input (a clear failure naming file and offset, or a side output), the
socket text source (no guarantee, and the job says so), and the guarantees table.

The end-to-end tests run on a real background cluster. Their sink is the exactly-once FileSink,
so "the output" is the set of *committed* (visible) part files, and the expected output is
computed here from the lines the test wrote.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import cli_json, wait_for
from flinkpy.connectors.base import ReaderContext
from flinkpy.connectors.file_source import FileSource, MalformedLineError, StreamFormat, owner_of
from flinkpy.connectors.socket_source import SocketTextSource

# -- kit ---------------------------------------------------------------------------------------


def committed_lines(out: Path) -> list[str]:
    """The lines of the committed part files (hidden in-progress/pending files do not count)."""
    lines: list[str] = []
    for path in sorted(out.rglob("*")):
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(out).parts):
            lines += path.read_text().splitlines()
    return lines


def drop_file(directory: Path, name: str, lines: list[str]) -> None:
    """Write a file hidden, then rename it in: a monitored directory sees it complete or not at all."""
    hidden = directory / f".{name}.tmp"
    hidden.write_text("".join(f"{line}\n" for line in lines))
    hidden.rename(directory / name)


MONITOR_JOB = '''
from flinkpy.common import Duration, Encoder, RestartStrategies, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import FileSink, FileSource, OutputFileConfig, RollingPolicy, StreamFormat
from flinkpy.datastream.connectors.file_system import BucketAssigner

env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(100)
env.set_restart_strategy(RestartStrategies.fixed_delay_restart(5, 0))
source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), {inbox!r})
          .monitor_continuously(Duration.of_millis(50)).build())
lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "inbox").uid("inbox")
sink = (FileSink.for_row_format({out!r}, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()).build())
lines.map(lambda line: line.upper()).uid("upper").sink_to(sink).uid("sink")
env.execute("monitor")
'''


def job_state(jid: str) -> str:
    return cli_json("job", "show", jid)["state"]


# -- a monitored directory ---------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_monitored_directory_is_exactly_once_across_a_kill_and_a_rescale(cluster, cli, tmp_path: Path) -> None:
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    job = tmp_path / "monitor.py"
    job.write_text(MONITOR_JOB.format(inbox=str(inbox), out=str(out)))
    expected: Counter[str] = Counter()

    def wave(tag: str, files: int, per_file: int) -> None:
        for f in range(files):
            lines = [f"{tag}-{f}-{i}" for i in range(per_file)]
            drop_file(inbox, f"{tag}-{f:03d}.txt", lines)
            expected.update(line.upper() for line in lines)

    def caught_up() -> bool:
        return Counter(committed_lines(out)) == expected

    wave("a", 6, 2000)  # present before the job starts
    res = cli("run", "-d", "-p", "2", "--json", str(job))
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    wave("b", 6, 2000)  # discovered while running
    wait_for(caught_up, timeout=30, message="waves a and b committed")

    # a task dies while more files arrive: the restored source neither skips nor repeats a file
    wave("c", 8, 20_000)
    assert cli("fault", "kill-task", jid, "--vertex", "inbox", "--subtask", "0").returncode == 0
    wave("d", 4, 2000)
    wait_for(caught_up, timeout=40, message="waves c and d committed after the kill")
    assert cli_json("job", "show", jid)["restarts"] >= 1

    # stop with a savepoint, resume at parallelism 3: the processed paths are re-split by owner
    stop = cli("stop", "--json", "--savepoint-path", str(tmp_path / "sp"), jid)
    assert stop.returncode == 0, stop.stderr
    savepoint = json.loads(stop.stdout)["location"]
    wave("e", 6, 2000)
    res = cli("run", "-d", "-p", "3", "-s", savepoint, "--json", str(job))
    assert res.returncode == 0, res.stderr
    jid2 = json.loads(res.stdout)["jobs"][0]["jid"]
    wait_for(caught_up, timeout=30, message="wave e committed after the rescale")
    got = Counter(committed_lines(out))
    assert got == expected, (sum((got - expected).values()), sum((expected - got).values()))
    assert cli("cancel", jid2).returncode == 0


def test_discovered_files_are_split_by_a_stable_owner(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    for f in range(12):
        drop_file(inbox, f"f{f:02d}.txt", [f"{f}"])
    (inbox / "_partial.txt").write_text("not yet\n")  # hidden: a file being written
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(inbox)).monitor_continuously(10).build()
    clock = [0.0]
    readers = []
    for i in range(3):
        reader = source.create_reader(ReaderContext(subtask_index=i, parallelism=3))
        reader._clock = lambda: clock[0]
        readers.append(reader)
    got = [sorted(r.poll(100)) for r in readers]
    assert sorted(x for g in got for x in g) == sorted(str(f) for f in range(12))
    for i, lines in enumerate(got):
        assert all(owner_of(str(inbox / f"f{int(x):02d}.txt"), 3) == i for x in lines)
    # nothing new: no record, and the source does not end (it is unbounded)
    assert readers[0].poll(100) == []
    drop_file(inbox, "late.txt", ["late"])
    clock[0] += 1
    assert sorted(x for r in readers for x in r.poll(100)) == ["late"]
    # state carries what was read: a restored reader does not read it again
    states = [r.snapshot_state() for r in readers]
    again = [source.create_reader(ReaderContext(subtask_index=i, parallelism=2, restored_state=states)) for i in range(2)]
    assert [r.poll(100) for r in again] == [[], []]


def test_a_missing_monitored_directory_is_waited_for(tmp_path: Path) -> None:
    inbox = tmp_path / "later"
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(inbox)).monitor_continuously(1).build()
    reader = source.create_reader(ReaderContext(subtask_index=0, parallelism=1))
    assert reader.poll(10) == []
    inbox.mkdir()
    drop_file(inbox, "x.txt", ["x"])
    wait_for(lambda: reader.poll(10) == ["x"], timeout=5, message="the file in the new directory")


# -- malformed lines ---------------------------------------------------------------------------


def test_a_malformed_line_fails_naming_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good\nbad \xff\xfe here\nalso good\n")
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(path)).build()
    reader = source.create_reader(ReaderContext(subtask_index=0, parallelism=1))
    with pytest.raises(MalformedLineError) as err:
        reader.poll(10)
    assert str(path) in str(err.value) and "byte offset 5" in str(err.value)
    assert "with_malformed_line_output" in err.value.remedy


def test_malformed_lines_go_to_the_side_output_when_asked(tmp_path: Path) -> None:
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import OutputTag, StreamExecutionEnvironment

    path = tmp_path / "mixed.txt"
    path.write_bytes(b"1\n2\n\xc3\x28\n3\n\xff\n4")
    malformed = OutputTag("malformed")
    env = StreamExecutionEnvironment.get_execution_environment()
    source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(path))
              .with_malformed_line_output(malformed).build())
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
    numbers = lines.map(lambda s: ("ok", int(s)))
    bad = lines.get_side_output(malformed).map(lambda m: ("bad", m.offset, m.data))
    got = sorted(numbers.union(bad).execute_and_collect("malformed"))
    assert got == [("bad", 4, b"\xc3\x28"), ("bad", 9, b"\xff"), ("ok", 1), ("ok", 2), ("ok", 3), ("ok", 4)]


@pytest.mark.timeout(60)
def test_a_job_reading_a_malformed_file_fails_with_the_location(tmp_path: Path, cli, flinkpy_home: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_bytes(b"fine\n" * 3 + b"\x80oops\n")
    job = tmp_path / "read.py"
    job.write_text(
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        f"env.read_text_file({str(path)!r}).print()\n"
        "env.execute('read')\n"
    )
    res = cli("run", str(job))
    assert res.returncode == 5, res.stderr
    assert f"malformed line in {path} at byte offset 15" in res.stderr


# -- the socket source -------------------------------------------------------------------------


class LineServer:
    """A TCP server on loopback that sends the given chunks to the first client, then closes."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.chunks = chunks
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            for chunk in self.chunks:
                conn.sendall(chunk)
        self.sock.close()


def test_socket_source_reads_lines_split_across_packets() -> None:
    server = LineServer([b"hello wor", b"ld\nsecond line\r\nthi", b"rd"])
    reader = SocketTextSource("127.0.0.1", server.port).create_reader(ReaderContext(0, 1))
    got: list[str] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        batch = reader.poll(100)
        if batch is None:
            break
        got += batch
    assert got == ["hello world", "second line", "third"]


def test_socket_source_unreachable_is_a_clear_error() -> None:
    from flinkpy.errors import ClusterUnreachableError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        reader = SocketTextSource("127.0.0.1", port).create_reader(ReaderContext(0, 1))
        with pytest.raises(ClusterUnreachableError, match=f"127.0.0.1:{port}"):
            reader.poll(10)


@pytest.mark.timeout(60)
def test_socket_job_runs_and_warns_that_it_has_no_guarantee(tmp_path: Path, cli, flinkpy_home: Path) -> None:
    words = [f"w{i % 7}" for i in range(500)]
    server = LineServer([(" ".join(words[i : i + 50]) + "\n").encode() for i in range(0, 500, 50)])
    job = tmp_path / "socket_count.py"
    job.write_text(
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.enable_checkpointing(200)\n"
        f"lines = env.socket_text_stream('127.0.0.1', {server.port})\n"
        "lines.flat_map(lambda l: [(w, 1) for w in l.split()]).key_by(lambda p: p[0]).sum(1).print()\n"
        "env.execute('socket count')\n"
    )
    res = cli("run", str(job))
    assert res.returncode == 0, res.stderr
    assert "gives no delivery guarantee" in res.stderr
    final: dict[str, int] = {}
    for line in res.stdout.splitlines():
        word, count = line.strip("()").replace("'", "").split(", ")
        final[word] = max(final.get(word, 0), int(count))
    assert final == dict(Counter(words))


# -- the guarantees table ----------------------------------------------------------------------


def test_info_reports_each_connector_and_the_end_to_end_guarantee(tmp_path: Path, cli) -> None:
    job = tmp_path / "g.py"
    job.write_text(
        "from flinkpy.common import Encoder, WatermarkStrategy\n"
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "from flinkpy.datastream.connectors import FileSink, NumberSequenceSource\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.enable_checkpointing(1000)\n"
        "n = env.from_source(NumberSequenceSource(1, 10), WatermarkStrategy.no_watermarks(), 'numbers')\n"
        f"n.sink_to(FileSink.for_row_format({str(tmp_path / 'o')!r}, Encoder.simple_string_encoder()).build())\n"
        "n.print()\n"
        "env.execute('g')\n"
    )
    plan = json.loads(cli("info", "--json", str(job)).stdout)
    g = plan["guarantees"]
    assert g["checkpointing"].startswith("EXACTLY_ONCE")
    assert [s["guarantee"] for s in g["sources"]] == ["exactly-once"]
    assert sorted(s["connector"] for s in g["sinks"]) == ["FileSink", "PrintSink"]
    assert g["end_to_end"] == "at-least-once"  # the print sink is the weak link
    human = cli("info", str(job))
    assert "end to end at-least-once" in human.stdout


def test_every_catalogued_connector_declares_its_guarantee() -> None:
    from flinkpy.connectors.guarantees import CATALOG, LEVELS

    for c in CATALOG:
        assert c.guarantee in LEVELS, (c.name, c.guarantee)
        assert c.needs, c.name


def test_the_connectors_page_table_is_generated_from_the_connectors() -> None:
    from commands.manpages import CONNECTORS_PAGE, TABLE_START, with_connectors_table

    text = CONNECTORS_PAGE.read_text()
    assert TABLE_START in text, f"{CONNECTORS_PAGE} holds the generated connectors table"
    assert with_connectors_table(text) == text, "run: python -m commands.manpages"


# -- the data generator ------------------------------------------------------------------------


def test_data_generator_resumes_exactly_at_another_parallelism() -> None:
    from flinkpy.connectors.datagen import DataGeneratorSource

    source = DataGeneratorSource(lambda i: i * 10, 1000)
    readers = [source.create_reader(ReaderContext(subtask_index=i, parallelism=2)) for i in range(2)]
    first = [x for r in readers for x in r.poll(150)]
    states = [r.snapshot_state() for r in readers]
    again = [source.create_reader(ReaderContext(subtask_index=i, parallelism=3, restored_state=states)) for i in range(3)]
    rest: list[int] = []
    for r in again:
        while (batch := r.poll(97)) is not None:
            rest += batch
    assert sorted(first + rest) == [i * 10 for i in range(1000)]


def test_data_generator_rate_limit_with_an_injected_clock() -> None:
    from flinkpy.connectors.datagen import DataGeneratorSource

    reader = DataGeneratorSource(str, None, records_per_second=100).create_reader(ReaderContext(0, 1))
    now = [0.0]
    reader._clock = lambda: now[0]
    assert reader.poll(1000) == ["0"]
    assert reader.poll(1000) == []  # ahead of the rate
    now[0] = 0.5
    assert len(reader.poll(1000)) == 50
    now[0] = 10.0
    assert len(reader.poll(10_000)) == 950
