"""File sources and sinks under PyFlink's module path ``pyflink.datastream.connectors.file_system``.

>>> from flinkpy.datastream.connectors.file_system import FileSource, StreamFormat
>>> FileSource.for_record_stream_format(StreamFormat.text_line_format(), "in/").build()
FileSource(StreamFormat.text_line_format('UTF-8'), ['in/'])
"""

from flinkpy.connectors.file_sink import (
    BucketAssigner,
    DefaultRollingPolicy,
    FileSink,
    OnCheckpointRollingPolicy,
    OutputFileConfig,
    RollingPolicy,
)
from flinkpy.connectors.file_source import FileSource, FileSourceBuilder, StreamFormat

__all__ = [
    "BucketAssigner",
    "DefaultRollingPolicy",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
]
