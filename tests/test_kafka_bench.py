"""The Kafka benchmark's reader (flinkpy.benchmarks.kafka) against a real noida-db server."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from flinkpy.benchmarks.kafka import PARTITIONS, FinalCounts

pytestmark = pytest.mark.timeout(60)


def test_the_reader_counts_the_whole_committed_output(kafka) -> None:
    """A word's final count may be read before earlier updates of other partitions: the count of
    updates committed is read to the end once the contender stopped, not where the reader was
    when the last final count came (it reported 380000 updates for 400000 words that way)."""
    topic = kafka.new_topic(partitions=PARTITIONS)
    kafka.produce(topic, [b"w 2"], partition=0)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 20})
    for _ in range(12_000):  # more than one consume() returns
        producer.produce(topic, b"w 1", partition=1)
    assert producer.flush(30) == 0
    reader = FinalCounts(kafka.bootstrap, topic, {"w": 2})
    try:
        deadline = time.monotonic() + 30
        while not reader.poll(0.5):
            assert time.monotonic() < deadline, "the final count never came"
        reader.drain(quiet_s=0.5)
        assert reader.records == 12_001
    finally:
        reader.close()
