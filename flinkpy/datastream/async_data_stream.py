"""``AsyncDataStream``: PyFlink's async I/O over flinkpy's async wait operator.

Each record of the input stream becomes one request of an :class:`AsyncFunction`
(``async def async_invoke(value)`` returning a list of results); up to ``capacity`` requests are
in flight per parallel subtask, on the task's event loop. The operator's semantics and
guarantees are described in :mod:`flinkpy.task.async_wait`.

>>> import asyncio
>>> from flinkpy.common import Time
>>> from flinkpy.datastream import StreamExecutionEnvironment
>>> class Lookup(AsyncFunction):
...     async def async_invoke(self, value):
...         await asyncio.sleep(0.01 * (3 - value))  # a remote call; later records answer sooner
...         return [value * 10]
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> ds = env.from_collection([0, 1, 2])
>>> list(AsyncDataStream.ordered_wait(ds, Lookup(), Time.seconds(5), capacity=3).execute_and_collect())
[0, 10, 20]
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from flinkpy.common.async_functions import NO_RETRY_STRATEGY, AsyncFunction, AsyncOptions, AsyncRetryStrategy
from flinkpy.errors import InvalidProgramError

if TYPE_CHECKING:
    from flinkpy.datastream.data_stream import DataStream

#: PyFlink's default capacity
DEFAULT_CAPACITY = 100


def _millis(timeout: Any) -> int:
    """A ``Time`` or ``Duration`` (PyFlink's types), or a number of milliseconds."""
    to_ms = getattr(timeout, "to_milliseconds", None)
    if callable(to_ms):
        return int(to_ms())
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return int(timeout)
    raise InvalidProgramError(
        f"the timeout of an async wait operator must be a Time, a Duration or milliseconds, got {type(timeout).__name__}",
        remedy="pass Time.seconds(10), say",
    )


class AsyncDataStream:
    """Applies an :class:`AsyncFunction` to a stream, as PyFlink's ``AsyncDataStream``."""

    @staticmethod
    def unordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Any,
                       capacity: int = DEFAULT_CAPACITY, output_type: Any = None) -> DataStream:
        """Results leave as their requests finish (never across a watermark)."""
        return AsyncDataStream.unordered_wait_with_retry(data_stream, async_function, timeout, NO_RETRY_STRATEGY, capacity, output_type)

    @staticmethod
    def unordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Any,
                                  async_retry_strategy: AsyncRetryStrategy, capacity: int = DEFAULT_CAPACITY,
                                  output_type: Any = None) -> DataStream:
        """:meth:`unordered_wait`, issuing requests again as ``async_retry_strategy`` says."""
        return _async_wait(data_stream, async_function, timeout, async_retry_strategy, capacity, output_type, ordered=False)

    @staticmethod
    def ordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Any,
                     capacity: int = DEFAULT_CAPACITY, output_type: Any = None) -> DataStream:
        """Results leave in the order of their records."""
        return AsyncDataStream.ordered_wait_with_retry(data_stream, async_function, timeout, NO_RETRY_STRATEGY, capacity, output_type)

    @staticmethod
    def ordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Any,
                                async_retry_strategy: AsyncRetryStrategy, capacity: int = DEFAULT_CAPACITY,
                                output_type: Any = None) -> DataStream:
        """:meth:`ordered_wait`, issuing requests again as ``async_retry_strategy`` says."""
        return _async_wait(data_stream, async_function, timeout, async_retry_strategy, capacity, output_type, ordered=True)


def _async_wait(data_stream: DataStream, fn: AsyncFunction, timeout: Any, retry: AsyncRetryStrategy | None,
                capacity: int, output_type: Any, *, ordered: bool) -> DataStream:
    invoke = getattr(fn, "async_invoke", None)
    if not inspect.iscoroutinefunction(invoke):
        raise InvalidProgramError(
            f"the async_invoke method of {type(fn).__name__} must be declared 'async def'",
            remedy="write 'async def async_invoke(self, value)' returning a list of results",
        )
    if retry is None or not callable(getattr(retry, "retry_predicate", None)) or retry.retry_predicate() is None:
        raise InvalidProgramError(
            f"the async retry strategy must be an AsyncRetryStrategy with a retry predicate, got {retry!r}",
            remedy="pass AsyncRetryStrategy.fixed_delay(...) or AsyncRetryStrategy.exponential_backoff(...)",
        )
    timeout_ms = _millis(timeout)
    if retry is not NO_RETRY_STRATEGY and timeout_ms <= 0:
        raise InvalidProgramError(
            "an async wait operator with retries needs a timeout (it bounds a request and all its retries)",
            remedy="pass a positive timeout, Time.seconds(10) say",
        )
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
        raise InvalidProgramError(f"the capacity of an async wait operator must be a positive integer, got {capacity!r}",
                                  remedy="pass capacity=100, say (requests in flight per parallel subtask)")
    stream = data_stream._add("async_wait", "async wait operator", fn, output_type)
    stream._node.params["async_options"] = AsyncOptions(timeout_ms, capacity, ordered, retry)  # type: ignore[union-attr]
    return stream
