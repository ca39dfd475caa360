"""KafkaSink against a real Kafka-protocol server (noida-db: its transactions, fencing and
read_committed behave like Kafka's; tests/kafka_servers.py).

First the writer alone, driven through the engine's sink contract (write / snapshot_state /
notify_checkpoint_complete, and a restore from a snapshot) — every branch of the commit
protocol, with the crash between a checkpoint's completion and its commit taken as what it is:
a restore from that checkpoint's state while the pre-committed transaction is still open. Then
the verification job (tests/kafka_sink_job.py) on one cluster per module: a SIGKILL of the sink
task right after a checkpoint completes and before its commit, a TaskManager killed, the broker
stopped and started again, stop-with-savepoint and resume at other parallelisms; a
read_committed reader finds every key's sequence once.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import signal
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from conftest import ROOT, cli_json, module_cluster, run_cli, wait_for
from flinkpy.client import Client, Deadline
from flinkpy.common import SimpleStringSchema
from flinkpy.connectors.base import ReaderContext
from flinkpy.connectors.kafka_client import KafkaTopicNotFoundError
from flinkpy.connectors.kafka_commit import Batch, Begin, CommitProtocol, Commit, ProducerRecord, Prepare, Send, recovery_plan, replay
from flinkpy.connectors.two_phase_commit import pending_summary
from flinkpy.connectors.verification import check
from flinkpy.datastream.connectors.base import DeliveryGuarantee
from flinkpy.datastream.connectors.kafka import FlinkKafkaProducer, KafkaRecordSerializationSchema, KafkaSink, Semantic
from flinkpy.errors import ClusterUnreachableError, ConfigurationError
from servers import free_port
from test_recovery import start  # noqa: F401 - a fixture

pytestmark = pytest.mark.timeout(60)

JOB = ROOT / "tests" / "kafka_sink_job.py"
#: the split job's sink vertex (tests/kafka_sink_job.py), killed at sink-before-commit
SPLIT_SINK_VERTEX = 2
KILLED_CHECKPOINT = 3


def sink(kafka: Any, topic: str, guarantee: DeliveryGuarantee = DeliveryGuarantee.EXACTLY_ONCE, **props: str) -> KafkaSink:
    b = (KafkaSink.builder().set_bootstrap_servers(kafka.bootstrap)
         .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(topic)
                                .set_value_serialization_schema(SimpleStringSchema()).build())
         .set_delivery_guarantee(guarantee).set_transactional_id_prefix(f"tx-{topic}"))
    for k, v in props.items():
        b.set_property(k.replace("_", "."), v)
    return b.build()


def writer(s: KafkaSink, subtask: int = 0, parallelism: int = 1, restored: list | None = None) -> Any:
    w = s.create_writer(ReaderContext(subtask, parallelism, job_id="0123456789ab", operator_name="kafka", restored_state=restored or []))
    w.open()
    return w


def values(kafka: Any, topic: str) -> list[str]:
    return sorted(m.value().decode() for m in kafka.read(topic))


# -- the protocol, pure ------------------------------------------------------------------------


def recs(*vs: str) -> list[ProducerRecord]:
    return [ProducerRecord("t", v.encode()) for v in vs]


def test_records_held_across_an_aborted_checkpoint_commit_with_the_next() -> None:
    p = CommitProtocol("px", 1, token=iter(range(1, 100)).__next__)
    assert p.write(recs("a")) == [Begin(), Send(recs("a"))]
    assert p.snapshot(1) == [Prepare(1, "px-1", "t")]
    assert p.write(recs("b")) == []  # a transaction waits for checkpoint 1: held
    assert p.snapshot(2) == []  # checkpoint 1 never completes (aborted); "b" is checkpoint 2's
    assert [len(b["records"]) for b in p.state()["pending"]] == [1, 1] and pending_summary(p.state())["pending_records"] == 2
    assert p.write(recs("c")) == []
    # completing 2 covers 1: commit the waiting transaction, write and commit 2's, reopen for "c"
    assert p.complete(2) == [Commit(), Begin(), Send(recs("b")), Prepare(2, "px-1", "t"), Commit(), Begin(), Send(recs("c"))]
    assert p.state()["pending"] == [] and pending_summary(p.state())["pending_records"] == 0
    assert p.end_of_input() == [Prepare(3, "px-1", "t"), Commit()]
    assert p.snapshot(4) == [] and p.complete(4) == []  # nothing left to write


def test_a_one_topic_sink_keeps_values_and_restores_either_form() -> None:
    """Without a key or topic selector a batch holds the values alone (in the checkpoint too);
    a checkpoint of the earlier form, a tuple per record, restores all the same."""
    p = CommitProtocol("px", 0, token=iter(range(1, 100)).__next__, topic="t")
    assert p.write([b"a", b"b"]) == [Begin(), Send([b"a", b"b"], "t")]
    assert p.snapshot(1) == [Prepare(1, "px-0", "t")]
    state = p.state()
    assert state["pending"][0]["values"] == [b"a", b"b"] and pending_summary(state)["pending_records"] == 2
    earlier = {"prefix": "px", "subtask": 1, "pending": [
        {"checkpoint": 1, "token": 5, "group": "px-1", "records": [("t", b"c", None, None, None, None)]}]}
    mixed = CommitProtocol("px", 2, token=iter([9]).__next__, topic="t")  # one record with a timestamp
    mixed.write([b"d", (b"e", 5)])
    mixed.snapshot(1)
    (restored,) = recovery_plan("px", 2, [pickle.loads(pickle.dumps(mixed.state()))]).batches
    assert restored.records == [b"d", (b"e", 5)] and restored.topic == "t"
    plan = recovery_plan("px", 0, [state, earlier])
    assert [replay(b) for b in plan.batches] == [
        [Begin(), Send([b"a", b"b"], "t"), Prepare(1, "px-0", "t"), Commit()],
        [Begin(), Send([ProducerRecord("t", b"c")]), Prepare(5, "px-1", "t"), Commit()]]


# -- the writer against noida-db ---------------------------------------------------------------


def kept(state: dict) -> list[list[bytes]]:
    """The values of the records each pending batch of a writer's state would replay."""
    return [[r if isinstance(r, bytes) else r.value for r in Batch.from_state(b).records] for b in state["pending"]]


def test_records_show_only_when_their_checkpoint_completes(kafka) -> None:
    topic = kafka.new_topic(2)
    w = writer(sink(kafka, topic))
    w.write([f"r{i}" for i in range(10)])
    state = w.snapshot_state(1)
    assert values(kafka, topic) == [] and len(kept(state)[0]) == 10
    w.write(["late"])  # after the barrier: not checkpoint 1's
    w.notify_checkpoint_complete(1)
    assert values(kafka, topic) == sorted(f"r{i}" for i in range(10))
    w.close()  # the open transaction ("late") is aborted: no checkpoint covers it
    assert "late" not in values(kafka, topic)
    assert len(kafka.read(topic, committed_only=False)) == 11


def test_a_crash_between_completion_and_commit_commits_the_checkpoint_once(kafka) -> None:
    topic = kafka.new_topic(2)
    s = sink(kafka, topic)
    w = writer(s)
    w.write(["a", "b", "c"])
    state = w.snapshot_state(1)
    w.write(["after"])  # held while checkpoint 1 waits; its task dies before the commit
    # checkpoint 1 completed, the task died before notify: the restore finds the transaction
    # still open, fences it (aborting it) and writes the records again with the marker
    restored = writer(s, restored=[state])
    assert values(kafka, topic) == ["a", "b", "c"]
    # it dies again right after that recovery: the marker says checkpoint 1 is in, nothing twice
    again = writer(s, restored=[state])
    assert values(kafka, topic) == ["a", "b", "c"]
    again.write(["d"])
    again.notify_checkpoint_complete(2)  # (nothing pending: d waits for a snapshot)
    assert kept(again.snapshot_state(2)) == [[b"d"]]
    again.notify_checkpoint_complete(2)
    assert values(kafka, topic) == ["a", "b", "c", "d"]
    for x in (w, restored, again):
        x.close()


def test_a_committed_checkpoint_is_recognised_on_restore(kafka) -> None:
    topic = kafka.new_topic()
    s = sink(kafka, topic)
    w = writer(s)
    w.write(["x", "y"])
    state = w.snapshot_state(5)
    w.notify_checkpoint_complete(5)
    w.close()
    writer(s, restored=[state]).close()  # e.g. killed after the commit, before the next checkpoint
    assert values(kafka, topic) == ["x", "y"]


def test_restore_at_another_parallelism_fences_every_old_subtask(kafka) -> None:
    topic = kafka.new_topic(2)
    s = sink(kafka, topic)
    old = [writer(s, i, 2) for i in range(2)]
    old[0].write(["0-a"])
    old[1].write(["1-a"])
    states = [w.snapshot_state(1) for w in old]
    old[1].write(["1-lingering"])  # subtask 1 left a transaction open after checkpoint 1
    old[0].write(["0-lingering"])
    # checkpoint 1 completed; the job comes back at parallelism 1 before any commit
    new = writer(s, 0, 1, restored=states)
    # the lingering transactions are aborted, so a read_committed reader gets past them
    assert values(kafka, topic) == ["0-a", "1-a"]
    new.write(["n"])
    new.notify_checkpoint_complete(2) if new.snapshot_state(2) else None
    assert values(kafka, topic) == ["0-a", "1-a", "n"]
    new.close()


def test_a_topic_selector_and_a_key_schema(kafka) -> None:
    even, odd = kafka.new_topic(), kafka.new_topic()
    s = KafkaSink.builder().set_bootstrap_servers(kafka.bootstrap).set_record_serializer(
        KafkaRecordSerializationSchema.builder().set_topic_selector(lambda n: even if n % 2 == 0 else odd)
        .set_key_serialization_schema(SimpleStringSchema()).set_value_serialization_schema(SimpleStringSchema()).build()
    ).set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_property("linger.ms", "5").build()
    w = writer(s)
    w.write([1, 2, 3, 4])
    w.notify_checkpoint_complete(1) if w.snapshot_state(1) else None
    assert [(m.key(), m.value()) for m in kafka.read(even)] == [(b"2", b"2"), (b"4", b"4")]
    assert values(kafka, odd) == ["1", "3"]
    w.close()


@pytest.mark.parametrize("guarantee", [DeliveryGuarantee.NONE, DeliveryGuarantee.EXACTLY_ONCE])
def test_records_keep_their_event_timestamps(kafka, guarantee: DeliveryGuarantee) -> None:
    """As Flink's KafkaSink: a record's event timestamp is its Kafka timestamp (CreateTime);
    one without (None) is stamped by the producer. Through a restore too (the batch in the
    checkpoint keeps them)."""
    topic = kafka.new_topic()
    s = sink(kafka, topic, guarantee)
    w = writer(s)
    before = int(time.time() * 1000)
    hour_ago = before - 3_600_000  # within the server's retention, which goes by the timestamps
    w.write_timestamped(["a", "b"], [hour_ago, None])
    w.write(["c"])
    state = w.snapshot_state(1)
    if guarantee is DeliveryGuarantee.EXACTLY_ONCE:
        w.close()  # the crash between completion and commit: the restored writer writes them
        w = writer(s, restored=[state])
    else:
        w.flush(True)
    stamps = {m.value(): m.timestamp() for m in kafka.read(topic)}
    assert stamps[b"a"] == (confluent_kafka.TIMESTAMP_CREATE_TIME, hour_ago), stamps
    assert all(kind == confluent_kafka.TIMESTAMP_CREATE_TIME and ts >= before for kind, ts in (stamps[b"b"], stamps[b"c"])), stamps
    w.close()


def test_the_legacy_producer_writes_timestamps_only_when_asked() -> None:
    producer = FlinkKafkaProducer("t", SimpleStringSchema(), {"bootstrap.servers": "broker:9092"})
    assert producer.create_writer(ReaderContext(0, 1)).write_timestamped is None  # Flink's default
    producer.set_write_timestamp_to_kafka(True)
    assert callable(producer.create_writer(ReaderContext(0, 1)).write_timestamped)


def test_at_least_once_flushes_at_every_checkpoint(kafka) -> None:
    topic = kafka.new_topic()
    w = writer(sink(kafka, topic, DeliveryGuarantee.AT_LEAST_ONCE))
    w.write(["p", "q"])
    w.flush(False)  # the engine flushes before a snapshot: acknowledged by the broker
    assert values(kafka, topic) == ["p", "q"]
    w.close()


def test_flink_kafka_producer_as_pyflink_examples_give_it(kafka, cluster) -> None:
    """PyFlink's kafka_json_format example's write side, imports renamed: JSON rows through the
    legacy producer given to add_sink, on the cluster."""
    from flinkpy.common import Types
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.formats.json import JsonRowSerializationSchema

    topic = kafka.new_topic()
    env = StreamExecutionEnvironment.get_execution_environment()
    type_info = Types.ROW([Types.INT(), Types.STRING()])
    ds = env.from_collection([(1, "hi"), (2, "hello"), (3, "hi")], type_info=type_info)
    serialization_schema = JsonRowSerializationSchema.Builder().with_type_info(type_info).build()
    kafka_producer = FlinkKafkaProducer(
        topic=topic,
        serialization_schema=serialization_schema,
        producer_config={"bootstrap.servers": kafka.bootstrap, "group.id": "test_group"},
    )
    ds.add_sink(kafka_producer)
    env.execute()
    assert [json.loads(v) for v in values(kafka, topic)] == [{"f0": 1, "f1": "hi"}, {"f0": 2, "f1": "hello"}, {"f0": 3, "f1": "hi"}]
    assert FlinkKafkaProducer(topic, SimpleStringSchema(), {"bootstrap.servers": "b:1"}, semantic=Semantic.EXACTLY_ONCE).guarantee == "exactly-once"


# -- bad input ---------------------------------------------------------------------------------


def test_an_unreachable_broker_is_named(kafka) -> None:
    bad = KafkaSink.builder().set_bootstrap_servers(f"127.0.0.1:{free_port()}").set_record_serializer(
        KafkaRecordSerializationSchema.builder().set_topic("t").set_value_serialization_schema(SimpleStringSchema()).build()
    ).set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE).set_property("message.timeout.ms", "1000").build()
    with pytest.raises(ClusterUnreachableError, match=r"no Kafka broker answers at 127\.0\.0\.1:\d+ while reading .* in KafkaSink kafka \(subtask 0\)"):
        writer(bad)


def test_a_missing_topic_is_named_unless_auto_created(kafka) -> None:
    with pytest.raises(KafkaTopicNotFoundError, match=r"topic 'missing-x' does not exist"):
        writer(sink(kafka, "missing-x", allow_auto_create_topics="false"))
    auto = kafka.new_topic()[:-1] + "z"  # a name nobody created: the broker creates it on demand
    w = writer(sink(kafka, auto))
    w.write(["v"])
    w.flush(True)
    assert values(kafka, auto) == ["v"]
    w.close()


def test_builders_refuse_incomplete_input() -> None:
    with pytest.raises(ConfigurationError, match="exactly one of set_topic"):
        KafkaRecordSerializationSchema.builder().set_value_serialization_schema(SimpleStringSchema()).build()
    with pytest.raises(ConfigurationError, match="record serializer"):
        KafkaSink.builder().set_bootstrap_servers("b:1").build()
    with pytest.raises(ConfigurationError, match="transactional id prefix"):
        KafkaSink.builder().set_bootstrap_servers("b:1").set_transactional_id_prefix("a b").set_record_serializer(
            KafkaRecordSerializationSchema.builder().set_topic("t").set_value_serialization_schema(SimpleStringSchema()).build()).build()


def test_a_transaction_timeout_below_the_checkpoint_interval_is_refused_at_submission(tmp_path: Path) -> None:
    job = tmp_path / "short_timeout.py"
    job.write_text(JOB.read_text().replace('"transaction.timeout.ms", "5000"', '"transaction.timeout.ms", "100"'))
    res = run_cli("run", str(job), "127.0.0.1:1", "t", "EXACTLY_ONCE", "1", "1", "10", timeout=60, env={"PYTHONPATH": str(ROOT)})
    assert res.returncode == 8, (res.returncode, res.stderr)
    (line,) = [x for x in res.stderr.splitlines() if x.strip()]
    assert "transaction.timeout.ms 100" in line and "execution.checkpointing.interval 150 ms" in line, line
    assert "Traceback" not in res.stderr


# -- the verification job on a cluster ---------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    rule = [{"point": "sink-before-commit", "vertex": SPLIT_SINK_VERTEX, "subtask": 0, "checkpoint": KILLED_CHECKPOINT}]
    print(f"FLINKPY_FAULT_POINTS={json.dumps(rule)}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLINKPY_FAULT_POINTS", json.dumps(rule))
        with module_cluster(tmp_path_factory, "kafka-sink-home", taskmanagers=2, slots=2) as home:
            yield home


def submit(kafka: Any, topic: str, guarantee: str, keys: int, per_key: int, rate: float, *, p: int = 2,
           split: bool = False, savepoint: str | None = None, input_topic: str | None = None) -> str:
    args = [kafka.bootstrap, topic, guarantee, str(keys), str(per_key), str(rate)] + (["split"] if split or input_topic else [])
    args += [input_topic] if input_topic else []
    (job,) = Client().run(str(JOB), args, parallelism=p, detached=True, savepoint_path=savepoint)
    return job.job_id


def show(jid: str) -> dict[str, Any]:
    return Client().job(jid)


def completed_checkpoints(jid: str) -> int:
    return Client().checkpoints(jid)["counts"]["completed"]


def finished(jid: str, timeout: float = 60) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        doc = show(jid)
        return doc if doc["state"] in ("FINISHED", "FAILED", "CANCELED") else None

    doc = wait_for(done, timeout=timeout, interval=0.1, message=f"job {jid} finished")
    assert doc["state"] == "FINISHED", doc["state"]
    return doc


def exact(kafka: Any, topic: str, keys: int, per_key: int, *, allow_duplicates: bool = False) -> dict[str, Any]:
    records = [ast.literal_eval(m.value().decode()) for m in kafka.read(topic, timeout=60)]
    report = check(records, keys, per_key)
    assert report["lost"] == 0 and report["unexpected"] == 0, report
    if not allow_duplicates:
        assert report["duplicated"] == 0, report
    return report


def causes(jid: str) -> list[str]:
    return [e["message"] for e in Client().job_exceptions(jid)["exceptionHistory"]["entries"]]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("guarantee", ["EXACTLY_ONCE", "AT_LEAST_ONCE"])
def test_the_sink_killed_after_completion_before_commit(kafka, cluster, guarantee: str) -> None:
    """EXACTLY_ONCE: nothing lost, nothing twice; AT_LEAST_ONCE: nothing lost."""
    topic = kafka.new_topic(4)
    keys, per_key = 8, 1500
    jid = submit(kafka, topic, guarantee, keys, per_key, 6000, split=True)
    doc = finished(jid)
    assert doc["restarts"] >= 1 and any("SIGKILL" in c for c in causes(jid)), causes(jid)
    restored = Client().checkpoints(jid)["latest"]["restored"]
    assert restored is not None and restored["id"] >= KILLED_CHECKPOINT, restored
    exact(kafka, topic, keys, per_key, allow_duplicates=guarantee == "AT_LEAST_ONCE")


@pytest.mark.timeout(90)
def test_kafka_to_kafka_exactly_once_when_the_sink_dies_after_completion_before_commit(kafka, cluster) -> None:
    """Keyed sequences read from a 4-partition topic by a KafkaSource (offsets in the checkpoint)
    and written through the EXACTLY_ONCE sink, killed at the same moment as above. Each record
    keeps its Kafka timestamp, those the restored checkpoint wrote again too."""
    source, topic = kafka.new_topic(4), kafka.new_topic(4)
    keys, per_key = 8, 1000  # 2 s at the paced rate: checkpoint 3 comes well before the end
    # a CreateTime per record, an hour before the clock (not older: the server deletes records
    # older than its retention by their timestamps, as Kafka does)
    base = int(time.time() * 1000) - 3_600_000
    stamp = {}
    for k in range(keys):
        values = [f"({k}, {s})" for s in range(1, per_key + 1)]
        stamp.update({v: base + k * 10_000 + s for v, s in zip(values, range(1, per_key + 1))})
        kafka.produce(source, values, partition=k % 4, timestamps=[stamp[v] for v in values])
    jid = submit(kafka, topic, "EXACTLY_ONCE", keys, per_key, 4000, input_topic=source)
    doc = finished(jid)
    assert doc["restarts"] >= 1 and any("SIGKILL" in c for c in causes(jid)), causes(jid)
    exact(kafka, topic, keys, per_key)
    written = {m.value().decode(): m.timestamp() for m in kafka.read(topic, timeout=60)}
    wrong = {v: ts for v, ts in written.items() if ts != (confluent_kafka.TIMESTAMP_CREATE_TIME, stamp[v])}
    assert not wrong, f"{len(wrong)} of {len(written)} records lost their timestamp, e.g. {list(wrong.items())[:3]}"


@pytest.mark.timeout(90)
def test_exactly_once_across_a_taskmanager_kill(kafka, start) -> None:
    # a cluster of its own: the TaskManager started in place of the killed one belongs to it
    start(taskmanagers=2, slots=2)
    topic = kafka.new_topic(4)
    keys, per_key = 8, 2500
    jid = submit(kafka, topic, "EXACTLY_ONCE", keys, per_key, 6000)
    wait_for(lambda: completed_checkpoints(jid) >= 2, timeout=30, interval=0.1, message="two checkpoints")
    Client().inject_cluster_fault("kill-taskmanager", pick=0.0, job=jid)  # one running the job's tasks
    doc = finished(jid)
    assert doc["restarts"] >= 1, causes(jid)
    exact(kafka, topic, keys, per_key)


@pytest.mark.timeout(90)
def test_exactly_once_across_a_broker_outage(kafka, cluster) -> None:
    """The broker frozen (SIGSTOP) until the job has failed for it, then resumed (SIGCONT).

    Not ``kafka.stop()`` / ``kafka.start()``: noida-db loses the transactions it acknowledged in
    its last moments before a SIGTERM or SIGINT (its log is written behind), records and group
    offsets alike, which no client can make up for; Kafka flushes its log on a clean shutdown.
    """
    topic = kafka.new_topic(4)
    keys, per_key = 8, 2500
    jid = submit(kafka, topic, "EXACTLY_ONCE", keys, per_key, 5000)
    wait_for(lambda: completed_checkpoints(jid) >= 2, timeout=30, interval=0.1, message="two checkpoints")
    os.kill(kafka.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: show(jid)["restarts"] >= 1, timeout=30, interval=0.1, message="a restart for the outage",
                 describe=lambda: (show(jid)["state"], show(jid)["restarts"], causes(jid)))
    finally:
        os.kill(kafka.proc.pid, signal.SIGCONT)
    finished(jid)
    assert any("no Kafka broker answers" in c and "KafkaSink kafka" in c for c in causes(jid)), causes(jid)
    exact(kafka, topic, keys, per_key)


def stop_with_savepoint(jid: str, target: Path) -> str:
    client = Client()
    request = client.stop_with_savepoint(jid, str(target), deadline=Deadline(60))
    location = client.wait_for_savepoint(jid, request, Deadline(60), what="stop-with-savepoint")
    assert client.wait_until_finished(jid, Deadline(60), location) == "FINISHED"
    return location


@pytest.mark.timeout(90)
def test_stop_with_savepoint_and_resume_at_3_then_1_is_exact(kafka, cluster, tmp_path: Path) -> None:
    """2 -> 3 (a new subtask with no old state) -> 1 (one subtask fences and checks three)."""
    topic = kafka.new_topic(4)
    keys, per_key = 6, 2000
    savepoint = None
    for step, p in enumerate((2, 3)):
        # 12 s of input at this rate: each stop comes long before its end
        jid = submit(kafka, topic, "EXACTLY_ONCE", keys, per_key, 1000, p=p, savepoint=savepoint)
        wait_for(lambda: completed_checkpoints(jid) >= 1, timeout=30, interval=0.1, message="a checkpoint")
        savepoint = stop_with_savepoint(jid, tmp_path / f"sp{step}")
        # checkpoint inspect: the records each subtask's transaction held at the savepoint
        (op,) = [o for o in cli_json("checkpoint", "inspect", savepoint)["metadata"]["operators"] if o["uid"] == "kafka"]
        pending = [s["operator_state"]["states"]["sink"]["pending_records"] for s in op["subtasks"]]
        assert len(pending) == p and all(n >= 0 for n in pending), pending
        assert len(values(kafka, topic)) < keys * per_key
    text = run_cli("checkpoint", "inspect", savepoint).stdout
    assert f"{pending[0]} records in its pending transaction" in text.replace("\n", " "), text
    jid = submit(kafka, topic, "EXACTLY_ONCE", keys, per_key, 20_000, p=1, savepoint=savepoint)
    finished(jid)
    exact(kafka, topic, keys, per_key)


def test_info_states_the_end_to_end_guarantee_and_read_committed() -> None:
    res = run_cli("info", "--json", str(JOB), "127.0.0.1:1", "t", "EXACTLY_ONCE", "1", "1", "10")
    assert res.returncode == 0, res.stderr
    g = json.loads(res.stdout)["guarantees"]
    (s,) = g["sinks"]
    assert g["end_to_end"] == "exactly-once" and s["connector"] == "KafkaSink" and s["guarantee"] == "exactly-once", g
    assert "read_committed" in s["needs"] and any("read_committed" in w for w in g["warnings"]), g
