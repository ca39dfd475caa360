"""RabbitMQ connectors against a real RabbitMQ 3.10 server (one per module) and a real cluster.

The proof is the verification job's keyed sequences (examples/verification_job.py) read from a
queue instead of a SequenceSource: ``"key,seq"`` messages, a keyed running count, the two-phase
VerifyingSink. Every run SIGKILLs the source task when checkpoint 2 completed and before its
acks went out, and again between the barrier and the completion of the next checkpoint (the
cluster's fault points, KILLS); then a whole TaskManager, and it crashes and restarts the
RabbitMQ server while the job runs. The sink's committed files then hold every sequence number
(and, where the guarantee says so, once: each key's running count must equal its sequence
number, computed here), and an independent pika look at the queue finds nothing left to deliver.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, cli_json, module_cluster, wait_for
from flinkpy.common import WatermarkStrategy
from flinkpy.common.serialization import SimpleStringSchema
from flinkpy.connectors.base import ReaderContext
from flinkpy.connectors.rabbitmq import RMQSink, RMQSource, RMQStreamSource
from flinkpy.connectors.rabbitmq_connection import RMQConnectionConfig
from flinkpy.connectors.rabbitmq_ledger import AckLedger
from flinkpy.connectors.verification import SequenceSource, VerifyingSink, check, read_committed
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.errors import AuthenticationError, NotFoundError, UsageError

sys.path.insert(0, str(EXAMPLES))
from verification_job import RunningCount  # noqa: E402

pytestmark = pytest.mark.timeout(120)

KEYS, PER_KEY = 4, 150
SOURCE = 1  # the source's vertex (start_job checks it)
#: the source task dies at the two dangerous moments of a queue acknowledged on checkpoints:
#: checkpoint 2 completed, its acks not sent (the first attempt); and the snapshot of the next
#: checkpoint taken, its barrier sent on, the checkpoint not complete (the second attempt)
KILLS = [
    {"point": "before-notify", "vertex": SOURCE, "subtask": 0, "checkpoint": 2, "attempt": 0},
    {"point": "upload", "vertex": SOURCE, "subtask": 0, "attempt": 1},
]


@pytest.fixture(scope="module")
def rmq_home(tmp_path_factory: pytest.TempPathFactory, rabbitmq):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLINKPY_FAULT_POINTS", json.dumps(KILLS))
        # two TaskManagers: one is SIGKILLed, the other takes the job while it comes back
        with module_cluster(tmp_path_factory, "rmq-home", taskmanagers=2, slots=2) as home:
            from flinkpy.cluster.home import ClusterHome, read_record

            # detached submissions (execute_async) need the address, not only the home
            mp.setenv("FLINKPY_JOBMANAGER", read_record(ClusterHome(home)).rest_address)
            yield home


def config(server: Any, **kw: Any) -> RMQConnectionConfig:
    builder = RMQConnectionConfig.Builder().set_host("127.0.0.1").set_port(server.port).set_prefetch_count(200)
    for k, v in kw.items():
        getattr(builder, f"set_{k}")(v)
    return builder.build()


def messages(seqs: range) -> tuple[list[bytes], list[str]]:
    pairs = [(k, s) for s in seqs for k in range(KEYS)]
    return [f"{k},{s}".encode() for k, s in pairs], [f"{k}-{s}" for k, s in pairs]


def parse(line: str) -> tuple[int, int]:
    k, s = line.split(",")
    return int(k), int(s)


def start_job(source: Any, out: Path, parallelism: int, name: str) -> Any:
    from flinkpy.common import RestartStrategies

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(200, 100))
    env.add_python_file(str(EXAMPLES / "verification_job.py"))
    records = env.from_source(source, WatermarkStrategy.no_watermarks(), "rabbitmq").uid("rabbitmq")
    counted = records.map(lambda line: tuple(int(x) for x in line.split(","))).key_by(lambda r: r[0]).process(RunningCount()).uid("running-count")
    counted.sink_to(VerifyingSink(str(out))).uid("verifying-sink")
    nodes = json.loads(env.get_execution_plan())["nodes"]
    assert [n["id"] for n in nodes if "rabbitmq" in n["operators"]] == [SOURCE], nodes
    return env.execute_async(name)


def rest() -> Any:
    from flinkpy.client.client import Client

    return Client.from_environment()


def completed_checkpoints(jid: str) -> int:
    return rest().checkpoints(jid)["counts"]["completed"]


def run_through_faults(rabbitmq: Any, source: Any, queue: str, out: Path, parallelism: int, *, ids: bool) -> dict[str, Any]:
    """A third of the messages trickling in through the two source kills (KILLS), a third
    through a TaskManager kill, a server restart, the last third; returns the check of the
    committed output once it has all."""
    import time

    t0 = time.monotonic()
    lap = lambda what: print(f"{what}: {time.monotonic() - t0:.1f} s")  # noqa: E731
    third = PER_KEY // 3
    client = start_job(source, out, parallelism, f"rabbitmq-{queue}")
    jid = client.get_job_id()

    def trickle(seqs: range) -> threading.Thread:
        # messages keep arriving while tasks die, so that every kill lands on messages read
        # and not yet covered by a completed checkpoint
        bodies, cids = messages(seqs)
        publisher = threading.Thread(target=rabbitmq.publish, args=(queue, bodies),
                                     kwargs={"correlation_ids": cids if ids else None, "pace_s": 0.004})
        publisher.start()
        return publisher

    publisher = trickle(range(1, third + 1))
    wait_for(lambda: rest().job(jid)["restarts"] >= 2, 60, interval=0.1, message="the two source kills")
    publisher.join(60)
    lap("restarted after the two source kills")
    seen = completed_checkpoints(jid)
    wait_for(lambda: completed_checkpoints(jid) > seen, 30, interval=0.1, message="a checkpoint of the third attempt")
    publisher = trickle(range(third + 1, 2 * third + 1))
    rest().inject_cluster_fault("kill-taskmanager", pick=0.0, job=jid)  # one running the job's tasks
    wait_for(lambda: rest().job(jid)["restarts"] >= 3, 60, interval=0.1, message="the restart after the TaskManager kill")
    publisher.join(60)
    lap("restarted after the TaskManager kill")
    rabbitmq.restart()
    lap("server restarted")
    bodies, cids = messages(range(2 * third + 1, PER_KEY + 1))
    rabbitmq.publish(queue, bodies, correlation_ids=cids if ids else None)

    def complete() -> bool:
        return check(read_committed(out), KEYS, PER_KEY)["lost"] == 0

    wait_for(complete, 60, interval=0.1, message="every sequence number committed",
             describe=lambda: ({k: v for k, v in check(read_committed(out), KEYS, PER_KEY).items() if k != "keys"},
                               [e["message"][-300:] for e in cli_json("job", "exceptions", jid)["exceptionHistory"]["entries"][:3]]))
    lap("output complete")
    # two more checkpoints: the last records' checkpoint completed, and with it their acks
    seen = completed_checkpoints(jid)
    wait_for(lambda: completed_checkpoints(jid) >= seen + 2, 30, interval=0.1, message="two more checkpoints")
    lap("two more checkpoints")
    causes = [e["message"] for e in cli_json("job", "exceptions", jid)["exceptionHistory"]["entries"]]
    client.cancel()
    wait_for(lambda: client.get_job_status() == "CANCELED", 30, message="the job canceled")
    lap("canceled")
    return check(read_committed(out), KEYS, PER_KEY) | {"jid": jid, "causes": causes}


def assert_queue_drained(rabbitmq: Any, queue: str) -> None:
    """An independent pika look: once the job's consumer is gone, nothing is left unacknowledged."""
    with rabbitmq.connect() as conn:
        ch = conn.channel()
        wait_for(lambda: ch.queue_declare(queue, passive=True).method.consumer_count == 0, 20, message="the consumer gone")
        assert ch.queue_declare(queue, passive=True).method.message_count == 0


def test_a_queue_with_correlation_ids_is_read_exactly_once(rmq_home, rabbitmq, tmp_path: Path) -> None:
    queue = rabbitmq.new_queue()
    source = RMQSource(config(rabbitmq), queue, True, SimpleStringSchema())
    result = run_through_faults(rabbitmq, source, queue, tmp_path / "out", 1, ids=True)
    assert (result["lost"], result["duplicated"], result["mismatched"]) == (0, 0, 0), result
    assert sum("SIGKILL" in c for c in result["causes"]) >= 2, result["causes"]
    assert_queue_drained(rabbitmq, queue)


def test_a_queue_without_correlation_ids_is_read_at_least_once(rmq_home, rabbitmq, tmp_path: Path) -> None:
    queue = rabbitmq.new_queue()
    source = RMQSource(config(rabbitmq), queue, False, SimpleStringSchema())
    result = run_through_faults(rabbitmq, source, queue, tmp_path / "out", 1, ids=False)
    assert result["lost"] == 0, result
    assert_queue_drained(rabbitmq, queue)


def test_a_stream_queue_is_read_exactly_once_at_parallelism_2(rmq_home, rabbitmq, tmp_path: Path) -> None:
    queue = rabbitmq.new_queue(stream=True)
    source = RMQStreamSource(config(rabbitmq), queue, SimpleStringSchema(), declare_queue=False)
    result = run_through_faults(rabbitmq, source, queue, tmp_path / "out", 2, ids=False)
    assert (result["lost"], result["duplicated"], result["mismatched"]) == (0, 0, 0), result


def test_the_sink_delivers_every_record_with_confirms(rmq_home, rabbitmq) -> None:
    queue = rabbitmq.new_queue()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.from_source(SequenceSource(KEYS, PER_KEY), WatermarkStrategy.no_watermarks(), "sequences") \
        .map(lambda r: f"{r[0]},{r[1]}").sink_to(RMQSink(config(rabbitmq), queue, SimpleStringSchema()))
    env.execute("rabbitmq-sink")
    got = []
    with rabbitmq.connect() as conn:
        ch = conn.channel()
        for _method, _props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=1):
            if body is None:
                break
            got.append(list(parse(body.decode())))
    result = check(got, KEYS, PER_KEY)
    assert (result["lost"], result["unexpected"]) == (0, 0), result


def test_the_sink_waits_for_every_confirm_at_a_checkpoint_and_fails_on_a_refusal(rabbitmq) -> None:
    """Confirms are collected asynchronously (not one round trip per message): the flush at a
    checkpoint returns once all are in, and a message the queue refuses fails the writer."""
    ctx = ReaderContext(subtask_index=0, parallelism=1)
    queue = rabbitmq.new_queue()
    writer = RMQSink(config(rabbitmq), queue, SimpleStringSchema()).create_writer(ctx)
    try:
        writer.write([f"m{i}" for i in range(2500)])  # more than the confirm window
        writer.flush(False)
        assert writer._ledger.outstanding == 0
    finally:
        writer.close()
    assert rabbitmq.message_count(queue) == 2500
    full = f"full-{queue}"
    with rabbitmq.connect() as conn:
        conn.channel().queue_declare(full, durable=True, arguments={"x-max-length": 5, "x-overflow": "reject-publish"})
    writer = RMQSink(config(rabbitmq), full, SimpleStringSchema(), declare_queue=False).create_writer(ctx)
    try:
        with pytest.raises(UsageError, match=r"did not accept messages for queue 'full-.*': 5 refused \(basic.nack\)"):
            writer.write([f"m{i}" for i in range(10)])
            writer.flush(False)
    finally:
        writer.close()


def test_a_missing_queue_and_a_refused_login_are_one_line_errors(rabbitmq) -> None:
    ctx = ReaderContext(subtask_index=0, parallelism=1)
    with pytest.raises(NotFoundError) as missing:
        RMQSource(config(rabbitmq), "no-such-queue", False, SimpleStringSchema(), declare_queue=False).create_reader(ctx)
    assert "queue 'no-such-queue' does not exist" in str(missing.value) and "\n" not in str(missing.value)
    with pytest.raises(AuthenticationError) as refused:
        RMQSource(config(rabbitmq, password="wrong"), "q", False, SimpleStringSchema()).create_reader(ctx)
    assert "refused the login of user 'guest'" in str(refused.value) and "\n" not in str(refused.value)


def test_the_ledger_acks_a_checkpoints_deliveries_and_drops_its_redeliveries() -> None:
    ledger = AckLedger(use_correlation_id=True)
    for tag, cid in enumerate("abc", start=1):
        assert ledger.received(tag, cid)
    state3 = ledger.snapshot(3)
    ledger.received(4, "d")
    ledger.snapshot(4)
    assert ledger.complete(4) == 4  # 4 covers 3: one multiple-ack for both
    assert ledger.complete(5) is None
    # the process dies before 3's ack: a restore from 3 drops a, b, c when they come again
    restored = AckLedger(use_correlation_id=True, restored=[state3])
    assert [restored.received(t, c) for t, c in enumerate("abcd", start=1)] == [False, False, False, True]
    restored.snapshot(5)
    assert restored.complete(5) == 4  # the dropped ones are acknowledged with the rest
    assert restored.received(5, "a")  # once acknowledged, an id may come again as a new message


def test_a_source_with_correlation_ids_is_placed_at_parallelism_1(rabbitmq) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    with_ids = env.add_source(RMQSource(config(rabbitmq), "a", True, SimpleStringSchema()), "with-ids")
    without = env.add_source(RMQSource(config(rabbitmq), "b", False, SimpleStringSchema()), "without-ids")
    with_ids.union(without).print()
    nodes = json.loads(env.get_execution_plan())["nodes"]
    by_name = {n["contents"].split(" -> ")[0]: n["parallelism"] for n in nodes}
    assert by_name["Source: with-ids"] == 1 and by_name["Source: without-ids"] == 3, by_name


def test_the_spark_runner_refuses_a_queue_it_could_not_replay(tmp_path: Path) -> None:
    from conftest import run_cli

    job = tmp_path / "rmq_job.py"
    job.write_text(
        "from flinkpy.common.serialization import SimpleStringSchema\n"
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "from flinkpy.datastream.connectors.rabbitmq import RMQConnectionConfig, RMQSource\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "cfg = RMQConnectionConfig.Builder().set_host('127.0.0.1').build()\n"
        "env.add_source(RMQSource(cfg, 'orders', True, SimpleStringSchema())).print()\n"
        "env.execute('rmq-on-spark')\n"
    )
    res = run_cli("info", "--runner", "spark", str(job))
    assert res.returncode == 7, res.stderr
    assert "RMQSource acknowledges what a completed checkpoint covers" in res.stderr and "RMQStreamSource" in res.stderr
