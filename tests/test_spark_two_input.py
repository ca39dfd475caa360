"""Connected streams on Spark: the two-input operators with the engine's results, or a reason.

One job (CONNECTED_JOB) joins orders with shipments and uses every two-input operator kind that
``connect`` builds, each into a sink of its own:

0. ``connect(...).key_by(k1, k2).process(KeyedCoProcessFunction)``: both sides in keyed state,
   a match when both are there, an event-time timer 5 s after each record that reports what is
   still unmatched ("unshipped" orders, "orphan" shipments) — right only if every timer fires
   after the other input's records before it, i.e. under the minimum of both watermarks;
1. ``partition_custom`` into ``connect(...).flat_map(CoFlatMapFunction)``, then ``key_by().sum()``:
   a keyed depth after a two-input operator of chain level 0;
2. ``connect(...).process(CoProcessFunction)``: main output with the record's timestamp, a side
   output from the second input, unioned into one sink;
3. ``key_by(k1, k2).map(CoMapFunction)`` with a keyed count across both inputs;
4. ``key_by(k1, k2).flat_map(CoFlatMapFunction)`` at keyed depth 2: its first input comes from a
   keyed reduce, its second straight from a source (passing keyed depth 1);
5. a KeyedCoProcessFunction over orders and a denser stream of clicks, whose timers count each
   input's records until then: the orders' watermark alone runs ahead of the clicks', so a timer
   that fired by it would miss clicks (it did, before the operator took the lower of the two);
6. ``connect(...).map(CoMapFunction)`` after keyed depth 1: a keyed reduce's updates and clicks;
7. ``connect(shipments.broadcast(CARRIERS)).process(BroadcastProcessFunction)``: every shipment
   into the broadcast state, which the orders read;
8. ``key_by(customer).connect(shipments.broadcast(CARRIERS)).process(KeyedBroadcastProcessFunction)``:
   each customer's shipments announced, read from the broadcast state at its first order or put
   into its keyed state by ``apply_to_keyed_state`` after it: every customer ends with all of
   them only if both hold, whichever way the inputs interleave (reported by a timer at the end).

Watermarks are punctuated (one after each record), so that rows carry their input's watermark.

The job runs on flinkpy's engine (an embedded local cluster) and on Spark (one local[2] session
for the module, several micro-batches); every sink must hold the same records on both, and the
records computed here from the input.
"""

from __future__ import annotations

from collections import Counter
import pytest

from conftest import run_cli

pytest.importorskip("pyspark", reason="PySpark is not installed (pip install -e '.[spark]')")

from flinkpy.spark.capture import capture_job  # noqa: E402
from flinkpy.spark.plan import MAX_RECORDS_KEY, translate  # noqa: E402
from flinkpy.spark.sinks import read_collected  # noqa: E402
from test_spark_operators import _engine_records, _run_on_engine, _start  # noqa: E402

pytestmark = pytest.mark.timeout(600)

CONNECTED_JOB = '''
import sys

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.connectors.collect import CollectSink
from flinkpy.datastream import (BroadcastProcessFunction, CoFlatMapFunction, CoMapFunction, CoProcessFunction,
                                KeyedBroadcastProcessFunction, KeyedCoProcessFunction, OutputTag, Partitioner,
                                StreamExecutionEnvironment)
from flinkpy.datastream.state import MapStateDescriptor, ValueStateDescriptor

SHIPMENTS = OutputTag("shipments")
#: shipment id -> carrier, broadcast
CARRIERS = MapStateDescriptor("carriers", Types.LONG(), Types.STRING())
ORDERS = ValueStateDescriptor("orders", None)


def orders():
    """(order id, customer, amount, timestamp ms), in time order."""
    return [(i, "c%d" % (i % 4), i, 100 * i) for i in range(200)]


def shipments():
    """(order id, carrier, timestamp ms): every order not divisible by 3 ships within 5 s; ten
    shipments have no order."""
    out = [(i, "dhl" if i % 2 else "ups", 100 * i + 50 * (i % 7)) for i in range(200) if i % 3]
    out += [(1000 + j, "ups", 2000 * j + 7) for j in range(10)]
    return sorted(out, key=lambda s: s[2])


class Join(KeyedCoProcessFunction):
    def open(self, ctx):
        self.order = ctx.get_state(ValueStateDescriptor("order", None))
        self.shipment = ctx.get_state(ValueStateDescriptor("shipment", None))

    def process_element1(self, order, ctx):
        self.order.update(order)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5000)
        if self.shipment.value() is not None:
            yield ("shipped", order[0], order[2], self.shipment.value()[1])

    def process_element2(self, shipment, ctx):
        self.shipment.update(shipment)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5000)
        if self.order.value() is not None:
            yield ("shipped", shipment[0], self.order.value()[2], shipment[1])

    def on_timer(self, timestamp, ctx):
        order, shipment = self.order.value(), self.shipment.value()
        if order is not None and shipment is None:
            yield ("unshipped", ctx.get_current_key(), timestamp)
        elif shipment is not None and order is None:
            yield ("orphan", ctx.get_current_key(), timestamp)
        self.order.clear()
        self.shipment.clear()


def clicks():
    """(click id, customer, timestamp ms): dense in event time, so the orders run ahead of them."""
    return [(j, "c%d" % (j % 4), 30 * j) for j in range(600)]


class Tally(KeyedCoProcessFunction):
    """Per customer: a timer 1 s after each order and click reports how many of each the
    customer had until then. Right only if the timer fires after every record of both inputs
    before it: under the minimum of the two inputs' watermarks (the orders' alone run ahead)."""

    def open(self, ctx):
        self.times = ctx.get_state(ValueStateDescriptor("times", None))

    def _add(self, side, ctx):
        self.times.update((self.times.value() or []) + [(side, ctx.timestamp())])
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 1000)

    def process_element1(self, order, ctx):
        self._add("order", ctx)

    def process_element2(self, click, ctx):
        self._add("click", ctx)

    def on_timer(self, timestamp, ctx):
        times = self.times.value()
        yield (ctx.get_current_key(), timestamp, sum(1 for s, t in times if s == "order" and t <= timestamp),
               sum(1 for s, t in times if s == "click" and t <= timestamp))


class Label(CoMapFunction):
    def map1(self, total):
        return ("total",) + total

    def map2(self, click):
        return ("click", click[0])


class ByCustomer(Partitioner):
    def partition(self, key, num_partitions):
        return int(key[1:]) % num_partitions


class Amounts(CoFlatMapFunction):
    def flat_map1(self, order):
        yield (order[1], order[2])

    def flat_map2(self, shipment):
        if shipment[0] < 1000:
            yield ("c%d" % (shipment[0] % 4), 1000)


class Tag(CoProcessFunction):
    def process_element1(self, order, ctx):
        yield ("order", order[0], ctx.timestamp())

    def process_element2(self, shipment, ctx):
        ctx.output(SHIPMENTS, ("shipment", shipment[0], ctx.timestamp()))


class Count(CoMapFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", None))

    def _next(self, key):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        return (key, n)

    def map1(self, order):
        return self._next(order[0] % 5)

    def map2(self, shipment):
        return self._next(shipment[0] % 5)


class Seen(CoFlatMapFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", None))

    def _next(self, customer):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        return (customer, n)

    def flat_map1(self, total):
        yield self._next(total[0])

    def flat_map2(self, order):
        yield self._next(order[1])
        yield ("order", order[0])


class Carriers(BroadcastProcessFunction):
    def process_element(self, order, ctx):
        ctx.get_broadcast_state(CARRIERS).get(order[0])
        yield ("order", order[0], ctx.timestamp())

    def process_broadcast_element(self, shipment, ctx):
        carriers = ctx.get_broadcast_state(CARRIERS)
        carriers.put(shipment[0], shipment[1])
        yield ("known", len(list(carriers.keys())))


class Announced(KeyedBroadcastProcessFunction):
    """Per customer, the shipments announced to it: those broadcast before its first order from
    the broadcast state, those after by apply_to_keyed_state; a timer reports them at the end."""

    def open(self, ctx):
        self.orders = ctx.get_state(ORDERS)
        self.seen = ctx.get_map_state(MapStateDescriptor("seen", None, None))

    def process_element(self, order, ctx):
        if self.orders.value() is None:
            for shipment_id in ctx.get_broadcast_state(CARRIERS).keys():
                self.seen.put(shipment_id, True)
            ctx.timer_service().register_event_time_timer(10**9)
        self.orders.update((self.orders.value() or 0) + 1)

    def process_broadcast_element(self, shipment, ctx):
        ctx.get_broadcast_state(CARRIERS).put(shipment[0], shipment[1])
        ctx.apply_to_keyed_state(ORDERS, lambda customer, orders: self.seen.put(shipment[0], True))

    def on_timer(self, timestamp, ctx):
        seen = list(self.seen.keys())
        yield (ctx.get_current_key(), self.orders.value(), len(seen), sum(seen))


class EveryRecord:
    """Punctuated: a watermark after every record, so that rows carry their input's watermark
    (and a two-input operator must take the lower of its two inputs')."""

    def __init__(self):
        self.highest = None

    def on_event(self, event, timestamp, output):
        self.highest = timestamp if self.highest is None else max(self.highest, timestamp)
        output.emit_watermark(self.highest - 1)

    def on_periodic_emit(self, output):
        pass


def build(env, outs):
    stamped = WatermarkStrategy.for_generator(EveryRecord)
    o = env.from_collection(orders()).assign_timestamps_and_watermarks(stamped.with_timestamp_assigner(lambda r, _: r[3]))
    s = env.from_collection(shipments()).assign_timestamps_and_watermarks(stamped.with_timestamp_assigner(lambda r, _: r[2]))
    o.connect(s).key_by(lambda r: r[0], lambda r: r[0]).process(Join()).name("join").sink_to(CollectSink(outs[0]))
    (o.partition_custom(ByCustomer(), lambda r: r[1]).connect(s).flat_map(Amounts()).name("amounts")
     .key_by(lambda t: t[0]).sum(1).name("per customer").sink_to(CollectSink(outs[1])))
    tagged = o.connect(s).process(Tag()).name("tag")
    tagged.union(tagged.get_side_output(SHIPMENTS)).sink_to(CollectSink(outs[2]))
    o.connect(s).key_by(lambda r: r[0] % 5, lambda r: r[0] % 5).map(Count()).name("count").sink_to(CollectSink(outs[3]))
    c = env.from_collection(clicks()).assign_timestamps_and_watermarks(stamped.with_timestamp_assigner(lambda r, _: r[2]))
    o.connect(c).key_by(lambda r: r[1], lambda r: r[1]).process(Tally()).name("tally").sink_to(CollectSink(outs[5]))
    totals = o.map(lambda r: (r[1], r[2])).key_by(lambda t: t[0]).sum(1).name("totals")
    totals.connect(o).key_by(lambda t: t[0], lambda r: r[1]).flat_map(Seen()).name("seen").sink_to(CollectSink(outs[4]))
    totals.connect(c).map(Label()).name("label").sink_to(CollectSink(outs[6]))
    o.connect(s.broadcast(CARRIERS)).process(Carriers()).name("carriers").sink_to(CollectSink(outs[7]))
    o.key_by(lambda r: r[1]).connect(s.broadcast(CARRIERS)).process(Announced()).name("announced").sink_to(CollectSink(outs[8]))


if __name__ == "__main__":
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    build(env, sys.argv[1:])
    env.execute("connected")
'''

SINKS = 9


def _expected() -> list[Counter]:
    """Each sink's records, computed from the input without either runner."""
    orders = [(i, f"c{i % 4}", i, 100 * i) for i in range(200)]
    ships = [(i, "dhl" if i % 2 else "ups", 100 * i + 50 * (i % 7)) for i in range(200) if i % 3]
    ships += [(1000 + j, "ups", 2000 * j + 7) for j in range(10)]
    carrier = {s[0]: s[1] for s in ships}
    join = Counter([("shipped", i, i, carrier[i]) for i in range(200) if i % 3]
                   + [("unshipped", i, 100 * i + 5000) for i in range(200) if i % 3 == 0]
                   + [("orphan", 1000 + j, 2000 * j + 7 + 5000) for j in range(10)])
    amounts = [(c, a) for _, c, a, _ in orders] + [(f"c{s[0] % 4}", 1000) for s in ships if s[0] < 1000]
    # which running sums appear depends on how the two inputs interleave; each customer's final
    # sum and number of updates do not
    sums = Counter({(c, sum(a for x, a in amounts if x == c)): sum(1 for x, _ in amounts if x == c) for c in ("c0", "c1", "c2", "c3")})
    tagged = Counter([("order", i, 100 * i) for i in range(200)] + [("shipment", s[0], s[2]) for s in ships])
    per_mod = Counter(r[0] % 5 for r in orders) + Counter(s[0] % 5 for s in ships)
    count = Counter((k, n) for k, m in per_mod.items() for n in range(1, m + 1))
    # 50 running totals and 50 orders per customer
    seen = Counter((c, n) for c in ("c0", "c1", "c2", "c3") for n in range(1, 101)) + Counter(("order", i) for i in range(200))
    times = [(c, "order", ts) for _, c, _, ts in orders] + [(f"c{j % 4}", "click", 30 * j) for j in range(600)]
    tally = Counter((c, t + 1000, sum(1 for x, s, u in times if x == c and s == "order" and u <= t + 1000),
                     sum(1 for x, s, u in times if x == c and s == "click" and u <= t + 1000))
                    for c, t in {(c, t) for c, _, t in times})
    running = {}
    label = Counter(("click", j) for j in range(600))
    for _, c, a, _ in orders:
        running[c] = running.get(c, 0) + a
        label[("total", c, running[c])] += 1
    carriers = Counter([("order", i, 100 * i) for i in range(200)] + [("known", n) for n in range(1, len(ships) + 1)])
    announced = Counter((c, 50, len(ships), sum(carrier)) for c in ("c0", "c1", "c2", "c3"))
    return [join, sums, tagged, count, seen, tally, label, carriers, announced]


@pytest.fixture(scope="module")
def spark():
    from flinkpy.spark.session import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="flinkpy-spark-two-input-tests")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """The job on Spark and on the engine: (engine outputs, Spark outputs, plan), one list per sink."""
    base = tmp_path_factory.mktemp("spark-two-input")
    job_file = base / "connected_job.py"
    job_file.write_text(CONNECTED_JOB)
    spark_dirs = [base / f"spark-{i}" for i in range(SINKS)]
    engine_dirs = [base / f"engine-{i}" for i in range(SINKS)]
    for d in spark_dirs + engine_dirs:
        d.mkdir()
    (captured,) = capture_job(str(job_file), list(map(str, spark_dirs)))
    # several micro-batches: both inputs' watermarks and the end of input cross batch boundaries
    plan = translate(captured.env, config={MAX_RECORDS_KEY: "60"}, job_name="connected")
    query = _start(plan, spark, base, "connected")
    home = base / "home"
    home.mkdir()
    res = _run_on_engine(home, job_file, *map(str, engine_dirs))
    assert res.returncode == 0, res.stderr
    query.awaitTermination(480)
    assert not query.isActive, "the bounded query did not end by itself"
    assert query.exception() is None, str(query.exception())
    return [_engine_records(d) for d in engine_dirs], [read_collected(str(d)) for d in spark_dirs], plan


def test_every_two_input_operator_equals_the_engine_and_the_input(run):
    engine, spark, plan = run
    expected = _expected()
    for i, (e, s) in enumerate(zip(engine, spark)):
        if i == 1:  # running sums: each customer's last one, and how many there were
            e, s = [Counter({(c, max(v for k, v in out if k == c)): sum(1 for k, _ in out if k == c) for c, _ in out}) for out in (e, s)]
            assert e == s == expected[1]
            continue
        assert Counter(e) == expected[i], f"sink {i}: the engine differs from the input's results"
        assert Counter(s) == Counter(e), f"sink {i}: Spark differs from the engine"
    # the join and the count: one keyed operator each, grouped with both inputs' keys
    explained = plan.explain()
    assert "'join'" in explained and "'seen'" in explained and "partition_custom into 'amounts': not applied" in explained
    assert [s.kind for s in plan.stages].count("keyed") == 2
    # both broadcast operators at keyed depth 1, every row of theirs in one group
    assert "'carriers': both inputs' rows in one Spark group" in explained and "apply_to_keyed_state over every key" in explained
    # the co-map after keyed depth 1 runs in chain level 1, its second input passing that depth
    assert [[n.name for n in s.operators] for s in plan.stages if s.kind == "chain"] == [["label"]]


def test_the_join_timers_wait_for_both_inputs(run):
    """An order's timer at +5 s fires after its shipment (at most 3.5 s later, on the other input):
    no order is reported unshipped that shipped, on Spark as on the engine."""
    engine, spark, _ = run
    unshipped = {r[1] for r in spark[0] if r[0] == "unshipped"}
    assert unshipped == {i for i in range(200) if i % 3 == 0}
    assert len([r for r in spark[0] if r[0] == "shipped"]) == len([i for i in range(200) if i % 3])


# -- refused before anything starts ------------------------------------------------------------


def _env():
    from flinkpy.datastream import StreamExecutionEnvironment

    return StreamExecutionEnvironment.get_execution_environment()


def test_a_broadcast_operator_groups_both_inputs_in_one_group():
    """Every row into a broadcast operator, of either input, gets one grouping key; the keyed
    variant keys its records by the data side's selector inside the group."""
    from flinkpy.datastream import KeyedBroadcastProcessFunction
    from flinkpy.datastream.state import MapStateDescriptor

    class Rules(KeyedBroadcastProcessFunction):
        def process_element(self, value, ctx):
            yield value

        def process_broadcast_element(self, value, ctx):
            ctx.get_broadcast_state(RULES).put(value, 1)

    RULES = MapStateDescriptor("rules")
    env = _env()
    a, b = env.from_collection([("a", 1)]), env.from_collection(["limit"])
    a.key_by(lambda t: t[0]).connect(b.broadcast(RULES)).process(Rules()).name("rules").uid("rules-1").print()
    plan = translate(env, config={})
    (keyed,) = [s for s in plan.stages if s.kind == "keyed"]
    (spec,) = keyed.payload.specs
    assert spec.kind == "keyed_broadcast_process" and keyed.payload.routed and len(spec.second) == 1
    assert spec.key_selector(("a", 1)) == "a" and spec.params["broadcast_state_descriptors"] == (RULES,)
    keys = {r: k for c in (br[1].payload for br in plan.branches) for r, k in c.next_keys.items()}
    assert len(keys) == 2 and {k[1](x) for k in keys.values() for x in [("a", 1), "limit"]} == {0}
    assert "'rules' (uid rules-1): both inputs' rows in one Spark group (parallelism 1); broadcast state 'rules'" in plan.explain()


def test_a_keyed_two_input_operator_is_grouped_by_each_inputs_key():
    """The plan reads each row's route: which input it feeds, and so which key selector keys it."""
    from flinkpy.datastream import KeyedCoProcessFunction

    class Both(KeyedCoProcessFunction):
        def process_element1(self, value, ctx):
            yield value

        def process_element2(self, value, ctx):
            yield value

    env = _env()
    a, b = env.from_collection([("a", 1)]), env.from_collection([(2, "a")])
    a.connect(b).key_by(lambda t: t[0], lambda t: t[1]).process(Both()).name("both").print()
    plan = translate(env, config={})
    (keyed,) = [s for s in plan.stages if s.kind == "keyed"]
    (spec,) = keyed.payload.specs
    assert spec.kind == "keyed_co_process" and keyed.payload.routed and len(spec.second) == 1
    assert spec.key_selector(("a", 1)) == spec.key_selector2((2, "a")) == "a"
    chains = [b[1].payload for b in plan.branches]
    assert all(c.next_keys for c in chains) and spec.second <= set(chains[1].next_keys)


def test_flinkpy_run_on_spark_runs_a_connected_streams_job(flinkpy_home, tmp_path):
    """End to end through the CLI: ``flinkpy run --runner spark`` on a job that connects two
    streams and prints a CoMapFunction's results."""
    job = tmp_path / "tagged.py"
    job.write_text(
        "from flinkpy.datastream import CoMapFunction, StreamExecutionEnvironment\n"
        "class Tag(CoMapFunction):\n"
        "    def map1(self, value):\n"
        "        return ('number', value)\n"
        "    def map2(self, value):\n"
        "        return ('word', value)\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_collection([1, 2]).connect(env.from_collection(['a'])).map(Tag()).print()\n"
        "env.execute('tagged')\n")
    res = run_cli("run", "--runner", "spark", str(job), timeout=300)
    assert res.returncode == 0, res.stderr
    assert sorted(line.split("> ", 1)[-1] for line in res.stdout.splitlines() if "(" in line) == [
        "('number', 1)", "('number', 2)", "('word', 'a')"]
