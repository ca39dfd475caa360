"""Real PostgreSQL and Redis servers for the connector tests: started from the distribution's
binaries on a free loopback port in a temporary directory, stopped (and checked gone) afterwards.

``tests/run`` installs the packages when they are missing; a test that needs a server the
machine cannot run fails with a message saying what to install — it is never skipped silently.

PostgreSQL refuses to run as root, so under root ``initdb`` and ``postgres`` run as the
``postgres`` OS user (created by the Debian package). The server is a direct child of the test
process (not daemonized through ``pg_ctl``), so a stop leaves no zombie holding its pid file.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _poll(predicate: Any, timeout: float, what: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode} while starting:\n{_tail(log)}")
        if predicate():
            return
        time.sleep(0.02)
    pytest.fail(f"{what} not ready after {timeout}s:\n{_tail(log)}")


def _tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# ---- PostgreSQL -----------------------------------------------------------------------------


def postgres_bindir() -> Path:
    found = shutil.which("postgres")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if candidates:
        return Path(candidates[-1]).parent
    pytest.fail("PostgreSQL is not installed: run tests/run (it installs it), or `apt-get install postgresql`")


class PostgresServer:
    """One PostgreSQL server with ``max_prepared_transactions`` > 0 (two-phase commit)."""

    def __init__(self, base: Path) -> None:
        self.bindir = postgres_bindir()
        self.port = free_port()
        self.root = base / f"pg-{self.port}"
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.proc: subprocess.Popen | None = None
        self._as_user: dict[str, Any] = {}
        if os.geteuid() == 0:
            self._as_user = {"user": "postgres", "group": "postgres"}

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        self.root.mkdir(parents=True)
        if self._as_user:
            shutil.chown(self.root, "postgres", "postgres")
            # the postgres user must be able to reach the directory through its parents
            for parent in self.root.parents:
                if parent == Path("/"):
                    break
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    os.chmod(parent, mode | 0o001)
        subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"],
            check=True,
            capture_output=True,
            timeout=120,
            **self._as_user,
        )

    def start(self) -> None:
        logf = open(self.log, "ab")  # noqa: SIM115 - the server's log, closed with the process
        if self._as_user:
            shutil.chown(self.log, "postgres", "postgres")
        self.proc = subprocess.Popen(
            [
                str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root),
                "-c", "listen_addresses=127.0.0.1", "-c", "max_prepared_transactions=64",
                "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
            ],
            stdout=logf,
            stderr=subprocess.STDOUT,
            **self._as_user,
        )
        logf.close()
        _poll(self._ready, 60, "postgres", self.proc, self.log)

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def connect(self, **kw: Any) -> Any:
        import psycopg

        return psycopg.connect(self.dsn, autocommit=True, **kw)

    def query(self, sql: str, params: Any = None) -> list[tuple]:
        with self.connect() as conn:
            return conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Any = None) -> None:
        with self.connect() as conn:
            conn.execute(sql, params)

    def prepared(self) -> list[str]:
        return [r[0] for r in self.query("SELECT gid FROM pg_prepared_xacts ORDER BY gid")]

    def reset(self) -> None:
        """Roll back every prepared transaction (they hold locks) and drop the test tables."""
        for gid in self.prepared():
            self.execute(f"ROLLBACK PREPARED '{gid}'")
        with self.connect() as conn:
            tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()]
            for t in tables:
                conn.execute(f'DROP TABLE IF EXISTS "{t}" CASCADE')

    def kill(self) -> None:
        assert self.proc is not None
        _stop(self.proc, signal.SIGKILL)

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc, signal.SIGINT)  # "fast" shutdown


# ---- Redis ----------------------------------------------------------------------------------


class RedisServer:
    """One redis-server with an append-only file fsynced on every write (nothing acknowledged
    is lost if the server is killed)."""

    def __init__(self, base: Path) -> None:
        binary = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
        if binary is None:
            pytest.fail("redis-server is not installed: run tests/run (it installs it), or `apt-get install redis-server`")
        self.binary = binary
        self.port = free_port()
        self.root = base / f"redis-{self.port}"
        self.log = self.root / "redis.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root),
                "--daemonize", "no", "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                "--logfile", str(self.log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        _poll(self._ready, 30, "redis-server", self.proc, self.log)

    def _ready(self) -> bool:
        import redis

        try:
            return bool(self.client().ping())
        except redis.ConnectionError:
            return False

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=10)

    def reset(self) -> None:
        self.client().flushall()

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)


# ---- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _postgres_server(tmp_path_factory: pytest.TempPathFactory):
    server = PostgresServer(tmp_path_factory.mktemp("postgres"))
    server.init()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def postgres(_postgres_server: PostgresServer):
    """A running PostgreSQL (shared by the session), clean: no tables, no prepared transactions."""
    _postgres_server.reset()
    yield _postgres_server
    _postgres_server.reset()


@pytest.fixture(scope="session")
def _redis_server(tmp_path_factory: pytest.TempPathFactory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_server(_redis_server: RedisServer):
    """A running redis-server (shared by the session), flushed before and after the test."""
    _redis_server.reset()
    yield _redis_server
    _redis_server.reset()
