"""The network layer: framing, the HMAC handshake, the credit ledger, and strangers on real ports.

Socket tests use ``socket.socketpair`` and threads (no cluster); the "never unpickle before
authentication" tests attack a running cluster's JobManager RPC port and a task's data listener
with a pickle that would create a file if it were ever loaded, then check the cluster still runs
jobs correctly.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import socket
import struct
import threading
import time
from pathlib import Path

import psutil
import pytest

from conftest import flinkpy_processes, wait_for
from flinkpy.network import auth
from flinkpy.network import channels as net
from flinkpy.network.credit import ProtocolViolation, ReceiverCredit, SenderCredit
from flinkpy.network.framing import HEADER, HEADER_SIZE, MAX_FRAME, FrameError, FrameReader, encode, send_frame

SEED = int(os.environ.get("FLINKPY_TEST_SEED", "0")) or random.randrange(1, 2**31)
print(f"test_network seed: {SEED} (rerun with FLINKPY_TEST_SEED={SEED})")


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def run_in_thread(fn, *args) -> tuple[threading.Thread, dict]:
    """Run ``fn`` in a thread; the dict gets ``result`` or ``error``."""
    out: dict = {}

    def target() -> None:
        try:
            out["result"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, out


# -- framing -----------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_frames_round_trip(pair) -> None:
    a, b = pair
    frames = [(1, b""), (2, b"x"), (3, bytes(range(256)) * 300), (255, b"\x00" * 70000)]
    t, _ = run_in_thread(lambda: [send_frame(a, k, p) for k, p in frames])
    reader = FrameReader(b)
    got = [reader.read_one() for _ in frames]
    t.join(5)
    assert got == frames
    a.shutdown(socket.SHUT_WR)
    assert reader.read_one() is None  # clean close between frames


@pytest.mark.timeout(10)
def test_frames_split_across_recv_calls(pair) -> None:
    """Byte by byte and in random cuts: the reader reassembles frames whatever recv() returns."""
    rng = random.Random(SEED)
    a, b = pair
    frames = [(rng.randrange(256), rng.randbytes(rng.randrange(0, 3000))) for _ in range(40)]
    wire = b"".join(encode(k, p) for k, p in frames)

    def dribble() -> None:
        pos = 0
        while pos < len(wire):
            n = 1 if pos < 200 else rng.randrange(1, 700)
            a.sendall(wire[pos : pos + n])
            pos += n
        a.shutdown(socket.SHUT_WR)

    t, out = run_in_thread(dribble)
    reader = FrameReader(b, chunk=7)  # tiny reads: most frames arrive in many pieces
    got = list(reader.frames())
    t.join(5)
    assert "error" not in out
    assert got == frames


@pytest.mark.timeout(10)
def test_many_frames_in_one_recv(pair) -> None:
    a, b = pair
    frames = [(i % 7, str(i).encode()) for i in range(500)]
    a.sendall(b"".join(encode(k, p) for k, p in frames) + encode(9, b"partial")[:-3])
    reader = FrameReader(b, chunk=1 << 20)
    got = reader.feed()
    while len(got) < len(frames):
        got += reader.feed()
    assert got == frames
    assert reader.buffered  # the partial frame waits for its last bytes
    a.sendall(b"ial")
    assert reader.feed() == [(9, b"partial")]
    assert not reader.buffered


@pytest.mark.timeout(10)
def test_read_one_leaves_later_frames_buffered(pair) -> None:
    a, b = pair
    a.sendall(encode(1, b"one") + encode(2, b"two"))
    reader = FrameReader(b)
    assert reader.read_one() == (1, b"one")
    assert reader.buffered
    assert reader.drain_buffered() == [(2, b"two")]


@pytest.mark.timeout(10)
def test_oversized_length_is_refused(pair) -> None:
    a, b = pair
    a.sendall(HEADER.pack(MAX_FRAME + 1, 2) + b"x" * 10)
    with pytest.raises(FrameError, match="exceeds the limit"):
        FrameReader(b).feed()
    c, d = socket.socketpair()
    try:
        c.sendall(HEADER.pack(0xFFFFFFFF, 1))
        with pytest.raises(FrameError, match="exceeds the limit"):
            FrameReader(d).read_one()
    finally:
        c.close()
        d.close()


@pytest.mark.timeout(10)
def test_close_inside_a_frame_is_an_error(pair) -> None:
    a, b = pair
    a.sendall(encode(1, b"abcdef")[:-2])
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(FrameError):
        FrameReader(b).read_one()


# -- authentication ----------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_handshake_with_the_same_secret(pair) -> None:
    a, b = pair
    t, out = run_in_thread(auth.accept_handshake, a, b"secret", 5.0)
    auth.connect_handshake(b, b"secret", 5.0)
    t.join(5)
    assert out == {"result": None}
    # the connection is usable afterwards, with the original (blocking) timeouts
    assert a.gettimeout() is None and b.gettimeout() is None
    send_frame(b, 1, b"after")
    assert FrameReader(a).read_one() == (1, b"after")


@pytest.mark.timeout(10)
def test_handshake_with_different_secrets_fails_on_both_sides(pair) -> None:
    a, b = pair
    t, out = run_in_thread(auth.accept_handshake, a, b"ours", 5.0)
    with pytest.raises(auth.AuthenticationFailed, match="wrong cluster secret"):
        auth.connect_handshake(b, b"theirs", 5.0)
    t.join(5)
    assert isinstance(out.get("error"), auth.AuthenticationFailed)


@pytest.mark.timeout(10)
def test_acceptor_that_does_not_know_the_secret_is_refused_by_the_connector(pair) -> None:
    """Mutual: an impostor acceptor that accepts anything still cannot prove itself."""
    a, b = pair

    def impostor() -> None:
        a.sendall(auth.MAGIC + os.urandom(auth.NONCE))
        n = len(auth.MAGIC) + auth.DIGEST + auth.NONCE
        got = b""
        while len(got) < n:
            got += a.recv(n - len(got))
        a.sendall(b"\x01" + os.urandom(auth.DIGEST))

    t, _ = run_in_thread(impostor)
    with pytest.raises(auth.AuthenticationFailed, match="could not prove"):
        auth.connect_handshake(b, b"secret", 5.0)
    t.join(5)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("garbage", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 64, os.urandom(69), b"FLKP1" + b"\x00" * 64])
def test_acceptor_refuses_garbage(pair, garbage: bytes) -> None:
    a, b = pair
    t, out = run_in_thread(auth.accept_handshake, a, b"secret", 5.0)
    b.sendall(garbage)
    t.join(5)
    assert isinstance(out.get("error"), auth.AuthenticationFailed)


@pytest.mark.timeout(10)
def test_connector_refuses_a_garbage_hello(pair) -> None:
    a, b = pair
    a.sendall(b"SSH-2.0-OpenSSH_9.6\r\n" + b"x" * 32)
    with pytest.raises(auth.AuthenticationFailed, match="does not speak"):
        auth.connect_handshake(b, b"secret", 5.0)


@pytest.mark.timeout(10)
def test_silent_peers_are_refused_within_the_timeout(pair) -> None:
    a, b = pair
    started = time.monotonic()
    with pytest.raises(auth.AuthenticationFailed):
        auth.accept_handshake(a, b"secret", timeout=0.3)
    assert time.monotonic() - started < 2.0
    c, d = socket.socketpair()
    try:
        started = time.monotonic()
        with pytest.raises(auth.AuthenticationFailed):
            auth.connect_handshake(d, b"secret", timeout=0.3)
        assert time.monotonic() - started < 2.0
    finally:
        c.close()
        d.close()


@pytest.mark.timeout(10)
def test_peer_closing_mid_handshake_is_refused(pair) -> None:
    a, b = pair
    t, out = run_in_thread(auth.accept_handshake, a, b"secret", 5.0)
    b.recv(len(auth.MAGIC) + auth.NONCE)
    b.sendall(auth.MAGIC + b"\x01" * 10)
    b.shutdown(socket.SHUT_WR)
    t.join(5)
    assert isinstance(out.get("error"), auth.AuthenticationFailed)


# -- credit ledger (pure) -----------------------------------------------------------------------


def test_sender_credit_spends_only_what_was_granted() -> None:
    c = SenderCredit()
    assert not c.spend() and c.available == 0 and c.spent == 0
    c.grant(3)
    assert [c.spend() for _ in range(4)] == [True, True, True, False]
    assert c.available == 0 and c.spent == 3
    c.grant(1)
    assert c.spend() and c.spent == 4
    for bad in (0, -1):
        with pytest.raises(ValueError):
            c.grant(bad)


def test_receiver_credit_detects_a_protocol_violation() -> None:
    r = ReceiverCredit(2)
    r.on_buffer_received()
    r.on_buffer_received()
    with pytest.raises(ProtocolViolation):
        r.on_buffer_received()  # a third buffer without credit
    assert r.on_buffer_processed() == 1
    r.on_buffer_received()
    with pytest.raises(ValueError):
        ReceiverCredit(0)


def test_ledgers_agree_under_a_random_schedule() -> None:
    """Sender and receiver driven by one random schedule: in flight never exceeds the initial credit."""
    rng = random.Random(SEED)
    initial = rng.randrange(1, 8)
    sender, receiver = SenderCredit(), ReceiverCredit(initial)
    sender.grant(initial)
    in_flight, returned = 0, 0
    for _ in range(5000):
        if rng.random() < 0.5 and sender.spend():
            receiver.on_buffer_received()
            in_flight += 1
        elif in_flight:
            in_flight -= 1
            sender.grant(receiver.on_buffer_processed())
            returned += 1
        assert 0 <= in_flight <= initial
        assert sender.available + in_flight == initial == receiver.outstanding + in_flight


@pytest.mark.timeout(10)
def test_output_channel_blocks_without_credit_but_sends_events(pair) -> None:
    """The socket layer over the ledger: data waits for credit, control frames do not."""
    a, b = pair
    out = net.OutputChannel(a, edge_id=1, consumer=0, describe="edge 1 to subtask 0")
    out.credit.grant(1)
    out.send_data(b"first")
    t, res = run_in_thread(out.send_data, b"second")
    out.send_event(net.BARRIER)  # a control frame: no credit needed
    reader = FrameReader(b)
    assert reader.read_one() == (net.DATA, b"first")
    assert reader.read_one() == (net.BARRIER, b"")
    t.join(0.2)
    assert t.is_alive(), "the second buffer was sent without credit"
    b.sendall(net.CREDIT_ONE)
    t.join(5)
    assert not t.is_alive() and "error" not in res
    assert reader.read_one() == (net.DATA, b"second")
    assert out.buffers_sent == 2 and out.backpressured_s > 0


# -- strangers on a running cluster --------------------------------------------------------------


class _Bomb:
    """Unpickling this runs a shell command that creates ``path``."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def attack(port: int, payload: bytes) -> bytes:
    """Send ``payload`` without the handshake; return everything the server sent until it hung up."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.settimeout(10)
        try:
            s.sendall(payload)
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            pass
    return got


def assert_refused(port: int, marker: Path) -> None:
    bomb = pickle.dumps(("register", _Bomb(marker)))
    hello = len(auth.MAGIC) + auth.NONCE
    # a pickled control message in a frame, as an authenticated peer would send it
    got = attack(port, encode(1, bomb))
    assert len(got) == hello and got.startswith(auth.MAGIC), got
    # the magic, a wrong digest, then the bomb: refused with one byte, never unpickled
    got = attack(port, auth.MAGIC + b"\x00" * (auth.DIGEST + auth.NONCE) + encode(1, bomb))
    assert got[:5] == auth.MAGIC and got[hello:] == b"\x00", got
    # garbage
    got = attack(port, os.urandom(4096))
    assert len(got) == hello
    assert not marker.exists(), "a stranger's pickle was loaded before authentication"


def task_listener_ports(job: dict) -> list[int]:
    """The TCP ports the job's task processes listen on (the REST API names their pids)."""
    ports = []
    for v in job["vertices"]:
        for sub in v["subtasks"]:
            try:
                conns = psutil.Process(sub["pid"]).net_connections(kind="tcp")
            except (psutil.Error, TypeError, ValueError):
                continue
            ports += [c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN]
    return ports


LONG_JOB = """
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import NumberSequenceSource

env = StreamExecutionEnvironment.get_execution_environment()
ds = env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
ds.map(lambda n: (n % 10, n)).key_by(lambda t: t[0]).sum(1).add_sink(lambda x: None)
env.execute("long")
"""


@pytest.mark.timeout(90)
def test_strangers_cannot_make_the_cluster_unpickle(cluster, flinkpy_home: Path, tmp_path: Path, monkeypatch, cli) -> None:
    from flinkpy.network.rest_client import RestClient
    from flinkpy.cluster import ClusterHome

    rest = RestClient(cluster.rest_address, ClusterHome(flinkpy_home).token())
    marker = tmp_path / "pwned"
    rpc_port = json.loads((flinkpy_home / "jobmanager.json").read_text())["rpc_port"]
    assert_refused(rpc_port, marker)

    # a running job's data listener (the source tasks listen for the keyed sum's channels)
    job_file = tmp_path / "long.py"
    job_file.write_text(LONG_JOB)
    res = cli("run", "-d", "-p", "2", str(job_file))
    assert res.returncode == 0, res.stderr
    long_id = wait_for(lambda: next((j["jid"] for j in rest.jobs_overview() if j["state"] == "RUNNING"), None), 30, message="the long job running")
    wait_for(lambda: rest.job(long_id)["tasks"]["running"] == 4, 30, message="all tasks of the long job running")
    ports = wait_for(lambda: task_listener_ports(rest.job(long_id)), 10, message="a task listener")
    for port in ports:
        assert_refused(port, marker)

    # the cluster is undisturbed: the long job still runs, every TaskManager is registered,
    # and a new job computes the right answer
    assert rest.job(long_id)["state"] == "RUNNING"
    assert rest.overview()["taskmanagers"] == 2
    monkeypatch.setenv("FLINKPY_JOBMANAGER", cluster.rest_address)
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    ds = env.from_collection(list(range(1000))).map(lambda n: (n % 3, n)).key_by(lambda t: t[0]).reduce(lambda x, y: (x[0], x[1] + y[1]))
    with ds.execute_and_collect() as results:
        finals: dict[int, int] = {}
        for k, v in results:
            finals[k] = max(finals.get(k, 0), v)
    assert finals == {k: sum(n for n in range(1000) if n % 3 == k) for k in range(3)}
    assert rest.job(long_id)["state"] == "RUNNING"
    assert not marker.exists()
    rest.cancel_job(long_id)
    wait_for(lambda: rest.job(long_id)["state"] == "CANCELED", 20, message="the long job canceled")
