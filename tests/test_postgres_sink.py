"""PostgreSQL sinks against a real server: the two-phase-commit writer step by step, then jobs
killed (SIGKILL) at every phase of the protocol whose table must still equal the failure-free
output exactly — no row missing, none twice — with no prepared transaction left behind.

The writer tests drive :class:`PostgresSinkWriter` the way the engine does (``open``, ``write``,
``snapshot_state``, ``notify_checkpoint_complete``, ``flush``, ``close``) and simulate a crash by
dropping its connections without a word to the server (``close_resources``): what a SIGKILLed
task leaves is exactly that — an open transaction the server rolls back, and prepared ones it
keeps.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from flinkpy.common import RestartStrategies, Row, Types, WatermarkStrategy
from flinkpy.connectors.base import ReaderContext
from flinkpy.connectors.postgres import PostgresBatchSink, PostgresSink, PostgresSinkWriter, PostgresUpsertSink
from flinkpy.connectors.postgres_sql import is_idempotent_upsert, plain_insert, translate_placeholders
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import DataGeneratorSource
from flinkpy.datastream.connectors.jdbc import (
    JdbcConnectionOptions,
    JdbcExactlyOnceOptions,
    JdbcExecutionOptions,
    JdbcSink,
)
from flinkpy.errors import ClusterUnreachableError, ConfigurationError, InvalidProgramError
from servers import PostgresServer, _poll, _stop, free_port
from test_recovery import assert_recovered, checkpoints, exception_entries, only_job, start, vertex_id  # noqa: F401 - start is a fixture

# -- kit -------------------------------------------------------------------------------------


def ctx(subtask: int = 0, parallelism: int = 1, *, job: str = "0123456789abcdef", restored: list | None = None) -> ReaderContext:
    return ReaderContext(subtask, parallelism, job_id=job, operator_name="orders", restored_state=restored or [])


def opened(sink: Any, context: ReaderContext) -> Any:
    writer = sink.create_writer(context)
    writer.open(None)
    return writer


def crash(writer: PostgresSinkWriter) -> None:
    """What SIGKILL leaves: connections gone without ROLLBACK; prepared transactions stay."""
    writer.close_resources()


def rows(pg: PostgresServer, table: str = "t") -> Counter:
    return Counter(pg.query(f"SELECT * FROM {table}"))


@pytest.fixture
def table(postgres: PostgresServer) -> PostgresServer:
    postgres.execute("CREATE TABLE t (id bigint, name text)")
    return postgres


def two_phase(pg: PostgresServer, **kw: Any) -> PostgresSink:
    return PostgresSink(pg.dsn, "INSERT INTO t (id, name) VALUES (%s, %s)", **kw)


# -- the two-phase-commit writer --------------------------------------------------------------


@pytest.mark.timeout(20)
def test_rows_show_only_when_their_checkpoint_completes(table: PostgresServer) -> None:
    w = opened(two_phase(table), ctx())
    w.write([(1, "a"), (2, "b")])
    w.write([(3, "c")])
    assert rows(table) == Counter()  # written, in an open transaction

    state = w.snapshot_state(1)
    (gid,) = state["pending"]
    assert gid.startswith(w.prefix + "-0-") and table.prepared() == [gid]
    assert rows(table) == Counter()  # prepared: durable, still invisible

    w.write([(4, "d")])  # the next checkpoint's transaction
    w.notify_checkpoint_complete(1)
    assert rows(table) == Counter([(1, "a"), (2, "b"), (3, "c")])
    assert table.prepared() == []

    w.flush(True)  # the end of the input commits the rest
    w.close()
    assert rows(table) == Counter([(1, "a"), (2, "b"), (3, "c"), (4, "d")])
    assert table.prepared() == []


@pytest.mark.timeout(20)
def test_an_empty_transaction_prepares_nothing(table: PostgresServer) -> None:
    w = opened(two_phase(table), ctx())
    assert w.snapshot_state(1)["pending"] == []
    txn = w.begin_transaction()  # opened, nothing written
    assert w.pre_commit(txn) is None
    assert table.prepared() == []
    w.close()


@pytest.mark.timeout(20)
def test_commit_is_idempotent(table: PostgresServer) -> None:
    w = opened(two_phase(table), ctx())
    w.write([(1, "a")])
    (gid,) = w.snapshot_state(1)["pending"]
    w.commit(gid)
    w.commit(gid)  # PostgreSQL no longer knows it: taken as committed
    w.notify_checkpoint_complete(1)
    w.notify_checkpoint_complete(1)
    w.close()
    assert rows(table) == Counter([(1, "a")])


@pytest.mark.timeout(20)
def test_recovery_commits_the_restored_transactions_and_rolls_back_the_rest(table: PostgresServer) -> None:
    w = opened(two_phase(table), ctx())
    w.write([(1, "in checkpoint 1")])
    state1 = w.snapshot_state(1)
    w.write([(2, "prepared for checkpoint 2, which never completes")])
    w.snapshot_state(2)
    w.write([(3, "written after it")])
    crash(w)
    assert len(table.prepared()) == 2 and rows(table) == Counter()

    # the job restores checkpoint 1: its transaction is committed, checkpoint 2's rolled back,
    # the open one died with its connection
    again = opened(two_phase(table), ctx(restored=[state1]))
    assert rows(table) == Counter([(1, "in checkpoint 1")])
    assert table.prepared() == []
    again.write([(2, "replayed")])
    again.flush(True)
    again.close()
    assert rows(table) == Counter([(1, "in checkpoint 1"), (2, "replayed")])


@pytest.mark.timeout(20)
def test_recovery_after_a_rescale_cleans_up_for_the_old_subtasks_it_stands_in_for(table: PostgresServer) -> None:
    # three old subtasks each committed nothing yet: checkpoint 1 prepared, checkpoint 2 too
    states = []
    for i in range(3):
        w = opened(two_phase(table), ctx(i, 3))
        w.write([(i, "cp1")])
        states.append(w.snapshot_state(1))
        w.write([(i, "cp2")])
        w.snapshot_state(2)
        crash(w)
    # another job's prepared transaction, which no subtask of this job may touch
    other = opened(two_phase(table, transaction_prefix="other-job"), ctx(1, 2))
    other.write([(99, "other job")])
    (foreign,) = other.snapshot_state(1)["pending"]
    crash(other)
    assert len(table.prepared()) == 7

    # restored at parallelism 2 from checkpoint 1: new subtask 1 gets old subtask 1's state,
    # new subtask 0 those of old 0 and 2 (index % 2), and each cleans up for exactly those
    new1 = opened(two_phase(table), ctx(1, 2, restored=[states[1]]))
    assert rows(table) == Counter([(1, "cp1")])
    left = table.prepared()
    assert len(left) == 5 and foreign in left
    assert sorted({PostgresSinkWriter.subtask_of(new1.prefix, g) for g in left if g != foreign}) == [0, 2]

    new0 = opened(two_phase(table), ctx(0, 2, restored=[states[0], states[2]]))
    assert rows(table) == Counter([(0, "cp1"), (1, "cp1"), (2, "cp1")])
    assert table.prepared() == [foreign]
    for w in (new0, new1):
        w.close()


def as_pair(word: str) -> tuple[int, str]:
    return (len(word), word)


@pytest.mark.timeout(20)
def test_records_map_by_position_by_name_or_through_a_row_mapper(table: PostgresServer) -> None:
    w = opened(two_phase(table), ctx())
    w.write([(1, "tuple"), [2, "list"], Row(3, "row"), Row(id=4, name="named row"), {"name": "dict", "id": 5}])
    w.flush(True)
    w.close()
    mapped = opened(two_phase(table, row_mapper=as_pair), ctx())
    mapped.write(["mapper"])
    mapped.flush(True)
    mapped.close()
    assert rows(table) == Counter([(1, "tuple"), (2, "list"), (3, "row"), (4, "named row"), (5, "dict"), (6, "mapper")])


@pytest.mark.timeout(20)
def test_jdbc_placeholders_and_options_carry_over(table: PostgresServer) -> None:
    assert translate_placeholders("INSERT INTO t (id, name) VALUES (?, ?)") == "INSERT INTO t (id, name) VALUES (%s, %s)"
    assert translate_placeholders("SELECT '?', \"a?\" -- ?\n WHERE x = ? /* ? */") == "SELECT '?', \"a?\" -- ?\n WHERE x = %s /* ? */"
    assert translate_placeholders("UPDATE t SET name = %s WHERE id = %s") == "UPDATE t SET name = %s WHERE id = %s"
    assert translate_placeholders("UPDATE t SET name = $$it's ?$$ WHERE id = ?") == "UPDATE t SET name = $$it's ?$$ WHERE id = %s"
    assert plain_insert("insert into public.t (id, \"Name\") values (%s, %s);") == ("public.t", ["id", '"Name"'])
    assert plain_insert("INSERT INTO t (id) SELECT %s") is None

    options = (
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
        .with_url(f"jdbc:postgresql://127.0.0.1:{table.port}/postgres")
        .with_user_name("postgres")
        .build()
    )
    row_type = Types.ROW([Types.LONG(), Types.STRING()])
    sink = JdbcSink.exactly_once_sink(
        "INSERT INTO t (id, name) VALUES (?, ?)", row_type, JdbcExecutionOptions.defaults(), JdbcExactlyOnceOptions.defaults(), options
    )
    assert isinstance(sink, PostgresSink) and sink.guarantee == "exactly-once"
    w = opened(sink, ctx())
    w.write([Row(1, "jdbc")])
    w.flush(True)
    w.close()
    assert rows(table) == Counter([(1, "jdbc")])

    batches_of_2 = JdbcExecutionOptions.builder().with_batch_size(2).build()
    at_least_once = JdbcSink.sink("INSERT INTO t (id, name) VALUES (?, ?)", row_type, options, batches_of_2)
    assert type(at_least_once) is PostgresBatchSink and at_least_once.guarantee == "at-least-once"
    w = opened(at_least_once, ctx())
    w.write([(2, "a")])
    assert rows(table) == Counter([(1, "jdbc")])  # buffered
    w.write([(3, "b")])  # a batch of 2 is committed at once
    assert rows(table) == Counter([(1, "jdbc"), (2, "a"), (3, "b")])
    w.write([(4, "c")])
    w.flush(False)  # as before a checkpoint's snapshot
    assert rows(table)[(4, "c")] == 1
    w.close()

    with pytest.raises(ConfigurationError, match="PostgreSQL only"):
        JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url("jdbc:mysql://db:3306/shop").build()
    with pytest.raises(InvalidProgramError, match="2 placeholders"):
        JdbcSink.sink("INSERT INTO t (id, name) VALUES (?, ?)", Types.ROW([Types.LONG()]), options)


@pytest.mark.timeout(20)
def test_upserts_are_idempotent_and_the_last_write_per_key_wins(postgres: PostgresServer) -> None:
    postgres.execute("CREATE TABLE totals (customer text PRIMARY KEY, total bigint, orders int)")
    sink = (
        PostgresSink.builder()
        .set_dsn(postgres.dsn)
        .set_upsert("totals", ["customer", "total", "orders"], ["customer"])
        .set_batch_size(3)
        .build()
    )
    assert isinstance(sink, PostgresUpsertSink) and sink.guarantee == "exactly-once"
    batch = [("ann", 10, 1), ("bob", 5, 1), ("ann", 25, 2), {"customer": "cid", "orders": 1, "total": 7}]
    w = opened(sink, ctx())
    w.write(batch)
    w.flush(False)
    expected = Counter([("ann", 25, 2), ("bob", 5, 1), ("cid", 7, 1)])
    assert rows(postgres, "totals") == expected
    w.write(batch)  # a replay: the same results again change nothing
    w.flush(True)
    w.close()
    assert rows(postgres, "totals") == expected

    # PyFlink-style: an upsert statement makes JdbcSink.sink idempotent; an accumulating one not
    upsert_sql = (
        "INSERT INTO totals (customer, total, orders) VALUES (?, ?, ?)"
        " ON CONFLICT (customer) DO UPDATE SET total = EXCLUDED.total, orders = EXCLUDED.orders"
    )
    options = JdbcConnectionOptions(f"jdbc:postgresql://127.0.0.1:{postgres.port}/postgres", user_name="postgres")
    jdbc_upsert = JdbcSink.sink(upsert_sql, None, options)
    assert isinstance(jdbc_upsert, PostgresUpsertSink)
    w = opened(jdbc_upsert, ctx())
    w.write([("bob", 6, 2), ("bob", 6, 2)])
    w.flush(True)
    w.close()
    assert rows(postgres, "totals")[("bob", 6, 2)] == 1
    accumulating = upsert_sql.replace("total = EXCLUDED.total", "total = totals.total + EXCLUDED.total")
    assert not is_idempotent_upsert(translate_placeholders(accumulating))
    assert JdbcSink.sink(accumulating, None, options).guarantee == "at-least-once"


# -- clear errors ----------------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_an_unreachable_server_is_named_without_its_password() -> None:
    port = free_port()
    sink = PostgresSink(f"postgresql://app:s3cret@127.0.0.1:{port}/shop", "INSERT INTO t (id) VALUES (%s)", connect_timeout=2)
    with pytest.raises(ClusterUnreachableError) as err:
        sink.create_writer(ctx()).open(None)
    message = str(err.value)
    assert "'orders' (subtask 1/1)" in message and f"port={port}" in message and "dbname=shop" in message
    assert "s3cret" not in message and "check that the server runs" in message


@pytest.mark.timeout(20)
def test_a_wrong_statement_is_reported_with_the_sink_and_the_sql(postgres: PostgresServer) -> None:
    w = opened(PostgresSink(postgres.dsn, "INSERT INTO missing (id) VALUES (%s)"), ctx())
    with pytest.raises(InvalidProgramError) as err:
        w.write([(1,)])
    assert "'orders'" in str(err.value) and "missing" in str(err.value) and "fix the statement" in str(err.value)
    w.close()
    postgres.execute("CREATE TABLE t (id bigint, name text)")
    w = opened(two_phase(postgres), ctx())
    with pytest.raises(InvalidProgramError, match="3 fields for the 2 placeholders"):
        w.write([(1, "a", "extra")])
    w.close()


@pytest.mark.timeout(30)
def test_a_server_without_prepared_transactions_is_refused_with_the_remedy(tmp_path: Path) -> None:
    server = PostgresServer(tmp_path)
    server.init()
    proc = subprocess.Popen(
        [str(server.bindir / "postgres"), "-D", str(server.data), "-p", str(server.port), "-k", str(server.root),
         "-c", "listen_addresses=127.0.0.1", "-c", "max_prepared_transactions=0", "-c", "fsync=off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, **server._as_user,
    )  # fmt: skip
    try:
        _poll(server._ready, 60, "postgres", proc, server.log)
        with pytest.raises(ConfigurationError, match=r"max_prepared_transactions = 0.*set max_prepared_transactions > 0"):
            PostgresSink(server.dsn, "INSERT INTO t (id) VALUES (%s)").create_writer(ctx()).open(None)
    finally:
        _stop(proc)


# -- jobs killed at every phase of the protocol -----------------------------------------------

#: long enough that checkpoint 2 (every 100 ms) comes well before the end of the input: a crash
#: near the end would meet the end-of-input commit, which no checkpoint covers. The source is
#: paced (~2 s), so that this holds however loaded the machine is.
N = 400_000
RATE = 200_000
K = 7


def residue(n: int) -> tuple[int, int]:
    return (n % K, n)


def first(pair: tuple) -> Any:
    return pair[0]


def expected_running_sums(n: int) -> Counter:
    """One row per number: its key and the key's running sum up to it (each key sees its
    numbers in ascending order: one source subtask, one channel per key)."""
    sums = [0] * K
    out: Counter = Counter()
    for i in range(1, n + 1):
        sums[i % K] += i
        out[(i % K, sums[i % K])] += 1
    return out


def running_sums_job(sink: Any) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    numbers = env.from_source(DataGeneratorSource(lambda i: i + 1, N, records_per_second=RATE), WatermarkStrategy.no_watermarks(), "numbers").set_parallelism(1)
    keyed = numbers.map(residue).name("residue").set_parallelism(1).key_by(first).sum(1).name("sums")
    keyed.sink_to(sink).name("table")
    return env


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "point, checkpoint, restored",
    [
        ("running", None, None),  # before the first checkpoint: an open transaction dies
        ("sink-before-prepare", 2, 1),  # checkpoint 2's rows are written, not prepared
        ("sink-after-prepare", 2, 1),  # prepared, checkpoint 2 never completes: rolled back
        ("sink-before-commit", 2, 2),  # checkpoint 2 completed, not committed: recovery commits
    ],
)
def test_the_table_is_exact_after_a_crash(
    start, postgres: PostgresServer, point: str, checkpoint: int | None, restored: int | None
) -> None:
    postgres.execute("CREATE TABLE sums (k int, total bigint)")
    sink = PostgresSink.builder().set_dsn(postgres.dsn).set_sql("INSERT INTO sums (k, total) VALUES (?, ?)").build()
    env = running_sums_job(sink)
    rule: dict[str, Any] = {"point": point, "vertex": vertex_id(env, "table"), "subtask": 0}
    if checkpoint is not None:
        rule["checkpoint"] = checkpoint
    start(faults=[rule])

    env.execute(f"running sums, killed at {point}")

    jid = only_job()["jid"]
    job = assert_recovered(jid, cause="SIGKILL")
    assert job["restarts"] == 1, [e["message"] for e in exception_entries(jid)]
    got_restored = checkpoints(jid)["latest"]["restored"]
    assert (got_restored["id"] if got_restored else None) == restored
    got = rows(postgres, "sums")
    expected = expected_running_sums(N)
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (
        f"{sum(missing.values())} rows missing (e.g. {list(missing)[:3]}), {sum(extra.values())} extra (e.g. {list(extra)[:3]})"
    )
    assert postgres.prepared() == []


def last_sum_per_key(n: int) -> Counter:
    return Counter({(k, sum(i for i in range(1, n + 1) if i % K == k)): 1 for k in range(K)})


@pytest.mark.timeout(60)
def test_upserts_end_with_each_keys_final_result_after_a_crash(start, postgres: PostgresServer) -> None:
    postgres.execute("CREATE TABLE sums (k int PRIMARY KEY, total bigint)")
    sink = PostgresSink.upsert(postgres.dsn, "sums", ["k", "total"], ["k"])
    env = running_sums_job(sink)
    start(faults=[{"point": "sink-before-prepare", "vertex": vertex_id(env, "table"), "subtask": 0, "checkpoint": 2}])

    env.execute("running sums, upserted")

    jid = only_job()["jid"]
    assert_recovered(jid, cause="SIGKILL")
    assert rows(postgres, "sums") == last_sum_per_key(N)
