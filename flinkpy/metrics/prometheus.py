"""Metrics in Prometheus' text exposition format (version 0.0.4), named as Flink's
PrometheusReporter names them, with a ``flinkpy`` prefix instead of ``flink``.

A metric's name is its scope and its own name joined by ``_`` (``taskmanager_job_task`` +
``numRecordsIn``), with every character Prometheus does not allow in a name replaced by ``_``
(``buffers.inPoolUsage`` -> ``buffers_inPoolUsage``); the scope's variables are labels
(``job_id``, ``job_name``, ``task_name``, ``subtask_index``, ``tm_id``, ...). Every figure is a
gauge, as Flink's reporter exports counters too (a counter may go down: ``Counter.dec``).

>>> print(exposition([("taskmanager_job_task", "buffers.inPoolUsage", {"job_id": "j", "task_name": 'a "b"'}, 0.5)]), end="")
# TYPE flinkpy_taskmanager_job_task_buffers_inPoolUsage gauge
flinkpy_taskmanager_job_task_buffers_inPoolUsage{job_id="j",task_name="a \\"b\\""} 0.5
"""

from __future__ import annotations

import math
import re
from typing import Iterable, Union

#: (scope, metric name, labels, value)
Sample = tuple[str, str, dict[str, str], Union[int, float]]

PREFIX = "flinkpy"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def metric_name(scope: str, name: str, prefix: str = PREFIX) -> str:
    """The Prometheus name of ``name`` in ``scope``."""
    return _INVALID.sub("_", f"{prefix}_{scope}_{name}")


def _label_value(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: Union[int, float]) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def exposition(samples: Iterable[Sample], prefix: str = PREFIX) -> str:
    """The text exposition of ``samples``: one ``# TYPE`` line per metric, its samples below."""
    families: dict[str, list[str]] = {}
    for scope, name, labels, value in samples:
        full = metric_name(scope, name, prefix)
        rendered = ",".join(f'{_INVALID.sub("_", k)}="{_label_value(v)}"' for k, v in labels.items())
        families.setdefault(full, []).append(f"{full}{{{rendered}}} {_number(value)}" if rendered else f"{full} {_number(value)}")
    lines: list[str] = []
    for full, rows in families.items():
        lines.append(f"# TYPE {full} gauge")
        lines.extend(rows)
    return "\n".join(lines) + "\n" if lines else ""
