"""The lifecycle runbook's job: a keyed running tally whose state gains a field with each version.

A SequenceSource emits ``(key, seq)`` for seq 1..PER_KEY of each key; the keyed ``tally`` keeps a
dict per key in one value state, and a VerifyingSink commits ``[key, seq, count, total, last,
gaps, wall-clock ms]`` with the checkpoints (a field the version does not have is null). With
exactly-once, for every record: count == seq, total == seq*(seq+1)/2, last == seq, gaps == 0,
whatever was stopped, restored, rescaled or migrated on the way (``flinkpy verify`` checks the
first, the runbook the others).

The fields, by version:

- 1: ``count``
- 2: ``+ total``, the sum of the seqs seen;
- 3: ``+ last``, the last seq seen;
- 4: ``+ gaps``, how many records came other than right after the last one.

A field without a default (``total``, ``last``) must be in the restored tally: a version that
restores a tally without it raises (KeyError) unless the state was migrated first (see
``migrate.py``); ``gaps`` has a default, 0, so version 4 reads version 3's state as it is.
``--fail`` makes any version raise on its first record: a broken release to roll back from.

    flinkpy run -d -p 2 tests/runbooks/tally_job.py --version 1 --out OUT --rate 400
"""

import argparse
import sys
import time

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.connectors.verification import SequenceSource, VerifyingSink
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.state import ValueStateDescriptor

FIELDS = ("count", "total", "last", "gaps")
#: a field with a default: a tally restored without it gets the default, no migration needed
DEFAULTS = {"gaps": 0}


class Tally(KeyedProcessFunction):
    def __init__(self, version: int, fail: bool = False) -> None:
        self.fields = FIELDS[:version]
        self.fail = fail

    def open(self, runtime_context):
        self.tally = runtime_context.get_state(ValueStateDescriptor("tally", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx):
        key, seq = value
        if self.fail:
            raise ValueError(f"this version of the tally cannot take record {seq} of key {key}")
        old = self.tally.value()
        if old is None:
            tally = {f: 0 for f in self.fields}
        else:  # a field the restored tally lacks: its default, or a KeyError (migrate the state first)
            tally = {f: old[f] if f not in DEFAULTS else old.get(f, DEFAULTS[f]) for f in self.fields}
        if "gaps" in tally and old is not None and seq != tally["last"] + 1:
            tally["gaps"] += 1
        tally["count"] += 1
        if "total" in tally:
            tally["total"] += seq
        if "last" in tally:
            tally["last"] = seq
        self.tally.update(tally)
        yield [key, seq, *(tally.get(f) for f in FIELDS), int(time.time() * 1000)]


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", type=int, choices=range(1, len(FIELDS) + 1), required=True)
    parser.add_argument("--keys", type=int, default=6)
    parser.add_argument("--per-key", type=int, default=4000)
    parser.add_argument("--rate", type=float, default=None, help="records per second of the whole source (default: unlimited)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--uid", default="tally", help="the uid of the tally operator")
    parser.add_argument("--fail", action="store_true", help="raise on the first record (a broken release)")
    parser.add_argument("--checkpoint-interval", type=int, default=200, help="ms")
    args = parser.parse_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(args.checkpoint_interval)
    records = env.from_source(SequenceSource(args.keys, args.per_key, args.rate), WatermarkStrategy.no_watermarks(), "sequences").uid("sequences")
    tallied = records.key_by(lambda r: r[0]).process(Tally(args.version, args.fail)).uid(args.uid).name("tally")
    tallied.sink_to(VerifyingSink(args.out)).name("verifying sink").uid("verifying-sink")
    env.execute(f"tally v{args.version}")


if __name__ == "__main__":
    main(sys.argv[1:])
