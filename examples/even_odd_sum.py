"""Even/odd running sums: the book's checkpoint example.

A source of increasing integers 1..N, partitioned into even and odd, a running sum each. The
final sums are known exactly — N/2*(N/2+1) for the even numbers and (N/2)^2 for the odd ones when
N is even — which is what makes this job the consistency oracle of the checkpoint tests.

    python examples/even_odd_sum.py --count 1000
    flinkpy run -p 2 examples/even_odd_sum.py --count 1000000
"""

import argparse
import sys

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource


def build(env, count):
    numbers = env.from_source(NumberSequenceSource(1, count), WatermarkStrategy.no_watermarks(), "numbers")
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
    args, _ = parser.parse_known_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env, args.count).print()
    env.execute("even_odd_sum")


if __name__ == "__main__":
    main(sys.argv[1:])
