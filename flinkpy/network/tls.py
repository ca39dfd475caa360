"""TLS for the cluster's connections, from PEM files (Flink's ``security.ssl.*`` keys).

Two kinds, as in Flink:

- **internal** (``security.ssl.internal.*``): every connection between cluster processes (the
  JobManager's RPC endpoint, TaskManagers, the data channels between tasks) is mutual TLS; both
  ends present a certificate signed by a CA of the truststore and check the other's. Host names
  are not checked (one certificate may serve every host; trust comes from the CA). The cluster
  secret's challenge (:mod:`flinkpy.network.auth`) still runs inside the TLS session.
- **rest** (``security.ssl.rest.*``): HTTPS for the REST API; clients check the server's
  certificate against their truststore, and with ``authentication-enabled`` present their own.

:class:`~flinkpy.protocol.deployment.TlsFiles` is the typed record of one kind's files (a task
receives it in its deployment); :func:`internal_files` and
:func:`rest_files` read it from a :class:`flinkpy.config.Config` (None when the kind is off) and
refuse an enabled kind whose files are missing, with the key to set. The ``*_context`` functions
load the files once into an :class:`ssl.SSLContext`; a file that is not PEM is refused naming it.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from flinkpy.errors import ConfigurationError
from flinkpy.protocol.deployment import TlsFiles


def internal_files(config: Any) -> TlsFiles | None:
    """The internal TLS files of ``config``; None when ``security.ssl.internal.enabled`` is off."""
    if not config.get("security.ssl.internal.enabled"):
        return None
    files = TlsFiles(config.get("security.ssl.internal.keystore"), config.get("security.ssl.internal.truststore"),
                     config.get("security.ssl.internal.key-password"), key=config.get("security.ssl.internal.key"))
    for key, value in (("keystore", files.keystore), ("truststore", files.truststore)):
        if not value:
            raise ConfigurationError(f"security.ssl.internal.enabled is true but security.ssl.internal.{key} is not set",
                                     remedy=f"set security.ssl.internal.{key} to a PEM file, or turn internal TLS off")
    return files


def rest_files(config: Any, *, server: bool) -> TlsFiles | None:
    """The REST TLS files of ``config`` for a server (``server``) or a client; None when
    ``security.ssl.rest.enabled`` is off. A server needs its keystore; a client its truststore
    (and its keystore too when the server authenticates clients)."""
    if not config.get("security.ssl.rest.enabled"):
        return None
    mutual = bool(config.get("security.ssl.rest.authentication-enabled"))
    files = TlsFiles(config.get("security.ssl.rest.keystore"), config.get("security.ssl.rest.truststore"),
                     config.get("security.ssl.rest.key-password"), mutual, key=config.get("security.ssl.rest.key"))
    needed = ["keystore"] + (["truststore"] if mutual else []) if server else ["truststore"] + (["keystore"] if mutual else [])
    for key in needed:
        if not getattr(files, key):
            who = "the REST server" if server else "a REST client"
            raise ConfigurationError(f"security.ssl.rest.enabled is true but security.ssl.rest.{key} ({who} needs it) is not set",
                                     remedy=f"set security.ssl.rest.{key} to a PEM file, or turn REST TLS off")
    return files


def rest_client_context(config: Any) -> ssl.SSLContext:
    """A client's context for an ``https://`` JobManager: its certificate checked against
    ``security.ssl.rest.truststore`` (the system's CAs when that is unset), this client's own
    certificate from ``security.ssl.rest.keystore`` presented when the server authenticates
    clients (``security.ssl.rest.authentication-enabled``)."""
    truststore = config.get("security.ssl.rest.truststore")
    if not truststore:
        return ssl.create_default_context()
    files = TlsFiles(config.get("security.ssl.rest.keystore"), truststore, config.get("security.ssl.rest.key-password"),
                     bool(config.get("security.ssl.rest.authentication-enabled")), key=config.get("security.ssl.rest.key"))
    return client_context(files, "security.ssl.rest")


def server_context(files: TlsFiles, what: str) -> ssl.SSLContext:
    """A server side context: presents the keystore; checks clients when ``files.mutual``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, files, what)
    if files.mutual:
        _load_trust(ctx, files, what)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(files: TlsFiles, what: str, *, check_hostname: bool = False) -> ssl.SSLContext:
    """A client side context: checks the server against the truststore; presents the keystore
    when there is one (always for internal TLS, which is mutual)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    _load_trust(ctx, files, what)
    ctx.verify_mode = ssl.CERT_REQUIRED
    if files.keystore and files.mutual:
        _load_chain(ctx, files, what)
    return ctx


def _load_chain(ctx: ssl.SSLContext, files: TlsFiles, what: str) -> None:
    path = _existing(files.keystore, f"{what}.keystore")
    key = _existing(files.key, f"{what}.key") if files.key else None
    try:
        ctx.load_cert_chain(path, keyfile=key, password=files.key_password)
    except (ssl.SSLError, ValueError) as e:
        given = f"{what}.keystore {path} and {what}.key {key} are no" if key else f"{what}.keystore {path} holds no"
        raise ConfigurationError(f"{given} PEM certificate chain and private key flinkpy can use ({e})",
                                 remedy="give a PEM file with the certificate chain and its private key (and set the key password if it is encrypted)") from None


def _load_trust(ctx: ssl.SSLContext, files: TlsFiles, what: str) -> None:
    path = _existing(files.truststore, f"{what}.truststore")
    try:
        ctx.load_verify_locations(cafile=path)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigurationError(f"{what}.truststore {path} holds no PEM CA certificate ({e})",
                                 remedy="give a PEM file of the CA certificates that sign the cluster's certificates") from None


def _existing(path: str | None, key: str) -> str:
    if not path or not Path(path).is_file():
        raise ConfigurationError(f"{key}: no such file {path!r}", remedy=f"set {key} to a readable PEM file on this host")
    return path
