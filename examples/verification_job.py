"""The verification job: every record is known in advance, so its output can be checked for loss and duplicates.

SequenceSource emits (key, seq) with seq 1..PER_KEY for each of KEYS keys; a keyed running
count keeps, per key, how many records it saw and the last seq; VerifyingSink commits
(key, seq, count) with the checkpoints. With exactly-once every seq arrives once and the count
equals the seq; `flinkpy verify` checks exactly that (see examples/chaos_drill.sh).

    flinkpy run -p 2 examples/verification_job.py --keys 8 --per-key 1000 --out /tmp/verify-out
    flinkpy verify /tmp/verify-out --keys 8 --per-key 1000
"""

import argparse
import sys

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.connectors.verification import SequenceSource, VerifyingSink
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.state import ValueStateDescriptor


class RunningCount(KeyedProcessFunction):
    """Per key: the records seen so far and the last seq; emits (key, seq, count)."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.last_seq = runtime_context.get_state(ValueStateDescriptor("last-seq", Types.LONG()))

    def process_element(self, value, ctx):
        key, seq = value
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        self.last_seq.update(seq)
        yield (key, seq, count)


def build(env, keys, per_key, rate, out):
    records = env.from_source(SequenceSource(keys, per_key, rate), WatermarkStrategy.no_watermarks(), "sequences").uid("sequences")
    counted = records.key_by(lambda r: r[0]).process(RunningCount()).uid("running-count").name("running count")
    return counted.sink_to(VerifyingSink(out)).name("verifying sink").uid("verifying-sink")


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=8, help="Number of keys.")
    parser.add_argument("--per-key", type=int, default=1000, help="Sequence numbers per key (1..N).")
    parser.add_argument("--rate", type=float, default=None, help="Records per second of the whole source (default: unlimited).")
    parser.add_argument("--out", required=True, help="Directory of the sink's committed files.")
    args, _ = parser.parse_known_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env, args.keys, args.per_key, args.rate, args.out)
    env.execute("verification_job")


if __name__ == "__main__":
    main(sys.argv[1:])
