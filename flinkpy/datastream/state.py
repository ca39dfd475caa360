"""Keyed state as a user function sees it, at PyFlink's path, ``pyflink.datastream.state``.

The definitions live in :mod:`flinkpy.common.state`: the task and the Spark runner run them and
the state backends implement them, and those layers sit below the DataStream API (which hands
jobs to the client); see tests/test_layers.py. This module keeps a PyFlink program's import
working unchanged.
"""

from flinkpy.common.state import (
    State,
    ValueState,
    AppendingState,
    MergingState,
    ListState,
    ReducingState,
    AggregatingState,
    MapState,
    ReadOnlyBroadcastState,
    BroadcastState,
    StateTtlConfig,
    StateDescriptor,
    ValueStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    AggregatingStateDescriptor,
)

__all__ = [
    "State",
    "ValueState",
    "AppendingState",
    "MergingState",
    "ListState",
    "ReducingState",
    "AggregatingState",
    "MapState",
    "ReadOnlyBroadcastState",
    "BroadcastState",
    "StateTtlConfig",
    "StateDescriptor",
    "ValueStateDescriptor",
    "ListStateDescriptor",
    "MapStateDescriptor",
    "ReducingStateDescriptor",
    "AggregatingStateDescriptor",
]
