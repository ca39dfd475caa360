"""Event time: W1 through sliding and tumbling windows, against a rolling reduce on the same
stamped stream (both windows run on the sliced path: one slice per word and second)."""

from __future__ import annotations

from typing import Any

from flinkpy.benchmarks.workloads import add_counts, to_pair, word_key


def job_w1_windowed(env: Any, paths: list[str], windowed: bool | str) -> None:
    """W1 with event time: line i of a file is stamped i x 10 ms; sliding 5 s / 1 s windows
    (``windowed="tumbling"``: tumbling 5 s windows; False: for comparison, the plain rolling
    reduce on the same stamped stream)."""
    from flinkpy.common import Time, WatermarkStrategy
    from flinkpy.connectors.print_sink import DiscardingSink
    from flinkpy.datastream.connectors.file_system import FileSource, StreamFormat
    from flinkpy.datastream.window import SlidingEventTimeWindows, TumblingEventTimeWindows

    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(_line_timestamp)
    pairs = (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .map(_stamp_line)
        .assign_timestamps_and_watermarks(strategy)
        .flat_map(_split_stamped)
        .map(to_pair)
        .key_by(word_key)
    )
    if windowed == "tumbling":
        pairs.window(TumblingEventTimeWindows.of(Time.seconds(5))).reduce(add_counts).sink_to(DiscardingSink())
    elif windowed:
        pairs.window(SlidingEventTimeWindows.of(Time.seconds(5), Time.seconds(1))).reduce(add_counts).sink_to(DiscardingSink())
    else:
        pairs.reduce(add_counts).sink_to(DiscardingSink())


class _Stamp:
    counter = 0


def _stamp_line(line: str) -> tuple[int, str]:
    _Stamp.counter += 1
    return (_Stamp.counter * 10, line)


def _line_timestamp(event: tuple[int, str], _: int) -> int:
    return event[0]


def _split_stamped(event: tuple[int, str]) -> list[str]:
    return event[1].split()


#: the windows part's rows in the report, by kind
WINDOW_ROWS = {"sliding": "sliding 5 s / 1 s", "tumbling": "tumbling 5 s", "rolling": "rolling reduce"}

