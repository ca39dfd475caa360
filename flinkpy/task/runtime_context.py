"""The RuntimeContext user functions receive in ``open()``: where they run, and keyed state."""

from __future__ import annotations

from typing import Any

from flinkpy.common.functions import RuntimeContext
from flinkpy.errors import InvalidProgramError


class TaskRuntimeContext(RuntimeContext):
    def __init__(
        self,
        *,
        task_name: str,
        subtask_index: int,
        parallelism: int,
        max_parallelism: int,
        attempt: int,
        job_parameters: dict[str, str],
        backend: Any = None,
        operator_name: str = "",
    ):
        self._task_name = task_name
        self._subtask = subtask_index
        self._parallelism = parallelism
        self._max_parallelism = max_parallelism
        self._attempt = attempt
        self._params = job_parameters
        self._backend = backend
        self._operator = operator_name

    def get_task_name(self) -> str:
        return self._task_name

    def get_number_of_parallel_subtasks(self) -> int:
        return self._parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._max_parallelism

    def get_index_of_this_subtask(self) -> int:
        return self._subtask

    def get_attempt_number(self) -> int:
        return self._attempt

    def get_task_name_with_subtasks(self) -> str:
        return f"{self._task_name} ({self._subtask + 1}/{self._parallelism})#{self._attempt}"

    def get_job_parameter(self, key: str, default_value: str) -> str:
        return self._params.get(key, default_value)

    def get_metrics_group(self) -> Any:
        return _NoMetrics()

    def _state(self, descriptor: Any) -> Any:
        if self._backend is None:
            raise InvalidProgramError(
                f"operator {self._operator!r} asked for keyed state {descriptor.get_name()!r}, "
                "but keyed state exists only on a KeyedStream",
                remedy="call key_by() before this operator",
            )
        return self._backend.get_partitioned_state(descriptor)

    def get_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor)

    def get_list_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor)

    def get_map_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor)

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor)

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        return self._state(state_descriptor)


class _NoMetrics:
    """Metric groups accept registrations; reporting them is future work."""

    def add_group(self, name: str, extra: Any = None) -> "_NoMetrics":
        return self

    def counter(self, name: str) -> "_Counter":
        return _Counter()

    def gauge(self, name: str, obj: Any) -> None:
        return None

    def meter(self, name: str, time_span_in_seconds: int = 60) -> "_Counter":
        return _Counter()

    def distribution(self, name: str) -> "_Counter":
        return _Counter()


class _Counter:
    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n

    def dec(self, n: int = 1) -> None:
        self.count -= n

    def get_count(self) -> int:
        return self.count

    def mark_event(self, value: int = 1) -> None:
        self.count += value

    def update(self, value: int) -> None:
        self.count = value
