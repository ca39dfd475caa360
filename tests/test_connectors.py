"""Sources and sinks driven directly, without an engine: outputs, snapshots and restores."""

from __future__ import annotations

import itertools
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from flinkpy.connectors.base import ReaderContext, Source, SourceReader
from flinkpy.connectors.collection import CollectionSource
from flinkpy.connectors.file_sink import FileSinkWriter
from flinkpy.connectors.print_sink import DiscardingSink, PrintSink
from flinkpy.datastream.connectors.file_system import (
    BucketAssigner,
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
from flinkpy.errors import NotFoundError, UsageError

pytestmark = pytest.mark.timeout(30)


class LineEncoder:
    """Stands in for Encoder.simple_string_encoder(): str(record) and a newline, UTF-8."""

    def encode(self, record: Any) -> bytes:
        return f"{record}\n".encode()


@pytest.fixture(autouse=True)
def clean_memory_fs() -> Iterator[None]:
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs[:] = [""]
    yield
    fs.store.clear()
    fs.pseudo_dirs[:] = [""]


def ctx(i: int, p: int, state: list[Any] | None = None, **kw: Any) -> ReaderContext:
    return ReaderContext(subtask_index=i, parallelism=p, restored_state=state or [], **kw)


def drain(reader: SourceReader, batch: int = 1000) -> list:
    out: list = []
    while (got := reader.poll(batch)) is not None:
        out.extend(got)
    return out


def read_some(reader: SourceReader, n: int, batch: int) -> list:
    """Poll until at least ``n`` records were read (or the input ended)."""
    out: list = []
    while len(out) < n and (got := reader.poll(batch)) is not None:
        out.extend(got)
    return out


def run_with_restore(
    source: Source, p_old: int, p_new: int, reads: list[int], batch: int, union: bool
) -> list:
    """Read part of every old subtask's share, snapshot, restore at ``p_new``, read the rest."""
    source = pickle.loads(pickle.dumps(source))  # the job graph ships sources pickled
    emitted: list = []
    states = []
    for i in range(p_old):
        reader = source.create_reader(ctx(i, p_old))
        emitted.extend(read_some(reader, reads[i], batch))
        states.append(pickle.loads(pickle.dumps(reader.snapshot_state())))
        reader.close()
    for j in range(p_new):
        given = states if union else [s for k, s in enumerate(states) if k % p_new == j]
        if not union and not given:
            continue  # subset assignment leaves this subtask idle: nothing was assigned to it
        emitted.extend(drain(source.create_reader(ctx(j, p_new, given)), batch))
    return emitted


# ---- NumberSequenceSource ----


def test_number_sequence_splits_contiguously() -> None:
    src = NumberSequenceSource(1, 10)
    shares = [drain(src.create_reader(ctx(i, 3)), batch=2) for i in range(3)]
    assert shares == [[1, 2, 3], [4, 5, 6], [7, 8, 9, 10]]
    assert src.create_reader(ctx(0, 1)).poll(4) == [1, 2, 3, 4]


def test_number_sequence_refuses_reversed_range() -> None:
    with pytest.raises(UsageError):
        NumberSequenceSource(5, 4)


def test_number_sequence_restore_same_parallelism_resumes_exactly() -> None:
    src = NumberSequenceSource(0, 99)
    reader = src.create_reader(ctx(1, 2))
    assert reader.poll(7) == list(range(50, 57))
    restored = src.create_reader(ctx(1, 2, [reader.snapshot_state()]))
    assert drain(restored) == list(range(57, 100))


@pytest.mark.parametrize("union", [True, False])
def test_number_sequence_restore_any_parallelism_exactly_once(union: bool) -> None:
    for end, p_old, p_new in itertools.product([0, 1, 6, 13], [1, 2, 3, 5], [1, 2, 4, 7]):
        if not union and p_new > p_old:
            continue  # without union state, scaling up cannot tell a fresh start from "nothing"
        span = end + 1
        for progress in range(0, span + 1, max(1, span // 4)):
            reads = [progress // p_old + (i % 2) for i in range(p_old)]
            for batch in (1, 3):
                src = NumberSequenceSource(0, end)
                got = run_with_restore(src, p_old, p_new, reads, batch, union)
                assert sorted(got) == list(range(span)), (end, p_old, p_new, reads, batch)


def test_number_sequence_restored_twice() -> None:
    src = NumberSequenceSource(0, 29)
    out: list[int] = []
    states = []
    for i in range(2):
        r = src.create_reader(ctx(i, 2))
        out += r.poll(4)
        states.append(r.snapshot_state())
    states2 = []
    for j in range(3):
        r = src.create_reader(ctx(j, 3, states))
        out += r.poll(2)
        states2.append(r.snapshot_state())
    for k in range(2):
        out += drain(src.create_reader(ctx(k, 2, states2)))
    assert sorted(out) == list(range(30))


# ---- CollectionSource ----


def test_collection_keeps_order_within_subtasks() -> None:
    items = list("abcdefg")
    src = CollectionSource(items)
    assert drain(src.create_reader(ctx(0, 1)), batch=3) == items
    shares = [drain(src.create_reader(ctx(i, 2))) for i in range(2)]
    assert shares == [list("abc"), list("defg")]


@pytest.mark.parametrize("union", [True, False])
def test_collection_restore_exactly_once(union: bool) -> None:
    items = [f"x{i}" for i in range(11)]
    for p_old, p_new, done in itertools.product([1, 2, 3], [1, 2, 4], [0, 1, 3, 11]):
        if not union and p_new > p_old:
            continue
        got = run_with_restore(CollectionSource(items), p_old, p_new, [done] * p_old, 2, union)
        assert sorted(got) == sorted(items), (p_old, p_new, done)


def test_collection_restore_skips_emitted() -> None:
    src = CollectionSource([1, 2, 3, 4])
    r = src.create_reader(ctx(0, 1))
    assert r.poll(3) == [1, 2, 3]
    assert drain(src.create_reader(ctx(0, 1, [r.snapshot_state()]))) == [4]


# ---- FileSource ----


def text_source(*paths: str) -> FileSource:
    return FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()


def test_file_source_reads_lines_and_strips_only_newline(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"one\n  two  \r\n\nlast")
    reader = text_source(str(tmp_path / "a.txt")).create_reader(ctx(0, 1))
    assert drain(reader, batch=2) == ["one", "  two  ", "", "last"]
    assert reader.poll(5) is None


def test_file_source_expands_directories_skipping_hidden(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text("b1\nb2\n")
    (tmp_path / "a.txt").write_text("a1\n")
    (tmp_path / "_SUCCESS").write_text("no\n")
    (tmp_path / ".a.txt.crc").write_text("no\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("c1\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "d.txt").write_text("no\n")
    assert drain(text_source(str(tmp_path)).create_reader(ctx(0, 1))) == ["a1", "b1", "b2", "c1"]
    # file k goes to subtask k % p
    shares = [drain(text_source(str(tmp_path)).create_reader(ctx(i, 2))) for i in range(2)]
    assert shares == [["a1", "c1"], ["b1", "b2"]]


def test_file_source_memory_fs_and_file_url(tmp_path: Path) -> None:
    fsspec.filesystem("memory").pipe("/in/x.txt", b"m1\nm2\n")
    (tmp_path / "y.txt").write_text("f1\n")
    src = text_source("memory://in", f"file://{tmp_path}/y.txt")
    assert drain(src.create_reader(ctx(0, 1))) == ["m1", "m2", "f1"]


def test_file_source_missing_path_names_it() -> None:
    with pytest.raises(NotFoundError, match="memory://nope"):
        text_source("memory://nope").create_reader(ctx(0, 1))


def test_file_source_decodes_charset(tmp_path: Path) -> None:
    (tmp_path / "l.txt").write_bytes("café\nñ\n".encode("latin-1"))
    src = FileSource.for_record_stream_format(
        StreamFormat.text_line_format("ISO-8859-1"), str(tmp_path)
    ).build()
    assert drain(src.create_reader(ctx(0, 1))) == ["café", "ñ"]
    with pytest.raises(UsageError):
        StreamFormat.text_line_format("UTF-16")


def test_file_source_restores_at_exact_line_across_small_blocks(tmp_path: Path) -> None:
    lines = [f"line {i} é" * (i % 4) for i in range(200)]
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    src = text_source(str(tmp_path / "big.txt"))
    from flinkpy.connectors.file_source import FileSourceReader

    for cut in (0, 1, 37, 199, 200):
        # tiny blocks, so lines straddle block boundaries; stop after exactly `cut` lines
        reader = FileSourceReader(ctx(0, 1), [[0, str(tmp_path / "big.txt"), 0]], StreamFormat(), 7)
        first = []
        while len(first) < cut:
            first += reader.poll(min(5, cut - len(first)))
        state = reader.snapshot_state()
        rest = drain(src.create_reader(ctx(0, 1, [state])), batch=3)
        assert first + rest == lines, cut


@pytest.mark.parametrize("union", [True, False])
def test_file_source_restore_other_parallelism_exactly_once(union: bool) -> None:
    mem = fsspec.filesystem("memory")
    expected = []
    for f in range(5):
        content = [f"f{f}-{n}" for n in range(f + 2)]
        expected += content
        mem.pipe(f"/d/p{f}.txt", ("\n".join(content) + "\n").encode())
    for p_old, p_new, done in itertools.product([1, 2, 3], [1, 2, 4], [0, 1, 3, 100]):
        if not union and p_new > p_old:
            continue
        got = run_with_restore(text_source("memory://d"), p_old, p_new, [done] * p_old, 2, union)
        assert sorted(got) == sorted(expected), (p_old, p_new, done)


def test_file_source_builder_modes() -> None:
    from flinkpy.common.time import Duration
    from flinkpy.connectors.base import Boundedness

    builder = FileSource.for_record_stream_format(StreamFormat.text_line_format(), "memory://d")
    assert builder.build().get_boundedness() is Boundedness.BOUNDED
    cont = builder.monitor_continuously(Duration.of_seconds(5)).build()
    assert cont.boundedness is Boundedness.CONTINUOUS_UNBOUNDED
    assert cont.discovery_interval_ms == 5000
    assert builder.process_static_file_set().build().boundedness is Boundedness.BOUNDED


# ---- FileSink ----


def sink(base: str, **kw: Any) -> FileSink:
    b = FileSink.for_row_format(base, kw.pop("encoder", LineEncoder()))
    b = b.with_bucket_assigner(kw.pop("assigner", BucketAssigner.base_path_bucket_assigner()))
    b = b.with_output_file_config(
        OutputFileConfig.builder().with_part_prefix("pre").with_part_suffix(".ext").build()
    )
    if "policy" in kw:
        b = b.with_rolling_policy(kw.pop("policy"))
    return b.build()


def listing(base: str) -> tuple[dict[str, bytes], list[str]]:
    """(visible files -> content, hidden file names) under a base path."""
    fs, root = fsspec.core.url_to_fs(base)
    visible: dict[str, bytes] = {}
    hidden: list[str] = []
    if not fs.exists(root):
        return visible, hidden
    for path in sorted(fs.find(root)):
        rel = path[len(root.rstrip("/")) + 1 :]
        if rel.rsplit("/", 1)[-1].startswith("."):
            hidden.append(rel)
        else:
            visible[rel] = fs.cat_file(path)
    return visible, hidden


@pytest.fixture(params=["memory", "local"])
def base(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://out" if request.param == "memory" else str(tmp_path / "out")


def test_file_sink_two_phase_commit_visibility(base: str) -> None:
    w = sink(base).create_writer(ctx(0, 2, job_id="j1", operator_name="sink"))
    w.write(["a", "b"])
    assert listing(base)[0] == {}
    w.flush(False)
    state = w.snapshot_state(1)
    assert len(state["pending"]) == 1
    visible, hidden = listing(base)
    assert visible == {} and len(hidden) == 1 and ".inprogress." in hidden[0]
    w.write(["c"])
    w.snapshot_state(2)
    w.notify_checkpoint_complete(1)
    visible, hidden = listing(base)
    assert list(visible.values()) == [b"a\nb\n"] and len(hidden) == 1
    (name,) = visible
    # Flink's name: prefix, the writer's uuid, the part counter, suffix (no subtask index)
    assert re.fullmatch(r"pre-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-0\.ext", name), name
    w.notify_checkpoint_complete(2)
    visible, hidden = listing(base)
    assert sorted(visible.values()) == [b"a\nb\n", b"c\n"] and hidden == []
    w.close()


def test_file_sink_end_of_input_commits_everything(base: str) -> None:
    w = sink(base).create_writer(ctx(0, 1))
    w.write([1, 2])
    w.snapshot_state(1)  # never notified
    w.write([3])
    w.flush(True)
    w.close()
    visible, hidden = listing(base)
    assert b"".join(visible[k] for k in sorted(visible, key=lambda n: n[-5:])) == b"1\n2\n3\n"
    assert hidden == []


def test_file_sink_restore_commits_pending_and_deletes_strays(base: str) -> None:
    s = sink(base)
    c = dict(job_id="j1", operator_name="sink")
    w = s.create_writer(ctx(0, 1, **c))
    w.write(["kept"])
    state = pickle.loads(pickle.dumps(w.snapshot_state(5)))
    w.write(["after checkpoint: must vanish"])
    w.snapshot_state(6)  # pending for a checkpoint that never completes
    w.write(["in progress: must vanish"])
    w.close()  # the task dies
    other_job = s.create_writer(ctx(0, 1, job_id="j2", operator_name="sink"))
    other_job.write(["another job's file"])
    other_job.close()
    assert len(listing(base)[1]) == 4  # 1 pending, 2 strays, 1 of another job
    restored = s.create_writer(ctx(0, 1, [state], **c))
    visible, hidden = listing(base)
    assert list(visible.values()) == [b"kept\n"]
    assert len(hidden) == 1  # only the other job's in-progress file is left alone
    # restoring from the same state again (a second failure) is harmless
    s.create_writer(ctx(0, 1, [state], **c))
    assert list(listing(base)[0].values()) == [b"kept\n"]
    restored.write(["new"])
    restored.flush(True)
    assert sorted(listing(base)[0].values()) == [b"kept\n", b"new\n"]


def test_file_sink_scale_down_cleans_departed_subtasks() -> None:
    s = sink("memory://out")
    states = []
    for i in range(3):
        w = s.create_writer(ctx(i, 3))
        w.write([f"s{i}"])
        states.append(w.snapshot_state(1))
        w.write([f"lost{i}"])
        w.close()
    for j in range(2):
        s.create_writer(ctx(j, 2, states))
    visible, hidden = listing("memory://out")
    assert sorted(visible.values()) == [b"s0\n", b"s1\n", b"s2\n"] and hidden == []


def test_file_sink_rolls_by_size(base: str) -> None:
    policy = RollingPolicy.default_rolling_policy(part_size=10, rollover_interval=10**9)
    w = sink(base, policy=policy).create_writer(ctx(0, 1))
    w.write(["aaaa", "bbbb", "cccc", "dd"])  # 5 bytes each: 2 per part
    w.write(["e"])
    w.flush(True)
    visible, _ = listing(base)
    by_counter = sorted(visible.items(), key=lambda kv: int(kv[0].rsplit("-", 1)[1][:-4]))
    assert [v for _, v in by_counter] == [b"aaaa\nbbbb\n", b"cccc\ndd\ne\n"]


def test_file_sink_rolls_by_time_with_injected_clock() -> None:
    now = [0]
    policy = RollingPolicy.default_rolling_policy(
        part_size=10**9, rollover_interval=1000, inactivity_interval=300
    )
    w = FileSinkWriter(sink("memory://out", policy=policy), ctx(0, 1), clock_ms=lambda: now[0])
    w.write(["a"])
    now[0] = 200
    w.write(["b"])  # still active
    now[0] = 600
    w.write(["c"])  # 400 ms idle: rolls
    now[0] = 1500
    w.write(["d"])  # 900 ms idle: rolls
    w.flush(True)
    assert sorted(listing("memory://out")[0].values()) == [b"a\nb\n", b"c\n", b"d\n"]


def test_file_sink_on_checkpoint_policy_rolls_only_at_snapshot() -> None:
    policy = RollingPolicy.on_checkpoint_rolling_policy()
    w = sink("memory://out", policy=policy).create_writer(ctx(0, 1))
    w.write(["x" * 100] * 50)
    w.snapshot_state(1)
    w.notify_checkpoint_complete(1)
    w.write(["y"])
    w.snapshot_state(2)
    w.notify_checkpoint_complete(2)
    values = sorted(listing("memory://out")[0].values(), key=len)
    assert values == [b"y\n", (b"x" * 100 + b"\n") * 50]


def test_file_sink_date_time_buckets() -> None:
    assigner = BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH", "UTC")
    hour = 3_600_000
    now = [0]
    w = FileSinkWriter(sink("memory://out", assigner=assigner), ctx(0, 1), clock_ms=lambda: now[0])
    w.write(["h0"])
    now[0] = 25 * hour
    w.write(["h25"])
    w.flush(True)
    visible, _ = listing("memory://out")
    assert {k.split("/")[0]: v for k, v in visible.items()} == {
        "1970-01-01--00": b"h0\n",
        "1970-01-02--01": b"h25\n",
    }
    with pytest.raises(UsageError):
        BucketAssigner.date_time_bucket_assigner("yyyy-QQ")


def test_file_sink_with_the_real_encoder(tmp_path: Path) -> None:
    from flinkpy.common.serialization import Encoder

    w = sink(str(tmp_path), encoder=Encoder.simple_string_encoder()).create_writer(ctx(0, 1))
    w.write(["héllo", 42])
    w.flush(True)
    assert list(listing(str(tmp_path))[0].values()) == ["héllo\n42\n".encode()]


# ---- PrintSink, DiscardingSink ----


@pytest.mark.parametrize(
    "identifier, index, parallelism, expected",
    [
        (None, 0, 1, "1\nx\n"),
        (None, 2, 4, "3> 1\n3> x\n"),
        ("out", 0, 1, "out> 1\nout> x\n"),
        ("out", 1, 2, "out:2> 1\nout:2> x\n"),
    ],
)
def test_print_sink_prefixes(
    capsys: pytest.CaptureFixture[str],
    identifier: str | None,
    index: int,
    parallelism: int,
    expected: str,
) -> None:
    PrintSink(identifier).create_writer(ctx(index, parallelism)).write([1, "x"])
    assert capsys.readouterr().out == expected


def test_print_sink_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    writer = pickle.loads(pickle.dumps(PrintSink(to_stderr=True))).create_writer(ctx(0, 1))
    writer.write(["e"])
    writer.write([])
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "e\n")


def test_discarding_sink(capsys: pytest.CaptureFixture[str]) -> None:
    w = DiscardingSink().create_writer(ctx(0, 1))
    w.write([1, 2])
    w.flush(True)
    assert capsys.readouterr().out == ""
