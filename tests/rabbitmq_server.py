"""A real RabbitMQ server for the RabbitMQ connector's tests (fixture ``rabbitmq``, one per module).

Debian's ``rabbitmq-server`` package (3.10) installs without starting anything; ``tests/run``
installs it when missing. The server runs as a plain child process in a private directory: its
own Erlang port mapper (``epmd``) on a free port first, so that nothing of it outlives the test
(RabbitMQ would otherwise fork a daemon of its own), then ``rabbitmq-server`` with every path,
name and port in its environment, bound to 127.0.0.1. It is ready when a pika connection opens;
after a restart, when a passive declare of a queue answers (durable queues come back a moment
after the listener: shared/INFRA.md "RabbitMQ 3.10").
"""

from __future__ import annotations

import glob
import os
import random
import signal
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from servers import _poll, _stop, _tail

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


def _epmd() -> str:
    found = sorted(glob.glob("/usr/lib/erlang/erts-*/bin/epmd"))
    if not found or not os.path.exists(SERVER):
        pytest.fail("RabbitMQ is not installed: run tests/run (it installs it), or `apt-get install rabbitmq-server`")
    return found[-1]


def _distinct_ports(n: int) -> list[int]:
    """``n`` different free loopback ports below the kernel's ephemeral range. Not ports the
    kernel hands out itself: while the node is down (a crash test) the job's sources keep
    connecting to its port, and a connection whose ephemeral source port is that very port
    connects to itself (TCP's simultaneous open) and holds it; any outgoing connection may
    take the distribution port likewise."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()  # which free ports: no bearing on what a test checks
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(10_000, max(10_001, low))
        if port not in ports and _bindable(port):
            ports.append(port)
    return ports


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class _Exited:
    """A stand-in for a process that has already ended (``_poll`` asks it nothing useful)."""

    returncode = None

    def poll(self) -> None:
        return None


class RabbitMQServer:
    """One RabbitMQ node on free loopback ports, in its own directory; user guest/guest."""

    def __init__(self, base: Path) -> None:
        self.port, self.epmd_port, self.dist_port = _distinct_ports(3)
        self.root = base / f"rabbitmq-{self.port}"
        self.log = self.root / "server.log"
        self.proc: subprocess.Popen | None = None
        self.epmd: subprocess.Popen | None = None
        self.ready_queue: str | None = None  # a durable queue whose passive declare says "ready"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def _env(self) -> dict[str, str]:
        d = str(self.root)
        env = dict(os.environ)
        env.update({
            "HOME": d,
            "RABBITMQ_NODENAME": f"flinkpy{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": f"{d}/mnesia",
            "RABBITMQ_LOG_BASE": f"{d}/log",
            "RABBITMQ_CONFIG_FILE": f"{d}/rabbitmq.conf",
            "RABBITMQ_ENABLED_PLUGINS_FILE": f"{d}/enabled_plugins",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        })
        return env

    def start(self) -> None:
        epmd = _epmd()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n")
        (self.root / "enabled_plugins").write_text("[].\n")
        with open(self.log, "ab") as log:
            self.epmd = subprocess.Popen([epmd, "-address", "127.0.0.1", "-port", str(self.epmd_port)],
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self.proc = subprocess.Popen([SERVER], stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                         env=self._env(), start_new_session=True)
        _poll(self._ready, 60, "RabbitMQ", self.proc, self.log)

    def _ready(self) -> bool:
        import pika

        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.url + "?connection_attempts=1&socket_timeout=1"))
        except Exception:  # noqa: BLE001 - not listening yet
            return False
        try:
            ch = conn.channel()
            if self.ready_queue:
                ch.queue_declare(self.ready_queue, passive=True)
            return True
        except Exception:  # noqa: BLE001 - durable queues not back yet
            return False
        finally:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            _stop(self.proc, sig, timeout=30)
            # the Erlang VM's helpers (erl_child_setup, inet_gethost) are in its session
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _poll(self._port_free, 30, "RabbitMQ's port to be released", _Exited(), self.log)

    def _port_free(self) -> bool:
        return _bindable(self.port)

    def restart(self) -> None:
        """Crash the node (SIGKILL: no shutdown) and start it again with its data: confirmed
        persistent messages and streams are on disk and come back."""
        self.stop(signal.SIGKILL)
        if not _bindable(self.dist_port):
            # while the node was down an outgoing connection took its distribution port as its
            # ephemeral port: the node needs it only among its peers (none), so take another
            (self.dist_port,) = _distinct_ports(1)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([SERVER], stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                         env=self._env(), start_new_session=True)
        _poll(self._ready, 60, "RabbitMQ (restarted)", self.proc, self.log)

    def close(self) -> None:
        self.stop()
        if self.epmd is not None:
            _stop(self.epmd, signal.SIGKILL)

    def tail(self) -> str:
        return _tail(self.log)

    # -- helpers for tests ------------------------------------------------------------------

    def connect(self) -> Any:
        import pika

        return pika.BlockingConnection(pika.URLParameters(self.url))

    def new_queue(self, *, stream: bool = False, prefix: str = "q") -> str:
        """A fresh durable queue (a classic one, or a stream queue)."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        args = {"x-queue-type": "stream"} if stream else None
        with self.connect() as conn:
            conn.channel().queue_declare(name, durable=True, arguments=args)
        self.ready_queue = name
        return name

    def publish(self, queue: str, bodies: list[bytes], *, correlation_ids: list[str] | None = None, pace_s: float = 0) -> None:
        """Publish persistent messages to ``queue`` through the default exchange, with
        publisher confirms (every one is on the server when this returns); ``pace_s``: at
        least that long between two messages."""
        import pika

        with self.connect() as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            for i, body in enumerate(bodies):
                props = pika.BasicProperties(delivery_mode=2,
                                             correlation_id=correlation_ids[i] if correlation_ids else None)
                ch.basic_publish("", queue, body, props)
                if pace_s:
                    conn.sleep(pace_s)

    def message_count(self, queue: str) -> int:
        """Messages ready in a classic queue (not counting unacknowledged ones)."""
        with self.connect() as conn:
            return conn.channel().queue_declare(queue, passive=True).method.message_count


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory):
    server = RabbitMQServer(tmp_path_factory.mktemp("rabbitmq"))
    try:
        server.start()
        yield server
    finally:
        server.close()
