"""How a command finds its cluster: one rule for every command that talks to a JobManager.

``-m/--jobmanager`` wins over ``$FLINKPY_JOBMANAGER``, which wins over the cluster recorded in
the cluster home (``$FLINKPY_HOME`` or ``~/.flinkpy``): ``flinkpy.client.Client.from_environment``
applies the rule, and the client it returns serves Spark jobs of the home too. The engine is
imported lazily so that ``flinkpy --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flinkpy.client.client import Client
    from flinkpy.network.rest_client import RestClient
    from flinkpy.cluster import ClusterHome
    from flinkpy.config import Config

HOME_ENV = "FLINKPY_HOME"

JOBMANAGER_HELP = "Address of the JobManager (HOST:PORT or http://HOST:PORT); default: $FLINKPY_JOBMANAGER, then the cluster in $FLINKPY_HOME."


def cluster_home() -> ClusterHome:
    """The cluster home of this invocation ($FLINKPY_HOME, else ~/.flinkpy)."""
    from flinkpy.cluster import ClusterHome

    return ClusterHome.resolve()


def home_dir() -> Path:
    """The directory holding flinkpy.yaml; the same rule as ClusterHome.resolve()."""
    from flinkpy.config import default_home

    return default_home()


#: keys each cluster process reads itself, from its host's flinkpy.yaml and environment, so
#: that one given with -D to a command that starts processes would not act
PER_HOST_PREFIXES = ("security.ssl.",)


def load_cli_config(overrides: list[str] | None = None, *, starts_processes: bool = False) -> Config:
    """The effective configuration for this invocation: file, environment, then -D flags.

    ``starts_processes``: the command starts cluster processes, which read the per-host keys
    (TLS) themselves; such a key given with -D is refused rather than silently ignored."""
    from flinkpy.config import SCHEMA, load_config, parse_override
    from flinkpy.errors import UsageError

    pairs = dict(parse_override(item) for item in overrides or [])
    for key in pairs if starts_processes else ():
        if key.startswith(PER_HOST_PREFIXES):
            raise UsageError(f"-D {key}: every cluster process reads this key from its host's flinkpy.yaml or environment, not from -D",
                             remedy=f"put it in {home_dir() / 'flinkpy.yaml'} on each host, or export {SCHEMA[key].env_var}")
    return load_config(home_dir(), overrides=pairs)


def token_of(home: ClusterHome) -> str | None:
    try:
        return home.token()
    except (OSError, LookupError):
        # No token on this machine: send none and let the server answer 401 with its remedy.
        return None


def client(jobmanager: str | None) -> Client:
    """The client for this invocation: -m, else $FLINKPY_JOBMANAGER, else the cluster (and the
    Spark jobs) of the cluster home. It connects on first use: exit 3 when no cluster runs."""
    from flinkpy.client.client import Client

    return Client.from_environment(jobmanager)


def rest_client(jobmanager: str | None) -> RestClient:
    """The REST client of the cluster this invocation addresses, or exit 3 if there is none."""
    return client(jobmanager).cluster
