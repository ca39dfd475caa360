"""The Spark runner's road into and out of a keyed reduce by key group (W1's shape).

W1 on Spark — lines, ``flat_map(split)``, ``map(to_pair)``, ``key_by``, ``reduce``, a
DiscardingSink — spent its Python time outside the user's functions: sorting each batch by key
group before bundling it for the reduce, then pickling all 2 M updates in the reduce, sending them
through the JVM to the driver and unpickling them there, only for the sink to drop them. These
tests pin the faster roads without a Spark session (the functions Spark calls run over Arrow
batches and pandas frames directly): the bundles hold exactly what the sort made, and a reduce
whose every update goes to a DiscardingSink sends their count, with the same state and the same
number of records received by the sink. tests/test_spark_jobs.py and tests/test_spark_operators.py
run keyed reduces on Spark against the engine.
"""

from __future__ import annotations

import pickle
import random

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed (pip install -e '.[spark]')")

from flinkpy.connectors.print_sink import DiscardingSink  # noqa: E402
from flinkpy.datastream import StreamExecutionEnvironment  # noqa: E402
from flinkpy.spark import records as R  # noqa: E402
from flinkpy.spark.chain import _bundles, _Seqs  # noqa: E402
from flinkpy.spark.keyed import group_state_reduce  # noqa: E402
from flinkpy.spark.plan import translate  # noqa: E402
from flinkpy.spark.sinks import DiscardWriter, SinkDriver, SinkRouter  # noqa: E402
from flinkpy.state.key_groups import KeyGroupAssigner  # noqa: E402

GROUPS = 32


def _expected_bundles(values, ts, w, seq, kind, src):
    """Each key group's records in their order, its stamps, largest w and first record: the rows
    the bundling must make, computed record by record."""
    assign = KeyGroupAssigner(GROUPS)
    groups: dict[int, list[int]] = {}
    for i, (v, k) in enumerate(zip(values, kind)):
        if k == R.RECORD:
            groups.setdefault(assign(v[0]), []).append(i)
    rows = []
    for g in sorted(groups):
        idx = groups[g]
        stamps = [ts[i] for i in idx]
        rows.append(((g, [values[i] for i in idx], None if all(t is None for t in stamps) else stamps),
                     max(w[i] for i in idx), seq.at(idx[0]), src[idx[0]]))
    return rows


@pytest.mark.parametrize("timed", [False, True], ids=["untimed", "stamped-and-watermarked"])
def test_bundles_hold_each_key_groups_records_in_order_with_the_markers_apart(timed):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    n = 3000
    kind = [R.RECORD] * n
    for i in rng.sample(range(n), 5):  # markers anywhere in the batch
        kind[i] = rng.choice([R.WATERMARK, R.END, R.FINAL])
    values = [(f"w{rng.randrange(400)}", i) if k == R.RECORD else None for i, k in enumerate(kind)]
    ts = [rng.randrange(10_000) if timed and rng.random() < 0.7 else None for _ in range(n)]
    w = [i // 700 if timed else R.MIN_W for i in range(n)]
    seq = _Seqs(R.seq_of(0, 1, 99))
    seq.extend(range(n))
    src = [0] * n

    out = _bundles(lambda pair: pair[0], GROUPS)(values, ts, w, seq, kind, src).to_pydict()

    got_markers = [(k, wm, s) for k, wm, s in zip(out["kind"], out["w"], out["seq"]) if k != R.BUNDLE]
    assert got_markers == [(k, w[i], seq.at(i)) for i, k in enumerate(kind) if k != R.RECORD], f"seed {seed}"
    assert all(key == R.MARKER_KEY for key, k in zip(out["key"], out["kind"]) if k != R.BUNDLE)
    got = []
    for v, wm, s, r, k, key in zip(out["value"], out["w"], out["seq"], out["src"], out["kind"], out["key"]):
        if k == R.BUNDLE:
            records, stamps = pickle.loads(v)
            got.append(((int.from_bytes(key, "big"), records, stamps), wm, s, r))
    assert got == _expected_bundles(values, ts, w, seq, kind, src), f"seed {seed}"


def _reduce_spec(sinks):
    """The keyed reduce of W1's shape, its updates into ``sinks`` (callables on the stream)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    counts = (env.from_collection(["a b", "b c"]).flat_map(str.split).map(lambda word: (word, 1))
              .key_by(lambda pair: pair[0]).reduce(lambda a, b: (a[0], a[1] + b[1])))
    for sink in sinks:
        sink(counts)
    plan = translate(env, config={}, job_name="w1 shape")
    (keyed,) = [s for s in plan.stages if s.kind == "keyed"]
    return plan, keyed.payload.specs[0]


class _GroupState:
    """What applyInPandasWithState hands the function: the group's state tuple, if any."""

    def __init__(self) -> None:
        self.exists = False
        self.get: tuple = ()

    def update(self, value: tuple) -> None:
        self.exists, self.get = True, value


def _reduce_batches(spec, batches):
    """Run the key-group reduce over ``batches`` of words (one bundle each); its output rows, its state."""
    import pandas as pd

    run = group_state_reduce(spec)
    state = _GroupState()
    rows = []
    for i, words in enumerate(batches):
        frame = pd.DataFrame({"value": [pickle.dumps(([(w, 1) for w in words], None))], "ts": [None], "w": [R.MIN_W],
                              "seq": [R.seq_of(0, 0, i)], "kind": [R.BUNDLE], "src": [0]})
        rows += [r for out in run((b"\x00\x07",), iter([frame]), state) for r in out.to_dict("records")]
    return rows, pickle.loads(state.get[0])


def test_a_reduce_into_a_discarding_sink_sends_the_count_of_its_updates_with_the_same_state():
    plan, spec = _reduce_spec([lambda s: s.sink_to(DiscardingSink())])
    assert spec.discards
    assert "counted, not sent to the driver" in plan.explain()
    batches = [["a", "b", "a"], ["c", "a"], []]

    counted, state = _reduce_batches(spec, batches)
    spec.discards = False  # the road that sends every update
    sent, sent_state = _reduce_batches(spec, batches)

    assert state == sent_state == {"a": ("a", 3), "b": ("b", 1), "c": ("c", 1)}
    assert [r["kind"] for r in counted] == [R.COUNTED, R.COUNTED]
    assert [R.count_of(r["value"]) for r in counted] == [len(R.unbundle(r["value"])[0]) for r in sent] == [3, 2]
    assert [(r["seq"], r["src"]) for r in counted] == [(r["seq"], r["src"]) for r in sent]


class _Batch:
    """A micro-batch as foreachBatch gets it (``toArrow``), of rows already made."""

    def __init__(self, table) -> None:
        self.table = table

    def toArrow(self):  # noqa: N802 - PySpark's name
        return self.table


def test_a_discarding_sink_receives_every_counted_update():
    import pyarrow as pa

    rows = [(R.counted_row(3), R.seq_of(0, 0, 2)), (R.counted_row(2), R.seq_of(0, 0, 1))]
    batch = pa.Table.from_batches([R.to_batch([v for v, _ in rows], [None] * 2, [R.MIN_W] * 2, [s for _, s in rows],
                                              [R.COUNTED] * 2, [0, 0], pickled=True)])
    received = []

    class Counting(DiscardWriter):
        def write(self, records, batch_id):
            received.append((list(records), batch_id))

    driver = SinkDriver(Counting(), set())
    driver(_Batch(batch), 4)
    assert driver.records_written == 5 and received == [([], 4)]
    router = SinkRouter({7: DiscardWriter()}, {0: 7})
    assert router.write_rows([v for v, _ in rows], [R.COUNTED] * 2, [0, 0], 4) == 5


@pytest.mark.parametrize("shape", ["a print beside", "a filter before"])
def test_updates_that_reach_any_other_sink_are_still_sent(shape):
    if shape == "a print beside":
        plan, spec = _reduce_spec([lambda s: s.sink_to(DiscardingSink()), lambda s: s.print()])
    else:
        plan, spec = _reduce_spec([lambda s: s.filter(lambda pair: pair[1] > 1).sink_to(DiscardingSink())])
    assert not spec.discards
    assert "counted" not in plan.explain()
