"""The PyFlink-shaped API value types: Types, Row, Configuration, time, strategies, functions."""

from __future__ import annotations

import datetime
import pickle

import pytest

from flinkpy.common import (
    Configuration,
    Duration,
    Encoder,
    ExecutionConfig,
    JobStatus,
    RestartStrategies,
    Row,
    RowKind,
    SimpleStringSchema,
    Time,
    Types,
    WatermarkStrategy,
)
from flinkpy.common.watermark_strategy import TimestampAssigner
from flinkpy.datastream.functions import (
    FlatMapFunction,
    Function,
    KeyedProcessFunction,
    MapFunction,
    RuntimeContext,
    TimeDomain,
)
from flinkpy.datastream.output_tag import OutputTag
from flinkpy.datastream.state import (
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from flinkpy.errors import ConfigurationError, UsageError


def test_types_have_readable_names_and_value_equality() -> None:
    assert str(Types.TUPLE([Types.STRING(), Types.INT()])) == "TUPLE(STRING, INT)"
    assert repr(Types.ROW([Types.INT(), Types.DOUBLE()])) == "ROW(INT, DOUBLE)"
    assert str(Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.LONG()])) == "ROW_NAMED(a: STRING, b: LONG)"
    assert str(Types.MAP(Types.STRING(), Types.LIST(Types.INT()))) == "MAP(STRING, LIST(INT))"
    assert str(Types.PRIMITIVE_ARRAY(Types.BYTE())) == "PRIMITIVE_ARRAY(BYTE)"
    assert Types.INT() == Types.INT() and Types.INT() != Types.LONG()
    assert hash(Types.TUPLE([Types.INT()])) == hash(Types.TUPLE([Types.INT()]))
    names = ["STRING", "INT", "LONG", "BOOLEAN", "FLOAT", "DOUBLE", "BYTE", "SHORT", "CHAR",
             "BIG_INT", "BIG_DEC", "SQL_DATE", "SQL_TIME", "SQL_TIMESTAMP", "INSTANT",
             "PICKLED_BYTE_ARRAY"]
    for name in names:
        t = getattr(Types, name)()
        assert str(t) == name
        assert pickle.loads(pickle.dumps(t)) == t
    rt = Types.ROW_NAMED(["w"], [Types.STRING()])
    assert pickle.loads(pickle.dumps(rt)) == rt and rt.get_field_index("w") == 0
    with pytest.raises(ValueError):
        Types.ROW_NAMED(["a"], [Types.INT(), Types.INT()])


def test_row_named_and_positional() -> None:
    r = Row(word="a", count=1)
    assert repr(r) == "Row(word='a', count=1)"
    assert r[0] == "a" and r[1] == 1 and r.word == "a" and r["count"] == 1
    assert r.as_dict() == {"word": "a", "count": 1}
    assert list(r) == ["a", 1] and len(r) == 2
    r.count = 2
    r[0] = "b"
    assert r == Row(word="b", count=2)
    assert repr(Row(1, "x")) == "<Row(1, 'x')>"  # PyFlink's repr of a row without names
    assert Row(1, 2) != Row(a=1, b=2)
    with pytest.raises(AttributeError):
        r.missing
    with pytest.raises(TypeError):
        Row(1, 2).as_dict()
    person = Row("name", "age")
    assert person("Alice", 11) == Row(name="Alice", age=11)
    nested = Row(inner=Row(x=1), items=[Row(y=2)])
    assert nested.as_dict(recursive=True) == {"inner": {"x": 1}, "items": [{"y": 2}]}


def test_row_kind_equality_and_pickle() -> None:
    r = Row(k="a", v=1)
    assert r.get_row_kind() is RowKind.INSERT
    r2 = Row(k="a", v=1)
    r2.set_row_kind(RowKind.UPDATE_BEFORE)
    assert r != r2 and str(RowKind.UPDATE_BEFORE) == "-U"
    back = pickle.loads(pickle.dumps(r2))
    assert back == r2 and back.get_row_kind() is RowKind.UPDATE_BEFORE and back.k == "a"
    assert {r: 1}[Row(k="a", v=1)] == 1


def test_configuration_typed_access() -> None:
    conf = Configuration()
    conf.set_string("a", "x").set_integer("n", 3).set_boolean("b", True).set_float("f", 0.5)
    assert conf.get_string("a", None) == "x" and conf.get_integer("n", 0) == 3
    assert conf.get_boolean("b", False) is True and conf.get_float("f", 0.0) == 0.5
    assert conf.get_string("n", None) == "3"
    assert conf.get_integer("missing", 7) == 7 and conf.contains_key("a") and not conf.contains_key("z")
    assert conf.to_dict() == {"a": "x", "n": "3", "b": "true", "f": "0.5"}
    assert conf.remove_config("a") and not conf.contains_key("a")
    assert Configuration({"x": 1}) == Configuration().set_string("x", "1")
    with pytest.raises(ConfigurationError, match="'a2' has value 'abc'"):
        Configuration({"a2": "abc"}).get_integer("a2", 0)
    with pytest.raises(ConfigurationError):
        Configuration({"b": "maybe"}).get_boolean("b", False)


def test_duration_and_time() -> None:
    assert Duration.of_seconds(2).to_milliseconds() == 2000
    assert Duration.of_minutes(1) == Duration.of_millis(60_000)
    assert Duration.of_millis(1) < Duration.of_seconds(1)
    assert Time.hours(1).to_milliseconds() == 3_600_000 and Time.days(1) > Time.hours(23)
    assert Time.seconds(1).to_duration() == Duration.of_seconds(1)
    assert pickle.loads(pickle.dumps(Time.minutes(2))) == Time.minutes(2)


def test_encoder_and_schema() -> None:
    assert Encoder.simple_string_encoder().encode("hi") == b"hi\n"
    assert Encoder.simple_string_encoder("UTF-16").encode("x") == ("x\n").encode("utf-16")
    s = SimpleStringSchema()
    assert s.deserialize(s.serialize("é")) == "é"


def test_watermark_strategy_records_settings_immutably() -> None:
    class Ts(TimestampAssigner):
        def extract_timestamp(self, value: tuple, record_timestamp: int) -> int:
            return value[1]

    base = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(3))
    s = base.with_timestamp_assigner(Ts()).with_idleness(Duration.of_seconds(10))
    assert base.timestamp_assigner is None and base.idle_timeout_ms is None
    assert s.kind == "bounded-out-of-orderness" and s.max_out_of_orderness_ms == 3000
    assert s.idle_timeout_ms == 10_000 and s.extract_timestamp(("a", 42), 0) == 42
    assert WatermarkStrategy.for_monotonous_timestamps().kind == "monotonous"
    assert WatermarkStrategy.no_watermarks().with_timestamp_assigner(lambda v, t: 5).extract_timestamp(1, 0) == 5


def test_restart_strategies_use_flink_keys_and_round_trip() -> None:
    fixed = RestartStrategies.fixed_delay_restart(3, 10_000)
    assert fixed.to_config() == {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": "10000 ms",
    }
    assert fixed.get_delay_between_attempts_interval() == datetime.timedelta(seconds=10)
    rate = RestartStrategies.failure_rate_restart(2, datetime.timedelta(minutes=5), Time.seconds(1))
    assert rate.to_config()["restart-strategy.failure-rate.failure-rate-interval"] == "300000 ms"
    expo = RestartStrategies.exponential_delay_restart(10, 1000, 1.5, 60_000, 0.2)
    for cfg in (fixed, rate, expo, RestartStrategies.no_restart()):
        assert RestartStrategies.from_config(cfg.to_config()) == cfg
    assert RestartStrategies.from_config({"restart-strategy.type": "fixed-delay",
                                          "restart-strategy.fixed-delay.delay": "2 s"}) == \
        RestartStrategies.fixed_delay_restart(1, 2000)
    assert RestartStrategies.fall_back_restart().to_config() == {}
    with pytest.raises(ConfigurationError, match="not a restart strategy"):
        RestartStrategies.from_config({"restart-strategy.type": "sometimes"})
    with pytest.raises(ConfigurationError, match="not a duration"):
        RestartStrategies.from_config({"restart-strategy.type": "fixed-delay",
                                       "restart-strategy.fixed-delay.delay": "soon"})


def test_execution_config() -> None:
    c = ExecutionConfig()
    assert c.get_auto_watermark_interval() == 200
    c.set_auto_watermark_interval(50).set_parallelism(4).set_max_parallelism(256)
    c.set_global_job_parameters(Configuration({"threshold": 3}))
    c.set_restart_strategy(RestartStrategies.no_restart())
    assert (c.get_auto_watermark_interval(), c.get_parallelism(), c.get_max_parallelism()) == (50, 4, 256)
    assert c.get_global_job_parameters() == {"threshold": "3"}
    assert c.get_restart_strategy().to_config() == {"restart-strategy.type": "none"}
    with pytest.raises(UsageError):
        c.set_parallelism(0)


def test_job_status_terminal_states() -> None:
    terminal = {s for s in JobStatus if s.is_globally_terminal_state()}
    assert terminal == {JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED}
    assert JobStatus.SUSPENDED.is_terminal_state() and not JobStatus.RUNNING.is_terminal_state()
    assert JobStatus("RUNNING") is JobStatus.RUNNING and len(JobStatus) == 11


def test_functions_and_runtime_context_shape() -> None:
    class Upper(MapFunction):
        def map(self, value: str) -> str:
            return value.upper()

    class Split(FlatMapFunction):
        def flat_map(self, value: str):  # type: ignore[no-untyped-def]
            yield from value.split()

    u = Upper()
    assert u.open(None) is None and u.close() is None  # type: ignore[arg-type]
    assert u.map("a") == "A" and list(Split().flat_map("a b")) == ["a", "b"]
    with pytest.raises(TypeError):
        MapFunction()  # type: ignore[abstract]
    assert isinstance(u, Function)
    for name in ("get_task_name", "get_number_of_parallel_subtasks",
                 "get_max_number_of_parallel_subtasks", "get_index_of_this_subtask",
                 "get_attempt_number", "get_job_parameter", "get_metrics_group", "get_state",
                 "get_list_state", "get_map_state", "get_reducing_state", "get_aggregating_state"):
        assert name in RuntimeContext.__abstractmethods__
    assert KeyedProcessFunction.OnTimerContext.__abstractmethods__ >= {"time_domain", "get_current_key"}
    assert TimeDomain.EVENT_TIME != TimeDomain.PROCESSING_TIME


def test_output_tag_and_descriptors() -> None:
    tag = OutputTag("late", Types.STRING())
    assert tag == OutputTag("late") and hash(tag) == hash(OutputTag("late"))
    assert pickle.loads(pickle.dumps(tag)) == tag
    d = ValueStateDescriptor("v", Types.INT())
    ttl = StateTtlConfig.new_builder(Time.seconds(5)).update_ttl_on_read_and_write() \
        .return_expired_if_not_cleaned_up().cleanup_full_snapshot().build()
    d.enable_time_to_live(ttl)
    assert d.get_name() == "v" and d.ttl_config.get_ttl() == Time.seconds(5)
    assert ttl.get_update_type() is StateTtlConfig.UpdateType.OnReadAndWrite
    assert ttl.get_state_visibility() is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
    assert ttl.is_enabled() and ttl.get_cleanup_strategies()["full_snapshot"]
    assert ReducingStateDescriptor("r", lambda a, b: a * b).reduce(3, 4) == 12
    with pytest.raises(TypeError):
        AggregatingStateDescriptor("a", object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ValueStateDescriptor("")


def test_api_imports_without_cli_libraries() -> None:
    import subprocess
    import sys

    code = ("import sys, flinkpy.common, flinkpy.state, flinkpy.datastream.state, "
            "flinkpy.datastream.functions; "
            "print(sorted(m for m in ('typer', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True, cwd=str(__import__('pathlib').Path(__file__).parents[1]))
    assert out.stdout.strip() == "[]"
