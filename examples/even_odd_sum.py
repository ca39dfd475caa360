"""Even/odd running sums: the book's checkpoint example.

A source of increasing integers 1..N, partitioned into even and odd, a running sum each. The
final sums are known exactly — N/2*(N/2+1) for the even numbers and (N/2)^2 for the odd ones when
N is even — which is what makes this job the consistency oracle of the checkpoint tests.

    python examples/even_odd_sum.py --count 1000
    flinkpy run -p 2 examples/even_odd_sum.py --count 1000000
    flinkpy run -d -p 2 examples/even_odd_sum.py --count 3000000 --rate 100000   # ~15 s: time for drills

It prints a key's running sum after every Nth number of that key (--print-every; by default
about 10,000 lines in all: every sum below --count 20000) and always the two final sums, so a
long run does not fill the TaskManagers' .out files with millions of lines.
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


def final_sums(count):
    """The two sums of 1..count: {"even": ..., "odd": ...}."""
    evens, odds = count // 2, (count + 1) // 2
    return {"even": evens * (evens + 1), "odd": odds * odds}


class EveryNth:
    """Keeps every Nth running sum of a key (and its final sum): the sums of a key all reach
    the same subtask, so counting them here is counting that key's numbers. The count is not
    part of any checkpoint: after a restore the printed sums start over at another phase, and
    only which lines are printed changes, never a sum.

    >>> keep = EveryNth(3, 10)
    >>> [s for s in (2, 6, 12, 20, 30) if keep(("even", s))], [s for s in (1, 4, 9, 16, 25) if keep(("odd", s))]
    ([12, 30], [9, 25])
    """

    def __init__(self, every, count):
        self.every = every
        self.finals = final_sums(count)
        self.seen = {}

    def __call__(self, pair):
        key, total = pair
        self.seen[key] = self.seen.get(key, 0) + 1
        return self.seen[key] % self.every == 0 or total == self.finals.get(key)


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1000, help="Sum the integers 1..COUNT.")
    parser.add_argument("--rate", type=float, default=None, help="At most RATE numbers per second per source subtask.")
    parser.add_argument("--print-every", type=int, default=None, metavar="N",
                        help="Print a key's running sum after every Nth number of it (and the final sums); "
                             "default: COUNT/10000, at least 1 (about 10,000 lines).")
    args, _ = parser.parse_known_args(argv)
    every = args.print_every or max(1, args.count // 10_000)
    env = StreamExecutionEnvironment.get_execution_environment()
    sums = build(env, args.count, args.rate)
    if every > 1:
        sums = sums.filter(EveryNth(every, args.count)).name("every nth sum")
    sums.print()
    env.execute("even_odd_sum")


if __name__ == "__main__":
    main(sys.argv[1:])
