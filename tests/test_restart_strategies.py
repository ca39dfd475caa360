"""Restart backoff time strategies as pure state machines: times are plain numbers (ms)."""

from __future__ import annotations

import os
import random

import pytest

from flinkpy.common.restart_strategy import RestartStrategies
from flinkpy.errors import ConfigurationError
from flinkpy.common.restart_backoff import (
    ExponentialDelay,
    FailureRate,
    FixedDelay,
    NoRestart,
    explain,
    format_description,
    strategy_from_config,
)

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED", random.randrange(2**32)))
    print(f"seed: {seed} (re-run with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


def outcomes(strategy, times):  # type: ignore[no-untyped-def]
    result = []
    for t in times:
        strategy.notify_failure(t)
        result.append(strategy.can_restart())
    return result


# --------------------------------------------------------------------------- strategies


def test_no_restart_never_restarts() -> None:
    s = NoRestart()
    assert s.can_restart() is False
    s.notify_failure(0)
    assert s.can_restart() is False and s.counted_failures() == 1
    assert s.describe() == {"type": "none"} and s.to_config() == {"restart-strategy.type": "none"}


@pytest.mark.parametrize("attempts", [0, 1, 3])
def test_fixed_delay_gives_up_on_attempts_plus_one(attempts: int) -> None:
    s = FixedDelay(attempts=attempts, delay_ms=250)
    assert s.backoff_ms() == 0
    assert outcomes(s, range(attempts + 1)) == [True] * attempts + [False]
    assert s.backoff_ms() == 250


def test_fixed_delay_defaults_and_config() -> None:
    s = FixedDelay()
    assert s.describe() == {"type": "fixed-delay", "attempts": 1, "delay": 1000}
    assert s.to_config() == {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "1",
        "restart-strategy.fixed-delay.delay": "1 s",
    }


def test_failure_rate_counts_only_failures_inside_its_sliding_interval() -> None:
    s = FailureRate(max_failures_per_interval=2, interval_ms=1000, delay_ms=10)
    # 0, 400 fit; 1200 sees [200, 1200] -> {400, 1200}; 1300 -> {400, 1200, 1300}: too many
    assert outcomes(s, [0, 400, 1200]) == [True, True, True]
    assert s.counted_failures() == 2
    s.notify_failure(1300)
    assert s.can_restart() is False and s.counted_failures() == 3
    assert s.backoff_ms() == 10


def test_failure_rate_window_edges_are_inclusive() -> None:
    s = FailureRate(max_failures_per_interval=1, interval_ms=1000)
    assert outcomes(s, [0, 1000]) == [True, False]  # both inside [0, 1000]
    s = FailureRate(max_failures_per_interval=1, interval_ms=1000)
    assert outcomes(s, [0, 1001, 2002, 3003]) == [True, True, True, True]


def test_failure_rate_many_failures_at_once() -> None:
    s = FailureRate(max_failures_per_interval=3, interval_ms=10_000)
    assert outcomes(s, [5, 5, 5, 5]) == [True, True, True, False]


def test_failure_times_must_not_go_backwards() -> None:
    for s in (FixedDelay(), FailureRate(), ExponentialDelay()):
        s.notify_failure(100)
        with pytest.raises(ValueError):
            s.notify_failure(99)


def test_exponential_delay_grows_by_the_multiplier_up_to_the_cap() -> None:
    s = ExponentialDelay(initial_backoff_ms=100, max_backoff_ms=1000, multiplier=3.0, jitter_factor=0.0)
    delays = []
    for t in range(6):
        s.notify_failure(t)
        assert s.can_restart()
        delays.append(s.backoff_ms())
    assert delays == [100, 300, 900, 1000, 1000, 1000]


def test_exponential_delay_resets_after_the_threshold() -> None:
    s = ExponentialDelay(initial_backoff_ms=100, max_backoff_ms=10_000, multiplier=2.0,
                         reset_backoff_threshold_ms=5000, jitter_factor=0.0, attempts_before_reset=3)
    assert [(s.notify_failure(t), s.backoff_ms())[1] for t in (0, 100, 200)] == [100, 200, 400]
    assert s.counted_failures() == 3
    s.notify_failure(200 + 4999)  # just short of the threshold: keeps growing, 4th attempt
    assert s.backoff_ms() == 800 and s.can_restart() is False
    s = ExponentialDelay(initial_backoff_ms=100, max_backoff_ms=10_000, multiplier=2.0,
                         reset_backoff_threshold_ms=5000, jitter_factor=0.0, attempts_before_reset=3)
    for t in (0, 100, 200):
        s.notify_failure(t)
    s.notify_failure(5200)  # exactly the threshold after the previous failure: reset
    assert s.backoff_ms() == 100 and s.counted_failures() == 1 and s.can_restart()


def test_exponential_delay_gives_up_after_attempts_before_reset() -> None:
    s = ExponentialDelay(attempts_before_reset=2, jitter_factor=0.0)
    assert outcomes(s, [0, 1, 2]) == [True, True, False]


def test_exponential_delay_jitter_stays_within_bounds(rng: random.Random) -> None:
    s = ExponentialDelay(initial_backoff_ms=1000, max_backoff_ms=5000, multiplier=2.0, jitter_factor=0.2, rng=rng)
    expected_nominal = [1000, 2000, 4000, 5000, 5000]
    seen = set()
    for t, nominal in zip(range(0, 50, 10), expected_nominal):
        s.notify_failure(t)
        low, high = s.jitter_bounds_ms()
        assert s.nominal_backoff_ms() == nominal
        assert (low, high) == (nominal - int(nominal * 0.2), min(5000, nominal + int(nominal * 0.2)))
        assert low <= s.backoff_ms() <= high
        seen.add(s.backoff_ms())
    assert len(seen) > 1  # jitter applied


def test_exponential_delay_jitter_is_reproducible_with_a_seed() -> None:
    def delays(seed: int) -> list[int]:
        s = ExponentialDelay(rng=random.Random(seed))
        return [(s.notify_failure(t), s.backoff_ms())[1] for t in range(5)]

    assert delays(7) == delays(7)


def test_exponential_delay_defaults_are_flink_1_19s() -> None:
    assert ExponentialDelay().describe() == {
        "type": "exponential-delay",
        "initial-backoff": 1000,
        "max-backoff": 60_000,
        "backoff-multiplier": 1.5,
        "reset-backoff-threshold": 3_600_000,
        "jitter-factor": 0.1,
        "attempts-before-reset-backoff": 2_147_483_647,
    }


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"multiplier": 0.5}, "backoff-multiplier"),
        ({"jitter_factor": 1.5}, "jitter-factor"),
        ({"attempts_before_reset": 0}, "attempts-before-reset-backoff"),
        ({"initial_backoff_ms": 0}, "initial-backoff"),
        ({"initial_backoff_ms": 2000, "max_backoff_ms": 1000}, "max-backoff"),
    ],
)
def test_exponential_delay_refuses_bad_parameters(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        ExponentialDelay(**kwargs)
    assert key in info.value.message


# --------------------------------------------------------------------------- from config


def test_from_config_defaults_depend_on_checkpointing() -> None:
    assert strategy_from_config({}, checkpointing_enabled=False) == NoRestart()
    assert strategy_from_config({}, checkpointing_enabled=True) == ExponentialDelay()
    assert strategy_from_config({"parallelism.default": "2"}, checkpointing_enabled=True) == ExponentialDelay()


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("none", NoRestart()), ("off", NoRestart()), ("disable", NoRestart()), ("NONE", NoRestart()),
        ("fixed-delay", FixedDelay()), ("fixeddelay", FixedDelay()), ("FixedDelay", FixedDelay()),
        ("failure-rate", FailureRate()), ("failurerate", FailureRate()),
        ("exponential-delay", ExponentialDelay()), ("exponentialdelay", ExponentialDelay()),
    ],
)
def test_from_config_type_aliases(raw: str, expected: object) -> None:
    assert strategy_from_config({"restart-strategy.type": raw}, checkpointing_enabled=True) == expected


def test_from_config_reads_every_key() -> None:
    p = "restart-strategy."
    assert strategy_from_config(
        {p + "type": "fixed-delay", p + "fixed-delay.attempts": "3", p + "fixed-delay.delay": "10 s"},
        checkpointing_enabled=False,
    ) == FixedDelay(3, 10_000)
    assert strategy_from_config(
        {p + "type": "failure-rate", p + "failure-rate.max-failures-per-interval": "2",
         p + "failure-rate.failure-rate-interval": "5 min", p + "failure-rate.delay": "500ms"},
        checkpointing_enabled=False,
    ) == FailureRate(2, 300_000, 500)
    e = p + "exponential-delay."
    assert strategy_from_config(
        {p + "type": "exponential-delay", e + "initial-backoff": "2s", e + "max-backoff": "2min",
         e + "backoff-multiplier": "2", e + "reset-backoff-threshold": "30 min", e + "jitter-factor": "0",
         e + "attempts-before-reset-backoff": "5",
         p + "fixed-delay.attempts": "9"},  # another strategy's keys are ignored
        checkpointing_enabled=False,
    ) == ExponentialDelay(2000, 120_000, 2.0, 1_800_000, 0.0, 5)


@pytest.mark.parametrize("strategy", [NoRestart(), FixedDelay(4, 1234), FailureRate(3, 90_000, 10), ExponentialDelay(5, 700, 1.25, 999, 0.3, 7)])
def test_to_config_round_trips(strategy: object) -> None:
    assert strategy_from_config(strategy.to_config(), checkpointing_enabled=True) == strategy  # type: ignore[attr-defined]


def test_pyflink_value_objects_feed_strategy_from_config() -> None:
    conf = RestartStrategies.failure_rate_restart(2, 60_000, 1000).to_config()
    assert strategy_from_config(conf, checkpointing_enabled=False) == FailureRate(2, 60_000, 1000)


@pytest.mark.parametrize(
    "config, key, allowed",
    [
        ({"restart-strategy.type": "sometimes"}, "restart-strategy.type", "fixed-delay"),
        ({"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "-1"}, "restart-strategy.fixed-delay.attempts", "integer"),
        ({"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.delay": "soon"}, "restart-strategy.fixed-delay.delay", "duration"),
        ({"restart-strategy.type": "failure-rate", "restart-strategy.failure-rate.max-failures-per-interval": "0"}, "max-failures-per-interval", "positive integer"),
        ({"restart-strategy.type": "exponential-delay", "restart-strategy.exponential-delay.jitter-factor": "lots"}, "jitter-factor", "number"),
        ({"restart-strategy.fixed-delay.atempts": "3"}, "restart-strategy.fixed-delay.atempts", "did you mean"),
    ],
)
def test_from_config_errors_name_key_value_and_what_is_allowed(config: dict, key: str, allowed: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        strategy_from_config(config, checkpointing_enabled=False)
    assert key in info.value.message
    assert allowed in (info.value.remedy or "")


def test_format_description() -> None:
    assert format_description(FixedDelay(3, 10_000).describe()) == "fixed-delay (attempts=3, delay=10 s)"
    assert format_description({"type": "none"}) == "none"


# --------------------------------------------------------------------------- explain


def test_explain_fixed_delay_back_to_back() -> None:
    rows = explain(FixedDelay(2, 100), 10, every_ms=50)
    assert [(r["attempt"], r["failure_ms"], r["restart"], r["restart_at_ms"]) for r in rows] == [
        (1, 0, True, 100), (2, 150, True, 250), (3, 300, False, None)]
    assert rows[-1]["gives_up"] and rows[-1]["delay_ms"] is None


def test_explain_failure_rate_with_explicit_times() -> None:
    rows = explain(FailureRate(2, 1000, 10), [0, 400, 1200, 1300, 5000])
    assert [r["restart"] for r in rows] == [True, True, True, False]  # stops at the give-up point


def test_explain_exponential_is_deterministic_and_shows_jitter_bounds() -> None:
    s = ExponentialDelay(initial_backoff_ms=1000, max_backoff_ms=3000, multiplier=2.0, jitter_factor=0.1, attempts_before_reset=3)
    rows = explain(s, 10)
    assert rows == explain(s, 10)
    assert [r["delay_ms"] for r in rows] == [1000, 2000, 3000, None]
    assert [(r["jitter_min_ms"], r["jitter_max_ms"]) for r in rows[:3]] == [(900, 1100), (1800, 2200), (2700, 3000)]
    assert [r["failure_ms"] for r in rows] == [0, 1000, 3000, 6000]
    assert rows[-1]["gives_up"] and s.counted_failures() == 0  # the strategy itself is untouched


def test_explain_exponential_resets_when_failures_are_far_apart() -> None:
    s = ExponentialDelay(initial_backoff_ms=100, reset_backoff_threshold_ms=1000, jitter_factor=0.0, attempts_before_reset=2)
    rows = explain(s, 5, every_ms=1000)  # gap = delay + 1000 >= threshold: every failure resets
    assert [r["delay_ms"] for r in rows] == [100] * 5 and all(r["restart"] for r in rows)


def test_explain_no_restart_gives_up_at_once() -> None:
    rows = explain(NoRestart(), 5)
    assert len(rows) == 1 and rows[0]["gives_up"]
