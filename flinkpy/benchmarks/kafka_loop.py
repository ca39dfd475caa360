"""Contender (a) of the Kafka benchmark: the consume-transform-produce loop a Python user writes
with confluent-kafka, exactly once. One consumer (``read_committed``, no auto-commit) and one
transactional producer; each line is split into words, a dict keeps the count per word and
every update is produced as ``"word count"``; every second the consumer's positions go into the
transaction (``send_offsets_to_transaction``) and it commits. It stops once it has committed
``expected`` input records.

    python -m flinkpy.benchmarks.kafka_loop BOOTSTRAP INPUT OUTPUT GROUP EXPECTED
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer

COMMIT_EVERY_S = 1.0


def main(bootstrap: str, source: str, sink: str, group: str, expected: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-loop", "linger.ms": 5})
    producer.init_transactions()
    consumer.subscribe([source])
    counts: dict[str, int] = {}
    seen = committed = 0
    producer.begin_transaction()
    started = time.monotonic()
    while committed < expected:
        for msg in consumer.consume(1000, 0.1):
            if msg.error():
                continue
            seen += 1
            for word in msg.value().decode().split():
                n = counts.get(word, 0) + 1
                counts[word] = n
                while True:
                    try:
                        producer.produce(sink, value=f"{word} {n}".encode())
                        break
                    except BufferError:
                        producer.poll(0.01)
        producer.poll(0)
        now = time.monotonic()
        if now - started >= COMMIT_EVERY_S or seen >= expected:
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata())
            producer.commit_transaction()
            committed = seen
            producer.begin_transaction()
            started = now
    producer.abort_transaction()
    consumer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
