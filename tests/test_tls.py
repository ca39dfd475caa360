"""TLS for the cluster's connections (security.ssl.internal.* and security.ssl.rest.*), with
certificates made by trustme.

One module cluster runs with both kinds on: its TaskManagers, its tasks' data channels and its
REST API speak TLS, and a job's records cross a keyed channel between two TaskManagers. Then
what is refused: a plain connection to the RPC endpoint, a data channel without a trusted
certificate, a TaskManager whose certificate another CA signed, a CLI that does not trust the
JobManager's certificate, files that are not PEM, and TLS keys given with -D.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import trustme

from conftest import run_cli, running_cluster, wait_for
from flinkpy.errors import ExitCode
from flinkpy.network import auth
from flinkpy.network.channels import DATA, ChannelAcceptor, make_output_channel, open_input_channel
from flinkpy.network.connection import connect, listen
from flinkpy.network.tls import client_context, server_context
from flinkpy.protocol.deployment import TlsFiles

pytestmark = pytest.mark.timeout(90)


def pem_files(directory: Path, ca: trustme.CA, name: str) -> TlsFiles:
    """A keystore (certificate chain and key) issued by ``ca`` and a truststore of ``ca``; the
    chain and the key also as files of their own (``.crt``, ``.key``)."""
    directory.mkdir(parents=True, exist_ok=True)
    keystore, truststore = directory / f"{name}.pem", directory / f"{name}-ca.pem"
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(keystore))
    # the same certificate as a chain file and a key file of their own
    chain, key = directory / f"{name}.crt", directory / f"{name}.key"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(truststore))
    return TlsFiles(str(keystore), str(truststore), key=str(key))


def tls_yaml(files: TlsFiles) -> str:
    """Both kinds on; REST's certificate chain and key in files of their own when ``files`` has
    a key file (as cert-manager hands them out), internal's in one keystore."""
    rest_key = f"security.ssl.rest.key: {files.key}\n" if files.key else ""
    rest_chain = str(Path(files.keystore).with_suffix(".crt")) if files.key else files.keystore
    return (f"security.ssl.internal.enabled: true\nsecurity.ssl.internal.keystore: {files.keystore}\n"
            f"security.ssl.internal.truststore: {files.truststore}\n"
            f"security.ssl.rest.enabled: true\nsecurity.ssl.rest.keystore: {rest_chain}\n{rest_key}"
            f"security.ssl.rest.truststore: {files.truststore}\n")


class TlsCluster:
    def __init__(self, home: Path, info: Any, files: TlsFiles, ca: trustme.CA) -> None:
        self.home, self.info, self.files, self.ca = home, info, files, ca

    def env(self, **extra: str) -> dict[str, str]:
        return {"FLINKPY_HOME": str(self.home), "FLINKPY_JOBMANAGER": "", **extra}


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    home = tmp_path_factory.mktemp("tls-home")
    ca = trustme.CA()
    files = pem_files(tmp_path_factory.mktemp("tls-pem"), ca, "cluster")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FLINKPY_HOME", str(home))
        mp.delenv("FLINKPY_JOBMANAGER", raising=False)
        with running_cluster(home, taskmanagers=2, slots=1, config=tls_yaml(files)) as info:
            yield TlsCluster(home, info, files, ca)


def test_a_keyed_job_runs_exactly_over_tls_and_the_cli_speaks_https(tls_cluster: TlsCluster, tmp_path: Path) -> None:
    assert tls_cluster.info.rest_address.startswith("https://127.0.0.1:")
    job = tmp_path / "job.py"
    # records of 20 kB: larger than one TLS record, so a channel's reads leave decrypted bytes
    # in the TLS layer that a select() on the socket would not see
    job.write_text(
        "from flinkpy.datastream import StreamExecutionEnvironment\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.from_collection(list(range(3000))).map(lambda x: (x % 5, 1, 'x' * (20000 if x % 100 == 0 else 10)))"
        ".key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1], b[2][:1])).map(lambda t: (t[0], t[1])).print()\n"
        "env.execute('over tls')\n"
    )
    res = run_cli("run", "--json", "-d", "-p", "2", str(job), env=tls_cluster.env())
    assert res.returncode == 0, res.stderr
    job_id = json.loads(res.stdout)["jobs"][0]["jid"]

    def state() -> str:
        res = run_cli("job", "show", job_id, "--json", env=tls_cluster.env())
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)["state"]

    wait_for(lambda: state() == "FINISHED", timeout=60, message="the job over TLS did not finish")
    out = "".join(Path(tm.stdout_path).read_text() for tm in tls_cluster.info.taskmanagers if Path(tm.stdout_path).exists())
    totals: dict[int, int] = {}
    for key, count in re.findall(r"^(?:\d+> )?\((\d+), (\d+)\)$", out, re.M):
        totals[int(key)] = max(totals.get(int(key), 0), int(count))
    assert totals == {k: 600 for k in range(5)}, totals


def test_a_plain_connection_to_the_rpc_endpoint_is_refused(tls_cluster: TlsCluster) -> None:
    """The cluster secret alone no longer opens the RPC endpoint: without TLS the handshake
    never gets an answer it can read."""
    record = json.loads((tls_cluster.home / "jobmanager.json").read_text())
    secret = (tls_cluster.home / "secret").read_text().strip().encode()
    with pytest.raises((auth.AuthenticationFailed, OSError)):
        connect(record["rpc_host"], int(record["rpc_port"]), secret, timeout=5).close()
    # with the cluster's certificate it is the secret's handshake that admits
    tls = client_context(tls_cluster.files, "security.ssl.internal")
    connect(record["rpc_host"], int(record["rpc_port"]), secret, timeout=5, tls=tls).close()


def test_a_taskmanager_with_a_certificate_of_another_ca_is_refused(tls_cluster: TlsCluster, tmp_path: Path) -> None:
    other = pem_files(tmp_path / "pem", trustme.CA(), "stranger")
    home = tmp_path / "host-b"
    home.mkdir()
    (home / "flinkpy.yaml").write_text(tls_yaml(other))
    secret = home / "copied-secret"
    secret.write_text((tls_cluster.home / "secret").read_text())
    secret.chmod(0o600)
    record = json.loads((tls_cluster.home / "jobmanager.json").read_text())
    res = run_cli("taskmanager", "start", "--jobmanager", f"{record['rpc_host']}:{record['rpc_port']}", "--secret-file", str(secret),
                  "--timeout", "20s", env={"FLINKPY_HOME": str(home), "FLINKPY_CLUSTER_SECRET": ""})
    assert res.returncode == ExitCode.CONFIGURATION, res.stderr
    assert "TLS with the JobManager" in res.stderr and "security.ssl.internal" in res.stderr, res.stderr


def test_a_client_that_does_not_trust_the_certificate_is_told_what_to_set(tls_cluster: TlsCluster, tmp_path: Path) -> None:
    stranger = pem_files(tmp_path / "pem", trustme.CA(), "client")
    res = run_cli("list", env=tls_cluster.env(FLINKPY_SECURITY_SSL_REST_TRUSTSTORE=str(stranger.truststore)))
    assert res.returncode == ExitCode.CONFIGURATION, res.stderr
    assert "does not trust" in res.stderr and "security.ssl.rest.truststore" in res.stderr and "Traceback" not in res.stderr


def test_a_data_channel_needs_a_trusted_certificate_and_carries_large_frames(tmp_path: Path) -> None:
    ca = trustme.CA()
    files = pem_files(tmp_path / "ours", ca, "tm")
    stranger = pem_files(tmp_path / "theirs", trustme.CA(), "stranger")
    secret = b"s" * 32
    listener = listen("127.0.0.1", 0)
    port = listener.getsockname()[1]
    acceptor = ChannelAcceptor(listener, secret, "job", 0, {(1, 0)}, server_context(files, "security.ssl.internal"))
    try:
        common = dict(job_id="job", edge_id=1, producer=0, consumer=0, initial_credit=4, describe="edge 1", timeout=5.0)
        for refused_tls in (None, client_context(stranger, "security.ssl.internal")):
            with pytest.raises((OSError, auth.AuthenticationFailed)):
                open_input_channel("127.0.0.1", port, secret, tls=refused_tls, **common)
        wait_for(lambda: acceptor.rejected == 2, timeout=10, message="both strangers rejected")
        consumer = open_input_channel("127.0.0.1", port, secret, tls=client_context(files, "security.ssl.internal"), **common)
        (sock, reader), = acceptor.wait_all(timeout=10).values()
        producer = make_output_channel(sock, reader, 1, 0, "edge 1")
        payloads = [bytes([i]) * (70_000 if i % 2 else 10) for i in range(4)]
        sender = threading.Thread(target=lambda: [producer.send_data(p) for p in payloads])
        sender.start()
        got: list[bytes] = []
        while len(got) < len(payloads):
            got += [payload for kind, payload in consumer.reader.feed() or [] if kind == DATA]
        sender.join(10)
        assert got == payloads
        assert isinstance(consumer.sock, ssl.SSLSocket)
    finally:
        acceptor.close()


def test_files_that_are_not_pem_and_tls_keys_given_with_d_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    bogus = tmp_path / "keystore.jks"
    bogus.write_bytes(b"\xfe\xed\xfe\xed not a PEM file")
    (home / "flinkpy.yaml").write_text(tls_yaml(TlsFiles(str(bogus), str(bogus))))
    env = {"FLINKPY_HOME": str(home), "FLINKPY_JOBMANAGER": ""}
    res = run_cli("cluster", "start", "--rest-port", "0", "--taskmanagers", "1", env=env)
    try:
        assert res.returncode != 0, res.stdout
        assert "keystore" in res.stderr and str(bogus) in res.stderr and "PEM" in res.stderr, res.stderr
    finally:
        run_cli("cluster", "stop", env=env)
    res = run_cli("cluster", "start", "-D", "security.ssl.internal.enabled=true", env={"FLINKPY_HOME": str(tmp_path / "h2")})
    assert res.returncode == ExitCode.USAGE, res.stderr
    assert "flinkpy.yaml" in res.stderr and "FLINKPY_SECURITY_SSL_INTERNAL_ENABLED" in res.stderr
