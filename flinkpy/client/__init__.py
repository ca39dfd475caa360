"""The one way to drive flinkpy: :class:`Client` (jobs on a cluster or on Spark drivers alike),
the REST client under it, and the program runner.

Names are imported on first use, so that importing a submodule (as every task process does
with ``flinkpy.program.context``) costs only that submodule.

>>> from flinkpy.client import Client, Deadline
>>> Client("127.0.0.1:8081", token="t").cluster.address
'http://127.0.0.1:8081'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flinkpy.client.client import Client
    from flinkpy.client.operations import Deadline

__all__ = ["Client", "Deadline"]


def __getattr__(name: str) -> object:
    if name == "Client":
        from flinkpy.client.client import Client

        return Client
    if name == "Deadline":
        from flinkpy.client.operations import Deadline

        return Deadline
    raise AttributeError(f"module 'flinkpy.client' has no attribute {name!r}")
