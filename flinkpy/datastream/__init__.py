"""The DataStream API, shaped like ``pyflink.datastream``: rename the imports and run."""

from flinkpy.common.async_functions import AsyncFunction, AsyncRetryPredicate, AsyncRetryStrategy
from flinkpy.datastream import async_retry_predicates, async_retry_strategies
from flinkpy.datastream.async_data_stream import AsyncDataStream
from flinkpy.datastream.broadcast_stream import BroadcastConnectedStream, BroadcastStream
from flinkpy.datastream.connected_streams import ConnectedStreams
from flinkpy.datastream.data_stream import CloseableIterator, DataStream, DataStreamSink, KeyedStream
from flinkpy.datastream.functions import (
    AggregateFunction,
    CoGroupFunction,
    FlatJoinFunction,
    JoinFunction,
    ProcessJoinFunction,
    AllWindowFunction,
    BroadcastProcessFunction,
    CheckpointedFunction,
    CheckpointListener,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    Partitioner,
    FilterFunction,
    FlatMapFunction,
    Function,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
    SourceFunction,
    TimerService,
)
from flinkpy.datastream.joins import CoGroupedStreams, IntervalJoin, IntervalJoined, JoinedStreams
from flinkpy.datastream.output_tag import OutputTag
from flinkpy.datastream.stream_execution_environment import RuntimeExecutionMode, StreamExecutionEnvironment
from flinkpy.datastream.window_stream import AllWindowedStream, WindowedStream

__all__ = [
    "AggregateFunction",
    "AsyncDataStream",
    "AsyncFunction",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "async_retry_predicates",
    "async_retry_strategies",
    "CoGroupFunction",
    "CoGroupedStreams",
    "FlatJoinFunction",
    "IntervalJoin",
    "IntervalJoined",
    "JoinFunction",
    "JoinedStreams",
    "ProcessJoinFunction",
    "AllWindowFunction",
    "CheckpointedFunction",
    "CheckpointListener",
    "ProcessAllWindowFunction",
    "ProcessWindowFunction",
    "WindowFunction",
    "WindowedStream",
    "AllWindowedStream",
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "CheckpointingMode",
    "CloseableIterator",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "ConnectedStreams",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "Partitioner",
    "DataStream",
    "DataStreamSink",
    "FilterFunction",
    "FlatMapFunction",
    "Function",
    "KeySelector",
    "KeyedProcessFunction",
    "KeyedStream",
    "MapFunction",
    "OutputTag",
    "ProcessFunction",
    "ReduceFunction",
    "RuntimeContext",
    "RuntimeExecutionMode",
    "SinkFunction",
    "SourceFunction",
    "StreamExecutionEnvironment",
    "TimerService",
]


class CheckpointingMode:
    """Barrier alignment mode of checkpoints (used from the checkpointing release on)."""

    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"

# what PyFlink's pyflink.datastream also exports from its submodules
from flinkpy.datastream.checkpoint_config import CheckpointConfig, ExternalizedCheckpointCleanup  # noqa: E402
from flinkpy.datastream.functions import TimeDomain  # noqa: E402
from flinkpy.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend, StateBackend  # noqa: E402
from flinkpy.datastream.window import (  # noqa: E402
    CountWindow,
    GlobalWindow,
    MergingWindowAssigner,
    TimeWindow,
    Trigger,
    TriggerResult,
    Window,
    WindowAssigner,
)

__all__ += [
    "CheckpointConfig", "ExternalizedCheckpointCleanup", "TimeDomain", "StateBackend", "HashMapStateBackend",
    "EmbeddedRocksDBStateBackend", "Window", "TimeWindow", "CountWindow", "GlobalWindow", "WindowAssigner",
    "MergingWindowAssigner", "TriggerResult", "Trigger",
]

from flinkpy.unsupported import module_getattr as _module_getattr  # noqa: E402

#: a PyFlink name this module lacks says so, and what to use instead (flinkpy.unsupported)
__getattr__ = _module_getattr(__name__)
