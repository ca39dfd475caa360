"""The RuntimeContext user functions receive in ``open()``: where they run, and keyed state."""

from __future__ import annotations

from typing import Any

from flinkpy.common.functions import RuntimeContext
from flinkpy.errors import InvalidProgramError
from flinkpy.metrics.groups import MetricGroup, MetricRegistry


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
        metrics: MetricRegistry | None = None,
    ):
        self._task_name = task_name
        self._subtask = subtask_index
        self._parallelism = parallelism
        self._max_parallelism = max_parallelism
        self._attempt = attempt
        self._params = job_parameters
        self._backend = backend
        self._operator = operator_name
        #: the task's user metrics (reported with its own); a private one outside a task
        self._metrics = metrics if metrics is not None else MetricRegistry()

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

    def get_metrics_group(self) -> MetricGroup:
        """This operator's metric group (PyFlink's API); the task reports what is registered."""
        return self._metrics.operator_group(self._operator or self._task_name)

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
