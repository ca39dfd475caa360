"""Metrics in Prometheus' text exposition format (version 0.0.4), named as Flink's
PrometheusReporter names them, with a ``flinkpy`` prefix instead of ``flink``.

A metric's name is its scope and its own name joined by ``_`` (``taskmanager_job_task`` +
``numRecordsIn``), with every character Prometheus does not allow in a name replaced by ``_``
(``buffers.inPoolUsage`` -> ``buffers_inPoolUsage``); the scope's variables are labels
(``job_id``, ``job_name``, ``task_name``, ``subtask_index``, ``tm_id``, ...). Every figure is a
gauge, as Flink's reporter exports counters too (a counter may go down: ``Counter.dec``).

The text itself is written by prometheus_client: the samples become metric families of a
collector registered on a private registry (never the library's global one, which would add the
JobManager's own process figures and keep state between scrapes).

>>> print(exposition([("taskmanager_job_task", "buffers.inPoolUsage", {"job_id": "j", "task_name": 'a "b"'}, 0.5)]), end="")
# HELP flinkpy_taskmanager_job_task_buffers_inPoolUsage buffers.inPoolUsage (taskmanager_job_task scope)
# TYPE flinkpy_taskmanager_job_task_buffers_inPoolUsage gauge
flinkpy_taskmanager_job_task_buffers_inPoolUsage{job_id="j",task_name="a \\"b\\""} 0.5
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator, Union

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

#: (scope, metric name, labels, value)
Sample = tuple[str, str, dict[str, str], Union[int, float]]

PREFIX = "flinkpy"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def metric_name(scope: str, name: str, prefix: str = PREFIX) -> str:
    """The Prometheus name of ``name`` in ``scope``."""
    return _INVALID.sub("_", f"{prefix}_{scope}_{name}")


class _Families:
    """A collector over one scrape's samples: one gauge family per metric name, in the order
    the samples first name them."""

    def __init__(self, samples: Iterable[Sample], prefix: str) -> None:
        self.samples, self.prefix = samples, prefix

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for scope, name, labels, value in self.samples:
            full = metric_name(scope, name, self.prefix)
            family = families.get(full)
            if family is None:
                family = families[full] = Metric(full, f"{name} ({scope} scope)", "gauge")
            family.add_sample(full, {_INVALID.sub("_", k): str(v) for k, v in labels.items()}, float(value))
        yield from families.values()


def exposition(samples: Iterable[Sample], prefix: str = PREFIX) -> str:
    """The text exposition of ``samples``: one ``# TYPE`` line per metric, its samples below."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(samples, prefix))
    return generate_latest(registry).decode("utf-8")
