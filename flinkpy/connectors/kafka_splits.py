"""KafkaSource's splits: one per topic partition, who reads which, and where each starts.

Pure: no client, no clock. The reader (:mod:`flinkpy.connectors.kafka_source`) asks Kafka for
partitions and offsets and hands them here.

**Assignment.** Partition ``p`` of topic ``t`` is read by subtask ``(start(t) + p) %
parallelism``, where ``start(t)`` is a stable hash of the topic's name (CRC-32): the partitions of
one topic spread round-robin from a place that differs between topics, as Flink's enumerator
spreads them. The rule depends on nothing but the topic, the partition and the parallelism, so
every subtask decides alone, a partition discovered later goes to one subtask only, and a restore
at another parallelism moves each partition (with its offset) to its new owner.

**Offsets.** A split's offset is the *next* offset to read (Kafka's committed-offset meaning). A
reader's state is ``{"subtask": i, "offsets": {"topic-partition": next offset, ...}}`` (Flink's
split ids, so ``checkpoint inspect`` shows one line per partition); a restored subtask pools the
offsets of every old subtask and keeps those the rule gives it.

>>> tps = [KafkaPartition("events", p) for p in range(4)]
>>> sorted({owner(tp, 2) for tp in tps}) == [0, 1]
True
>>> [tp.split_id for tp in assigned(tps, 0, 1)]
['events-0', 'events-1', 'events-2', 'events-3']
>>> restored_offsets([{"subtask": 0, "offsets": {"events-0": 7}}, {"subtask": 1, "offsets": {"events-1": 3}}])
{KafkaPartition(topic='events', partition=0): 7, KafkaPartition(topic='events', partition=1): 3}
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Any, Iterable

from flinkpy.errors import UsageError


@dataclass(frozen=True, order=True)
class KafkaPartition:
    """One split of a KafkaSource: a topic partition."""

    topic: str
    partition: int

    @staticmethod
    def of(split_id: str) -> KafkaPartition:
        """The partition a split id names (a topic's name may hold dashes; the number ends it).

        >>> KafkaPartition.of("orders-eu-3")
        KafkaPartition(topic='orders-eu', partition=3)
        """
        topic, _, partition = split_id.rpartition("-")
        return KafkaPartition(topic, int(partition))

    @property
    def split_id(self) -> str:
        """Flink's name of the split (``topic-partition``), as metrics and ``checkpoint inspect`` show it."""
        return f"{self.topic}-{self.partition}"


def owner(tp: KafkaPartition, parallelism: int) -> int:
    """The subtask (of ``parallelism``) that reads ``tp``."""
    start = zlib.crc32(tp.topic.encode("utf-8")) % parallelism
    return (start + tp.partition) % parallelism


def assigned(partitions: Iterable[KafkaPartition], subtask: int, parallelism: int) -> list[KafkaPartition]:
    """The partitions of ``subtask``, sorted."""
    return sorted(tp for tp in set(partitions) if owner(tp, parallelism) == subtask)


def restored_offsets(states: Iterable[Any]) -> dict[KafkaPartition, int]:
    """The next offset of every partition in the restored states of the old subtasks (a
    partition appears in one state; should two disagree, the further one wins)."""
    out: dict[KafkaPartition, int] = {}
    for state in states:
        if not state:
            continue
        for split, offset in state.get("offsets", {}).items():
            tp = KafkaPartition.of(split)
            if tp not in out or int(offset) > out[tp]:
                out[tp] = int(offset)
    return out


def state_of(subtask: int, offsets: dict[KafkaPartition, int]) -> dict[str, Any]:
    """A reader's snapshot: its next offset per partition."""
    return {"source": "kafka", "subtask": subtask, "offsets": {tp.split_id: off for tp, off in sorted(offsets.items())}}


def split_plan(states: list[Any], parallelism: int) -> list[dict[str, Any]] | None:
    """Which partitions (with their offsets) each subtask of a restore at ``parallelism`` takes
    from a snapshot's Kafka source states (``savepoint plan``), or None for another source's.

    >>> [r["splits"] for r in split_plan([{"source": "kafka", "offsets": {"t-0": 5, "t-1": 7}}], 2)]
    [['t-0@5'], ['t-1@7']]
    """
    if not any(isinstance(s, dict) and s.get("source") == "kafka" for s in states):
        return None
    offsets = restored_offsets(states)
    return [{"subtask": i, "splits": [f"{tp.split_id}@{offsets[tp]}" for tp in assigned(offsets, i, parallelism)]}
            for i in range(parallelism)]


@dataclass(frozen=True)
class Subscription:
    """What a KafkaSource reads: ``topics`` (a list), a ``pattern`` (a regular expression a
    topic name must match in full), or fixed ``partitions``. Exactly one is set.

    >>> Subscription(pattern="orders-.*").matches("orders-eu"), Subscription(topics=("a",)).matches("b")
    (True, False)
    """

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[KafkaPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.partitions:
            return any(tp.topic == topic for tp in self.partitions)
        return topic in self.topics

    def covers(self, tp: KafkaPartition) -> bool:
        return tp in self.partitions if self.partitions else self.matches(tp.topic)

    def select(self, cluster: dict[str, int]) -> list[KafkaPartition]:
        """The partitions to read, given ``{topic: partition count}`` of the cluster."""
        if self.partitions:
            return sorted(tp for tp in self.partitions if tp.partition < cluster.get(tp.topic, 0))
        return sorted(KafkaPartition(t, p) for t, n in cluster.items() if self.matches(t) for p in range(n))

    def named_topics(self) -> list[str]:
        """The topics named outright (that must exist); none for a pattern."""
        if self.pattern is not None:
            return []
        return sorted({tp.topic for tp in self.partitions} or set(self.topics))

    def describe(self) -> str:
        if self.pattern is not None:
            return f"topics matching {self.pattern!r}"
        if self.partitions:
            return "partitions " + ", ".join(tp.split_id for tp in self.partitions)
        return "topic " + ", ".join(repr(t) for t in self.topics) if len(self.topics) == 1 else "topics " + ", ".join(repr(t) for t in self.topics)


class OffsetResetStrategy:
    """Where ``committed_offsets`` starts a partition whose group has no committed offset."""

    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"


class KafkaOffsetsInitializer:
    """Where partitions start (``set_starting_offsets``) or stop (``set_bounded``), as PyFlink's.

    ``earliest()``, ``latest()``, ``committed_offsets(reset)`` (the group's committed offsets;
    ``reset`` where it has none: earliest by default, ``OffsetResetStrategy.NONE`` fails),
    ``timestamp(ms)`` (the first record at or after ``ms``) and ``offsets({KafkaTopicPartition:
    offset})`` (explicit next offsets; partitions not named start at the earliest). Resolved by
    each reader when it first reads a partition; a restored partition resumes at its checkpointed
    offset instead.

    >>> KafkaOffsetsInitializer.timestamp(1700000000000)
    KafkaOffsetsInitializer.timestamp(1700000000000)
    """

    def __init__(self, kind: str, value: Any = None, reset: str = OffsetResetStrategy.EARLIEST) -> None:
        self.kind = kind
        self.value = value
        self.reset = reset

    @staticmethod
    def earliest() -> KafkaOffsetsInitializer:
        return KafkaOffsetsInitializer("earliest")

    @staticmethod
    def latest() -> KafkaOffsetsInitializer:
        return KafkaOffsetsInitializer("latest")

    @staticmethod
    def committed_offsets(offset_reset_strategy: str = OffsetResetStrategy.NONE) -> KafkaOffsetsInitializer:
        reset = getattr(offset_reset_strategy, "value", offset_reset_strategy)
        reset = str(reset).lower()
        if reset not in ("earliest", "latest", "none"):
            raise UsageError(f"committed_offsets: unknown offset reset strategy {offset_reset_strategy!r}",
                             remedy="use OffsetResetStrategy.EARLIEST, LATEST or NONE")
        return KafkaOffsetsInitializer("committed", reset=reset)

    @staticmethod
    def timestamp(timestamp: int) -> KafkaOffsetsInitializer:
        if int(timestamp) < 0:
            raise UsageError(f"starting timestamp must be >= 0, got {timestamp}")
        return KafkaOffsetsInitializer("timestamp", int(timestamp))

    @staticmethod
    def offsets(offsets: dict[Any, int], offset_reset_strategy: str = OffsetResetStrategy.EARLIEST) -> KafkaOffsetsInitializer:
        checked = {KafkaPartition(tp.topic, int(tp.partition)): int(o) for tp, o in offsets.items()}
        return KafkaOffsetsInitializer("offsets", checked, reset=str(getattr(offset_reset_strategy, "value", offset_reset_strategy)).lower())

    def __repr__(self) -> str:
        arg = "" if self.value is None else repr(self.value)
        return f"KafkaOffsetsInitializer.{'committed_offsets' if self.kind == 'committed' else self.kind}({arg})"


@dataclass(frozen=True, order=True)
class KafkaTopicPartition:
    """PyFlink's name for a topic partition (``set_partitions``, ``offsets``)."""

    topic: str
    partition: int

    def _to_split(self) -> KafkaPartition:
        return KafkaPartition(self.topic, int(self.partition))
