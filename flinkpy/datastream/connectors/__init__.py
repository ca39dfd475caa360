"""Connectors as PyFlink's ``pyflink.datastream.connectors`` exposes them.

Sources go to ``env.from_source(source, watermark_strategy, name)``, sinks to
``stream.sink_to(sink)``; ``Source`` and ``Sink`` are the bases to implement your own.

>>> from flinkpy.datastream.connectors import NumberSequenceSource, Source
>>> isinstance(NumberSequenceSource(0, 9), Source)
True
"""

from flinkpy.connectors.base import Boundedness, Sink, Source
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
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

__all__ = [
    "Boundedness",
    "BucketAssigner",
    "DefaultRollingPolicy",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "NumberSequenceSource",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "Sink",
    "Source",
    "StreamFormat",
]
