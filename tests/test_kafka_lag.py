"""Consumer lag per partition of a KafkaSource, as `flinkpy job show`, `flinkpy top` and
Prometheus show it (one noida-db server and one small cluster for the module).

The lag is made deterministic with a bounded source: partition 0 stops at offset ``READ``
although ``READ + BEHIND`` records are in it, and partition 1 stops at ``2 * READ`` with only
``READ`` records in it, so the job keeps running, holding partition 0 exactly ``BEHIND`` records
behind its end and partition 1 at its end (0 behind) until the test cancels it.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import cli_json, module_cluster, run_cli, wait_for
from flinkpy.cluster import ClusterHome
from flinkpy.common import WatermarkStrategy
from flinkpy.common.serialization import SimpleStringSchema
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource, KafkaTopicPartition
from flinkpy.network.rest_client import RestClient

READ, BEHIND = 5, 7


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """One cluster for the module; jobs built here (execute_async) go to it."""
    with module_cluster(tmp_path_factory, "kafka-lag", taskmanagers=1, slots=2) as home, pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLINKPY_JOBMANAGER", json.loads((home / "jobmanager.json").read_text())["rest_address"])
        yield home


@pytest.fixture(scope="module")
def lagging_job(kafka, cluster):
    """(job id, topic) of a running job whose source is BEHIND records behind on partition 0."""
    topic = kafka.new_topic(2)
    kafka.produce(topic, [f"a{i}" for i in range(READ + BEHIND)], partition=0)
    kafka.produce(topic, [f"b{i}" for i in range(READ)], partition=1)
    stop = {KafkaTopicPartition(topic, 0): READ, KafkaTopicPartition(topic, 1): 2 * READ}
    src = (KafkaSource.builder().set_bootstrap_servers(kafka.bootstrap).set_topics(topic)
           .set_starting_offsets(KafkaOffsetsInitializer.earliest())
           .set_bounded(KafkaOffsetsInitializer.offsets(stop))
           .set_value_only_deserializer(SimpleStringSchema()).build())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.from_source(src, WatermarkStrategy.no_watermarks(), "kafka").uid("kafka").print()
    client = env.execute_async("kafka lag")
    jid = client.get_job_id()
    # the lag reaches the JobManager once the source has read up to its stopping offsets (and
    # the task process is up before the tests' leak check looks)
    rest = RestClient(json.loads((cluster / "jobmanager.json").read_text())["rest_address"], ClusterHome(cluster).token())
    wait_for(lambda: _lags(rest.job(jid)) == {0: BEHIND, 1: 0}, timeout=20, message=f"lag {{0: {BEHIND}, 1: 0}} in GET /jobs/{jid}",
             describe=lambda: _lags(rest.job(jid)))
    yield jid, topic
    if client.get_job_status() == "FAILED":
        print(run_cli("job", "exceptions", jid).stdout)
        return
    client.cancel()
    wait_for(lambda: client.get_job_status() in ("CANCELED", "FAILED", "FINISHED"), timeout=20)


def _source(doc: dict) -> dict:
    (vertex,) = [v for v in doc["vertices"] if "kafka" in v["name"]]
    return vertex


def _lags(doc: dict) -> dict[int, float]:
    return {p["partition"]: p.get("pendingRecords") for p in _source(doc).get("partitions", [])}


def test_job_show_lists_each_partitions_offsets_and_lag(lagging_job) -> None:
    jid, topic = lagging_job
    doc = cli_json("job", "show", jid)
    assert _lags(doc) == {0: BEHIND, 1: 0}, doc
    source = _source(doc)
    assert source["metrics"]["pendingRecords"] == BEHIND, source["metrics"]
    offsets = {p["partition"]: (p["topic"], p["subtask"], p["currentOffset"]) for p in source["partitions"]}
    assert offsets == {0: (topic, 0, READ), 1: (topic, 0, READ)}, source["partitions"]
    text = run_cli("job", "show", jid, env={"COLUMNS": "80"})
    assert text.returncode == 0, text.stderr
    print(text.stdout)
    assert "Consumer lag" in text.stdout, text.stdout
    rows = [line for line in text.stdout.splitlines() if f"{topic[:8]}" in line or "/0" in line or "/1" in line]
    assert any(re.search(rf"/0\s.*\b{READ}\b.*\b{BEHIND}\b", line) for line in rows), text.stdout


def test_top_shows_the_lag_per_vertex_and_per_partition(lagging_job) -> None:
    jid, topic = lagging_job
    frame = cli_json("top", jid)
    (vertex,) = [v for v in frame["vertices"] if "kafka" in v["name"]]
    assert vertex["pending-records"] == BEHIND, vertex
    assert {p["partition"]: p["pendingRecords"] for p in vertex["partitions"]} == {0: BEHIND, 1: 0}, vertex
    once = run_cli("top", jid, "--once", env={"COLUMNS": "80"})
    assert once.returncode == 0, once.stderr
    print(once.stdout)
    assert all(len(line) <= 80 for line in once.stdout.splitlines()), once.stdout
    # the source's lag, then each partition's on the same row (they fit in 80 columns)
    assert re.search(rf"Source: kafka\s*│\s*{BEHIND} │ {topic}/0 {BEHIND}, {topic}/1 0 ", once.stdout), once.stdout
    each = run_cli("top", jid, "--once", "--partitions", env={"COLUMNS": "80"})
    assert each.returncode == 0, each.stderr
    print(each.stdout)
    per_row = [line for line in each.stdout.splitlines() if re.search(rf"/1\s.*\b{READ}\b.*\b0\s*│", line)]
    assert per_row, each.stdout


def test_prometheus_exposes_the_lag_per_partition(lagging_job, cluster) -> None:
    jid, topic = lagging_job
    rest = RestClient(json.loads((cluster / "jobmanager.json").read_text())["rest_address"], ClusterHome(cluster).token())

    def series() -> dict[str, float]:
        """partition -> its pendingRecords series (Flink's operator scope, topic and partition as labels)."""
        out = {}
        for line in rest.request("GET", "/metrics").splitlines():
            if line.startswith("#") or "KafkaSourceReader" not in line or "pendingRecords" not in line or topic not in line:
                continue
            labels, value = line.rsplit(" ", 1)
            part = re.search(r'partition="(\d+)"', labels)
            out[part.group(1) if part else labels] = float(value)
        return out

    wait_for(lambda: series() == {"0": float(BEHIND), "1": 0.0}, timeout=15, message="per-partition lag series", describe=series)


def test_top_folds_partitions_that_do_not_fit_in_80_columns() -> None:
    from commands.live import lag_table

    partitions = [{"topic": "orders", "partition": p, "subtask": p % 2, "currentOffset": 10, "pendingRecords": p} for p in range(12)]
    doc = {"vertices": [{"id": 1, "name": "Source: kafka -> Map", "metrics": {"pendingRecords": 66}, "partitions": partitions},
                        {"id": 2, "name": "Sink", "metrics": {}}]}
    folded = lag_table(doc, per_partition=False)
    assert folded is not None and folded.row_count == 1 and folded.caption
    assert [c._cells for c in folded.columns] == [["1 Source: kafka"], ["66"], ["12 partitions; most behind: orders/11 11"]]
    each = lag_table(doc, per_partition=True)
    assert each is not None and each.row_count == 12
    assert lag_table({"vertices": [doc["vertices"][1]]}, per_partition=False) is None  # no source with a lag: no table
