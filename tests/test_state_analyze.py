"""`flinkpy state analyze` and flinkpy.client.analysis on a real savepoint of a skewed keyed job.

One savepoint is made per module: a background cluster (2 TaskManagers x 2 slots) runs a keyed
job at parallelism 2 over the numbers 1..M — one hot key gets every third number, the other
keys share the rest — until a completed checkpoint shows that every source has read past M
(so the keyed state covers exactly 1..M: later numbers are filtered out), then
`flinkpy stop --savepoint-path` takes the savepoint and the cluster is stopped. Every expected
figure (keys per state, per key group and subtask, entries) is computed here in plain Python
from 1..M; synchronisation is by `wait_for`, never by sleeping.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from conftest import all_gone_after, run_cli
from flinkpy.errors import ExitCode
from keyed_state_job import keyed_job, stop_with_savepoint
from flinkpy.state.key_groups import assign_to_key_group, compute_operator_index_for_key_group

M = 3000  #: numbers that reach the keyed operator: 1..M
MAX_PARALLELISM = 128
PARALLELISM = 2

#: shared by the job and the expectations below
KEY_OF = textwrap.dedent(
    """
    def key_of(n):
        return "hot" if n % 3 == 0 else f"k{n % 97:02d}"
    """
)
namespace: dict[str, Any] = {}
exec(KEY_OF, namespace)  # noqa: S102 - our own constant
key_of = namespace["key_of"]

JOB = keyed_job(
    prelude=KEY_OF,
    condition=f"n <= {M}",
    track="""
    class Track(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count"))
            self.events = ctx.get_list_state(ListStateDescriptor("events"))
            self.digits = ctx.get_map_state(MapStateDescriptor("digits"))

        def process_element(self, pair, ctx):
            n = pair[1]
            self.count.update((self.count.value() or 0) + 1)
            self.events.add(n)
            self.digits.put(n % 10, (self.digits.get(n % 10) or 0) + 1)
            return []
    """,
    name="skewed keys",
)


def expected() -> dict[str, Any]:
    """Keys, entries, keys per key group and per subtask of each state, from 1..M alone."""
    per_key: dict[str, list[int]] = defaultdict(list)
    for n in range(1, M + 1):
        per_key[key_of(n)].append(n)
    keys = set(per_key)
    groups = Counter(assign_to_key_group(k, MAX_PARALLELISM) for k in keys)
    subtasks = Counter(compute_operator_index_for_key_group(MAX_PARALLELISM, PARALLELISM, assign_to_key_group(k, MAX_PARALLELISM)) for k in keys)
    return {
        "keys": len(keys),
        "entries": {"count": len(keys), "events": M, "digits": sum(len({n % 10 for n in ns}) for ns in per_key.values())},
        "key_groups": dict(groups),
        "subtasks": dict(subtasks),
        "hot_entries": len(per_key["hot"]),
        "hot_group": assign_to_key_group("hot", MAX_PARALLELISM),
    }


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The savepoint directory of the skewed job (its cluster is gone by the time tests run)."""
    from flinkpy.cluster import ClusterHome, start_cluster, stop_cluster

    base = tmp_path_factory.mktemp("state-analyze")
    home = ClusterHome(base / "home")
    (base / "home").mkdir()
    job = base / "skewed.py"
    job.write_text(JOB)
    info = start_cluster(home, taskmanagers=2, slots=2, rest_port=0)
    env = {"FLINKPY_HOME": str(base / "home"), "FLINKPY_JOBMANAGER": info.rest_address}
    pids = [info.jobmanager_pid] + [tm.pid for tm in info.taskmanagers]
    try:
        path = stop_with_savepoint([str(job)], parallelism=PARALLELISM, checkpoints=base / "home" / "checkpoints", last=M,
                                   savepoints=base / "savepoints", env=env)
    finally:
        with all_gone_after(pids):
            stop_cluster(home, timeout_s=10)
    assert (path / "_metadata").is_file(), path
    return path


def _op(result: dict[str, Any], uid: str) -> dict[str, Any]:
    return next(op for op in result["operators"] if op["uid"] == uid)


# --------------------------------------------------------------------------- the Python API


@pytest.mark.timeout(90)
def test_analysis_counts_keys_entries_key_groups_and_finds_the_hot_key(savepoint: Path) -> None:
    from flinkpy.client.analysis import analyze

    want = expected()
    result = analyze(str(savepoint), top=1000)  # every (state, key) entry of the job: 3 x 98
    assert result["kind"] == "savepoint" and result["max_parallelism"] == MAX_PARALLELISM
    track = _op(result, "track")
    assert track["name"] == "track" and track["parallelism"] == PARALLELISM

    # keys and entries per state, exactly
    states = {s["name"]: s for s in track["states"] if not s["internal"]}
    # the engine's timer tables are keyed state too; this job registers no timer
    internal = {s["name"]: (s["keys"], s["entries"], s["bytes"]) for s in track["states"] if s["internal"]}
    assert internal == {"_timers.event": (0, 0, 0), "_timers.processing": (0, 0, 0)}
    assert {name: s["kind"] for name, s in states.items()} == {"count": "value", "events": "list", "digits": "map"}
    assert {name: s["keys"] for name, s in states.items()} == dict.fromkeys(states, want["keys"])
    assert {name: s["entries"] for name, s in states.items()} == want["entries"]
    assert track["keys"] == want["keys"]  # distinct keys over the three states

    # per key group and per subtask, exactly; bytes add up at every level
    for name, st in states.items():
        rows = [r for r in track["key_groups"] if r["state"] == name]
        assert {r["key_group"]: r["keys"] for r in rows} == want["key_groups"]
        assert all(r["subtask"] == compute_operator_index_for_key_group(MAX_PARALLELISM, PARALLELISM, r["key_group"]) for r in rows)
        assert st["key_groups"] == len(want["key_groups"])
        assert all(r["bytes"] > 0 for r in rows)
        assert sum(r["bytes"] for r in rows) == st["bytes"] and sum(r["entries"] for r in rows) == st["entries"]
        assert st["max_key_group_bytes"] == max(r["bytes"] for r in rows)
    assert {s["subtask"]: s["keys"] for s in track["subtasks"]} == want["subtasks"]
    assert sum(s["bytes"] for s in states.values()) == track["bytes"] == sum(s["bytes"] for s in track["subtasks"]) > 0
    assert track["file_bytes"] > 0
    assert result["totals"]["bytes"] == sum(op["bytes"] for op in result["operators"]) == track["bytes"]
    assert result["totals"]["keys"] == want["keys"]
    print(f"keyed bytes {track['bytes']} vs file bytes {track['file_bytes']}; skew {track['skew']}")

    # the hot key leads the top list, and skews key groups and subtasks
    first = result["top_keys"][0]
    assert (first["operator"], first["uid"], first["state"], first["key"]) == ("track", "track", "events", "'hot'")
    assert first["entries"] == want["hot_entries"] and first["key_group"] == want["hot_group"]
    assert len(result["top_keys"]) == sum(s["keys"] for s in states.values())
    sizes = [k["bytes"] for k in result["top_keys"]]
    assert sizes == sorted(sizes, reverse=True)
    assert analyze(str(savepoint), top=5)["top_keys"] == result["top_keys"][:5]
    skew = track["skew"]
    assert skew["key_group_max_to_mean"] > 1 and skew["subtask_max_to_mean"] > 1
    hot_bytes = sum(k["bytes"] for k in result["top_keys"] if k["key"] == "'hot'")
    assert skew["largest_key_bytes"] == hot_bytes > first["bytes"]
    assert skew["largest_key_share"] == pytest.approx(hot_bytes / track["bytes"], abs=1e-4) and 0 < skew["largest_key_share"] < 1
    hot_group_bytes = sum(r["bytes"] for r in track["key_groups"] if r["key_group"] == want["hot_group"])
    assert skew["key_group_max_bytes"] == hot_group_bytes
    assert skew["key_group_max_to_mean"] == pytest.approx(hot_group_bytes / (track["bytes"] / MAX_PARALLELISM), rel=1e-3)

    # operator (non-keyed) state: Select's count per source subtask, one item each
    select = _op(result, "select")
    assert select["states"] == [] and select["skew"] is None
    assert sorted((s["subtask"], s["name"], s["kind"], s["entries"]) for s in select["operator_state"]) == [
        (i, "passed", "list", 1) for i in range(PARALLELISM)
    ]
    assert all(s["bytes"] > 0 for s in select["operator_state"])
    assert select["operator_state_bytes"] == sum(s["bytes"] for s in select["operator_state"])
    assert select["operator_state_file_bytes"] > 0


@pytest.mark.timeout(90)
def test_to_dataframe(savepoint: Path) -> None:
    pd = pytest.importorskip("pandas")
    from flinkpy.client.analysis import analyze, to_dataframe

    result = analyze(str(savepoint))
    df = to_dataframe(result)
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns[:6]) == ["operator", "state", "key_group", "keys", "entries", "bytes"]
    by_state = df.groupby("state")["bytes"].sum().to_dict()
    assert by_state == {s["name"]: s["bytes"] for s in _op(result, "track")["states"] if s["key_groups"]}
    assert int(df["keys"].sum()) == sum(s["keys"] for s in _op(result, "track")["states"])


# --------------------------------------------------------------------------- the command


@pytest.mark.timeout(90)
def test_command_prints_tables_top_keys_and_skew(savepoint: Path) -> None:
    want = expected()
    res = run_cli("state", "analyze", str(savepoint), "--top", "3", env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    text = res.stdout
    for line in (f"Snapshot: {savepoint}", "Keyed state", "Operator state", "Largest keys (top 3)", "Skew of track [uid track]: largest key group"):
        assert line in text, f"{line!r} missing from:\n{text}"
    assert f"Keyed state: {want['keys']} key(s)" in text
    top_rows = [line for line in text.splitlines() if "'hot'" in line or "'k" in line]
    assert len(top_rows) == 3 and "'hot'" in top_rows[0] and str(want["hot_entries"]) in top_rows[0]


@pytest.mark.timeout(90)
def test_command_json_is_one_document(savepoint: Path) -> None:
    # The _metadata file as a file:// URL names the same snapshot.
    res = run_cli("state", "analyze", (savepoint / "_metadata").as_uri(), "--json", "--top", "2")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) == {
        "path", "metadata_path", "engine", "job_id", "job_name", "checkpoint_id", "kind", "savepoint_format",
        "max_parallelism", "files_checked", "bytes_checked", "totals", "operators", "top_keys",
    }
    assert doc["engine"] == "local" and doc["path"] == savepoint.as_uri() and doc["files_checked"] >= 3
    assert set(doc["totals"]) == {"keys", "entries", "bytes", "file_bytes", "operator_state_bytes", "operator_state_file_bytes"}
    track = _op(doc, "track")
    assert set(track) >= {"operator_id", "uid", "name", "states", "key_groups", "subtasks", "operator_state", "skew"}
    assert set(track["key_groups"][0]) == {"state", "kind", "key_group", "subtask", "keys", "entries", "bytes"}
    assert [k["key"] for k in doc["top_keys"]][:1] == ["'hot'"] and len(doc["top_keys"]) == 2
    assert set(doc["top_keys"][0]) == {"operator", "uid", "operator_id", "state", "kind", "key", "key_group", "subtask", "entries", "bytes"}


@pytest.mark.timeout(30)
def test_an_unknown_engine_or_spark_conf_is_a_usage_error(savepoint: Path) -> None:
    res = run_cli("state", "analyze", str(savepoint), "--engine", "hadoop")
    assert res.returncode == ExitCode.USAGE == 2 and res.stdout == ""
    assert res.stderr.startswith("flinkpy: error: unknown analysis engine 'hadoop'")
    # a bad --spark-conf is refused before Spark starts
    res = run_cli("state", "analyze", str(savepoint), "--engine", "spark", "--spark-conf", "no-equals-sign", "--json")
    assert res.returncode == ExitCode.USAGE and json.loads(res.stdout)["error"]["exit_code"] == ExitCode.USAGE


@pytest.mark.timeout(30)
def test_a_directory_without_metadata_is_not_a_complete_checkpoint(savepoint: Path, tmp_path: Path) -> None:
    half = tmp_path / "chk-7"
    shutil.copytree(savepoint, half)
    (half / "_metadata").unlink()
    res = run_cli("state", "analyze", str(half))
    assert res.returncode == ExitCode.NOT_FOUND == 4
    assert res.stdout == ""
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"flinkpy: error: {half} is not a complete checkpoint: it has no _metadata")
    res = run_cli("state", "analyze", str(half), "--json")
    assert res.returncode == ExitCode.NOT_FOUND
    assert json.loads(res.stdout)["error"]["message"].startswith(f"{half} is not a complete checkpoint")


@pytest.mark.timeout(30)
def test_a_damaged_state_file_is_refused_before_decoding(savepoint: Path, tmp_path: Path) -> None:
    copy = tmp_path / "damaged"
    shutil.copytree(savepoint, copy)
    keyed = sorted(copy.glob("*-keyed"))[0]
    keyed.write_bytes(keyed.read_bytes()[:-7])  # half-written
    res = run_cli("state", "analyze", str(copy))
    assert res.returncode == ExitCode.CONFLICT == 9
    assert res.stdout == ""
    (line,) = res.stderr.splitlines()
    assert line.startswith(f"flinkpy: error: {keyed}: size mismatch")


# --------------------------------------------------------------------------- the spark engine
# One local[2] SparkSession for the module (5-15 s to start); PySpark and Java are needed.


@pytest.fixture(scope="module")
def spark() -> Any:
    pytest.importorskip("pyspark")
    from flinkpy.spark.analysis import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()


def _without_engine(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "engine"}


@pytest.mark.timeout(180)
def test_spark_engine_gives_the_local_report(savepoint: Path, spark: Any) -> None:
    from flinkpy.client.analysis import analyze

    for top in (1000, 7, 0):  # 7: the cut falls among keys of equal size; ties go to the key stored first
        local = analyze(str(savepoint), top=top)
        distributed = analyze(str(savepoint), top=top, engine="spark", spark=spark)
        assert local["engine"] == "local" and distributed["engine"] == "spark"
        assert _without_engine(distributed) == _without_engine(local), f"top={top}"
    sizes = [k["bytes"] for k in local["top_keys"]]
    assert len(set(sizes)) < len(sizes) or top == 0  # the savepoint does have ties


def _canonical_snapshot(base: Path) -> str:
    """A hand-made checkpoint in the canonical format with what the job above lacks: timers
    (counted per user key), a key repr longer than the cut, 1 and True (one key for Python), a
    state without keys, two keyed operators and ties in size."""
    import pickle

    from flinkpy.checkpoint import CheckpointStorage, keyed_state, new_metadata, new_operator, new_subtask
    from flinkpy.state.heap import TIMER_EVENT_TABLE

    storage = CheckpointStorage(str(base))
    long_key = "x" * 200
    keys = ["a", "b", "c", 1, long_key, ("t", 2)]
    operators = []
    for o, parallelism in enumerate((2, 3)):
        subtasks = []
        for index in range(parallelism):
            first, last = (index * 128 // parallelism, (index + 1) * 128 // parallelism - 1)
            states: dict[str, Any] = {"counts": {}, "seen": {}, "never": {}, TIMER_EVENT_TABLE: {}}
            for key in keys:
                kg = assign_to_key_group(key, MAX_PARALLELISM)
                if not first <= kg <= last:
                    continue
                states["counts"].setdefault(kg, {})[key] = 10 + o
                states["seen"].setdefault(kg, {})[True if key == 1 else key] = list(range(len(str(key)) % 5))
                for ts in range(3 if key == "a" else 1):
                    states[TIMER_EVENT_TABLE].setdefault(kg, {})[(key, None, 1000 + ts)] = None
            kinds = {"counts": "value", "seen": "list", "never": "map", TIMER_EVENT_TABLE: "value"}
            doc = {"version": 1, "states": {name: {"kind": kinds[name], "key_groups": groups} for name, groups in states.items()}}
            handle = storage.write_state("hand", 3, f"op{o}-{index}-keyed", pickle.dumps(doc, protocol=5))
            summary = {name: {"kind": kinds[name], "entries": sum(len(m) for m in g.values())} for name, g in states.items()}
            subtasks.append(new_subtask(index, keyed_state=keyed_state(handle, (first, last), summary)))
        operators.append(new_operator(operator_id=f"op{o}", uid=None, name=f"keyed {o}", vertex_id=o + 1, parallelism=parallelism, max_parallelism=MAX_PARALLELISM, subtasks=subtasks))
    storage.write_metadata("hand", 3, new_metadata(job_id="hand", job_name="hand-made", checkpoint_id=3, trigger_timestamp=1, completion_timestamp=2, operators=operators))
    return storage.checkpoint_dir("hand", 3)


@pytest.mark.timeout(120)
def test_spark_engine_matches_on_timers_long_keys_and_empty_states(spark: Any, tmp_path: Path) -> None:
    from flinkpy.client.analysis import analyze

    path = _canonical_snapshot(tmp_path)
    local = analyze(path, top=4)
    assert _without_engine(analyze(path, top=4, engine="spark", spark=spark)) == _without_engine(local)
    op = local["operators"][0]
    states = {s["name"]: s for s in op["states"]}
    assert states["never"]["keys"] == 0 and states["_timers.event"]["entries"] == 8 and states["_timers.event"]["keys"] == 6
    assert op["keys"] == 6  # 1 and True are one key
    everything = analyze(path, top=100)
    assert any(k["key"].endswith("...") and len(k["key"]) == 80 for k in everything["top_keys"])
    assert _without_engine(analyze(path, top=100, engine="spark", spark=spark)) == _without_engine(everything)


@pytest.mark.timeout(120)
def test_read_keyed_state_is_a_dataframe_of_keys(savepoint: Path, spark: Any) -> None:
    from pyspark.sql import functions as F

    from flinkpy.spark.analysis import KEY_COLUMNS, read_keyed_state
    from flinkpy.client.analysis import analyze

    want = expected()
    keys = read_keyed_state(spark, str(savepoint))
    assert tuple(keys.columns) == KEY_COLUMNS
    track = keys.where(F.col("uid") == "track")
    per_state = {r.state: (r.n, r.entries) for r in track.groupBy("state").agg(F.count(F.lit(1)).alias("n"), F.sum("entries").alias("entries")).collect()}
    assert per_state == {name: (want["keys"], entries) for name, entries in want["entries"].items()}
    (hot,) = track.where((F.col("state") == "events") & (F.col("key") == "'hot'")).collect()
    assert hot.entries == want["hot_entries"] and hot.key_group == want["hot_group"] and hot.subtask == compute_operator_index_for_key_group(MAX_PARALLELISM, PARALLELISM, want["hot_group"])
    report = _op(analyze(str(savepoint)), "track")
    assert track.agg(F.sum("bytes")).first()[0] == report["bytes"]


@pytest.mark.timeout(120)
def test_spark_engine_refuses_damaged_and_undecodable_files_like_the_local_one(savepoint: Path, spark: Any, tmp_path: Path) -> None:
    import pickle

    from flinkpy.checkpoint import CheckpointStorage
    from flinkpy.checkpoint.metadata import CorruptCheckpointError
    from flinkpy.client.analysis import analyze

    damaged = tmp_path / "damaged"
    shutil.copytree(savepoint, damaged)
    keyed = sorted(damaged.glob("*-keyed"))
    for f in keyed:
        f.write_bytes(f.read_bytes()[:-7])
    errors = []
    for engine in ("local", "spark"):
        with pytest.raises(CorruptCheckpointError) as info:
            analyze(str(damaged), engine=engine, spark=spark)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and f"{len(keyed)} problems" in errors[0] and "size mismatch" in errors[0]

    # A file that matches _metadata but is not a snapshot this flinkpy reads: found by a task.
    other = tmp_path / "other-version"
    shutil.copytree(savepoint, other)
    storage = CheckpointStorage(str(other))
    doc = storage.read_metadata(str(other))
    sub = next(s for op in doc["operators"] if op["uid"] == "track" for s in op["subtasks"] if s["subtask"] == 1)
    sub["keyed_state"].update(storage.write_state_in(str(other), sub["keyed_state"]["path"], pickle.dumps({"version": 99, "states": {}})))
    storage.write_metadata_in(str(other), doc)
    errors = []
    for engine in ("local", "spark"):
        with pytest.raises(CorruptCheckpointError) as info:
            analyze(str(other), engine=engine, spark=spark)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "keyed state snapshot has version 99" in errors[0]




def _incremental_and_full(tmp_path: Path) -> tuple[Path, Path]:
    """The same keyed state of a RocksDB backend written twice: as an incremental checkpoint
    (native store files, SSTs under shared/) and as a full canonical one."""
    from flinkpy.checkpoint import CheckpointStorage
    from flinkpy.checkpoint.metadata import keyed_state, new_metadata, new_operator, new_subtask
    from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
    from flinkpy.state.incremental import IncrementalSnapshot
    from flinkpy.state.rocksdb import RocksDBKeyedStateBackend

    backend = RocksDBKeyedStateBackend(128, range(0, 128), local_dir=str(tmp_path / "db"))
    count = backend.get_partitioned_state(ValueStateDescriptor("count", None))
    seen = backend.get_partitioned_state(ListStateDescriptor("seen", None))
    attrs = backend.get_partitioned_state(MapStateDescriptor("attrs", None, None))
    for n in range(3000):
        backend.set_current_key(f"k{n % 400}")
        count.update((count.value() or 0) + 1)
        seen.add(n)
        if n % 3 == 0:
            attrs.put(n % 7, "x" * (n % 50))
    storage = CheckpointStorage(str(tmp_path / "cp"))
    out = []
    for cid, incremental in ((1, True), (2, False)):
        if incremental:
            local = str(tmp_path / "native")
            backend.native_checkpoint(local)
            snap = IncrementalSnapshot(local, backend.key_group_range, backend.state_summary(), {})
            handle = snap.upload(cid, lambda data: storage.write_state("job", cid, "sums-0-keyed.rocksdb", data),
                                 lambda path, name: storage.write_shared("job", path, name))
            states = snap.summary()
        else:
            frozen = backend.snapshot_sync()
            handle = storage.write_state("job", cid, "sums-0-keyed", frozen.serialize())
            states = frozen.summary()
        doc = new_metadata(job_id="job", job_name="counts", checkpoint_id=cid, trigger_timestamp=1, completion_timestamp=2, operators=[
            new_operator(operator_id="sums", uid="sums", name="counts", vertex_id=1, parallelism=1, max_parallelism=128,
                         subtasks=[new_subtask(0, keyed_state=keyed_state(handle, (0, 127), states))])])
        storage.write_metadata("job", cid, doc)
        out.append(Path(storage.checkpoint_dir("job", cid)))
    backend.close()
    return out[0], out[1]


def test_incremental_checkpoints_are_analyzed_like_full_ones(spark: Any, tmp_path: Path) -> None:
    from flinkpy.client.analysis import analyze

    incremental, full = _incremental_and_full(tmp_path)
    assert list((incremental.parent / "shared").iterdir()), "the incremental checkpoint has shared files"
    def logical(result: dict[str, Any]) -> Any:  # what the state holds, not how the files store it
        def strip(x: Any) -> Any:
            if isinstance(x, dict):
                return {k: strip(v) for k, v in x.items() if k != "file_bytes"}
            if isinstance(x, list):
                return sorted((strip(v) for v in x), key=lambda v: json.dumps(v, sort_keys=True, default=str))
            return x

        return strip(result["operators"]), result["top_keys"]

    want = logical(analyze(str(full), top=20))
    for engine in ("local", "spark"):
        assert logical(analyze(str(incremental), engine=engine, spark=spark, top=20)) == want, engine


@pytest.mark.timeout(180)
def test_command_with_the_spark_engine_prints_the_local_document(savepoint: Path) -> None:
    pytest.importorskip("pyspark")
    local = run_cli("state", "analyze", str(savepoint), "--json", "--top", "5")
    res = run_cli("state", "analyze", str(savepoint), "--json", "--top", "5", "--engine", "spark", "--spark-master", "local[2]",
                  "--spark-conf", "spark.sql.shuffle.partitions=2", timeout=150)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["engine"] == "spark"
    assert _without_engine(doc) == _without_engine(json.loads(local.stdout))
