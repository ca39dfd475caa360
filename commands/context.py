"""How a command finds its cluster: one rule for every command that talks to a JobManager.

``-m/--jobmanager`` wins over ``$FLINKPY_JOBMANAGER``, which wins over the cluster recorded in
the cluster home (``$FLINKPY_HOME`` or ``~/.flinkpy``). The engine is imported lazily so that
``flinkpy --help`` stays fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flinkpy.errors import ClusterUnreachableError

if TYPE_CHECKING:
    from flinkpy.client.rest import RestClient
    from flinkpy.config import Config

JOBMANAGER_ENV = "FLINKPY_JOBMANAGER"
HOME_ENV = "FLINKPY_HOME"

JOBMANAGER_HELP = "Address of the JobManager (HOST:PORT or http://HOST:PORT); default: $FLINKPY_JOBMANAGER, then the cluster in $FLINKPY_HOME."


def cluster_home() -> Any:
    """The cluster home (``flinkpy.cluster.ClusterHome``)."""
    from flinkpy.cluster import ClusterHome

    return ClusterHome.resolve()


def home_dir() -> Path:
    """The directory holding flinkpy.yaml; the same rule as ClusterHome.resolve()."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".flinkpy").expanduser()


def load_cli_config(overrides: list[str] | None = None) -> Config:
    """The effective configuration for this invocation: file, environment, then -D flags."""
    from flinkpy.config import load_config, parse_override

    pairs = dict(parse_override(item) for item in overrides or [])
    return load_config(home_dir(), overrides=pairs)


def token_of(home: Any) -> str | None:
    try:
        return home.token()
    except (OSError, LookupError):
        # No token on this machine: send none and let the server answer 401 with its remedy.
        return None


def rest_client(jobmanager: str | None) -> RestClient:
    """A REST client for the cluster this invocation addresses, or exit 3 if there is none."""
    from flinkpy.client.rest import RestClient

    home = cluster_home()
    address = jobmanager or os.environ.get(JOBMANAGER_ENV)
    if not address:
        from flinkpy.cluster import find_cluster

        info = find_cluster(home)
        if info is None:
            raise ClusterUnreachableError(
                "no cluster is running",
                remedy="start one with 'flinkpy cluster start', or pass -m HOST:PORT",
            )
        from flinkpy.cluster import rest_client_for

        return rest_client_for(info, token_of(home))
    return RestClient(address, token_of(home))


def job_rest_client(jobmanager: str | None, job_id: str) -> RestClient:
    """The client for one job: its Spark driver when it is a Spark job registered in the
    cluster home (and no -m names a JobManager), else the cluster's REST client."""
    if not (jobmanager or os.environ.get(JOBMANAGER_ENV)):
        from flinkpy.spark.control_registry import driver_client

        home = cluster_home()
        client = driver_client(home.path, job_id, token_of(home))
        if client is not None:
            return client
    return rest_client(jobmanager)
