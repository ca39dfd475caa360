"""What every Kafka connector shares: the driver, the client configuration, the errors.

flinkpy talks to Kafka through confluent-kafka (librdkafka), the ``kafka`` extra. A connector
asks for it with :func:`kafka_module` (a one-line error naming the extra when it is missing),
builds its client's settings with :func:`client_config`, and turns what librdkafka raises into
flinkpy's errors with :func:`translate` (or the :func:`kafka_errors` context manager), so that an
operator reads one line that names the servers, the topic and what to change.

Properties are Kafka's own keys (``bootstrap.servers``, ``isolation.level``, ...), as PyFlink's
``set_property`` takes them. Java-client keys that librdkafka does not know (deserializers,
``partition.discovery.interval.ms``, Flink's ``commit.offsets.on.checkpoint``) are the
connector's to read, never passed on.

>>> cfg = client_config("127.0.0.1:9092", {"group.id": "g", "key.deserializer": "x"})
>>> cfg["bootstrap.servers"], cfg["group.id"], "key.deserializer" in cfg
('127.0.0.1:9092', 'g', False)
>>> err = KafkaUnreachableError("no Kafka broker answers at 127.0.0.1:1", remedy="check bootstrap.servers")
>>> err.exit_code
3
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from flinkpy.connectors.drivers import Driver, require
from flinkpy.errors import ClusterUnreachableError, ConfigurationError, FlinkpyError, NotFoundError

#: librdkafka's own log lines (a broker refusing connections repeats one every 50 ms) go to
#: this logger, not to the process's stderr
LIBRDKAFKA_LOG = logging.getLogger("flinkpy.connectors.kafka.librdkafka")
#: what matters reaches the user as translated errors; these lines are for whoever turns them on
LIBRDKAFKA_LOG.propagate = False
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())

KAFKA = Driver("confluent_kafka", "kafka", "the Kafka connectors")

#: keys of the Java client and of Flink's connector that librdkafka refuses; the connectors read
#: the ones that mean something to them (``partition.discovery.interval.ms``, ...)
_NOT_FOR_LIBRDKAFKA = frozenset({
    "key.deserializer", "value.deserializer", "key.serializer", "value.serializer",
    "partition.discovery.interval.ms", "commit.offsets.on.checkpoint", "client.id.prefix",
    "register.consumer.metrics", "default.api.timeout.ms", "flink.partition-discovery.interval-millis",
})


def kafka_module(submodule: str | None = None) -> ModuleType:
    """confluent_kafka (or ``confluent_kafka.<submodule>``), imported; MissingDriverError if absent."""
    return require(KAFKA, f"confluent_kafka.{submodule}" if submodule else None)


class KafkaUnreachableError(ClusterUnreachableError):
    """No broker of ``bootstrap.servers`` answers (exit 3, as an unreachable cluster)."""


class KafkaTopicNotFoundError(NotFoundError):
    """A topic (or partition) the job names does not exist on the cluster (exit 4)."""


class KafkaError(FlinkpyError):
    """Kafka refused an operation for another reason (authorization, a fenced producer, a
    transaction timed out); the message carries librdkafka's code and words."""

    exit_code = ConfigurationError.exit_code


def client_config(bootstrap_servers: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    """A confluent-kafka configuration: ``bootstrap.servers`` plus ``properties`` (Kafka's keys;
    values as strings or numbers), less the keys only the Java client or the connector reads.
    librdkafka's log goes to :data:`LIBRDKAFKA_LOG`. Not picklable: build it where it is used."""
    cfg: dict[str, Any] = {"logger": LIBRDKAFKA_LOG}
    for key, value in (properties or {}).items():
        if key not in _NOT_FOR_LIBRDKAFKA:
            cfg[key] = value
    if bootstrap_servers:
        cfg["bootstrap.servers"] = bootstrap_servers
    if not cfg.get("bootstrap.servers"):
        raise ConfigurationError(
            "a Kafka connector needs bootstrap servers",
            remedy="call set_bootstrap_servers('host:9092') or set the 'bootstrap.servers' property",
        )
    return cfg


_UNREACHABLE = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_TIMED_OUT", "_MSG_TIMED_OUT", "NETWORK_EXCEPTION"}
_NO_TOPIC = {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_ID"}


def translate(exc: BaseException, bootstrap_servers: str, doing: str, topic: str | None = None) -> FlinkpyError:
    """The flinkpy error for what confluent-kafka raised (a KafkaException) or reported (a
    KafkaError) while ``doing`` something (``"reading topic 'events'"``)."""
    if isinstance(exc, FlinkpyError):
        return exc
    err = exc.args[0] if exc.args and hasattr(exc.args[0], "name") else exc
    name = err.name() if callable(getattr(err, "name", None)) else type(exc).__name__
    words = err.str() if callable(getattr(err, "str", None)) else str(exc)
    if name in _UNREACHABLE:
        return KafkaUnreachableError(
            f"no Kafka broker answers at {bootstrap_servers} while {doing}: {words}",
            remedy="check set_bootstrap_servers(...) (host:port of a running broker) and that the broker is up",
        )
    if name in _NO_TOPIC:
        what = f"topic {topic!r}" if topic else "a topic"
        return KafkaTopicNotFoundError(
            f"{what} does not exist on the Kafka cluster at {bootstrap_servers} ({doing}: {words})",
            remedy="create the topic (kafka-topics --create), or correct the topic name in the job",
        )
    return KafkaError(f"Kafka at {bootstrap_servers} refused {doing}: {name}: {words}")


@contextlib.contextmanager
def kafka_errors(bootstrap_servers: str, doing: str, topic: str | None = None) -> Iterator[None]:
    """Raise :func:`translate`'s error for a confluent-kafka exception inside the block."""
    ck = kafka_module()
    try:
        yield
    except ck.KafkaException as exc:
        raise translate(exc, bootstrap_servers, doing, topic) from None
