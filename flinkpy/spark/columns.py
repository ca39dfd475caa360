"""Records held as numpy columns: how a batch of numbers crosses the Spark runner's Python steps
without a Python object per record.

A :class:`Columns` is a batch of records that are all numbers (``int``, ``float`` or ``bool``)
or all tuples of numbers of one length: one numpy array per field. A number sequence source
reads into columns, and the runner's steps keep them as long as every function they call can
run over whole columns (:mod:`flinkpy.spark.vectorized`); the first one that cannot receives the
records as the Python objects they stand for (:meth:`Columns.values`), as if columns had never
been there. Columns travel inside bundle rows (:mod:`flinkpy.spark.records`) pickled, which for
numpy arrays is a copy of their memory.

>>> import numpy as np
>>> c = Columns((np.array([1, 2]), np.array([0.5, 1.5])), tupled=True)
>>> c.values()
[(1, 0.5), (2, 1.5)]
>>> Columns.of_ints(range(3, 6)).values()
[3, 4, 5]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

#: the numpy kinds a column may have: signed ints (int64), floats (float64), bools
KINDS = ("i", "f", "b")
#: ints beyond this magnitude are never held in columns, and an operation whose result could
#: pass it is run per record instead: below it an int64 cannot overflow and converts to a float
#: exactly, so every operation gives what Python's ints give
INT_LIMIT = 2**53


@dataclass(frozen=True)
class Columns:
    """A batch of records as columns: ``fields[i][j]`` is field ``i`` of record ``j``; with
    ``tupled`` False the records are the numbers of the one field."""

    fields: tuple[Any, ...]
    tupled: bool

    def __len__(self) -> int:
        return len(self.fields[0])

    @classmethod
    def of_ints(cls, numbers: Iterable[int]) -> Columns:
        import numpy as np

        return cls((np.fromiter(numbers, dtype=np.int64),), tupled=False)

    def values(self) -> list:
        """The records as Python objects: ints, floats, bools, or tuples of them."""
        lists = [f.tolist() for f in self.fields]
        return list(zip(*lists)) if self.tupled else lists[0]

    def take(self, index: Any) -> Columns:
        """The records at ``index`` (a numpy index array or mask), in its order."""
        return Columns(tuple(f[index] for f in self.fields), self.tupled)

    @staticmethod
    def concat(parts: list[Columns]) -> Columns | None:
        """One batch of ``parts`` in order; None when they are not records of one shape."""
        import numpy as np

        first = parts[0]
        if len(parts) == 1:
            return first
        shape = [(f.dtype, first.tupled) for f in first.fields]
        if any([(f.dtype, p.tupled) for f in p.fields] != shape for p in parts):
            return None
        return Columns(tuple(np.concatenate([p.fields[i] for p in parts]) for i in range(len(first.fields))), first.tupled)


def holdable(array: Any) -> bool:
    """Whether ``array`` may be a column: of a kind in :data:`KINDS`, ints below :data:`INT_LIMIT`."""
    kind = array.dtype.kind
    if kind not in KINDS or array.dtype.itemsize != 8 and kind != "b":
        return False
    return kind != "i" or len(array) == 0 or bool(-INT_LIMIT < int(array.min()) and int(array.max()) < INT_LIMIT)


def records_of(payload: Any) -> list:
    """A bundle's records as a list, whether they travelled as columns or as objects."""
    return payload.values() if type(payload) is Columns else payload
