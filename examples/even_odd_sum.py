"""Even/odd running sums: the book's checkpoint example.

A source of increasing integers 1..N, partitioned into even and odd, a running sum each. The
final sums are known exactly — N/2*(N/2+1) for the even numbers and (N/2)^2 for the odd ones when
N is even — which is what makes this job the consistency oracle of the checkpoint tests.

    python examples/even_odd_sum.py --count 1000
    flinkpy run -p 2 examples/even_odd_sum.py --count 1000000
    flinkpy run -d -p 2 examples/even_odd_sum.py --count 3000000 --rate 100000   # ~15 s: time for drills
"""

import argparse
import sys
import time

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource


class Throttle:
    """Passes numbers on at no more than ``rate`` per second per subtask (sleeping when ahead):
    a job that lasts long enough to rehearse failures on, whatever the machine."""

    def __init__(self, rate):
        self.rate = rate
        self.start = None
        self.seen = 0

    def __call__(self, n):
        if self.start is None:
            self.start = time.monotonic()
        self.seen += 1
        if self.seen % 1000 == 0:
            ahead = self.seen / self.rate - (time.monotonic() - self.start)
            if ahead > 0:
                time.sleep(ahead)
        return n


def build(env, count, rate=None):
    numbers = env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers")
    if rate:
        numbers = numbers.map(Throttle(rate)).name("throttle")
    return (
        numbers.map(lambda n: ("even" if n % 2 == 0 else "odd", n), output_type=Types.TUPLE([Types.STRING(), Types.LONG()]))
        .key_by(lambda pair: pair[0])
        .sum(1)
        .uid("sums")
        .name("running sums")
    )


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1000, help="Sum the integers 1..COUNT.")
    parser.add_argument("--rate", type=float, default=None, help="At most RATE numbers per second per source subtask.")
    args, _ = parser.parse_known_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env, args.count, args.rate).print()
    env.execute("even_odd_sum")


if __name__ == "__main__":
    main(sys.argv[1:])
