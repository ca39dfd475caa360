"""Partitioners end to end: which subtask of the receiving operator gets which record.

Every receiving operator tags a record with ``get_index_of_this_subtask()`` of the task it runs
in, so the tests see the real routing through real channels between real processes. Each
branch writes to its own collect sink (chained to the tagging map), so a branch costs only its
own tasks. The properties asserted are derived from the partitioners' definitions, not from a
previous run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from flinkpy.connectors.collect import collect_sink
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import MapFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.state.key_groups import assign_to_key_group, compute_operator_index_for_key_group


class Receiver(MapFunction):
    """(subtask index of the receiving task, record)."""

    def open(self, runtime_context):
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return (self.index, value)


def collect_into(stream):
    sink, read = collect_sink()
    stream.sink_to(sink)
    return read


def key_of(n: int):
    """A mix of int, str and tuple keys."""
    if n % 3 == 0:
        return (n % 5, f"t{n % 2}")
    return n % 23 if n % 2 else f"key-{n % 31}"


def expected_subtask(key, parallelism: int) -> int:
    return compute_operator_index_for_key_group(128, parallelism, assign_to_key_group(key, 128))


def assert_round_robin(received: list[tuple[int, int]], parallelism: int) -> None:
    """``received``: (receiver, record) in the order one upstream subtask emitted the records.
    The t-th record goes to receiver (t + offset) % parallelism, for one fixed offset."""
    assert received
    offset = received[0][0]
    assert [d for d, _ in received] == [(t + offset) % parallelism for t in range(len(received))]


def check_rescale(received: list[tuple[int, int, int]], up: int, down: int) -> None:
    """(upstream, receiver, record): rescale connects each upstream subtask to a contiguous block
    of receivers (or each receiver to a contiguous block of upstreams), never all to all, and
    round-robins within a block."""
    targets: dict[int, set[int]] = defaultdict(set)
    for u, d, _ in received:
        targets[u].add(d)
    assert set(targets) == set(range(up))
    assert set().union(*targets.values()) == set(range(down)), "every receiver gets records"
    if up >= down:
        assert all(len(t) == 1 for t in targets.values()), targets
        sources: dict[int, list[int]] = defaultdict(list)
        for u, (d,) in sorted((u, tuple(t)) for u, t in targets.items()):
            sources[d].append(u)
        for ups in sources.values():
            assert ups == list(range(ups[0], ups[0] + len(ups))), sources
    else:
        blocks = sorted(sorted(t) for t in targets.values())
        assert [d for block in blocks for d in block] == list(range(down)), f"blocks overlap or leave gaps: {targets}"
        for block in blocks:
            assert block == list(range(block[0], block[0] + len(block)))
        for u in range(up):
            mine = sorted((n, d) for uu, d, n in received if uu == u)
            block = sorted(targets[u])
            offset = block.index(mine[0][1])
            assert [d for _, d in mine] == [block[(t + offset) % len(block)] for t in range(len(mine))]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("parallelism", [2, 3])
def test_every_partitioner_routes_as_defined(parallelism):
    p = parallelism
    n_single, n_parallel = 600, 900
    other = 5 - p  # an upstream parallelism different from p: 3 -> 2 and 2 -> 3 for rescale
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(p)

    # one upstream subtask emitting 0..n-1 in order
    single = env.from_collection(list(range(n_single)))
    readers = {
        name: collect_into(getattr(single, name)().map(Receiver()).name(name))
        for name in ("rebalance", "rescale", "shuffle", "broadcast")
    }
    readers["key_by"] = collect_into(single.key_by(key_of).map(Receiver()).name("keyed"))

    # p upstream subtasks, each emitting its contiguous share in ascending order, tagged with
    # the upstream subtask index by a map chained to the source
    numbers = env.from_source(NumberSequenceSource(0, n_parallel - 1), WatermarkStrategy.no_watermarks(), "numbers")
    tagged = numbers.map(Receiver()).name("upstream tag")
    readers["p-forward"] = collect_into(tagged.forward().map(Receiver()).name("forward").disable_chaining())
    readers["p-rebalance"] = collect_into(tagged.rebalance().map(Receiver()))
    readers["p-rescale"] = collect_into(tagged.rescale().map(Receiver()))
    others = env.from_source(NumberSequenceSource(0, n_parallel - 1), WatermarkStrategy.no_watermarks(), "others").set_parallelism(other)
    readers["o-rescale"] = collect_into(others.map(Receiver()).set_parallelism(other).rescale().map(Receiver()))

    plan = json.loads(env.get_execution_plan())
    strategies = Counter(pred["ship_strategy"] for node in plan["nodes"] for pred in node["predecessors"])
    # two FORWARD edges: into the unchained "forward" map, and out of it (disable_chaining
    # chains an operator to neither side)
    assert strategies == {"REBALANCE": 2, "RESCALE": 3, "SHUFFLE": 1, "BROADCAST": 1, "HASH": 1, "FORWARD": 2}

    env.execute(f"partitioners at parallelism {p}")
    got = {name: read() for name, read in readers.items()}
    everything = list(range(n_single))

    # rebalance: strict round robin from the one upstream subtask, so counts differ by at most 1
    rebalanced = sorted(got["rebalance"], key=lambda r: r[1])
    assert [n for _, n in rebalanced] == everything
    assert_round_robin(rebalanced, p)
    counts = Counter(d for d, _ in rebalanced)
    assert set(counts) == set(range(p)) and max(counts.values()) - min(counts.values()) <= 1

    # rescale from one upstream subtask: its block is every receiver
    check_rescale([(0, d, n) for d, n in got["rescale"]], 1, p)
    assert sorted(n for _, n in got["rescale"]) == everything

    # shuffle: every record exactly once, every receiver gets a fair share (600 records: a
    # receiver with under half its share would be a 8-sigma event)
    assert sorted(n for _, n in got["shuffle"]) == everything
    shuffled = Counter(d for d, _ in got["shuffle"])
    assert set(shuffled) == set(range(p)) and min(shuffled.values()) > n_single / p / 2, shuffled

    # broadcast: every record at every receiver, exactly once
    assert Counter(got["broadcast"]) == Counter((d, n) for d in range(p) for n in everything)

    # key_by: a key lives on exactly one subtask, the one its key group belongs to
    assert sorted(n for _, n in got["key_by"]) == everything
    owners: dict[object, set[int]] = defaultdict(set)
    for d, n in got["key_by"]:
        owners[key_of(n)].add(d)
    assert {k: s for k, s in owners.items()} == {k: {expected_subtask(k, p)} for k in owners}
    assert len({d for s in owners.values() for d in s}) == p, "the keys spread over every subtask"

    # forward: upstream subtask i feeds receiver i only
    forwarded = got["p-forward"]
    assert sorted(n for _, (_, n) in forwarded) == list(range(n_parallel))
    assert all(d == u for d, (u, _) in forwarded)
    assert {u for _, (u, _) in forwarded} == set(range(p))

    # rebalance from p upstream subtasks: round robin per upstream subtask
    by_upstream: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for d, (u, n) in got["p-rebalance"]:
        by_upstream[u].append((d, n))
    assert sorted(n for rs in by_upstream.values() for _, n in rs) == list(range(n_parallel))
    assert set(by_upstream) == set(range(p))
    for rs in by_upstream.values():
        assert_round_robin(sorted(rs, key=lambda r: r[1]), p)
    counts = Counter(d for d, _ in got["p-rebalance"])
    assert max(counts.values()) - min(counts.values()) <= p  # at most one extra per upstream

    # rescale between equal parallelisms is pointwise, between different ones block-wise
    for name, up in (("p-rescale", p), ("o-rescale", other)):
        received = [(u, d, n) for d, (u, n) in got[name]]
        assert sorted(n for *_, n in received) == list(range(n_parallel))
        check_rescale(received, up, p)
    assert all(u == d for d, (u, _) in got["p-rescale"])


@pytest.mark.timeout(30)
def test_zero_buffer_timeout_still_delivers_every_record():
    words = [f"w{i % 17}" for i in range(700)]
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_buffer_timeout(0)
    assert env.get_buffer_timeout() == 0
    counts = (
        env.from_collection(words)
        .rebalance()
        .map(lambda w: (w, 1))
        .key_by(lambda t: t[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    got = list(counts.execute_and_collect())
    final: dict[str, int] = {}
    for w, c in got:
        final[w] = max(final.get(w, 0), c)
    assert len(got) == len(words)
    assert final == dict(Counter(words))


HASH_SEED_JOB = r'''
import json, sys
from flinkpy.datastream import MapFunction, StreamExecutionEnvironment

class Receiver(MapFunction):
    def open(self, ctx):
        self.index = ctx.get_index_of_this_subtask()
    def map(self, value):
        return (value, self.index)

keys = json.loads(sys.argv[1])
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(3)
got = env.from_collection(keys).key_by(lambda k: k).map(Receiver()).execute_and_collect()
print(json.dumps(sorted(set(map(tuple, got)))))
'''


@pytest.mark.timeout(60)
def test_key_to_subtask_mapping_does_not_depend_on_the_hash_seed(tmp_path: Path):
    keys = [f"user-{i}" for i in range(60)] + ["", "é", "a b", "KEY"]
    script = tmp_path / "hash_seed_job.py"
    script.write_text(HASH_SEED_JOB)
    procs = {
        seed: subprocess.Popen(
            [sys.executable, str(script), json.dumps(keys)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        for seed in ("1", "2")
    }
    mappings = {}
    for seed, proc in procs.items():
        out, err = proc.communicate(timeout=50)
        assert proc.returncode == 0, f"PYTHONHASHSEED={seed}: {err}"
        mappings[seed] = {k: d for k, d in json.loads(out.strip().splitlines()[-1])}
    assert mappings["1"] == mappings["2"]
    assert mappings["1"] == {k: expected_subtask(k, 3) for k in keys}
    assert set(mappings["1"].values()) == {0, 1, 2}
