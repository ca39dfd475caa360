"""The connectors' optional drivers: psycopg for PostgreSQL, redis-py for Redis, pika for
RabbitMQ, pyiceberg for Iceberg.

flinkpy installs without them, so that a job which writes to neither pulls in neither; the
extras bring them: ``pip install 'flinkpy[postgres]'``, ``pip install 'flinkpy[redis]'``,
``pip install 'flinkpy[rabbitmq]'``, ``pip install 'flinkpy[iceberg]'``. A
connector asks for its driver when it is built, so a job program that uses one without its
driver fails before it is submitted, and ``flinkpy run`` reports it on one line with the
command that fixes it (exit 8, like a Spark runner without PySpark); it asks again wherever it
talks to its server, because the task processes import it on their own.

>>> require(POSTGRES).__name__
'psycopg'
>>> err = MissingDriverError(POSTGRES, ModuleNotFoundError("No module named 'psycopg'"))
>>> print(err)
the PostgreSQL connectors need psycopg, which cannot be imported here: No module named 'psycopg' (run "pip install 'flinkpy[postgres]'")
>>> err.exit_code
8
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType

from flinkpy.errors import ConfigurationError


@dataclass(frozen=True)
class Driver:
    """A driver package and the extra of flinkpy's that installs it."""

    #: the top-level module to import
    module: str
    #: the name of the extra in flinkpy's pyproject.toml
    extra: str
    #: who needs it, as the error message says it
    needed_by: str

    @property
    def pip_command(self) -> str:
        return f"pip install 'flinkpy[{self.extra}]'"


POSTGRES = Driver("psycopg", "postgres", "the PostgreSQL connectors")
REDIS = Driver("redis", "redis", "the Redis connectors")
ICEBERG = Driver("pyiceberg", "iceberg", "the Iceberg connectors")
RABBITMQ = Driver("pika", "rabbitmq", "the RabbitMQ connectors")


class MissingDriverError(ConfigurationError):
    """A connector's driver is not installed (or does not import) in this Python."""

    def __init__(self, driver: Driver, cause: ImportError) -> None:
        super().__init__(
            f"{driver.needed_by} need {driver.module}, which cannot be imported here: {cause}",
            remedy=f'run "{driver.pip_command}"',
        )
        self.driver = driver


def require(driver: Driver, module: str | None = None) -> ModuleType:
    """``driver``'s module (or its submodule ``module``), imported; MissingDriverError if absent.

    Cheap once imported (a dictionary lookup), so call sites on hot paths may call it each time.
    """
    name = module or driver.module
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise MissingDriverError(driver, e) from None
