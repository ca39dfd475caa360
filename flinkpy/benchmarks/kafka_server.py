"""A noida-db Kafka-protocol server for the Kafka benchmark (part ``kafka``), started by the
benchmark itself on a free loopback port in a directory of its own, and stopped with it.

noida-db (``pip install noida-db``) is a Kafka-protocol server that installs from PyPI and
starts in milliseconds; its transactions, ``read_committed`` and fencing behave like Kafka's,
which every contender of the benchmark relies on for exactly-once.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

INSTALL = "pip install noida-db confluent-kafka"


def available() -> str | None:
    """None when noida-db and confluent-kafka import; else what is missing, in one line."""
    try:
        import confluent_kafka  # noqa: F401
        import noida_db  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed ({INSTALL})"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaServer:
    """One noida-db server (Kafka only) under ``root``; a context manager."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "KafkaServer":
        import noida_db

        binary = Path(noida_db.__file__).parent / "noida-db"
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "server.log", "ab") as log:
            self.proc = subprocess.Popen([str(binary), "start", "--data-dir", str(self.root / "data"), "--only", "kafka",
                                          "--kafka-port", str(self.port)], stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.root, start_new_session=True)
        deadline = time.monotonic() + 30
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"noida-db did not start (log: {self.root / 'server.log'})")
            time.sleep(0.05)
        return self

    def _ready(self) -> bool:
        try:
            return bool(self.admin().list_topics(timeout=1).brokers)
        except Exception:  # noqa: BLE001 - not listening yet
            return False

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int) -> str:
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        for future in admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = admin.list_topics(name, timeout=5).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return name
            time.sleep(0.05)
        raise RuntimeError(f"topic {name} with {partitions} partitions not visible after 30 s")
