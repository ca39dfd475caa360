"""flinkpy.state_processor and `flinkpy savepoint rewrite`: read a savepoint, write a new one, restore it.

Offline tests build snapshots with the `_metadata` builders and the state backends' own
snapshots (no cluster). The cluster tests share one cluster and one savepoint per module: a
keyed running-sum job is stopped with a savepoint half way; then

- the proof: the job with its operator's uid changed is refused from that savepoint, and after
  ``savepoint rewrite --rename-uid`` it resumes with its state, its output exactly the sums of an
  uninterrupted run (in closed form, computed here);
- the Python API: the savepoint read, its sums transformed, a new operator's keyed state
  bootstrapped, the max parallelism changed, and the job restored from what was written, with
  output exactly what those edits predict.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import textwrap
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import pytest

from conftest import module_cluster, run_cli, wait_for
from flinkpy.checkpoint import CheckpointStorage, keyed_state, new_metadata, new_operator, new_subtask, operator_state
from flinkpy.client.restore_plan import plan_restore
from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from flinkpy.errors import ConfigurationError, ConflictError, ExitCode, NotFoundError, UsageError
from flinkpy.state.canonical import FrameWriter
from flinkpy.state.heap import TIMER_EVENT_TABLE, HeapKeyedStateBackend
from flinkpy.state.key_groups import assign_to_key_group, key_group_range_for_operator
from flinkpy.state.operator import OperatorStateBackend
from flinkpy.state_processor import SavepointReader, SavepointWriter
from flinkpy.task.window_slicing import GROUP_TIMER_KEY

pytestmark = pytest.mark.timeout(120)

#: keys of the job: n % KEYS
KEYS = 3

#: A keyed running sum of 1..COUNT by n % 3, the sums' operator uid given on the command line;
#: each subtask of 'last' writes the last sum per key to OUT/<tag>-<subtask>.json at the end.
#: 'pace' slows the first run down so that it is stopped half way; 'bonus' adds an operator
#: (uid 'bonus') that adds its keyed state 'bonus' to every sum.
PROGRAM = """
import json, os, sys, time
from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, MapFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
from flinkpy.client.restore_plan import plan_restore
from flinkpy.datastream.state import ValueStateDescriptor

count, out_dir, tag, sums_uid, max_parallelism = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
flags = sys.argv[6:]
PAIR = Types.TUPLE([Types.LONG(), Types.LONG()])


class Pace(MapFunction):
    def map(self, n):
        if "pace" in flags and n % 2 == 0:  # about 20 s: it is stopped long before
            time.sleep(0.002)
        return n


class Sums(KeyedProcessFunction):
    def open(self, ctx):
        self.sum = ctx.get_state(ValueStateDescriptor("sum", Types.LONG()))

    def process_element(self, n, ctx):
        total = (self.sum.value() or 0) + n
        self.sum.update(total)
        yield ctx.get_current_key(), total


class Bonus(KeyedProcessFunction):
    def open(self, ctx):
        self.bonus = ctx.get_state(ValueStateDescriptor("bonus", Types.LONG()))

    def process_element(self, pair, ctx):
        yield pair[0], pair[1] + (self.bonus.value() or 0)


class Last(MapFunction):
    def open(self, ctx):
        self.index, self.last = ctx.get_index_of_this_subtask(), {}

    def map(self, pair):
        self.last[str(pair[0])] = pair[1]
        return pair

    def close(self):
        with open(os.path.join(out_dir, f"{tag}-{self.index}.json"), "w") as f:
            json.dump(self.last, f)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.set_max_parallelism(max_parallelism)
env.enable_checkpointing(100)
numbers = env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
paced = numbers.map(Pace(), output_type=Types.LONG()).uid("pace")
sums = paced.key_by(lambda n: n % 3).process(Sums(), output_type=PAIR).uid(sums_uid).name("running sums")
if "bonus" in flags:
    sums = sums.key_by(lambda p: p[0]).process(Bonus(), output_type=PAIR).uid("bonus").name("bonus")
sums.map(Last(), output_type=PAIR).uid("last")
env.execute("keyed sums")
"""

COUNT = 20_000


def expected_sums(count: int) -> dict[str, int]:
    """The last running sum of each key n % 3 over 1..count, in closed form."""
    out = {}
    for r in range(KEYS):
        first = r or KEYS  # the smallest n >= 1 with n % 3 == r
        terms = (count - first) // KEYS + 1
        out[str(r)] = terms * first + KEYS * terms * (terms - 1) // 2
    return out


def outputs(out_dir: Path, tag: str) -> dict[str, int]:
    merged: dict[str, int] = {}
    for f in out_dir.glob(f"{tag}-*.json"):
        for key, value in json.loads(f.read_text()).items():
            assert key not in merged, f"key {key} came out of two subtasks"
            merged[key] = value
    return merged


# --------------------------------------------------------------------------- offline


def operator_snapshot(path: Path, *, parallelism: int = 2) -> None:
    """A savepoint at ``path`` with one operator (uid 'rules') holding list, union and broadcast
    state in each subtask, as the operator state backend snapshots them."""
    storage = CheckpointStorage(str(path))
    subtasks = []
    for i in range(parallelism):
        backend = OperatorStateBackend()
        backend.get_list_state(ListStateDescriptor("offsets")).update([i * 10, i * 10 + 1])
        backend.get_union_list_state(ListStateDescriptor("seen")).update([f"s{i}"])
        backend.get_broadcast_state(MapStateDescriptor("rules")).put_all({"limit": 5, "mode": "strict"})
        h = storage.write_state_in(str(path), f"rules-{i}-operator", pickle.dumps({"functions": backend.snapshot()}, protocol=5))
        subtasks.append(new_subtask(i, operator_state=operator_state(h, backend.summary())))
    rules = new_operator(operator_id="rules", uid="rules", name="rules", vertex_id=1, parallelism=parallelism,
                         max_parallelism=128, subtasks=subtasks)
    doc = new_metadata(job_id="f" * 32, job_name="offline", checkpoint_id=3, trigger_timestamp=1, completion_timestamp=2,
                       operators=[rules], kind="savepoint", savepoint_format="canonical")
    storage.write_metadata_in(str(path), doc)


def test_reads_list_union_and_broadcast_state_and_transforms_operator_state(tmp_path: Path) -> None:
    sp = tmp_path / "sp"
    operator_snapshot(sp)
    reader = SavepointReader.read(str(sp))
    assert reader.read_list_state("rules", "offsets") == [0, 1, 10, 11]
    assert reader.read_union_state("rules", "seen") == ["s0", "s1"]
    assert reader.read_broadcast_state("rules", "rules") == {"limit": 5, "mode": "strict"}
    with pytest.raises(UsageError, match="union state"):
        reader.read_list_state("rules", "seen")
    with pytest.raises(NotFoundError, match="offsets, rules, seen"):
        reader.read_list_state("rules", "nope")
    info = {s.name: (s.kind, s.entries) for s in reader.operators[0].states}
    assert info == {"offsets": ("list", 4), "seen": ("union", 2), "rules": ("broadcast", 4)}

    out = tmp_path / "out"
    result = (SavepointWriter.from_existing_savepoint(str(sp))
              .transform_operator_state("rules", "offsets", lambda items: [x + 100 for x in items])
              .transform_operator_state("rules", "rules", lambda rules: {**rules, "limit": 9})
              .write(str(out)))
    assert [o.action for o in result.operators] == ["transformed"]
    after = SavepointReader.read(str(out))
    assert after.read_list_state("rules", "offsets") == [100, 101, 110, 111]
    assert after.read_broadcast_state("rules", "rules") == {"limit": 9, "mode": "strict"}
    assert after.read_union_state("rules", "seen") == ["s0", "s1"]
    assert CheckpointStorage(str(out)).verify(str(out)).restorable


def test_keyed_state_and_timers_read_transformed_and_reassigned_to_another_max_parallelism(tmp_path: Path) -> None:
    seed = int(os.environ.get("FLINKPY_TEST_SEED", random.randrange(2**32)))
    print(f"seed: {seed} (re-run with FLINKPY_TEST_SEED={seed})")
    rng = random.Random(seed)
    values = {f"user-{i}": rng.randrange(1000) for i in range(500)}
    timers = [((k, None, 1000 + i), None) for i, k in enumerate(values)]
    # the heap backend's own snapshot of a value state and its keys' timers, in three subtasks
    sp = tmp_path / "sp"
    storage = CheckpointStorage(str(sp))
    subtasks = []
    for i in range(3):
        backend = HeapKeyedStateBackend(128, key_group_range_for_operator(128, 3, i))
        count = backend.get_partitioned_state(ValueStateDescriptor("count"))
        for (key, value), (timer, _) in zip(values.items(), timers):
            kg = assign_to_key_group(key, 128)
            if kg in backend.key_group_range:
                backend.set_current_key(key)
                count.update(value)
                backend.table(TIMER_EVENT_TABLE).setdefault(kg, {})[timer] = None
        frozen = backend.snapshot_sync()
        handle, _ = storage.write_state_stream(str(sp), f"counts-{i}-keyed", frozen.write)
        r = frozen.key_group_range
        subtasks.append(new_subtask(i, keyed_state=keyed_state(handle, (r.start, r.stop - 1), frozen.summary())))
    storage.write_metadata_in(str(sp), new_metadata(
        job_id="d" * 32, job_name="counts", checkpoint_id=4, trigger_timestamp=1, completion_timestamp=2, kind="savepoint",
        savepoint_format="canonical", operators=[new_operator(operator_id="counts", uid="counts", name="counts", vertex_id=1,
                                                              parallelism=3, max_parallelism=128, subtasks=subtasks)]))
    reader = SavepointReader.read(str(sp))
    assert dict(reader.read_keyed_state("counts", "count")) == values
    assert reader.keyed_value("counts", "count", "user-7") == values["user-7"]
    assert reader.keyed_value("counts", "count", "nobody") is None
    with pytest.raises(NotFoundError, match="count, _timers.event"):
        reader.keyed_value("counts", "missing", "user-7")

    out = tmp_path / "out"
    result = (SavepointWriter.from_existing_savepoint(str(sp))
              .transform_keyed_state("counts", "count", lambda key, v: None if v % 2 else v + 1)
              .with_max_parallelism(32).write(str(out)))
    assert result.max_parallelism == 32 and result.operators[0].action == "transformed, re-assigned to key groups"
    after = SavepointReader.read(str(out))
    assert dict(after.read_keyed_state("counts", "count")) == {k: v + 1 for k, v in values.items() if v % 2 == 0}
    assert sorted(after.read_keyed_state("counts", "_timers.event")) == sorted(timers)
    op = after.operator("counts")
    assert op["max_parallelism"] == 32 and after.metadata["max_parallelism"] == 32
    for sub in op["subtasks"]:  # every key, and every timer, in the key group of its key at 32
        first, last = sub["keyed_state"]["key_groups"]
        with after.keyed_frames(sub["keyed_state"]) as (_, frames):
            for name, kg, entries in frames:
                assert first <= kg <= last
                for key, _ in entries:
                    assert assign_to_key_group(key[0] if name == "_timers.event" else key, 32) == kg


def test_a_retained_incremental_checkpoint_is_rewritten_into_a_self_contained_savepoint(tmp_path: Path) -> None:
    from test_state_analyze import _incremental_and_full

    incremental, full = _incremental_and_full(tmp_path)
    want = {name: sorted(SavepointReader.read(str(full)).read_keyed_state("sums", name), key=repr) for name in ("count", "seen", "attrs")}
    out = tmp_path / "sp"
    result = SavepointWriter.from_existing_savepoint(str(incremental)).change_operator_identifier("sums", "counts").write(str(out))
    assert result.operators[0].action == "renamed from sums"
    shutil.rmtree(incremental.parent)  # the checkpoint and its shared files gone: the savepoint needs neither
    reader = SavepointReader.read(str(out))
    (sub,) = reader.operator("counts")["subtasks"]
    assert "shared" not in sub["keyed_state"] and "format" not in sub["keyed_state"]
    assert reader.metadata["kind"] == "savepoint" and CheckpointStorage(str(out)).verify(str(out)).restorable
    assert {name: sorted(reader.read_keyed_state("counts", name), key=repr) for name in want} == want


@dataclass(frozen=True)
class Reading:
    """A value of the job's own class: decoded only when the snapshot is trusted."""

    celsius: float


def test_classes_of_the_job_are_decoded_only_when_trusted_and_copies_need_no_decoding(tmp_path: Path) -> None:
    sp = tmp_path / "sp"
    SavepointWriter.new_savepoint().bootstrap_keyed_state("sensors", "last", [("s1", Reading(20.5))]).write(str(sp))
    with pytest.raises(ConfigurationError, match="Reading") as refused:
        SavepointReader.read(str(sp)).keyed_value("sensors", "last", "s1")
    assert refused.value.exit_code == ExitCode.CONFIGURATION and "--trusted" in str(refused.value)
    assert SavepointReader.read(str(sp), trusted=True).keyed_value("sensors", "last", "s1") == Reading(20.5)
    # renaming copies the files as they are: nothing is decoded, so nothing needs trust
    SavepointWriter.from_existing_savepoint(str(sp)).change_operator_identifier("sensors", "probes").write(str(tmp_path / "renamed"))
    with pytest.raises(ConfigurationError, match="flinkpy.state_processor"):
        SavepointWriter.from_existing_savepoint(str(sp)).with_max_parallelism(64).write(str(tmp_path / "rekeyed"))
    assert not (tmp_path / "rekeyed").exists()
    SavepointWriter.from_existing_savepoint(str(sp), trusted=True).with_max_parallelism(64).write(str(tmp_path / "rekeyed"))
    assert dict(SavepointReader.read(str(tmp_path / "rekeyed"), trusted=True).read_keyed_state("sensors", "last")) == {"s1": Reading(20.5)}


def test_writer_refusals_leave_nothing_behind(tmp_path: Path) -> None:
    sp = tmp_path / "sp"
    SavepointWriter.new_savepoint().bootstrap_keyed_state("a", "v", [(1, 1)]).bootstrap_keyed_state("b", "v", [(2, 2)]).write(str(sp))
    with pytest.raises(NotFoundError, match="its operators: a, b"):
        SavepointWriter.from_existing_savepoint(str(sp)).remove_operator("c")
    with pytest.raises(ConflictError, match="already the uid"):
        SavepointWriter.from_existing_savepoint(str(sp)).change_operator_identifier("a", "b")
    with pytest.raises(ConflictError, match="already exists"):
        SavepointWriter.from_existing_savepoint(str(sp)).write(str(sp))
    with pytest.raises(UsageError, match="appears twice"):
        SavepointWriter.new_savepoint().bootstrap_keyed_state("a", "v", [(1, 1), (1, 2)]).write(str(tmp_path / "dup"))
    assert not (tmp_path / "dup").exists()  # a failed write removes what it wrote
    (tmp_path / "killed").mkdir()  # what a rewrite killed half way leaves: files, no _metadata
    (tmp_path / "killed" / "a-0-keyed").write_bytes(b"half")
    with pytest.raises(ConflictError, match="interrupted"):
        SavepointWriter.from_existing_savepoint(str(sp)).write(str(tmp_path / "killed"))
    # state of a key group rather than of a key (the sliced windows' per-key-group timers, filed even
    # under the key group their key hashes to) cannot move to another max parallelism
    bound = tmp_path / "bound"
    group = assign_to_key_group(GROUP_TIMER_KEY, 128)
    storage = CheckpointStorage(str(bound))

    def produce(f: Any) -> None:
        writer = FrameWriter(f, {"fired": {"kind": "value"}})
        writer.add("fired", group, GROUP_TIMER_KEY, 1)
        writer.close()

    handle, _ = storage.write_state_stream(str(bound), "w-0-keyed", produce)
    keyed = {**handle, "key_groups": [0, 127], "states": {"fired": {"kind": "value", "entries": 1}}}
    storage.write_metadata_in(str(bound), new_metadata(
        job_id="e" * 32, job_name="w", checkpoint_id=1, trigger_timestamp=1, completion_timestamp=1, kind="savepoint",
        savepoint_format="canonical", operators=[new_operator(operator_id="w", uid="w", name="windows", vertex_id=1, parallelism=1,
                                                              max_parallelism=128, subtasks=[new_subtask(0, keyed_state=keyed)])]))
    with pytest.raises(UsageError, match="belongs to the key group") as refused:
        SavepointWriter.from_existing_savepoint(str(bound)).with_max_parallelism(64).write(str(tmp_path / "bound2"))
    assert refused.value.exit_code == ExitCode.USAGE
    assert not (tmp_path / "bound2").exists()


# --------------------------------------------------------------------------- on a cluster


@pytest.fixture(scope="module")
def job_cluster(tmp_path_factory: pytest.TempPathFactory):
    with module_cluster(tmp_path_factory, "state-processor", taskmanagers=1, slots=4) as home:
        yield home


@pytest.fixture(scope="module")
def stopped(job_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The job (sums uid 'sums', max parallelism 128) stopped with a savepoint half way."""
    base = tmp_path_factory.mktemp("sp-work")
    program = base / "keyed_sums.py"
    program.write_text(textwrap.dedent(PROGRAM))
    out = base / "out"
    out.mkdir()
    res = run_cli("run", "--json", "-d", str(program), str(COUNT), str(out), "first", "sums", "128", "pace", timeout=90)
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]

    def checkpointed() -> bool:
        r = run_cli("checkpoint", "list", "--json", jid)
        return r.returncode == 0 and json.loads(r.stdout).get("counts", {}).get("completed", 0) >= 1

    wait_for(checkpointed, timeout=60, interval=0.2, message=f"a completed checkpoint of job {jid}")
    stop = run_cli("stop", "--json", "--savepoint-path", str(base / "sps"), jid, timeout=90)
    assert stop.returncode == 0, stop.stderr
    return {"program": program, "out": out, "savepoint": json.loads(stop.stdout)["location"], "base": base}


def test_renamed_uid_is_refused_then_resumes_exactly_after_rewrite(stopped: dict[str, Any]) -> None:
    program, out, sp = stopped["program"], stopped["out"], stopped["savepoint"]
    partial = dict(SavepointReader.read(sp).read_keyed_state("sums", "sum"))
    assert partial and all(0 < v < expected_sums(COUNT)[str(k)] for k, v in partial.items()), partial  # stopped half way

    args = [str(COUNT), str(out), "renamed", "running-sums", "128"]
    refused = run_cli("run", "-s", sp, str(program), *args, timeout=90)
    assert refused.returncode == ExitCode.INVALID_PROGRAM, refused.stderr
    assert "allowNonRestoredState" in refused.stderr and "sums" in refused.stderr

    assert not plan_restore(sp, str(program), args)["restorable"]  # `savepoint plan` says so too
    new_sp = str(stopped["base"] / "renamed-sp")
    res = run_cli("savepoint", "rewrite", "--json", sp, new_sp, "--rename-uid", "sums=running-sums")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    actions = {o["uid"]: o["action"] for o in doc["operators"]}
    assert actions["running-sums"] == "renamed from sums" and actions["numbers"] == "copied", actions
    again = run_cli("savepoint", "rewrite", "--json", sp, new_sp, "--rename-uid", "sums=running-sums")
    assert again.returncode == ExitCode.CONFLICT and "already exists" in again.stderr
    assert json.loads(again.stdout)["error"]["exit_code"] == ExitCode.CONFLICT

    assert plan_restore(new_sp, str(program), args)["restorable"]
    resumed = run_cli("run", "-s", new_sp, str(program), *args, timeout=90)
    assert resumed.returncode == 0, resumed.stderr
    assert outputs(out, "renamed") == expected_sums(COUNT)


def test_python_api_transform_bootstrap_and_max_parallelism_then_restore(stopped: dict[str, Any]) -> None:
    program, out, sp = stopped["program"], stopped["out"], stopped["savepoint"]
    reader = SavepointReader.read(sp)
    assert {o.uid for o in reader.operators} >= {"numbers", "sums"}
    partial = dict(reader.read_keyed_state("sums", "sum"))
    assert reader.keyed_value("sums", "sum", 1) == partial[1]
    bonus = {0: 1_000, 1: 2_000, 2: 3_000}
    new_sp = str(stopped["base"] / "api-sp")
    result = (SavepointWriter.from_existing_savepoint(sp)
              .transform_keyed_state("sums", "sum", lambda key, total: total + 7)
              .bootstrap_keyed_state("bonus", "bonus", bonus.items(), name="bonus")
              .with_max_parallelism(64)
              .write(new_sp))
    assert {o.uid: o.action for o in result.operators}["bonus"] == "bootstrapped"
    assert CheckpointStorage(new_sp).verify(new_sp).restorable
    args = [str(COUNT), str(out), "api", "sums", "64", "bonus"]
    plan = plan_restore(new_sp, str(program), args)  # `savepoint plan`, in this process
    assert plan["restorable"], plan["problems"]
    status = {op["uid"]: (op["status"], op["old_max_parallelism"]) for op in plan["operators"]}
    assert status["sums"] == ("restored", 64) and status["bonus"] == ("restored", 64), status

    resumed = run_cli("run", "-s", new_sp, str(program), *args, timeout=90)
    assert resumed.returncode == 0, resumed.stderr
    expected = {k: v + 7 + bonus[int(k)] for k, v in expected_sums(COUNT).items()}
    assert outputs(out, "api") == expected
