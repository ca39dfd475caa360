"""User function classes at PyFlink's path, ``pyflink.datastream.functions``.

The definitions live in :mod:`flinkpy.common.functions`: the task and the Spark runner run them and
the state backends implement them, and those layers sit below the DataStream API (which hands
jobs to the client); see tests/test_layers.py. This module keeps a PyFlink program's import
working unchanged.
"""

from flinkpy.common.functions import (
    IN,
    OUT,
    KEY,
    W,
    W2,
    TimeDomain,
    RuntimeContext,
    TimerService,
    Function,
    MapFunction,
    FlatMapFunction,
    FilterFunction,
    ReduceFunction,
    AggregateFunction,
    KeySelector,
    Partitioner,
    CoMapFunction,
    CoFlatMapFunction,
    ProcessFunction,
    KeyedProcessFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    BaseBroadcastProcessFunction,
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
    SinkFunction,
    SourceFunction,
    FunctionSnapshotContext,
    FunctionInitializationContext,
    CheckpointedFunction,
    CheckpointListener,
)
# PyFlink keeps the window functions in this module too
from flinkpy.common.window import (
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)

__all__ = [
    "TimeDomain",
    "RuntimeContext",
    "TimerService",
    "Function",
    "MapFunction",
    "FlatMapFunction",
    "FilterFunction",
    "ReduceFunction",
    "AggregateFunction",
    "KeySelector",
    "Partitioner",
    "CoMapFunction",
    "CoFlatMapFunction",
    "ProcessFunction",
    "KeyedProcessFunction",
    "CoProcessFunction",
    "KeyedCoProcessFunction",
    "BaseBroadcastProcessFunction",
    "BroadcastProcessFunction",
    "KeyedBroadcastProcessFunction",
    "SinkFunction",
    "SourceFunction",
    "FunctionSnapshotContext",
    "FunctionInitializationContext",
    "CheckpointedFunction",
    "CheckpointListener",
    "AllWindowFunction",
    "ProcessAllWindowFunction",
    "ProcessWindowFunction",
    "WindowFunction",
]
