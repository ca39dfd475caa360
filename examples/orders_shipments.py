"""Orders joined with their shipments by an interval join: which orders shipped within an hour.

Orders are (order id, customer, amount, time ms) and shipments (shipment id, order id, carrier,
time ms); both arrive up to five minutes out of order. Keyed by order id, an interval join pairs
each order with the shipments of the same order made between 0 and 60 minutes after it (both
bounds inclusive), and emits ``(order id, customer, carrier, minutes to ship)``. An order shipped
in two parcels joins twice; a shipment after the hour joins nothing. Each side waits in keyed
state only as long as the watermark allows a partner to arrive.

    python examples/orders_shipments.py
    flinkpy run -p 2 examples/orders_shipments.py --orders 500
"""

import argparse
import random
import sys

from flinkpy.common import Duration, Time, WatermarkStrategy
from flinkpy.datastream import ProcessJoinFunction, StreamExecutionEnvironment

MINUTE = 60_000
CARRIERS = ["post", "courier", "truck"]


def orders(count: int = 200, seed: int = 7) -> list[tuple[int, str, int, int]]:
    """(order id, customer, amount, time ms): one order every ~2 minutes, in arrival order."""
    rng = random.Random(seed)
    out = [(i, f"customer{rng.randrange(20)}", rng.randrange(5, 500), i * 2 * MINUTE + rng.randrange(MINUTE)) for i in range(count)]
    return _disorder(out, 3, rng)


def shipments(count: int = 200, seed: int = 7) -> list[tuple[int, int, str, int]]:
    """(shipment id, order id, carrier, time ms): most orders ship within the hour, some in two
    parcels, some later than that."""
    rng = random.Random(seed + 1)
    out = []
    for order_id, _, _, placed in orders(count, seed):
        for _ in range(1 if rng.random() < 0.8 else 2):
            delay = rng.randrange(60 * MINUTE + 1) if rng.random() < 0.85 else rng.randrange(61, 180) * MINUTE
            out.append((len(out), order_id, rng.choice(CARRIERS), placed + delay))
    out.sort(key=lambda s: s[3])
    return _disorder(out, 3, rng)


def _disorder(events: list, field: int, rng: random.Random) -> list:
    """Swap neighbours less than 5 minutes apart: out of order, within the watermark's bound."""
    events = sorted(events, key=lambda e: e[field])
    for i in range(0, len(events) - 1, 2):
        if events[i + 1][field] - events[i][field] < 5 * MINUTE and rng.random() < 0.5:
            events[i], events[i + 1] = events[i + 1], events[i]
    return events


class ShippedWithinTheHour(ProcessJoinFunction):
    def process_element(self, order, shipment, ctx):
        minutes = (ctx.get_right_timestamp() - ctx.get_left_timestamp()) // MINUTE
        yield order[0], order[1], shipment[2], minutes


def build(env, order_events, shipment_events):
    def by_time(field):
        return WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_minutes(5)).with_timestamp_assigner(
            lambda event, _: event[field])

    placed = env.from_collection(order_events).assign_timestamps_and_watermarks(by_time(3))
    shipped = env.from_collection(shipment_events).assign_timestamps_and_watermarks(by_time(3))
    return (
        placed.key_by(lambda o: o[0])
        .interval_join(shipped.key_by(lambda s: s[1]))
        .between(Time.minutes(0), Time.minutes(60))
        .process(ShippedWithinTheHour())
        .uid("orders-shipments")
        .name("shipped within the hour")
    )


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--orders", type=int, default=200)
    args, _ = parser.parse_known_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env, orders(args.orders), shipments(args.orders)).print()
    env.execute("orders_shipments")


if __name__ == "__main__":
    main(sys.argv[1:])
