"""Contender (b) of the Kafka benchmark: the same job in Quix Streams with
``processing_guarantee="exactly-once"`` and commits every second. Words are keyed with
``group_by`` (Quix repartitions through a topic of its own), counted in a stateful ``apply``
and written as ``"word count"``. It runs until stopped.

    python -m flinkpy.benchmarks.kafka_quix BOOTSTRAP INPUT OUTPUT GROUP STATE_DIR
"""

from __future__ import annotations

import sys

INSTALL = "pip install quixstreams"


def count(word: str, state: object) -> str:
    n = state.get("n", 0) + 1  # type: ignore[attr-defined]
    state.set("n", n)  # type: ignore[attr-defined]
    return f"{word} {n}"


def main(bootstrap: str, source: str, sink: str, group: str, state_dir: str) -> None:
    from quixstreams import Application

    app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                      processing_guarantee="exactly-once", commit_interval=1.0, state_dir=state_dir,
                      consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    lines = app.topic(source, value_deserializer="str", key_deserializer="str")
    out = app.topic(sink, value_serializer="str", key_serializer="str")
    sdf = app.dataframe(lines)
    sdf = sdf.apply(str.split, expand=True)
    sdf = sdf.group_by(lambda word: word, name="word", key_serializer="str", key_deserializer="str",
                      value_serializer="str", value_deserializer="str")
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(out)
    app.run()


if __name__ == "__main__":
    main(*sys.argv[1:6])
