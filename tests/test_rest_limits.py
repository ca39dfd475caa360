"""The REST server's limits against a hostile or broken client, on a real JobManager process.

Found by the fault drill (issue #19): an unauthenticated 300 MiB POST grew the JobManager to
343 MB (the body was read before the token was checked, up to 512 MiB), and a connection that
sent half a header held a thread forever. Here the token is checked from the headers first, a
body over ``rest.server.max-content-length`` is refused with 413 unread, and a request that
does not arrive within ``rest.server.read-timeout`` is disconnected.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from urllib.parse import urlparse

import psutil
import pytest

from conftest import run_cli, running_cluster, wait_for

READ_TIMEOUT_S = 1.0
HUGE = 300 << 20


@pytest.fixture
def guarded_cluster(flinkpy_home: Path):
    """One JobManager and TaskManager whose REST server has a 1 s read timeout and 4 threads."""
    with running_cluster(flinkpy_home, config="rest.server.read-timeout: 1 s\nrest.server.numThreads: 4\n") as info:
        yield info


def _connect(info) -> socket.socket:
    url = urlparse(info.rest_address)
    return socket.create_connection((url.hostname, url.port), timeout=10)


def _response(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = int(next(l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(head.split()[1]), json.loads(rest[:length])


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


@pytest.mark.timeout(60)
def test_unauthenticated_huge_post_is_refused_before_its_body(guarded_cluster) -> None:
    jm = psutil.Process(guarded_cluster.jobmanager_pid)
    rss_before = jm.memory_info().rss
    sock = _connect(guarded_cluster)
    started = time.monotonic()
    sock.sendall(f"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {HUGE}\r\n\r\n".encode())
    # the answer comes from the headers alone: not one byte of the body has been sent
    status, doc = _response(sock)
    assert status == 401 and doc["kind"] == "Authentication"
    assert time.monotonic() - started < 3
    # a client that pushes its 300 MiB anyway is cut off, and the JobManager does not grow
    chunk = bytes(1 << 20)
    sent = 0
    try:
        while sent < HUGE:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    sock.close()
    assert sent < HUGE, "the JobManager read a 300 MiB body from a client without the token"
    assert time.monotonic() - started < 10
    assert jm.memory_info().rss - rss_before < 30 << 20


@pytest.mark.timeout(60)
def test_authenticated_body_over_the_limit_is_answered_413(guarded_cluster, flinkpy_home: Path) -> None:
    token = (flinkpy_home / "secret").read_text().strip()
    sock = _connect(guarded_cluster)
    sock.sendall(f"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: {HUGE}\r\n\r\n".encode())
    status, doc = _response(sock)
    sock.close()
    assert status == 413 and doc["kind"] == "RequestEntityTooLarge"
    assert "rest.server.max-content-length" in doc["remedy"] and str(100 << 20) in doc["errors"][0]


@pytest.mark.timeout(60)
def test_half_a_header_is_disconnected_within_the_read_timeout(guarded_cluster) -> None:
    sock = _connect(guarded_cluster)
    sock.sendall(b"GET /overview HTTP/1.1\r\nHost: x\r\nAuthoriz")
    started = time.monotonic()
    assert _closed_by_server(sock)
    assert time.monotonic() - started < READ_TIMEOUT_S + 2


@pytest.mark.timeout(60)
def test_a_trickling_request_is_disconnected_at_its_deadline(guarded_cluster) -> None:
    """A byte every 0.3 s never trips the per-recv timeout; the request's deadline does."""
    sock = _connect(guarded_cluster)
    started = time.monotonic()
    closed = False
    header = b"GET /overview HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    for byte in header:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            closed = True
            break
        sock.settimeout(0.3)
        try:
            if sock.recv(1) == b"":
                closed = True
                break
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed = True
            break
    assert closed, "the server kept a request that trickled in for 30 s"
    assert time.monotonic() - started < READ_TIMEOUT_S + 2.5


@pytest.mark.timeout(60)
def test_requests_beyond_the_thread_bound_are_answered_busy_and_the_cli_works_after(guarded_cluster, flinkpy_home: Path) -> None:
    token = (flinkpy_home / "secret").read_text().strip()
    # four log followers hold the four threads for as long as they stay connected
    held = [_connect(guarded_cluster) for _ in range(4)]
    for s in held:
        s.sendall(f"GET /jobmanager/log?follow=true&lines=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        assert s.recv(12) == b"HTTP/1.1 200"
    extra = _connect(guarded_cluster)
    extra.sendall(b"GET /overview HTTP/1.1\r\nHost: x\r\n\r\n")
    status, doc = _response(extra)
    assert status == 503 and doc["kind"] == "Busy" and "rest.server.numThreads" in doc["remedy"]
    extra.close()
    for s in held:
        s.close()
    wait_for(lambda: run_cli("list", "--json").returncode == 0, timeout=10, message="the CLI served once the followers left")


def test_a_secret_readable_by_others_is_refused_with_the_fix(flinkpy_home: Path) -> None:
    secret = flinkpy_home / "secret"
    secret.write_text("0" * 64)
    os.chmod(secret, 0o644)
    res = run_cli("list", "-m", "127.0.0.1:1")
    assert res.returncode == 8, res.stderr
    assert f"chmod 600 {secret}" in res.stderr and "0644" in res.stderr
    res = run_cli("cluster", "start", "--taskmanagers", "1")
    assert res.returncode == 8, res.stderr
    assert f"chmod 600 {secret}" in res.stderr
    assert not (flinkpy_home / "cluster.json").exists()
