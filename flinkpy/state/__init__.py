"""Keyed state: key groups, and the state backends that keep state by key group.

>>> from flinkpy.state import HeapKeyedStateBackend, key_group_range_for_operator
>>> HeapKeyedStateBackend(128, key_group_range_for_operator(128, 2, 1)).key_group_range
range(64, 128)
"""

from flinkpy.state.heap import HeapKeyedStateBackend
from flinkpy.state.key_groups import (
    DEFAULT_MAX_PARALLELISM,
    KeyGroupAssigner,
    assign_to_key_group,
    compute_operator_index_for_key_group,
    key_group_range_for_operator,
    stable_hash,
)

__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "HeapKeyedStateBackend",
    "KeyGroupAssigner",
    "assign_to_key_group",
    "compute_operator_index_for_key_group",
    "key_group_range_for_operator",
    "stable_hash",
]
