"""The two-input workload: W1's words as two streams, joined per word by a keyed co-process.

Each half of W1's lines is a stream of its own (two files each); the words of both are keyed by
the word and meet in a KeyedCoProcessFunction that keeps, per word, how often each side saw it
and emits both counts after every word — a running keyed join of two streams, the same amount
of input as W1 and one keyed state update per word, as W1's reduce has. Its rate is reported
against W1's measured in the same run (this machine is noisy; absolute figures are not stable)
and against a plain loop that calls the same functions with a dict for state. A third job does
the same per-word update with a one-input KeyedProcessFunction over all the lines: the join's
distance to W1 is mostly that of a process function (a call with a context, a state object) to
W1's reduce, and the distance to the third job is what two inputs cost.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from flinkpy.benchmarks.workloads import split, to_pair, word_key
from flinkpy.common.functions import KeyedCoProcessFunction, KeyedProcessFunction

Counts = tuple[int, int]


def count_left(old: Counts | None, pair: tuple[str, int]) -> Counts:
    left, right = old or (0, 0)
    return (left + pair[1], right)


def count_right(old: Counts | None, pair: tuple[str, int]) -> Counts:
    left, right = old or (0, 0)
    return (left, right + pair[1])


class CountBoth(KeyedCoProcessFunction):
    """Per word, how often each input saw it; both counts out after every word."""

    def open(self, runtime_context: Any) -> None:
        from flinkpy.datastream.state import ValueStateDescriptor

        self.counts = runtime_context.get_state(ValueStateDescriptor("counts"))

    def process_element1(self, value: tuple[str, int], ctx: Any) -> list:
        new = count_left(self.counts.value(), value)
        self.counts.update(new)
        return [(value[0], new)]

    def process_element2(self, value: tuple[str, int], ctx: Any) -> list:
        new = count_right(self.counts.value(), value)
        self.counts.update(new)
        return [(value[0], new)]


class CountOne(KeyedProcessFunction):
    """The same per-word update on one input: what the join costs beyond a keyed process
    function is what two inputs cost."""

    def open(self, runtime_context: Any) -> None:
        from flinkpy.datastream.state import ValueStateDescriptor

        self.counts = runtime_context.get_state(ValueStateDescriptor("counts"))

    def process_element(self, value: tuple[str, int], ctx: Any) -> list:
        new = count_left(self.counts.value(), value)
        self.counts.update(new)
        return [(value[0], new)]


def loop_join(lines: list[str]) -> tuple[int, float]:
    """The same functions with no engine: the first half's words, then the second's."""
    halves = [lines[0::4] + lines[2::4], lines[1::4] + lines[3::4]]
    started = time.perf_counter()
    state: dict[str, Counts] = {}
    out: list = []
    n = 0
    for lines, count in zip(halves, (count_left, count_right)):
        for line in lines:
            for w in split(line):
                rec = to_pair(w)
                k = word_key(rec)
                new = state[k] = count(state.get(k), rec)
                out.append((k, new))
                n += 1
        out.clear()
    return n, time.perf_counter() - started


def write_halves(lines: list[str], directory: Path) -> tuple[list[str], list[str]]:
    """Each half of the lines in two files, so that each source subtask at p=2 reads one (a
    subtask with no file would finish at once, and a job with a finished task takes no more
    checkpoints)."""
    halves: tuple[list[str], list[str]] = ([], [])
    for part in range(4):
        path = directory / f"join-{part}.txt"
        path.write_text("\n".join(lines[part::4]) + "\n")
        halves[part % 2].append(str(path))
    return halves


def job_join(env: Any, left_paths: list[str], right_paths: list[str]) -> None:
    """Two file sources, one per half, connected and keyed by word; output discarded. With no
    ``right_paths``: one source over ``left_paths`` into a KeyedProcessFunction instead."""
    from flinkpy.common import WatermarkStrategy
    from flinkpy.connectors.print_sink import DiscardingSink
    from flinkpy.datastream.connectors.file_system import FileSource, StreamFormat

    def words(paths: list[str], name: str) -> Any:
        source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), *paths).build()
        return env.from_source(source, WatermarkStrategy.no_watermarks(), name).flat_map(split).map(to_pair)

    if not right_paths:  # the reference: one input, a KeyedProcessFunction
        words(left_paths, "lines").key_by(word_key).process(CountOne()).sink_to(DiscardingSink())
        return
    left, right = words(left_paths, "left lines"), words(right_paths, "right lines")
    left.connect(right).key_by(word_key, word_key).process(CountBoth()).sink_to(DiscardingSink())

