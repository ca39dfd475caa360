"""flinkpy's ``pyflink.common``: types, configuration, time, serialization, strategies.

>>> from flinkpy.common import Row, Types, Duration
>>> Row(word="a", count=1), Types.TUPLE([Types.STRING(), Types.INT()]), Duration.of_seconds(1)
(Row(word='a', count=1), TUPLE(STRING, INT), Duration.of_millis(1000))
"""

from flinkpy.common.configuration import Configuration
from flinkpy.common.execution_config import ExecutionConfig
from flinkpy.common.job_status import JobStatus
from flinkpy.common.restart_strategy import RestartStrategies, RestartStrategyConfiguration
from flinkpy.common.serialization import (
    ByteArraySchema,
    DeserializationSchema,
    Encoder,
    SerializationSchema,
    SimpleStringSchema,
)
from flinkpy.common.time import Duration, Time
from flinkpy.common.typeinfo import TypeInformation, Types
from flinkpy.common.types import Row, RowKind
from flinkpy.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

__all__ = [
    "Configuration",
    "DeserializationSchema",
    "Duration",
    "Encoder",
    "ExecutionConfig",
    "JobStatus",
    "RestartStrategies",
    "RestartStrategyConfiguration",
    "Row",
    "RowKind",
    "SerializationSchema",
    "ByteArraySchema",
    "SimpleStringSchema",
    "Time",
    "TimestampAssigner",
    "TypeInformation",
    "Types",
    "WatermarkStrategy",
]

from flinkpy.unsupported import module_getattr as _module_getattr  # noqa: E402

#: a PyFlink name this module lacks says so, and what to use instead (flinkpy.unsupported)
__getattr__ = _module_getattr(__name__)
