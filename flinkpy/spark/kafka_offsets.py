"""An unbounded KafkaSource's micro-batches on Spark: Spark offsets that are Kafka offsets.

A bounded KafkaSource travels the runner's general road (:mod:`flinkpy.spark.sources`: a reader
per partition, its state the offset). An unbounded one cannot: its partitions are not known when
the job is built, and its starting offsets may move (``latest()``, ``committed_offsets()``). So
its Spark offset is Kafka's own: ``{"p": {"topic-partition": next offset}, "m": 0}``.

**Planning** (``latestOffset``, on the driver) reads no record. It discovers the subscription's
partitions (at the start, then every ``partition.discovery.interval.ms``) and asks each one's
*last stable offset* (a ``read_committed`` consumer's high watermark: below it, every
transaction is decided), and ends the batch there, or ``max-records-per-batch`` offsets after
its start when that is nearer. A partition first seen by a batch starts where the starting
offsets say (the first batch of a query) or at its earliest offset (found later, as Flink's);
the start so resolved is written into that batch's end offset (``"f"``), which Spark logs before
the batch runs: a replay of the batch reads from the same offsets however ``latest()`` has moved.

**Reading** (``read``, in a Spark task on an executor) takes one partition's range ``[from,
to)`` and reads it ``read_committed`` with the engine's own reader, bounded at ``to``: the records
of committed transactions, none of aborted ones (control records and aborted records take
offsets but yield nothing). Everything below ``to`` was decided when the batch was planned, so a
replay reads the same records. A restarted query goes on from the end offset of its last
committed batch.

**Committing** (``commit``, when Spark has committed a batch) commits the batch's end offsets
to the source's consumer group, for lag monitoring only, as the engine does on checkpoint
completion: recovery never reads them.

>>> plan_end({"p": {"t-0": 5}, "m": 0, "i": 1}, stable={"t-0": 9, "t-1": 3}, fresh={"t-1": 0}, budget=2)
{'p': {'t-0': 7, 't-1': 2}, 'm': 0, 'i': 1, 'f': {'t-1': 0}}
>>> start = {"p": {"t-0": 9}, "m": 0, "i": 1}
>>> plan_end(start, stable={"t-0": 9}, fresh={}, budget=0) is start
True
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Any, Iterator

from flinkpy.spark.records import BUNDLE, MIN_W, RECORD, seq_of, to_batch

log = logging.getLogger("flinkpy.spark.kafka")

#: a planner that found nothing new waits this long before Spark asks again (Spark asks every
#: 10 ms without a trigger interval; each ask is a look-up per partition)
IDLE_S = 0.1
#: records sent on at a time by a reading task (as rows, or one bundle row)
CHUNK = 8192


def plan_end(start: dict, *, stable: dict[str, int], fresh: dict[str, int], budget: int) -> dict:
    """The end offset of the next batch (pure): ``stable`` is each partition's last stable
    offset, ``fresh`` the resolved start of partitions ``start`` does not know, ``budget`` the
    most offsets a partition moves (0: no limit). ``start`` itself when nothing is new, so that
    Spark runs no batch."""
    froms = {**fresh, **start["p"]}
    end = {}
    for split, first in froms.items():
        last = max(first, stable.get(split, first))
        end[split] = min(last, first + budget) if budget > 0 else last
    if not fresh and all(end[s] == start["p"][s] for s in start["p"]) and start.get("i"):
        return start
    out: dict = {"p": dict(sorted(end.items())), "m": 0, "i": 1}
    if fresh:
        out["f"] = dict(sorted(fresh.items()))
    return out


def batch_ranges(start: dict, end: dict) -> list[tuple[int, str, int, int]]:
    """``(ordinal, split, from, to)`` of every partition the batch from ``start`` to ``end``
    reads; the ordinal (the split's place among the end's) orders the partitions' records.

    >>> batch_ranges({"p": {"t-0": 5}, "m": 0}, {"p": {"t-0": 7, "t-1": 2}, "f": {"t-1": 0}, "m": 0})
    [(0, 't-0', 5, 7), (1, 't-1', 0, 2)]
    """
    froms = end.get("f", {})
    out = []
    for ordinal, split in enumerate(sorted(end["p"])):
        first = start["p"].get(split, froms.get(split))
        if first is None:
            raise ValueError(f"micro-batch end offset names partition {split} without where it starts")
        if end["p"][split] > first:
            out.append((ordinal, split, first, end["p"][split]))
    return out


class KafkaMicroBatches:
    """An unbounded KafkaSource as the ``flinkpy`` data source plans and reads it (see above);
    the interface of :class:`flinkpy.spark.sources.SourceOffsets`."""

    def __init__(self, source: Any, *, index: int, bundled: bool = False) -> None:
        self.source = source
        self.index = index
        self.bundled = bundled
        self._consumer: Any = None
        self._partitions: list[Any] = []
        self._next_discovery = 0.0

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_consumer": None, "_partitions": [], "_next_discovery": 0.0}

    # -- planning (the driver) ----------------------------------------------------------------

    def initial(self) -> dict:
        return {"p": {}, "m": 0}

    def _client(self) -> Any:
        if self._consumer is None:
            from flinkpy.connectors.kafka_client import kafka_module

            self._consumer = kafka_module().Consumer(self.source.consumer_config())
        return self._consumer

    def _discover(self) -> list[Any]:
        from flinkpy.connectors.kafka_source import _timeout_s, cluster_partitions

        src = self.source
        now = time.monotonic()
        if not self._partitions or (src.discovery_ms > 0 and now >= self._next_discovery):
            cluster = cluster_partitions(self._client(), src.subscription, src.bootstrap, _timeout_s(src.properties), require_topics=True)
            self._partitions = src.subscription.select(cluster)
            self._next_discovery = now + src.discovery_ms / 1000.0
        return self._partitions

    def plan(self, start: dict, budget: int) -> dict:
        from flinkpy.connectors.kafka_client import kafka_errors, kafka_module
        from flinkpy.connectors.kafka_source import _timeout_s, resolve_offsets
        from flinkpy.connectors.kafka_splits import KafkaOffsetsInitializer

        src = self.source
        timeout = _timeout_s(src.properties)
        consumer = self._client()
        tps = self._discover()
        new = [tp for tp in tps if tp.split_id not in start["p"]]
        # the starting offsets for the query's first look, the earliest for partitions found later
        init = KafkaOffsetsInitializer.earliest() if start.get("i") else src.starting
        with kafka_errors(src.bootstrap, f"looking up the offsets of {src.subscription.describe()}"):
            fresh = {tp.split_id: off for tp, off in resolve_offsets(consumer, init, new, timeout, src.group_id).items()}
            ck = kafka_module()
            stable = {tp.split_id: consumer.get_watermark_offsets(ck.TopicPartition(tp.topic, tp.partition), timeout=timeout)[1]
                      for tp in tps}
        end = plan_end(start, stable=stable, fresh=fresh, budget=budget)
        if end is start:
            time.sleep(IDLE_S)
        elif fresh:
            log.info("%s: partitions %s start at %s", src.describe(), ", ".join(sorted(fresh)), fresh)
        return end

    def partitions(self, start: dict, end: dict) -> list[tuple]:
        return [("kafka", *r) for r in batch_ranges(start, end)]

    def commit(self, end: dict) -> None:
        """Spark committed the batch that ends at ``end``: its offsets to the group (lag only)."""
        src = self.source
        if not (src.commit_on_checkpoint and src.group_id and end.get("p")):
            return
        from flinkpy.connectors.kafka_client import kafka_module
        from flinkpy.connectors.kafka_splits import KafkaPartition

        ck = kafka_module()
        tps = [ck.TopicPartition(tp.topic, tp.partition, off) for tp, off in ((KafkaPartition.of(s), o) for s, o in end["p"].items())]
        try:
            self._client().commit(offsets=tps, asynchronous=False)
        except ck.KafkaException as exc:  # lag monitoring only: Spark's checkpoint holds the offsets
            log.warning("committing offsets %s to group %r failed: %s", end["p"], src.group_id, exc)

    # -- reading (an executor) ----------------------------------------------------------------

    def _range_reader(self, split: str, first: int, last: int) -> Any:
        """The engine's reader of one partition, from ``first``, bounded before ``last``."""
        from flinkpy.connectors.base import Boundedness, ReaderContext
        from flinkpy.connectors.kafka_splits import KafkaPartition, Subscription, state_of

        tp = KafkaPartition.of(split)
        bounded = copy.copy(self.source)
        bounded.subscription = Subscription(partitions=(tp,))
        bounded.stopping = {tp: last}
        bounded.boundedness = Boundedness.BOUNDED
        ctx = ReaderContext(subtask_index=0, parallelism=1, operator_name=f"spark {split}", restored_state=[state_of(0, {tp: first})])
        return bounded.create_reader(ctx)

    def read(self, what: tuple) -> Iterator[Any]:
        """The Arrow batches of one partition's range (see :meth:`partitions`)."""
        from flinkpy.connectors.kafka_source import _timeout_s

        _, ordinal, split, first, last = what
        reader = self._range_reader(split, first, last)
        timeout = _timeout_s(self.source.properties)
        position = first  # the ordering position of the next record (records read so far + first)
        try:
            quiet_since = time.monotonic()
            pending: list = []
            while True:
                got = reader.poll(CHUNK)
                if got is not None and not got:
                    if time.monotonic() - quiet_since > timeout:
                        raise RuntimeError(f"partition {split} gave no record up to offset {last} within {timeout:g} s, though its "
                                           f"last stable offset had passed it when the micro-batch was planned")
                    continue
                quiet_since = time.monotonic()
                if got:
                    pending.extend(got)
                if pending and (got is None or len(pending) >= CHUNK):
                    yield self._rows(pending, ordinal, position)
                    position += len(pending)
                    pending = []
                if got is None:
                    return
        finally:
            reader.close()

    def _rows(self, records: list, ordinal: int, position: int) -> Any:
        if self.bundled:
            return to_batch([(list(records), None)], [None], [MIN_W], [seq_of(self.index, ordinal, position)], [BUNDLE], [self.index])
        n = len(records)
        seqs = [seq_of(self.index, ordinal, p) for p in range(position, position + n)]
        return to_batch(list(records), [None] * n, [MIN_W] * n, seqs, [RECORD] * n, [self.index] * n)
