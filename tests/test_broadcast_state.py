"""The broadcast state pattern: rules broadcast to every parallel instance, kept as broadcast
state, checkpointed, restored and rescaled with Flink's semantics.

The end-to-end jobs run on real clusters. The fraud-screening job (tests/broadcast_job.py) judges
each transaction by the rule version valid at its event time, so its result does not depend on
how the two inputs interleave; :func:`broadcast_job.expected` computes it without the engine.
The job must come out exact after a SIGKILL of the broadcast operator's task at dangerous
moments (aligning the two inputs' barriers; writing the snapshot that holds the broadcast state),
and across stop-with-savepoint and resume at parallelism 2 -> 3 -> 1 (a new subtask takes an old
subtask's copy of the broadcast state: without it, a transaction after the rescale would find no
rule). ``apply_to_keyed_state`` is proven with a broadcast source that waits until the keyed side
has seen everything (a go-file the test writes), so that which keys exist is well defined.
"""

from __future__ import annotations

import ast
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import broadcast_job as job
from backends import BACKENDS, engine_backend
from conftest import ROOT, cli_json, run_cli, wait_for
from flinkpy.common import RestartStrategies, Types
from flinkpy.connectors.base import Boundedness, ReaderContext, Source, SourceReader
from flinkpy.datastream import OutputTag, StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.datastream.functions import (
    BroadcastProcessFunction,
    CoProcessFunction,
    KeyedBroadcastProcessFunction,
)
from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from flinkpy.errors import InvalidProgramError, JobExecutionError
from flinkpy.state.broadcast import ReadOnlyView
from flinkpy.state.operator import OperatorStateBackend
from test_recovery import assert_recovered, checkpoints, last_per_key, only_job, seeded, start, vertex_id  # noqa: F401 (start: fixture)

RULES = MapStateDescriptor("rules", Types.STRING(), Types.LONG())


# ---------------------------------------------------------------------------------------------
# 1. The state itself: broadcast mode of operator state, read-only view, keys of a keyed state
# ---------------------------------------------------------------------------------------------


def _backends_with(copies: list[dict]) -> list[dict]:
    snaps = []
    for copy in copies:
        b = OperatorStateBackend()
        b.get_broadcast_state(RULES).put_all(copy)
        b.get_list_state(ListStateDescriptor("offsets")).update([len(snaps)])
        snaps.append(b.snapshot())
    return snaps


@pytest.mark.parametrize("old, new", [(2, 3), (3, 1), (2, 2), (1, 4)])
def test_new_subtask_i_restores_the_copy_of_old_subtask_i_mod_old_parallelism(old: int, new: int) -> None:
    # copies made different on purpose, to see which one each new subtask took
    snaps = _backends_with([{"copy": i} for i in range(old)])
    for i in range(new):
        b = OperatorStateBackend()
        b.restore(snaps, subtask_index=i, parallelism=new)
        assert dict(b.get_broadcast_state(RULES).items()) == {"copy": i % old}
        assert b.restored
    # list state beside it is still split, not copied
    shares = []
    for i in range(new):
        b = OperatorStateBackend()
        b.restore(snaps, subtask_index=i, parallelism=new)
        shares += list(b.get_list_state(ListStateDescriptor("offsets")).get())
    assert sorted(shares) == list(range(old))


def test_broadcast_state_registered_after_restore_and_old_subtasks_without_state() -> None:
    (snap,) = _backends_with([{"limit": 7}])
    b = OperatorStateBackend()
    # old subtask 1 snapshotted no operator state at all: new subtask 1 takes another's copy
    b.restore([snap, None], subtask_index=1, parallelism=2)
    state = b.get_broadcast_state(RULES)  # registered after the restore, as operators do in open()
    assert dict(state.items()) == {"limit": 7}
    assert b.summary()["rules"] == {"kind": "broadcast", "entries": 1}
    state.put("limit", 8)  # the snapshot is a copy: later writes do not reach it
    assert snap["states"]["rules"]["items"] == {"limit": 7}


def test_a_name_is_one_kind_of_operator_state() -> None:
    b = OperatorStateBackend()
    b.get_broadcast_state(RULES)
    with pytest.raises(InvalidProgramError, match="'rules' is broadcast state"):
        b.get_list_state(ListStateDescriptor("rules"))
    fresh = OperatorStateBackend()
    fresh.restore(_backends_with([{"a": 1}]), subtask_index=0, parallelism=1)
    with pytest.raises(InvalidProgramError, match="broadcast state in the snapshot but list state"):
        fresh.get_list_state(ListStateDescriptor("rules"))


def test_read_only_view_reads_and_refuses_every_write() -> None:
    state = OperatorStateBackend().get_broadcast_state(RULES)
    state["max"] = 500
    state.put_all({"min": 1})
    view = ReadOnlyView(state)
    assert (view.get("max"), view["min"], "max" in view, view.contains("x")) == (500, 1, True, False)
    assert sorted(view.keys()) == ["max", "min"] and sorted(view.values()) == [1, 500]
    assert dict(view.items()) == {"max": 500, "min": 1} and not view.is_empty()
    for write in (lambda: view.put("max", 1), lambda: view.put_all({}), lambda: view.remove("max"), view.clear):
        with pytest.raises(InvalidProgramError, match="read-only in process_element"):
            write()
    with pytest.raises(InvalidProgramError):
        view["max"] = 2
    assert state.get("max") == 500


def test_keys_of_lists_every_key_of_a_state_by_key_group(state_backend) -> None:
    backend = state_backend(max_parallelism=16)
    counts = backend.get_partitioned_state(ValueStateDescriptor("counts", Types.LONG()))
    other = backend.get_partitioned_state(ValueStateDescriptor("other", Types.LONG()))
    for key in range(40):
        backend.set_current_key(key)
        counts.update(key)
        if key % 4 == 0:
            other.update(1)
    listed = backend.keys_of("counts")
    assert sorted(k for k, _ in listed) == list(range(40))
    assert [kg for _, kg in listed] == sorted(kg for _, kg in listed)
    assert all(kg == backend._assign(k) for k, kg in listed)
    assert sorted(k for k, _ in backend.keys_of("other")) == list(range(0, 40, 4))
    # the list is taken before the caller changes anything: clearing while visiting is safe
    for key, kg in backend.keys_of("counts"):
        backend.set_current_key_and_group(key, kg)
        counts.clear()
    assert backend.keys_of("counts") == []


# ---------------------------------------------------------------------------------------------
# 2. The API: what is refused before anything runs
# ---------------------------------------------------------------------------------------------


class Rules(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield value

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value, 1)


class OnlyData(CoProcessFunction):
    def process_element1(self, value, ctx):
        yield value

    def process_element2(self, value, ctx):
        yield value

    process_element = process_element1


class KeyedRules(KeyedBroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield value

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value, 1)


def test_api_builds_two_input_nodes_and_refuses_mismatches() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    data, rules = env.from_collection([1, 2]), env.from_collection(["a"])
    # broadcast() without descriptors stays the BROADCAST partitioning
    assert type(rules.broadcast()).__name__ == "DataStream"
    bs = rules.broadcast(RULES)
    assert type(bs).__name__ == "BroadcastStream" and bs.descriptors == (RULES,)

    out = data.connect(bs).process(Rules())
    graph = env._graph
    assert graph.nodes[out._node.id].kind == "broadcast_process"
    edges = sorted((e.type_number, e.partitioner) for e in graph.edges if e.target == out._node.id)
    assert edges == [(1, None), (2, "BROADCAST")]
    keyed = data.key_by(lambda v: v % 2).connect(bs).process(KeyedRules())
    assert graph.nodes[keyed._node.id].kind == "keyed_broadcast_process"
    assert graph.nodes[keyed._node.id].params["broadcast_state_descriptors"] == (RULES,)
    assert sorted((e.type_number, e.partitioner) for e in graph.edges if e.target == keyed._node.id) == [(1, "HASH"), (2, "BROADCAST")]

    with pytest.raises(InvalidProgramError, match="KeyedBroadcastProcessFunction needs a keyed stream"):
        data.connect(bs).process(KeyedRules())
    with pytest.raises(InvalidProgramError, match="BroadcastProcessFunction runs on a non-keyed stream"):
        data.key_by(lambda v: v).connect(bs).process(Rules())
    with pytest.raises(InvalidProgramError, match="needs a BroadcastProcessFunction, got OnlyData without process_broadcast_element"):
        data.connect(bs).process(OnlyData())
    with pytest.raises(InvalidProgramError, match="takes MapStateDescriptors, got ValueStateDescriptor"):
        rules.broadcast(ValueStateDescriptor("v"))
    with pytest.raises(InvalidProgramError, match="same name"):
        rules.broadcast(RULES, MapStateDescriptor("rules"))
    other = StreamExecutionEnvironment.get_execution_environment()
    if other is not env:
        with pytest.raises(InvalidProgramError, match="different execution environments"):
            other.from_collection([1]).connect(bs)


# ---------------------------------------------------------------------------------------------
# 3. On a cluster: rules change later decisions; read-only means read-only
# ---------------------------------------------------------------------------------------------


class WriteFromDataSide(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("sneaky", value)

    def process_broadcast_element(self, value, ctx):
        pass


class UndeclaredState(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        yield ctx.get_broadcast_state(MapStateDescriptor("not-declared")).get("x")

    def process_broadcast_element(self, value, ctx):
        pass


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "function, message",
    [
        (WriteFromDataSide(), "broadcast state 'rules' is read-only in process_element()"),
        (UndeclaredState(), "asks for broadcast state 'not-declared', but its broadcast stream declares ['rules']"),
    ],
)
def test_misuse_of_broadcast_state_fails_the_job_clearly(function: Any, message: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    rules = env.from_collection(["r"]).broadcast(RULES)
    env.from_collection([1, 2, 3]).connect(rules).process(function).name("misuse").add_sink(lambda x: None)
    with pytest.raises(JobExecutionError) as info:
        env.execute("misuse of broadcast state")
    assert message in str(info.value), str(info.value)


ODD, EVEN, RULES_SEEN = OutputTag("odd"), OutputTag("even"), OutputTag("rules-seen")


class Tagging(BroadcastProcessFunction):
    """Side outputs both ways (PyFlink's ``yield tag, value`` and ``ctx.output``) from both sides."""

    def process_element(self, value, ctx):
        if value % 2:
            yield ODD, value
        else:
            ctx.output(EVEN, value)
        yield ("main", value, ctx.timestamp())

    def process_broadcast_element(self, rule, ctx):
        ctx.output(RULES_SEEN, rule)
        yield ("rule", rule, ctx.timestamp())


@pytest.mark.timeout(60)
def test_every_instance_sees_every_rule_and_both_sides_reach_side_outputs() -> None:
    from flinkpy.common import WatermarkStrategy

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    stamped = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: v * 10)
    rules = env.from_collection(["r1", "r2"]).set_parallelism(1).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _: int(r[1:]))
    )
    data = env.from_collection(list(range(20))).assign_timestamps_and_watermarks(stamped)
    main = data.connect(rules.broadcast(RULES)).process(Tagging())
    everything = main.union(
        main.get_side_output(ODD).map(lambda v: ("odd", v)),
        main.get_side_output(EVEN).map(lambda v: ("even", v)),
        main.get_side_output(RULES_SEEN).map(lambda r: ("seen", r)),
    )
    got = Counter(everything.execute_and_collect("side outputs"))
    want = Counter(
        [("main", v, v * 10) for v in range(20)] + [("odd", v) for v in range(1, 20, 2)] + [("even", v) for v in range(0, 20, 2)]
        # the broadcast side runs in each of the 3 instances, with the rule's timestamp
        + [("rule", r, int(r[1:])) for r in ("r1", "r2")] * 3 + [("seen", r) for r in ("r1", "r2")] * 3
    )
    assert got == want


@pytest.mark.timeout(90)
def test_rules_broadcast_to_a_keyed_stream_decide_every_transaction_by_event_time() -> None:
    """A rule update changes the decisions of the transactions after its validity time only,
    in every parallel instance (p=3: each sees a third of the accounts, all of the rules)."""
    n, table = 12_000, job.thresholds(12_000, seed=5)
    assert len(set(table)) > 1, "the rule must change for the test to mean anything"
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(3)
    decisions = list(job.build(env, NumberSequenceSource(0, n - 1), table).execute_and_collect("screening"))
    assert Counter(d[1] for d in decisions) == Counter(range(n)), "each transaction judged exactly once"
    assert {d[1]: d[2] for d in decisions} == job.expected(n, table)
    assert last_per_key([(d[0], (d[3], d[4])) for d in decisions]) == job.expected_counts(n, table)


# ---------------------------------------------------------------------------------------------
# 4. Exactly-once across a SIGKILL of the broadcast operator's task
# ---------------------------------------------------------------------------------------------

N_KILL = 30_000


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "point, subtask",
    [
        # the two-input task holds one channel back, waiting for checkpoint 2's other barriers
        ("alignment", 0),
        # the two-input task writes its snapshot of checkpoint 2: keyed state and broadcast state
        ("upload", 1),
    ],
)
def test_screening_is_exact_after_the_broadcast_task_is_killed(start, point: str, subtask: int) -> None:
    rng = seeded("kill")
    table = job.thresholds(N_KILL, seed=rng.randrange(2**32))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    # about 8,000 numbers a second: the sources are still reading when checkpoint 2 comes
    screened = job.build(env, job.Slow(0, N_KILL - 1, per_poll=40), table)
    start(faults=[{"point": point, "vertex": vertex_id(env, "screen"), "subtask": subtask, "checkpoint": 2}])

    decisions = list(screened.execute_and_collect("screening under fire"))
    # the sink kept every attempt's output: a transaction judged before the crash and again
    # after the restore must have been judged the same way, and the last counts are final
    by_tx: dict[int, set] = {}
    for d in decisions:
        by_tx.setdefault(d[1], set()).add(d[2])
    assert {tx: flags.pop() for tx, flags in by_tx.items() if len(flags) == 1} == job.expected(N_KILL, table)
    assert last_per_key([(d[0], (d[3], d[4])) for d in decisions]) == job.expected_counts(N_KILL, table)

    jid = only_job()["jid"]
    assert_recovered(jid, cause="SIGKILL")
    restored = checkpoints(jid)["latest"]["restored"]
    assert restored is not None and restored["id"] == 1, restored


# ---------------------------------------------------------------------------------------------
# 5. Stop with a savepoint, resume rescaled 2 -> 3 -> 1
# ---------------------------------------------------------------------------------------------

N_SAVEPOINT = 16_000


def _decisions(out: Path) -> list[tuple[int, bool]]:
    if not out.exists():
        return []
    return [ast.literal_eval(line) for line in out.read_text(encoding="utf-8").splitlines() if line.endswith(")")]


def _submit(out: Path, parallelism: int, seed: int, savepoint: str | None, per_poll: int = 10) -> str:
    args = ["run", "-d", "-p", str(parallelism), "--json"] + (["-s", savepoint] if savepoint else [])
    res = run_cli(*args, str(ROOT / "tests" / "broadcast_job.py"), str(out), str(N_SAVEPOINT), str(seed), str(per_poll))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["jobs"][0]["jid"]


def _running(jid: str) -> bool:
    doc = cli_json("job", "show", jid)
    return doc["state"] == "RUNNING" and all(v["status"] == "RUNNING" for v in doc["vertices"])


def _stop(jid: str, target: Path) -> str:
    res = run_cli("stop", jid, "--savepoint-path", str(target), "--json", timeout=90)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    location = doc.get("location") or doc.get("path") or doc.get("operation", {}).get("location")
    assert location, doc
    return location


def _broadcast_copies(savepoint: str) -> list[tuple[int, str, str, int]]:
    """What `state analyze` reads from the state files; `checkpoint inspect` (the metadata's
    summary) must say the same."""
    doc = cli_json("state", "analyze", savepoint)
    (screen,) = [op for op in doc["operators"] if op["uid"] == "screen"]
    copies = sorted((s["subtask"], s["name"], s["kind"], s["entries"]) for s in screen["operator_state"])
    meta = cli_json("checkpoint", "inspect", savepoint)["metadata"]
    (op,) = [op for op in meta["operators"] if op["uid"] == "screen"]
    summary = sorted(
        (sub["subtask"], name, st["kind"], st["entries"]) for sub in op["subtasks"] for name, st in sub["operator_state"]["states"].items()
    )
    assert summary == copies, (summary, copies)
    return copies


def test_a_channel_stopped_with_a_savepoint_holds_event_time_back() -> None:
    """Found by the test below: when a source subtask behind (event time 10) stopped first, the
    task's event time jumped to the other channel's watermark (50), fired the timers of records
    the savepoint had kept for the resumed job, and they were judged twice."""
    from flinkpy.task.watermarks import MAX_WATERMARK, StatusWatermarkValve

    valve = StatusWatermarkValve(2)
    valve.on_watermark(0, 10), valve.on_watermark(1, 50)
    assert valve.on_end_of_partition(0, advance=False) is None
    assert valve.on_end_of_partition(1, advance=False) is None and valve.current == 10
    ended = StatusWatermarkValve(2)  # the end of a bounded input does end event time
    ended.on_watermark(0, 10), ended.on_watermark(1, 50)
    assert ended.on_end_of_partition(0) == 50 and ended.on_end_of_partition(1) == MAX_WATERMARK


@pytest.mark.timeout(180)
def test_broadcast_state_survives_stop_with_savepoint_and_rescale_2_3_1(cluster, tmp_path: Path) -> None:
    seed = seeded("savepoint").randrange(2**32)
    table = job.thresholds(N_SAVEPOINT, seed)
    out = tmp_path / "decisions.txt"

    jid = _submit(out, 2, seed, None)
    # (the file first: each look at the job is a CLI process)
    wait_for(lambda: len(_decisions(out)) >= N_SAVEPOINT // 8 and _running(jid), timeout=60, message="an eighth judged at p=2")
    first = _stop(jid, tmp_path / "sp1")
    judged = len(_decisions(out))
    assert judged < N_SAVEPOINT, "the job finished before it was stopped"
    # every subtask snapshotted its own copy of the broadcast state, all equal in size
    copies = _broadcast_copies(first)
    assert [c[:3] for c in copies] == [(0, "rules", "broadcast"), (1, "rules", "broadcast")], copies
    assert len({c[3] for c in copies}) == 1 and copies[0][3] >= 1, copies

    # slower at p=3: decisions follow the slowest source subtask's event time, and the stop must
    # come before any source subtask has read its share (a finished task takes no savepoint)
    jid = _submit(out, 3, seed, first, per_poll=3)
    # a few more judged by the three subtasks, the third with the copy it took from subtask 0
    wait_for(lambda: len(_decisions(out)) >= judged + 200 and _running(jid), timeout=60, message="more judged at p=3")
    second = _stop(jid, tmp_path / "sp2")
    assert len(_decisions(out)) < N_SAVEPOINT, "the job finished before it was stopped"
    assert [c[:2] for c in _broadcast_copies(second)] == [(0, "rules"), (1, "rules"), (2, "rules")]

    jid = _submit(out, 1, seed, second)
    wait_for(lambda: cli_json("job", "show", jid)["state"] == "FINISHED", timeout=90, message="the job at p=1 to finish")
    decisions = _decisions(out)
    assert Counter(n for n, _ in decisions) == Counter(range(N_SAVEPOINT)), "each transaction judged exactly once"
    assert dict(decisions) == job.expected(N_SAVEPOINT, table)


# ---------------------------------------------------------------------------------------------
# 6. apply_to_keyed_state: the broadcast side visits every key of this instance
# ---------------------------------------------------------------------------------------------


class _AfterFile(SourceReader):
    def __init__(self, path: str, items: list):
        self.path = path
        self.items = items

    def poll(self, max_records: int) -> list | None:
        if not Path(self.path).exists():
            return []
        items, self.items = self.items, None
        return items


class AfterFile(Source):
    """A bounded source that emits its items (at parallelism 1) once ``path`` exists."""

    boundedness = Boundedness.BOUNDED

    def __init__(self, path: str, items: list):
        self.path = path
        self.items = list(items)

    def create_reader(self, ctx: ReaderContext) -> SourceReader:
        return _AfterFile(self.path, self.items if ctx.subtask_index == 0 else [])

    def max_parallelism(self) -> int:
        return 1


COUNT = ValueStateDescriptor("count", Types.LONG())
COMMANDS = MapStateDescriptor("commands", Types.STRING(), Types.LONG())


class Audit(KeyedBroadcastProcessFunction):
    """Counts per key; broadcast commands report every key's count or forget the odd keys."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(COUNT)

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield ("seen", ctx.get_current_key(), value)

    def process_broadcast_element(self, command, ctx):
        ctx.get_broadcast_state(COMMANDS).put(command, 1)
        out = []
        if command.startswith("report"):
            ctx.apply_to_keyed_state(COUNT, lambda key, state: out.append((command, key, state.value())))
        elif command == "forget-odd":
            ctx.apply_to_keyed_state(COUNT, lambda key, state: state.clear() if key % 2 else None)
        return out


class AppendLine:
    def __init__(self, path: str):
        self.path = path

    def __call__(self, value: Any) -> Any:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(repr(value) + "\n")
        return value


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", BACKENDS)
def test_apply_to_keyed_state_visits_every_key_of_every_instance(start, tmp_path: Path, backend: str) -> None:
    values = [(k, i) for k in range(10) for i in range(k + 1)]  # key k appears k + 1 times
    out, go = tmp_path / "out.txt", tmp_path / "go"
    start()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_state_backend(engine_backend(backend))
    commands = env.from_source(AfterFile(str(go), ["report-1", "forget-odd", "report-2"]), _no_watermarks(), "commands")
    (env.from_collection(values)
        .key_by(lambda v: v[0])
        .connect(commands.broadcast(COMMANDS))
        .process(Audit()).name("audit")
        .map(AppendLine(str(out))))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            env.execute("audit")
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    runner = threading.Thread(target=run)
    runner.start()
    read = lambda: [ast.literal_eval(line) for line in out.read_text().splitlines()] if out.exists() else []  # noqa: E731
    wait_for(lambda: len(read()) >= len(values) or errors, timeout=60, message="the keyed side to see every record")
    go.touch()
    runner.join(timeout=60)
    assert not runner.is_alive() and not errors, errors
    lines = read()
    assert sorted(r[2] for r in lines if r[0] == "seen") == sorted(values)
    counts = {k: k + 1 for k in range(10)}
    assert sorted(r[1:] for r in lines if r[0] == "report-1") == sorted(counts.items())
    assert sorted(r[1:] for r in lines if r[0] == "report-2") == sorted((k, c) for k, c in counts.items() if k % 2 == 0)


def _no_watermarks() -> Any:
    from flinkpy.common import WatermarkStrategy

    return WatermarkStrategy.no_watermarks()


# ---------------------------------------------------------------------------------------------
# 7. The example runs as written
# ---------------------------------------------------------------------------------------------


def expected_fraud_alerts(updates: list[tuple], transactions: list[tuple], window_ms: int) -> list[tuple]:
    """The example's alerts, from its inputs: each transaction against the rule versions valid
    at its time (the latest update at or before it), bursts over the account's last window."""
    alerts = []
    for i, (account, amount, ts) in enumerate(transactions):
        limits = {}
        for rule, limit, valid_from in sorted(updates, key=lambda u: u[2]):
            if valid_from <= ts:
                limits[rule] = limit
        if limits.get("large") is not None and amount > limits["large"]:
            alerts.append((account, ts, amount, "large", limits["large"]))
        total = sum(a for acc, a, t in transactions[: i + 1] if acc == account and t > ts - window_ms)
        if limits.get("burst") is not None and total > limits["burst"]:
            alerts.append((account, ts, amount, "burst", limits["burst"]))
    return alerts


@pytest.mark.timeout(120)
def test_fraud_rules_example_prints_the_alerts_its_rules_call_for(flinkpy_home) -> None:
    from test_examples import load_example, printed_records, run_example

    example = load_example("fraud_rules.py")
    expected = expected_fraud_alerts(example.RULE_UPDATES, example.TRANSACTIONS, example.BURST_WINDOW_MS)
    assert {a[3] for a in expected} == {"large", "burst"} and len({a[4] for a in expected}) >= 3
    for parallelism in ("1", "3"):
        res = run_example("fraud_rules.py", parallelism)
        assert res.returncode == 0, res.stderr
        assert sorted(printed_records(res.stdout)) == sorted(expected), res.stdout
