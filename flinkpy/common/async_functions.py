"""Async I/O's user-facing definitions, as ``pyflink.datastream.functions`` has them.

An :class:`AsyncFunction` issues one request per record with ``async def async_invoke(value)``
and returns the record's results as a list; the async wait operator keeps up to ``capacity``
such requests in flight per subtask, on one asyncio event loop of the task. An
:class:`AsyncRetryStrategy` says whether and when a request is issued again: after a result
its ``result_predicate`` matches, or an exception its ``exception_predicate`` matches, as long
as ``can_retry(attempts)`` allows, after ``backoff_time_millis(attempts)`` milliseconds (Flink's
rule: attempt ``n`` may be followed by another while ``n <= max_attempts``).

The definitions sit here, below the task layer, because user code (through
:mod:`flinkpy.datastream`) and the runtime (:mod:`flinkpy.task.async_wait`) share them.

>>> import asyncio
>>> class Double(AsyncFunction):
...     async def async_invoke(self, value):
...         await asyncio.sleep(0)
...         return [value * 2]
>>> asyncio.run(Double().async_invoke(21))
[42]
>>> s = AsyncRetryStrategy.exponential_backoff(5, 100, 1000, 2.0, result_predicate=empty_result_predicate)
>>> [s.backoff_time_millis(n) for n in range(1, 7)], s.can_retry(5), s.can_retry(6)
([100, 200, 400, 800, 1000, 1000], True, False)
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable, Generic

from flinkpy.common.functions import IN, OUT, Function

ResultPredicate = Callable[[list], bool]
ExceptionPredicate = Callable[[BaseException], bool]


class AsyncFunction(Function, Generic[IN, OUT]):
    """A function that calls a remote service without blocking: one coroutine per record.

    ``async_invoke`` runs on the task's event loop; ``open`` and ``close`` run in the task as
    for every function (create and close the service's client there). ``timeout`` is called
    when a request (with its retries) did not complete within the operator's timeout; by
    default it fails the job, as Flink's does.
    """

    @abc.abstractmethod
    async def async_invoke(self, value: IN) -> list[OUT]:
        """Issue the request for ``value``; return its results (a list, empty for none)."""

    def timeout(self, value: IN) -> list[OUT]:
        """The results for a request that timed out; raising fails the job (the default)."""
        raise TimeoutError(
            "async function call has timed out; override AsyncFunction.timeout(value) to return a fallback result "
            "instead of failing the job, or give the operator a longer timeout"
        )


class AsyncRetryPredicate(abc.ABC, Generic[OUT]):
    """Which outcomes of a request are retried: by its result, or by the exception it raised."""

    @abc.abstractmethod
    def result_predicate(self) -> ResultPredicate | None:
        ...

    @abc.abstractmethod
    def exception_predicate(self) -> ExceptionPredicate | None:
        ...


class RetryPredicate(AsyncRetryPredicate[OUT]):
    def __init__(self, result_predicate: ResultPredicate | None, exception_predicate: ExceptionPredicate | None):
        self._result = result_predicate
        self._exception = exception_predicate

    def result_predicate(self) -> ResultPredicate | None:
        return self._result

    def exception_predicate(self) -> ExceptionPredicate | None:
        return self._exception


class AsyncRetryStrategy(abc.ABC, Generic[OUT]):
    """When a request is issued again; build one with :meth:`fixed_delay` or
    :meth:`exponential_backoff`, or subclass it."""

    @abc.abstractmethod
    def can_retry(self, current_attempts: int) -> bool:
        """Whether a request that made ``current_attempts`` attempts may make another."""

    @abc.abstractmethod
    def backoff_time_millis(self, current_attempts: int) -> int:
        """Milliseconds to wait after attempt ``current_attempts`` before the next one."""

    @abc.abstractmethod
    def retry_predicate(self) -> AsyncRetryPredicate[OUT]:
        ...

    # PyFlink's spelling of the two methods above
    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return self.backoff_time_millis(current_attempts)

    def get_retry_predicate(self) -> AsyncRetryPredicate[OUT]:
        return self.retry_predicate()

    @staticmethod
    def no_retry() -> AsyncRetryStrategy:
        return NO_RETRY_STRATEGY

    @staticmethod
    def fixed_delay(
        max_attempts: int,
        backoff_time_millis: int,
        result_predicate: ResultPredicate | None = None,
        exception_predicate: ExceptionPredicate | None = None,
    ) -> AsyncRetryStrategy:
        """Retry up to ``max_attempts`` times, ``backoff_time_millis`` apart."""
        return FixedDelayRetryStrategy(max_attempts, backoff_time_millis, result_predicate, exception_predicate)

    @staticmethod
    def exponential_backoff(
        max_attempts: int,
        initial_delay: int,
        max_retry_delay: int,
        multiplier: float,
        result_predicate: ResultPredicate | None = None,
        exception_predicate: ExceptionPredicate | None = None,
    ) -> AsyncRetryStrategy:
        """Retry up to ``max_attempts`` times; the delay starts at ``initial_delay`` ms and
        grows by ``multiplier`` up to ``max_retry_delay`` ms."""
        return ExponentialBackoffDelayRetryStrategy(
            max_attempts, initial_delay, max_retry_delay, multiplier, result_predicate, exception_predicate
        )


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be greater than zero, got {value!r}")


class NoRetryStrategy(AsyncRetryStrategy[OUT]):
    def can_retry(self, current_attempts: int) -> bool:
        return False

    def backoff_time_millis(self, current_attempts: int) -> int:
        return -1

    def retry_predicate(self) -> AsyncRetryPredicate[OUT]:
        return RetryPredicate(None, None)


class _BoundedRetryStrategy(AsyncRetryStrategy[OUT]):
    """Retries while attempts <= ``max_attempts`` and the predicates match; subclasses say how long to wait."""

    def __init__(self, max_attempts: int, result_predicate: ResultPredicate | None, exception_predicate: ExceptionPredicate | None):
        _positive("max_attempts", max_attempts)
        self.max_attempts = int(max_attempts)
        self._predicate = RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self.max_attempts

    def retry_predicate(self) -> AsyncRetryPredicate[OUT]:
        return self._predicate


class FixedDelayRetryStrategy(_BoundedRetryStrategy[OUT]):
    def __init__(self, max_attempts: int, backoff_time_millis: int, result_predicate: ResultPredicate | None = None,
                 exception_predicate: ExceptionPredicate | None = None):
        super().__init__(max_attempts, result_predicate, exception_predicate)
        _positive("backoff_time_millis", backoff_time_millis)
        self.delay_ms = int(backoff_time_millis)

    def backoff_time_millis(self, current_attempts: int) -> int:
        return self.delay_ms


class ExponentialBackoffDelayRetryStrategy(_BoundedRetryStrategy[OUT]):
    """The delay after attempt ``n`` is ``min(initial_delay * multiplier ** (n - 1), max_retry_delay)``:
    a pure function of ``n``, so concurrent requests do not disturb each other's delays."""

    def __init__(self, max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                 result_predicate: ResultPredicate | None = None, exception_predicate: ExceptionPredicate | None = None):
        super().__init__(max_attempts, result_predicate, exception_predicate)
        for name, value in (("initial_delay", initial_delay), ("max_retry_delay", max_retry_delay), ("multiplier", multiplier)):
            _positive(name, value)
        self.initial_delay = int(initial_delay)
        self.max_retry_delay = int(max_retry_delay)
        self.multiplier = float(multiplier)

    def backoff_time_millis(self, current_attempts: int) -> int:
        n = max(1, current_attempts)
        return int(min(self.initial_delay * self.multiplier ** (n - 1), self.max_retry_delay))


NO_RETRY_STRATEGY: AsyncRetryStrategy = NoRetryStrategy()


# -- the predicates of pyflink.datastream.async_retry_predicates ---------------------------------


def empty_result_predicate(result: list | None) -> bool:
    """Retry when the request returned no results."""
    return result is None or len(result) == 0


def has_exception_predicate(error: BaseException | None) -> bool:
    """Retry on any exception."""
    return error is not None


def exception_type_predicate(error: BaseException | None, expected_error_type: type) -> bool:
    """Retry on exceptions of ``expected_error_type`` (bind it with ``functools.partial``)."""
    return isinstance(error, expected_error_type)


class OutputMode:
    ORDERED = "ordered"
    UNORDERED = "unordered"


@dataclass(frozen=True)
class AsyncOptions:
    """How an async wait operator runs (what ``AsyncDataStream`` was given)."""

    timeout_ms: int
    capacity: int
    ordered: bool
    retry: AsyncRetryStrategy

    def __post_init__(self) -> None:
        if self.capacity <= 0:
            raise ValueError(f"capacity must be greater than zero, got {self.capacity!r}")


def check_results(results: Any, what: str) -> list:
    """The results a request completed with, checked as PyFlink checks them."""
    if results is None:
        raise TypeError(f"the result of AsyncFunction cannot be None ({what} returned None); return a list, [] for no results")
    if not isinstance(results, list):
        raise TypeError(f"the result of AsyncFunction should be of list type ({what} returned {type(results).__name__}); "
                        "return a list even for one result")
    return results
