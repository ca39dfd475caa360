"""Two sources, partitioned by parity, a task keeping the highest number seen, a stateless sink.

The book's barrier-alignment example: the keyed task reads from two sources at once (a union),
so with exactly-once checkpoints it aligns the barriers of both inputs before it snapshots its
state (enable checkpointing to see it: ``flinkpy run -D execution.checkpointing.interval=1s``).
It shows keyed state through PyFlink's KeyedProcessFunction and ValueState: it emits a record
only when the maximum of its parity grows.

    python examples/max_two_sources.py
"""

import sys

from flinkpy.common import Types, WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
from flinkpy.datastream.state import ValueStateDescriptor


class KeepMax(KeyedProcessFunction):
    def open(self, runtime_context):
        self.highest = runtime_context.get_state(ValueStateDescriptor("highest", Types.LONG()))

    def process_element(self, value, ctx):
        current = self.highest.value()
        if current is None or value > current:
            self.highest.update(value)
            yield ("even" if ctx.get_current_key() == 0 else "odd", value)


def build(env, first_end=50, second_end=99):
    first = env.from_source(NumberSequenceSource(1, first_end), WatermarkStrategy.no_watermarks(), "first")
    second = env.from_source(NumberSequenceSource(first_end + 1, second_end), WatermarkStrategy.no_watermarks(), "second")
    return first.union(second).key_by(lambda n: n % 2).process(KeepMax()).uid("max-per-parity")


if __name__ == "__main__":
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    build(env).print()
    env.execute("max_two_sources")
