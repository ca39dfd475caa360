"""Checkpoint storage: state files and the versioned `_metadata` document on any fsspec URL.

``CheckpointStorage`` writes and reads checkpoints and savepoints (atomically, `_metadata`
last); ``metadata`` defines, validates and summarizes the `_metadata` document.
"""

from flinkpy.checkpoint.metadata import (
    FORMAT,
    METADATA_FILE,
    VERSION,
    CorruptCheckpointError,
    keyed_state,
    new_metadata,
    new_operator,
    new_subtask,
    operator_state,
    summarize,
    validate,
)
from flinkpy.checkpoint.storage import CheckpointStorage, Problem, VerifyReport, checksum_of, savepoint_dir, storage_options

__all__ = [
    "FORMAT",
    "METADATA_FILE",
    "VERSION",
    "CheckpointStorage",
    "CorruptCheckpointError",
    "Problem",
    "VerifyReport",
    "checksum_of",
    "keyed_state",
    "new_metadata",
    "new_operator",
    "new_subtask",
    "operator_state",
    "savepoint_dir",
    "storage_options",
    "summarize",
    "validate",
]
