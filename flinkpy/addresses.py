"""Where each process of a cluster listens, and the address it gives the others: Flink's
address keys, resolved in one place.

Every endpoint has two addresses. The *advertised* one is what other processes connect to
(``jobmanager.rpc.address``, ``rest.address``, ``taskmanager.host``); the *bind* one is the
local address the socket listens on (``jobmanager.bind-host``, ``rest.bind-address``,
``taskmanager.bind-host``). A bind address left unset is the advertised one, so a cluster whose
keys are all unset listens on loopback only, and listening on every interface (``0.0.0.0``) is
always a choice an operator writes down. The REST address falls back to the JobManager's
address, as in Flink. A TaskManager without ``taskmanager.host`` advertises the local address
of its connection to the JobManager (the interface that reaches the cluster), as Flink's does.

>>> a = resolve({"jobmanager.rpc.address": "10.0.0.5", "jobmanager.bind-host": "0.0.0.0"}.get)
>>> a.rpc
Endpoint(advertised='10.0.0.5', bind='0.0.0.0', port=0)
>>> a.rest.advertised, a.rest.bind
('10.0.0.5', '10.0.0.5')
>>> a.taskmanager.advertised is None
True
>>> resolve({"rest.address": "0.0.0.0"}.get)
Traceback (most recent call last):
...
flinkpy.errors.ConfigurationError: rest.address is 0.0.0.0, a wildcard that no client can connect to ...

This module reads no socket and no configuration file: it takes a ``key -> value`` lookup (a
``Config.get``) and returns typed records that the launchers hand to each process.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from typing import Any, Callable

from flinkpy.errors import ConfigurationError

#: the address every endpoint has when nothing is configured: this host only
LOOPBACK = "127.0.0.1"

#: (advertised key, bind key, port key) of each endpoint
RPC_KEYS = ("jobmanager.rpc.address", "jobmanager.bind-host", "jobmanager.rpc.port")
REST_KEYS = ("rest.address", "rest.bind-address", "rest.port")
TASKMANAGER_KEYS = ("taskmanager.host", "taskmanager.bind-host", "taskmanager.data.port")


@dataclass(frozen=True)
class Endpoint:
    """One listening endpoint: what others connect to, what the socket binds, which port.

    ``advertised`` is None only for a TaskManager that learns it from its JobManager connection
    (:meth:`with_local_address`); ``port`` 0 takes any free port.
    """

    advertised: str | None
    bind: str | None
    port: int = 0

    def with_local_address(self, local: str) -> "Endpoint":
        """This endpoint with ``local`` (the address a connection to the JobManager left from)
        standing in for what is unset.

        >>> Endpoint(None, None).with_local_address("10.0.0.7")
        Endpoint(advertised='10.0.0.7', bind='10.0.0.7', port=0)
        >>> Endpoint(None, "0.0.0.0").with_local_address("10.0.0.7")
        Endpoint(advertised='10.0.0.7', bind='0.0.0.0', port=0)
        """
        advertised = self.advertised or local
        return replace(self, advertised=advertised, bind=self.bind or advertised)


@dataclass(frozen=True)
class ClusterAddresses:
    """The three endpoints of a cluster: the JobManager's RPC and REST, the TaskManagers' data."""

    rpc: Endpoint
    rest: Endpoint
    taskmanager: Endpoint


def is_wildcard(address: str) -> bool:
    """True for an address that means "every interface" (``0.0.0.0``, ``::``).

    >>> is_wildcard("0.0.0.0"), is_wildcard("::"), is_wildcard("10.0.0.5"), is_wildcard("host-a")
    (True, True, False, False)
    """
    try:
        return ipaddress.ip_address(address).is_unspecified
    except ValueError:
        return False  # a host name


def url_host(address: str) -> str:
    """``address`` as it stands in a URL (an IPv6 literal in brackets).

    >>> url_host("10.0.0.5"), url_host("::1")
    ('10.0.0.5', '[::1]')
    """
    return f"[{address}]" if ":" in address else address


def _advertised(value: Callable[[str], Any], key: str, fallback: str | None) -> str | None:
    address = value(key) or fallback
    if address is not None and is_wildcard(address):
        raise ConfigurationError(
            f"{key} is {address}, a wildcard that no client can connect to",
            remedy=f"set {key} to an address the other hosts reach this one at, and the bind key "
            f"({dict((a, b) for a, b, _ in (RPC_KEYS, REST_KEYS, TASKMANAGER_KEYS))[key]}) to {address} to listen everywhere",
        )
    return address


def resolve(value: Callable[[str], Any]) -> ClusterAddresses:
    """The cluster's endpoints from a lookup of configuration values (``Config.get``; a key it
    does not know may answer None). ``ConfigurationError`` for an advertised wildcard."""
    rpc_address = _advertised(value, RPC_KEYS[0], LOOPBACK)
    rest_address = _advertised(value, REST_KEYS[0], rpc_address)
    tm_address = _advertised(value, TASKMANAGER_KEYS[0], None)
    return ClusterAddresses(
        rpc=Endpoint(rpc_address, value(RPC_KEYS[1]) or rpc_address, int(value(RPC_KEYS[2]) or 0)),
        rest=Endpoint(rest_address, value(REST_KEYS[1]) or rest_address, int(value(REST_KEYS[2]) or 0)),
        taskmanager=Endpoint(tm_address, value(TASKMANAGER_KEYS[1]) or tm_address, int(value(TASKMANAGER_KEYS[2]) or 0)),
    )


def parse_host_port(text: str, *, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` too) split and checked; ``ConfigurationError`` naming ``what``.

    >>> parse_host_port("10.0.0.5:6123", what="--jobmanager")
    ('10.0.0.5', 6123)
    >>> parse_host_port("[::1]:6123", what="--jobmanager")
    ('::1', 6123)
    >>> parse_host_port("10.0.0.5", what="--jobmanager")
    Traceback (most recent call last):
    ...
    flinkpy.errors.ConfigurationError: --jobmanager '10.0.0.5' is not HOST:PORT ...
    """
    host, sep, port = text.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"{what} '{text}' is not HOST:PORT",
                                 remedy="write the JobManager's RPC address and port, e.g. 10.0.0.5:6123 (jobmanager.rpc.address and jobmanager.rpc.port)")
    return host, int(port)
