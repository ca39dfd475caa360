"""Connectors as PyFlink's ``pyflink.datastream.connectors`` exposes them.

Sources go to ``env.from_source(source, watermark_strategy, name)``, sinks to
``stream.sink_to(sink)``; ``Source`` and ``Sink`` are the bases to implement your own.

>>> from flinkpy.datastream.connectors import NumberSequenceSource, Source
>>> isinstance(NumberSequenceSource(0, 9), Source)
True
"""

from flinkpy.connectors.base import Boundedness, Sink, Source
from flinkpy.connectors.datagen import DataGeneratorSource
from flinkpy.datastream.connectors.file_system import (
    BucketAssigner,
    DefaultRollingPolicy,
    FileSink,
    FileSource,
    FileSourceBuilder,
    OnCheckpointRollingPolicy,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from flinkpy.datastream.connectors.iceberg import IcebergSink
from flinkpy.datastream.connectors.jdbc import JdbcConnectionOptions, JdbcExactlyOnceOptions, JdbcExecutionOptions, JdbcSink
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
from flinkpy.datastream.connectors.redis import (
    RedisStreamsOffsetsInitializer,
    RedisStreamsSink,
    RedisStreamsSource,
    RedisUpsertSink,
    StreamEntry,
)
from flinkpy.connectors.postgres import PostgresBatchSink, PostgresSink, PostgresUpsertSink
from flinkpy.connectors.socket_source import SocketTextSource
from flinkpy.connectors.two_phase_commit import TwoPhaseCommitSink, TwoPhaseCommitSinkWriter

__all__ = [
    "Boundedness",
    "DataGeneratorSource",
    "BucketAssigner",
    "DefaultRollingPolicy",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "IcebergSink",
    "JdbcConnectionOptions",
    "JdbcExactlyOnceOptions",
    "JdbcExecutionOptions",
    "JdbcSink",
    "NumberSequenceSource",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "PostgresBatchSink",
    "PostgresSink",
    "PostgresUpsertSink",
    "RedisStreamsOffsetsInitializer",
    "RedisStreamsSink",
    "RedisStreamsSource",
    "RedisUpsertSink",
    "RollingPolicy",
    "Sink",
    "SocketTextSource",
    "Source",
    "StreamEntry",
    "StreamFormat",
    "TwoPhaseCommitSink",
    "TwoPhaseCommitSinkWriter",
]

from flinkpy.unsupported import module_getattr as _module_getattr  # noqa: E402

#: a PyFlink name this module lacks says so, and what to use instead (flinkpy.unsupported)
__getattr__ = _module_getattr(__name__)
