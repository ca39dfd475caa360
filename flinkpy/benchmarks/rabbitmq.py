"""RabbitMQ: RMQSource against a pika consumer acknowledging in batches, and RMQSink against a
pika publisher waiting for each publisher confirm.

``--only rabbitmq --rabbitmq-url amqp://guest:guest@127.0.0.1:5672/%2F`` (a server the caller
runs; the benchmark starts none). Each run fills a fresh durable queue with ``n`` persistent
messages and an end marker, then reads it twice: a plain pika consumer (prefetch 1000,
acknowledging every 1000 deliveries at once, the leanest correct consumer in one Python
process), and a job ``RMQSource -> DiscardingSink`` at parallelism 1 with checkpoints every
1 s, acknowledging on checkpoints, whose schema ends the stream at the marker; its time is the
job's net runtime (task start-up included). The ratio reported is the median of the runs'
ratios (a change in the machine's load moves both sides of a run alike).

Writing (table ``rabbitmq_sink``): ``n`` persistent messages into a fresh durable queue, by a pika
publisher in confirm mode (``confirm_delivery()``, then ``basic_publish`` per message, each
returning once the server confirmed it: pika's own way of publishing with confirms), and by a
job ``from_collection -> RMQSink`` at parallelism 1 with checkpoints every 1 s (its time is the
job's net runtime, task start-up included); both are checked by the queue's message count.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any, Callable

from flinkpy.benchmarks.report import Figure, Unit, cells
from flinkpy.common.serialization import SimpleStringSchema

END = "END"
PREFETCH = 1000
BATCH_ACK = 1000

RunJob = Callable[..., float]


class UntilEnd(SimpleStringSchema):
    """Strings; the marker message ends the stream."""

    def is_end_of_stream(self, next_element: Any) -> bool:
        return next_element == END


def _connection(url: str) -> Any:
    import pika

    return pika.BlockingConnection(pika.URLParameters(url))


def fill(url: str, n: int) -> str:
    """A fresh durable queue holding ``n`` persistent messages and the end marker."""
    import pika

    queue = f"bench-{uuid.uuid4().hex[:10]}"
    props = pika.BasicProperties(delivery_mode=2)
    with _connection(url) as conn:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        # no confirm per message (each waits for the server's disk): count them in instead
        for i in range(n):
            ch.basic_publish("", queue, str(i).encode(), props)
        ch.basic_publish("", queue, END.encode(), props)
        deadline = time.monotonic() + 120
        while ch.queue_declare(queue, passive=True).method.message_count < n + 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"queue {queue} did not reach {n + 1} messages in 120 s")
            conn.sleep(0.05)
    return queue


def drop(url: str, queue: str) -> None:
    with _connection(url) as conn:
        conn.channel().queue_delete(queue)


def consumer_seconds(url: str, queue: str, n: int) -> float:
    """Seconds a pika consumer takes for the ``n`` messages, acknowledging in batches."""
    with _connection(url) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=PREFETCH)
        started = time.perf_counter()
        seen = 0
        for method, _props, body in ch.consume(queue, auto_ack=False):
            if body.decode() == END:
                ch.basic_ack(method.delivery_tag, multiple=True)
                break
            seen += 1
            if seen % BATCH_ACK == 0:
                ch.basic_ack(method.delivery_tag, multiple=True)
        elapsed = time.perf_counter() - started
        ch.cancel()
    assert seen == n, f"the consumer read {seen} of {n} messages"
    return elapsed


def job(env: Any, url: str, queue: str) -> None:
    from flinkpy.connectors.print_sink import DiscardingSink
    from flinkpy.connectors.rabbitmq import RMQSource
    from flinkpy.connectors.rabbitmq_connection import RMQConnectionConfig

    config = RMQConnectionConfig.Builder().set_uri(url).set_prefetch_count(10 * PREFETCH).build()
    env.add_source(RMQSource(config, queue, False, UntilEnd()), "queue").sink_to(DiscardingSink())


def publisher_seconds(url: str, queue: str, n: int) -> float:
    """Seconds a pika publisher with publisher confirms takes for ``n`` persistent messages."""
    import pika

    props = pika.BasicProperties(delivery_mode=2)
    with _connection(url) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        started = time.perf_counter()
        for i in range(n):
            ch.basic_publish("", queue, str(i).encode(), props, mandatory=True)
        return time.perf_counter() - started


def sink_job(env: Any, url: str, queue: str, n: int) -> None:
    from flinkpy.common.serialization import SimpleStringSchema
    from flinkpy.connectors.rabbitmq import RMQSink
    from flinkpy.connectors.rabbitmq_connection import RMQConnectionConfig

    config = RMQConnectionConfig.Builder().set_uri(url).build()
    env.from_collection([str(i) for i in range(n)]).sink_to(RMQSink(config, queue, SimpleStringSchema()))


def _published(url: str, n: int, publish: Callable[[str], Any]) -> float:
    """Publish into a fresh queue with ``publish(queue)`` (its seconds), check the count, drop it."""
    queue = f"bench-{uuid.uuid4().hex[:10]}"
    with _connection(url) as conn:
        conn.channel().queue_declare(queue, durable=True)
    try:
        seconds = publish(queue)
        with _connection(url) as conn:
            count = conn.channel().queue_declare(queue, passive=True).method.message_count
        assert count == n, f"queue {queue} holds {count} of {n} messages"
        return seconds
    finally:
        drop(url, queue)


def measure_sink(url: str, address: str, token: str, runs: int, run_job: RunJob, log: Callable[[str], None], n: int) -> dict[str, Any]:
    publishers: list[float] = []
    sinks: list[float] = []
    for i in range(runs):
        log(f"rabbitmq: {n} messages by a pika publisher with confirms, then by RMQSink at p=1, run {i + 1} ...")
        publishers.append(_published(url, n, lambda q: publisher_seconds(url, q, n)))
        sinks.append(_published(url, n, lambda q: run_job(address, token, lambda env: sink_job(env, url, q, n), 1,
                                                           "bench-rabbitmq-sink", checkpoint_ms=1000)))
    ratios = [p / s for p, s in zip(publishers, sinks)]
    return {"messages": n, "publisher_rate": n / statistics.median(publishers), "sink_rate": n / statistics.median(sinks),
            "ratio": statistics.median(ratios), "ratios": [round(r, 3) for r in ratios]}


def measure(url: str, address: str, token: str, runs: int, run_job: RunJob, log: Callable[[str], None], *, quick: bool = False) -> dict[str, Any]:
    n = 20_000 if quick else 100_000
    loops: list[float] = []
    jobs: list[float] = []
    for i in range(runs):
        log(f"rabbitmq: {n} messages, a pika consumer acknowledging in batches, then RMQSource at p=1, run {i + 1} ...")
        queue = fill(url, n)
        try:
            loops.append(consumer_seconds(url, queue, n))
        finally:
            drop(url, queue)
        queue = fill(url, n)
        try:
            jobs.append(run_job(address, token, lambda env, q=queue: job(env, url, q), 1, "bench-rabbitmq", checkpoint_ms=1000))
        finally:
            drop(url, queue)
    ratios = [lo / t for lo, t in zip(loops, jobs)]
    return {"messages": n, "prefetch": PREFETCH, "consumer_rate": n / statistics.median(loops),
            "source_rate": n / statistics.median(jobs), "ratio": statistics.median(ratios),
            "ratios": [round(r, 3) for r in ratios],
            "sink": measure_sink(url, address, token, runs, run_job, log, 5_000 if quick else 20_000)}


def report(result: dict[str, Any]) -> list[str]:
    if not result:
        return []
    r = result
    return [
        f"rabbitmq ({r['messages']} persistent messages): pika consumer, acks every {BATCH_ACK}, "
        f"{r['consumer_rate'] / 1e3:.1f} k/s; RMQSource p1, acks on checkpoints every 1 s, "
        f"{r['source_rate'] / 1e3:.1f} k/s ({r['ratio']:.2f} of the consumer; runs {', '.join(f'{x:.2f}' for x in r['ratios'])})"
    ] + ([
        f"rabbitmq sink ({w['messages']} persistent messages): pika publisher, a confirm per message, "
        f"{w['publisher_rate'] / 1e3:.1f} k/s; RMQSink p1, confirms awaited at checkpoints every 1 s, "
        f"{w['sink_rate'] / 1e3:.1f} k/s ({w['ratio']:.2f} of the publisher; runs {', '.join(f'{x:.2f}' for x in w['ratios'])})"
    ] if (w := r.get("sink")) else [])


def figures(result: dict[str, Any]) -> list[Figure]:
    """:func:`measure`'s figures as records (table ``rabbitmq``)."""
    if not result:
        return []
    out = cells("rabbitmq", "pika consumer, batched acks", result, [("rate", "consumer_rate", Unit.RECORDS_PER_S)])
    out += cells("rabbitmq", "RMQSource, p=1, checkpoints every 1 s", result, [
        ("rate", "source_rate", Unit.RECORDS_PER_S), ("of the consumer", "ratio", Unit.RATIO),
    ], spreads={"ratio": "ratios"})
    sink = result.get("sink")
    if sink:
        out += cells("rabbitmq_sink", "pika publisher, a confirm per message", sink, [("rate", "publisher_rate", Unit.RECORDS_PER_S)])
        out += cells("rabbitmq_sink", "RMQSink, p=1, checkpoints every 1 s", sink, [
            ("rate", "sink_rate", Unit.RECORDS_PER_S), ("of the publisher", "ratio", Unit.RATIO),
        ], spreads={"ratio": "ratios"})
    return out
