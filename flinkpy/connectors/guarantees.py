"""What each connector guarantees, and what a job built from them guarantees end to end.

Exactly-once *state* is not exactly-once *output*. A job's output is exactly-once only when
every source is replayable (it rewinds to the checkpoint's position), checkpoints align barriers
(EXACTLY_ONCE mode), and every sink is transactional (two-phase commit on checkpoints) or
idempotent (rewriting a deterministic result changes nothing). Each connector class declares its
part as ``guarantee`` and ``needs`` (see :class:`flinkpy.connectors.base.Source`); this module
reads those declarations into

- the connectors table (``CATALOG``), rendered for docs/connectors.md and the man page
  flinkpy-connectors(7) (both generated from it, so they cannot drift), and
- a job's guarantees (:func:`job_guarantees`): per source and sink, and the weakest link, as
  ``flinkpy info`` prints them and the client warns about at submission.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

#: sinks whose exactly-once output needs read_committed consumers
KAFKA_TRANSACTIONAL = ("KafkaSink", "FlinkKafkaProducer")

#: strongest first
LEVELS = ("exactly-once", "at-least-once", "none")


@dataclass(frozen=True)
class Connector:
    """One row of the connectors table."""

    kind: str  # "source" | "sink"
    name: str
    api: str  # how a program makes it
    target: str  # "module:Class" declaring guarantee and needs
    guarantee_override: str | None = None
    needs_override: str | None = None

    def cls(self) -> Any:
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)

    @property
    def guarantee(self) -> str:
        return self.guarantee_override or self.cls().guarantee

    @property
    def needs(self) -> str:
        return self.needs_override or self.cls().needs


CATALOG: tuple[Connector, ...] = (
    Connector("source", "Collection", "env.from_collection(items)", "flinkpy.connectors.collection:CollectionSource"),
    Connector("source", "Number sequence", "NumberSequenceSource(start, end)", "flinkpy.connectors.number_sequence:NumberSequenceSource"),
    Connector("source", "Data generator", "DataGeneratorSource(fn, count, records_per_second)", "flinkpy.connectors.datagen:DataGeneratorSource"),
    Connector("source", "Files (static set)", "FileSource.for_record_stream_format(StreamFormat.text_line_format(), path)", "flinkpy.connectors.file_source:FileSource"),
    Connector("source", "Files (monitored directory)", "FileSource....monitor_continuously(Duration.of_seconds(n))", "flinkpy.connectors.file_source:FileSource"),
    Connector("source", "Redis Streams", "RedisStreamsSource.builder()...build()", "flinkpy.connectors.redis_streams:RedisStreamsSource"),
    Connector("source", "Kafka", "KafkaSource.builder()...build(), FlinkKafkaConsumer(topics, schema, props)", "flinkpy.connectors.kafka_source:KafkaSource"),
    Connector("source", "Verification sequence", "SequenceSource(keys, per_key)", "flinkpy.connectors.verification:SequenceSource"),
    Connector("source", "Socket text", "env.socket_text_stream(host, port)", "flinkpy.connectors.socket_source:SocketTextSource"),
    Connector("source", "SourceFunction", "env.add_source(fn)", "flinkpy.connectors.function_source:FunctionSource"),
    Connector("sink", "Files (row format)", "FileSink.for_row_format(path, encoder).build()", "flinkpy.connectors.file_sink:FileSink"),
    Connector("sink", "PostgreSQL, two-phase commit", "PostgresSink.builder()...build(), JdbcSink.exactly_once_sink(...)", "flinkpy.connectors.postgres:PostgresSink"),
    Connector("sink", "PostgreSQL, batches", "PostgresBatchSink(dsn, sql), JdbcSink.sink(sql, ...)", "flinkpy.connectors.postgres:PostgresBatchSink"),
    Connector("sink", "PostgreSQL, upsert", "PostgresSink.upsert(dsn, table, columns, keys), JdbcSink.sink(upsert SQL, ...)", "flinkpy.connectors.postgres:PostgresUpsertSink"),
    Connector("sink", "Kafka, transactions", "KafkaSink.builder()...set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).build()", "flinkpy.connectors.kafka_sink:KafkaSink"),
    Connector("sink", "Kafka, flushed at checkpoints", "KafkaSink.builder()...set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE).build()", "flinkpy.connectors.kafka_sink:KafkaSink",
              "at-least-once", "checkpointing (flushed at every checkpoint); replays are written again"),
    Connector("sink", "Redis, upsert", "RedisUpsertSink.builder()...build()", "flinkpy.connectors.redis_sinks:RedisUpsertSink"),
    Connector("sink", "Redis Streams", "RedisStreamsSink.builder()...build()", "flinkpy.connectors.redis_sinks:RedisStreamsSink"),
    Connector("sink", "Verification", "VerifyingSink(directory)", "flinkpy.connectors.verification:VerifyingSink"),
    Connector("sink", "Print", "stream.print()", "flinkpy.connectors.print_sink:PrintSink"),
    Connector("sink", "Collect", "stream.execute_and_collect()", "flinkpy.connectors.collect:CollectSink"),
    Connector("sink", "SinkFunction", "stream.add_sink(fn)", "flinkpy.connectors.function_sink:FunctionSink"),
    Connector("sink", "Discarding", "DiscardingSink()", "flinkpy.connectors.print_sink:DiscardingSink"),
)


def catalog_rows() -> list[dict[str, str]]:
    return [
        {"kind": c.kind, "connector": c.name, "api": c.api, "guarantee": c.guarantee, "needs": c.needs}
        for c in CATALOG
    ]


def markdown_table() -> str:
    """The table for docs/connectors.md (between its ``connectors-table`` markers)."""
    lines = ["| | connector | how | guarantee | what it needs |", "|---|---|---|---|---|"]
    for r in catalog_rows():
        lines.append(f"| {r['kind']} | {r['connector']} | `{r['api']}` | **{r['guarantee']}** | {r['needs']} |")
    return "\n".join(lines) + "\n"


# -- a job's guarantees ------------------------------------------------------------------------


def weakest(levels: list[str]) -> str:
    """The weakest of some guarantees (an undeclared one counts as "none").

    >>> weakest(["exactly-once", "at-least-once"])
    'at-least-once'
    """
    ranks = [LEVELS.index(x) if x in LEVELS else len(LEVELS) - 1 for x in levels]
    return LEVELS[max(ranks, default=0)]


def _declared(fn: Any) -> tuple[str, str]:
    guarantee = getattr(fn, "guarantee", None) or "none"
    needs = getattr(fn, "needs", "") or ("undeclared: a user's connector (set guarantee and needs on its class)" if not getattr(fn, "guarantee", None) else "")
    return guarantee, needs


def job_guarantees(job: Any) -> dict[str, Any]:
    """Per source and sink of a JobGraph (client side: the connector objects are at hand), the
    checkpointing mode, and the end-to-end guarantee — the weakest link of them all."""
    sources: list[dict[str, str]] = []
    sinks: list[dict[str, str]] = []
    for vertex_id in sorted(job.payloads):
        for op in job.payloads[vertex_id].operators:
            if op.kind not in ("source", "sink"):
                continue
            guarantee, needs = _declared(op.fn)
            entry = {"operator": op.name, "connector": type(op.fn).__name__, "guarantee": guarantee, "needs": needs}
            (sources if op.kind == "source" else sinks).append(entry)
    config = job.config or {}
    interval = config.get("execution.checkpointing.interval")
    mode = (config.get("execution.checkpointing.mode") or "EXACTLY_ONCE").upper()
    if not interval:
        checkpointing = "off"
        by_mode = "none"
    else:
        checkpointing = f"{mode} every {interval}"
        by_mode = "exactly-once" if mode == "EXACTLY_ONCE" else "at-least-once"
    end_to_end = weakest([by_mode] + [s["guarantee"] for s in sources] + [s["guarantee"] for s in sinks])
    return {
        "checkpointing": checkpointing,
        "sources": sources,
        "sinks": sinks,
        "end_to_end": end_to_end,
        "warnings": warnings(checkpointing, sources, sinks),
    }


def check_sinks(job: Any) -> None:
    """Refuse at submission what a sink knows cannot work with the job's configuration (a
    sink's ``check_job_config(config)`` raises a ConfigurationError naming both settings)."""
    for vertex_id in sorted(job.payloads):
        for op in job.payloads[vertex_id].operators:
            check = getattr(op.fn, "check_job_config", None) if op.kind == "sink" else None
            if callable(check):
                check(job.config or {})


def warnings(checkpointing: str, sources: list[dict[str, str]], sinks: list[dict[str, str]]) -> list[str]:
    """What an operator should hear before trusting a checkpointed job's output."""
    if checkpointing == "off":
        return []
    out = []
    for s in sinks:
        if s["connector"] in KAFKA_TRANSACTIONAL and s["guarantee"] == "exactly-once":
            out.append(
                f"sink {s['operator']!r} ({s['connector']}) writes Kafka transactions: consumers downstream "
                "must read with isolation.level=read_committed, or they see aborted records and lose exactly-once"
            )
    for s in sources:
        if s["guarantee"] == "none":
            out.append(
                f"source {s['operator']!r} ({s['connector']}) gives no delivery guarantee: records it read "
                "after the last checkpoint are lost when the job fails, whatever the checkpointing mode"
            )
    return out
