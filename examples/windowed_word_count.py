"""The seeds' windowed word count: counts of each word in 5-second windows, every second.

Lines arrive with event timestamps (seconds apart, slightly out of order); every word counts in
the five sliding windows that contain its line's timestamp; a window's result comes out when
the watermark passes the window's end. The result is the same at any parallelism and whatever
order the lines arrive in, within the 2-second bound the watermark strategy allows.

    python examples/windowed_word_count.py
    flinkpy run -p 2 examples/windowed_word_count.py --seconds 60
"""

import argparse
import random
import sys

from flinkpy.common import Duration, Time, Types, WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.window import ProcessWindowFunction, SlidingEventTimeWindows

WORDS = ["to", "be", "or", "not", "that", "is", "the", "question"]


def lines(seconds: int, seed: int = 7) -> list[tuple[int, str]]:
    """(timestamp ms, line) events, up to 1.5 s out of order."""
    rng = random.Random(seed)
    events = [(t * 1000 + rng.randrange(1000), " ".join(rng.choices(WORDS, k=4))) for t in range(seconds)]
    # shuffle locally: each event moves at most one position, never more than 2 s late
    for i in range(0, len(events) - 1, 2):
        if rng.random() < 0.5:
            events[i], events[i + 1] = events[i + 1], events[i]
    return events


class WithWindow(ProcessWindowFunction):
    """Adds the window's end to each (word, count)."""

    def process(self, key, context, elements):
        for word, count in elements:
            yield (context.window().end, word, count)


def build(env, events):
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(2)).with_timestamp_assigner(
        lambda event, _: event[0]
    )
    return (
        env.from_collection(events)
        .assign_timestamps_and_watermarks(strategy)
        .set_parallelism(1)
        .flat_map(lambda event: event[1].split())
        .map(lambda word: (word, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda pair: pair[0])
        .window(SlidingEventTimeWindows.of(Time.seconds(5), Time.seconds(1)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]), window_function=WithWindow())
    )


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=20, help="how many seconds of lines to count")
    args, _ = parser.parse_known_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env, lines(args.seconds)).print()
    env.execute("windowed_word_count")


if __name__ == "__main__":
    main(sys.argv[1:])
