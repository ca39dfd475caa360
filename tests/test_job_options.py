"""A job's configuration is parsed once, at submission, with the schema's parsers and defaults."""

from __future__ import annotations

import pytest

from flinkpy.config import SCHEMA, typed_value
from flinkpy.errors import ConfigurationError
from flinkpy.jobmanager.job_options import JobOptions
from flinkpy.protocol.deployment import TaskConfig
from flinkpy.units import format_memory_size, parse_memory_size


def test_defaults_are_the_schemas() -> None:
    opts = JobOptions.parse({}, "file:///ck")
    assert opts.task == TaskConfig(
        buffer_timeout_ms=SCHEMA["execution.buffer-timeout.interval"].default,
        auto_watermark_ms=SCHEMA["pipeline.auto-watermark-interval"].default,
        segment_size=SCHEMA["taskmanager.memory.segment-size"].default,
        incremental=False,
        state_backend={},
        credit=SCHEMA["taskmanager.network.memory.buffers-per-channel"].default
        + SCHEMA["taskmanager.network.memory.floating-buffers-per-gate"].default // 4,
        metrics_interval_ms=SCHEMA["metrics.fetcher.update-interval"].default,
    )
    assert opts.slot_request_timeout_ms == SCHEMA["slot.request.timeout"].default
    assert (opts.failover, opts.claim, opts.job_parameters) == ("region", False, {})
    assert (opts.checkpoint_dir, opts.savepoint_dir) == ("file:///ck", "file:///ck/savepoints")
    assert opts.checkpointing.interval_ms is None and opts.restart_strategy.type == "none"


def test_submitted_strings_become_typed_values() -> None:
    opts = JobOptions.parse(
        {
            "execution.buffer-timeout.interval": "5 ms",
            "taskmanager.memory.segment-size": "64 kb",
            "execution.checkpointing.incremental": "true",
            "execution.checkpointing.interval": "1 s",
            "execution.checkpointing.dir": "memory://ck/",
            "state.backend.type": "rocksdb",
            "slot.request.timeout": "2 min",
            "jobmanager.execution.failover-strategy": "FULL",
            "execution.state-recovery.claim-mode": "claim",
            "$job.region": "eu",
            "some.connector.key": "kept out",
        },
        "file:///ck",
    )
    assert (opts.task.buffer_timeout_ms, opts.task.segment_size, opts.task.incremental) == (5, 65536, True)
    assert opts.task.state_backend == {"state.backend.type": "rocksdb"}
    assert (opts.slot_request_timeout_ms, opts.failover, opts.claim) == (120_000, "full", True)
    assert opts.job_parameters == {"region": "eu"}
    assert (opts.checkpoint_dir, opts.savepoint_dir) == ("memory://ck/", "memory://ck/savepoints")
    assert opts.checkpointing.interval_ms == 1000 and opts.restart_strategy.type == "exponential-delay"


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("execution.buffer-timeout.interval", "soon", "duration"),
        ("taskmanager.memory.segment-size", "huge", "memory size"),
        ("slot.request.timeout", "-1 s", "duration"),
        ("taskmanager.network.memory.buffers-per-channel", "-1", "integer"),
    ],
)
def test_a_bad_value_refuses_the_submission_naming_the_key(key: str, value: str, words: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        JobOptions.parse({key: value}, "file:///ck")
    assert key in err.value.message and repr(value) in err.value.message and words in (err.value.remedy or "")


def test_failover_and_checkpointing_keep_their_own_messages() -> None:
    with pytest.raises(ConfigurationError, match="'sideways' is not a failover strategy"):
        JobOptions.parse({"jobmanager.execution.failover-strategy": "sideways"}, "file:///ck")
    with pytest.raises(ConfigurationError) as err:
        JobOptions.parse({"execution.checkpointing.interval": "0"}, "file:///ck")
    assert "unset" in (err.value.remedy or "")


def test_typed_value_treats_empty_as_unset() -> None:
    assert typed_value({"slot.request.timeout": ""}, "slot.request.timeout", source="job") == 300_000
    with pytest.raises(ConfigurationError, match="did you mean"):
        typed_value({}, "slot.request.timeout.ms", source="job")


@pytest.mark.parametrize("size", [0, 1, 1000, 1024, 32 * 1024, 3 << 20, 5 << 30])
def test_memory_sizes_survive_a_round_trip(size: int) -> None:
    assert parse_memory_size(format_memory_size(size)) == size


@pytest.mark.parametrize("raw", ["1.5 mb", "10 parsecs", "-1", True, "kb"])
def test_bad_memory_sizes(raw: object) -> None:
    with pytest.raises(ValueError):
        parse_memory_size(raw)
