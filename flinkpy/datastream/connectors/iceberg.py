"""The Iceberg sink: a stream appended to an Apache Iceberg table exactly once (pyiceberg, the
``iceberg`` extra). See :mod:`flinkpy.connectors.iceberg`.

>>> from flinkpy.datastream.connectors.iceberg import IcebergSink
>>> IcebergSink.guarantee
'exactly-once'
"""

from flinkpy.connectors.iceberg import (
    IcebergCommittable,
    IcebergSink,
    IcebergSinkBuilder,
    IcebergUpsertUnsupportedError,
)
from flinkpy.connectors.iceberg_table import IcebergSchemaError

__all__ = [
    "IcebergCommittable",
    "IcebergSchemaError",
    "IcebergSink",
    "IcebergSinkBuilder",
    "IcebergUpsertUnsupportedError",
]
