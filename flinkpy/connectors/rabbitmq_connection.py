"""Connecting to RabbitMQ: PyFlink's ``RMQConnectionConfig`` and one-line errors.

:class:`RMQConnectionConfig` is built as in PyFlink, with ``RMQConnectionConfig.Builder()``::

    config = (RMQConnectionConfig.Builder()
              .set_host("127.0.0.1").set_port(5672).set_virtual_host("/")
              .set_user_name("guest").set_password("guest")
              .set_prefetch_count(500)
              .build())

or from a URI (``set_uri("amqp://user:pass@host:5672/vhost")``). :func:`connect` opens a pika
``BlockingConnection`` and :func:`queue_ready` declares (or checks) a queue; both turn pika's
failures into flinkpy's errors, each one line with a remedy: a server that does not answer
(exit 3), a refused login (exit 11), a queue that does not exist (exit 4).

>>> RMQConnectionConfig.Builder().set_host("h").set_port(5673).set_virtual_host("v").build().address
'amqp://h:5673/v'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from flinkpy.connectors.drivers import RABBITMQ, require
from flinkpy.errors import AuthenticationError, ClusterUnreachableError, NotFoundError, UsageError


class RabbitMQUnreachableError(ClusterUnreachableError):
    """No RabbitMQ server answers at the configured address."""


@dataclass(frozen=True)
class RMQConnectionConfig:
    """Where and how to connect (see the module). Picklable: it travels to the task processes."""

    host: str = "localhost"
    port: int = 5672
    virtual_host: str = "/"
    user_name: str = "guest"
    password: str = "guest"
    prefetch_count: int | None = None
    connection_timeout_ms: int = 10_000
    requested_heartbeat_s: int | None = None
    delivery_timeout_ms: int = 30_000

    @property
    def address(self) -> str:
        """The server and virtual host, without credentials (for messages)."""
        return f"amqp://{self.host}:{self.port}/{self.virtual_host.lstrip('/') if self.virtual_host != '/' else ''}"

    def parameters(self) -> Any:
        pika = require(RABBITMQ)
        kw: dict[str, Any] = {}
        if self.requested_heartbeat_s is not None:
            kw["heartbeat"] = self.requested_heartbeat_s
        return pika.ConnectionParameters(
            host=self.host, port=self.port, virtual_host=self.virtual_host,
            credentials=pika.PlainCredentials(self.user_name, self.password),
            connection_attempts=1, socket_timeout=self.connection_timeout_ms / 1000,
            blocked_connection_timeout=self.delivery_timeout_ms / 1000, **kw,
        )

    class Builder:
        """PyFlink's ``RMQConnectionConfig.Builder``; ``build()`` checks what was set."""

        def __init__(self) -> None:
            self._kw: dict[str, Any] = {}

        def _set(self, key: str, value: Any) -> RMQConnectionConfig.Builder:
            self._kw[key] = value
            return self

        def set_host(self, host: str) -> RMQConnectionConfig.Builder:
            return self._set("host", host)

        def set_port(self, port: int) -> RMQConnectionConfig.Builder:
            if not 0 < int(port) < 65536:
                raise UsageError(f"RMQConnectionConfig: port {port} is out of range", remedy="pass a port in 1..65535")
            return self._set("port", int(port))

        def set_virtual_host(self, vhost: str) -> RMQConnectionConfig.Builder:
            return self._set("virtual_host", vhost)

        def set_user_name(self, user_name: str) -> RMQConnectionConfig.Builder:
            return self._set("user_name", user_name)

        def set_password(self, password: str) -> RMQConnectionConfig.Builder:
            return self._set("password", password)

        def set_uri(self, uri: str) -> RMQConnectionConfig.Builder:
            """``amqp://user:password@host:port/vhost`` (vhost URL-encoded: ``%2F`` is ``/``)."""
            u = urlparse(uri)
            if u.scheme != "amqp" or not u.hostname:
                raise UsageError(f"RMQConnectionConfig: {uri!r} is not an amqp:// URI", remedy="pass amqp://user:password@host:port/vhost")
            self._kw.update(host=u.hostname, port=u.port or 5672)
            if u.username:
                self._kw.update(user_name=unquote(u.username), password=unquote(u.password or ""))
            if u.path and u.path != "/":
                self._kw["virtual_host"] = unquote(u.path[1:])
            return self

        def set_prefetch_count(self, prefetch_count: int) -> RMQConnectionConfig.Builder:
            """Unacknowledged messages the server may have in flight to each reader (basic.qos).
            Acks wait for checkpoints, so it must cover what arrives between two checkpoints."""
            if int(prefetch_count) < 1:
                raise UsageError(f"RMQConnectionConfig: prefetch count {prefetch_count} is not positive", remedy="pass 1 or more")
            return self._set("prefetch_count", int(prefetch_count))

        def set_connection_timeout(self, timeout_ms: int) -> RMQConnectionConfig.Builder:
            return self._set("connection_timeout_ms", int(timeout_ms))

        def set_requested_heartbeat(self, heartbeat_s: int) -> RMQConnectionConfig.Builder:
            return self._set("requested_heartbeat_s", int(heartbeat_s))

        def set_delivery_timeout(self, timeout_ms: int) -> RMQConnectionConfig.Builder:
            """How long the sink waits for the server's confirms at a checkpoint."""
            return self._set("delivery_timeout_ms", int(timeout_ms))

        def build(self) -> RMQConnectionConfig:
            return RMQConnectionConfig(**self._kw)


def connect(config: RMQConnectionConfig) -> Any:
    """A pika BlockingConnection, or one of flinkpy's errors in one line."""
    pika = require(RABBITMQ)
    exc = pika.exceptions
    try:
        return pika.BlockingConnection(config.parameters())
    except (exc.ProbableAuthenticationError, exc.AuthenticationError) as e:
        raise AuthenticationError(
            f"RabbitMQ at {config.address} refused the login of user {config.user_name!r}: {type(e).__name__}",
            remedy="check set_user_name/set_password, and that the user may use the virtual host",
        ) from None
    except exc.ProbableAccessDeniedError:
        raise AuthenticationError(
            f"RabbitMQ at {config.address} denied user {config.user_name!r} access to virtual host {config.virtual_host!r}",
            remedy="grant the user permissions on it, or set_virtual_host to one it may use",
        ) from None
    except exc.AMQPConnectionError as e:
        raise RabbitMQUnreachableError(
            f"no RabbitMQ server answers at {config.address}: {type(e).__name__} {e}".strip(),
            remedy="start the server, or set_host/set_port to where it runs",
        ) from None


def queue_ready(channel: Any, config: RMQConnectionConfig, queue: str, *, declare: bool, stream: bool) -> None:
    """Declare ``queue`` (durable; a stream queue when ``stream``), or check that it exists."""
    pika = require(RABBITMQ)
    args = {"x-queue-type": "stream"} if stream else None
    try:
        channel.queue_declare(queue, durable=True, arguments=args, passive=not declare)
    except pika.exceptions.ChannelClosedByBroker as e:
        if e.reply_code == 404:
            raise NotFoundError(
                f"queue {queue!r} does not exist on RabbitMQ at {config.address}",
                remedy="declare it first, or let the connector declare it (declare_queue=True)",
            ) from None
        if e.reply_code == 406:
            raise UsageError(
                f"queue {queue!r} on RabbitMQ at {config.address} exists with other settings: {e.reply_text}",
                remedy="use declare_queue=False to read it as it is" if not stream else "a stream source needs a queue declared with x-queue-type=stream",
            ) from None
        raise
