"""IcebergSink against a real pyiceberg SQL catalog (sqlite, a file:// warehouse), shared by the
module; each test writes its own table.

- the protocol driven directly (no cluster): files written before the barrier are in no
  snapshot, the completed checkpoint makes them one snapshot, a replayed commit is skipped, and
  the files of an attempt that died after the checkpoint are deleted by its successor;
- jobs on a real background cluster: the committer task SIGKILLed right after checkpoint 2
  completed and before its commit, then a TaskManager SIGKILLed; a stop-with-savepoint and a
  resume at another parallelism; every checkpoint one snapshot of both writers' files. After a
  stop-with-savepoint an independent pyiceberg scan must hold every record up to the savepoint's
  source position exactly once, and no data file may be left outside the table;
- bad input: a missing catalog, a missing table, records that do not fit, upserts: one line,
  an exit code each.

The expected rows are computed here: the jobs map n of 1, 2, ... to ``(n, n*n)``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, wait_for
from flinkpy.common import RestartStrategies, Types, WatermarkStrategy
from flinkpy.connectors.base import ReaderContext
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import DataGeneratorSource
from flinkpy.datastream.connectors.iceberg import IcebergSchemaError, IcebergSink, IcebergUpsertUnsupportedError
from flinkpy.errors import ConfigurationError, ExitCode, NotFoundError
from test_recovery import exception_entries, job_show, start, vertex_id  # noqa: F401 - ``start`` is a fixture

pyiceberg_catalog = pytest.importorskip("pyiceberg.catalog")
from pyiceberg.schema import Schema  # noqa: E402
from pyiceberg.types import LongType, NestedField  # noqa: E402

@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The properties of a SQL catalog on sqlite with a ``db`` namespace."""
    root = tmp_path_factory.mktemp("iceberg")
    (root / "warehouse").mkdir()
    properties = {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}/warehouse"}
    pyiceberg_catalog.load_catalog("default", **properties).create_namespace("db")
    return properties


def create_table(properties: dict[str, str], name: str, width: int = 0) -> Any:
    """``db.<name>`` of columns n and sq; partitioned by ``truncate(width, n)`` if ``width``."""
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import TruncateTransform

    schema = Schema(NestedField(1, "n", LongType(), required=True), NestedField(2, "sq", LongType(), required=False))
    spec = PartitionSpec(PartitionField(1, 1000, TruncateTransform(width), "n_range")) if width else UNPARTITIONED_PARTITION_SPEC
    return pyiceberg_catalog.load_catalog("default", **properties).create_table(f"db.{name}", schema, partition_spec=spec)


def reload(properties: dict[str, str], name: str) -> Any:
    return pyiceberg_catalog.load_catalog("default", **properties).load_table(f"db.{name}")


def rows(table: Any) -> Counter:
    return Counter((r["n"], r["sq"]) for r in table.scan().to_arrow().to_pylist())


def summaries(table: Any) -> list[dict[str, str]]:
    return [dict(s.summary.additional_properties) for s in table.metadata.snapshots]


def orphans(table: Any) -> list[str]:
    """Parquet files under the table's data/ that no snapshot holds."""
    data = Path(table.location().removeprefix("file://")) / "data"
    live = set(table.inspect.files().column("file_path").to_pylist()) if table.current_snapshot() else set()
    return [p.name for p in data.glob("*.parquet") if f"file://{p}" not in live]


def square(n: int) -> tuple[int, int]:
    return (n, n * n)


def expected(upto: int) -> Counter:
    return Counter(square(n) for n in range(1, upto + 1))


def ctx(subtask: int, parallelism: int, states: list | None = None) -> ReaderContext:
    return ReaderContext(subtask_index=subtask, parallelism=parallelism, job_id="job-a", operator_name="table",
                         restored_state=list(states or []))


# -- the protocol, driven directly ----------------------------------------------------------


@pytest.mark.timeout(30)
def test_two_writers_files_show_at_the_completed_checkpoint_as_one_snapshot_a_replay_is_skipped_and_dead_files_go(catalog) -> None:
    """The writers and the committer driven directly: what the engine does around barriers."""
    create_table(catalog, "protocol")
    sink = IcebergSink(catalog, "db.protocol", target_file_rows=100)
    writers = [sink.create_writer(ctx(i, 2)) for i in range(2)]
    committer = sink.committer().create_writer(ctx(0, 1))
    for w in writers + [committer]:
        w.open()
    for lo in (1, 101, 201):  # two files written on the way, one at the barrier
        writers[0].write([square(n) for n in range(lo, min(lo + 100, 251))])
    writers[1].write([square(n) for n in range(251, 301)])
    for w in writers:  # before barrier 1 leaves each writer: its committable goes to the committer
        committer.write(w.prepare_commit(1))
    state = committer.snapshot_state(1)
    table = reload(catalog, "protocol")
    assert table.current_snapshot() is None and len(orphans(table)) == 4, "prepared files must stay invisible"

    committer.notify_checkpoint_complete(1)
    table = reload(catalog, "protocol")
    assert rows(table) == expected(300)
    (summary,) = summaries(table)  # one snapshot for both writers
    assert summary["flink.job-id"] == "job-a" and summary["flink.max-committed-checkpoint-id"] == "1", summary
    assert summary["added-data-files"] == "4" and len(summary["flinkpy.transaction-ids"].split(",")) == 2, summary

    # the attempt writes on after checkpoint 1 (two files, one of them handed over) and dies;
    # the next attempt restores checkpoint 1, whose commit it replays (skipped: already in a
    # snapshot) and, once its first checkpoint completed, deletes the dead attempt's files
    writers[0].write([square(n) for n in range(301, 401)])
    committer.write(writers[0].prepare_commit(2))
    writers[1].write([square(n) for n in range(401, 501)])
    assert len(orphans(reload(catalog, "protocol"))) == 2
    again = sink.committer().create_writer(replace(ctx(0, 1, [state]), attempt=1))
    again.open()
    table = reload(catalog, "protocol")
    assert len(table.metadata.snapshots) == 1 and rows(table) == expected(300)
    writer = sink.create_writer(replace(ctx(0, 1), attempt=1))
    writer.open()
    writer.write([square(n) for n in range(301, 351)])
    again.write(writer.prepare_commit(2))
    again.snapshot_state(2)
    again.notify_checkpoint_complete(2)
    table = reload(catalog, "protocol")
    assert rows(table) == expected(350) and len(table.metadata.snapshots) == 2 and orphans(table) == []
    writer.write([square(n) for n in range(351, 401)])
    again.write(writer.prepare_commit(None))
    again.flush(True)  # the end of the input commits
    table = reload(catalog, "protocol")
    assert rows(table) == expected(400) and len(table.metadata.snapshots) == 3 and orphans(table) == []

    # a savepoint of the earlier layout (each writer committed its own files) holds its pending
    # commits in the writer's state: the restored writer hands them to the committer
    old = sink.create_writer(ctx(0, 1))
    old.open()
    old.write([square(n) for n in range(401, 451)])
    heir = sink.create_writer(ctx(0, 1, [{"prefix": "fp-old", "subtask": 0, "parallelism": 1, "pending": old.prepare_commit(3)}]))
    heir.open()
    again.write(heir.prepare_commit(4))
    again.notify_checkpoint_complete(4)
    assert rows(reload(catalog, "protocol")) == expected(450)


@pytest.mark.timeout(30)
def test_the_plan_runs_the_writers_at_the_sinks_parallelism_and_one_committer_after_them(catalog) -> None:
    import json

    create_table(catalog, "planned")
    for writers, vertices in ((3, [("Source: numbers", 1), ("table: Writer", 3), ("table: Committer", 1)]),
                              (1, [("Source: numbers -> table: Writer -> table: Committer", 1)])):
        env = StreamExecutionEnvironment.get_execution_environment()
        numbers = env.from_collection([square(n) for n in range(5)], Types.TUPLE([Types.LONG(), Types.LONG()])).name("numbers")
        numbers.sink_to(IcebergSink(catalog, "db.planned")).name("table").uid("table").set_parallelism(writers)
        nodes = json.loads(env.get_execution_plan())["nodes"]
        assert [(n["contents"], n["parallelism"]) for n in nodes] == vertices, nodes
        # the program's own graph keeps the one sink (the Spark runner and `flinkpy info` read it)
        assert [n.kind for n in env._graph.nodes.values()] == ["source", "sink"]


@pytest.mark.timeout(90)
def test_a_bounded_job_commits_every_writers_rows_once_in_one_snapshot_at_its_final_checkpoint(catalog) -> None:
    """Two writers and the committer on an embedded cluster: the final checkpoint after the end
    of the input commits both writers' files together (with checkpointing on, nothing else does)."""
    create_table(catalog, "bounded")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(60_000)  # no periodic checkpoint in time: only the final one commits
    env.from_collection([square(n) for n in range(1, 401)], Types.TUPLE([Types.LONG(), Types.LONG()])) \
        .rebalance().sink_to(IcebergSink(catalog, "db.bounded")).name("table").set_parallelism(2)
    env.execute("bounded squares into iceberg")
    table = reload(catalog, "bounded")
    assert rows(table) == expected(400)
    (summary,) = summaries(table)
    assert len(summary["flinkpy.transaction-ids"].split(",")) == 2, summary
    assert orphans(table) == []


@pytest.mark.timeout(30)
def test_a_missing_table_is_created_for_the_streams_type_partitioned_as_the_builder_says(catalog) -> None:
    """Opt-in: ``sink_to`` creates the table from the stream's Types with the builder's partition
    spec, and records written through the protocol land in one file per partition value."""
    import datetime

    builder = IcebergSink.builder().set_catalog_properties(catalog).set_table("db.created")
    with pytest.raises(NotFoundError, match=r"the Iceberg table 'db.created' does not exist"):
        builder.build()  # without the setting a missing table stays refused
    with pytest.raises(ConfigurationError, match=r"partitions only a table it creates.*set_create_table_if_missing"):
        builder.set_partition_by("id").build()
    sink = builder.set_create_table_if_missing().set_partition_by(("ts", "day"), ("id", "truncate[20]")).build()
    row = Types.ROW_NAMED(["id", "name", "ts"], [Types.LONG(), Types.STRING(), Types.SQL_TIMESTAMP()])
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([(1, "a", datetime.datetime(2026, 1, 1))], row).sink_to(sink)

    table = reload(catalog, "created")
    assert [(f.name, str(f.field_type), f.required) for f in table.schema().fields] == [
        ("id", "long", False), ("name", "string", False), ("ts", "timestamp", False)]
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("ts_day", "day"), ("id_trunc_20", "truncate[20]")]
    days = [datetime.datetime(2026, 1, d, 12) for d in (1, 2, 3)]
    w = sink.create_writer(ctx(0, 1))
    w.open()
    w.write([{"id": i, "name": f"n{i}", "ts": days[i % 3]} for i in range(60)])
    committer = sink.committer().create_writer(ctx(0, 1))
    committer.open()
    committer.write(w.prepare_commit(1))
    committer.notify_checkpoint_complete(1)
    table = reload(catalog, "created")
    assert table.scan().count() == 60
    partitions = {(r["partition"]["ts_day"], r["partition"]["id_trunc_20"]) for r in table.inspect.files().to_pylist()}
    assert partitions == {(d.date(), lo) for d in days for lo in (0, 20, 40)}, partitions
    assert len(table.inspect.files()) == 9

    # a second sink finds the table made and checks the stream against it; an existing table
    # keeps its spec; the stream's type must name columns
    again = IcebergSink(catalog, "db.created", create_if_missing=True, partition_by=[("name", "identity")])
    assert again.columns == [("id", "long", False), ("name", "string", False), ("ts", "timestamp", False)]
    assert [f.name for f in reload(catalog, "created").spec().fields] == ["ts_day", "id_trunc_20"]
    untyped = IcebergSink(catalog, "db.untyped", create_if_missing=True)
    with pytest.raises(IcebergSchemaError, match=r"cannot create Iceberg table 'db.untyped': the stream's type .* says no columns"):
        untyped.for_record_type(Types.PICKLED_BYTE_ARRAY())
    with pytest.raises(ConfigurationError, match=r"cannot partition Iceberg table 'db.untyped' by 'fortnight' of 'n'"):
        IcebergSink(catalog, "db.untyped", create_if_missing=True, partition_by=[("n", "fortnight")]).for_record_type(
            Types.ROW_NAMED(["n"], [Types.LONG()]))
    with pytest.raises(ConfigurationError, match=r"by 'bucket\[4\]' of 'n'.*cannot commit files of a transform that does not preserve order"):
        IcebergSink(catalog, "db.untyped", create_if_missing=True, partition_by=[("n", "bucket[4]")]).for_record_type(
            Types.ROW_NAMED(["n"], [Types.LONG()]))
    # an existing table of such a transform is refused when the sink is built, not at its first commit
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import BucketTransform

    pyiceberg_catalog.load_catalog("default", **catalog).create_table(
        "db.bucketed", Schema(NestedField(1, "n", LongType(), required=True)),
        partition_spec=PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "n_bucket")))
    with pytest.raises(ConfigurationError, match=r"cannot commit to Iceberg table 'db.bucketed': it is partitioned by n_bucket \(bucket\[4\]\)"):
        IcebergSink(catalog, "db.bucketed")


# -- jobs on a cluster ----------------------------------------------------------------------
#
# The source is one unbounded, paced subtask, so that what a stop-with-savepoint leaves in the
# table is exactly the squares of 1..M, M the source's position in the savepoint: a gap, a row
# twice or a row beyond the savepoint would show. (A bounded source would not do: the sink's task
# takes a few seconds to import pyiceberg and open the catalog, and by then a fast source has
# filled the channels before the first checkpoint.)

#: records per second of the source
RATE = 1_000


def squares_env(catalog: dict[str, str], table: str, *, parallelism: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(500)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    numbers = env.from_source(
        DataGeneratorSource(lambda i: i + 1, None, records_per_second=RATE), WatermarkStrategy.no_watermarks(), "numbers"
    ).uid("numbers").set_parallelism(1)
    squares = numbers.map(square, output_type=Types.TUPLE([Types.LONG(), Types.LONG()])).uid("square").set_parallelism(1)
    sink = IcebergSink.builder().set_catalog_properties(catalog).set_table(f"db.{table}").set_target_file_rows(1_000).build()
    # rebalance: the sink is its own task, so a crash point on it kills only the writer
    squares.rebalance().sink_to(sink).name("table").uid("table")
    return env


def stop_with_savepoint(job_id: str, directory: Path) -> tuple[str, int]:
    """``flinkpy stop --savepoint-path``: the savepoint's location and the source's position in
    it (how many numbers it had emitted)."""
    import json

    stop = run_cli("stop", "--json", "--savepoint-path", str(directory), job_id)
    assert stop.returncode == 0, stop.stderr
    location = json.loads(stop.stdout)["location"]
    metadata = json.loads((Path(location) / "_metadata").read_text())
    (op,) = [o for o in metadata["operators"] if o.get("uid") == "numbers"]
    (subtask,) = op["subtasks"]
    print(f"savepoint {location}: source offsets {subtask['source_offsets']}")
    return location, emitted(subtask["source_offsets"])


def emitted(offsets: Any) -> int:
    """The next index of the source's one range (the numbers before it were emitted)."""
    ranges = offsets["ranges"] if isinstance(offsets, dict) else offsets
    ((start, _end),) = [tuple(r) for r in ranges]
    return start


def assert_exact(table: Any, upto: int) -> None:
    got, want = rows(table), expected(upto)
    assert got == want, (
        f"{sum((want - got).values())} rows missing (e.g. {sorted(want - got)[:3]}), {sum((got - want).values())} extra"
        f" (e.g. {sorted(got - want)[:3]})"
    )
    txns = [t for s in summaries(table) for t in s["flinkpy.transaction-ids"].split(",")]
    assert len(txns) == len(set(txns)), "a transaction was committed twice"
    assert orphans(table) == [], "data files outside the table were left behind"


def assert_a_snapshot_per_checkpoint(table: Any) -> None:
    """One committer: a job's checkpoint is one snapshot holding every writer's files."""
    commits = Counter((s["flink.job-id"], s["flink.max-committed-checkpoint-id"]) for s in summaries(table))
    assert max(commits.values()) == 1, f"a checkpoint committed in several snapshots: {commits}"


def committed_by(catalog: dict[str, str], name: str, job_id: str, after_checkpoint: int = 0) -> bool:
    """Whether a snapshot of the table holds a commit of ``job_id`` for a checkpoint after
    ``after_checkpoint``."""
    return any(s["flink.job-id"] == job_id and int(s["flink.max-committed-checkpoint-id"]) > after_checkpoint
               for s in summaries(reload(catalog, name)))


def last_commit(catalog: dict[str, str], name: str, job_id: str) -> int:
    return max((int(s["flink.max-committed-checkpoint-id"]) for s in summaries(reload(catalog, name))
                if s["flink.job-id"] == job_id), default=0)


@pytest.mark.timeout(180)
def test_exactly_once_through_a_kill_before_a_commit_a_taskmanager_kill_a_stop_with_savepoint_and_a_resume_at_parallelism_1(
    start, catalog, tmp_path: Path  # noqa: F811
) -> None:
    """One table through three runs (one test: each start of a sink task imports pyiceberg,
    seconds on a loaded machine): writers at p=2, the committer SIGKILLed once checkpoint 2
    completed, before it committed, then a TaskManager SIGKILLed; a stop-with-savepoint; a
    resume at p=1 and another stop."""
    from flinkpy.client.client import Client
    from flinkpy.program.context import ExecutionContext, execution_context

    create_table(catalog, "squares")
    env = squares_env(catalog, "squares", parallelism=2)
    committer = vertex_id(env, "table: Committer")
    assert committer != vertex_id(env, "table: Writer"), "the committer is a task of its own after two writers"
    info = start(taskmanagers=2, faults=[{"point": "sink-before-commit", "vertex": committer, "subtask": 0, "checkpoint": 2}])
    first = env.execute_async("squares into iceberg, p=2")
    jid = first.get_job_id()
    wait_for(lambda: job_show(jid)["restarts"] >= 1, timeout=30, interval=0.25, message="the kill and the restart")
    wait_for(lambda: committed_by(catalog, "squares", jid, after_checkpoint=2), timeout=30, interval=0.25,
             message="commits after the restart")
    # a whole TaskManager lost (one running the job's tasks): writers and committer die together
    Client().inject_cluster_fault("kill-taskmanager", pick=0.0, job=jid)
    wait_for(lambda: job_show(jid)["restarts"] >= 2, timeout=30, interval=0.25, message="the restart after the TaskManager kill")
    seen = last_commit(catalog, "squares", jid)
    wait_for(lambda: last_commit(catalog, "squares", jid) > seen, timeout=30, interval=0.25,
             message="a commit after the TaskManager kill")
    location, by_first_run = stop_with_savepoint(jid, tmp_path / "sps")

    assert any("SIGKILL" in e["message"] for e in exception_entries(jid))
    # stop-with-savepoint commits what the savepoint covers before the job ends
    table = reload(catalog, "squares")
    assert_exact(table, by_first_run)
    assert_a_snapshot_per_checkpoint(table)
    assert ("2", 2) in [(s["flink.max-committed-checkpoint-id"], len(s["flinkpy.transaction-ids"].split(",")))
                        for s in summaries(table)], f"checkpoint 2 was not committed with both writers' files: {summaries(table)}"
    assert_inspect_shows_the_pending_commits(location, table)

    # down from 2 writers to 1: the writers keep no state, the committer's is the same
    env = squares_env(catalog, "squares", parallelism=1)
    with execution_context(ExecutionContext(address=info.rest_address, savepoint_path=location)):
        resumed = env.execute_async("squares into iceberg, p=1")
    wait_for(lambda: committed_by(catalog, "squares", resumed.get_job_id()), timeout=30, interval=0.25,
             message="a commit of the resumed job")
    _, upto = stop_with_savepoint(resumed.get_job_id(), tmp_path / "sps2")

    table = reload(catalog, "squares")
    assert_exact(table, upto)
    assert_a_snapshot_per_checkpoint(table)
    assert upto > by_first_run
    jobs = Counter(s["flink.job-id"] for s in summaries(table))
    assert set(jobs) == {jid, resumed.get_job_id()}, jobs


@pytest.mark.timeout(120)
def test_exactly_once_with_unaligned_checkpoints_through_a_kill_before_a_commit(start, catalog, tmp_path: Path) -> None:  # noqa: F811
    """Unaligned checkpoints: a writer's committables may be in flight (channel state) when the
    committer snapshots; the committer killed before a commit, the restored job must still
    commit each of them once and delete no file they name."""
    create_table(catalog, "unaligned")
    env = squares_env(catalog, "unaligned", parallelism=2)
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    committer = vertex_id(env, "table: Committer")
    start(faults=[{"point": "sink-before-commit", "vertex": committer, "subtask": 0, "checkpoint": 2}])
    job = env.execute_async("squares into iceberg, unaligned")
    jid = job.get_job_id()
    wait_for(lambda: job_show(jid)["restarts"] >= 1, timeout=30, interval=0.25, message="the kill and the restart")
    wait_for(lambda: committed_by(catalog, "unaligned", jid, after_checkpoint=3), timeout=30, interval=0.25,
             message="commits after the restart")
    from flinkpy.client.client import Client

    history = Client().checkpoints(jid, 100)["history"]
    assert any(h["unaligned_checkpoint"] for h in history if h["status"] == "COMPLETED"), history
    _, upto = stop_with_savepoint(jid, tmp_path / "sps")
    table = reload(catalog, "unaligned")
    assert_exact(table, upto)
    assert_a_snapshot_per_checkpoint(table)


def assert_inspect_shows_the_pending_commits(location: str, table: Any) -> None:
    """``checkpoint inspect`` of the savepoint names the transactions the committer holds
    (both writers'): they became one snapshot of the table with as many files and records."""
    import json

    inspect = run_cli("checkpoint", "inspect", "--json", location)
    assert inspect.returncode == 0, inspect.stderr
    doc = json.loads(inspect.stdout)["metadata"]
    (op,) = [o for o in doc["operators"] if o.get("uid") == "table-committer"]
    (sink,) = [s["operator_state"]["states"]["sink"] for s in op["subtasks"]]
    pending = sink["pending"]
    assert sink["kind"] == "sink" and sink["entries"] == len(pending) and pending, sink
    (committed,) = [s for s in summaries(table) if pending[0]["transaction_id"] in s["flinkpy.transaction-ids"].split(",")]
    assert sorted(committed["flinkpy.transaction-ids"].split(",")) == sorted(t["transaction_id"] for t in pending), (pending, committed)
    assert {t["checkpoint_id"] for t in pending} == {doc["checkpoint_id"]}, pending
    assert (sum(t["files"] for t in pending), sum(t["records"] for t in pending)) == (
        int(committed["added-data-files"]), int(committed["added-records"])), (pending, committed)
    text = run_cli("checkpoint", "inspect", location, env={"COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    for txn in pending:
        assert f"{txn['transaction_id']}: checkpoint {doc['checkpoint_id']}, {txn['files']} files" in text.stdout, text.stdout


@pytest.mark.timeout(30)
def test_the_benchmarks_by_hand_side_appends_the_jobs_batches_and_its_figures_have_a_table(catalog) -> None:
    """``--only iceberg``: the by-hand side writes the same records in the job's batches (one
    snapshot each), and its figures land in a table the performance page renders."""
    from flinkpy.benchmarks import iceberg as bench
    from flinkpy.benchmarks.render import TABLES

    create_table(catalog, "by_hand")
    batches = [30, 20]
    assert bench.by_hand_seconds(reload(catalog, "by_hand"), batches) > 0
    table = reload(catalog, "by_hand")
    assert rows(table) == expected(50) and bench.committed_batches(table) == batches
    result = {"records": 50, "checkpoint_ms": 1000, "sink_rate": 10.0, "by_hand_rate": 40.0, "ratio": 0.25,
              "ratios": [0.2, 0.3], "snapshots": [2]}
    figures = bench.figures(result)
    assert {f.table for f in figures} == {"iceberg"} and "iceberg" in {t.key for t in TABLES}
    assert [f.value for f in figures] == [40.0, 10.0, 0.25]
    assert "the sink at 0.25 of by hand" in bench.report(result)[0]


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_bad_input_is_refused_on_one_line_with_what_to_change(catalog, tmp_path: Path) -> None:
    create_table(catalog, "strict")
    with pytest.raises(NotFoundError, match=r"the Iceberg table 'db.nope' does not exist in catalog 'default' \(create it") as missing:
        IcebergSink(catalog, "db.nope")
    assert missing.value.exit_code == ExitCode.NOT_FOUND
    broken = {"type": "sql", "uri": f"sqlite:///{tmp_path}/no/such/dir/catalog.db"}
    with pytest.raises(ConfigurationError, match=r"cannot open the Iceberg catalog 'default' \(type sql\).*\(correct the catalog properties") as bad:
        IcebergSink(broken, "db.strict")
    assert bad.value.exit_code == ExitCode.CONFIGURATION
    sink = IcebergSink(catalog, "db.strict")
    with pytest.raises(IcebergSchemaError, match=r"field 'sq' is STRING, column 'sq' is long.*\(change the stream's output_type"):
        sink.for_record_type(Types.ROW_NAMED(["n", "sq"], [Types.LONG(), Types.STRING()]))
    with pytest.raises(IcebergSchemaError, match=r"the records have 3 fields, the table has 2 columns \(n, sq\)"):
        sink.for_record_type(Types.TUPLE([Types.LONG(), Types.LONG(), Types.LONG()]))
    with pytest.raises(IcebergUpsertUnsupportedError, match="equality-delete files, which pyiceberg") as upsert:
        IcebergSink.builder().set_upsert(["n"])
    assert upsert.value.exit_code == ExitCode.UNSUPPORTED
    # records whose type the stream does not declare are judged as they are written
    w = sink.create_writer(ctx(0, 1))
    w.open()
    with pytest.raises(IcebergSchemaError, match=r"a record has field 'square', which is not a column of Iceberg table 'db.strict'"):
        w.write([{"n": 1, "square": 1}])
        w.prepare_commit(1)
    with pytest.raises(IcebergSchemaError, match=r"column 'n' of Iceberg table 'db.strict' is int64, a record holds a value it cannot take"):
        w.write([("one", 1)])
        w.prepare_commit(2)

    # through the CLI: one line on stderr, the documented exit code, nothing submitted
    job = tmp_path / "job.py"
    job.write_text(
        "from flinkpy.common import Types\n"
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "from flinkpy.datastream.connectors.iceberg import IcebergSink\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        f"sink = IcebergSink({catalog!r}, 'db.strict')\n"
        "env.from_collection([(1, 'a')], Types.TUPLE([Types.LONG(), Types.STRING()])).sink_to(sink)\n"
        "env.execute('bad')\n"
    )
    res = run_cli("run", str(job))
    assert res.returncode == ExitCode.INVALID_PROGRAM, (res.returncode, res.stderr)
    assert "field 1 of the records is STRING, column 'sq' is long" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


# -- on Spark: a snapshot per micro-batch, once per batch id (into a partitioned table) ------


@pytest.mark.timeout(30)
def test_the_spark_runners_writer_commits_each_batch_id_once(catalog) -> None:
    from flinkpy.spark.sinks import writer_for

    create_table(catalog, "batches", width=50)
    writer = writer_for(IcebergSink(catalog, "db.batches"), "squares/table", "table")
    assert writer.guarantee == "exactly-once" and "a snapshot per batch id" in writer.describe()
    writer.write([square(n) for n in range(1, 101)], 0)
    writer.write([square(n) for n in range(1, 101)], 0)  # Spark replays batch 0 after a failure
    writer.write([square(n) for n in range(101, 201)], 1)
    table = reload(catalog, "batches")
    assert [s["flinkpy.spark-batch-id"] for s in summaries(table)] == ["0", "1"]
    # 1-49, 50-99, 100 | 101-149, 150-199, 200
    assert [s["added-data-files"] for s in summaries(table)] == ["3", "3"], "a file per partition and batch"
    assert_exact(table, 200)
