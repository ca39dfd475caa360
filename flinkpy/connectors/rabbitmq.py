"""RabbitMQ: a classic queue acknowledged on checkpoints, a replayable stream queue, a confirmed sink.

**RMQSource** (PyFlink's ``RMQSource(connection_config, queue_name, use_correlation_id,
deserialization_schema)``) consumes a classic (or quorum) queue with manual acknowledgements.
A message is acknowledged only when the checkpoint that covers it completes: the reader hears
``notify_checkpoint_complete`` and acknowledges, in one frame, every delivery up to the last one
that checkpoint's snapshot covered. A failure closes the connection and the server puts every
unacknowledged message back in the queue, so nothing is lost: **at-least-once**. With
``use_correlation_id=True`` the messages' correlation ids of every checkpoint not yet
acknowledged are in the snapshot, and a restored reader drops a redelivered message whose id is
among them: **exactly-once** (at parallelism 1, as in Flink: with several consumers a redelivery
may go to another one; the source refuses more). Publishers must set a unique correlation id on
every message.

**RMQStreamSource** reads a stream queue (``x-queue-type: stream``), an append-only log that
RabbitMQ keeps after it is read. Each subtask reads the whole stream and emits the offsets
``offset % parallelism == subtask``; the next offset is in the checkpoint and a restore resumes
there (``x-stream-offset``): **exactly-once** like a file or a Kafka topic, at any parallelism,
rescalable (:class:`~flinkpy.connectors.rabbitmq_ledger.StreamShare`).

Both read with a prefetch (``RMQConnectionConfig.Builder().set_prefetch_count(n)``; RMQSource
without it has no limit, RMQStreamSource defaults to 1000), declare their queue durable unless
``declare_queue=False`` (then the queue must exist), and honour the schema's
``is_end_of_stream`` (the marker is not emitted and the reader ends). Messages read after the
last completed checkpoint of a job that ends stay unacknowledged and go back to the queue.

Example::

    config = RMQConnectionConfig.Builder().set_host("127.0.0.1").set_port(5672).build()
    stream = env.add_source(RMQSource(config, "orders", True, SimpleStringSchema()))
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from flinkpy.common.serialization import DeserializationSchema, SerializationSchema
from flinkpy.connectors.base import Boundedness, ReaderContext, Sink, SinkWriter, Source, SourceReader
from flinkpy.connectors.drivers import RABBITMQ, require
from flinkpy.connectors.rabbitmq_connection import RMQConnectionConfig, connect, queue_ready
from flinkpy.connectors.rabbitmq_ledger import AckLedger, ConfirmLedger, MissingCorrelationId, StreamShare
from flinkpy.errors import FlinkpyError, UsageError

log = logging.getLogger("flinkpy.connectors.rabbitmq")

#: how long an idle poll waits for a delivery (bounds a barrier's extra latency)
IDLE_WAIT_S = 0.01
STREAM_PREFETCH = 1000
#: messages the sink publishes before it waits for their confirms
CONFIRM_WINDOW = 1000



class _QueueEnd:
    """What every RabbitMQ connector is configured with: the server, the queue, whether to declare it."""

    def _configure(self, connection_config: RMQConnectionConfig, queue_name: str, declare_queue: bool) -> None:
        require(RABBITMQ)
        if not queue_name:
            raise UsageError(f"{type(self).__name__}: the queue name is empty", remedy="pass the name of a queue")
        self.connection_config = connection_config
        self.queue_name = queue_name
        self.declare_queue = declare_queue

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.connection_config.address!r}, {self.queue_name!r})"


class _Consumer(SourceReader):
    """The pika side shared by both readers: a connection, a channel consuming one queue into a
    buffer, polled on the task thread (pika's BlockingConnection is not thread-safe)."""

    stream = False

    def __init__(self, source: Any, ctx: ReaderContext, prefetch: int | None, arguments: dict | None) -> None:
        self._source = source
        self._ctx = ctx
        self._buffer: deque = deque()
        self._ended = False
        cfg = source.connection_config
        self._conn = connect(cfg)
        try:
            self._channel = self._conn.channel()
            queue_ready(self._channel, cfg, source.queue_name, declare=source.declare_queue, stream=self.stream)
            if prefetch:
                self._channel.basic_qos(prefetch_count=prefetch)
            self._channel.basic_consume(source.queue_name, self._on_message, auto_ack=False, arguments=arguments)
        except BaseException:
            self.close()
            raise

    def _on_message(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        self._buffer.append((method.delivery_tag, properties, body))

    def _fill(self) -> None:
        self._conn.process_data_events(time_limit=0 if self._buffer else IDLE_WAIT_S)

    def _value(self, body: bytes) -> tuple[bool, Any]:
        """(whether the stream ended here, the record)."""
        value = self._source.deserialization_schema.deserialize(body)
        if self._source.deserialization_schema.is_end_of_stream(value):
            self._ended = True
            return True, None
        return False, value

    def close(self) -> None:
        try:
            if self._conn.is_open:
                self._conn.close()
        except Exception:  # noqa: BLE001 - a broken connection is closed already
            pass


class RMQSourceReader(_Consumer):
    """One subtask of an :class:`RMQSource`: acks on completed checkpoints (see the module)."""

    def __init__(self, source: RMQSource, ctx: ReaderContext) -> None:
        self._ledger = AckLedger(source.use_correlation_id, ctx.restored_state)
        super().__init__(source, ctx, source.connection_config.prefetch_count, None)

    def poll(self, max_records: int) -> list | None:
        if self._ended:
            return None
        self._fill()
        out: list = []
        while self._buffer and len(out) < max_records:
            tag, props, body = self._buffer.popleft()
            try:
                fresh = self._ledger.received(tag, props.correlation_id)
            except MissingCorrelationId:
                raise UsageError(
                    f"RMQSource {self._source.queue_name!r} uses correlation ids, but message {tag} has none",
                    remedy="set a unique correlation_id on every message published, or use_correlation_id=False",
                ) from None
            if not fresh:
                log.info("queue %s: dropped redelivered message %s (covered by a restored checkpoint)",
                         self._source.queue_name, props.correlation_id)
                continue
            ended, value = self._value(body)
            if ended:
                break
            out.append(value)
        return out

    def snapshot_checkpoint(self, checkpoint_id: int) -> Any:
        return self._ledger.snapshot(checkpoint_id)


    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        tag = self._ledger.complete(checkpoint_id)
        if tag is not None:
            self._channel.basic_ack(delivery_tag=tag, multiple=True)


class RMQSource(_QueueEnd, Source):
    """PyFlink's ``RMQSource``: a RabbitMQ queue, acknowledged on checkpoints (see the module).

    >>> cfg = RMQConnectionConfig.Builder().set_host("127.0.0.1").build()
    >>> RMQSource(cfg, "orders", True, None).guarantee
    'exactly-once'
    """

    boundedness = Boundedness.CONTINUOUS_UNBOUNDED
    #: a position cannot be replayed: the Spark runner refuses it
    replayable = False

    def __init__(self, connection_config: RMQConnectionConfig, queue_name: str, use_correlation_id: bool,
                 deserialization_schema: DeserializationSchema, *, declare_queue: bool = True) -> None:
        self._configure(connection_config, queue_name, declare_queue)
        self.use_correlation_id = bool(use_correlation_id)
        self.deserialization_schema = deserialization_schema

    @property
    def guarantee(self) -> str:  # type: ignore[override]
        return "exactly-once" if self.use_correlation_id else "at-least-once"

    @property
    def needs(self) -> str:  # type: ignore[override]
        if self.use_correlation_id:
            return "checkpointing; a unique correlation id on every message; parallelism 1"
        return "checkpointing; a failure redelivers what no completed checkpoint covered"

    @property
    def non_parallel(self) -> bool:
        """With correlation ids the source runs at parallelism 1 (``from_source`` and
        ``add_source`` place it so): a redelivery must come back to the reader that knows its id."""
        return self.use_correlation_id

    def create_reader(self, ctx: ReaderContext) -> RMQSourceReader:
        if self.use_correlation_id and ctx.parallelism > 1:
            raise UsageError(
                f"RMQSource {self.queue_name!r} with correlation ids runs at parallelism 1, not {ctx.parallelism}",
                remedy="set_parallelism(1) on the source, or use_correlation_id=False (at-least-once), or a stream queue (RMQStreamSource)",
            )
        return RMQSourceReader(self, ctx)

    def max_parallelism(self) -> int | None:
        return 1 if self.use_correlation_id else None

    def __repr__(self) -> str:
        return f"RMQSource({self.connection_config.address!r}, {self.queue_name!r}, use_correlation_id={self.use_correlation_id})"


class RMQStreamReader(_Consumer):
    """One subtask of an :class:`RMQStreamSource`: its share of the offsets (see the module)."""

    stream = True

    def __init__(self, source: RMQStreamSource, ctx: ReaderContext) -> None:
        self._share = StreamShare(ctx.subtask_index, ctx.parallelism, ctx.restored_state)
        prefetch = source.connection_config.prefetch_count or STREAM_PREFETCH
        super().__init__(source, ctx, prefetch, {"x-stream-offset": self._share.start})

    def poll(self, max_records: int) -> list | None:
        if self._ended:
            return None
        self._fill()
        out: list = []
        last_tag = 0
        while self._buffer and len(out) < max_records:
            tag, props, body = self._buffer.popleft()
            last_tag = tag
            if not self._share.take(int(props.headers["x-stream-offset"])):
                continue
            ended, value = self._value(body)
            if ended:
                break
            out.append(value)
        if last_tag:
            # a stream keeps its messages: acks only return credit to the server
            self._channel.basic_ack(delivery_tag=last_tag, multiple=True)
        return out

    def snapshot_state(self) -> Any:
        return self._share.snapshot()


class RMQStreamSource(_QueueEnd, Source):
    """A RabbitMQ stream queue, replayed from the checkpoint's offset (see the module).

    ``RMQStreamSource(connection_config, queue_name, deserialization_schema)``; the queue is
    declared as a stream queue unless ``declare_queue=False``.
    """

    boundedness = Boundedness.CONTINUOUS_UNBOUNDED
    guarantee = "exactly-once"
    needs = "checkpointing (each subtask's next offset is in the checkpoint); the stream must keep the messages not yet read"

    def __init__(self, connection_config: RMQConnectionConfig, queue_name: str,
                 deserialization_schema: DeserializationSchema, *, declare_queue: bool = True) -> None:
        self._configure(connection_config, queue_name, declare_queue)
        self.deserialization_schema = deserialization_schema

    def create_reader(self, ctx: ReaderContext) -> RMQStreamReader:
        return RMQStreamReader(self, ctx)


class RMQSinkWriter(SinkWriter):
    """Publishes to the queue through the default exchange, persistent, with publisher confirms
    collected asynchronously: a publish does not wait for its confirm (at most
    :data:`CONFIRM_WINDOW` are awaited at a time), and a checkpoint's flush waits until every
    message published so far is confirmed, so at a checkpoint everything is on the server.

    pika's BlockingChannel waits for each confirm in ``basic_publish`` (a round trip and the
    server's disk per message); the writer publishes through the channel's underlying pika
    ``Channel`` instead, whose confirm callback the connection's event processing runs.
    """

    def __init__(self, sink: RMQSink, ctx: ReaderContext) -> None:
        pika = require(RABBITMQ)
        self._sink = sink
        self._props = pika.BasicProperties(delivery_mode=2)
        self._ack = pika.spec.Basic.Ack
        self._ledger = ConfirmLedger()
        cfg = sink.connection_config
        self._conn = connect(cfg)
        try:
            channel = self._conn.channel()
            queue_ready(channel, cfg, sink.queue_name, declare=sink.declare_queue, stream=False)
            self._channel = channel._impl
            selected: list[bool] = []
            self._channel.add_on_return_callback(self._on_return)
            self._channel.confirm_delivery(self._on_confirm, callback=lambda _frame: selected.append(True))
            self._await(lambda: bool(selected), "confirm mode")
        except BaseException:
            self.close()
            raise

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        self._ledger.confirmed(method.delivery_tag, multiple=method.multiple, ack=isinstance(method, self._ack))

    def _on_return(self, _channel: Any, _method: Any, _properties: Any, _body: bytes) -> None:
        self._ledger.returned += 1

    def _await(self, done: Any, what: str) -> None:
        """Process the connection's events until ``done()``, within the delivery timeout."""
        timeout = self._sink.connection_config.delivery_timeout_ms / 1000
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise FlinkpyError(
                    f"RMQSink: RabbitMQ at {self._sink.connection_config.address} did not confirm {what} for queue"
                    f" {self._sink.queue_name!r} within {timeout:g} s ({self._ledger.outstanding} messages unconfirmed)",
                    remedy="check the server (its disk, memory alarms, flow control), or raise set_delivery_timeout",
                )
            self._conn.process_data_events(time_limit=0.01)
        self._refused()

    def _refused(self) -> None:
        ledger = self._ledger
        if ledger.nacked or ledger.returned:
            why = f"{ledger.nacked} refused (basic.nack)" if ledger.nacked else f"{ledger.returned} unroutable (returned)"
            raise UsageError(
                f"RMQSink: RabbitMQ did not accept messages for queue {self._sink.queue_name!r}: {why}",
                remedy="check that the queue exists and accepts messages (its length limit, its overflow policy)",
            )

    def write(self, records: list) -> None:
        serialize = self._sink.serialization_schema.serialize
        publish = self._channel.basic_publish
        queue, props, ledger = self._sink.queue_name, self._props, self._ledger
        for record in records:
            publish("", queue, serialize(record), props, mandatory=True)
            ledger.published()
            if ledger.outstanding >= CONFIRM_WINDOW:
                self._await(lambda: ledger.outstanding < CONFIRM_WINDOW // 2, "earlier messages")
        self._conn.process_data_events(time_limit=0)  # sends what is buffered, takes the confirms in
        self._refused()

    def flush(self, end_of_input: bool) -> None:
        # at a checkpoint (and at the end): every message published so far is on the server
        self._await(lambda: self._ledger.outstanding == 0, "every message")

    def close(self) -> None:
        try:
            if self._conn.is_open:
                self._conn.close()
        except Exception:  # noqa: BLE001 - a broken connection is closed already
            pass


class RMQSink(_QueueEnd, Sink):
    """PyFlink's ``RMQSink(connection_config, queue_name, serialization_schema)``: persistent
    messages with publisher confirms; a failure replays what the last checkpoint did not cover.

    >>> cfg = RMQConnectionConfig.Builder().set_host("127.0.0.1").build()
    >>> RMQSink(cfg, "out", None).guarantee
    'at-least-once'
    """

    guarantee = "at-least-once"
    needs = "checkpointing; publisher confirms: every message is on the server before the checkpoint completes"

    def __init__(self, connection_config: RMQConnectionConfig, queue_name: str,
                 serialization_schema: SerializationSchema, *, declare_queue: bool = True) -> None:
        self._configure(connection_config, queue_name, declare_queue)
        self.serialization_schema = serialization_schema

    def create_writer(self, ctx: ReaderContext) -> RMQSinkWriter:
        return RMQSinkWriter(self, ctx)
