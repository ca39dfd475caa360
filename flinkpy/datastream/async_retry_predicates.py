"""The retry predicates of async I/O at PyFlink's path, ``pyflink.datastream.async_retry_predicates``.

>>> import functools
>>> on_timeout = functools.partial(exception_type_predicate, expected_error_type=TimeoutError)
>>> on_timeout(TimeoutError()), on_timeout(ValueError()), empty_result_predicate([])
(True, False, True)
"""

from flinkpy.common.async_functions import empty_result_predicate, exception_type_predicate, has_exception_predicate

__all__ = ["empty_result_predicate", "exception_type_predicate", "has_exception_predicate"]
