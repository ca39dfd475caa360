"""Records as numpy columns on the Spark runner (flinkpy/spark/columns.py, vectorized.py,
running_reduce.py, the columnar road through chain.py and keyed.py): every function run over
columns gives exactly what calling it per record gives, values and types, or is refused.

No Spark here: the chain function and the reduce are called on Arrow batches as Spark calls them.
The jobs that run these roads on Spark end to end are in tests/test_spark_jobs.py.
"""

from __future__ import annotations

import logging
import math
import pickle
import random

import numpy as np
import pytest

from flinkpy.common import WatermarkStrategy
from flinkpy.common.functions import MapFunction
from flinkpy.datastream.aggregations import field_aggregator
from flinkpy.spark.chain import ChainSpec, Stage, chain_function
from flinkpy.spark.columns import INT_LIMIT, Columns
from flinkpy.spark.records import BUNDLE, MIN_W, seq_of, to_batch
from flinkpy.spark.running_reduce import reduce_plan, reducer, running_reduce
from flinkpy.spark.vectorized import NotVectorized, arithmetic, call, keys, mask

log = logging.getLogger(__name__)
pytestmark = pytest.mark.timeout(60)

OFFSET = 7


class Scaled(MapFunction):
    def __init__(self, factor: int) -> None:
        self.factor = factor

    def map(self, value):
        return (value % 3, value * self.factor + OFFSET)


class Printing(MapFunction):
    def map(self, value):
        print(value)
        return value


def _typed(values: list) -> list:
    """Values with their types, so that 1 == 1.0 == True do not pass for each other."""
    def one(x):
        return tuple(one(y) for y in x) if type(x) is tuple else (type(x).__name__, x if x == x else "nan")
    return [one(v) for v in values]


FUNCTIONS = [
    lambda n: n % 2,
    lambda n: (n % 7, n),
    lambda n: -n // 3,
    lambda n: n / 4,
    lambda n: (n * 2 - 5) % -3,
    lambda n: n > 10,
    lambda n: (n == 3) + 1,
    lambda n: (n & 6, n | 1, n ^ 5, ~n),
    lambda n: (n * 0.5 + 1.25) % 2.0,
    lambda n: (n, 1, 2.5, True),
    Scaled(3).map,
]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=range(len(FUNCTIONS)))
def test_an_arithmetic_function_over_columns_gives_what_it_gives_per_record(fn) -> None:
    seed = random.randrange(1 << 30)
    log.info("seed %d", seed)
    rng = random.Random(seed)
    numbers = [rng.randrange(-1000, 1000) for _ in range(500)]
    assert arithmetic(fn)
    got = call(fn, Columns.of_ints(numbers)).values()
    assert _typed(got) == _typed([fn(n) for n in numbers])


def test_a_filter_and_a_key_over_columns_keep_and_key_what_they_do_per_record() -> None:
    numbers = list(range(-50, 50))
    cols = Columns.of_ints(numbers)
    kept = cols.take(mask(lambda n: n % 3 == 1, cols)).values()
    assert kept == [n for n in numbers if n % 3 == 1]
    kept = cols.take(mask(lambda n: n % 4, cols)).values()  # truth of an int
    assert kept == [n for n in numbers if n % 4]
    assert keys(lambda n: n % 5, cols).tolist() == [n % 5 for n in numbers]


@pytest.mark.parametrize("fn", [
    lambda n: n.bit_length(),             # a call
    lambda n: 1 if n > 2 else 0,          # a branch
    lambda n: [n, n],                     # a list
    lambda n: tuple(x for x in (n,)),     # a nested function
    Printing().map,                       # a call with a side effect
    lambda n: n ** 2,                     # a power (Python's ints do not overflow)
    lambda n: str(n),
], ids=range(7))
def test_functions_that_are_not_arithmetic_are_never_run_over_columns(fn) -> None:
    assert not arithmetic(fn)


def test_what_numpy_would_answer_otherwise_is_refused() -> None:
    cols = Columns.of_ints([4, 0, 2])
    with pytest.raises(NotVectorized):  # Python raises ZeroDivisionError for that record
        call(lambda n: 8 // n, cols)
    with pytest.raises(NotVectorized):  # int64 could overflow where Python's ints do not
        call(lambda n: n * (INT_LIMIT // 2), Columns.of_ints([3]))
    with pytest.raises(NotVectorized):
        call(lambda n: n % 2 == "a", cols)
    with pytest.raises(NotVectorized):
        call(lambda n: n[0], cols)
    with pytest.raises(NotVectorized):
        keys(lambda n: n * math.nan, Columns.of_ints([1]))  # a dict keeps every NaN apart


def test_bools_count_as_ints_in_arithmetic_as_in_python() -> None:
    cols = Columns((np.array([True, False, True]),), tupled=False)
    assert _typed(call(lambda b: (b + b, -b, ~b, b & True, b * 2.5), cols).values()) == \
        _typed([(b + b, -b, ~b, b & True, b * 2.5) for b in (True, False, True)])


REDUCES = [
    (field_aggregator("sum", 1), lambda r: r[0], "tuples"),
    (field_aggregator("min", 1), lambda r: r[0], "tuples"),
    (field_aggregator("max", 1), lambda r: r[0], "tuples"),
    (lambda a, b: (a[0], a[1] + b[1]), lambda r: r[0], "tuples"),
    (lambda a, b: (b[0], b[1] + a[1]), lambda r: r[0], "tuples"),
    (lambda a, b: a + b, lambda n: n % 4, "ints"),
    (field_aggregator("sum", 0), lambda n: n % 4, "ints"),
    (field_aggregator("sum", 1), lambda r: r[0], "floats"),
    (field_aggregator("max", 0), lambda x: x > 0.5, "plain floats"),
    (field_aggregator("min", 0), lambda n: n % 3, "ints"),
]


def _records(shape: str, rng: random.Random, n: int) -> tuple[list, Columns]:
    if shape == "tuples":
        recs = [(rng.randrange(5), rng.randrange(-10**6, 10**6)) for _ in range(n)]
        return recs, Columns((np.array([r[0] for r in recs]), np.array([r[1] for r in recs])), tupled=True)
    if shape == "ints":
        recs = [rng.randrange(-10**6, 10**6) for _ in range(n)]
        return recs, Columns.of_ints(recs)
    if shape == "plain floats":
        recs = [rng.uniform(-1e3, 1e3) for _ in range(n)]
        return recs, Columns((np.array(recs),), tupled=False)
    recs = [(rng.randrange(3), rng.uniform(-1e3, 1e3)) for _ in range(n)]
    return recs, Columns((np.array([r[0] for r in recs]), np.array([r[1] for r in recs])), tupled=True)


@pytest.mark.parametrize("fn,key,shape", REDUCES, ids=range(len(REDUCES)))
def test_a_running_reduce_over_columns_gives_every_update_and_state_the_engine_s_reduce_gives(fn, key, shape) -> None:
    seed = random.randrange(1 << 30)
    log.info("seed %d", seed)
    rng = random.Random(seed)
    expected_table: dict = {}
    table: dict = {}
    columnar = reducer(fn, key)
    assert columnar is not None
    for _ in range(3):  # batches continue the running values of the ones before
        recs, cols = _records(shape, rng, 300)
        expected = []
        for r in recs:
            k = key(r)
            old = expected_table.get(k)
            expected_table[k] = r if old is None else fn(old, r)
            expected.append(expected_table[k])
        got = columnar(cols, table)
        assert _typed(got.values()) == _typed(expected)
        assert {k: _typed([v]) for k, v in table.items()} == {k: _typed([v]) for k, v in expected_table.items()}


def test_a_reduce_that_is_not_field_by_field_has_no_plan() -> None:
    cols = Columns((np.array([1]), np.array([2])), tupled=True)
    assert reduce_plan(lambda a, b: (a[0], a[1] * b[1]), cols) is None
    assert reduce_plan(lambda a, b: (a[1], a[0] + b[0]), cols) is None
    assert reduce_plan(lambda a, b: (a[0], a[1] + b[1] + 1), cols) is None
    assert reduce_plan(field_aggregator("min_by", 1), cols) is None
    assert reducer(lambda a, b: max(a, b), lambda n: n) is None


def test_a_running_reduce_refuses_before_it_changes_the_table() -> None:
    plan = ("keep", "sum")
    cols = Columns((np.array([1, 1]), np.array([5, 6])), tupled=True)
    table = {1: (1, 2.5)}  # a float running value: Python would go on in floats
    with pytest.raises(NotVectorized):
        running_reduce(plan, cols, cols.fields[0], table)
    assert table == {1: (1, 2.5)}
    table = {1: (1, INT_LIMIT - 3)}
    with pytest.raises(NotVectorized):
        running_reduce(plan, cols, cols.fields[0], table)
    assert table == {1: (1, INT_LIMIT - 3)}
    bools = Columns((np.array([1, 1]), np.array([True, True])), tupled=True)
    with pytest.raises(NotVectorized):  # True + True is 2
        running_reduce(plan, bools, bools.fields[0], {})


# -- the chain: columns in, the same rows out -------------------------------------------------


def _bundle_batch(payloads: list) -> object:
    n = len(payloads)
    return to_batch([(p, None) for p in payloads], [None] * n, [MIN_W] * n, [seq_of(0, 0, i * 10_000) for i in range(n)], [BUNDLE] * n, [0] * n)


def _decoded(batches: list) -> list:
    rows = []
    for b in batches:
        d = b.to_pydict()
        for i in range(b.num_rows):
            value = pickle.loads(d["value"][i]) if d["value"][i] else None
            if d["kind"][i] == BUNDLE:
                payload, ts = value
                value = (Columns.values(payload) if type(payload) is Columns else payload, ts)
            rows.append((value, d["ts"][i], d["w"][i], d["seq"][i], d["kind"][i], d["src"][i], d.get("key", [None] * b.num_rows)[i]))
    return rows


CHAINS = [
    # W2's: a source straight into key_by
    ([Stage("timestamps", "ts", WatermarkStrategy.no_watermarks())], lambda n: n % 2, 32),
    # the ints shape's map, then key_by
    ([Stage("timestamps", "ts", WatermarkStrategy.no_watermarks()), Stage("map", "m", lambda n: (n % 1024, n))], lambda p: p[0], 32),
    # a filter over columns, then a stage that is not arithmetic: the rest per record
    ([Stage("filter", "f", lambda n: n % 3 != 0), Stage("map", "m", lambda n: (str(n)[-1], n))], lambda p: p[0], 32),
    # a key that is not arithmetic after arithmetic stages
    ([Stage("map", "m", lambda n: n * 2)], lambda n: str(n % 10), 32),
    # no key after the chain (a sink follows)
    ([Stage("map", "m", lambda n: (n, n / 2)), Stage("filter", "f", lambda p: p[1] > 5)], None, 0),
    # a second arithmetic stage that cannot run over these columns (an int beyond the exact range)
    ([Stage("map", "m", lambda n: n + 1), Stage("map", "m2", lambda n: n * 2**52)], lambda n: n % 3, 32),
]


@pytest.mark.parametrize("stages,key,groups", CHAINS, ids=range(len(CHAINS)))
def test_the_chain_gives_the_same_rows_from_columns_as_from_records(stages, key, groups) -> None:
    spec = ChainSpec(stages=stages, key_selector=key, key_groups=groups)
    chunks = [list(range(1, 4000)), list(range(4000, 8193))]
    from_objects = list(chain_function(spec)(iter([_bundle_batch(chunks)])))
    from_columns = list(chain_function(spec)(iter([_bundle_batch([Columns.of_ints(c) for c in chunks])])))
    assert _decoded(from_columns) == _decoded(from_objects)
    assert _decoded(from_objects)  # the chain gave rows at all


def test_the_chain_keeps_columns_only_where_every_step_ran_over_them() -> None:
    spec = ChainSpec(stages=CHAINS[1][0], key_selector=CHAINS[1][1], key_groups=32)
    out = list(chain_function(spec)(iter([_bundle_batch([Columns.of_ints(range(1, 5000))])])))
    payloads = [pickle.loads(v)[0] for b in out for v in b.to_pydict()["value"]]
    assert payloads and all(type(p) is Columns for p in payloads)
    spec = ChainSpec(stages=CHAINS[2][0], key_selector=CHAINS[2][1], key_groups=32)
    out = list(chain_function(spec)(iter([_bundle_batch([Columns.of_ints(range(1, 5000))])])))
    payloads = [pickle.loads(v)[0] for b in out for v in b.to_pydict()["value"]]
    assert payloads and all(type(p) is list for p in payloads)


def test_a_zero_divisor_goes_per_record_and_raises_what_python_raises() -> None:
    spec = ChainSpec(stages=[Stage("map", "m", lambda n: 100 // (n - 5))], key_selector=lambda n: n % 3, key_groups=32)
    with pytest.raises(ZeroDivisionError):
        list(chain_function(spec)(iter([_bundle_batch([Columns.of_ints(range(1, 10))])])))
