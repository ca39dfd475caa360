"""The DataStream API end to end: every job here runs on an embedded cluster of real processes.

Expected results are computed in the test with plain Python, never copied from a run. Several
checks share one job where that is natural (each branch tags its records with a label and the
branches are unioned into one collect sink), because every embedded job costs real processes.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from flinkpy.common import Encoder, Row, Types, WatermarkStrategy
from flinkpy.datastream import (
    FlatMapFunction,
    MapFunction,
    ProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from flinkpy.datastream.connectors import FileSink, FileSource, NumberSequenceSource, OutputFileConfig, StreamFormat
from flinkpy.errors import InvalidProgramError, UsageError


def new_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


def plan_of(env: StreamExecutionEnvironment) -> dict:
    return json.loads(env.get_execution_plan())


# -- user functions (module level, so the task processes import them by reference) ------------


def split_generator(line):
    yield from line.split()


class Tokenizer(FlatMapFunction):
    def flat_map(self, value):
        return [w.upper() for w in value.split()]


class SquareEvens(ProcessFunction):
    def process_element(self, value, ctx):
        if value % 2 == 0:
            yield value * value
            yield -value


class Tag(MapFunction):
    """Tags every record with (label, subtask index, parallelism, job parameter) from open()."""

    def __init__(self, label: str, marker_dir: str | None = None):
        self.label = label
        self.marker_dir = marker_dir
        self.opened = None

    def open(self, runtime_context):
        self.opened = (
            runtime_context.get_index_of_this_subtask(),
            runtime_context.get_number_of_parallel_subtasks(),
            runtime_context.get_job_parameter("greeting", "no greeting"),
            runtime_context.get_job_parameter("absent", "the default"),
        )
        self.seen = 0

    def map(self, value):
        self.seen += 1
        return (self.label, *self.opened, value)

    def close(self):
        if self.marker_dir is not None:
            index = self.opened[0]
            Path(self.marker_dir, f"{self.label}-{index}").write_text(json.dumps([self.opened[1], self.seen]))


# -- stateless transformations -----------------------------------------------------------------


@pytest.mark.timeout(30)
def test_stateless_transformations_and_union_of_many_streams():
    lines = ["to be or not to be", "that is the question", "", "whether tis nobler"]
    numbers = list(range(-5, 40))
    env = new_env(2)
    text = env.from_collection(lines, type_info=Types.STRING())
    nums = env.from_collection(numbers)
    branches = [
        text.flat_map(split_generator).map(lambda w: ("gen", w)),
        text.flat_map(lambda line: line.split(), output_type=Types.STRING()).map(lambda w: ("list", w)),
        text.flat_map(Tokenizer()).map(lambda w: ("class", w)),
        nums.filter(lambda n: n % 3 == 0).map(lambda n: ("filter", n * 10), output_type=Types.TUPLE([Types.STRING(), Types.INT()])),
        nums.process(SquareEvens(), output_type=Types.LONG()).map(lambda n: ("process", n)),
        nums.map(lambda n: ("map", n + 1)),
    ]
    assert branches[3].get_type() == Types.TUPLE([Types.STRING(), Types.INT()])
    union = branches[0].union(*branches[1:])
    got = Counter(union.execute_and_collect())

    words = [w for line in lines for w in line.split()]
    expected = Counter()
    expected.update(("gen", w) for w in words)
    expected.update(("list", w) for w in words)
    expected.update(("class", w.upper()) for w in words)
    expected.update(("filter", n * 10) for n in numbers if n % 3 == 0)
    expected.update(("process", v) for n in numbers if n % 2 == 0 for v in (n * n, -n))
    expected.update(("map", n + 1) for n in numbers)
    assert got == expected


# -- keyed aggregations ------------------------------------------------------------------------

AGGREGATIONS = ("reduce", "sum", "min", "max", "min_by", "max_by")


def keyed_data(seed: int) -> tuple[list[tuple], list[Row], list[int]]:
    rng = random.Random(seed)
    tuples = [(rng.choice("abcde"), rng.randint(-20, 20), rng.randint(0, 9)) for _ in range(300)]
    rows = [Row(name=rng.choice(["x", "y", "z"]), value=rng.randint(0, 50), seq=i) for i in range(200)]
    ints = [rng.choice([-1, 1]) * rng.randint(1, 100) for _ in range(250)]
    return tuples, rows, ints


def build_aggregations(env: StreamExecutionEnvironment, tuples, rows, ints):
    t = env.from_collection(tuples).key_by(lambda r: r[0])
    r = env.from_collection(rows).key_by(lambda row: row.name)
    # keyed by sign, so that a running sum, min or max still shows its key
    i = env.from_collection(ints).key_by(lambda n: n > 0)
    outs = [
        t.reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))).map(lambda v: ("t-reduce", v[0], v)),
        t.sum(1).map(lambda v: ("t-sum", v[0], v)),
        t.min(1).map(lambda v: ("t-min", v[0], v)),
        t.max(1).map(lambda v: ("t-max", v[0], v)),
        t.min_by(1).map(lambda v: ("t-min_by", v[0], v)),
        t.max_by(1).map(lambda v: ("t-max_by", v[0], v)),
        r.sum("value").map(lambda v: ("r-sum", v.name, tuple(v))),
        r.max("value").map(lambda v: ("r-max", v.name, tuple(v))),
        r.min_by("value").map(lambda v: ("r-min_by", v.name, tuple(v))),
        r.max_by(1).map(lambda v: ("r-max_by", v.name, tuple(v))),
        i.sum().map(lambda v: ("i-sum", v > 0, v)),
        i.min().map(lambda v: ("i-min", v > 0, v)),
        i.max(0).map(lambda v: ("i-max", v > 0, v)),
    ]
    return outs[0].union(*outs[1:])


def running_model(tuples, rows, ints) -> dict[tuple[str, object], list]:
    """Each (aggregation, key)'s sequence of running results, as Flink defines them: min/max
    keep the first record's other fields, min_by/max_by the whole first record holding the
    extreme."""
    folds = {
        "reduce": lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2])),
        "sum": lambda a, b: (a[0], a[1] + b[1], a[2]),
        "min": lambda a, b: (a[0], min(a[1], b[1]), a[2]),
        "max": lambda a, b: (a[0], max(a[1], b[1]), a[2]),
        "min_by": lambda a, b: b if b[1] < a[1] else a,
        "max_by": lambda a, b: b if b[1] > a[1] else a,
    }
    out: dict[tuple[str, object], list] = defaultdict(list)

    def run(label, records, key, fold):
        acc: dict = {}
        for rec in records:
            k = key(rec)
            acc[k] = rec if k not in acc else fold(acc[k], rec)
            out[(label, k)].append(acc[k])

    for name, fold in folds.items():
        run(f"t-{name}", tuples, lambda x: x[0], fold)
    plain_rows = [(row.name, row.value, row.seq) for row in rows]
    run("r-sum", plain_rows, lambda x: x[0], folds["sum"])
    run("r-max", plain_rows, lambda x: x[0], folds["max"])
    run("r-min_by", plain_rows, lambda x: x[0], folds["min_by"])
    run("r-max_by", plain_rows, lambda x: x[0], folds["max_by"])
    run("i-sum", ints, lambda n: n > 0, lambda a, b: a + b)
    run("i-min", ints, lambda n: n > 0, min)
    run("i-max", ints, lambda n: n > 0, max)
    return out


def grouped(records) -> dict[tuple[str, object], list]:
    out: dict[tuple[str, object], list] = defaultdict(list)
    for label, key, value in records:
        out[(label, key)].append(value)
    return out


@pytest.mark.timeout(30)
def test_keyed_aggregations_streaming_emit_running_results():
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    tuples, rows, ints = keyed_data(seed)
    env = new_env(2)
    got = grouped(build_aggregations(env, tuples, rows, ints).execute_and_collect())
    # a key lives on one subtask and its updates travel one channel: per key, order is kept
    assert got == running_model(tuples, rows, ints)


@pytest.mark.timeout(30)
def test_keyed_aggregations_batch_emit_the_final_result_per_key():
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    tuples, rows, ints = keyed_data(seed)
    env = new_env(2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    result = build_aggregations(env, tuples, rows, ints)
    assert plan_of(env)["runtime_mode"] == "BATCH"
    got = grouped(result.execute_and_collect())
    expected = {k: [seq[-1]] for k, seq in running_model(tuples, rows, ints).items()}
    assert got == expected


# -- the plan ----------------------------------------------------------------------------------


def test_plan_reflects_names_uids_parallelism_and_chaining():
    env = new_env(3)
    src = env.from_source(NumberSequenceSource(1, 10), WatermarkStrategy.no_watermarks(), "numbers")
    a = src.map(lambda n: n).name("first").uid("uid-first")
    b = a.filter(lambda n: True).name("second")
    c = b.map(lambda n: n).name("third").start_new_chain()
    d = c.map(lambda n: n).name("fourth")
    e = d.map(lambda n: (n % 2, n)).name("fifth").disable_chaining()
    f = e.map(lambda n: n).name("sixth")
    g = f.key_by(lambda p: p[0]).sum(1).name("summed")
    h = g.rebalance().map(lambda n: n).name("narrow").set_parallelism(2)
    h.add_sink(lambda x: None).name("out").set_parallelism(2)
    plan = plan_of(env)
    nodes = {tuple(n["operators"]): n for n in plan["nodes"]}
    assert set(nodes) == {
        ("numbers", "first", "second"),
        ("third", "fourth"),
        ("fifth",),  # disable_chaining: neither chained to its input nor to its output
        ("sixth",),
        ("summed",),
        ("narrow", "out"),
    }, plan
    by_id = {n["id"]: n for n in plan["nodes"]}

    def inputs(ops):
        return [(tuple(by_id[p["id"]]["operators"]), p["ship_strategy"]) for p in nodes[ops]["predecessors"]]

    assert inputs(("numbers", "first", "second")) == []
    assert inputs(("third", "fourth")) == [(("numbers", "first", "second"), "FORWARD")]
    assert inputs(("fifth",)) == [(("third", "fourth"), "FORWARD")]
    assert inputs(("sixth",)) == [(("fifth",), "FORWARD")]
    assert inputs(("summed",)) == [(("sixth",), "HASH")]
    assert inputs(("narrow", "out")) == [(("summed",), "REBALANCE")]
    assert {k: n["parallelism"] for k, n in nodes.items()} == {k: (2 if k == ("narrow", "out") else 3) for k in nodes}
    assert nodes[("numbers", "first", "second")]["uids"] == [None, "uid-first", None]
    assert nodes[("numbers", "first", "second")]["pact"] == "Data Source"

    # the environment switch turns chaining off everywhere
    env2 = new_env(1)
    env2.disable_operator_chaining()
    env2.from_collection([1]).map(lambda n: n).print()
    assert [n["operators"] for n in plan_of(env2)["nodes"]] == [["Collection Source"], ["Map"], ["Print to Std. Out"]]


def test_build_time_errors_are_clear(flinkpy_home):
    env = new_env(2)
    ds = env.from_collection([1, 2, 3])
    with pytest.raises(InvalidProgramError, match=r"map\(\) needs a function.*got int"):
        ds.map(42)
    with pytest.raises(InvalidProgramError, match=r"flat_map\(\)"):
        ds.flat_map("not a function")
    with pytest.raises(InvalidProgramError, match=r"parallelism must be a positive integer"):
        ds.map(str).set_parallelism(0)
    with pytest.raises(InvalidProgramError, match="not parallel"):
        ds.set_parallelism(2)  # from_collection is a non-parallel source
    with pytest.raises(InvalidProgramError, match="uid 'same' is used by two operators"):
        ds.map(str).uid("same")
        ds.map(repr).uid("same")

    # forward() between parallelism 1 and 2 cannot be built
    env = new_env(2)
    env.from_collection([1, 2, 3]).forward().map(lambda n: n).print()
    with pytest.raises(InvalidProgramError, match=r"forward partitioning .*parallelism 1.*parallelism 2"):
        env.execute("forward mismatch")

    # BATCH needs bounded sources
    env = new_env(1)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.from_source(FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(flinkpy_home)).monitor_continuously(1000).build()).print()
    with pytest.raises(InvalidProgramError, match="BATCH execution mode needs bounded sources"):
        env.execute()

    # detached execution needs a cluster to detach from
    env = new_env(1)
    env.from_collection([1]).print()
    with pytest.raises(UsageError, match="detached execution needs a running cluster"):
        env.execute_async("detached")


# -- sources -----------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_sources_text_files_file_source_and_number_sequences(tmp_path):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    single = tmp_path / "single.txt"
    single_lines = [f"line {i} {rng.random()}" for i in range(50)]
    single.write_text("\n".join(single_lines) + "\n")
    directory = tmp_path / "dir"
    (directory / "sub").mkdir(parents=True)
    dir_lines: list[str] = []
    for i, rel in enumerate(["a.txt", "b.txt", "sub/c.txt"]):
        lines = [f"{rel}:{j}:{rng.randint(0, 10**6)}" for j in range(rng.randint(1, 40))]
        dir_lines += lines
        (directory / rel).write_text("\n".join(lines))  # the last line has no newline
    (directory / ".hidden").write_text("never read\n")

    env = new_env(2)
    outs = [
        env.read_text_file(str(single)).map(lambda s: ("text", None, s)),
        env.from_source(
            FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(directory)).build(),
            WatermarkStrategy.no_watermarks(),
            "dir",
        ).map(lambda s: ("dir", None, s)),
    ]
    ranges = {1: (0, 99), 2: (10, 1010), 3: (-7, 500)}
    for p, (lo, hi) in ranges.items():
        seq = env.from_source(NumberSequenceSource(lo, hi), WatermarkStrategy.no_watermarks(), f"seq{p}").set_parallelism(p)
        outs.append(seq.map(Tag(f"seq{p}")).set_parallelism(p).map(lambda t: (t[0], t[1:3], t[-1])).set_parallelism(p))
    got = list(outs[0].union(*outs[1:]).execute_and_collect())

    assert Counter(v for label, _, v in got if label == "text") == Counter(single_lines)
    assert Counter(v for label, _, v in got if label == "dir") == Counter(dir_lines)
    for p, (lo, hi) in ranges.items():
        mine = [(where, n) for label, where, n in got if label == f"seq{p}"]
        assert sorted(n for _, n in mine) == list(range(lo, hi + 1)), p
        assert {where for where, _ in mine} == {(i, p) for i in range(p)}
        # each subtask emits one contiguous share of the range
        for i in range(p):
            share = sorted(n for (index, _), n in mine if index == i)
            assert share == list(range(share[0], share[0] + len(share)))
            assert abs(len(share) - (hi - lo + 1) / p) <= 1


@pytest.mark.timeout(30)
def test_rich_functions_get_runtime_context_and_job_parameters(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    env = new_env(3)
    env.get_config().set_global_job_parameters({"greeting": "hello", "n": 7})
    src = env.from_source(NumberSequenceSource(1, 300), WatermarkStrategy.no_watermarks(), "numbers")
    got = list(src.rebalance().map(Tag("rich", str(markers))).execute_and_collect())
    assert sorted(v for *_, v in got) == list(range(1, 301))
    assert {tuple(t[1:5]) for t in got} == {(i, 3, "hello", "the default") for i in range(3)}
    per_subtask = Counter(t[1] for t in got)
    # close() ran in every subtask, after its last record
    closed = {p.name: json.loads(p.read_text()) for p in markers.iterdir()}
    assert closed == {f"rich-{i}": [3, per_subtask[i]] for i in range(3)}


# -- sinks -------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_file_sink_commits_every_record_exactly_once(tmp_path):
    out = tmp_path / "out"
    env = new_env(2)
    words = [f"w{i % 37}-{i}" for i in range(2000)]
    sink = (
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("pre").with_part_suffix(".txt").build())
        .build()
    )
    env.from_collection(words).rebalance().map(str.upper).sink_to(sink)
    env.execute("file sink")
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files and not [p for p in files if p.name.startswith(".")], f"uncommitted files: {files}"
    assert all(p.name.startswith("pre-") and p.name.endswith(".txt") for p in files)
    # both subtasks wrote: a part file name carries its writer's uuid (pre-<uuid>-<counter>.txt, as Flink's)
    assert len({p.name[len("pre-"):-len(".txt")].rsplit("-", 1)[0] for p in files}) == 2
    lines = [line for p in files for line in p.read_text().splitlines()]
    assert Counter(lines) == Counter(w.upper() for w in words)

