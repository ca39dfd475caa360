"""The fraud-screening job of test_broadcast_state: rule versions broadcast to a keyed stream.

Numbers ``0..n-1`` become both streams. Each number is a transaction (account ``n % ACCOUNTS``,
event time ``n * STEP_MS``, an amount from a fixed formula); every ``RULE_EVERY``-th number also
announces a new rule version (valid from its own event time, with a threshold from a seeded
table). The rule versions are broadcast and kept in broadcast state by validity time; each
transaction waits in keyed state for the watermark to pass its time (an event-time timer), and
is then judged by the rule version valid at that time — by then every rule up to that time has
arrived from every source subtask, whatever order the two inputs interleaved in. So the result is
a function of ``n`` and the table only, which :func:`expected` computes on its own.

Run as a script (for ``flinkpy run``) it reads the numbers slowly and appends each decision to
a file: ``broadcast_job.py OUT N SEED [NUMBERS_PER_10_MS]``.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any, Iterable

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource
from flinkpy.datastream.functions import FlatMapFunction, KeyedBroadcastProcessFunction
from flinkpy.datastream.state import MapStateDescriptor, ValueStateDescriptor

ACCOUNTS = 13
STEP_MS = 10
#: numbers between two rule versions
RULE_EVERY = 2_000
RULES = MapStateDescriptor("rules", Types.LONG(), Types.LONG())


def thresholds(n: int, seed: int) -> list[int]:
    """One threshold per rule version (there are ceil(n / RULE_EVERY))."""
    rng = random.Random(seed)
    return [rng.randrange(100, 900) for _ in range((n + RULE_EVERY - 1) // RULE_EVERY)]


def amount(n: int) -> int:
    return (n * 7919 + 13) % 1000


def transaction(n: int) -> tuple[int, int, int]:
    return (n % ACCOUNTS, n, amount(n))


def account(tx: tuple[int, int, int]) -> int:
    return tx[0]


class RuleVersions(FlatMapFunction):
    """Every RULE_EVERY-th number announces the rule version valid from its event time."""

    def __init__(self, table: list[int]):
        self.table = table

    def flat_map(self, n: int) -> Iterable[tuple[int, int]]:
        if n % RULE_EVERY == 0:
            yield (n * STEP_MS, self.table[n // RULE_EVERY])


class Screen(KeyedBroadcastProcessFunction):
    """Flags a transaction whose amount exceeds the threshold valid at its event time; emits
    ``(account, n, flagged, flagged so far, seen so far)`` per transaction."""

    def open(self, runtime_context: Any) -> None:
        self.pending = runtime_context.get_map_state(MapStateDescriptor("pending", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.counts = runtime_context.get_state(ValueStateDescriptor("counts", Types.PICKLED_BYTE_ARRAY()))

    def process_broadcast_element(self, rule: tuple[int, int], ctx: Any) -> None:
        valid_from, threshold = rule
        ctx.get_broadcast_state(RULES).put(valid_from, threshold)

    def process_element(self, tx: tuple[int, int, int], ctx: Any) -> None:
        self.pending.put(ctx.timestamp(), tx)
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[tuple]:
        acct, n, value = self.pending.get(timestamp)
        self.pending.remove(timestamp)
        rules = ctx.get_broadcast_state(RULES)
        valid = [v for v in rules.keys() if v <= timestamp]
        if not valid:
            raise RuntimeError(f"no rule valid at {timestamp} in broadcast state {sorted(rules.keys())}")
        flagged = value > rules.get(max(valid))
        hits, seen = self.counts.value() or (0, 0)
        hits, seen = hits + flagged, seen + 1
        self.counts.update((hits, seen))
        yield (acct, n, flagged, hits, seen)


def build(env: StreamExecutionEnvironment, source: Any, table: list[int]) -> Any:
    """The job on ``env`` over ``source`` (numbers): the stream of per-transaction decisions."""
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda n, _: n * STEP_MS)
    numbers = env.from_source(source, strategy, "numbers").uid("numbers")
    rules = numbers.flat_map(RuleVersions(table)).name("rule versions").uid("rule-versions")
    transactions = numbers.map(transaction).name("transactions").uid("transactions")
    return (
        transactions.key_by(account)
        .connect(rules.broadcast(RULES))
        .process(Screen())
        .name("screen")
        .uid("screen")
    )


def expected(n: int, table: list[int]) -> dict[int, bool]:
    """Each transaction's decision, computed without the engine."""
    return {i: amount(i) > table[i // RULE_EVERY] for i in range(n)}


def expected_counts(n: int, table: list[int]) -> dict[int, tuple[int, int]]:
    """Per account, (flagged, seen) once every transaction is judged."""
    counts: dict[int, tuple[int, int]] = {}
    for i, flagged in expected(n, table).items():
        hits, seen = counts.get(i % ACCOUNTS, (0, 0))
        counts[i % ACCOUNTS] = (hits + flagged, seen + 1)
    return counts


class Slow(NumberSequenceSource):
    """The same numbers, ``per_poll`` every 10 ms per subtask (a thousand a second by default):
    slow enough to stop mid-way, and to keep the sources reading (and so checkpointing) while
    the screening catches up — a source that read everything cannot take a checkpoint."""

    def __init__(self, start: int, end: int, per_poll: int = 10):
        super().__init__(start, end)
        self.per_poll = per_poll

    def create_reader(self, ctx: Any) -> Any:
        reader = super().create_reader(ctx)
        poll = reader.poll
        per_poll = self.per_poll

        def slow_poll(max_records: int) -> Any:
            time.sleep(0.01)
            return poll(min(max_records, per_poll))

        reader.poll = slow_poll
        return reader


class AppendTo:
    """Appends each decision ``(n, flagged)`` to a file, as a map (the records pass on)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, decision: tuple) -> tuple:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(repr((decision[1], decision[2])) + "\n")
        return decision


if __name__ == "__main__":
    out, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    per_poll = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env, Slow(0, n - 1, per_poll), thresholds(n, seed)).map(AppendTo(out)).name("log").uid("log")
    env.execute("fraud screening")
