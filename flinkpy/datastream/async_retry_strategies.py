"""The retry strategies of async I/O at PyFlink's path, ``pyflink.datastream.async_retry_strategies``
(defined in :mod:`flinkpy.common.async_functions`, which the task runs)."""

from flinkpy.common.async_functions import (
    NO_RETRY_STRATEGY,
    ExponentialBackoffDelayRetryStrategy,
    FixedDelayRetryStrategy,
    NoRetryStrategy,
    RetryPredicate,
)

__all__ = ["NO_RETRY_STRATEGY", "ExponentialBackoffDelayRetryStrategy", "FixedDelayRetryStrategy", "NoRetryStrategy", "RetryPredicate"]
