"""Metrics: what a running job measures, and the figures the JobManager keeps of them.

One path, three readers: each task process samples its counters (and the user's metrics) once
per ``metrics.fetcher.update-interval`` and reports them through its TaskManager; the
JobManager keeps the latest figures (:mod:`.store`) and serves them to ``flinkpy job show``,
``flinkpy top`` and a Prometheus endpoint (:mod:`.prometheus`).

- :mod:`.groups`: PyFlink's MetricGroup API for user functions (counters, gauges, meters,
  distributions), as ``runtime_context.get_metrics_group()`` returns it;
- :mod:`.names`: Flink's metric names and units, in one place;
- :mod:`.process_stats`: CPU time and resident memory of a process, read from ``/proc``;
- :mod:`.store`: the JobManager's latest figures per job, vertex, subtask and TaskManager;
- :mod:`.prometheus`: those figures in Prometheus' text exposition format.

This package imports nothing of the engine: the task, the TaskManager and the JobManager all
build on it.
"""

from flinkpy.metrics.groups import Counter, Distribution, Meter, MetricGroup

__all__ = ["Counter", "Distribution", "Meter", "MetricGroup"]
