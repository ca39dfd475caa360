"""Word count, the seed's pipeline: lines -> split -> (word, 1) -> key by word -> sum -> print.

Run it with plain Python or through the CLI (both start an embedded local cluster when none runs):

    python examples/word_count.py
    flinkpy run examples/word_count.py
    flinkpy run examples/word_count.py --input some.txt --output out/

With --input it reads text files (PyFlink's FileSource); with --output it writes part files with
FileSink, and in BATCH mode (the default for files, as in PyFlink's own example) it emits each
word's final count. Without --input it counts a built-in text and prints running counts.
The program runs unchanged on PyFlink: replace ``flinkpy`` with ``pyflink`` in the imports.
"""

import argparse
import sys

from flinkpy.common import Encoder, Types, WatermarkStrategy
from flinkpy.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from flinkpy.datastream.connectors.file_system import FileSink, FileSource, OutputFileConfig, RollingPolicy, StreamFormat

TEXT = [
    "To be, or not to be,--that is the question:--",
    "Whether 'tis nobler in the mind to suffer",
    "The slings and arrows of outrageous fortune",
    "Or to take arms against a sea of troubles,",
    "And by opposing end them?--To die,--to sleep,--",
    "No more; and by a sleep to say we end",
    "The heartache, and the thousand natural shocks",
    "That flesh is heir to,--'tis a consummation",
    "Devoutly to be wish'd. To die,--to sleep;--",
]


def split(line):
    yield from line.split()


def word_count(input_path, output_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    if input_path is not None:
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
        source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), input_path).process_static_file_set().build()
        ds = env.from_source(source, WatermarkStrategy.for_monotonous_timestamps(), "file_source")
    else:
        ds = env.from_collection(TEXT)

    counts = (
        ds.flat_map(split)
        .map(lambda word: (word, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    if output_path is not None:
        counts.sink_to(
            sink=FileSink.for_row_format(base_path=output_path, encoder=Encoder.simple_string_encoder())
            .with_output_file_config(OutputFileConfig.builder().with_part_prefix("prefix").with_part_suffix(".ext").build())
            .with_rolling_policy(RollingPolicy.default_rolling_policy())
            .build()
        )
    else:
        counts.print()
    env.execute("word_count")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", dest="input", required=False, help="Input file(s) to process.")
    parser.add_argument("--output", dest="output", required=False, help="Output directory.")
    known, _ = parser.parse_known_args(sys.argv[1:])
    word_count(known.input, known.output)
