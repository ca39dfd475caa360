"""flinkpy.config: precedence, both YAML shapes, Flink's value syntax, and errors that say where."""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkpy.config import SCHEMA, load_config, parse_override
from flinkpy.errors import ConfigurationError, ExitCode
from flinkpy.units import parse_duration_ms


def write(home: Path, text: str) -> Path:
    path = home / "flinkpy.yaml"
    path.write_text(text)
    return path


def test_defaults_are_typed() -> None:
    cfg = load_config(env={})
    assert cfg.get("parallelism.default") == 1
    assert cfg.get("pipeline.max-parallelism") == 128
    assert cfg.get("rest.port") == 8081
    assert cfg.get("execution.buffer-timeout.interval") == 100
    assert cfg.get("heartbeat.timeout") == 50_000
    assert cfg.get("execution.checkpointing.timeout") == 600_000
    assert cfg.get("taskmanager.memory.segment-size") == 32 * 1024
    assert cfg.get("execution.checkpointing.interval") is None
    assert cfg.get("restart-strategy.type") is None
    assert cfg.source("rest.port") == "default"


def test_precedence_defaults_file_env_overrides(tmp_path: Path) -> None:
    write(tmp_path, "parallelism.default: 2\nrest.port: 9000\nheartbeat.interval: 5 s\n")
    env = {"FLINKPY_REST_PORT": "9001", "FLINKPY_HEARTBEAT_INTERVAL": "7s"}
    cfg = load_config(tmp_path, env=env, overrides={"heartbeat.interval": "9 s"})
    assert cfg.get("parallelism.default") == 2
    assert cfg.source("parallelism.default") == str(tmp_path / "flinkpy.yaml")
    assert cfg.get("rest.port") == 9001
    assert cfg.source("rest.port") == "environment variable FLINKPY_REST_PORT"
    assert cfg.get("heartbeat.interval") == 9000
    assert cfg.source("heartbeat.interval").startswith("-D")


def test_nested_and_flat_yaml_are_the_same(tmp_path: Path) -> None:
    write(tmp_path, "parallelism:\n  default: 3\nexecution:\n  checkpointing:\n    interval: 10 s\n    mode: at_least_once\n")
    cfg = load_config(tmp_path, env={})
    assert cfg.get("parallelism.default") == 3
    assert cfg.get("execution.checkpointing.interval") == 10_000
    assert cfg.get("execution.checkpointing.mode") == "AT_LEAST_ONCE"


def test_explicit_file_wins_over_home_and_must_exist(tmp_path: Path) -> None:
    write(tmp_path, "parallelism.default: 2\n")
    other = tmp_path / "other.yaml"
    other.write_text("parallelism.default: 5\n")
    assert load_config(tmp_path, file=other, env={}).get("parallelism.default") == 5
    with pytest.raises(ConfigurationError, match="missing.yaml"):
        load_config(file=tmp_path / "missing.yaml", env={})


@pytest.mark.parametrize(
    "raw, ms",
    [("100 ms", 100), ("100ms", 100), ("10 s", 10_000), ("10 min", 600_000), ("1 h", 3_600_000), ("250", 250), (0, 0), ("2 d", 172_800_000)],
)
def test_duration_syntax(raw: object, ms: int) -> None:
    assert parse_duration_ms(raw) == ms


@pytest.mark.parametrize("raw", ["ten seconds", "10 fortnights", "-5 s", "1.5 s", True])
def test_bad_durations(raw: object) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(raw)


def test_unknown_key_in_file_names_key_file_and_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "parallelism.defualt: 2\n")
    with pytest.raises(ConfigurationError) as info:
        load_config(tmp_path, env={})
    err = info.value
    assert "parallelism.defualt" in err.message and str(path) in err.message
    assert "parallelism.default" in (err.remedy or "")
    assert err.exit_code == ExitCode.CONFIGURATION


@pytest.mark.parametrize(
    "key, value, allowed",
    [
        ("parallelism.default", "0", "positive integer"),
        ("parallelism.default", "true", "positive integer"),
        ("execution.runtime-mode", "FAST", "STREAMING, BATCH, AUTOMATIC"),
        ("heartbeat.timeout", "soon", "duration"),
        ("taskmanager.memory.segment-size", "big", "memory size"),
        ("restart-strategy.type", "sometimes", "fixed-delay"),
    ],
)
def test_bad_values_name_key_value_allowed_and_source(key: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        load_config(env={}, overrides={key: value})
    assert key in info.value.message and repr(value) in info.value.message
    assert "-D" in info.value.message
    assert allowed in (info.value.remedy or "")


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="FLINKPY_PARALLELISM_DEFAULT"):
        load_config(env={"FLINKPY_PARALLELISM_DEFAULT": "zero"})


def test_unrelated_env_vars_are_ignored() -> None:
    assert load_config(env={"FLINKPY_HOME": "/x", "FLINKPY_JOBMANAGER": "h:1"}).get("rest.port") == 8081


def test_yaml_errors_name_the_line(tmp_path: Path) -> None:
    write(tmp_path, "parallelism.default: 2\nrest.port: [1\n")
    with pytest.raises(ConfigurationError, match="line"):
        load_config(tmp_path, env={})
    write(tmp_path, "- a list\n")
    with pytest.raises(ConfigurationError, match="mapping"):
        load_config(tmp_path, env={})


def test_to_dict_round_trips_through_strings() -> None:
    cfg = load_config(
        env={},
        overrides={"execution.checkpointing.interval": "90s", "taskmanager.memory.segment-size": "64 kb", "pipeline.name": "wc"},
    )
    shipped = cfg.to_dict()
    assert all(isinstance(v, str) for v in shipped.values())
    again = load_config(env={}, overrides=shipped)
    assert {k: again.get(k) for k in SCHEMA} == {k: cfg.get(k) for k in SCHEMA}
    assert "execution.checkpointing.dir" not in shipped  # unset optional keys are not shipped


def test_with_overrides_is_a_new_config() -> None:
    base = load_config(env={})
    changed = base.with_overrides({"parallelism.default": "4"})
    assert (base.get("parallelism.default"), changed.get("parallelism.default")) == (1, 4)


def test_get_unknown_key_raises() -> None:
    with pytest.raises(ConfigurationError, match="rest.prot"):
        load_config(env={}).get("rest.prot")


def test_parse_override() -> None:
    assert parse_override("a.b=c=d") == ("a.b", "c=d")
    with pytest.raises(ConfigurationError):
        parse_override("novalue")


@pytest.mark.parametrize("key", ["taskmanager.host", "jobmanager.rpc.address", "rest.address"])
def test_address_keys_are_taken_from_every_source_and_handed_on(tmp_path: Path, key: str) -> None:
    """Flink's address keys place processes on their hosts: a host in them is taken from the
    file, the environment and -D alike (and survives the hand-over to child processes)."""
    from flinkpy.addresses import resolve

    write(tmp_path, f"{key}: 10.0.0.7\n")
    assert load_config(tmp_path, env={}).get(key) == "10.0.0.7"
    assert load_config(tmp_path / "none", env={SCHEMA[key].env_var: "example.org"}).get(key) == "example.org"
    config = load_config(tmp_path / "none", env={}, overrides=dict([parse_override(f"{key}=10.0.0.8")]))
    assert load_config(tmp_path / "none", env={}, overrides=config.to_dict()).to_dict() == config.to_dict()
    endpoint = {"taskmanager.host": "taskmanager", "jobmanager.rpc.address": "rpc", "rest.address": "rest"}[key]
    assert getattr(resolve(config.get), endpoint).advertised == "10.0.0.8"


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_port_keys_refuse_what_is_no_port(port: str) -> None:
    for key in ("jobmanager.rpc.port", "taskmanager.data.port"):
        with pytest.raises(ConfigurationError, match=key) as info:
            load_config(env={}, overrides={key: port})
        assert "0 (any free port) to 65535" in (info.value.remedy or "")
