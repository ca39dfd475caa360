"""Key groups: how keys are spread over parallel subtasks, stably and rescalably.

A key belongs to exactly one *key group* (``stable_hash(key) % max_parallelism``); a key group
belongs to exactly one subtask (``key_group * parallelism // max_parallelism``). State is kept
and snapshotted per key group, so a job can be restored at another parallelism by handing each
new subtask the key groups of its contiguous range.

The hash must be the same in every process, every run and on every machine; Python's
``hash()`` of ``str`` and ``bytes`` is salted per process (PYTHONHASHSEED), so it is never used.

>>> assign_to_key_group("hello", 128) == assign_to_key_group("hello", 128)
True
>>> key_group_range_for_operator(128, 3, 1)
range(43, 86)
>>> compute_operator_index_for_key_group(128, 3, 85)
1
"""

from __future__ import annotations

import numbers
import pickle
import struct
from collections.abc import Hashable
from decimal import Decimal
from fractions import Fraction
from typing import Any
from zlib import crc32

from flinkpy.errors import UsageError

#: Max parallelism when a job sets none, as in Flink for small jobs.
DEFAULT_MAX_PARALLELISM = 128
#: Upper bound Flink allows for max parallelism.
UPPER_BOUND_MAX_PARALLELISM = 1 << 15

_M32 = 0xFFFFFFFF
_PACK_DOUBLE = struct.Struct(">d").pack


def _fmix32(h: int) -> int:
    """MurmurHash3's finalizer: spreads every input bit over the output (avalanche).

    CRC32 of consecutive integers differs only in a few low bits' worth of structure; after
    this mix, ``% max_parallelism`` spreads them evenly.
    """
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def _int_bytes(n: int) -> bytes:
    # Length follows from the value, so 1 and 256 never share an encoding.
    return b"i" + n.to_bytes((n.bit_length() + 8) // 8 or 1, "big", signed=True)


def _raw(key: Any) -> int:
    """The unmixed 32-bit CRC of a canonical encoding of ``key``.

    Keys equal under ``==`` across numeric types (``1``, ``True``, ``1.0``, ``Decimal(1)``)
    share an encoding, because the state tables are dicts and treat them as one key.
    """
    if isinstance(key, str):
        return crc32(key.encode("utf-8", "surrogatepass"))
    if isinstance(key, (bytes, bytearray, memoryview)):
        return crc32(key)
    if isinstance(key, int):  # also bool and IntEnum
        return crc32(_int_bytes(int(key)))
    if isinstance(key, float):
        if key.is_integer():
            return crc32(_int_bytes(int(key)))
        if key != key:  # every NaN encodes alike
            return crc32(b"fnan")
        return crc32(b"f" + _PACK_DOUBLE(key))
    if key is None:
        return crc32(b"N")
    if isinstance(key, tuple):
        return _combine(b"T", key)
    # Row is imported lazily by name to keep this module free of API imports.
    if type(key).__name__ == "Row" and type(key).__module__ == "flinkpy.common.types":
        return _combine(b"R", tuple(key))
    if isinstance(key, list):
        return _combine(b"L", key)
    if isinstance(key, (frozenset, set)):
        parts = sorted(_raw(e) for e in key)
        return crc32(b"S" + struct.pack(f">{len(parts)}I", *parts))
    if isinstance(key, (Decimal, Fraction)) or (
        isinstance(key, numbers.Number) and not isinstance(key, complex)
    ):
        try:
            as_int = int(key)  # type: ignore[call-overload]
            if as_int == key:
                return crc32(_int_bytes(as_int))
            as_float = float(key)  # type: ignore[arg-type]
            if as_float == key:
                return _raw(as_float)
        except (TypeError, ValueError, OverflowError):
            pass
    return crc32(b"P" + pickle.dumps(key, protocol=4))


def _combine(tag: bytes, items: Any) -> int:
    # Hash each element, then hash the sequence of element hashes: ("ab", "c") and
    # ("a", "bc") differ because element boundaries are kept.
    parts = [_raw(e) for e in items]
    return crc32(tag + struct.pack(f">{len(parts)}I", *parts))


def stable_hash(key: Any) -> int:
    """A 32-bit hash of ``key`` that is identical in every process, run and machine.

    str, bytes, int, bool, float, None, tuples, lists, Rows and frozensets have canonical
    encodings; any other key is hashed through ``pickle.dumps(key, protocol=4)``, so such keys
    must pickle deterministically (no sets of strings inside, for example).

    >>> stable_hash("a") == stable_hash("a") and 0 <= stable_hash(("a", 1)) < 2**32
    True
    >>> stable_hash(1) == stable_hash(True) == stable_hash(1.0)
    True
    """
    return _fmix32(_raw(key))


def check_max_parallelism(max_parallelism: int) -> None:
    if not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise UsageError(
            f"max parallelism must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, "
            f"got {max_parallelism}",
            remedy="set pipeline.max-parallelism or env.set_max_parallelism() to a value in range",
        )


def _check_parallelism(max_parallelism: int, parallelism: int) -> None:
    check_max_parallelism(max_parallelism)
    if not 0 < parallelism <= max_parallelism:
        raise UsageError(
            f"parallelism {parallelism} is not between 1 and the max parallelism "
            f"{max_parallelism}",
            remedy="lower the parallelism or raise the max parallelism "
            "(it cannot change once state has been checkpointed)",
        )


def assign_to_key_group(key: Any, max_parallelism: int) -> int:
    """The key group of ``key``: ``stable_hash(key) % max_parallelism``.

    >>> 0 <= assign_to_key_group(("user", 42), 128) < 128
    True
    """
    return stable_hash(key) % max_parallelism


def compute_operator_index_for_key_group(
    max_parallelism: int, parallelism: int, key_group: int
) -> int:
    """The subtask that owns ``key_group`` when the operator runs with ``parallelism``.

    >>> compute_operator_index_for_key_group(128, 2, 63), compute_operator_index_for_key_group(128, 2, 64)
    (0, 1)
    """
    return key_group * parallelism // max_parallelism


def key_group_range_for_operator(
    max_parallelism: int, parallelism: int, operator_index: int
) -> range:
    """The contiguous key groups subtask ``operator_index`` owns: the inverse of
    :func:`compute_operator_index_for_key_group`.

    Subtask i owns exactly the key groups kg with ``kg * p // maxp == i``, that is
    ``ceil(i * maxp / p) <= kg < ceil((i + 1) * maxp / p)``.

    >>> [key_group_range_for_operator(10, 3, i) for i in range(3)]
    [range(0, 4), range(4, 7), range(7, 10)]
    """
    _check_parallelism(max_parallelism, parallelism)
    if not 0 <= operator_index < parallelism:
        raise UsageError(
            f"operator index {operator_index} is outside 0..{parallelism - 1} "
            f"(parallelism {parallelism})"
        )
    start = -(-operator_index * max_parallelism // parallelism)
    end = -(-(operator_index + 1) * max_parallelism // parallelism)
    return range(start, end)


class KeyGroupAssigner:
    """``assigner(key) -> key group``, memoised because every keyed record asks.

    The memo is a plain dict bounded at ``max_entries``; when full it is cleared rather than
    evicted entry by entry, which keeps the common lookup at one dict access. Unhashable keys
    are computed every time.

    >>> assigner = KeyGroupAssigner(128)
    >>> assigner("a") == assign_to_key_group("a", 128)
    True
    """

    __slots__ = ("max_parallelism", "max_entries", "_memo")

    def __init__(self, max_parallelism: int, max_entries: int = 1_000_000) -> None:
        check_max_parallelism(max_parallelism)
        self.max_parallelism = max_parallelism
        self.max_entries = max_entries
        self._memo: dict[Hashable, int] = {}

    def __call__(self, key: Any) -> int:
        memo = self._memo
        try:
            return memo[key]
        except KeyError:
            pass
        except TypeError:  # unhashable key: nothing to memoise
            return _fmix32(_raw(key)) % self.max_parallelism
        key_group = _fmix32(_raw(key)) % self.max_parallelism
        if len(memo) >= self.max_entries:
            memo.clear()
        memo[key] = key_group
        return key_group

    @property
    def memo(self) -> dict[Hashable, int]:
        """The memo itself, for hot loops that look a key up inline and call the assigner only
        on a miss (the dict may be cleared when full, never changed otherwise)."""
        return self._memo

    def __len__(self) -> int:
        return len(self._memo)

    def __repr__(self) -> str:
        return f"KeyGroupAssigner(max_parallelism={self.max_parallelism})"
