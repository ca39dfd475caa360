"""The operators of a job as bytes: cloudpickle, keeping the file names of the user's code.

cloudpickle ships functions defined in the job file (``__main__``) by value and renames their
code's file to ``<dynamic-code>`` (for a reproducible payload), so a failing user function's
traceback said ``File "<dynamic-code>", line 19, in <lambda>`` with no source line. The job's
operators are pickled once per submission, where a reproducible payload buys nothing: here the
code keeps its real file name, and the task's traceback names the job file, the line and (where
the file is readable, as on a local cluster) its source.

>>> import pickle
>>> f = eval(compile("lambda n: n + 1", "/jobs/my_job.py", "eval"))
>>> pickle.loads(dumps(f)).__code__.co_filename
'/jobs/my_job.py'
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from typing import Any

import cloudpickle

#: what cloudpickle writes in place of a code object's file name
_DYNAMIC = "<dynamic-code>"
_code_reduce = cloudpickle.Pickler.dispatch_table[types.CodeType]


def _code_keeping_file_name(code: types.CodeType) -> Any:
    rebuild, args = _code_reduce(code)
    return rebuild, tuple(code.co_filename if isinstance(a, str) and a == _DYNAMIC else a for a in args)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap({types.CodeType: _code_keeping_file_name}, cloudpickle.Pickler.dispatch_table)


def dumps(obj: Any) -> bytes:
    """``obj`` pickled as ``cloudpickle.dumps`` does, code objects keeping their file names."""
    with io.BytesIO() as buffer:
        _Pickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return buffer.getvalue()
