"""User metrics: PyFlink's MetricGroup API, as ``runtime_context.get_metrics_group()`` returns it.

A user function registers metrics in ``open()`` and updates them per record; the task samples
them with its own figures once per report interval, so an update is one integer addition — no
lock, no clock. Gauges are callables the sampler calls (from the task's reporter thread: a
gauge should read a value, not compute one). Meters count events; their rate is measured when
they are sampled, over ``time_span_in_seconds``. Distributions keep count, sum, min and max.

Groups nest like PyFlink's: ``add_group("kafka")`` is a generic group, ``add_group("topic",
"orders")`` a key group ``topic`` with a value group ``orders`` whose variables carry
``{"<topic>": "orders"}`` (Prometheus gets them as labels).

>>> registry = MetricRegistry()
>>> group = registry.operator_group("Map").add_group("parser")
>>> errors = group.counter("errors"); errors.inc(); errors.inc(2); errors.get_count()
3
>>> group.gauge("queue", lambda: 7)
>>> group.get_metric_identifier("errors")
'Map.parser.errors'
>>> [(m["name"], m["type"], m["value"]) for m in registry.sample(now_s=0.0)]
[('errors', 'counter', 3), ('queue', 'gauge', 7)]
"""

from __future__ import annotations

import collections
import math
from typing import Any, Callable, Union

Number = Union[int, float]


class Counter:
    """A count that goes up and down (PyFlink's ``Counter``)."""

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count = 0

    def inc(self, n: int = 1) -> None:
        self._count += n

    def dec(self, n: int = 1) -> None:
        self._count -= n

    def get_count(self) -> int:
        return self._count


class Meter:
    """Events and their rate per second (PyFlink's ``Meter``); the rate covers the last
    ``time_span_in_seconds`` of samples."""

    __slots__ = ("_count", "time_span_s", "_samples")

    def __init__(self, time_span_in_seconds: int = 60) -> None:
        self._count = 0
        self.time_span_s = max(1, int(time_span_in_seconds))
        #: (sample time in seconds, count then): the sampler's history, oldest first
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def mark_event(self, value: int = 1) -> None:
        self._count += value

    def get_count(self) -> int:
        return self._count

    def sample(self, now_s: float) -> float:
        """The rate over the time span, as of ``now_s`` (called by the sampler only)."""
        count = self._count
        samples = self._samples
        samples.append((now_s, count))
        while len(samples) > 2 and samples[1][0] <= now_s - self.time_span_s:
            samples.popleft()
        t0, c0 = samples[0]
        return (count - c0) / (now_s - t0) if now_s > t0 else 0.0


class Distribution:
    """Count, sum, min and max of the values given to ``update`` (PyFlink's ``Distribution``)."""

    __slots__ = ("count", "sum", "min", "max")

    def __init__(self) -> None:
        self.count = 0
        self.sum: Number = 0
        self.min: Number = math.inf
        self.max: Number = -math.inf

    def update(self, value: Number) -> None:
        self.count += 1
        self.sum += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def figures(self) -> dict[str, Number]:
        if not self.count:
            return {"count": 0, "sum": 0, "min": 0, "max": 0, "mean": 0.0}
        return {"count": self.count, "sum": self.sum, "min": self.min, "max": self.max, "mean": self.sum / self.count}


class MetricGroup:
    """A named scope of metrics (PyFlink's ``MetricGroup``); registering a name twice in one
    group returns the metric registered first, as Flink keeps the first one."""

    def __init__(self, registry: MetricRegistry, scope: list[str], variables: dict[str, str], operator: str,
                 logical: list[str] | None = None):
        self._registry = registry
        self._scope = scope
        #: the scope without the values of key/value groups (they are variables: labels)
        self._logical = scope if logical is None else logical
        self._variables = variables
        self._operator = operator
        self._groups: dict[tuple[str, str | None], MetricGroup] = {}

    def add_group(self, name: str, extra: str | None = None) -> MetricGroup:
        """A sub-group; with ``extra``, a key group ``name`` holding the value group ``extra``."""
        key = (str(name), None if extra is None else str(extra))
        group = self._groups.get(key)
        if group is None:
            if extra is None:
                group = MetricGroup(self._registry, [*self._scope, str(name)], dict(self._variables), self._operator,
                                    [*self._logical, str(name)])
            else:
                variables = {**self._variables, f"<{name}>": str(extra)}
                group = MetricGroup(self._registry, [*self._scope, str(name), str(extra)], variables, self._operator,
                                    [*self._logical, str(name)])
            self._groups[key] = group
        return group

    def counter(self, name: str) -> Counter:
        return self._registry.register(self, name, "counter", Counter)  # type: ignore[no-any-return]

    def gauge(self, name: str, obj: Callable[[], Number]) -> None:
        if not callable(obj):
            raise TypeError(f"gauge {name!r}: expected a callable returning a number, got {type(obj).__name__}")
        self._registry.register(self, name, "gauge", lambda: obj)

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        return self._registry.register(self, name, "meter", lambda: Meter(time_span_in_seconds))  # type: ignore[no-any-return]

    def distribution(self, name: str) -> Distribution:
        return self._registry.register(self, name, "distribution", Distribution)  # type: ignore[no-any-return]

    def get_scope_components(self) -> list[str]:
        return [self._operator, *self._scope]

    def get_all_variables(self) -> dict[str, str]:
        return dict(self._variables)

    def get_metric_identifier(self, metric_name: str) -> str:
        return ".".join([*self.get_scope_components(), metric_name])


class MetricRegistry:
    """One task's user metrics, and the sampler's view of them."""

    def __init__(self) -> None:
        #: identifier -> (group, name, kind, metric)
        self._metrics: dict[str, tuple[MetricGroup, str, str, Any]] = {}
        self._operators: dict[str, MetricGroup] = {}

    def operator_group(self, operator: str) -> MetricGroup:
        """The group of one operator of the task's chain (what its runtime context hands out)."""
        group = self._operators.get(operator)
        if group is None:
            group = self._operators[operator] = MetricGroup(self, [], {"<operator_name>": operator}, operator)
        return group

    def register(self, group: MetricGroup, name: str, kind: str, make: Callable[[], Any]) -> Any:
        identifier = group.get_metric_identifier(str(name))
        known = self._metrics.get(identifier)
        if known is not None:
            return known[3]
        metric = make()
        self._metrics[identifier] = (group, str(name), kind, metric)
        return metric

    def __len__(self) -> int:
        return len(self._metrics)

    def sample(self, now_s: float) -> list[dict[str, Any]]:
        """Every metric's current figure, as plain data for a report; a gauge that raises or
        returns something that is not a number is left out of this sample."""
        out: list[dict[str, Any]] = []
        for group, name, kind, metric in list(self._metrics.values()):
            value: Any
            if kind == "counter":
                value = metric.get_count()
            elif kind == "gauge":
                try:
                    value = metric()
                except Exception:  # noqa: BLE001 - a user's gauge must not stop the reports
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
            elif kind == "meter":
                value = {"count": metric.get_count(), "rate": metric.sample(now_s)}
            else:
                value = metric.figures()
            out.append({"operator": group._operator, "scope": list(group._scope), "logical_scope": list(group._logical), "variables": group.get_all_variables(),
                        "name": name, "type": kind, "value": value})
        return out
