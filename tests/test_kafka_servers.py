"""The Kafka-protocol servers the Kafka connector is tested against behave as the tests assume:
records written are read back, and (noida-db) an aborted transaction stays invisible to a
``read_committed`` reader while a committed one appears."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

pytestmark = pytest.mark.timeout(60)


def test_records_round_trip(kafka_any):
    topic = kafka_any.new_topic(partitions=2)
    kafka_any.produce(topic, [b"a", b"b"], partition=0)
    kafka_any.produce(topic, [b"c"], partition=1)
    got = kafka_any.read(topic)
    assert sorted(m.value() for m in got) == [b"a", b"b", b"c"]


def test_aborted_transaction_invisible_to_read_committed(kafka):
    topic = kafka.new_topic()
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"{topic}-tx"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"aborted")
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"committed")
    p.commit_transaction(30)
    assert [m.value() for m in kafka.read(topic)] == [b"committed"]
    assert sorted(m.value() for m in kafka.read(topic, committed_only=False)) == [b"aborted", b"committed"]
