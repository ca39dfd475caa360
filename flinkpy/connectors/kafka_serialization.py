"""How a KafkaSink turns a stream's records into Kafka records (PyFlink's
``KafkaRecordSerializationSchema``): a topic (fixed, or chosen per record), a value schema and
optionally a key schema (:class:`~flinkpy.common.SerializationSchema` s: ``SimpleStringSchema``,
the JSON, CSV and Avro row schemas).

>>> from flinkpy.common import SimpleStringSchema
>>> schema = (KafkaRecordSerializationSchema.builder()
...           .set_topic_selector(lambda r: "even" if r % 2 == 0 else "odd")
...           .set_value_serialization_schema(SimpleStringSchema())
...           .build())
>>> schema.serialize(3)
ProducerRecord(topic='odd', value=b'3', key=None, partition=None, timestamp=None, headers=None)
"""

from __future__ import annotations

from typing import Any, Callable

from flinkpy.connectors.kafka_commit import ProducerRecord
from flinkpy.errors import ConfigurationError


class KafkaRecordSerializationSchema:
    """A record -> :class:`ProducerRecord` (topic, key, value). Build one with :meth:`builder`."""

    def __init__(self, topic: str | None, topic_selector: Callable[[Any], str] | None,
                 value_schema: Any, key_schema: Any = None) -> None:
        self.topic = topic
        self.topic_selector = topic_selector
        self.value_schema = value_schema
        self.key_schema = key_schema

    @staticmethod
    def builder() -> KafkaRecordSerializationSchemaBuilder:
        return KafkaRecordSerializationSchemaBuilder()

    def serialize(self, element: Any, timestamp: int | None = None) -> ProducerRecord:
        topic = self.topic if self.topic is not None else self.topic_selector(element)  # type: ignore[misc]
        key = self.key_schema.serialize(element) if self.key_schema is not None else None
        return ProducerRecord(topic, self.value_schema.serialize(element), key, None, timestamp)

    @property
    def values_only(self) -> bool:
        """One fixed topic and no key schema: a record is its serialised value alone."""
        return self.topic is not None and self.key_schema is None

    def serialize_all(self, elements: list) -> list:
        """The records of ``elements``: with :attr:`values_only`, their serialised values (for
        :attr:`topic`), else a :class:`ProducerRecord` each. One Python call per record fewer,
        and no tuple built per record, where the sink writes one topic without keys."""
        if self.values_only:
            serialize = self.value_schema.serialize
            return [serialize(e) for e in elements]
        return [self.serialize(e) for e in elements]

    def serialize_timestamped(self, elements: list, timestamps: list) -> list:
        """The records of ``elements`` with their event timestamps (milliseconds) as their
        Kafka timestamps, as Flink's KafkaSink writes them: with :attr:`values_only` a
        ``(value, timestamp)`` pair each, else a :class:`ProducerRecord` with its timestamp. An
        element without one (None, or negative: Kafka refuses those) is as
        :meth:`serialize_all` gives it, and the producer stamps it when it sends it.

        >>> from flinkpy.common import SimpleStringSchema
        >>> schema = (KafkaRecordSerializationSchema.builder().set_topic("t")
        ...           .set_value_serialization_schema(SimpleStringSchema()).build())
        >>> schema.serialize_timestamped(["a", "b", "c"], [1700000000000, None, -5])
        [(b'a', 1700000000000), b'b', b'c']
        """
        if self.values_only:
            serialize = self.value_schema.serialize
            return [(serialize(e), t) if t is not None and t >= 0 else serialize(e) for e, t in zip(elements, timestamps)]
        return [self.serialize(e, t if t is not None and t >= 0 else None) for e, t in zip(elements, timestamps)]

    def open(self, context: Any = None) -> None:
        for schema in (self.value_schema, self.key_schema):
            opener = getattr(schema, "open", None)
            if callable(opener):
                opener(context)

    def __repr__(self) -> str:
        where = repr(self.topic) if self.topic is not None else "a topic selector"
        return f"KafkaRecordSerializationSchema({where}, value={self.value_schema!r})"


class KafkaRecordSerializationSchemaBuilder:
    """``set_topic(name)`` or ``set_topic_selector(fn)``, ``set_value_serialization_schema``,
    optionally ``set_key_serialization_schema``, then ``build()``."""

    def __init__(self) -> None:
        self._topic: str | None = None
        self._selector: Callable[[Any], str] | None = None
        self._value: Any = None
        self._key: Any = None

    def set_topic(self, topic: str) -> KafkaRecordSerializationSchemaBuilder:
        self._topic = topic
        return self

    def set_topic_selector(self, topic_selector: Callable[[Any], str]) -> KafkaRecordSerializationSchemaBuilder:
        self._selector = getattr(topic_selector, "apply", topic_selector)
        return self

    def set_value_serialization_schema(self, schema: Any) -> KafkaRecordSerializationSchemaBuilder:
        self._value = schema
        return self

    def set_key_serialization_schema(self, schema: Any) -> KafkaRecordSerializationSchemaBuilder:
        self._key = schema
        return self

    def build(self) -> KafkaRecordSerializationSchema:
        if (self._topic is None) == (self._selector is None):
            raise ConfigurationError(
                "KafkaRecordSerializationSchema needs exactly one of set_topic() and set_topic_selector()",
                remedy="call set_topic('name') for one topic, or set_topic_selector(fn) to choose one per record",
            )
        if self._value is None:
            raise ConfigurationError(
                "KafkaRecordSerializationSchema needs a value serialization schema",
                remedy="call set_value_serialization_schema(SimpleStringSchema()) or another SerializationSchema",
            )
        return KafkaRecordSerializationSchema(self._topic, self._selector, self._value, self._key)
