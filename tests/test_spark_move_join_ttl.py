"""An interval join's buffered sides and keyed state with a time-to-live, moved between the engine
and Spark (flinkpy/spark/state_move.py, keyed_move.py).

The pure part first (the plan's words and refusals, the converters' TTL timestamps); then one job
moved engine -> Spark -> engine, stopped with a savepoint mid-stream each time, at another
parallelism on each side: its join pairs checked exactly against the pairs computed here, its
TTL states' last-access timestamps the same in both savepoints, an expired value still expired.
"""

from __future__ import annotations

import ast
import json
import pickle
from collections import Counter
from pathlib import Path

import pytest

from conftest import run_cli, running_cluster, wait_for
from flinkpy.spark import keyed_move as km
from flinkpy.spark import state_move as sm

# --------------------------------------------------------------------------- pure

JOIN_STATES = {"_interval_join_left": {"kind": "map", "entries": 2}, "_interval_join_right": {"kind": "map", "entries": 1},
               "_timers.event": {"kind": "value", "entries": 3}}


def _op(operator_id: str, keyed: dict) -> dict:
    return {"operator_id": operator_id, "name": operator_id, "uid": operator_id,
            "subtasks": [{"subtask": 0, "keyed_state": {"path": "k", "key_groups": [0, 127], "states": keyed},
                          "operator_state": None, "source_offsets": None}]}


def test_an_interval_joins_buffers_and_ttl_state_move_and_a_ttl_config_that_disagrees_is_refused_by_name() -> None:
    """The plan moves an interval join's buffers and timers and TTL state (saying so); as Flink, a
    state checkpointed with a TTL restores only into one declared with a TTL (of any length), and
    the other way round; a broadcast operator's TTL state is refused."""
    join = sm.ProgramOperator("join", "pairs", "join", "interval_join", keyed_state_moves=True, declared_states=frozenset(), ttl_states=frozenset())
    kept = sm.ProgramOperator("kept", "kept", "kept", "keyed_process", keyed_state_moves=True,
                              declared_states=frozenset({"low", "count"}), ttl_states=frozenset({"low"}))
    doc = {"operators": [_op("join", JOIN_STATES),
                         _op("kept", {"low": {"kind": "value", "entries": 2, "ttl_ms": 60_000}, "count": {"kind": "value", "entries": 2}})]}
    plan = sm.plan_move(doc, [join, kept], runner="spark")
    assert plan.movable, plan.problems
    assert [(d.operator, d.what) for d in plan.decisions] == [
        ("pairs", "keyed state (_interval_join_left, _interval_join_right, _timers.event)"),
        ("kept", "keyed state (count, low; time-to-live of low kept)")]
    # another TTL length restores (the running job's TTL counts, as in Flink)
    assert sm.plan_move(doc, [join, kept], runner="spark").movable
    # TTL disabled in the job, and enabled for a state checkpointed without
    flipped = sm.ProgramOperator("kept", "kept", "kept", "keyed_process", keyed_state_moves=True,
                                 declared_states=frozenset({"low", "count"}), ttl_states=frozenset({"count"}))
    plan = sm.plan_move(doc, [join, flipped], runner="spark")
    assert plan.problems == [
        "operator 'kept': its keyed state 'count' was checkpointed without a time-to-live and is declared with one; 'low' was "
        "checkpointed with a time-to-live and is declared without one: keep the state's StateTtlConfig enabled (or disabled) as it "
        "was, or give the state a new name (the engine's own restore refuses it too, as Flink did before 2.2)"]
    # the state files' own TTLs decide where the summary is older than TTLs in `_metadata`
    moved = {"kept": sm.MovedState("kept", keyed=km.KeyedStates(states={"low": ("value", {"a": (1, 5)})}, ttl={"low": 9}))}
    assert [d.reason.split(":")[0] for d in sm.ttl_refusals([flipped], moved)] == [
        "its keyed state 'low' was checkpointed with a time-to-live and is declared without one"]
    assert sm.ttl_refusals([kept], moved) == ()
    # a TTL state the function does not declare in open() (Spark would keep it among the late states, unchecked) is refused;
    # one without a TTL moves as before
    assert sm.ttl_mismatch({"late": 5, "low": 5}, kept).startswith("its keyed state 'late' has a time-to-live and is not declared in")
    assert sm.ttl_mismatch({"late": None, "low": 5}, kept) == ""
    # a broadcast operator's keyed state with a TTL
    scaled = sm.ProgramOperator("kept", "kept", "kept", "keyed_broadcast_process", keyed_state_moves=True)
    assert sm.plan_move(doc, [join, scaled], runner="spark").problems == [
        "operator 'kept': it is a keyed_broadcast_process, whose keyed state with a time-to-live (low) does not move to Spark: give "
        "the state a new name, or keep the job on the engine"]
    # a Spark savepoint's engine layout says the TTL too
    assert [d.what for d in sm.plan_move({**doc, "moved": {"refused": []}}, [], runner="engine").decisions] == [
        "keyed state (_interval_join_left, _interval_join_right, _timers.event)", "keyed state (count, low; time-to-live of low kept)"]


def test_ttl_values_keep_their_last_access_timestamps_both_ways_and_expire_when_they_would_have() -> None:
    """TTL state moves in its stored form: each value, list element and map entry with its
    timestamp, so what was expired before the move is expired after it, and what was live keeps
    its remaining time; the engine's restore of the moved document reads it through its own TTL
    wrapper on the same clock."""
    from flinkpy.common import Time
    from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor, StateTtlConfig, ValueStateDescriptor
    from flinkpy.state.heap import HeapKeyedStateBackend

    stored = {"low": ("value", {"a": (3, 1_000), "b": (7, 9_000)}),
              "tens": ("list", {"a": [(10, 1_000), (20, 9_500)]}),
              "parity": ("map", {"b": {"odd": (4, 2_000), "even": (5, 9_000)}})}
    keyed = km.KeyedStates(states=stored, ttl={"low": 5_000, "tens": 5_000, "parity": 5_000}, event_timers={"a": {(50, "left")}})
    document = km.to_engine(keyed, 128)
    assert {name: entry.get("ttl_ms") for name, entry in document.items()} == {"low": 5_000, "tens": 5_000, "parity": 5_000,
                                                                               "_timers.event": None}
    assert km.from_engine([{"version": 1, "states": document}]) == keyed

    # the rows Spark's processor writes, read back as its state store holds them: unchanged
    rows = km.initial_rows(keyed, b"")
    spark: dict = {"low": [], "tens": [], "parity": [], km.SPARK_TIMERS: []}
    for r in rows:
        payload = pickle.loads(r.value) if r.kind == "list" else [(r.part, r.value)] if r.kind == "map" else r.value
        if r.kind == "map" and spark[r.name]:  # a key's entries in one row, as read back
            spark[r.name][-1][1].extend(payload)
        else:
            spark[r.name].append((r.key, payload))
    back = km.from_spark({"low": "value", "tens": "list", "parity": "map"}, spark, ttl=keyed.ttl)
    assert back == keyed

    # restored on the engine at 10 s: 'a' (written at 1 s) expired, 'b' (9 s) live until 14 s
    now = [10_000]
    backend = HeapKeyedStateBackend(128, range(128))
    backend.ttl_clock = lambda: now[0]
    backend.restore([{"version": 1, "states": km.to_engine(back, 128)}])
    config = StateTtlConfig.new_builder(Time.milliseconds(5_000)).build()
    descriptors = [ValueStateDescriptor("low", None), ListStateDescriptor("tens", None), MapStateDescriptor("parity", None, None)]
    for d in descriptors:
        d.enable_time_to_live(config)
    low, tens, parity = (backend.get_partitioned_state(d) for d in descriptors)
    backend.set_current_key("a")
    assert low.value() is None and list(tens.get()) == [20]
    backend.set_current_key("b")
    assert low.value() == 7 and dict(parity.items()) == {"even": 5}
    now[0] = 14_000
    assert low.value() is None and dict(parity.items()) == {}
    # restored without its TTL: refused by name, as Flink
    plain = HeapKeyedStateBackend(128, range(128))
    plain.restore([{"version": 1, "states": km.to_engine(back, 128)}])
    from flinkpy.errors import InvalidProgramError

    with pytest.raises(InvalidProgramError, match="state 'low' was checkpointed with time-to-live and is now declared without it"):
        plain.get_partitioned_state(ValueStateDescriptor("low", None))


def test_a_late_ttl_state_from_spark_is_refused_saying_its_ttl_could_not_be_carried() -> None:
    """Spark keeps a state declared after open() (a window trigger's) in its late states' map
    without its time-to-live: it comes back marked unknown, and the engine's restore says that,
    naming the operator, when the job declares it with a TTL (not that it was checkpointed
    without one); declared without, it restores (it may have had none); a state declared in
    open() keeps its TTL. The mark survives a move back to Spark and home again."""
    from flinkpy.common import Time
    from flinkpy.datastream.state import StateTtlConfig, ValueStateDescriptor
    from flinkpy.errors import InvalidProgramError
    from flinkpy.state.heap import HeapKeyedStateBackend

    spark = {"low": [(pickle.dumps("a"), pickle.dumps((3, 1_000)))],
             km.LATE_STATES: [(pickle.dumps("a"), ("fired", pickle.dumps(True)))]}
    back = km.from_spark({"low": "value"}, spark, ttl={"low": 5_000})
    assert (back.ttl, back.ttl_unknown) == ({"low": 5_000}, {"fired"})
    document = km.to_engine(back, 128)
    assert {n: (e.get("ttl_ms"), e.get("ttl_unknown")) for n, e in document.items()} == {"low": (5_000, None), "fired": (None, True)}
    assert km.from_engine([{"version": 1, "states": document}]) == back

    def declared(ttl: bool) -> ValueStateDescriptor:
        d = ValueStateDescriptor("fired", None)
        if ttl:
            d.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(5_000)).build())
        return d

    backend = HeapKeyedStateBackend(128, range(128))
    backend.operator_name = "trigger window"
    backend.restore([{"version": 1, "states": document}])
    with pytest.raises(InvalidProgramError) as refused:
        backend.get_partitioned_state(declared(ttl=True))
    assert refused.value.message.startswith("operator 'trigger window': state 'fired' comes from Spark, which could not carry its "
                                            "time-to-live"), refused.value.message
    assert "checkpointed without" not in refused.value.message and "keep the job on Spark" in refused.value.remedy
    plain = HeapKeyedStateBackend(128, range(128))
    plain.restore([{"version": 1, "states": document}])
    plain.set_current_key("a")
    assert plain.get_partitioned_state(declared(ttl=False)).value() is True
    # an engine snapshot without the mark (or a state declared in open() on Spark) keeps its old words
    unmarked = {n: {k: v for k, v in e.items() if k != "ttl_unknown"} for n, e in document.items()}
    old = HeapKeyedStateBackend(128, range(128))
    old.restore([{"version": 1, "states": unmarked}])
    with pytest.raises(InvalidProgramError, match="state 'fired' was checkpointed without time-to-live and is now declared with it"):
        old.get_partitioned_state(declared(ttl=True))


LATE_JOB = '''
from flinkpy.common import Time, Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
from flinkpy.datastream.functions import KeyedProcessFunction
from flinkpy.datastream.state import StateTtlConfig, ValueStateDescriptor


class Late(KeyedProcessFunction):
    """Asks for its TTL state while processing, after open(), as a window trigger does."""

    def open(self, runtime_context):
        self.runtime_context = runtime_context

    def process_element(self, value, ctx):
        fired = ValueStateDescriptor("fired", Types.BOOLEAN())
        fired.enable_time_to_live(StateTtlConfig.new_builder(Time.minutes(1)).build())
        self.runtime_context.get_state(fired).update(True)
        yield value


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
(env.from_source(NumberSequenceSource(1, 10), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
    .key_by(lambda n: n % 2).process(Late()).name("late trigger").uid("late").print())
env.execute("late ttl")
'''


def test_the_engine_job_fails_naming_the_operator_whose_state_came_from_spark_without_its_ttl(tmp_path: Path, flinkpy_home: Path) -> None:
    """The savepoint holds the engine layout a Spark savepoint carries for such a state (as
    keyed_move writes it); the job restored from it fails when its function asks for the
    state, and the failure names the operator and says why."""
    from flinkpy.checkpoint import CheckpointStorage, keyed_state, new_metadata, new_operator, new_subtask
    from flinkpy.errors import ExitCode

    spark = {km.LATE_STATES: [(pickle.dumps(k), ("fired", pickle.dumps(True))) for k in (0, 1)]}
    document = {"version": 1, "states": km.to_engine(km.from_spark({}, spark), 128)}
    savepoint = str(tmp_path / "savepoint-9b1e0c-0001")
    storage = CheckpointStorage(savepoint)
    handle = storage.write_state_in(savepoint, "late-0.keyed", pickle.dumps(document))
    late = new_operator(operator_id="late", uid="late", name="late trigger", vertex_id=2, parallelism=1, max_parallelism=128,
                        subtasks=[new_subtask(0, keyed_state=keyed_state(handle, (0, 127), {"fired": {"kind": "value", "entries": 2}}))])
    storage.write_metadata_in(savepoint, new_metadata(job_id="9b1e0c7d22aa33bb44cc55dd66ee77ff", job_name="late ttl", checkpoint_id=3,
                                                      trigger_timestamp=1, completion_timestamp=2, operators=[late], kind="savepoint",
                                                      savepoint_format="canonical"))
    (tmp_path / "late.py").write_text(LATE_JOB)
    res = run_cli("run", "-s", savepoint, "-D", "restart-strategy.type=none", str(tmp_path / "late.py"), timeout=90)
    assert res.returncode == ExitCode.JOB_FAILED, res.stderr[-2000:]
    last = res.stderr.strip().splitlines()[-1]
    assert ("operator 'late trigger': state 'fired' comes from Spark, which could not carry its time-to-live" in last
            and "checkpointed without" not in res.stderr), res.stderr[-2000:]


def test_the_metadata_summary_names_each_states_ttl() -> None:
    """`savepoint plan` reads the TTLs from `_metadata`, before it loads any state file."""
    from flinkpy.common import Time
    from flinkpy.datastream.state import StateTtlConfig, ValueStateDescriptor
    from flinkpy.state.heap import HeapKeyedStateBackend

    backend = HeapKeyedStateBackend(128, range(128))
    timed = ValueStateDescriptor("low", None)
    timed.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(1_500)).build())
    backend.set_current_key("a")
    backend.get_partitioned_state(timed).update(3)
    backend.get_partitioned_state(ValueStateDescriptor("count", None)).update(1)
    assert backend.snapshot_sync().summary() == {"low": {"kind": "value", "entries": 1, "ttl_ms": 1_500},
                                                 "count": {"kind": "value", "entries": 1}}


# --------------------------------------------------------------------------- engine -> Spark -> engine

pytest.importorskip("pyspark", reason="PySpark is not installed")

from test_spark_state_move import _cli_json, _home, _kill_driver, _stop  # noqa: E402 - after the skip

JOB = '''\
"""1..COUNT (each record PAUSE seconds per subtask, so a stop lands mid-stream), stamped in blocks of 50 numbers 100 ms
apart: an interval join of the numbers with those divisible by 3 (keyed by their own selector) within -2..+5 ms of event
time, and per n % 5 keyed state with a time-to-live, out at the end of the input."""
import sys, time
from flinkpy.common import Encoder, Time, Types, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, ProcessJoinFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.file_system import FileSink
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor, StateTtlConfig, ValueStateDescriptor

count, out, pause = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
END = 10**12
HOUR = 3_600_000


def slow(n):
    time.sleep(pause)
    return n


def stamp(n):
    return n + (n // 50) * 100


def ttl(descriptor, ms):
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(Time.milliseconds(ms)).build())
    return descriptor


class Pair(ProcessJoinFunction):
    def process_element(self, left, right, ctx):
        yield (left, right[1], ctx.get_left_timestamp(), ctx.get_right_timestamp())


class Kept(KeyedProcessFunction):
    """The smallest number (TTL an hour), numbers per parity (map state, TTL an hour), the multiples of 10 (list state,
    TTL an hour), and the key's first number kept for one second only."""

    def open(self, ctx):
        self.low = ctx.get_state(ttl(ValueStateDescriptor("low", Types.LONG()), HOUR))
        self.parity = ctx.get_map_state(ttl(MapStateDescriptor("parity", Types.STRING(), Types.LONG()), HOUR))
        self.tens = ctx.get_list_state(ttl(ListStateDescriptor("tens", Types.LONG()), HOUR))
        self.fleeting = ctx.get_state(ttl(ValueStateDescriptor("fleeting", Types.LONG()), 1000))

    def process_element(self, n, ctx):
        low = self.low.value()
        if low is None:
            self.fleeting.update(n)
            ctx.timer_service().register_event_time_timer(END)
        if low is None or n < low:
            self.low.update(n)
        side = "even" if n % 2 == 0 else "odd"
        self.parity.put(side, (self.parity.get(side) or 0) + 1)
        if n % 10 == 0:
            self.tens.add(n)

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), self.low.value(), sorted(self.parity.items()), sorted(self.tens.get()), self.fleeting.value())


env = StreamExecutionEnvironment.get_execution_environment()
timed = (env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
         .map(slow).name("slow").uid("slow")
         .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda n, _: stamp(n))))
threes = timed.filter(lambda n: n % 3 == 0).map(lambda n: ("r", n))
(timed.key_by(lambda n: n % 4).interval_join(threes.key_by(lambda r: r[1] % 4))
 .between(Time.milliseconds(-2), Time.milliseconds(5)).process(Pair()).name("pairs").uid("pairs")
 .sink_to(FileSink.for_row_format(out + "-pairs", Encoder.simple_string_encoder()).build()).name("pairs file").uid("pairs-sink"))
(timed.key_by(lambda n: n % 5).process(Kept()).name("kept").uid("kept")
 .sink_to(FileSink.for_row_format(out + "-kept", Encoder.simple_string_encoder()).build()).name("kept file").uid("kept-sink"))
env.execute("joined and kept")
'''


KEPT_MOVES = "keyed state (_timers.event, fleeting, low, parity, tens; time-to-live of fleeting, low, parity, tens kept)"
LOW_WITHOUT_TTL = ("its keyed state 'low' was checkpointed with a time-to-live and is declared without one: keep the state's "
                   "StateTtlConfig enabled (or disabled) as it was, or give the state a new name (the engine's own restore refuses "
                   "it too, as Flink did before 2.2)")


def _stamp(n: int) -> int:
    return n + (n // 50) * 100


def _expected_pairs(count: int) -> Counter:
    """Every (n, m) with m divisible by 3, n % 4 == m % 4 and m's stamp within -2..+5 ms of n's."""
    out: Counter = Counter()
    for n in range(1, count + 1):
        for m in range(max(1, n - 10), min(count, n + 10) + 1):
            if m % 3 == 0 and m % 4 == n % 4 and _stamp(n) - 2 <= _stamp(m) <= _stamp(n) + 5:
                out[(n, m, _stamp(n), _stamp(m))] += 1
    return out


def _expected_kept(count: int) -> Counter:
    out: Counter = Counter()
    for key in range(5):
        ns = list(range(key or 5, count + 1, 5))
        parity = sorted(Counter("even" if n % 2 == 0 else "odd" for n in ns).items())
        out[(key, ns[0], tuple(tuple(p) for p in parity), tuple(n for n in ns if n % 10 == 0), None)] += 1
    return out


def _lines(path: Path) -> Counter:
    parts = [p for p in path.rglob("*") if p.is_file() and not any(x.startswith(".") for x in p.relative_to(path).parts)]
    rows = [ast.literal_eval(line) for p in parts for line in p.read_text().splitlines() if line]
    return Counter(tuple(tuple(tuple(y) if isinstance(y, list) else y for y in x) if isinstance(x, list) else x for x in r)
                   for r in rows)


def _keyed_document(savepoint: str, uid: str) -> dict:
    """The keyed state of operator ``uid`` in a savepoint (every subtask's documents merged)."""
    from flinkpy.checkpoint.analysis import StateFileReader
    from flinkpy.checkpoint.storage import CheckpointStorage

    directory = savepoint.removeprefix("file://")
    meta = json.loads((Path(directory) / "_metadata").read_text())
    op = next(o for o in meta["operators"] if o.get("uid") == uid)
    reader = StateFileReader(CheckpointStorage(directory), directory, trusted=True)
    docs = [reader.load(s["keyed_state"]) for s in op["subtasks"] if s.get("keyed_state")]
    summary = {name: entry for s in op["subtasks"] if s.get("keyed_state") for name, entry in s["keyed_state"]["states"].items()}
    return {"summary": summary, "states": sm.merged_states(docs)}


def _by_key(entry: dict) -> dict:
    return {k: v for table in entry["key_groups"].values() for k, v in table.items()}


@pytest.mark.timeout(600)
def test_an_interval_join_and_ttl_state_move_engine_to_spark_to_engine_exactly_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interval join's buffers with their cleanup timers, and TTL state with its timestamps,
    move engine (p 2) -> Spark (p 1) -> engine (p 2), stopped with a savepoint mid-stream each
    time: every pair exactly once, the TTL states' timestamps of values not written on Spark the
    same in both savepoints, the value kept for a second still expired at the end."""
    import time

    from flinkpy.client.runner_move import plan_runner_move

    began = time.monotonic()

    def mark(what: str) -> None:
        print(f"{time.monotonic() - began:6.1f} s  {what}")

    home = _home(tmp_path, monkeypatch)
    count, out = 600, tmp_path / "out"
    pairs = Path(f"{out}-pairs")
    (tmp_path / "job.py").write_text(JOB)
    job = [str(tmp_path / "job.py"), str(count), str(out)]
    slow = [*job, "0.02"]
    with running_cluster(home, taskmanagers=1, slots=2):  # one engine cluster for both of the job's runs on the engine
        mark("cluster up")
        jid = _cli_json("run", "-d", "-p", "2", "-D", "execution.checkpointing.interval=300ms", *slow)["jobs"][0]["jid"]
        wait_for(lambda: sum(_lines(pairs).values()) >= 20, timeout=90, interval=0.2, message="engine pairs before the stop")
        on_engine = _stop(jid, tmp_path / "sp-engine")
        mark("stopped on the engine")
        first = sum(_lines(pairs).values())
        assert first < sum(_expected_pairs(count).values()), "the engine job should stop mid-stream"
        engine_join = _keyed_document(on_engine, "pairs")
        assert engine_join["states"]["_interval_join_left"]["key_groups"], "the join should have buffered records at the stop"
        engine_kept = _keyed_document(on_engine, "kept")
        assert {n: e.get("ttl_ms") for n, e in engine_kept["summary"].items() if not n.startswith("_")} == {
            "low": 3_600_000, "parity": 3_600_000, "tens": 3_600_000, "fleeting": 1000}
        plan = plan_runner_move(on_engine, slow[0], slow[1:], runner="spark")
        moves = {o["operator"]: o["state"] for o in plan["operators"] if o["move"] == "moves"}
        assert plan["movable"], plan
        assert moves["pairs"] == "keyed state (_interval_join_left, _interval_join_right, _timers.event)", plan
        assert moves["kept"] == KEPT_MOVES
        # the same job with 'low' declared without its TTL: refused by name, before anything starts
        (tmp_path / "plain.py").write_text(JOB.replace('ttl(ValueStateDescriptor("low", Types.LONG()), HOUR)',
                                                       'ValueStateDescriptor("low", Types.LONG())'))
        plain = [str(tmp_path / "plain.py"), *slow[1:]]
        refused = plan_runner_move(on_engine, plain[0], plain[1:], runner="spark")
        assert not refused["movable"] and refused["problems"] == [f"operator 'kept': {LOW_WITHOUT_TTL}"], refused
        mark("planned")

        spark_jid = _cli_json("run", "-d", "--runner", "spark", "-p", "1", "-s", on_engine, "-D",
                              "execution.spark.max-records-per-batch=100", *slow)["jobs"][0]["jid"]
        log = home / "log" / f"spark-{spark_jid}.log"
        try:
            wait_for(lambda: sum(_lines(pairs).values()) >= first + 10, timeout=300, interval=0.3, message="Spark pairs after the move",
                     describe=lambda: log.read_text()[-3000:])
            mark("Spark output")
            on_spark = _stop(spark_jid, tmp_path / "sp-spark")
        finally:
            _kill_driver(home, spark_jid)
        mark("stopped on Spark")
        assert sum(_lines(pairs).values()) < sum(_expected_pairs(count).values()), "the Spark job should stop mid-stream"
        meta = json.loads((Path(on_spark.removeprefix("file://")) / "_metadata").read_text())
        assert meta["moved"]["refused"] == [], [r["reason"] for r in meta["moved"]["refused"]]
        spark_kept = _keyed_document(on_spark, "kept")
        # values not written on Spark keep their last-access timestamps both ways; the TTLs are in the summary
        for name in ("low", "fleeting"):
            before, after = _by_key(engine_kept["states"][name]), _by_key(spark_kept["states"][name])
            same = [k for k in before if k in after and before[k][0] == after[k][0]]
            assert same and all(before[k] == after[k] for k in same), (name, before, after)
        assert spark_kept["summary"]["fleeting"]["ttl_ms"] == 1000
        back = plan_runner_move(on_spark, slow[0], slow[1:], runner="engine")
        moves = {o["operator"]: o["state"] for o in back["operators"] if o["move"] == "moves"}
        assert back["movable"] and moves["kept"] == KEPT_MOVES, back
        assert moves["pairs"] == "keyed state (_interval_join_left, _interval_join_right, _timers.event)", back
        refused = plan_runner_move(on_spark, plain[0], plain[1:], runner="engine")
        assert not refused["movable"] and refused["problems"] == [f"operator 'kept': {LOW_WITHOUT_TTL}"], refused

        res = run_cli("run", "-p", "2", "-s", on_spark, *job, "0", timeout=240)
        assert res.returncode == 0, res.stderr[-3000:]
        mark("finished on the engine")
    assert _lines(pairs) == _expected_pairs(count)
    assert _lines(Path(f"{out}-kept")) == _expected_kept(count)
