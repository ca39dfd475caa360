"""The job files behind :mod:`flinkpy.benchmarks.spark_shapes`, run as a new user runs a job:
``flinkpy run --runner spark --spark-master local[2] -p 2 flinkpy/benchmarks/spark_shape_jobs.py SHAPE INPUT``.

``SHAPE`` is one of :data:`SHAPES`; ``INPUT`` a directory of text files (W1 and the word count
shapes) or the count of ints (W2 and the ints shapes). Each shape is written as a user writes it
first, so that the runner meets what it will meet: lambdas, tuple records, field positions,
``print()``.
"""

from __future__ import annotations

import sys
from typing import Any

#: shape -> what the job is (the benchmark's rows)
SHAPES = {
    "w1": "W1: split, (word, 1), reduce per word",
    "w2": "W2: running sums of even and odd ints, reduce",
    "wc-sum-print": "word count with .sum(1), every 1000th count printed",
    "ints-sum-print": "(parity, n) with .sum(1), every 100000th sum printed",
    "w1-peers": "W1 in the peers' form: every update to a Python SinkFunction, checkpoints every second",
    "w2-peers": "W2 in the peers' form: every update to a Python SinkFunction, checkpoints every second",
}


def build(env: Any, shape: str, arg: str) -> None:
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream.connectors.file_system import FileSource, StreamFormat
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    from flinkpy.benchmarks.workloads import job_w1, job_w2

    if shape == "w1":
        job_w1(env, [arg])
    elif shape == "w2":
        job_w2(env, int(arg))
    elif shape in ("w1-peers", "w2-peers"):  # as flinkpy.benchmarks.peers_form writes them
        from flinkpy.benchmarks.peers_form import CountingSink

        env.enable_checkpointing(1000)
        into_sink = lambda stream: stream.add_sink(CountingSink())  # noqa: E731
        job_w1(env, [arg], into_sink) if shape == "w1-peers" else job_w2(env, int(arg), into_sink)
    elif shape == "wc-sum-print":
        source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), arg).build()
        (env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
         .flat_map(lambda line: [(word, 1) for word in line.split()])
         .key_by(lambda pair: pair[0])
         .sum(1)
         .filter(lambda pair: pair[1] % 1000 == 0)
         .print())
    elif shape == "ints-sum-print":
        (env.from_source(NumberSequenceSource(1, int(arg)), WatermarkStrategy.no_watermarks(), "numbers")
         .map(lambda n: (n % 2, n))
         .key_by(lambda pair: pair[0])
         .sum(1)
         .filter(lambda pair: pair[1] % 100_000 == 0)
         .print())
    else:
        raise SystemExit(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")


if __name__ == "__main__":
    from flinkpy.datastream import StreamExecutionEnvironment

    environment = StreamExecutionEnvironment.get_execution_environment()
    build(environment, sys.argv[1], sys.argv[2])
    environment.execute(f"bench_{sys.argv[1]}")
