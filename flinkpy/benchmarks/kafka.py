"""Kafka, exactly once (part ``kafka``): topic -> split -> keyed count -> topic, three ways on
the same server and the same input.

The benchmark starts a noida-db Kafka-protocol server of its own (:mod:`.kafka_server`) and,
before any timing, writes ``records`` keyed lines of :data:`WORDS_PER_LINE` words (a vocabulary
of :data:`VOCABULARY` words, seeded) into a topic of 4 partitions. Each contender reads that
topic from the beginning in a consumer group of its own, splits the lines into words, counts
per word and writes every update (``"word count"``) to an output topic of its own, exactly
once, committing every second:

- (a) the consume-transform-produce loop a Python user writes with confluent-kafka
  (:mod:`.kafka_loop`): a transactional producer, ``send_offsets_to_transaction``, a dict;
- (b) Quix Streams with ``processing_guarantee="exactly-once"`` (:mod:`.kafka_quix`), skipped
  with a line when it is not installed (``pip install quixstreams``);
- (c) flinkpy: :mod:`.kafka_job` run whole by ``flinkpy run`` (an embedded cluster), p=2,
  exactly-once checkpoints every second, the EXACTLY_ONCE KafkaSink.

Each runs as its own process, start-up included, and its time ends when a ``read_committed``
reader of its output topic has seen every word's final count; the rate is input records per
second of that time. Start-up is also reported apart, as the time to the first committed output
(start-up, the first records' way through, and the first commit a second in). Contenders run in
turns within a run, and the ratios reported are the medians of the runs' ratios. The committed
output is counted to its end once the contender stopped: exactly once, it holds one update per
word read (duplicates would show as more, losses as fewer).

Every contender runs with its Python modules' bytecode cached (in the run's own directory,
compiled before any timing), as an installed package has it: where the environment turns the
cache off (``PYTHONDONTWRITEBYTECODE``, usual for a source checkout), each of flinkpy's
processes would otherwise compile the engine's modules again, which an installed flinkpy never
does, while the other contenders' libraries come compiled from their wheels.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from flinkpy.benchmarks import bytecode, kafka_quix, kafka_server
from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.benchmarks.workloads import ROOT, SEED

PARTITIONS = 4
WORDS_PER_LINE = 4
VOCABULARY = 1000
#: how long one contender may take before the run gives up on it
DEADLINE_S = 600

CONTENDERS = {"loop": "confluent-kafka loop (a)", "quix": "Quix Streams (b)", "flinkpy": "flinkpy, p=2 (c)"}


def make_lines(n: int) -> list[str]:
    rng = random.Random(SEED)
    words = [f"w{i:04d}" for i in range(VOCABULARY)]
    return [" ".join(rng.choices(words, k=WORDS_PER_LINE)) for _ in range(n)]


def write_input(server: kafka_server.KafkaServer, topic: str, lines: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 20, "acks": "all"})
    errors: list[Any] = []
    for i, line in enumerate(lines):
        while True:
            try:
                producer.produce(topic, key=f"k{i % 64}".encode(), value=line.encode(),
                                 on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(60)
    if left or errors:
        raise RuntimeError(f"writing the input topic {topic}: {left} records unacknowledged, errors {errors[:3]}")


class FinalCounts:
    """A ``read_committed`` reader of an output topic that knows when every word's last
    committed count is its final one (it parses bytes: a cheap reader disturbs the contenders
    less, and one that lags would stretch their times)."""

    def __init__(self, bootstrap: str, topic: str, expected: dict[str, int]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        self.consumer.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])
        self.expected = {w.encode(): n for w, n in expected.items()}
        self.latest: dict[bytes, int] = {}
        self.records = 0
        self.missing = len(expected)

    def poll(self, timeout: float) -> bool:
        """Read what is committed; True once every word has its final count."""
        self.read(timeout)
        return self.missing == 0

    def read(self, timeout: float) -> int:
        """Read what is committed (waiting up to ``timeout``); how many records that was."""
        msgs = self.consumer.consume(10_000, timeout)
        latest, expected = self.latest, self.expected
        for msg in msgs:
            if msg.error():
                continue
            self.records += 1
            word, n = msg.value().split()
            count = int(n)
            if count > latest.get(word, 0):
                if count == expected.get(word):
                    self.missing -= 1
                latest[word] = count
        return len(msgs)

    def drain(self, quiet_s: float = 1.0, limit_s: float = 60.0) -> None:
        """Read on until nothing more arrives for ``quiet_s``: every committed update counted."""
        deadline = time.monotonic() + limit_s
        while self.read(quiet_s) and time.monotonic() < deadline:
            pass

    def close(self) -> None:
        self.consumer.close()


def timed(command: list[str], bootstrap: str, topic: str, expected: dict[str, int], log: Callable[[str], None],
          env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """Start ``command`` and time it until ``topic`` holds the final counts; then stop it (a
    contender that ended by itself is waited for). Seconds to the first committed output and to
    the final counts, and the committed output records (all of them, read once it stopped)."""
    reader = FinalCounts(bootstrap, topic, expected)
    started = time.perf_counter()
    first = None
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=env)
    try:
        while not reader.poll(0.05):
            if first is None and reader.records:
                first = time.perf_counter() - started
            if time.perf_counter() - started > DEADLINE_S:
                raise RuntimeError(f"{command[:4]}: no final counts after {DEADLINE_S} s")
            if proc.poll() is not None and proc.returncode != 0:
                raise RuntimeError(f"{' '.join(command[:4])} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        secs = time.perf_counter() - started
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(30)
        reader.drain()  # what is left, and what a zombie might still have committed
        return (first if first is not None else secs), secs, reader.records
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.close()


def contender_env(tmp: str) -> dict[str, str]:
    """The contenders' environment: the bytecode cache on, in ``tmp``, with flinkpy compiled
    into it before any timing (see the module docstring)."""
    return bytecode.environment(Path(tmp) / "pycache")


def commands(server: kafka_server.KafkaServer, source: str, sink: str, tmp: str, n: int) -> dict[str, list[str]]:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    py = sys.executable
    flinkpy = str(Path(py).parent / "flinkpy")
    return {
        "loop": [py, "-m", "flinkpy.benchmarks.kafka_loop", server.bootstrap, source, sink, group, str(n)],
        "quix": [py, "-m", "flinkpy.benchmarks.kafka_quix", server.bootstrap, source, sink, group, str(Path(tmp) / group)],
        "flinkpy": [flinkpy, "run", str(ROOT / "flinkpy" / "benchmarks" / "kafka_job.py"), server.bootstrap, source, sink, group],
    }


def quix_available() -> bool:
    try:
        import quixstreams  # noqa: F401
    except ImportError:
        return False
    return True


def measure(runs: int, log: Callable[[str], None], *, quick: bool = False) -> dict[str, Any]:
    missing = kafka_server.available()
    if missing:
        log(f"kafka: skipped ({missing})")
        return {}
    n = 20_000 if quick else 100_000
    lines = make_lines(n)
    expected = dict(Counter(w for line in lines for w in line.split()))
    words = sum(expected.values())
    contenders = list(CONTENDERS)
    if not quix_available():
        log(f"kafka: Quix Streams skipped (not installed: {kafka_quix.INSTALL})")
        contenders.remove("quix")
    out: dict[str, Any] = {"records": n, "words": words, "partitions": PARTITIONS}
    secs: dict[str, list[float]] = {c: [] for c in contenders}
    written: dict[str, list[int]] = {c: [] for c in contenders}
    firsts: dict[str, list[float]] = {c: [] for c in contenders}
    with tempfile.TemporaryDirectory() as tmp, kafka_server.KafkaServer(Path(tmp) / "noida") as server:
        env = contender_env(tmp)
        source = server.create_topic(f"bench-lines-{uuid.uuid4().hex[:8]}", PARTITIONS)
        log(f"kafka: writing {n} lines ({words} words, seed {SEED}) to {source} on noida-db at {server.bootstrap} ...")
        write_input(server, source, lines)
        for i in range(runs):
            for name in contenders:
                sink = server.create_topic(f"bench-counts-{name}-{uuid.uuid4().hex[:8]}", PARTITIONS)
                log(f"kafka: {CONTENDERS[name]}, run {i + 1} ...")
                first, s, records = timed(commands(server, source, sink, tmp, n)[name], server.bootstrap, sink, expected, log, env)
                firsts[name].append(first)
                secs[name].append(s)
                written[name].append(records)
    for name in contenders:
        out[f"{name}_rate"] = n / statistics.median(secs[name])
        out[f"{name}_seconds"] = [round(s, 2) for s in secs[name]]
        out[f"{name}_first"] = statistics.median(firsts[name])
        out[f"{name}_firsts"] = [round(s, 2) for s in firsts[name]]
        # every run's count: exactly once, each equals the words read
        out[f"{name}_outputs"] = written[name]
        out[f"{name}_output"] = max(written[name], key=lambda w: abs(w - words))
        if name != "flinkpy":
            ratios = [a / f for a, f in zip(secs[name], secs["flinkpy"])]
            out[f"vs_{name}"] = statistics.median(ratios)
            out[f"vs_{name}_ratios"] = [round(r, 3) for r in ratios]
    return out


def report(result: dict[str, Any]) -> list[str]:
    if not result:
        return []
    r = result
    lines = [f"kafka ({r['records']} lines, {r['words']} words, {r['partitions']} partitions, exactly-once, to the final counts committed):"]
    for name, label in CONTENDERS.items():
        if f"{name}_rate" in r:
            lines.append(f"  {label}: {r[f'{name}_rate'] / 1e3:.1f} k records/s (runs {', '.join(map(str, r[f'{name}_seconds']))} s; "
                         f"first output after {', '.join(map(str, r.get(f'{name}_firsts', [])))} s; "
                         f"{r[f'{name}_output']} updates committed for {r['words']} words)")
    for name in ("loop", "quix"):
        if f"vs_{name}" in r:
            lines.append(f"  flinkpy / {CONTENDERS[name]}: {r[f'vs_{name}']:.2f} (runs {', '.join(f'{x:.2f}' for x in r[f'vs_{name}_ratios'])})")
    return lines


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (table ``kafka``): a row per contender."""
    if not result:
        return []
    out: list[Figure] = []
    for name, label in CONTENDERS.items():
        row = {"rate": result.get(f"{name}_rate"), "output": result.get(f"{name}_output"), "words": result["words"],
               "vs": result.get(f"vs_{name}"), "vs_ratios": result.get(f"vs_{name}_ratios"),
               "first": result.get(f"{name}_first"), "firsts": result.get(f"{name}_firsts")}
        out += cells("kafka", label, row, [
            ("rate", "rate", Unit.RECORDS_PER_S), ("flinkpy / this", "vs", Unit.RATIO),
            ("first output", "first", Unit.S),
            ("updates committed", "output", Unit.COUNT), ("words read", "words", Unit.COUNT),
        ], spreads={"vs": "vs_ratios", "first": "firsts"})
    return out
