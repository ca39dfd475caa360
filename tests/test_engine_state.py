"""Keyed state end to end: user functions with every kind of keyed state, in task processes.

Each job's output is compared with a plain-Python model that folds the same input per key.
A key's records all reach one subtask over one channel, in input order, so per key the
sequence of outputs is deterministic even at parallelism 2.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest

from flinkpy.common import Types
from flinkpy.datastream import (
    AggregateFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    MapFunction,
    StreamExecutionEnvironment,
)
from flinkpy.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from flinkpy.errors import JobExecutionError

from backends import BACKENDS, engine_backend


class MinMaxMean(AggregateFunction):
    def create_accumulator(self):
        return [None, None, 0, 0]  # min, max, total, count

    def add(self, value, acc):
        lo, hi, total, count = acc
        return [value if lo is None else min(lo, value), value if hi is None else max(hi, value), total + value, count + 1]

    def get_result(self, acc):
        lo, hi, total, count = acc
        return (lo, hi, total / count if count else None)

    def merge(self, a, b):
        raise AssertionError("no windows merge here")


class EveryState(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent", Types.LONG()))
        self.residues = runtime_context.get_map_state(MapStateDescriptor("residues", Types.INT(), Types.LONG()))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG()))
        self.stats = runtime_context.get_aggregating_state(AggregatingStateDescriptor("stats", MinMaxMean()))

    def process_element(self, value, ctx):
        key, x = value
        assert ctx.get_current_key() == key
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.recent.add(x)
        if n % 4 == 0:
            self.recent.update(list(self.recent.get())[-2:])
        if n % 6 == 0:
            self.recent.add_all([x, -x])
        r = x % 3
        self.residues.put(r, (self.residues.get(r) or 0) + 1)
        if x % 7 == 0 and self.residues.contains((r + 1) % 3):
            self.residues.remove((r + 1) % 3)
        self.total.add(x)
        self.stats.add(x)
        yield (key, n, list(self.recent.get()), sorted(self.residues.items()), self.total.get(), self.stats.get())
        if n % 10 == 0:  # start over: clear() of every kind
            for state in (self.count, self.recent, self.residues, self.total, self.stats):
                state.clear()


def every_state_model(records: list[tuple[str, int]]) -> dict[str, list]:
    out: dict[str, list] = defaultdict(list)
    state: dict[str, dict] = {}
    for key, x in records:
        s = state.setdefault(key, {"n": 0, "recent": [], "residues": {}, "total": None, "xs": []})
        s["n"] += 1
        n = s["n"]
        s["recent"].append(x)
        if n % 4 == 0:
            s["recent"] = s["recent"][-2:]
        if n % 6 == 0:
            s["recent"] += [x, -x]
        r = x % 3
        s["residues"][r] = s["residues"].get(r, 0) + 1
        if x % 7 == 0:
            s["residues"].pop((r + 1) % 3, None)
        s["total"] = x if s["total"] is None else s["total"] + x
        s["xs"].append(x)
        xs = s["xs"]
        out[key].append((key, n, list(s["recent"]), sorted(s["residues"].items()), s["total"], (min(xs), max(xs), sum(xs) / len(xs))))
        if n % 10 == 0:
            del state[key]
    return out


@pytest.mark.timeout(30)
@pytest.mark.parametrize("backend_type", BACKENDS)
def test_keyed_process_function_with_every_kind_of_state(backend_type):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(60)]
    records = [(rng.choice(keys), rng.randint(-50, 50)) for _ in range(3000)]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_state_backend(engine_backend(backend_type))
    got = env.from_collection(records).key_by(lambda r: r[0]).process(EveryState()).execute_and_collect()
    per_key: dict[str, list] = defaultdict(list)
    for out in got:
        per_key[out[0]].append(out)
    assert per_key == every_state_model(records)


class RunningCount(MapFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def map(self, value):
        n = (self.seen.value() or 0) + 1
        self.seen.update(n)
        return ("map", value, n)


class EmitOnThird(FlatMapFunction):
    """Buffers a key's values and emits them all at its every third record."""

    def open(self, runtime_context):
        self.buffer = runtime_context.get_list_state(ListStateDescriptor("buffer"))

    def flat_map(self, value):
        self.buffer.add(value)
        values = list(self.buffer.get())
        if len(values) == 3:
            self.buffer.clear()
            return [("flat_map", value, tuple(values))]
        return []


class FirstOfKey(FilterFunction):
    def open(self, runtime_context):
        self.done = runtime_context.get_state(ValueStateDescriptor("done", Types.BOOLEAN()))

    def filter(self, value):
        if self.done.value():
            return False
        self.done.update(True)
        return True


@pytest.mark.timeout(30)
@pytest.mark.parametrize("backend_type", BACKENDS)
def test_keyed_map_flat_map_and_filter_use_keyed_state(backend_type):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    words = [rng.choice(["ant", "bee", "cat", "dog", "eel", "fox", "gnu"]) + str(rng.randint(0, 4)) for _ in range(500)]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_state_backend(engine_backend(backend_type))
    keyed = env.from_collection(words).key_by(lambda w: w)
    mapped = keyed.map(RunningCount())
    flat = keyed.flat_map(EmitOnThird())
    firsts = keyed.filter(FirstOfKey()).map(lambda w: ("filter", w, None))
    got = list(mapped.union(flat, firsts).execute_and_collect())

    seen: Counter = Counter()
    expected: list = []
    buffers: dict[str, list] = defaultdict(list)
    for w in words:
        seen[w] += 1
        expected.append(("map", w, seen[w]))
        buffers[w].append(w)
        if len(buffers[w]) == 3:
            expected.append(("flat_map", w, tuple(buffers.pop(w))))
    expected += [("filter", w, None) for w in dict.fromkeys(words)]
    assert Counter(got) == Counter(expected)


class AsksForState(MapFunction):
    def open(self, runtime_context):
        self.state = runtime_context.get_state(ValueStateDescriptor("counter"))

    def map(self, value):
        return value


@pytest.mark.timeout(30)
def test_keyed_state_on_a_non_keyed_stream_fails_the_job_clearly():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).map(AsksForState()).name("needs state").add_sink(lambda x: None)
    with pytest.raises(JobExecutionError) as info:
        env.execute("state without key_by")
    message = str(info.value)
    assert "'needs state'" in message and "'counter'" in message, message
    assert "keyed state exists only on a KeyedStream" in message, message
    assert "key_by()" in message, message
