"""Fraud rules updated while the job runs: the broadcast state pattern.

Card transactions (account, amount, timestamp ms) are checked against rules that an analyst
changes over time (rule name, limit, valid from ms). The rules stream is small, so it is
*broadcast*: every parallel instance of the checking operator receives every rule update and
keeps the rules in broadcast state, while the transactions are keyed by account.

- ``large``: a single transaction above the limit;
- ``burst``: the account's total within the last minute above the limit.

A rule applies from its validity time on: each transaction waits (in keyed state, with an
event-time timer) until the watermark has passed it, so every rule update up to its time has
arrived, and is then checked against the rules valid at that moment. A limit of ``None``
switches a rule off. The output is the same at any parallelism and however the two streams
interleave. Alerts print as (account, timestamp, amount, rule, limit).

    python examples/fraud_rules.py [PARALLELISM]
"""

import sys

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import KeyedBroadcastProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor

# (rule, limit, valid from ms)
RULE_UPDATES = [
    ("large", 1_000, 0),
    ("burst", 2_500, 0),
    ("large", 600, 40_000),   # tightened after an incident
    ("burst", None, 70_000),  # switched off
    ("large", 900, 90_000),
]

# (account, amount, timestamp ms), in time order
TRANSACTIONS = [
    ("alice", 120, 1_000), ("bob", 1_500, 2_000), ("carol", 900, 5_000),
    ("alice", 950, 12_000), ("alice", 800, 20_000), ("alice", 900, 30_000),
    ("bob", 700, 41_000), ("carol", 650, 45_000), ("alice", 300, 50_000),
    ("bob", 1_200, 61_000), ("bob", 1_300, 65_000), ("bob", 900, 72_000),
    ("carol", 2_000, 75_000), ("carol", 2_100, 80_000), ("alice", 800, 91_000),
    ("bob", 950, 95_000), ("carol", 100, 99_000),
]

BURST_WINDOW_MS = 60_000

#: the rule versions, (rule, valid from) -> limit: kept by every instance
RULES = MapStateDescriptor("rules", Types.PICKLED_BYTE_ARRAY(), Types.PICKLED_BYTE_ARRAY())


class CheckTransactions(KeyedBroadcastProcessFunction):
    def open(self, runtime_context):
        # transactions waiting for the watermark, and the account's recent (timestamp, amount)s
        self.waiting = runtime_context.get_map_state(MapStateDescriptor("waiting", Types.LONG(), Types.PICKLED_BYTE_ARRAY()))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent", Types.PICKLED_BYTE_ARRAY()))

    def process_broadcast_element(self, update, ctx):
        rule, limit, valid_from = update
        ctx.get_broadcast_state(RULES).put((rule, valid_from), limit)

    def process_element(self, tx, ctx):
        self.waiting.put(ctx.timestamp(), tx)
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def on_timer(self, timestamp, ctx):
        account, amount, ts = self.waiting.get(timestamp)
        self.waiting.remove(timestamp)
        recent = [(t, a) for t, a in self.recent.get() if t > ts - BURST_WINDOW_MS] + [(ts, amount)]
        self.recent.update(recent)
        rules = ctx.get_broadcast_state(RULES)
        large = self.limit(rules, "large", ts)
        if large is not None and amount > large:
            yield account, ts, amount, "large", large
        burst = self.limit(rules, "burst", ts)
        if burst is not None and sum(a for _, a in recent) > burst:
            yield account, ts, amount, "burst", burst

    @staticmethod
    def limit(rules, rule, at):
        versions = [valid_from for name, valid_from in rules.keys() if name == rule and valid_from <= at]
        return rules.get((rule, max(versions))) if versions else None


def main(parallelism: int = 2) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    rule_updates = env.from_collection(RULE_UPDATES).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _: r[2])
    )
    transactions = env.from_collection(TRANSACTIONS).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda t, _: t[2])
    )
    alerts = (
        transactions.key_by(lambda t: t[0])
        .connect(rule_updates.broadcast(RULES))
        .process(CheckTransactions())
        .name("check transactions")
    )
    alerts.print()
    env.execute("fraud rules")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
