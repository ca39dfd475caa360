"""The Spark runner's per-record paths for job shapes beyond the benchmark's W1 and W2.

A running word count written as a user writes it first — tuples, ``.sum(1)``, a filter after the
keyed operator, ``print()`` — spent most of its Python time in two places: the field aggregator
behind ``sum(1)`` (several ``isinstance`` calls per record) and the chain level after the keyed
reduce, which ran each record of the reduce's update bundles through the operators on its own
and sent every output on as a row of its own. These tests pin the faster roads and their
boundaries without a Spark session (the level's function runs over Arrow batches directly);
tests/test_spark_operators.py checks the results of such levels on Spark against the engine.
"""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed (pip install -e '.[spark]')")

from flinkpy.datastream import StreamExecutionEnvironment  # noqa: E402
from flinkpy.datastream import aggregations  # noqa: E402
from flinkpy.spark.levels import LevelSpec, routed_chain_function  # noqa: E402
from flinkpy.spark.plan import translate  # noqa: E402
from flinkpy.spark.records import BUNDLE, RECORD, child_seq, seq_of, to_batch, unbundle  # noqa: E402


def _level_after_keyed(build) -> LevelSpec:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    build(env)
    plan = translate(env, config={}, job_name="hot path")
    levels = [s.payload for s in plan.stages if s.kind == "chain" and isinstance(s.payload, LevelSpec)]
    assert levels, plan.explain()
    return levels[0]


def _run(spec: LevelSpec, updates: list, seq: bytes) -> dict:
    """The level's output columns for one bundle of a keyed reduce's ``updates``."""
    (entry,) = [r for r, nid in spec.entries.items() if nid is not None]
    batch = to_batch([(updates, None)], [None], [0], [seq], [BUNDLE], [entry])
    (out,) = list(routed_chain_function(spec)(iter([batch])))
    return out.to_pydict()


def test_a_filter_after_a_keyed_sum_takes_each_bundle_at_once_and_sends_one_bundle_on():
    spec = _level_after_keyed(lambda env: env.from_collection([("a", 1)]).key_by(lambda t: t[0]).sum(1)
                              .filter(lambda t: t[1] % 2 == 0).print())
    updates = [("a", n) for n in range(1, 9)]
    seq = child_seq(seq_of(0, 1, 40), 3)
    cols = _run(spec, updates, seq)
    # one row: the filter's outputs in their order, under the bundle's ordering key and watermark
    assert cols["kind"] == [BUNDLE]
    assert cols["seq"] == [seq] and cols["w"] == [0]
    assert unbundle(cols["value"][0]) == ([("a", 2), ("a", 4), ("a", 6), ("a", 8)], [None] * 4)


def test_a_level_that_fans_out_after_a_keyed_sum_still_runs_record_by_record():
    def build(env):
        sums = env.from_collection([("a", 1)]).key_by(lambda t: t[0]).sum(1)
        evens = sums.filter(lambda t: t[1] % 2 == 0)
        evens.print()
        evens.map(lambda t: t[1]).print()

    spec = _level_after_keyed(build)
    assert not spec.linear  # the filter feeds two consumers: their rows interleave record by record
    seq = seq_of(0, 0, 7)
    cols = _run(spec, [("a", 1), ("a", 2), ("a", 3), ("a", 4)], seq)
    assert set(cols["kind"]) == {RECORD}
    order = sorted(zip(cols["seq"], (pickle.loads(v) for v in cols["value"])))
    assert [v for _, v in order] == [("a", 2), 2, ("a", 4), 4]
    assert order[0][0] == child_seq(child_seq(seq, 1), 0)


def test_sum_min_max_by_position_of_plain_tuples_skip_the_type_dispatch(monkeypatch):
    general = {how: aggregations.field_aggregator(how, 1) for how in ("sum", "min", "max")}
    calls = []
    real_get = aggregations._get
    monkeypatch.setattr(aggregations, "_get", lambda v, p: calls.append(v) or real_get(v, p))
    a, b = ("w", 5, "first"), ("w", 7, "second")
    assert general["sum"](a, b) == ("w", 12, "first")
    assert general["min"](a, b) == ("w", 5, "first")
    assert general["max"](a, b) == ("w", 7, "first")
    assert calls == []
    # anything but two plain tuples keeps the general road, with its results
    from flinkpy.common.types import Row

    assert general["sum"](Row("w", 5), Row("w", 7)) == Row("w", 12)
    assert general["sum"](["w", 5], ("w", 7)) == ["w", 12]
    assert aggregations.field_aggregator("sum", 0)(3, 4) == 7
    assert calls
