"""The metric pieces without a cluster: user metric groups (PyFlink's API), the JobManager's
store, Prometheus' text format, the configuration switch, and what a TaskManager's process
tree costs (read from /proc)."""

from __future__ import annotations

import os

import pytest

from flinkpy.jobmanager.job_options import JobOptions
from flinkpy.metrics import names
from flinkpy.metrics.groups import MetricRegistry
from flinkpy.metrics.process_stats import CpuSampler, cpu_seconds, rss_bytes, tree_figures
from flinkpy.metrics.prometheus import exposition, metric_name
from flinkpy.metrics.store import MetricStore, aggregate
from flinkpy.task.runtime_context import TaskRuntimeContext


def context(registry: MetricRegistry, operator: str = "Map") -> TaskRuntimeContext:
    return TaskRuntimeContext(task_name="t", subtask_index=0, parallelism=1, max_parallelism=128, attempt=0,
                              job_parameters={}, operator_name=operator, metrics=registry)


def test_runtime_context_hands_out_pyflink_metric_groups() -> None:
    registry = MetricRegistry()
    group = context(registry).get_metrics_group()
    counter = group.counter("seen")
    counter.inc()
    counter.inc(5)
    counter.dec(2)
    assert counter.get_count() == 4
    assert group.counter("seen") is counter  # registering again returns the first one
    meter = group.add_group("io").meter("events", time_span_in_seconds=10)
    meter.mark_event()
    meter.mark_event(9)
    assert meter.get_count() == 10
    value = group.add_group("topic", "orders").distribution("size")
    for v in (3, 1, 8):
        value.update(v)
    group.gauge("depth", lambda: 12)
    keyed = group.add_group("topic", "orders")
    assert keyed.get_scope_components() == ["Map", "topic", "orders"]
    assert keyed.get_all_variables() == {"<operator_name>": "Map", "<topic>": "orders"}
    assert keyed.get_metric_identifier("size") == "Map.topic.orders.size"
    with pytest.raises(TypeError):
        group.gauge("bad", 3)  # type: ignore[arg-type]

    first = {m["name"]: m for m in registry.sample(now_s=100.0)}
    assert first["seen"]["value"] == 4 and first["depth"]["value"] == 12
    assert first["size"]["value"] == {"count": 3, "sum": 12, "min": 1, "max": 8, "mean": 4.0}
    assert first["size"]["logical_scope"] == ["topic"] and first["size"]["scope"] == ["topic", "orders"]
    meter.mark_event(20)
    second = {m["name"]: m for m in registry.sample(now_s=102.0)}
    assert second["events"]["value"] == {"count": 30, "rate": 10.0}


def test_a_gauge_that_raises_is_left_out_of_the_sample() -> None:
    registry = MetricRegistry()
    group = registry.operator_group("Map")

    def broken() -> int:
        raise RuntimeError("not yet")

    group.gauge("broken", broken)
    group.gauge("text", lambda: "x")  # type: ignore[arg-type, return-value]
    group.counter("ok").inc()
    assert [m["name"] for m in registry.sample(now_s=0.0)] == ["ok"]


def test_the_store_keeps_the_latest_report_of_the_current_attempt() -> None:
    store = MetricStore()
    store.on_task("j", "1_0_0", 1000, {names.NUM_RECORDS_IN: 10, names.BACK_PRESSURED_TIME: 900})
    store.on_task("j", "1_1_0", 1000, {names.NUM_RECORDS_IN: 30, names.BACK_PRESSURED_TIME: 100})
    store.on_task("j", "1_1_0", 900, {names.NUM_RECORDS_IN: 1})  # older than the stored one
    store.on_task("j", "not-an-exec-id", 900, {names.NUM_RECORDS_IN: 1})
    vertex = aggregate(store.subtasks("j", 1).values())
    assert vertex[names.NUM_RECORDS_IN] == 40 and vertex[names.BACK_PRESSURED_TIME] == 900
    store.on_task("j", "1_0_1", 2000, {names.NUM_RECORDS_IN: 2, names.INPUT_WATERMARK: 50})
    store.on_task("j", "1_1_1", 2000, {names.NUM_RECORDS_IN: 3, names.INPUT_WATERMARK: 70})
    store.on_task("j", "1_0_0", 3000, {names.NUM_RECORDS_IN: 99})  # the old attempt, late
    vertex = aggregate(store.subtasks("j", 1).values())
    assert vertex[names.NUM_RECORDS_IN] == 5 and vertex[names.INPUT_WATERMARK] == 50
    store.on_taskmanager("tm-1", 5, {names.MEMORY_RSS: 7})
    store.on_taskmanager("tm-1", 4, {names.MEMORY_RSS: 1})
    assert store.taskmanager("tm-1") == {names.MEMORY_RSS: 7}
    store.forget_job("j")
    store.forget_taskmanager("tm-1")
    assert store.subtasks("j", 1) == {} and store.taskmanager("tm-1") == {}


def test_prometheus_names_labels_and_values() -> None:
    assert metric_name("taskmanager_job_task", "buffers.inPoolUsage") == "flinkpy_taskmanager_job_task_buffers_inPoolUsage"
    text = exposition([
        ("taskmanager_job_task", "numRecordsIn", {"job_id": "a", "subtask_index": "0"}, 5),
        ("taskmanager_job_task", "numRecordsIn", {"job_id": "a", "subtask_index": "1"}, 7),
        ("taskmanager_job_task", "currentInputWatermark", {"task_name": 'say "hi"\\\n'}, float("-inf")),
        ("jobmanager_job", "uptime", {}, 1.5),
    ])
    lines = text.splitlines()
    assert lines.count("# TYPE flinkpy_taskmanager_job_task_numRecordsIn gauge") == 1
    assert 'flinkpy_taskmanager_job_task_numRecordsIn{job_id="a",subtask_index="1"} 7.0' in lines
    assert 'flinkpy_taskmanager_job_task_currentInputWatermark{task_name="say \\"hi\\"\\\\\\n"} -Inf' in lines
    assert "flinkpy_jobmanager_job_uptime 1.5" in lines
    assert text.endswith("\n") and exposition([]) == ""


def test_metrics_enabled_and_the_report_interval_reach_the_tasks() -> None:
    assert JobOptions.parse({}, "c").task.metrics_interval_ms == 1000
    assert JobOptions.parse({"metrics.fetcher.update-interval": "250 ms"}, "c").task.metrics_interval_ms == 250
    assert JobOptions.parse({"metrics.enabled": "false"}, "c").task.metrics_interval_ms == 0


def test_process_figures_from_proc() -> None:
    me = os.getpid()
    sum(i * i for i in range(200_000))  # some CPU time of our own
    assert cpu_seconds(me) > 0 and rss_bytes(me) > 1 << 20
    cpu, rss = tree_figures([me, me])  # a pid named twice counts once
    assert rss == rss_bytes(me) and cpu >= cpu_seconds(me) - 0.05
    assert cpu_seconds(2**22 + 1) == 0.0 and rss_bytes(2**22 + 1) == 0  # no such process
    sampler = CpuSampler()
    assert sampler.usage_percent(2.0, 10.0) == 0.0
    assert sampler.usage_percent(2.5, 12.0) == 25.0
    assert sampler.usage_percent(1.0, 13.0) == 0.0  # a task's CPU left the tree: a new baseline
